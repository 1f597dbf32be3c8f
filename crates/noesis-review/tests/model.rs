//! Validation of the model's reply: `Finding::from_model`, `parse_reply`, and
//! their agreement with `findings_schema`.

use noesis_review::{Finding, NewFinding, Problem, Severity, findings_schema, parse_reply, to_json};
use serde_json::{Value, json};

fn good() -> Value {
    json!({
        "severity": "warning",
        "category": "correctness",
        "file": "src/config.rs",
        "start_line": 12,
        "end_line": 14,
        "title": "`read_config` unwraps a parse result",
        "message": "A malformed file panics.",
        "resolves_when": "the parse error is returned"
    })
}

/// `good()` with `field` set to `value` (`Value::Null` removes it).
fn with(field: &str, value: Value) -> Value {
    let mut v = good();
    let obj = v.as_object_mut().expect("object");
    if value.is_null() {
        obj.remove(field);
    } else {
        obj.insert(field.to_owned(), value);
    }
    v
}

/// The errors of the finding at index 0, as displayed.
fn errors_of(v: &Value) -> Vec<String> {
    match Finding::from_model(0, v) {
        Ok(f) => panic!("accepted: {f:?}"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_good_finding_is_accepted_and_cleaned() {
    let f = Finding::from_model(0, &good()).expect("valid");
    assert_eq!(f.severity(), Severity::Warning);
    assert_eq!(f.category().as_str(), "correctness");
    assert_eq!((f.file(), f.start_line(), f.end_line()), ("src/config.rs", 12, 14));
    assert_eq!(f.resolves_when(), "the parse error is returned");

    let messy = json!({
        "severity": "note", "category": " Error Handling ", "file": ".\\src\\./x.rs",
        "start_line": 7.0, "end_line": 7,
        "title": "  Swallowed\n error \u{1b}[31mred\u{1b}[0m \u{202E}x ",
        "message": "\r\nfirst line  \r\n\r\n\tsecond\u{7}\r\n\n",
        "resolves_when": "errors\tare logged"
    });
    let f = Finding::from_model(3, &messy).expect("valid");
    assert_eq!(f.category().as_str(), "error-handling");
    assert_eq!(f.file(), "src/x.rs");
    assert_eq!(f.start_line(), 7);
    assert_eq!(f.title(), "Swallowed error [31mred [0m x");
    assert_eq!(f.message(), "first line\n\n    second");
    assert_eq!(f.resolves_when(), "errors are logged");
}

/// One broken field at a time: the error names the finding and the field.
#[test]
fn errors_name_the_field_and_the_index() {
    let cases: Vec<(Value, &str)> = vec![
        (with("resolves_when", Value::Null), "findings[0].resolves_when: missing"),
        (with("start_line", json!("12")), "findings[0].start_line: expected an integer, found a string"),
        (with("start_line", json!(0)), "findings[0].start_line: expected a line number from 1 to 4294967295"),
        (with("start_line", json!(-3)), "findings[0].start_line: expected a line number from 1 to 4294967295"),
        (
            with("end_line", json!(4_294_967_296_u64)),
            "findings[0].end_line: expected a line number from 1 to 4294967295",
        ),
        (with("start_line", json!(1.5)), "findings[0].start_line: expected an integer, found a number"),
        (with("end_line", json!(3)), "findings[0].end_line: 3 is before start_line 12"),
        (with("severity", json!("fatal")), "findings[0].severity: \"fatal\" is not one of error, warning, note, info"),
        (with("severity", json!("Error")), "findings[0].severity: \"Error\" is not one of error, warning, note, info"),
        (with("severity", json!(1)), "findings[0].severity: expected a string, found a number"),
        (with("confidence", json!(0.9)), "findings[0].confidence: not a field of the schema"),
        (with("file", json!("/etc/passwd")), "findings[0].file: must be relative to the project root"),
        (with("file", json!("C:\\src\\x.rs")), "findings[0].file: must be relative to the project root"),
        (with("file", json!("file:///src/x.rs")), "findings[0].file: must be relative to the project root"),
        (with("file", json!("src/../../x.rs")), "findings[0].file: must not leave the project (`..`)"),
        (with("file", json!("./")), "findings[0].file: names no file"),
        (with("file", json!("")), "findings[0].file: empty"),
        (with("title", json!("  \n ")), "findings[0].title: empty"),
        (with("message", json!(null)), "findings[0].message: missing"),
        (with("category", json!("!!!")), "findings[0].category: empty"),
        (json!(3), "findings[0]: expected an object, found a number"),
    ];
    for (value, expected) in cases {
        assert_eq!(errors_of(&value), [expected], "{value}");
    }
}

#[test]
fn every_problem_of_a_finding_is_reported() {
    let v = json!({"severity": "fatal", "file": "/x", "start_line": 0, "end_line": 1, "title": "t",
                   "message": "m", "resolves_when": "r", "extra": true});
    assert_eq!(
        errors_of(&v),
        [
            "findings[0].extra: not a field of the schema",
            "findings[0].severity: \"fatal\" is not one of error, warning, note, info",
            "findings[0].category: missing",
            "findings[0].start_line: expected a line number from 1 to 4294967295",
        ]
    );
    // Once the JSON types are right, the semantic checks all run too.
    let v = json!({"severity": "error", "category": "", "file": "/x", "start_line": 5, "end_line": 1,
                   "title": " ", "message": "m", "resolves_when": "r"});
    assert_eq!(
        errors_of(&v),
        [
            "findings[0].category: empty",
            "findings[0].file: must be relative to the project root",
            "findings[0].title: empty",
            "findings[0].end_line: 1 is before start_line 5",
        ]
    );
}

#[test]
fn parse_reply_keeps_good_findings_and_reports_the_rest() {
    let reply = json!({
        "findings": [good(), with("end_line", json!(1)), good(), "nope"],
        "summary": "Two real issues.\n"
    });
    let (parsed, errors) = parse_reply(&reply);
    assert_eq!(parsed.findings.len(), 2);
    assert_eq!(parsed.summary, "Two real issues.");
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        ["findings[1].end_line: 1 is before start_line 12", "findings[3]: expected an object, found a string"]
    );
    assert_eq!(errors[0].index(), Some(1));
    assert_eq!(errors[0].field(), "end_line");
    assert_eq!(errors[0].pointer(), "/findings/1/end_line");
    assert_eq!(errors[1].pointer(), "/findings/3");
    assert!(matches!(errors[0].problem(), Problem::EndBeforeStart { start: 12, end: 1 }));
}

#[test]
fn reply_level_errors() {
    let cases: Vec<(Value, Vec<(&str, &str)>)> = vec![
        (json!([]), vec![("", "reply: expected an object, found an array")]),
        (json!({"summary": "s"}), vec![("/findings", "findings: missing")]),
        (json!({"findings": []}), vec![("/summary", "summary: missing")]),
        (
            json!({"findings": {}, "summary": 1}),
            vec![
                ("/findings", "findings: expected an array, found an object"),
                ("/summary", "summary: expected a string, found a number"),
            ],
        ),
        (json!({"findings": [], "summary": "", "a/b": 1}), vec![("/a~1b", "a/b: not a field of the schema")]),
    ];
    for (value, expected) in cases {
        let (reply, errors) = parse_reply(&value);
        assert!(reply.findings.is_empty());
        let got: Vec<(String, String)> = errors.iter().map(|e| (e.pointer(), e.to_string())).collect();
        let expected: Vec<(String, String)> = expected.into_iter().map(|(p, m)| (p.to_owned(), m.to_owned())).collect();
        assert_eq!(got, expected, "{value}");
    }
    let (reply, errors) = parse_reply(&json!({"findings": [], "summary": ""}));
    assert!(errors.is_empty() && reply.findings.is_empty() && reply.summary.is_empty());
}

#[test]
fn finding_new_reports_without_an_index() {
    let errors = Finding::new(&NewFinding {
        severity: Severity::Error,
        category: "security".into(),
        file: "../x".into(),
        start_line: 0,
        end_line: 0,
        title: "t".into(),
        message: "m".into(),
        resolves_when: String::new(),
    })
    .unwrap_err();
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "file: must not leave the project (`..`)",
            "resolves_when: empty",
            "start_line: expected a line number from 1 to 4294967295",
            "end_line: expected a line number from 1 to 4294967295",
        ]
    );
    assert!(errors.iter().all(|e| e.index().is_none()));
    assert_eq!(errors[0].pointer(), "/file");
}

