//! Rewriting a v0, v1, v2.0 or v2.1 module as v2.2.
//!
//! Pure: the caller reads the module's files and writes the result; this
//! module only computes the new `module.yaml`, `prompt.md` and `schema.json`
//! and says, in plain words, what changed.
//!
//! The migrated module must behave as the original did under this runtime:
//! the prompt is the exact text the loader used, the tier defaults the
//! loader applied are written out, and since every legacy module was
//! auto-wrapped (`policy.auto_wrap`), the migrated one says so in `compat`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::loader::{Format, Module, split_front_matter};
use crate::manifest::validate_manifest;
use crate::schema::Violation;

/// The files a migration reads, when present: every file any layout keeps
/// its manifest, prompt or schemas in.
pub const MIGRATION_INPUTS: &[&str] = &[
    "module.yaml",
    "prompt.md",
    "schema.json",
    "MODULE.md",
    "module.md",
    "prompt.txt",
    "constraints.yaml",
    "input.schema.json",
    "output.schema.json",
];

/// The text of a module's files, by path relative to the module folder.
pub type ModuleFiles = BTreeMap<String, String>;

/// The v2.2 rewrite of one module.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    /// The module's name.
    pub name: String,
    /// The layout it was written in.
    pub from: Format,
    /// The files of the v2.2 module, relative path and contents:
    /// `module.yaml`, `prompt.md`, `schema.json`.
    pub write: Vec<(String, String)>,
    /// Legacy files whose content now lives in the new files; they are not
    /// carried over.
    pub remove: Vec<String>,
    /// What changed, one human-readable line each.
    pub changes: Vec<String>,
}

/// Why a module cannot be migrated. Every variant names the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MigrateError {
    /// A file the module's layout needs was not given.
    #[error("{file}: missing")]
    Missing {
        /// The file, relative to the module folder.
        file: String,
    },
    /// The manifest source is not YAML (or not a mapping).
    #[error("{file}: invalid YAML: {message}")]
    Yaml {
        /// The file.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// The manifest would still break the v2.2 manifest schema: something
    /// only a person can decide (a name with capitals, a malformed version).
    #[error("{file}: cannot be migrated without a manual fix:{}", crate::loader::list(violations))]
    Manifest {
        /// The file the offending fields come from.
        file: String,
        /// Every violation, with field and rule.
        violations: Vec<Violation>,
    },
    /// The YAML written would not read back as the manifest computed; a bug
    /// here, reported rather than written.
    #[error("module.yaml: the rewritten manifest does not read back as computed ({0}); please report this")]
    RoundTrip(String),
}

/// The order keys take in a `module.yaml` written from scratch; other keys
/// follow in their original order.
const KEY_ORDER: &[&str] = &[
    "name",
    "version",
    "responsibility",
    "tier",
    "schema_strictness",
    "excludes",
    "policies",
    "tools",
    "overflow",
    "enums",
    "failure",
    "runtime_requirements",
    "io",
    "compat",
    "meta",
    "context",
    "composition",
    "invocation",
    "error_codes",
    "constraints",
    "min_confidence",
    "tests",
];

const SECTIONS: [&str; 4] = ["input", "data", "meta", "error"];

