//! SARIF 2.1.0 output, for code-scanning services and editors.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::finding::{Category, Finding, Severity};
use crate::fingerprint::FINGERPRINT_VERSION;
use crate::promote::Principle;
use crate::render::report_order;

/// The `$schema` of the output: the OASIS SARIF 2.1.0 schema with errata 01,
/// the one the tests validate against.
pub const SARIF_SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The SARIF version written.
pub const SARIF_VERSION: &str = "2.1.0";

/// The key of the [location key](crate::location_key) in `partialFingerprints`
/// (next to [`FINGERPRINT_VERSION`], the key of the fingerprint).
pub const LOCATION_KEY_VERSION: &str = "noesisLocation/v1";

/// The `uriBaseId` of every artifact location: paths are relative to the
/// project root, which the consumer supplies (the usual SARIF name for it).
pub const SRCROOT: &str = "%SRCROOT%";

/// The tool named in the SARIF run (`tool.driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SarifTool<'a> {
    /// `driver.name`, e.g. `"noesis"`.
    pub name: &'a str,
    /// `driver.version`.
    pub version: &'a str,
    /// `driver.informationUri`, an absolute URI, if any.
    pub information_uri: Option<&'a str>,
}

/// One SARIF 2.1.0 log with one run holding `findings`.
///
/// - `tool.driver.rules`: one rule per category present, sorted by id
///   (the category), with the category's description; `ruleIndex` points there.
/// - each result, in [report order](crate::report_order): `ruleId`,
///   `ruleIndex`, `level` ([`Severity::sarif_level`]; info is `none` with
///   kind `informational`), `message.text` (title, message, the resolve
///   condition), one location (`uri` relative and percent-encoded, `uriBaseId`
///   [`SRCROOT`], `region.startLine`/`endLine`), `partialFingerprints`
///   ([`FINGERPRINT_VERSION`] → fingerprint, [`LOCATION_KEY_VERSION`] →
///   location key) and `properties` (category, severity, title, `resolvesWhen`).
/// - a result whose category and fingerprint match one of `principles` gets
///   its text in `properties.principle` and at the end of the message.
///
/// The same arguments always give the same document (keys in a fixed order,
/// no time or ids).
#[must_use]
pub fn to_sarif(tool: &SarifTool<'_>, findings: &[Finding], principles: &[Principle]) -> Value {
    let mut rule_index: BTreeMap<&Category, usize> = findings.iter().map(|f| (f.category(), 0)).collect();
    let mut rules = Vec::with_capacity(rule_index.len());
    for (i, (category, index)) in rule_index.iter_mut().enumerate() {
        *index = i;
        rules.push(json!({
            "id": category.as_str(),
            "shortDescription": {"text": category.description()},
        }));
    }
    let results: Vec<Value> = report_order(findings)
        .into_iter()
        .map(|f| {
            let principle = principles
                .iter()
                .find(|p| p.category == *f.category() && p.fingerprint == f.fingerprint())
                .map(|p| p.text.as_str());
            result(f, rule_index.get(f.category()).copied().unwrap_or(0), principle)
        })
        .collect();
    let mut driver = Map::new();
    driver.insert("name".into(), json!(tool.name));
    driver.insert("version".into(), json!(tool.version));
    if let Some(uri) = tool.information_uri {
        driver.insert("informationUri".into(), json!(uri));
    }
    driver.insert("rules".into(), Value::Array(rules));
    json!({
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": driver},
            "results": results,
        }],
    })
}

fn result(f: &Finding, rule_index: usize, principle: Option<&str>) -> Value {
    let mut text = format!("{}\n\n{}\n\nResolved when: {}", f.title(), f.message(), f.resolves_when());
    if let Some(p) = principle {
        text.push_str("\n\nRepeats a project principle: ");
        text.push_str(p);
    }
    let mut r = Map::new();
    r.insert("ruleId".into(), json!(f.category().as_str()));
    r.insert("ruleIndex".into(), json!(rule_index));
    if f.severity() == Severity::Info {
        r.insert("kind".into(), json!("informational"));
    }
    r.insert("level".into(), json!(f.severity().sarif_level()));
    r.insert("message".into(), json!({"text": text}));
    r.insert(
        "locations".into(),
        json!([{
            "physicalLocation": {
                "artifactLocation": {"uri": uri_path(f.file()), "uriBaseId": SRCROOT},
                "region": {"startLine": f.start_line(), "endLine": f.end_line()},
            }
        }]),
    );
    r.insert(
        "partialFingerprints".into(),
        json!({FINGERPRINT_VERSION: f.fingerprint(), LOCATION_KEY_VERSION: f.location_key()}),
    );
    let mut props = Map::new();
    props.insert("category".into(), json!(f.category().as_str()));
    props.insert("severity".into(), json!(f.severity().as_str()));
    props.insert("title".into(), json!(f.title()));
    props.insert("resolvesWhen".into(), json!(f.resolves_when()));
    if let Some(p) = principle {
        props.insert("principle".into(), json!(p));
    }
    r.insert("properties".into(), Value::Object(props));
    Value::Object(r)
}

/// A relative path as a URI reference: every byte other than unreserved
/// characters, `/` and the sub-delimiters is percent-encoded (so are `:`,
/// which could read as a scheme, and `%` itself).
fn uri_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=@".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}
