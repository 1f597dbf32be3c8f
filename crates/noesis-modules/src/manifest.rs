//! `module.yaml`: the typed manifest, its validation, and tier defaults.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

use crate::schema::{CompiledSchema, Violation};

/// A module's tier: how much it may decide on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Auto-executed: strict schema, no overflow, strict enums.
    Exec,
    /// Judgment tasks.
    Decision,
    /// Research and inspiration.
    Exploration,
}

/// How strictly `data` is held to the module's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strictness {
    /// Any data-schema violation is E3001.
    High,
    /// Any data-schema violation is E3001 (after the repair pass).
    Medium,
    /// Data-schema violations are reported in `meta.validation_warnings`
    /// instead of failing the run; envelope rules still hold.
    Low,
}

/// Enum extension strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EnumStrategy {
    /// Only the listed values; a `{custom, reason}` object is E3005.
    Strict,
    /// A listed value or `{custom, reason}`.
    Extensible,
}

/// How `meta.risk` is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskRule {
    /// Max of `data.changes[*].risk`.
    MaxChangesRisk,
    /// Max of `data.issues[*].risk`.
    MaxIssuesRisk,
    /// The model's own `meta.risk`.
    Explicit,
    /// Declared by the module but evaluated by its host; treated as explicit.
    CustomFunction,
}

/// `context: fork|main` or `context: {mode, accepts, emits}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextMode {
    /// The child sees a copy of the parent's context.
    Fork,
    /// The child shares the parent's context.
    #[default]
    Main,
}

/// The typed view of a manifest. Unknown keys are kept in `extra`.
#[derive(Debug, Clone, Deserialize, Default)]
#[allow(missing_docs)] // field names are the spec's
pub struct Manifest {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub responsibility: String,
    pub tier: Option<Tier>,
    pub schema_strictness: Option<Strictness>,
    #[serde(default)]
    pub excludes: Vec<String>,
    #[serde(default)]
    pub policies: BTreeMap<String, String>,
    #[serde(default)]
    pub tools: Option<Tools>,
    #[serde(default)]
    pub overflow: Option<Overflow>,
    #[serde(default)]
    pub enums: Option<Enums>,
    #[serde(default)]
    pub failure: Option<Failure>,
    #[serde(default)]
    pub runtime_requirements: Option<RuntimeRequirements>,
    #[serde(default)]
    pub io: BTreeMap<String, Value>,
    #[serde(default)]
    pub compat: Compat,
    #[serde(default)]
    pub meta: MetaRules,
    #[serde(default)]
    pub tests: Vec<String>,
    #[serde(default)]
    pub context: Option<Value>,
    #[serde(default)]
    pub composition: Option<Value>,
    #[serde(default)]
    pub error_codes: BTreeMap<String, Value>,
    #[serde(default)]
    pub constraints: Value,
    /// Minimum `meta.confidence` for a success (noesis extension); the tier
    /// default applies when absent.
    #[serde(default)]
    pub min_confidence: Option<Value>,
}

#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Tools {
    pub policy: Option<String>,
    #[serde(default)]
    pub allowed: Vec<String>,
    #[serde(default)]
    pub denied: Vec<String>,
}

#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Overflow {
    pub enabled: Option<bool>,
    pub recoverable: Option<bool>,
    pub max_items: Option<u32>,
    pub require_suggested_mapping: Option<bool>,
}

#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Enums {
    pub strategy: Option<EnumStrategy>,
    pub unknown_tag: Option<String>,
}

#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Failure {
    #[serde(default, deserialize_with = "advisory_string")]
    pub contract: Option<String>,
    pub partial_allowed: Option<bool>,
    pub must_return_error_schema: Option<bool>,
}

#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize, Default)]
pub struct RuntimeRequirements {
    pub structured_output: Option<bool>,
    pub max_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "advisory_strings")]
    pub preferred_capabilities: Vec<String>,
}

// Advisory fields (`loader::ADVISORY_FIELDS`) must not refuse a module for
// their shape either: the schema check has already turned a wrong shape
// into a warning, so the typed view keeps what it can use.

/// A string, or `None` for anything else.
fn advisory_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// The strings of a list (a lone string is a list of one); other items and
/// other shapes are dropped.
fn advisory_strings<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => vec![s],
        Value::Array(items) => {
            items.into_iter().filter_map(|v| if let Value::String(s) = v { Some(s) } else { None }).collect()
        }
        _ => Vec::new(),
    })
}