/// Computes the v2.2 rewrite of `module`, whose files are `files`.
/// `Ok(None)`: the module is already v2.2.
///
/// # Errors
/// A file the layout needs is missing or unreadable as YAML, or the result
/// would still break the manifest schema (see [`MigrateError`]).
pub fn migrate(module: &Module, files: &ModuleFiles) -> Result<Option<Migration>, MigrateError> {
    if module.format == Format::V22 {
        return Ok(None);
    }
    let mut changes = vec![format!("format {} → v2.2", module.format)];
    let mut remove = Vec::new();
    let need = |file: &str| files.get(file).ok_or_else(|| MigrateError::Missing { file: file.to_owned() });
    // The manifest's source text, and the file it comes from.
    let (source_file, base_text) = match module.format {
        Format::V22 | Format::V21 | Format::V20 => ("module.yaml", need("module.yaml")?.clone()),
        Format::V1 => {
            let text = need("MODULE.md")?;
            let (front, _) = split_front_matter(text).ok_or_else(|| MigrateError::Yaml {
                file: "MODULE.md".to_owned(),
                message: "missing YAML front matter between `---` lines".to_owned(),
            })?;
            remove.push("MODULE.md".to_owned());
            changes.push("module.yaml: from the front matter of MODULE.md".to_owned());
            ("MODULE.md", front.to_owned())
        }
        Format::V0 => {
            let text = need("module.md")?;
            remove.push("module.md".to_owned());
            for f in ["prompt.txt", "constraints.yaml", "input.schema.json", "output.schema.json"] {
                if files.contains_key(f) {
                    remove.push(f.to_owned());
                }
            }
            match split_front_matter(text) {
                Some((front, _)) => {
                    changes.push("module.yaml: from the front matter of module.md".to_owned());
                    ("module.md", front.to_owned())
                }
                None => {
                    changes.push("module.yaml: written from scratch (module.md has no front matter)".to_owned());
                    ("module.md", String::new())
                }
            }
        }
    };
    let base = parse_mapping(source_file, &base_text)?;
    let mut m = base.clone();
    fill_identity(module, &mut m, &mut changes);
    if module.format == Format::V0
        && module.manifest.constraints.is_object()
        && m.get("constraints") != Some(&module.manifest.constraints)
    {
        m.insert("constraints".into(), module.manifest.constraints.clone());
        changes.push("constraints: from constraints.yaml".to_owned());
    }
    fill_policy(module, &mut m, &mut changes);

    let mut schema = module.schema.as_object().cloned().unwrap_or_default();
    let original_schema = files.get("schema.json").and_then(|t| serde_json::from_str::<Value>(t).ok());
    fill_schema(module, &mut m, &mut schema, &mut changes);
    let schema = Value::Object(schema);
    let schema_text = match (module.format, files.get("schema.json")) {
        // Untouched: keep the author's formatting.
        (Format::V21 | Format::V20 | Format::V1, Some(text)) if original_schema.as_ref() == Some(&schema) => {
            text.clone()
        }
        (Format::V0, Some(_)) => {
            changes.push("schema.json: replaced (a v0 module takes its schemas from input.schema.json and output.schema.json; the old schema.json was never read)".to_owned());
            pretty(&schema)
        }
        _ => pretty(&schema),
    };

    let manifest = Value::Object(m);
    let violations = validate_manifest(&manifest);
    if !violations.is_empty() {
        return Err(MigrateError::Manifest { file: source_file.to_owned(), violations });
    }
    let yaml = manifest_text(&base, &base_text, &manifest, module.format, &mut changes)?;

    prompt_note(module, files, &mut changes);
    for f in &remove {
        changes.push(format!("removed {f} (its content now lives in module.yaml, prompt.md and schema.json)"));
    }
    Ok(Some(Migration {
        name: module.name.clone(),
        from: module.format,
        write: vec![
            ("module.yaml".to_owned(), yaml),
            ("prompt.md".to_owned(), module.prompt.clone()),
            ("schema.json".to_owned(), schema_text),
        ],
        remove,
        changes,
    }))
}

fn parse_mapping(file: &str, text: &str) -> Result<Map<String, Value>, MigrateError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    let value: Value = serde_saphyr::from_str(text)
        .map_err(|e| MigrateError::Yaml { file: file.to_owned(), message: e.to_string() })?;
    match value {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        _ => Err(MigrateError::Yaml { file: file.to_owned(), message: "not a mapping".to_owned() }),
    }
}

/// `name`, `version`, `responsibility`: required in v2.2, often absent or
/// loose in legacy layouts.
fn fill_identity(module: &Module, m: &mut Map<String, Value>, changes: &mut Vec<String>) {
    if !m.contains_key("name") {
        m.insert("name".into(), json!(module.name));
        changes.push(format!("name: {} (from the folder name)", module.name));
    }
    match m.get("version").cloned() {
        None => {
            m.insert("version".into(), json!("1.0.0"));
            changes.push("version: 1.0.0 (none was given)".to_owned());
        }
        Some(v) => {
            if let Some(fixed) = normalise_version(&v) {
                changes.push(format!("version: {v} written as {fixed}"));
                m.insert("version".into(), json!(fixed));
            }
        }
    }
    let responsibility = m.get("responsibility").and_then(Value::as_str).map(str::to_owned);
    match responsibility {
        None if !m.contains_key("responsibility") => {
            let text = if module.manifest.responsibility.trim().is_empty() {
                first_line(&module.prompt).unwrap_or_else(|| module.name.clone())
            } else {
                module.manifest.responsibility.clone()
            };
            let text = crate::truncate_chars(&text, 200);
            changes.push(format!("responsibility: \"{text}\" (from the first line of the prompt)"));
            m.insert("responsibility".into(), json!(text));
        }
        Some(r) if r.chars().count() > 200 => {
            m.insert("responsibility".into(), json!(crate::truncate_chars(&r, 200)));
            changes.push("responsibility: cut to the 200 characters v2.2 allows".to_owned());
        }
        _ => {}
    }
}

