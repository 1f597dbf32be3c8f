//! Property tests of the parsers that face a model's reply or a module
//! author's text: whatever they are given, they answer (a value or a typed
//! error) and never panic; where text can be printed back, it round-trips.
//! `PROPTEST_CASES` sets the number of cases (`bench/props.sh` runs a
//! million of each).

use noesis_modules::calls::{find_calls, replace_calls};
use noesis_modules::condition::Condition;
use noesis_modules::context::{redact, redact_text};
use noesis_modules::jsonpath::JsonPath;
use noesis_modules::version::{Version, VersionReq};
use noesis_modules::{Source, extract_json, load};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map("[a-z_]{1,8}", json_value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>()))
}

/// Text a model might put around its JSON: anything but braces.
fn prose() -> impl Strategy<Value = String> {
    "[^{}]{0,40}"
}

proptest! {
    #[test]
    fn prop_extract_json_never_panics(reply in "\\PC{0,200}") {
        let _ = extract_json(&reply);
    }

    #[test]
    fn prop_extract_json_finds_the_object_in_prose_or_a_fence(
        v in json_object(), before in prose(), after in prose(), fenced in any::<bool>(), pretty in any::<bool>(),
    ) {
        let body = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { v.to_string() };
        let reply = if fenced { format!("{before}\n```json\n{body}\n```\n{after}") } else { format!("{before} {body} {after}") };
        let found = extract_json(&reply).map(|(value, _)| value);
        prop_assert_eq!(found, Some(v), "{}", reply);
    }

    #[test]
    fn prop_conditions_parse_or_refuse_and_evaluate(text in "\\PC{0,60}", doc in json_value()) {
        if let Ok(c) = Condition::parse(&text) {
            let _ = c.eval(&doc);
        }
    }

    #[test]
    fn prop_condition_like_text_never_panics(
        text in "[$.a-z0-9_\\[\\]'\" =!<>&|()-]{0,40}", doc in json_object(),
    ) {
        if let Ok(c) = Condition::parse(&text) {
            let _ = c.eval(&doc);
        }
    }

    #[test]
    fn prop_jsonpath_parses_or_refuses_and_selects(text in "\\PC{0,40}", doc in json_value()) {
        if let Ok(p) = JsonPath::parse(&text) {
            let _ = p.select(&doc);
        }
    }

    #[test]
    fn prop_a_dotted_path_selects_what_is_there(keys in proptest::collection::vec("[a-z_][a-z0-9_]{0,6}", 1..5), leaf in json_value()) {
        let mut doc = leaf.clone();
        for k in keys.iter().rev() {
            doc = json!({ k.as_str(): doc });
        }
        let path = format!("$.{}", keys.join("."));
        let parsed = JsonPath::parse(&path);
        prop_assert!(parsed.is_ok(), "{}: {:?}", path, parsed.err());
        prop_assert_eq!(parsed.unwrap().select(&doc), Some(leaf));
    }

    #[test]
    fn prop_versions_parse_or_refuse_and_round_trip(text in "\\PC{0,24}") {
        if let Ok(v) = Version::parse(&text) {
            prop_assert_eq!(Version::parse(&v.to_string()).ok(), Some(v));
        }
        if let Ok(r) = VersionReq::parse(&text) {
            let again = VersionReq::parse(&r.to_string());
            prop_assert!(again.is_ok(), "{} printed as {}", text, r);
        }
    }

    #[test]
    fn prop_version_like_text_never_panics(
        text in "[0-9.^~<>=*, xX+a-z-]{0,24}", major in 0u64..1000, minor in 0u64..1000, patch in 0u64..1000,
    ) {
        let v = Version::parse(&format!("{major}.{minor}.{patch}"));
        prop_assert!(v.is_ok());
        if let Ok(r) = VersionReq::parse(&text) {
            let _ = r.matches(&v.unwrap());
        }
    }

    #[test]
    fn prop_calls_are_found_and_replaced_without_panics(prompt in "(\\PC|@call:[a-z-]{0,8}(\\([^)]{0,10}\\))?){0,20}") {
        let calls = find_calls(&prompt);
        for c in &calls {
            prop_assert!(c.span.end <= prompt.len() && prompt.is_char_boundary(c.span.start));
        }
        // Each call replaced by its own text gives the prompt back.
        let same: Vec<String> = calls.iter().map(|c| prompt[c.span.clone()].to_owned()).collect();
        prop_assert_eq!(replace_calls(&prompt, &calls, &same), prompt);
    }

    #[test]
    fn prop_redaction_is_idempotent(text in "\\PC{0,120}", keyish in "(api_key|password|token|secret|sk-)[=: ]?[A-Za-z0-9_-]{0,40}") {
        let input = format!("{text} {keyish}");
        let (once, _) = redact_text(&input);
        let (twice, more) = redact_text(&once);
        prop_assert_eq!(&twice, &once);
        prop_assert_eq!(more, 0);
    }

    #[test]
    fn prop_redacting_any_value_never_panics(mut v in json_value()) {
        redact(&mut v);
        let mut again = v.clone();
        prop_assert_eq!(redact(&mut again), 0, "{}", v);
    }

    #[test]
    fn prop_any_manifest_text_loads_or_is_refused(text in "\\PC{0,200}", yamlish in yaml_text()) {
        for t in [text, yamlish] {
            // Embedded files are 'static: leaked, a few hundred bytes a case.
            let yaml: &'static str = Box::leak(t.into_boxed_str());
            let files: &'static [(&'static str, &'static str)] =
                Box::leak(vec![("module.yaml", yaml), ("prompt.md", "Answer.")].into_boxed_slice());
            let _ = load(Source::Embedded { name: "fuzzed", files });
        }
    }
}