#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Compat {
    #[serde(default)]
    pub accepts_v21_payload: bool,
    #[serde(default)]
    pub runtime_auto_wrap: bool,
    pub schema_output_alias: Option<String>,
}

#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize, Default)]
pub struct MetaRules {
    pub risk_rule: Option<RiskRule>,
}

/// The rules a run applies, after tier defaults and the module's overrides.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Policy {
    /// The module's tier (`decision` when a legacy module names none).
    pub tier: Tier,
    /// Data-schema strictness.
    pub strictness: Strictness,
    /// Whether `data.extensions.insights` may be present.
    pub overflow_enabled: bool,
    /// Maximum number of insights.
    pub max_items: u32,
    /// Whether every insight needs a `suggested_mapping`.
    pub require_suggested_mapping: bool,
    /// Enum strategy.
    pub enums: EnumStrategy,
    /// The key that marks a custom enum value (`custom`).
    pub unknown_tag: String,
    /// How `meta.risk` is derived; `None` means "the default rule" (see
    /// `risk::aggregate`).
    pub risk_rule: Option<RiskRule>,
    /// Successes under this confidence become E2001.
    pub min_confidence: f64,
    /// Whether a failure may carry `partial_data`.
    pub partial_allowed: bool,
    /// Whether v2.1 flat payloads are wrapped into an envelope.
    pub auto_wrap: bool,
}

impl Tier {
    /// The tier's name as written in `module.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Exec => "exec",
            Tier::Decision => "decision",
            Tier::Exploration => "exploration",
        }
    }
}

impl Manifest {
    /// Resolves tier defaults against the module's own settings.
    pub fn policy(&self) -> Policy {
        let tier = self.tier.unwrap_or(Tier::Decision);
        let (strictness, overflow_on, max_items, enums, min_confidence) = match tier {
            Tier::Exec => (Strictness::High, false, 0, EnumStrategy::Strict, 0.7),
            Tier::Decision => (Strictness::Medium, true, 5, EnumStrategy::Extensible, 0.5),
            Tier::Exploration => (Strictness::Low, true, 20, EnumStrategy::Extensible, 0.0),
        };
        let overflow = self.overflow.clone().unwrap_or_default();
        let enums_cfg = self.enums.clone().unwrap_or_default();
        let failure = self.failure.clone().unwrap_or_default();
        let overflow_enabled = overflow.enabled.unwrap_or(overflow_on);
        Policy {
            tier,
            strictness: self.schema_strictness.unwrap_or(strictness),
            overflow_enabled,
            max_items: if overflow_enabled { overflow.max_items.unwrap_or(max_items).min(20) } else { 0 },
            require_suggested_mapping: overflow.recoverable.unwrap_or(true)
                && overflow.require_suggested_mapping.unwrap_or(true),
            enums: enums_cfg.strategy.unwrap_or(enums),
            unknown_tag: enums_cfg.unknown_tag.unwrap_or_else(|| "custom".to_owned()),
            risk_rule: self.meta.risk_rule,
            min_confidence: self.min_confidence.as_ref().and_then(Value::as_f64).unwrap_or(min_confidence),
            partial_allowed: failure.partial_allowed.unwrap_or(true),
            auto_wrap: self.compat.runtime_auto_wrap || self.compat.accepts_v21_payload,
        }
    }

    /// The context mode, from `context: fork|main` or `context.mode`.
    pub fn context_mode(&self) -> ContextMode {
        let mode = match &self.context {
            Some(Value::String(s)) => Some(s.as_str()),
            Some(Value::Object(o)) => o.get("mode").and_then(Value::as_str),
            _ => None,
        };
        match mode {
            Some("fork") => ContextMode::Fork,
            _ => ContextMode::Main,
        }
    }
}

/// The v2.2 manifest schema, as the specification ships it.
const MANIFEST_SCHEMA: &str = include_str!("../spec/module.yaml.schema.json");

/// The JSON Schema validator the verdicts come from: a remembered verdict
/// names it, so an upgrade that judges differently never trusts an old one
/// (a test keeps it equal to `Cargo.lock`'s).
const VALIDATOR: &str = "jsonschema 0.60.2";