/// What the schema accepts, `parse_reply` accepts, and the other way round,
/// except for the checks the schema cannot express (listed at the end).
#[test]
fn schema_and_validation_agree() {
    let schema = findings_schema();
    let validator = jsonschema::validator_for(&schema).expect("the findings schema compiles");
    let reply = |findings: Vec<Value>| json!({"findings": findings, "summary": "s"});
    let agree = [
        (reply(vec![good()]), true),
        (reply(vec![]), true),
        (reply(vec![with("start_line", json!(12.0))]), true),
        (reply(vec![with("category", json!("API Design"))]), true),
        (reply(vec![with("severity", json!("fatal"))]), false),
        (reply(vec![with("title", Value::Null)]), false),
        (reply(vec![with("title", json!(""))]), false),
        (reply(vec![with("start_line", json!(0))]), false),
        (reply(vec![with("start_line", json!(1.5))]), false),
        (reply(vec![with("end_line", json!("3"))]), false),
        (reply(vec![with("extra", json!(1))]), false),
        (reply(vec![json!(null)]), false),
        (json!({"findings": []}), false),
        (json!({"findings": [], "summary": "s", "extra": 1}), false),
        (json!({"findings": [], "summary": null}), false),
        (json!("text"), false),
    ];
    for (value, valid) in agree {
        assert_eq!(validator.is_valid(&value), valid, "schema on {value}");
        assert_eq!(parse_reply(&value).1.is_empty(), valid, "parse_reply on {value}");
    }
    // Valid by the schema, refused by validation.
    let stricter = [
        with("end_line", json!(3)),
        with("file", json!("../outside.rs")),
        with("file", json!("/abs.rs")),
        with("title", json!("   ")),
        with("start_line", json!(5_000_000_000_u64)),
    ];
    for finding in stricter {
        let value = reply(vec![finding]);
        assert!(validator.is_valid(&value), "schema on {value}");
        assert!(!parse_reply(&value).1.is_empty(), "parse_reply on {value}");
    }
}

