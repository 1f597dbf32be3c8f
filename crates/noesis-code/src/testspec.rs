//! Test specs, and the test files rendered from them.
//!
//! A model never writes test code: it returns a [`TestSpec`] (validated
//! against [`TestSpec::json_schema`]) and [`render_pytest`] or
//! [`render_rust`] turns specs into a test file. Rendering is a pure
//! function of its input: the same specs give the same bytes, ordered by
//! function name (byte order, stable, so specs of one function keep their
//! order) and then by case as given.
//!
//! # Values
//!
//! Inputs are positional arguments; JSON values become literals:
//!
//! | JSON | Python | Rust input | Rust expected |
//! |---|---|---|---|
//! | `null` | `None` | `None` | `None` |
//! | `true` | `True` | `true` | `assert!(…)` / `assert!(!…)` |
//! | `3`, `-3` | `3` | `3` (typed by the parameter) | `3` |
//! | `1.5`, `1` written `1.0` | `1.5`, `1.0` | `1.5`, `1.0` | `1.5` (exact `assert_eq!`) |
//! | `"a\n"` | `"a\n"` | `"a\n"`, passed as `&str` | `"a\n"` (`String == &str`) |
//! | `[1, 2]` | `[1, 2]` | `&[1, 2]`, a slice; nested lists `vec![…]` | `[1, 2]` (compares with `Vec` and slices); nested `vec![…]` |
//! | `{"k": 1}` | `{"k": 1}` | none: the case becomes an ignored test saying so | same |
//!
//! Strings are double-quoted with `\\`, `\"`, `\n`, `\r`, `\t` escaped and
//! every other character outside printable ASCII escaped (`\xNN`, `\uNNNN`,
//! `\UNNNNNNNN` in Python, `\u{…}` in Rust), so no invisible or
//! direction-changing character reaches the file. Python compares a float
//! result with `pytest.approx`, `None`/`True`/`False` with `is`.
//!
//! # Errors
//!
//! [`Expected::Raises`] in Python: a builtin exception name gives
//! `pytest.raises(ValueError)`; another capitalised identifier is looked
//! up in the module under test (`pytest.raises(subject.ParseError)`);
//! `Name: text` adds `match=re.escape("text")`; anything else (`zero`,
//! `must be positive`) is a message fragment:
//! `pytest.raises(Exception, match=re.escape(…))`; an empty one any
//! `Exception`. In Rust it is a panic:
//! `#[should_panic(expected = "…")]` (a bare `#[should_panic]` when empty).
//!
//! # Calls
//!
//! Python calls `subject.<qualified name>(…)` after `import <module> as
//! subject` (or `importlib.import_module` when the module name is not a
//! dotted identifier); Rust calls `<crate_path>::<qualified name>(…)`. So a
//! method is called through its class or type: right for static methods
//! and constructors, while an instance method would need the instance as
//! its first input, which JSON cannot give. Async functions are called
//! like others (the spec format has no way to say "await"). The renderer
//! does not know the function's types: in Rust a function returning
//! `Option` can be checked against `null` (`None`) only, since JSON has no
//! `Some`, and a `Result` error is not a panic. Test names are
//! `test_<function>_<case>` (Python) or `<function>_<case>` (Rust), lower
//! case ASCII identifiers, with `_2`, `_3`, … added to repeats.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a model proposes to test about one function: data, never code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSpec {
    /// The function's qualified name (`add`, `Calc.div`, `Parser::new`).
    pub function: String,
    /// The signature hash the spec was written against, so a caller can
    /// tell the spec is stale when the signature changes.
    pub signature_hash: String,
    /// Why these cases: what behaviour they pin.
    pub rationale: String,
    /// The cases, in the order they are rendered.
    pub cases: Vec<Case>,
}

/// One test case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// A short description, turned into the test's name.
    pub name: String,
    /// The positional arguments.
    pub inputs: Vec<Value>,
    /// What the call should give.
    pub expected: Expected,
    /// What sort of case it is.
    pub kind: CaseKind,
}

/// The outcome a case expects. In JSON `{"value": …}` or `{"raises": "…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expected {
    /// The call returns this value.
    Value(Value),
    /// The call raises (Python: an exception name, optionally `Name:
    /// message fragment`, or a message fragment) or panics (Rust: a
    /// fragment of the panic message).
    Raises(String),
}