fn manifest_schema() -> &'static CompiledSchema {
    static SCHEMA: OnceLock<CompiledSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let doc: Value = serde_json::from_str(MANIFEST_SCHEMA).expect("embedded manifest schema is JSON");
        CompiledSchema::compile(&doc).expect("embedded manifest schema compiles")
    })
}

/// The manifest schema's verdict on `doc`, remembered in the folder
/// `memo` when it is "no violation": compiling that schema costs a short
/// command about a millisecond, and the verdict depends only on the schema,
/// the validator and the document, which the remembered file's name digests.
fn schema_violations(doc: &Value, memo: Option<&Path>) -> Vec<Violation> {
    let Some(dir) = memo else { return manifest_schema().violations(doc) };
    let mut key = blake3::Hasher::new();
    key.update(VALIDATOR.as_bytes());
    key.update(&[0]);
    key.update(MANIFEST_SCHEMA.as_bytes());
    key.update(&[0]);
    key.update(serde_json::to_string(doc).unwrap_or_default().as_bytes());
    let marker = dir.join(key.finalize().to_hex().as_str());
    if marker.is_file() {
        return Vec::new();
    }
    let found = manifest_schema().violations(doc);
    if found.is_empty() {
        // Best effort: a verdict not written costs the next load the check.
        let _ = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&marker, b""));
    }
    found
}

/// Validates a parsed `module.yaml` against the v2.2 manifest schema and
/// returns every violation (empty when valid).
///
/// Two spellings the prose of the specification allows but its JSON Schema
/// does not are accepted: `context: fork|main` as a plain string, and the
/// `iterative` composition pattern.
pub fn validate_manifest(raw: &Value) -> Vec<Violation> {
    validate_manifest_in(raw, None)
}