fn first_line(text: &str) -> Option<String> {
    text.lines().map(|l| l.trim_start_matches('#').trim()).find(|l| !l.is_empty()).map(str::to_owned)
}

/// `1.0` → `1.0.0`, `v2` → `2.0.0`; `None` when already `x.y.z` or when no
/// rule applies (the manifest check then names the field).
fn normalise_version(v: &Value) -> Option<String> {
    let text = match v {
        Value::String(s) => s.trim().trim_start_matches('v').to_owned(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty()
        || parts.len() > 3
        || !parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let mut parts: Vec<String> = parts.iter().map(|p| (*p).to_owned()).collect();
    while parts.len() < 3 {
        parts.push("0".to_owned());
    }
    let fixed = parts.join(".");
    (Value::String(fixed.clone()) != *v).then_some(fixed)
}

fn name_of<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn text_of<T: serde::Serialize>(v: T) -> String {
    name_of(v).as_str().unwrap_or_default().to_owned()
}

/// The tier and the defaults the loader applied, written out, so the
/// module behaves the same once the defaults stop being implicit.
fn fill_policy(module: &Module, m: &mut Map<String, Value>, changes: &mut Vec<String>) {
    let p = &module.policy;
    if !m.contains_key("tier") {
        m.insert("tier".into(), json!(p.tier.as_str()));
        changes.push(format!("tier: {} (the tier the runtime gave a module without one)", p.tier.as_str()));
    }
    if !m.contains_key("schema_strictness") {
        m.insert("schema_strictness".into(), name_of(p.strictness));
        changes.push(format!("schema_strictness: {} (the tier default, now explicit)", text_of(p.strictness)));
    }
    let overflow = json!({
        "enabled": p.overflow_enabled,
        "recoverable": true,
        "max_items": p.max_items,
        "require_suggested_mapping": true,
    });
    if fill_object(m, "overflow", &overflow) {
        changes.push(format!(
            "overflow: enabled {}, max_items {} (the tier defaults, now explicit)",
            p.overflow_enabled, p.max_items
        ));
    }
    if fill_object(m, "enums", &json!({ "strategy": name_of(p.enums) })) {
        changes.push(format!("enums: strategy {} (the tier default, now explicit)", text_of(p.enums)));
    }
    // Every legacy module had its flat v2.1 payloads wrapped, whatever its
    // compat said; a v2.2 module only when it asks.
    const WRAP_NOTE: &str =
        "(legacy modules were always auto-wrapped; set it false once the prompt asks for the v2.2 envelope)";
    match m.get_mut("compat") {
        None => {
            m.insert(
                "compat".into(),
                json!({"accepts_v21_payload": true, "runtime_auto_wrap": true, "schema_output_alias": "data"}),
            );
            changes.push(format!("compat: runtime_auto_wrap true {WRAP_NOTE}"));
        }
        Some(Value::Object(c)) => {
            let wraps =
                c.get("runtime_auto_wrap") == Some(&json!(true)) || c.get("accepts_v21_payload") == Some(&json!(true));
            if !wraps {
                c.insert("runtime_auto_wrap".into(), json!(true));
                changes.push(format!("compat: runtime_auto_wrap true {WRAP_NOTE}"));
            }
            if c.get("schema_output_alias") == Some(&json!("output")) {
                c.insert("schema_output_alias".into(), json!("data"));
                changes.push("compat: schema_output_alias data (schema.json's `output` is now `data`)".to_owned());
            }
        }
        // Not a mapping: the manifest check names it.
        Some(_) => {}
    }
}

/// Adds `key: defaults`, or the default sub-keys an existing mapping lacks.
/// Whether anything was added.
fn fill_object(m: &mut Map<String, Value>, key: &str, defaults: &Value) -> bool {
    let Some(defaults) = defaults.as_object() else { return false };
    match m.get_mut(key) {
        None => {
            m.insert(key.to_owned(), Value::Object(defaults.clone()));
            true
        }
        Some(Value::Object(existing)) => {
            let mut added = false;
            for (k, v) in defaults {
                if !existing.contains_key(k) {
                    existing.insert(k.clone(), v.clone());
                    added = true;
                }
            }
            added
        }
        // Not a mapping: the manifest check names it.
        Some(_) => false,
    }
}

fn standard_section(section: &str) -> Value {
    match section {
        "input" => json!({"type": "object"}),
        "data" => json!({
            "type": "object",
            "required": ["rationale"],
            "properties": {"rationale": {"type": "string"}}
        }),
        "meta" => json!({
            "type": "object",
            "required": ["confidence", "risk", "explain"],
            "properties": {
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "risk": {"type": "string", "enum": ["none", "low", "medium", "high"]},
                "explain": {"type": "string", "maxLength": 280}
            }
        }),
        _ => json!({
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}}
        }),
    }
}