/// YAML-shaped text with the manifest's own keys, so the checks past the
/// YAML parser are reached too.
fn yaml_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("name"),
        Just("version"),
        Just("responsibility"),
        Just("tier"),
        Just("policies"),
        Just("composition"),
        Just("context"),
        Just("runtime_requirements"),
        Just("tests"),
        Just("overflow"),
        Just("enums"),
        Just("failure"),
    ];
    let value = prop_oneof![
        "[a-z0-9 .-]{0,12}".prop_map(|s| s),
        Just("exec".to_owned()),
        Just("decision".to_owned()),
        Just("[1, 2]".to_owned()),
        Just("{a: 1}".to_owned()),
        Just("\n  dataflow:\n    - from: input\n      to: x".to_owned()),
        Just("\n  max_input_tokens: -1".to_owned()),
    ];
    proptest::collection::vec((key, value), 0..8)
        .prop_map(|kvs| kvs.into_iter().map(|(k, v)| format!("{k}: {v}\n")).collect())
}

/// Prose around a reply's JSON that is harder than plain words: other code
/// fences, template placeholders and set notation in braces (never valid
/// JSON), quotes and backticks.
fn tricky_prose() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[^{}`]{0,20}",
        "[a-z ]{0,10}".prop_map(|code| format!("\n```python\nprint({code:?})\n```\n")),
        "[a-z]{1,6}".prop_map(|w| format!("{{{w}}}")),
        "[a-z]{1,6}".prop_map(|w| format!("{{{{{w}}}}}")),
        Just("`code`".to_owned()),
        Just("[1, 2]".to_owned()),
    ];
    proptest::collection::vec(piece, 0..4).prop_map(|p| p.concat())
}

/// Text built from the pieces that steer the extractor: braces, quotes,
/// escapes, fences and bits of JSON.
fn jsonish_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{"),
        Just("}"),
        Just("\""),
        Just("\\"),
        Just("```"),
        Just("```json\n"),
        Just("\n"),
        Just(":"),
        Just(","),
        Just("[]"),
        Just("\"a\""),
        Just("1"),
        Just("\u{feff}"),
        Just("é"),
        Just(" "),
    ];
    proptest::collection::vec(piece, 0..60).prop_map(|p| p.concat())
}

