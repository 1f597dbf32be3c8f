//! Compiling JSON Schemas once and turning their errors into data.

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, Validator};
use serde_json::{Value, json};

/// One schema violation, located by a JSON pointer into the validated value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// JSON pointer of the failing value (`""` is the root). For a missing
    /// required field this points at the field that is missing.
    pub pointer: String,
    /// The schema keyword that failed (`required`, `type`, `maxLength`, …).
    pub keyword: String,
    /// A human-readable explanation.
    pub message: String,
}

/// A compiled validator for one part of a schema document.
///
/// Compiled once per module and shared: validation is `&self` and the type is
/// `Send + Sync`.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    validator: Validator,
}

/// A schema could not be compiled (bad keyword value, `$ref` to nowhere, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaCompileError {
    /// JSON pointer of the section inside the document (`/data`, `/input`).
    pub section: String,
    /// What the compiler said.
    pub message: String,
}

impl CompiledSchema {
    /// Compiles a standalone schema.
    pub fn compile(schema: &Value) -> Result<CompiledSchema, SchemaCompileError> {
        build(schema).map_err(|message| SchemaCompileError { section: String::new(), message })
    }

    /// Compiles the section at `pointer` of `document` so that every `$ref`
    /// inside it resolves against the whole document (`#/$defs/x` means the
    /// root of `schema.json`, not the root of the section).
    pub fn compile_section(document: &Value, pointer: &str) -> Result<CompiledSchema, SchemaCompileError> {
        let err = |message: String| SchemaCompileError { section: pointer.to_owned(), message };
        if document.pointer(pointer).is_none() {
            return Err(err(format!("no section at `#{pointer}`")));
        }
        let mut root = match document {
            Value::Object(map) => map.clone(),
            _ => return Err(err("schema document is not an object".to_owned())),
        };
        // Module documents carry a private `$schema` URL that no validator
        // knows; the sections are plain draft-07 schemas.
        let declared = root.remove("$schema");
        root.remove("$id");
        root.insert("$ref".to_owned(), json!(format!("#{pointer}")));
        // Only a `$ref` and definitions remain at the root: the document's
        // other top-level keys (`input`, `data`, …) are not keywords, so they
        // cannot leak into the section's rules under any draft.
        let root = Value::Object(root);
        let compiled = build_with(&root, draft_of(declared.as_ref())).map_err(err)?;
        Ok(compiled)
    }

    /// Whether `instance` satisfies the schema.
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }

    /// Every violation, in document order.
    pub fn violations(&self, instance: &Value) -> Vec<Violation> {
        self.validator.iter_errors(instance).map(to_violation).collect()
    }
}

/// The draft a `$schema` URL names; draft 7 (the spec's own) otherwise,
/// including for the private URL module documents carry.
fn draft_of(declared: Option<&Value>) -> Draft {
    match declared.and_then(Value::as_str) {
        Some(s) if s.contains("2020-12") => Draft::Draft202012,
        Some(s) if s.contains("2019-09") => Draft::Draft201909,
        Some(s) if s.contains("draft-06") => Draft::Draft6,
        Some(s) if s.contains("draft-04") => Draft::Draft4,
        _ => Draft::Draft7,
    }
}

fn build(schema: &Value) -> Result<CompiledSchema, String> {
    build_with(schema, draft_of(schema.get("$schema")))
}

fn build_with(schema: &Value, draft: Draft) -> Result<CompiledSchema, String> {
    let validator = jsonschema::options().with_draft(draft).build(schema).map_err(|e| e.to_string())?;
    Ok(CompiledSchema { validator })
}

fn to_violation(err: jsonschema::ValidationError<'_>) -> Violation {
    let mut pointer = err.instance_path().as_str().to_owned();
    let kind = err.kind();
    if let ValidationErrorKind::Required { property } = kind
        && let Some(name) = property.as_str()
    {
        pointer.push('/');
        pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
    }
    Violation { pointer, keyword: kind.keyword().to_owned(), message: err.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_resolve_against_the_whole_document() {
        let doc = json!({
            "$schema": "https://cognitive-modules.dev/schema/v2.2.json",
            "data": {"type": "object", "properties": {"x": {"$ref": "#/$defs/small"}}},
            "$defs": {"small": {"type": "integer", "maximum": 3}}
        });
        let s = CompiledSchema::compile_section(&doc, "/data").unwrap();
        assert!(s.is_valid(&json!({"x": 2})));
        let v = s.violations(&json!({"x": 9}));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pointer, "/x");
        assert_eq!(v[0].keyword, "maximum");
    }

    #[test]
    fn dangling_ref_is_a_compile_error() {
        let doc = json!({"data": {"$ref": "#/$defs/nowhere"}});
        let err = CompiledSchema::compile_section(&doc, "/data").unwrap_err();
        assert_eq!(err.section, "/data");
        assert!(err.message.contains("nowhere"), "{}", err.message);
    }

    #[test]
    fn missing_required_points_at_the_field() {
        let s = CompiledSchema::compile(&json!({"required": ["code"]})).unwrap();
        let v = s.violations(&json!({}));
        assert_eq!(v[0].pointer, "/code");
        assert_eq!(v[0].keyword, "required");
    }

    #[test]
    fn lengths_count_characters_not_bytes() {
        let s = CompiledSchema::compile(&json!({"type": "string", "maxLength": 3})).unwrap();
        assert!(s.is_valid(&json!("日本語")));
        assert!(!s.is_valid(&json!("日本語x")));
    }
}