/// `output` → `data`, the four sections present, and `io` naming them.
fn fill_schema(
    module: &Module,
    m: &mut Map<String, Value>,
    schema: &mut Map<String, Value>,
    changes: &mut Vec<String>,
) {
    if schema.contains_key("output") {
        if schema.contains_key("data") {
            changes.push(
                "schema.json: has both `data` and `output`; `output` was never read and is left as it is".to_owned(),
            );
        } else {
            *schema =
                schema.iter().map(|(k, v)| (if k == "output" { "data" } else { k }.to_owned(), v.clone())).collect();
            changes.push("schema.json: `output` renamed to `data`".to_owned());
        }
    }
    if module.format == Format::V0 {
        let from: Vec<&str> = [("input", "input.schema.json"), ("data", "output.schema.json")]
            .iter()
            .filter(|(s, _)| schema.contains_key(*s))
            .map(|(_, f)| *f)
            .collect();
        if !from.is_empty() {
            changes.push(format!("schema.json: folded in {}", from.join(" and ")));
        }
    }
    let mut io = match m.get("io") {
        Some(Value::Object(io)) => io.clone(),
        _ => Map::new(),
    };
    let had_io = m.contains_key("io");
    if io.contains_key("output") && !io.contains_key("data") {
        io = io.into_iter().map(|(k, v)| (if k == "output" { "data".to_owned() } else { k }, v)).collect();
        changes.push("io: `output` renamed to `data`".to_owned());
    }
    for v in io.values_mut() {
        if let Value::String(s) = v
            && let Some(file) = s.strip_suffix("#/output").map(str::to_owned)
            && matches!(file.as_str(), "" | "./schema.json" | "schema.json")
        {
            *s = format!("{file}#/data");
            changes.push(format!("io: `{file}#/output` now `{file}#/data`"));
        }
    }
    for section in SECTIONS {
        let elsewhere = io.get(section).and_then(Value::as_str).is_some_and(|r| {
            let file = r.split_once('#').map_or(r, |(f, _)| f);
            !matches!(file, "" | "./schema.json" | "schema.json")
        });
        if !elsewhere && !schema.contains_key(section) {
            schema.insert(section.to_owned(), standard_section(section));
            changes.push(format!(
                "schema.json: added `{section}` ({})",
                match section {
                    "input" => "any object, as before",
                    "data" => "requires only `rationale`, as before",
                    "meta" => "confidence, risk and explain, as the envelope already required",
                    _ => "code and message, as the envelope already required",
                }
            ));
        }
        if !io.contains_key(section) {
            io.insert(section.to_owned(), json!(format!("./schema.json#/{section}")));
        }
    }
    let new_io = Value::Object(io);
    if m.get("io") != Some(&new_io) {
        if !had_io {
            changes.push("io: names the four sections of schema.json".to_owned());
        }
        m.insert("io".into(), new_io);
    }
}

