//! SARIF 2.1.0 output, validated against the OASIS schema vendored in
//! `tests/data` (see the README there).

use noesis_review::{Finding, Principle, SARIF_SCHEMA, SarifTool, Severity, repeats, to_sarif};
use serde_json::{Value, json};

use crate::finding;

const SCHEMA: &str = include_str!("data/sarif-2.1.0.schema.json");

const TOOL: SarifTool<'static> =
    SarifTool { name: "noesis", version: "0.1.0", information_uri: Some("https://example.invalid/noesis") };

fn schema() -> Value {
    serde_json::from_str(SCHEMA).expect("the vendored schema is JSON")
}

/// The schema as published (draft-04, as its `$schema` says).
fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&schema()).expect("the SARIF schema compiles")
}

/// The same schema read as draft-07 with formats asserted, so `uri-reference`
/// (unknown to draft-04) is checked too.
fn strict_validator() -> jsonschema::Validator {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .should_validate_formats(true)
        .build(&schema())
        .expect("the SARIF schema compiles as draft-07")
}

fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

fn sample() -> Vec<Finding> {
    vec![
        finding(Severity::Warning, "style", "src/lib.rs", (30, 31), "Long function"),
        finding(Severity::Error, "security", "src/auth.rs", (12, 14), "Token compared with =="),
        finding(Severity::Note, "api-design", "docs/my notes/ü:1.md", (2, 2), "Odd name"),
        finding(Severity::Info, "docs", "README.md", (1, 1), "Readme mentions the old flag"),
        finding(Severity::Warning, "style", "src/main.rs", (3, 3), "Magic number"),
    ]
}

fn principles(findings: &[Finding]) -> Vec<Principle> {
    let f = &findings[1];
    vec![Principle {
        category: f.category().clone(),
        fingerprint: f.fingerprint().to_owned(),
        text: "Seen 3 times (security): Token compared with ==. Resolved when: constant time.".into(),
    }]
}

#[test]
fn output_validates_against_the_oasis_schema() {
    let findings = sample();
    let docs = [
        to_sarif(&TOOL, &findings, &principles(&findings)),
        to_sarif(&TOOL, &findings, &[]),
        to_sarif(&SarifTool { information_uri: None, ..TOOL }, &[], &[]),
    ];
    for doc in &docs {
        assert_eq!(errors(&validator(), doc), Vec::<String>::new(), "{doc:#}");
        assert_eq!(errors(&strict_validator(), doc), Vec::<String>::new(), "{doc:#}");
    }
}

