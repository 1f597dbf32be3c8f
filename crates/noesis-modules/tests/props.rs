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