/// One step of a generated path, as printed and as the document needs it.
#[derive(Debug, Clone)]
enum Step {
    Dotted(String),
    Quoted(String, char),
    Index(usize),
    Wildcard(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        "[A-Za-z_][A-Za-z0-9_-]{0,6}".prop_map(Step::Dotted),
        "[^\"]{0,8}".prop_map(|k| Step::Quoted(k, '"')),
        "[^']{0,8}".prop_map(|k| Step::Quoted(k, '\'')),
        (0usize..4).prop_map(Step::Index),
        (1usize..3).prop_map(Step::Wildcard),
    ]
}

fn print_path(steps: &[Step]) -> String {
    let mut s = String::from("$");
    for st in steps {
        match st {
            Step::Dotted(k) => s.push_str(&format!(".{k}")),
            Step::Quoted(k, q) => s.push_str(&format!("[{q}{k}{q}]")),
            Step::Index(n) => s.push_str(&format!("[{n}]")),
            Step::Wildcard(_) => s.push_str("[*]"),
        }
    }
    s
}

/// The document the path walks through to `leaf`, and what selecting the
/// path from it gives.
fn doc_and_expected(steps: &[Step], leaf: &Value) -> (Value, Value) {
    let Some((first, rest)) = steps.split_first() else { return (leaf.clone(), leaf.clone()) };
    let (inner, expected) = doc_and_expected(rest, leaf);
    match first {
        Step::Dotted(k) | Step::Quoted(k, _) => (json!({ k.as_str(): inner }), expected),
        Step::Index(n) => {
            let mut items = vec![Value::Null; *n];
            items.push(inner);
            (Value::Array(items), expected)
        }
        Step::Wildcard(count) => (Value::Array(vec![inner; *count]), Value::Array(vec![expected; *count])),
    }
}

/// A condition written by the grammar, so it must parse.
fn condition_text() -> impl Strategy<Value = String> {
    let path = || proptest::collection::vec(step(), 0..3).prop_map(|s| print_path(&s));
    let literal = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        (-1e9f64..1e9).prop_map(|f| json!(f).to_string()),
        "[^\"\\\\]{0,8}".prop_map(|s| format!("\"{s}\"")),
        "[^'\\\\]{0,8}".prop_map(|s| format!("'{s}'")),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("null".to_owned()),
        Just("\"a\\\"b\\\\c\\n\\t\\'\"".to_owned()),
    ];
    let operand = prop_oneof![path(), path().prop_map(|p| format!("exists({p})")), literal,];
    let op = prop_oneof![Just("=="), Just("!="), Just(">"), Just("<"), Just(">="), Just("<=")];
    let compare =
        prop_oneof![operand.clone(), (operand.clone(), op, operand).prop_map(|(a, o, b)| format!("{a} {o} {b}")),];
    compare.prop_recursive(4, 16, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} && {b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} || {b}")),
            inner.clone().prop_map(|a| format!("!{a}")),
            inner.prop_map(|a| format!("({a})")),
        ]
    })
}

/// A scalar and how a condition writes it.
fn scalar_literal() -> impl Strategy<Value = (Value, String)> {
    prop_oneof![
        Just((Value::Null, "null".to_owned())),
        any::<bool>().prop_map(|b| (json!(b), b.to_string())),
        any::<i64>().prop_map(|n| (json!(n), n.to_string())),
        (-1e9f64..1e9).prop_map(|f| (json!(f), json!(f).to_string())),
        "\\PC{0,10}".prop_map(|s| {
            let escaped = s.replace('\\', "\\\\").replace('"', "\\\"");
            (json!(s), format!("\"{escaped}\""))
        }),
    ]
}

/// Words and separators that make the redactor change its mind.
fn secretish_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("password".to_owned()),
        Just("api_key".to_owned()),
        Just("\"token\"".to_owned()),
        Just("sort_key".to_owned()),
        Just("Bearer".to_owned()),
        Just("basic".to_owned()),
        Just("[REDACTED]".to_owned()),
        Just("REDACTED".to_owned()),
        Just("://".to_owned()),
        Just("@".to_owned()),
        Just(":".to_owned()),
        Just("=".to_owned()),
        Just("\"".to_owned()),
        Just("'".to_owned()),
        Just(" ".to_owned()),
        Just("  ".to_owned()),
        Just("\n".to_owned()),
        Just("/".to_owned()),
        Just("user:pw@host".to_owned()),
        Just("eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJlMTIz".to_owned()),
        "[A-Za-z0-9]{1,10}",
        "(sk-|ghp_|AIza|AKIA)[A-Z0-9]{16,32}",
        "[a-z0-9 ]{0,6}".prop_map(|w| format!("\"{w}\"")),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
}