/// A named way to break a document.
type Breakage = (&'static str, fn(&mut Value));

#[test]
fn broken_documents_fail_validation() {
    let good = to_sarif(&TOOL, &sample(), &[]);
    let breakages: Vec<Breakage> = vec![
        ("level fatal", |d| d["runs"][0]["results"][0]["level"] = json!("fatal")),
        ("no version", |d| {
            d.as_object_mut().expect("object").remove("version");
        }),
        ("version 2.0.0", |d| d["version"] = json!("2.0.0")),
        ("startLine 0", |d| {
            d["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = json!(0);
        }),
        ("no message", |d| {
            d["runs"][0]["results"][0].as_object_mut().expect("object").remove("message");
        }),
        ("no driver name", |d| {
            d["runs"][0]["tool"]["driver"].as_object_mut().expect("object").remove("name");
        }),
        ("unknown property", |d| d["runs"][0]["results"][0]["confidence"] = json!(1)),
        ("fingerprint not a string", |d| d["runs"][0]["results"][0]["partialFingerprints"]["noesis/v1"] = json!(7)),
    ];
    for (name, breaking) in breakages {
        let mut doc = good.clone();
        breaking(&mut doc);
        assert!(!validator().is_valid(&doc), "{name} passed the schema");
    }
    // Formats are asserted by the strict reading: a URI with a space is not a URI reference.
    let mut doc = good.clone();
    doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = json!("a b.rs");
    assert!(validator().is_valid(&doc), "draft-04 ignores uri-reference");
    assert!(!strict_validator().is_valid(&doc), "uri-reference is checked");
}

#[test]
fn schema_uri_is_the_vendored_schemas_id() {
    assert_eq!(schema()["id"], json!(SARIF_SCHEMA));
    let doc = to_sarif(&TOOL, &[], &[]);
    assert_eq!(doc["$schema"], json!(SARIF_SCHEMA));
    assert_eq!(doc["version"], json!("2.1.0"));
}

#[test]
fn one_result_exactly() {
    let findings = sample();
    let f = &findings[1];
    let doc = to_sarif(&TOOL, std::slice::from_ref(f), &principles(&findings));
    let fp = f.fingerprint();
    assert_eq!(
        doc,
        json!({
            "$schema": SARIF_SCHEMA,
            "version": "2.1.0",
            "runs": [{
                "tool": {"driver": {
                    "name": "noesis",
                    "version": "0.1.0",
                    "informationUri": "https://example.invalid/noesis",
                    "rules": [{
                        "id": "security",
                        "shortDescription": {"text": "Code that can be abused: injection, unchecked input, leaked secrets, unsafe defaults."}
                    }]
                }},
                "results": [{
                    "ruleId": "security",
                    "ruleIndex": 0,
                    "level": "error",
                    "message": {"text": "Token compared with ==\n\nAbout Token compared with ==.\n\nResolved when: the code no longer does this\n\nRepeats a project principle: Seen 3 times (security): Token compared with ==. Resolved when: constant time."},
                    "locations": [{"physicalLocation": {
                        "artifactLocation": {"uri": "src/auth.rs", "uriBaseId": "%SRCROOT%"},
                        "region": {"startLine": 12, "endLine": 14}
                    }}],
                    "partialFingerprints": {"noesis/v1": fp, "noesisLocation/v1": format!("src/auth.rs#{fp}")},
                    "properties": {
                        "category": "security",
                        "severity": "error",
                        "title": "Token compared with ==",
                        "resolvesWhen": "the code no longer does this",
                        "principle": "Seen 3 times (security): Token compared with ==. Resolved when: constant time."
                    }
                }]
            }]
        })
    );
}

#[test]
fn rules_results_levels_and_uris() {
    let doc = to_sarif(&TOOL, &sample(), &[]);
    let run = &doc["runs"][0];
    let rules: Vec<&str> = run["tool"]["driver"]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(rules, ["api-design", "docs", "security", "style"]);
    let results = run["results"].as_array().expect("results");
    let summary: Vec<(String, String, u64, String)> = results
        .iter()
        .map(|r| {
            let id = r["ruleId"].as_str().expect("ruleId").to_owned();
            let index = r["ruleIndex"].as_u64().expect("ruleIndex");
            assert_eq!(rules[usize::try_from(index).expect("small")], id, "ruleIndex points at the rule");
            let uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().expect("uri");
            (id, r["level"].as_str().expect("level").to_owned(), index, uri.to_owned())
        })
        .collect();
    let expected = [
        ("security", "error", 2, "src/auth.rs"),
        ("style", "warning", 3, "src/lib.rs"),
        ("style", "warning", 3, "src/main.rs"),
        ("api-design", "note", 0, "docs/my%20notes/%C3%BC%3A1.md"),
        ("docs", "none", 1, "README.md"),
    ];
    let expected: Vec<(String, String, u64, String)> =
        expected.iter().map(|(a, b, c, d)| ((*a).to_owned(), (*b).to_owned(), *c, (*d).to_owned())).collect();
    assert_eq!(summary, expected);
    assert_eq!(results[4]["kind"], json!("informational"));
    assert!(results[0].get("kind").is_none());
}

#[test]
fn output_is_deterministic() {
    let findings = sample();
    let principles = principles(&findings);
    let first = serde_json::to_string_pretty(&to_sarif(&TOOL, &findings, &principles)).expect("serialises");
    let again = serde_json::to_string_pretty(&to_sarif(&TOOL, &findings, &principles)).expect("serialises");
    assert_eq!(first, again);
    // No two findings tie in report order, so the input order does not matter either.
    let mut reversed = findings.clone();
    reversed.reverse();
    let mut rotated = findings.clone();
    rotated.rotate_left(2);
    for other in [reversed, rotated] {
        let text = serde_json::to_string_pretty(&to_sarif(&TOOL, &other, &principles)).expect("serialises");
        assert_eq!(first, text);
    }
}

#[test]
fn promotions_feed_sarif_principles() {
    let f = |file: &str| finding(Severity::Warning, "correctness", file, (1, 1), "Unwrap on user input");
    let current = [f("a.rs"), f("b.rs"), f("c.rs")];
    let principles: Vec<Principle> =
        repeats(&[], &current, &[]).iter().map(noesis_review::Promotion::principle).collect();
    let doc = to_sarif(&TOOL, &current, &principles);
    for r in doc["runs"][0]["results"].as_array().expect("results") {
        assert_eq!(r["properties"]["principle"], json!(principles[0].text));
    }
    assert!(validator().is_valid(&doc));
}