/// [`validate_manifest`], the schema's verdict remembered in the folder
/// `memo` (see [`crate::search::Found::load_remembering`]); the checks the
/// schema cannot express run every time.
pub fn validate_manifest_in(raw: &Value, memo: Option<&Path>) -> Vec<Violation> {
    let mut doc = raw.clone();
    if let Some(obj) = doc.as_object_mut() {
        if let Some(Value::String(mode)) = obj.get("context").cloned()
            && (mode == "fork" || mode == "main")
        {
            obj.insert("context".to_owned(), serde_json::json!({ "mode": mode }));
        }
        if let Some(Value::Object(comp)) = obj.get_mut("composition")
            && comp.get("pattern").and_then(Value::as_str) == Some("iterative")
        {
            comp.insert("pattern".to_owned(), Value::from("sequential"));
        }
    }
    let mut violations = schema_violations(&doc, memo);
    // What the schema cannot say about `composition` (ranges, paths,
    // conditions, names): each problem once, at its own field.
    if let Some(c) = raw.get("composition")
        && let Err(errors) = crate::composition::Composition::parse(c)
    {
        for e in errors {
            let pointer = e.pointer();
            if !violations.iter().any(|v| v.pointer == pointer) {
                violations.push(Violation { pointer, keyword: "composition".to_owned(), message: e.message });
            }
        }
    }
    if let Some(m) = raw.get("min_confidence")
        && !m.as_f64().is_some_and(|f| (0.0..=1.0).contains(&f))
    {
        violations.push(Violation {
            pointer: "/min_confidence".to_owned(),
            keyword: "range".to_owned(),
            message: format!("{m} is not a number between 0 and 1"),
        });
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(v: Value) -> Manifest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn tier_defaults() {
        let base = json!({"name": "m", "version": "1.0.0", "responsibility": "r"});
        let mut exec = base.clone();
        exec["tier"] = json!("exec");
        let p = manifest(exec).policy();
        assert_eq!(
            (p.strictness, p.overflow_enabled, p.max_items, p.enums),
            (Strictness::High, false, 0, EnumStrategy::Strict)
        );
        let mut dec = base.clone();
        dec["tier"] = json!("decision");
        let p = manifest(dec).policy();
        assert_eq!(
            (p.strictness, p.overflow_enabled, p.max_items, p.enums),
            (Strictness::Medium, true, 5, EnumStrategy::Extensible)
        );
        let mut exp = base;
        exp["tier"] = json!("exploration");
        exp["overflow"] = json!({"max_items": 3});
        exp["enums"] = json!({"strategy": "strict"});
        let p = manifest(exp).policy();
        assert_eq!(
            (p.strictness, p.overflow_enabled, p.max_items, p.enums),
            (Strictness::Low, true, 3, EnumStrategy::Strict)
        );
    }

    #[test]
    fn manifest_violations_name_field_and_rule() {
        let v = validate_manifest(&json!({
            "name": "Bad_Name", "version": "1", "responsibility": "r", "tier": "boss"
        }));
        let got: Vec<_> = v.iter().map(|v| (v.pointer.as_str(), v.keyword.as_str())).collect();
        assert!(got.contains(&("/name", "pattern")), "{got:?}");
        assert!(got.contains(&("/version", "pattern")), "{got:?}");
        assert!(got.contains(&("/tier", "enum")), "{got:?}");
        let v = validate_manifest(&json!({"name": "ok"}));
        assert!(v.iter().any(|v| v.pointer == "/tier" && v.keyword == "required"));
    }

    #[test]
    fn only_a_clean_schema_verdict_is_remembered_and_code_checks_still_run() {
        let memo = tempfile::tempdir().unwrap();
        let remembered = || std::fs::read_dir(memo.path()).map(Iterator::count).unwrap_or(0);
        let good = json!({"name": "m", "version": "1.0.0", "responsibility": "r", "tier": "exec"});
        assert!(validate_manifest_in(&good, Some(memo.path())).is_empty());
        assert_eq!(remembered(), 1);
        assert!(validate_manifest_in(&good, Some(memo.path())).is_empty(), "from the memo");
        let bad = json!({"name": "Bad_Name", "version": "1.0.0", "responsibility": "r", "tier": "exec"});
        for _ in 0..2 {
            let v = validate_manifest_in(&bad, Some(memo.path()));
            assert!(v.iter().any(|v| v.pointer == "/name"), "{v:?}");
        }
        assert_eq!(remembered(), 1, "a violation is never remembered");
        // The schema passes this one; the composition check (code, not
        // schema) still runs when its verdict is remembered.
        let composed = json!({"name": "m", "version": "1.0.0", "responsibility": "r", "tier": "exec",
                              "composition": {"requires": [{"name": "a", "version": "^two"}]}});
        let first = validate_manifest_in(&composed, Some(memo.path()));
        let again = validate_manifest_in(&composed, Some(memo.path()));
        assert_eq!(first, again);
        assert!(again.iter().any(|v| v.pointer == "/composition/requires/0/version"), "{again:?}");
        // A memo that cannot be written costs only the check.
        let file = memo.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        assert!(validate_manifest_in(&good, Some(&file.join("sub"))).is_empty());
    }

    #[test]
    fn the_remembered_verdicts_name_the_validator_in_the_lockfile() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).unwrap();
        let at = lock.find("name = \"jsonschema\"\nversion = \"").expect("jsonschema in Cargo.lock");
        let version = lock[at..].split('"').nth(3).unwrap();
        assert_eq!(VALIDATOR, format!("jsonschema {version}"), "update VALIDATOR with the jsonschema upgrade");
    }

    #[test]
    fn composition_problems_are_manifest_violations() {
        let v = validate_manifest(&json!({
            "name": "m", "version": "1.0.0", "responsibility": "r", "tier": "exec",
            "composition": {"requires": [{"name": "a", "version": "^two"}], "pattern": "loop",
                            "dataflow": [{"from": "input", "to": "a", "condition": "$.x = 1"}]}
        }));
        let got: Vec<_> = v.iter().map(|v| v.pointer.as_str()).collect();
        assert!(got.contains(&"/composition/requires/0/version"), "{v:?}");
        assert!(got.contains(&"/composition/dataflow/0/condition"), "{v:?}");
        assert_eq!(got.iter().filter(|p| **p == "/composition/pattern").count(), 1, "{v:?}");
    }

    #[test]
    fn context_string_and_iterative_are_accepted() {
        let v = validate_manifest(&json!({
            "name": "m", "version": "1.0.0", "responsibility": "r", "tier": "exec",
            "context": "fork", "composition": {"pattern": "iterative"}
        }));
        assert!(v.is_empty(), "{v:?}");
        let m = manifest(json!({"name": "m", "version": "1.0.0", "responsibility": "r", "context": "fork"}));
        assert_eq!(m.context_mode(), ContextMode::Fork);
    }
}