/// JSON values shaped like schema documents, with keywords the validator
/// compiles (some with values of the wrong kind).
fn schemaish_value() -> impl Strategy<Value = Value> {
    let keyword = prop_oneof![
        Just("type"),
        Just("properties"),
        Just("required"),
        Just("items"),
        Just("enum"),
        Just("pattern"),
        Just("$ref"),
        Just("minimum"),
        Just("maxLength"),
        Just("oneOf"),
        Just("additionalProperties"),
        Just("format"),
        Just("$defs"),
        Just("const"),
    ];
    let leaf = prop_oneof![
        Just(json!("object")),
        Just(json!("string")),
        Just(json!("#/$defs/x")),
        Just(json!("#/nowhere")),
        Just(json!("(unclosed")),
        Just(json!("^[a-z]+$")),
        Just(json!(["a"])),
        Just(json!(-1)),
        Just(json!(true)),
        Just(json!({})),
        json_value(),
    ];
    leaf.prop_recursive(3, 20, 4, move |inner| {
        prop_oneof![
            proptest::collection::vec((keyword.clone(), inner.clone()), 0..4).prop_map(|kvs| {
                Value::Object(kvs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<String, Value>>())
            }),
            proptest::collection::vec(inner, 0..3).prop_map(Value::Array),
        ]
    })
}

const GOOD_MANIFEST: &str = "name: fuzzed\nversion: 1.0.0\nresponsibility: r\ntier: decision\n";