fn prompt_note(module: &Module, files: &ModuleFiles, changes: &mut Vec<String>) {
    let note = match module.format {
        Format::V22 | Format::V21 | Format::V20 => "prompt.md: unchanged".to_owned(),
        Format::V1 => {
            let body = files.get("MODULE.md").and_then(|t| split_front_matter(t)).map(|(_, b)| b).unwrap_or_default();
            if body == module.prompt {
                "prompt.md: the body of MODULE.md, byte for byte".to_owned()
            } else {
                "prompt.md: the body of MODULE.md as the runtime used it (the blank lines before it dropped)".to_owned()
            }
        }
        Format::V0 if files.contains_key("prompt.txt") => "prompt.md: prompt.txt, byte for byte".to_owned(),
        Format::V0 => "prompt.md: the text of module.md as the runtime used it".to_owned(),
    };
    changes.push(note);
    if matches!(module.format, Format::V1 | Format::V0) && files.contains_key("prompt.md") {
        changes.push("prompt.md: the old prompt.md was never read by this layout and is replaced".to_owned());
    }
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// The new `module.yaml`. When the migration only adds top-level keys to an
/// existing `module.yaml`, they are appended so the author's comments and
/// layout survive; otherwise the manifest is written afresh.
fn manifest_text(
    base: &Map<String, Value>,
    base_text: &str,
    manifest: &Value,
    format: Format,
    changes: &mut Vec<String>,
) -> Result<String, MigrateError> {
    let Some(target) = manifest.as_object() else { return Err(MigrateError::RoundTrip("not a mapping".into())) };
    let only_appended = matches!(format, Format::V21 | Format::V20)
        && base.iter().all(|(k, v)| target.get(k) == Some(v))
        && target.keys().zip(base.keys()).all(|(a, b)| a == b);
    if only_appended {
        let added: Map<String, Value> =
            target.iter().filter(|(k, _)| !base.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut text = base_text.to_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "\n# Added by noesis migrate ({format} → v2.2): the defaults this module ran with, now explicit.\n"
        ));
        emit_map(&mut text, &added, 0);
        // A trailing `...` or a flow mapping would swallow the appended
        // keys: only keep the text if it reads back as computed.
        if reads_back(&text, manifest).is_ok() {
            return Ok(text);
        }
    }
    let mut ordered = Map::new();
    for k in KEY_ORDER {
        if let Some(v) = target.get(*k) {
            ordered.insert((*k).to_owned(), v.clone());
        }
    }
    for (k, v) in target {
        if !ordered.contains_key(k) {
            ordered.insert(k.clone(), v.clone());
        }
    }
    let mut text = format!("# Cognitive Module v2.2 (migrated from {format} by noesis migrate)\n");
    emit_map(&mut text, &ordered, 0);
    reads_back(&text, manifest)?;
    if base_text.lines().any(|l| l.trim_start().starts_with('#')) {
        changes.push(
            "module.yaml: written afresh; the comments of the original manifest were not kept (the backup has them)"
                .to_owned(),
        );
    }
    Ok(text)
}

fn reads_back(text: &str, manifest: &Value) -> Result<(), MigrateError> {
    let back: Value = serde_saphyr::from_str(text).map_err(|e| MigrateError::RoundTrip(e.to_string()))?;
    if &back == manifest { Ok(()) } else { Err(MigrateError::RoundTrip(format!("read back {back}"))) }
}

// ---------------------------------------------------------------- YAML out

fn emit_map(out: &mut String, map: &Map<String, Value>, indent: usize) {
    for (k, v) in map {
        out.push_str(&" ".repeat(indent));
        out.push_str(&scalar_text(k));
        out.push(':');
        emit_value(out, v, indent);
    }
}

/// Writes `v` after a `key:` or `-` already on the line.
fn emit_value(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            emit_map(out, m, indent + 2);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            emit_seq(out, a, indent + 2);
        }
        _ => {
            out.push(' ');
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
}