/// What sort of case, for readers and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseKind {
    /// Typical use.
    Normal,
    /// A boundary: empty, zero, the largest, unusual but valid input.
    Edge,
    /// Invalid input that must be refused.
    Error,
}

impl CaseKind {
    fn as_str(self) -> &'static str {
        match self {
            CaseKind::Normal => "normal",
            CaseKind::Edge => "edge",
            CaseKind::Error => "error",
        }
    }
}

impl TestSpec {
    /// The JSON Schema (draft 2020-12) of a spec, what a model must return.
    /// Every object is closed (`additionalProperties: false`) and every
    /// property required; an expected outcome is exactly one of `value` or
    /// `raises`.
    #[must_use]
    pub fn json_schema() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "TestSpec",
            "description": "Test cases for one function. Data only: the test code is generated from it.",
            "type": "object",
            "additionalProperties": false,
            "required": ["function", "signature_hash", "rationale", "cases"],
            "properties": {
                "function": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The qualified name of the function under test, exactly as given."
                },
                "signature_hash": {
                    "type": "string",
                    "description": "The signature hash given with the function, copied unchanged."
                },
                "rationale": {
                    "type": "string",
                    "description": "Why these cases: the behaviour they pin down."
                },
                "cases": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["name", "inputs", "expected", "kind"],
                        "properties": {
                            "name": {
                                "type": "string",
                                "minLength": 1,
                                "description": "A few words naming the case; becomes the test name."
                            },
                            "inputs": {
                                "type": "array",
                                "description": "The positional arguments, as JSON values.",
                                "items": {}
                            },
                            "expected": {
                                "description": "Either the returned value or the error raised.",
                                "anyOf": [
                                    {
                                        "type": "object",
                                        "additionalProperties": false,
                                        "required": ["value"],
                                        "properties": { "value": { "description": "The return value." } }
                                    },
                                    {
                                        "type": "object",
                                        "additionalProperties": false,
                                        "required": ["raises"],
                                        "properties": {
                                            "raises": {
                                                "type": "string",
                                                "description": "Python: the exception name, optionally followed by ': ' and a fragment of its message. Rust: a fragment of the panic message."
                                            }
                                        }
                                    }
                                ]
                            },
                            "kind": { "type": "string", "enum": ["normal", "edge", "error"] }
                        }
                    }
                }
            }
        })
    }
}

/// The specs by function name, stable.
fn sorted(specs: &[TestSpec]) -> Vec<&TestSpec> {
    let mut sorted: Vec<&TestSpec> = specs.iter().collect();
    sorted.sort_by(|a, b| a.function.cmp(&b.function));
    sorted
}

/// Text safe inside a one-line comment: no line breaks, control or
/// direction-changing characters (rustc refuses the latter in comments).
fn comment_text(text: &str) -> String {
    text.chars()
        .map(|c| {
            let bidi =
                matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}');
            if c.is_control() || bidi { ' ' } else { c }
        })
        .collect()
}

/// `text` as comment lines with `marker` (`#` or `//`), one per line.
fn comment_lines(out: &mut String, indent: &str, marker: &str, text: &str) {
    for line in text.lines() {
        let line = comment_text(line);
        let line = line.trim_end();
        if line.is_empty() {
            let _ = writeln!(out, "{indent}{marker}");
        } else {
            let _ = writeln!(out, "{indent}{marker} {line}");
        }
    }
}

/// The comment line naming a case: `edge: empty list`.
fn case_comment(case: &Case) -> String {
    if case.name.trim().is_empty() {
        case.kind.as_str().to_owned()
    } else {
        format!("{}: {}", case.kind.as_str(), case.name)
    }
}

fn header(out: &mut String, marker: &str, specs: &[&TestSpec]) {
    let _ = writeln!(
        out,
        "{marker} Generated by noesis from test specs: do not edit; change the specs and generate again."
    );
    for spec in specs {
        let _ = writeln!(
            out,
            "{marker} {}: signature {}",
            comment_text(&spec.function),
            comment_text(&spec.signature_hash)
        );
    }
}