proptest! {
    #[test]
    fn prop_extract_json_finds_the_object_among_fences_and_placeholders(
        v in json_object(), before in tricky_prose(), after in tricky_prose(), fenced in any::<bool>(), pretty in any::<bool>(),
    ) {
        let body = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { v.to_string() };
        let reply = if fenced { format!("{before}\n```json\n{body}\n```\n{after}") } else { format!("{before} {body} {after}") };
        let found = extract_json(&reply).map(|(value, _)| value);
        prop_assert_eq!(found, Some(v), "{}", reply);
    }

    #[test]
    fn prop_extract_json_never_panics_on_jsonish_text(reply in jsonish_text()) {
        if let Some((v, _)) = extract_json(&reply) {
            prop_assert!(v.is_object());
        }
    }

    #[test]
    fn prop_a_printed_path_parses_back_and_selects_the_value(steps in proptest::collection::vec(step(), 0..5), leaf in json_value()) {
        let text = print_path(&steps);
        let parsed = JsonPath::parse(&text);
        prop_assert!(parsed.is_ok(), "{}: {:?}", text, parsed.err());
        let path = parsed.unwrap();
        prop_assert_eq!(path.to_string(), text.clone());
        prop_assert_eq!(path.segments().len(), steps.len());
        let (doc, expected) = doc_and_expected(&steps, &leaf);
        prop_assert_eq!(path.select(&doc), Some(expected), "{}", text);
    }

    #[test]
    fn prop_jsonpath_like_text_never_panics(text in "\\$[$.a-z0-9_*\\[\\]'\"é -]{0,30}", doc in json_value()) {
        if let Ok(p) = JsonPath::parse(&text) {
            let _ = p.select(&doc);
        }
    }

    #[test]
    fn prop_grammatical_conditions_parse_and_evaluate(text in condition_text(), doc in json_value()) {
        let c = Condition::parse(&text);
        prop_assert!(c.is_ok(), "{}: {:?}", text, c.err());
        let c = c.unwrap();
        prop_assert_eq!(c.as_str(), text.as_str());
        let _ = c.eval(&doc);
    }

    #[test]
    fn prop_a_present_value_equals_itself_in_a_condition(
        keys in proptest::collection::vec("[a-z_][a-z0-9_]{0,6}", 1..4), (value, literal) in scalar_literal(),
    ) {
        let mut doc = value.clone();
        for k in keys.iter().rev() {
            doc = json!({ k.as_str(): doc });
        }
        let path = format!("$.{}", keys.join("."));
        for (text, want) in [
            (format!("{path} == {literal}"), true),
            (format!("{path} != {literal}"), false),
            (format!("!({path} == {literal})"), false),
            // `null` counts as absent, as a path that leads nowhere does.
            (format!("exists({path})"), !value.is_null()),
            (format!("exists({path}.zz_missing) || {path} == {literal}"), true),
        ] {
            let c = Condition::parse(&text);
            prop_assert!(c.is_ok(), "{}: {:?}", text, c.err());
            prop_assert_eq!(c.unwrap().eval(&doc), want, "{} on {}", text, doc);
        }
    }

    #[test]
    fn prop_deeply_nested_conditions_are_refused_not_overflowed(depth in 0usize..2000, bangs in any::<bool>()) {
        let text = if bangs { format!("{}$.a", "!".repeat(depth)) } else { format!("{}$.a{}", "(".repeat(depth), ")".repeat(depth)) };
        if let Ok(c) = Condition::parse(&text) {
            let _ = c.eval(&json!({"a": 1}));
        }
    }

    #[test]
    fn prop_a_version_round_trips_through_display(
        major in any::<u64>(), minor in any::<u64>(), patch in any::<u64>(),
        pre in proptest::collection::vec("[0-9A-Za-z-]{1,6}", 0..3), build in proptest::option::of("[0-9A-Za-z.-]{1,8}"), v_prefix in any::<bool>(),
    ) {
        let mut text = format!("{}{major}.{minor}.{patch}", if v_prefix { "v" } else { "" });
        if !pre.is_empty() {
            text.push('-');
            text.push_str(&pre.join("."));
        }
        if let Some(b) = build {
            text.push('+');
            text.push_str(&b);
        }
        let v = Version::parse(&text);
        prop_assert!(v.is_ok(), "{}: {:?}", text, v.err());
        let v = v.unwrap();
        prop_assert_eq!((v.major, v.minor, v.patch), (major, minor, patch));
        prop_assert_eq!(&v.pre, &pre);
        prop_assert_eq!(Version::parse(&v.to_string()).ok(), Some(v.clone()));
        // Every range built on it around it holds it; `<` it does not.
        for op in ["", "=", ">=", "<=", "^", "~"] {
            let r = VersionReq::parse(&format!("{op}{v}"));
            prop_assert!(r.is_ok(), "{}{}: {:?}", op, v, r.err());
            prop_assert!(r.unwrap().matches(&v), "{}{}", op, v);
        }
        let below = VersionReq::parse(&format!("<{v}"));
        prop_assert!(below.is_ok_and(|r| !r.matches(&v)));
    }

    #[test]
    fn prop_a_range_round_trips_through_display(text in "[ \\t]{0,2}([<>=^~]{0,2} ?(v?[0-9xX*]{1,3}(\\.[0-9xX*]{1,3}){0,3}(-[a-z0-9]{1,3})?) ?){1,3}") {
        if let Ok(r) = VersionReq::parse(&text) {
            prop_assert_eq!(VersionReq::parse(&r.to_string()).ok(), Some(r));
        }
    }

    #[test]
    fn prop_replace_calls_never_panics_on_calls_of_another_prompt(
        prompt in "(\\PC|@call:[a-z]{1,4}(\\([^)]{0,6}\\))?){0,12}",
        other in "(\\PC|@call:[a-z]{1,4}(\\([^)]{0,6}\\))?){0,12}",
        replacements in proptest::collection::vec("\\PC{0,6}", 0..6),
    ) {
        let calls = find_calls(&other);
        let _ = replace_calls(&prompt, &calls, &replacements);
        let own = find_calls(&prompt);
        let out = replace_calls(&prompt, &own, &replacements);
        // With fewer replacements than calls, the calls without one stay as written.
        if replacements.is_empty() {
            prop_assert_eq!(out, prompt);
        }
    }

    #[test]
    fn prop_calls_with_quoted_and_nested_arguments_never_panic(
        prompt in "([a-z ]|@call:[a-z]{1,4}|[()\"\\\\{}:,é]|\"[a-z()]{0,4}\"){0,40}",
    ) {
        let calls = find_calls(&prompt);
        let mut last = 0;
        for c in &calls {
            prop_assert!(c.span.start >= last && c.span.end <= prompt.len());
            prop_assert!(prompt.is_char_boundary(c.span.start) && prompt.is_char_boundary(c.span.end));
            prop_assert!(prompt[c.span.clone()].starts_with("@call:"));
            last = c.span.end;
        }
        let same: Vec<String> = calls.iter().map(|c| prompt[c.span.clone()].to_owned()).collect();
        prop_assert_eq!(replace_calls(&prompt, &calls, &same), prompt);
    }

    #[test]
    fn prop_redaction_of_secretish_text_is_idempotent(text in secretish_text()) {
        let (once, _) = redact_text(&text);
        let (twice, more) = redact_text(&once);
        prop_assert_eq!(&twice, &once, "from {:?}", text);
        prop_assert_eq!(more, 0, "from {:?}", text);
    }

    #[test]
    fn prop_redacting_values_with_secret_fields_is_idempotent(
        entries in proptest::collection::vec((prop_oneof![Just("password"), Just("api_key"), Just("token_count"), Just("note"), Just("auth")], prop_oneof![json_value(), secretish_text().prop_map(Value::String)]), 0..6),
    ) {
        let mut v = Value::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<String, Value>>());
        redact(&mut v);
        let mut again = v.clone();
        prop_assert_eq!(redact(&mut again), 0, "{}", v);
        prop_assert_eq!(again, v);
    }

    #[test]
    fn prop_any_module_folder_loads_or_is_refused(
        yaml in prop_oneof!["\\PC{0,200}", yaml_text()], layout in 0usize..3, with_prompt in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (file, text) = match layout {
            0 => ("module.yaml", yaml),
            1 => ("MODULE.md", format!("---\n{yaml}\n---\nPrompt.")),
            _ => ("module.md", format!("---\n{yaml}\n---\n# Title\nPrompt.")),
        };
        std::fs::write(dir.path().join(file), text).unwrap();
        if with_prompt {
            std::fs::write(dir.path().join("prompt.md"), "Answer.").unwrap();
        }
        let _ = noesis_modules::load_dir(dir.path());
    }

    #[test]
    fn prop_any_front_matter_loads_or_is_refused(text in "\\PC{0,200}", yamlish in yaml_text()) {
        for t in [text.clone(), format!("---\n{yamlish}---\nbody"), format!("---\n{text}\n---\n")] {
            let doc: &'static str = Box::leak(t.into_boxed_str());
            for name in ["MODULE.md", "module.md"] {
                let files: &'static [(&'static str, &'static str)] = Box::leak(vec![(name, doc)].into_boxed_slice());
                let _ = load(Source::Embedded { name: "fuzzed", files });
            }
        }
    }

    #[test]
    fn prop_any_schema_document_loads_or_is_refused(
        sections in proptest::collection::vec((prop_oneof![Just("input"), Just("data"), Just("output"), Just("meta"), Just("error"), Just("$defs")], schemaish_value()), 0..4),
        io in proptest::option::of(prop_oneof![Just("#/data"), Just("./schema.json#/nope"), Just("./other.json#/a"), Just("../x.json#/a"), Just("data"), Just("#")]),
    ) {
        let doc = Value::Object(sections.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<String, Value>>());
        let manifest = match io {
            Some(r) => format!("{GOOD_MANIFEST}io:\n  data: '{r}'\n"),
            None => GOOD_MANIFEST.to_owned(),
        };
        let yaml: &'static str = Box::leak(manifest.into_boxed_str());
        let schema: &'static str = Box::leak(doc.to_string().into_boxed_str());
        let files: &'static [(&'static str, &'static str)] = Box::leak(
            vec![("module.yaml", yaml), ("prompt.md", "Answer."), ("schema.json", schema), ("other.json", "{\"a\": {\"type\": \"object\"}}")].into_boxed_slice(),
        );
        if let Ok(m) = load(Source::Embedded { name: "fuzzed", files }) {
            let _ = m.reply_schema();
            let _ = m.summary();
        }
    }
}