#[test]
fn schema_shape() {
    let schema = findings_schema();
    assert_eq!(schema["additionalProperties"], json!(false));
    assert_eq!(schema["required"], json!(["findings", "summary"]));
    let item = &schema["properties"]["findings"]["items"];
    assert_eq!(item["additionalProperties"], json!(false));
    let props: Vec<&String> = item["properties"].as_object().expect("properties").keys().collect();
    assert_eq!(props, ["severity", "category", "file", "start_line", "end_line", "title", "message", "resolves_when"]);
    assert_eq!(item["required"], json!(props));
    assert_eq!(item["properties"]["severity"]["enum"], json!(["error", "warning", "note", "info"]));
}

#[test]
fn findings_round_trip_through_json() {
    let f = Finding::from_model(0, &good()).expect("valid");
    let doc = to_json(std::slice::from_ref(&f), "");
    let back: Finding = serde_json::from_value(doc["findings"][0].clone()).expect("deserialises");
    assert_eq!(back, f);
    // The fingerprint is recomputed, never trusted.
    let mut tampered = doc["findings"][0].clone();
    tampered["fingerprint"] = json!("0000000000000000");
    let back: Finding = serde_json::from_value(tampered).expect("deserialises");
    assert_eq!(back.fingerprint(), f.fingerprint());
    // Deserialising validates.
    let mut bad = doc["findings"][0].clone();
    bad["start_line"] = json!(0);
    let err = serde_json::from_value::<Finding>(bad).unwrap_err().to_string();
    assert_eq!(err, "start_line: expected a line number from 1 to 4294967295");
}
