//! Function units: names, flags, signatures, hashes, changes, imports.

use std::path::Path;

use noesis_code::{ChangeKind, Function, FunctionKind, Lang, Param, changed, functions, imports};
use proptest::prelude::*;

fn units(lang: Lang, source: &str) -> Vec<Function> {
    functions(lang, source).expect("the grammars load")
}

fn find<'a>(units: &'a [Function], qualified: &str) -> &'a Function {
    units.iter().find(|f| f.qualified_name == qualified).unwrap_or_else(|| {
        let names: Vec<&str> = units.iter().map(|f| f.qualified_name.as_str()).collect();
        panic!("no {qualified} in {names:?}")
    })
}

/// `qualified kind public test async` per function, one line each.
fn summary(lang: Lang, source: &str) -> String {
    units(lang, source)
        .iter()
        .map(|f| {
            let flag = |b: bool, s: &str| if b { format!(" {s}") } else { String::new() };
            format!(
                "{} {:?}{}{}{} {}-{}",
                f.qualified_name,
                f.kind,
                flag(f.is_public, "pub"),
                flag(f.is_test, "test"),
                flag(f.is_async, "async"),
                f.start_line,
                f.end_line
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn param(name: &str, annotation: Option<&str>, default: Option<&str>) -> Param {
    Param { name: name.to_owned(), annotation: annotation.map(str::to_owned), default: default.map(str::to_owned) }
}

#[test]
fn lang_from_path() {
    assert_eq!(Lang::from_path(Path::new("a/b.py")), Some(Lang::Python));
    assert_eq!(Lang::from_path(Path::new("src/lib.rs")), Some(Lang::Rust));
    assert_eq!(Lang::from_path(Path::new("README.md")), None);
    assert_eq!(Lang::from_path(Path::new("Makefile")), None);
}

const PYTHON: &str = r#"import os


def add(a: int, b: int = 2) -> int:
    """Adds."""
    return a + b


async def fetch(url, *args, timeout: float = 1.0, **kw):
    pass


def _helper(x, /, y, *, z):
    def inner():
        return 1
    return inner


class Calc:
    @staticmethod
    def div(a, b):
        return a / b

    def __init__(self):
        self.x = 1

    def _private(self):
        pass

    class Inner:
        def deep(self):
            pass


class _Hidden:
    def shown(self):
        pass


def test_add():
    assert add(1) == 3


class TestCalc:
    def test_div(self):
        pass

    def helper(self):
        pass
"#;

#[test]
fn python_names_kinds_and_flags() {
    let expected = "\
add Function pub 4-6
fetch Function pub async 9-10
_helper Function 13-16
_helper.inner Function 14-15
Calc.div Method pub 20-22
Calc.__init__ Method pub 24-25
Calc._private Method 27-28
Calc.Inner.deep Method pub 31-32
_Hidden.shown Method 36-37
test_add Function pub test 40-41
TestCalc.test_div Method pub test 45-46
TestCalc.helper Method pub 48-49";
    assert_eq!(summary(Lang::Python, PYTHON), expected);
}

#[test]
fn python_signatures_and_params() {
    let all = units(Lang::Python, PYTHON);
    let add = find(&all, "add");
    assert_eq!(add.signature, "def add(a: int, b: int = 2) -> int");
    assert_eq!(add.params, vec![param("a", Some("int"), None), param("b", Some("int"), Some("2"))]);
    assert_eq!(add.return_annotation.as_deref(), Some("int"));
    assert!(!add.has_errors);

    let fetch = find(&all, "fetch");
    assert_eq!(fetch.signature, "async def fetch(url, *args, timeout: float = 1.0, **kw)");
    assert_eq!(
        fetch.params,
        vec![
            param("url", None, None),
            param("*args", None, None),
            param("timeout", Some("float"), Some("1.0")),
            param("**kw", None, None)
        ]
    );
    assert_eq!(fetch.return_annotation, None);

    let helper = find(&all, "_helper");
    let names: Vec<&str> = helper.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["x", "y", "z"], "the `/` and `*` markers are not parameters");

    let div = find(&all, "Calc.div");
    assert_eq!(div.signature, "@staticmethod def div(a, b)");
    assert_eq!(div.start_line, 20, "the unit starts at its decorator");
}

#[test]
fn python_broken_file_still_yields_what_parses() {
    let source = "def good(a):\n    return a\n\n\ndef bad(a):\n    return a +\n\n\ndef also_good():\n    pass\n";
    let all = units(Lang::Python, source);
    assert!(!find(&all, "good").has_errors, "{all:#?}");
    assert!(find(&all, "bad").has_errors, "{all:#?}");
    assert!(!find(&all, "also_good").has_errors, "{all:#?}");
    assert!(noesis_code::has_syntax_errors(Lang::Python, source).unwrap());
    assert!(!noesis_code::has_syntax_errors(Lang::Python, PYTHON).unwrap());
}

const RUST: &str = r#"use std::fmt;

/// Adds.
#[must_use]
#[inline]
pub fn add(a: i32, b: i32) -> i32 {
    a + b
}

pub(crate) async unsafe fn raw<'a, T: Clone>(p: *const T, s: &'a str) -> Option<&'a T>
where
    T: fmt::Debug,
{
    None
}

pub struct Calc;

impl Calc {
    pub const fn new() -> Self {
        Calc
    }

    fn helper(&mut self, (a, b): (u8, u8)) {
        fn nested() {}
    }
}

impl<T> fmt::Display for Wrapper<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}

pub trait Shape {
    fn area(&self) -> f64;
    fn name(&self) -> String {
        String::new()
    }
}

mod inner {
    pub mod deeper {
        pub extern "C" fn exported(x: u32) -> u32 {
            x
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> u8 {
        1
    }

    #[test]
    fn adds() {
        assert_eq!(add(1, 2), 3);
    }
}

#[tokio::test]
async fn top_level_async_test() {}
"#;

#[test]
fn rust_names_kinds_and_flags() {
    let expected = "\
add Function pub 4-8
raw Function async 10-15
Calc::new Method pub 20-22
Calc::helper Method 24-26
Calc::helper::nested Function 25-25
Wrapper::fmt Method pub 30-32
Shape::name Method pub 37-39
inner::deeper::exported Function pub 44-46
tests::fixture Function test 54-56
tests::adds Function test 58-61
top_level_async_test Function test async 64-65";
    assert_eq!(summary(Lang::Rust, RUST), expected);
}

#[test]
fn rust_signatures_and_params() {
    let all = units(Lang::Rust, RUST);
    let add = find(&all, "add");
    assert_eq!(add.signature, "#[must_use] pub fn add(a: i32, b: i32) -> i32", "#[inline] and docs are not interface");
    assert_eq!(add.params, vec![param("a", Some("i32"), None), param("b", Some("i32"), None)]);
    assert_eq!(add.return_annotation.as_deref(), Some("i32"));

    let raw = find(&all, "raw");
    assert_eq!(
        raw.signature,
        "pub(crate) async unsafe fn raw<'a, T: Clone>(p: *const T, s: &'a str) -> Option<&'a T> where T: fmt::Debug"
    );

    let helper = find(&all, "Calc::helper");
    assert_eq!(helper.params, vec![param("self", Some("&mut Self"), None), param("(a, b)", Some("(u8, u8)"), None)]);
    assert_eq!(find(&all, "Calc::new").kind, FunctionKind::Method);
    assert_eq!(find(&all, "Wrapper::fmt").params[0], param("self", Some("&Self"), None));
    assert_eq!(find(&all, "inner::deeper::exported").signature, "pub extern \"C\" fn exported(x: u32) -> u32");
    assert!(all.iter().all(|f| f.qualified_name != "Shape::area"), "declarations without a body are not units");
}

/// `(old, new, signature the same, body the same)`: one edit each.
fn check_hashes(lang: Lang, cases: &[(&str, &str, &str, bool, bool)]) {
    for (what, old, new, same_signature, same_body) in cases {
        let (old, new) = (&units(lang, old)[0], &units(lang, new)[0]);
        assert_eq!(
            old.signature_hash == new.signature_hash,
            *same_signature,
            "{what}: signature hash\n{old:#?}\n{new:#?}"
        );
        assert_eq!(old.body_hash == new.body_hash, *same_body, "{what}: body hash\n{old:#?}\n{new:#?}");
    }
}

#[test]
fn python_hashes() {
    let base = "def f(a: int, b=1) -> int:\n    return a + b\n";
    check_hashes(
        Lang::Python,
        &[
            ("body only", base, "def f(a: int, b=1) -> int:\n    return a - b\n", true, false),
            ("added parameter", base, "def f(a: int, b=1, c=2) -> int:\n    return a + b\n", false, true),
            ("annotation", base, "def f(a: float, b=1) -> int:\n    return a + b\n", false, true),
            ("default value", base, "def f(a: int, b=2) -> int:\n    return a + b\n", false, true),
            ("return annotation", base, "def f(a: int, b=1) -> float:\n    return a + b\n", false, true),
            ("decorator", base, "@cache\ndef f(a: int, b=1) -> int:\n    return a + b\n", false, true),
            ("async", base, "async def f(a: int, b=1) -> int:\n    return a + b\n", false, true),
            (
                "reformatted like black",
                base,
                "def f(\n    a : int,\n    b = 1,\n)->int:\n    return  a+b\n",
                true,
                true,
            ),
            (
                "comment in the body",
                base,
                "def f(a: int, b=1) -> int:\n    # why\n    return a + b  # sum\n",
                true,
                true,
            ),
            (
                "comment in the parameters",
                base,
                "def f(a: int,  # first\n      b=1) -> int:\n    return a + b\n",
                true,
                true,
            ),
            ("docstring", base, "def f(a: int, b=1) -> int:\n    \"\"\"Sum.\"\"\"\n    return a + b\n", true, true),
            ("single quotes", "def f(a='x'):\n    return 'y'\n", "def f(a=\"x\"):\n    return \"y\"\n", true, true),
            ("string inside", "def f(a='x'):\n    return 'y'\n", "def f(a='x '):\n    return 'y '\n", false, false),
            (
                "indentation moves a statement out of a block",
                "def f(a):\n    if a:\n        a += 1\n        return a\n",
                "def f(a):\n    if a:\n        a += 1\n    return a\n",
                true,
                false,
            ),
            ("tuple comma kept", "def f(a=(1,)):\n    return (1,)\n", "def f(a=(1)):\n    return (1)\n", false, false),
            (
                "trailing comma in a call",
                "def f():\n    return g(1, 2)\n",
                "def f():\n    return g(\n        1,\n        2,\n    )\n",
                true,
                true,
            ),
        ],
    );
}

#[test]
fn rust_hashes() {
    let base = "pub fn f(a: i32, b: &str) -> i32 {\n    a + 1\n}\n";
    check_hashes(
        Lang::Rust,
        &[
            ("body only", base, "pub fn f(a: i32, b: &str) -> i32 {\n    a + 2\n}\n", true, false),
            ("added parameter", base, "pub fn f(a: i32, b: &str, c: u8) -> i32 {\n    a + 1\n}\n", false, true),
            ("parameter type", base, "pub fn f(a: i64, b: &str) -> i32 {\n    a + 1\n}\n", false, true),
            ("return type", base, "pub fn f(a: i32, b: &str) -> i64 {\n    a + 1\n}\n", false, true),
            ("visibility", base, "fn f(a: i32, b: &str) -> i32 {\n    a + 1\n}\n", false, true),
            ("must_use", base, "#[must_use]\npub fn f(a: i32, b: &str) -> i32 {\n    a + 1\n}\n", false, true),
            (
                "inline and docs",
                base,
                "/// Doc.\n#[inline]\npub fn f(a: i32, b: &str) -> i32 {\n    a + 1\n}\n",
                true,
                true,
            ),
            (
                "reformatted like rustfmt",
                base,
                "pub fn f(\n    a: i32,\n    b: &str,\n) -> i32 {\n    a\n        + 1\n}\n",
                true,
                true,
            ),
            (
                "comments",
                base,
                "pub fn f(a: i32, /* x */ b: &str) -> i32 {\n    // one\n    a + 1 /* more */\n}\n",
                true,
                true,
            ),
            (
                "where clause trailing comma",
                "fn f<T>(t: T) where T: Clone {}\n",
                "fn f<T>(t: T)\nwhere\n    T: Clone,\n{\n}\n",
                true,
                true,
            ),
            (
                "where clause bound",
                "fn f<T>(t: T) where T: Clone {}\n",
                "fn f<T>(t: T) where T: Copy {}\n",
                false,
                true,
            ),
            ("string inside", "fn f() { g(\"a\") }\n", "fn f() { g(\"a \") }\n", true, false),
            (
                "match arm commas like rustfmt",
                "fn f(x: u8) -> u8 { match x { 1 => { 2 }, _ => 3 } }",
                "fn f(x: u8) -> u8 {\n    match x {\n        1 => {\n            2\n        }\n        _ => 3,\n    }\n}",
                true,
                true,
            ),
            (
                "struct literal trailing comma",
                "fn f() -> S { S { a: 1, b: 2 } }",
                "fn f() -> S {\n    S {\n        a: 1,\n        b: 2,\n    }\n}",
                true,
                true,
            ),
            ("tuple type comma kept", "fn f(t: (u8,)) {}", "fn f(t: (u8)) {}", false, true),
        ],
    );
}

#[test]
fn changes_between_versions() {
    let old = units(
        Lang::Python,
        "def same():\n    pass\n\ndef body():\n    return 1\n\ndef sig(a):\n    pass\n\ndef gone():\n    pass\n",
    );
    let new = units(
        Lang::Python,
        "def fresh():\n    pass\n\ndef same():\n    pass\n\ndef body():\n    return 2\n\ndef sig(a, b):\n    return 3\n",
    );
    let changes: Vec<(String, ChangeKind)> =
        changed(&old, &new).into_iter().map(|c| (c.qualified_name, c.kind)).collect();
    assert_eq!(
        changes,
        vec![
            ("fresh".to_owned(), ChangeKind::Added),
            ("body".to_owned(), ChangeKind::BodyChanged),
            ("sig".to_owned(), ChangeKind::SignatureChanged),
            ("gone".to_owned(), ChangeKind::Removed),
        ]
    );
    assert!(changed(&new, &new).is_empty());
}

#[test]
fn functions_sharing_a_name_pair_in_order() {
    let source = |getter: &str| {
        format!(
            "class C:\n    @property\n    def x(self):\n        return {getter}\n\n    @x.setter\n    def x(self, v):\n        self._x = v\n"
        )
    };
    let (old, new) = (units(Lang::Python, &source("1")), units(Lang::Python, &source("2")));
    assert_eq!(old.len(), 2);
    let changes = changed(&old, &new);
    assert_eq!(changes.len(), 1);
    assert_eq!((changes[0].qualified_name.as_str(), changes[0].kind), ("C.x", ChangeKind::BodyChanged));
}

#[test]
fn python_imports() {
    let source = "import os\nimport a.b.c as abc, json\nfrom . import sibling\nfrom ..pkg.mod import thing\nfrom __future__ import annotations\nimport os\n\ndef f():\n    import typing\n";
    assert_eq!(
        imports(Lang::Python, source).unwrap(),
        ["os", "a.b.c", "json", ".", "..pkg.mod", "__future__", "typing"]
    );
}

#[test]
fn rust_imports() {
    let source = "use std::io::{self, Read};\nuse crate::x::Y;\nuse serde::Serialize as S;\nuse ::tokio::sync;\nuse {regex::Regex, anyhow};\nuse super::*;\nmod file_mod;\nmod inline {}\nextern crate alloc;\nfn f() { use std::fmt; }\n";
    assert_eq!(
        imports(Lang::Rust, source).unwrap(),
        ["std", "crate", "serde", "tokio", "regex", "anyhow", "super", "file_mod", "alloc"]
    );
}

#[test]
fn deep_nesting_does_not_overflow() {
    let depth = 20_000;
    let python = format!("def f():\n    return {}1{}\n", "[".repeat(depth), "]".repeat(depth));
    let all = units(Lang::Python, &python);
    assert_eq!(all.len(), 1);
    let rust = format!("fn f() {{ {}1{} }}\n", "(".repeat(depth), ")".repeat(depth));
    assert_eq!(units(Lang::Rust, &rust).len(), 1);
}

proptest! {
    #[test]
    fn prop_functions_never_fail_on_any_text(text in "\\PC{0,400}") {
        for lang in [Lang::Python, Lang::Rust] {
            let all = functions(lang, &text).unwrap();
            for f in &all {
                prop_assert!(f.start_line <= f.end_line);
            }
            imports(lang, &text).unwrap();
        }
    }

    #[test]
    fn prop_functions_never_fail_on_cut_source(cut in 0usize..2000, insert in "[(){}\\[\\]:,'\"\\n ]{0,3}") {
        for (lang, source) in [(Lang::Python, PYTHON), (Lang::Rust, RUST)] {
            let at = source.char_indices().map(|(i, _)| i).nth(cut % source.chars().count()).unwrap_or(0);
            let text = format!("{}{insert}{}", &source[..at], &source[at..]);
            functions(lang, &text).unwrap();
        }
    }
}