/// A lower-case ASCII identifier fragment: other characters become `_`,
/// runs of `_` one, none at the ends.
fn ident_fragment(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// Test names, unique within one file.
struct Names(BTreeSet<String>);

impl Names {
    fn take(&mut self, prefix: &str, function: &str, case: &str) -> String {
        let function = ident_fragment(function);
        let case = ident_fragment(case);
        let mut base = [prefix, function.as_str(), case.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("_");
        if base.is_empty() {
            base = "case".to_owned();
        }
        if base.starts_with(|c: char| c.is_ascii_digit()) {
            base.insert_str(0, "t_");
        }
        let mut name = base.clone();
        let mut n = 2u32;
        while self.0.contains(&name) {
            name = format!("{base}_{n}");
            n = n.saturating_add(1);
        }
        self.0.insert(name.clone());
        name
    }
}

fn is_ascii_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn float_literal(f: f64) -> String {
    // Debug prints the shortest form that reads back to the same f64 and
    // always marks it a float (`1.0`, `1e300`, `1.5e-7`): valid in both
    // languages.
    format!("{f:?}")
}

// ----- Python -----

const PYTHON_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

const PYTHON_EXCEPTIONS: &[&str] = &[
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotADirectoryError",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
];

fn is_python_ident(s: &str) -> bool {
    is_ascii_ident(s) && !PYTHON_KEYWORDS.contains(&s)
}

fn py_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            c if u32::from(c) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if u32::from(c) < 0x1_0000 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

fn py_literal(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => float_literal(f),
            (None, None, None) => n.to_string(),
        },
        Value::String(s) => py_str(s),
        Value::Array(items) => format!("[{}]", items.iter().map(py_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{}: {}", py_str(k), py_literal(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// `subject.Calc.div`, with `getattr` for parts that are not identifiers.
fn py_target(function: &str) -> String {
    let mut target = String::from("subject");
    for part in function.split('.') {
        if is_python_ident(part) {
            target.push('.');
            target.push_str(part);
        } else {
            target = format!("getattr({target}, {})", py_str(part));
        }
    }
    target
}

/// `pytest.raises(…)` arguments for a Raises expectation, and whether
/// they use `re`.
fn py_raises(raises: &str) -> (String, bool) {
    let raises = raises.trim();
    let exception = |name: &str| {
        if PYTHON_EXCEPTIONS.contains(&name) { name.to_owned() } else { format!("subject.{name}") }
    };
    // Exception classes are CapWords; `zero` is a message, not a class.
    let is_class = |s: &str| is_python_ident(s) && s.starts_with(|c: char| c.is_ascii_uppercase());
    if raises.is_empty() {
        return ("Exception".to_owned(), false);
    }
    if is_class(raises) {
        return (exception(raises), false);
    }
    if let Some((name, message)) = raises.split_once(':') {
        let (name, message) = (name.trim(), message.trim());
        if is_class(name) {
            if message.is_empty() {
                return (exception(name), false);
            }
            return (format!("{}, match=re.escape({})", exception(name), py_str(message)), true);
        }
    }
    (format!("Exception, match=re.escape({})", py_str(raises)), true)
}

/// A pytest file testing `module_import` (`calc`, `pkg.calc`) against the
/// specs (see the module doc).
#[must_use]
pub fn render_pytest(module_import: &str, specs: &[TestSpec]) -> String {
    let specs = sorted(specs);
    let mut body = String::new();
    let mut names = Names(BTreeSet::new());
    let (mut uses_re, mut uses_pytest) = (false, false);
    for spec in &specs {
        let target = py_target(&spec.function);
        for case in &spec.cases {
            let name = names.take("test", &spec.function, &case.name);
            let call = format!("{target}({})", case.inputs.iter().map(py_literal).collect::<Vec<_>>().join(", "));
            let _ = writeln!(body, "\n\ndef {name}():");
            comment_lines(&mut body, "    ", "#", &case_comment(case));
            match &case.expected {
                Expected::Value(Value::Null) => {
                    let _ = writeln!(body, "    assert {call} is None");
                }
                Expected::Value(Value::Bool(b)) => {
                    let _ = writeln!(body, "    assert {call} is {}", if *b { "True" } else { "False" });
                }
                Expected::Value(v @ Value::Number(n)) if n.is_f64() => {
                    uses_pytest = true;
                    let _ = writeln!(body, "    assert {call} == pytest.approx({})", py_literal(v));
                }
                Expected::Value(v) => {
                    let _ = writeln!(body, "    assert {call} == {}", py_literal(v));
                }
                Expected::Raises(raises) => {
                    uses_pytest = true;
                    let (args, re) = py_raises(raises);
                    uses_re |= re;
                    let _ = writeln!(body, "    with pytest.raises({args}):");
                    let _ = writeln!(body, "        {call}");
                }
            }
        }
    }

    let mut out = String::new();
    header(&mut out, "#", &specs);
    for spec in &specs {
        if !spec.rationale.trim().is_empty() {
            out.push_str("#\n");
            comment_lines(&mut out, "", "#", &format!("{}: {}", spec.function, spec.rationale.trim()));
        }
    }
    let importlib = !module_import.split('.').all(is_python_ident);
    let stdlib: Vec<&str> =
        [(importlib, "importlib"), (uses_re, "re")].iter().filter(|(used, _)| *used).map(|(_, m)| *m).collect();
    if !stdlib.is_empty() {
        out.push('\n');
        for module in stdlib {
            let _ = writeln!(out, "import {module}");
        }
    }
    if uses_pytest {
        out.push_str("\nimport pytest\n");
    }
    if importlib {
        let _ = writeln!(out, "\nsubject = importlib.import_module({})", py_str(module_import));
    } else {
        let _ = writeln!(out, "\nimport {module_import} as subject");
    }
    out.push_str(&body);
    out
}

// ----- Rust -----

const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
    "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self",
    "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract",
    "become", "box", "do", "final", "macro", "override", "priv", "typeof", "unsized", "virtual", "yield", "try",
];

/// A path segment Rust accepts: an identifier that is no keyword (except
/// the path keywords, where `path_keywords` allows them), or `r#ident`.
fn is_rust_segment(s: &str, path_keywords: bool) -> bool {
    if let Some(raw) = s.strip_prefix("r#") {
        return is_ascii_ident(raw) && !matches!(raw, "crate" | "self" | "super" | "Self" | "_");
    }
    if path_keywords && matches!(s, "crate" | "self" | "super") {
        return true;
    }
    is_ascii_ident(s) && s != "_" && !RUST_KEYWORDS.contains(&s)
}

fn rust_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

/// Where a value sits: a top-level input (arrays are slices), a top-level
/// expected value (arrays are arrays), or inside a list (lists are `Vec`s).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Input,
    Expected,
    Nested,
}

/// The Rust literal of a value, or `None` for an object.
fn rust_literal(value: &Value, place: Place) -> Option<String> {
    Some(match value {
        Value::Null => "None".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => float_literal(f),
            (None, None, None) => n.to_string(),
        },
        Value::String(s) => rust_str(s),
        Value::Array(items) => {
            let items = items.iter().map(|v| rust_literal(v, Place::Nested)).collect::<Option<Vec<_>>>()?.join(", ");
            match place {
                Place::Input => format!("&[{items}]"),
                Place::Expected => format!("[{items}]"),
                Place::Nested => format!("vec![{items}]"),
            }
        }
        Value::Object(_) => return None,
    })
}

/// One `#[test]` function's text.
fn rust_test(target: Option<&str>, name: &str, case: &Case) -> String {
    let mut out = String::from("\n#[test]\n");
    let inputs = case.inputs.iter().map(|v| rust_literal(v, Place::Input)).collect::<Option<Vec<_>>>();
    let expected = match &case.expected {
        Expected::Value(v) => rust_literal(v, Place::Expected).map(Some),
        Expected::Raises(_) => Some(None),
    };
    let (Some(target), Some(inputs), Some(expected)) = (target, inputs, expected) else {
        let reason = if target.is_none() {
            "noesis: the function's name is not a Rust path"
        } else {
            "noesis: a JSON object has no Rust literal; give this case without objects"
        };
        let _ = writeln!(out, "#[ignore = {}]", rust_str(reason));
        let _ = writeln!(out, "fn {name}() {{");
        comment_lines(&mut out, "    ", "//", &case_comment(case));
        out.push_str("}\n");
        return out;
    };
    if let Expected::Raises(message) = &case.expected {
        if message.is_empty() {
            out.push_str("#[should_panic]\n");
        } else {
            let _ = writeln!(out, "#[should_panic(expected = {})]", rust_str(message));
        }
    }
    let _ = writeln!(out, "fn {name}() {{");
    comment_lines(&mut out, "    ", "//", &case_comment(case));
    let call = format!("{target}({})", inputs.join(", "));
    match (&case.expected, expected) {
        (Expected::Value(Value::Bool(true)), _) => {
            let _ = writeln!(out, "    assert!({call});");
        }
        (Expected::Value(Value::Bool(false)), _) => {
            let _ = writeln!(out, "    assert!(!{call});");
        }
        (_, Some(expected)) => {
            let _ = writeln!(out, "    assert_eq!({call}, {expected});");
        }
        (_, None) => {
            let _ = writeln!(out, "    let _ = {call};");
        }
    }
    out.push_str("}\n");
    out
}

/// Rust `#[test]` functions testing the items under `crate_path`
/// (`crate::calc`, `mylib::calc`) against the specs (see the module doc).
/// The file holds only the tests (no `mod`, no `use`), to be a module of
/// its own or an integration test.
#[must_use]
pub fn render_rust(crate_path: &str, specs: &[TestSpec]) -> String {
    let specs = sorted(specs);
    let mut out = String::new();
    header(&mut out, "//", &specs);
    for spec in &specs {
        if !spec.rationale.trim().is_empty() {
            out.push_str("//\n");
            comment_lines(&mut out, "", "//", &format!("{}: {}", spec.function, spec.rationale.trim()));
        }
    }
    let base_ok = crate_path.is_empty() || crate_path.split("::").all(|s| is_rust_segment(s, true));
    let mut names = Names(BTreeSet::new());
    for spec in &specs {
        let function_ok = spec.function.split("::").all(|s| is_rust_segment(s, false));
        let target = (base_ok && function_ok).then(|| {
            if crate_path.is_empty() { spec.function.clone() } else { format!("{crate_path}::{}", spec.function) }
        });
        for case in &spec.cases {
            let name = names.take("", &spec.function, &case.name);
            out.push_str(&rust_test(target.as_deref(), &name, case));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_strings_escape_everything_unusual() {
        assert_eq!(py_str("a\"b\\c\n\t\r"), r#""a\"b\\c\n\t\r""#);
        assert_eq!(py_str("é€😀\u{7f}\u{0}"), r#""\xe9\u20ac\U0001f600\x7f\x00""#);
    }

    #[test]
    fn rust_strings_escape_everything_unusual() {
        assert_eq!(rust_str("a\"b\\c\n\t\r"), r#""a\"b\\c\n\t\r""#);
        assert_eq!(rust_str("é😀\u{0}\u{202e}"), r#""\u{e9}\u{1f600}\u{0}\u{202e}""#);
    }

    #[test]
    fn names_are_identifiers_and_unique() {
        let mut names = Names(BTreeSet::new());
        assert_eq!(names.take("test", "Calc.div", "By zero!"), "test_calc_div_by_zero");
        assert_eq!(names.take("test", "Calc.div", "by  zero"), "test_calc_div_by_zero_2");
        assert_eq!(names.take("", "", "9 lives"), "t_9_lives");
        assert_eq!(names.take("", "", "!!!"), "case");
        assert_eq!(names.take("", "", "ü"), "case_2");
    }

    #[test]
    fn raises_forms() {
        assert_eq!(py_raises("ValueError"), ("ValueError".to_owned(), false));
        assert_eq!(py_raises("ParseError"), ("subject.ParseError".to_owned(), false));
        assert_eq!(
            py_raises("ValueError: must be > 0"),
            ("ValueError, match=re.escape(\"must be > 0\")".to_owned(), true)
        );
        assert_eq!(py_raises("bad input"), ("Exception, match=re.escape(\"bad input\")".to_owned(), true));
        assert_eq!(py_raises(""), ("Exception".to_owned(), false));
        assert_eq!(py_raises("zero"), ("Exception, match=re.escape(\"zero\")".to_owned(), true));
    }

    #[test]
    fn literals() {
        let v: Value = serde_json::from_str(r#"[null, true, -3, 1.0, 1e300, "x", [1], {"k": [false]}]"#).unwrap();
        assert_eq!(py_literal(&v), r#"[None, True, -3, 1.0, 1e300, "x", [1], {"k": [False]}]"#);
        let v: Value = serde_json::from_str(r#"[null, true, -3, 1.0, "x", [1]]"#).unwrap();
        assert_eq!(rust_literal(&v, Place::Input).unwrap(), r#"&[None, true, -3, 1.0, "x", vec![1]]"#);
        assert_eq!(rust_literal(&v, Place::Expected).unwrap(), r#"[None, true, -3, 1.0, "x", vec![1]]"#);
        assert_eq!(rust_literal(&json!({"k": 1}), Place::Input), None);
    }
}