fn emit_seq(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        match item {
            Value::Object(m) if !m.is_empty() => {
                // The first key shares the dash's line.
                let mut inner = String::new();
                emit_map(&mut inner, m, indent + 2);
                out.push_str(&" ".repeat(indent));
                out.push_str("- ");
                out.push_str(&inner[indent + 2..]);
            }
            _ => {
                out.push_str(&" ".repeat(indent));
                out.push('-');
                emit_value(out, item, indent);
            }
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => scalar_text(s),
        Value::Object(_) => "{}".to_owned(),
        Value::Array(_) => "[]".to_owned(),
        other => other.to_string(),
    }
}

/// A string as a plain YAML scalar when that reads back as the same string,
/// else double-quoted (JSON's escapes are YAML's).
fn scalar_text(s: &str) -> String {
    if is_plain(s) { s.to_owned() } else { serde_json::to_string(s).unwrap_or_default() }
}

fn is_plain(s: &str) -> bool {
    let Some(first) = s.chars().next() else { return false };
    let special = ["null", "true", "false", "yes", "no", "on", "off", "y", "n", "~"];
    (first.is_ascii_alphabetic() || first == '_' || first == '/' || first == '.')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || " _-./#:(),'".contains(c))
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.ends_with([':', ' '])
        && !special.contains(&s.to_ascii_lowercase().as_str())
        && s.parse::<f64>().is_err()
        && !s.to_ascii_lowercase().starts_with(".inf")
        && !s.to_ascii_lowercase().starts_with(".nan")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::{Source, load};

    /// Loads the module made of `files` (as the loader sees a folder) and
    /// migrates it.
    fn run(files: &[(&str, &str)]) -> (Module, Migration) {
        let leaked: &'static [(&'static str, &'static str)] = Box::leak(
            files
                .iter()
                .map(|(p, c)| {
                    (&*Box::leak((*p).to_owned().into_boxed_str()), &*Box::leak((*c).to_owned().into_boxed_str()))
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let module = load(Source::Embedded { name: "legacy", files: leaked }).unwrap();
        let map: ModuleFiles = files.iter().map(|(p, c)| ((*p).to_owned(), (*c).to_owned())).collect();
        let migration = migrate(&module, &map).unwrap().expect("not v2.2");
        (module, migration)
    }

    /// The migration's files, loaded as a module.
    fn reload(m: &Migration) -> Module {
        let leaked: &'static [(&'static str, &'static str)] = Box::leak(
            m.write
                .iter()
                .map(|(p, c)| (&*Box::leak(p.clone().into_boxed_str()), &*Box::leak(c.clone().into_boxed_str())))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        load(Source::Embedded { name: "migrated", files: leaked }).unwrap()
    }

    fn file<'a>(m: &'a Migration, name: &str) -> &'a str {
        &m.write.iter().find(|(p, _)| p == name).unwrap().1
    }

    fn yaml(m: &Migration) -> Value {
        serde_saphyr::from_str(file(m, "module.yaml")).unwrap()
    }

    /// The migrated module runs under the same rules and prompt.
    fn assert_equivalent(before: &Module, after: &Module) {
        assert_eq!(after.format, Format::V22);
        assert_eq!(after.prompt, before.prompt, "prompt changed");
        assert_eq!(after.policy, before.policy, "rules changed");
        assert_eq!(after.name, before.name);
        for s in SECTIONS {
            assert!(after.schema.get(s).is_some(), "no {s} section");
        }
    }

    const V21: &str = "# Hand-written manifest\nname: greeter\nversion: 1.2.0\nresponsibility: Greets people\n\npolicies:\n  network: deny\nfailure:\n  contract: error_union\ntests:\n  - tests/a.input.json -> tests/a.expected.json\n";
    const SCHEMA_OUTPUT: &str = r#"{
  "input": {"type": "object", "properties": {"who": {"type": "string"}}},
  "output": {"type": "object", "required": ["greeting", "rationale"], "properties": {"greeting": {"type": "string"}, "rationale": {"type": "string"}}}
}"#;

    #[test]
    fn v21_keeps_the_text_and_appends_the_defaults() {
        let (before, m) =
            run(&[("module.yaml", V21), ("prompt.md", "Greet $ARGUMENTS\n"), ("schema.json", SCHEMA_OUTPUT)]);
        assert_eq!(m.from, Format::V21);
        let text = file(&m, "module.yaml");
        assert!(text.starts_with(V21), "the original text is kept:\n{text}");
        assert!(text.contains("# Added by noesis migrate (v2.1 → v2.2)"), "{text}");
        let y = yaml(&m);
        assert_eq!(y["tier"], "decision");
        assert_eq!(y["schema_strictness"], "medium");
        assert_eq!(
            y["overflow"],
            json!({"enabled": true, "recoverable": true, "max_items": 5, "require_suggested_mapping": true})
        );
        assert_eq!(y["enums"], json!({"strategy": "extensible"}));
        assert_eq!(y["compat"]["runtime_auto_wrap"], true);
        assert_eq!(y["tests"], json!(["tests/a.input.json -> tests/a.expected.json"]));
        assert_eq!(y["io"]["data"], "./schema.json#/data");
        let schema: Value = serde_json::from_str(file(&m, "schema.json")).unwrap();
        assert!(schema.get("output").is_none());
        assert_eq!(schema["data"]["required"], json!(["greeting", "rationale"]));
        assert_eq!(file(&m, "prompt.md"), "Greet $ARGUMENTS\n");
        assert!(m.remove.is_empty());
        assert!(m.changes.contains(&"schema.json: `output` renamed to `data`".to_owned()), "{:#?}", m.changes);
        assert_equivalent(&before, &reload(&m));
    }

    #[test]
    fn v20_gets_a_tier() {
        let (before, m) =
            run(&[("module.yaml", "name: plain\nversion: 0.1.0\nresponsibility: r\n"), ("prompt.md", "p")]);
        assert_eq!(m.from, Format::V20);
        assert_eq!(yaml(&m)["tier"], "decision");
        assert!(m.changes.iter().any(|c| c.starts_with("tier: decision")), "{:#?}", m.changes);
        // No schema.json at all: the four sections are written.
        let schema: Value = serde_json::from_str(file(&m, "schema.json")).unwrap();
        assert_eq!(schema["data"]["required"], json!(["rationale"]));
        assert_equivalent(&before, &reload(&m));
    }

    #[test]
    fn v1_front_matter_becomes_the_manifest() {
        let md = "---\nname: reviewer\nversion: '1.0'\nresponsibility: Reviews code\n# a note\nexcludes:\n  - rewriting\n---\n\n# Review\n\nReview $ARGUMENTS carefully.\n";
        let (before, m) = run(&[("MODULE.md", md), ("schema.json", SCHEMA_OUTPUT)]);
        assert_eq!(m.from, Format::V1);
        let y = yaml(&m);
        assert_eq!(y["version"], "1.0.0");
        assert_eq!(y["excludes"], json!(["rewriting"]));
        assert_eq!(file(&m, "prompt.md"), "# Review\n\nReview $ARGUMENTS carefully.\n");
        assert_eq!(m.remove, ["MODULE.md"]);
        let text = file(&m, "module.yaml");
        assert!(text.starts_with("# Cognitive Module v2.2 (migrated from v1"), "{text}");
        assert!(m.changes.iter().any(|c| c.contains("version: \"1.0\" written as 1.0.0")), "{:#?}", m.changes);
        assert!(m.changes.iter().any(|c| c.contains("comments of the original manifest were not kept")));
        assert!(m.changes.iter().any(|c| c.contains("blank lines before it dropped")));
        assert_equivalent(&before, &reload(&m));
    }

    #[test]
    fn v0_files_are_folded_in() {
        let (before, m) = run(&[
            ("module.md", "# Summarise text\nOld style module.\n"),
            ("prompt.txt", "Summarise: $ARGUMENTS\n  keep   spacing\n"),
            ("input.schema.json", r#"{"type": "object", "properties": {"text": {"type": "string"}}}"#),
            ("output.schema.json", r#"{"type": "object", "required": ["summary", "rationale"]}"#),
            ("constraints.yaml", "max_words: 50\n"),
        ]);
        assert_eq!(m.from, Format::V0);
        let y = yaml(&m);
        assert_eq!(y["name"], "legacy");
        assert_eq!(y["responsibility"], "Summarise text");
        assert_eq!(y["constraints"], json!({"max_words": 50}));
        assert_eq!(file(&m, "prompt.md"), "Summarise: $ARGUMENTS\n  keep   spacing\n");
        let schema: Value = serde_json::from_str(file(&m, "schema.json")).unwrap();
        assert_eq!(schema["data"]["required"], json!(["summary", "rationale"]));
        assert_eq!(schema["input"]["properties"]["text"]["type"], "string");
        let mut removed = m.remove.clone();
        removed.sort();
        assert_eq!(removed, ["constraints.yaml", "input.schema.json", "module.md", "output.schema.json", "prompt.txt"]);
        assert_equivalent(&before, &reload(&m));
    }

    #[test]
    fn exec_tier_defaults_are_its_own() {
        let (before, m) =
            run(&[("MODULE.md", "---\nname: runner\nversion: 2.0.0\nresponsibility: r\ntier: exec\n---\nDo it.\n")]);
        let y = yaml(&m);
        assert_eq!(y["schema_strictness"], "high");
        assert_eq!(y["overflow"]["enabled"], false);
        assert_eq!(y["overflow"]["max_items"], 0);
        assert_eq!(y["enums"]["strategy"], "strict");
        assert_equivalent(&before, &reload(&m));
    }

    #[test]
    fn v22_is_left_alone() {
        let files = [("module.yaml", "name: m\nversion: 1.0.0\nresponsibility: r\ntier: exec\n"), ("prompt.md", "p")];
        let module = load(Source::Embedded { name: "m", files: Box::leak(Box::new(files)) }).unwrap();
        assert_eq!(migrate(&module, &ModuleFiles::new()), Ok(None));
    }

    #[test]
    fn an_unfixable_manifest_names_file_and_field() {
        let files: &'static [(&str, &str)] =
            &[("MODULE.md", "---\nname: Bad_Name\nversion: 1.0.0\nresponsibility: r\n---\nx\n")];
        let module = load(Source::Embedded { name: "legacy", files }).unwrap();
        let map: ModuleFiles = files.iter().map(|(p, c)| ((*p).to_owned(), (*c).to_owned())).collect();
        let err = migrate(&module, &map).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("MODULE.md: cannot be migrated"), "{text}");
        assert!(text.contains("field /name"), "{text}");
        // A missing source file is named too.
        assert_eq!(migrate(&module, &ModuleFiles::new()), Err(MigrateError::Missing { file: "MODULE.md".into() }));
    }

    #[test]
    fn output_references_in_io_follow_the_rename() {
        let (before, m) = run(&[
            (
                "module.yaml",
                "name: m\nversion: 1.0.0\nresponsibility: r\nio:\n  input: ./schema.json#/input\n  data: ./schema.json#/output\n",
            ),
            ("prompt.md", "p"),
            ("schema.json", SCHEMA_OUTPUT),
        ]);
        let y = yaml(&m);
        assert_eq!(y["io"]["data"], "./schema.json#/data");
        assert_eq!(y["io"]["meta"], "./schema.json#/meta");
        assert_equivalent(&before, &reload(&m));
    }

    #[test]
    fn versions_are_normalised_only_when_a_rule_applies() {
        assert_eq!(normalise_version(&json!("1.0")), Some("1.0.0".into()));
        assert_eq!(normalise_version(&json!("v2")), Some("2.0.0".into()));
        assert_eq!(normalise_version(&json!(1.5)), Some("1.5.0".into()));
        assert_eq!(normalise_version(&json!("1.2.3")), None);
        assert_eq!(normalise_version(&json!("one")), None);
    }

    #[test]
    fn yaml_scalars_read_back() {
        for s in [
            "plain text",
            "yes",
            "No",
            "1.0",
            "0x1f",
            ".5",
            ".inf",
            "a: b",
            "a #b",
            "- x",
            "tab\there",
            "line\nbreak",
            "日本語",
            "",
            " lead",
            "trail ",
            "./schema.json#/data",
            "it's",
            "~",
            "@call:x",
            "\"q\"",
            "null",
            "[x]",
        ] {
            let mut text = String::new();
            emit_map(&mut text, &json!({"k": s, "list": [s, {"a": s, "b": [s]}]}).as_object().unwrap().clone(), 0);
            let back: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{s:?}: {e}\n{text}"));
            assert_eq!(back, json!({"k": s, "list": [s, {"a": s, "b": [s]}]}), "{s:?}\n{text}");
        }
    }
}
