//! Loading a module from disk (or from the binary) in any supported layout.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::manifest::{Manifest, Policy, validate_manifest_in};
use crate::schema::{CompiledSchema, Violation};

/// The layout a module was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Format {
    /// `module.yaml` with `tier`, `overflow` or `enums`.
    #[serde(rename = "v2.2")]
    V22,
    /// `module.yaml` with `policies` or `failure`.
    #[serde(rename = "v2.1")]
    V21,
    /// Any other `module.yaml`.
    #[serde(rename = "v2.0")]
    V20,
    /// `MODULE.md` with YAML front matter.
    #[serde(rename = "v1")]
    V1,
    /// The six-file legacy layout (`module.md`, `prompt.txt`, …).
    #[serde(rename = "v0")]
    V0,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::V22 => "v2.2",
            Format::V21 => "v2.1",
            Format::V20 => "v2.0",
            Format::V1 => "v1",
            Format::V0 => "v0",
        })
    }
}

/// One compiled section of a module's schema document.
#[derive(Debug, Clone)]
pub struct Section {
    /// The section as written (its `$ref`s still point into the document).
    pub schema: Value,
    /// The validator, compiled once.
    pub compiled: CompiledSchema,
}

/// A loaded module, with every schema compiled once. Immutable and
/// `Send + Sync`: one `Module` serves any number of concurrent runs.
/// Cloning is cheap next to loading (compiled schemas share their parts); a
/// clone with another prompt is how `@call` results reach the model.
#[derive(Debug, Clone)]
pub struct Module {
    /// The module's name.
    pub name: String,
    /// Where it was loaded from (`builtin:NAME` for built-in modules).
    pub location: PathBuf,
    /// Its layout.
    pub format: Format,
    /// The manifest (synthesised for legacy layouts).
    pub manifest: Manifest,
    /// The rules a run applies.
    pub policy: Policy,
    /// The prompt template.
    pub prompt: String,
    /// The whole schema document (`schema.json`), `{}` when there is none.
    pub schema: Value,
    /// `#/input`.
    pub input: Option<Section>,
    /// `#/data` (or its alias `#/output`).
    pub data: Option<Section>,
    /// `#/meta`.
    pub meta: Option<Section>,
    /// `#/error`.
    pub error: Option<Section>,
    /// Problems in fields the runtime does not act on (see
    /// [`ADVISORY_FIELDS`]): the module loads, and `noesis validate` lists them.
    pub warnings: Vec<String>,
}

/// Manifest fields that only advise (the runtime does not act on them): a
/// value outside what the schema lists, or of another shape, is a warning,
/// not an error, so a module written for another runtime still loads.
/// Pointers into module.yaml. Fields the runtime acts on (`tier`,
/// `policies`, `runtime_requirements.max_input_tokens`, …) stay strict.
pub const ADVISORY_FIELDS: &[&str] = &["/runtime_requirements/preferred_capabilities", "/failure/contract"];

fn advisory(pointer: &str) -> bool {
    ADVISORY_FIELDS.iter().any(|f| pointer == *f || pointer.strip_prefix(f).is_some_and(|rest| rest.starts_with('/')))
}

/// Why a module could not be loaded. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file exists but could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The folder holds none of the files that mark a module.
    #[error("{}: not a module (no module.yaml, MODULE.md or module.md)", path.display())]
    NotAModule {
        /// The folder.
        path: PathBuf,
    },
    /// The manifest is not YAML.
    #[error("{}: invalid YAML: {message}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The manifest breaks the v2.2 manifest schema.
    #[error("{}: invalid manifest:{}", path.display(), list(violations))]
    Manifest {
        /// The file.
        path: PathBuf,
        /// Every violation, with field and rule.
        violations: Vec<Violation>,
    },
    /// A JSON file is not JSON.
    #[error("{}: invalid JSON: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A schema section does not compile (bad keyword, `$ref` to nowhere).
    #[error("{}: schema `#{section}` does not compile: {message}", path.display())]
    Schema {
        /// The file.
        path: PathBuf,
        /// The section's pointer.
        section: String,
        /// The compiler's message.
        message: String,
    },
    /// No prompt file.
    #[error("{}: missing prompt file", path.display())]
    MissingPrompt {
        /// The expected prompt file.
        path: PathBuf,
    },
}

/// Violations as the indented lines of an error message.
pub(crate) fn list(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            let field = if v.pointer.is_empty() { "(root)" } else { v.pointer.as_str() };
            format!("\n  field {field}: {} (rule: {})", v.message, v.keyword)
        })
        .collect()
}

/// Where a module's files come from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A folder on disk.
    Dir(&'a Path),
    /// Files compiled into the binary: `(relative path, contents)`.
    Embedded {
        /// The module's name, for display (`builtin:NAME/…`).
        name: &'a str,
        /// The files.
        files: &'static [(&'static str, &'static str)],
    },
}

impl Source<'_> {
    fn path(&self, rel: &str) -> PathBuf {
        match self {
            Source::Dir(d) => d.join(rel),
            Source::Embedded { name, .. } => PathBuf::from(format!("builtin:{name}/{rel}")),
        }
    }

    fn root(&self) -> PathBuf {
        match self {
            Source::Dir(d) => d.to_path_buf(),
            Source::Embedded { name, .. } => PathBuf::from(format!("builtin:{name}")),
        }
    }

    fn read(&self, rel: &str) -> Result<Option<String>, LoadError> {
        match self {
            Source::Dir(d) => {
                let path = d.join(rel);
                match std::fs::read_to_string(&path) {
                    Ok(s) => Ok(Some(s)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(source) => Err(LoadError::Io { path, source }),
                }
            }
            Source::Embedded { files, .. } => Ok(files.iter().find(|(p, _)| *p == rel).map(|(_, c)| (*c).to_owned())),
        }
    }

    fn dir_name(&self) -> String {
        match self {
            Source::Dir(d) => d
                .canonicalize()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_default(),
            Source::Embedded { name, .. } => (*name).to_owned(),
        }
    }
}

/// Loads the module in `source`, detecting its layout.
pub fn load(source: Source<'_>) -> Result<Module, LoadError> {
    load_remembering(source, None)
}

/// [`load`], with the manifest schema's verdicts remembered in the folder
/// `memo` (see [`validate_manifest_in`]).
pub fn load_remembering(source: Source<'_>, memo: Option<&Path>) -> Result<Module, LoadError> {
    if let Some(text) = source.read("module.yaml")? {
        load_v2(source, &text, memo)
    } else if let Some(text) = source.read("MODULE.md")? {
        load_v1(source, &text)
    } else if let Some(text) = source.read("module.md")? {
        load_v0(source, &text)
    } else {
        Err(LoadError::NotAModule { path: source.root() })
    }
}

/// Loads the module in a folder.
pub fn load_dir(dir: &Path) -> Result<Module, LoadError> {
    load(Source::Dir(dir))
}

fn parse_yaml(path: PathBuf, text: &str) -> Result<Value, LoadError> {
    serde_saphyr::from_str::<Value>(text).map_err(|e| LoadError::Yaml { path, message: e.to_string() })
}

fn parse_json(path: PathBuf, text: &str) -> Result<Value, LoadError> {
    serde_json::from_str(text).map_err(|e| LoadError::Json { path, message: e.to_string() })
}

fn to_manifest(path: PathBuf, raw: Value) -> Result<Manifest, LoadError> {
    serde_json::from_value(raw).map_err(|e| LoadError::Manifest {
        path,
        violations: vec![Violation { pointer: String::new(), keyword: "type".into(), message: e.to_string() }],
    })
}

fn load_v2(source: Source<'_>, text: &str, memo: Option<&Path>) -> Result<Module, LoadError> {
    let path = source.path("module.yaml");
    let raw = parse_yaml(path.clone(), text)?;
    let has = |k: &str| raw.get(k).is_some();
    let format = if has("tier") || has("overflow") || has("enums") {
        Format::V22
    } else if has("policies") || has("failure") {
        Format::V21
    } else {
        Format::V20
    };
    let mut violations = validate_manifest_in(&raw, memo);
    if format != Format::V22 {
        // v2.0 and v2.1 predate `tier`: its absence is what marks them.
        violations.retain(|v| !(v.pointer == "/tier" && v.keyword == "required"));
    }
    // Advisory fields take any value, with a warning.
    let (advice, violations): (Vec<_>, Vec<_>) = violations.into_iter().partition(|v| advisory(&v.pointer));
    if !violations.is_empty() {
        return Err(LoadError::Manifest { path, violations });
    }
    let warnings: Vec<String> = advice
        .iter()
        .map(|v| format!("{}: field {}: {} (advisory: noted, not enforced)", path.display(), v.pointer, v.message))
        .collect();
    let manifest = to_manifest(path, raw)?;
    let prompt =
        source.read("prompt.md")?.ok_or_else(|| LoadError::MissingPrompt { path: source.path("prompt.md") })?;
    let schema = match source.read("schema.json")? {
        Some(t) => parse_json(source.path("schema.json"), &t)?,
        None => json!({}),
    };
    let mut module = finish(source, format, manifest, prompt, schema)?;
    module.warnings = warnings;
    Ok(module)
}

pub(crate) fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let t = text.trim_start_matches('\u{feff}');
    let rest = t.strip_prefix("---")?.trim_start_matches([' ', '\t']);
    let rest = rest.strip_prefix("\r\n").or_else(|| rest.strip_prefix('\n'))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

fn load_v1(source: Source<'_>, text: &str) -> Result<Module, LoadError> {
    let path = source.path("MODULE.md");
    let (front, body) = split_front_matter(text).ok_or_else(|| LoadError::Yaml {
        path: path.clone(),
        message: "missing YAML front matter between `---` lines".to_owned(),
    })?;
    let raw = parse_yaml(path.clone(), front)?;
    if !raw.is_object() {
        return Err(LoadError::Yaml { path, message: "front matter is not a mapping".to_owned() });
    }
    let manifest = to_manifest(path, raw)?;
    let schema = match source.read("schema.json")? {
        Some(t) => parse_json(source.path("schema.json"), &t)?,
        None => json!({}),
    };
    finish(source, Format::V1, manifest, body.trim_start().to_owned(), schema)
}

fn load_v0(source: Source<'_>, text: &str) -> Result<Module, LoadError> {
    let (front, body) = match split_front_matter(text) {
        Some((f, b)) => (Some(f), b),
        None => (None, text),
    };
    let mut raw = match front {
        Some(f) => parse_yaml(source.path("module.md"), f)?,
        None => json!({}),
    };
    if !raw.is_object() {
        raw = json!({});
    }
    if raw.get("name").is_none() {
        raw["name"] = json!(source.dir_name());
    }
    if raw.get("responsibility").is_none() {
        let first = body.lines().map(|l| l.trim_start_matches('#').trim()).find(|l| !l.is_empty());
        raw["responsibility"] = json!(first.unwrap_or_default());
    }
    if let Some(c) = source.read("constraints.yaml")? {
        let constraints = parse_yaml(source.path("constraints.yaml"), &c)?;
        if constraints.is_object() {
            raw["constraints"] = constraints;
        }
    }
    let manifest = to_manifest(source.path("module.md"), raw)?;
    let mut schema = serde_json::Map::new();
    for (file, section) in [("input.schema.json", "input"), ("output.schema.json", "data")] {
        if let Some(t) = source.read(file)? {
            schema.insert(section.to_owned(), parse_json(source.path(file), &t)?);
        }
    }
    let prompt = match source.read("prompt.txt")? {
        Some(p) => p,
        None => body.trim_start().to_owned(),
    };
    finish(source, Format::V0, manifest, prompt, Value::Object(schema))
}

fn finish(
    source: Source<'_>,
    format: Format,
    manifest: Manifest,
    prompt: String,
    schema: Value,
) -> Result<Module, LoadError> {
    let schema_path = source.path("schema.json");
    if !schema.is_object() {
        return Err(LoadError::Json { path: schema_path, message: "the schema document is not an object".to_owned() });
    }
    let mut extra_docs: BTreeMap<String, Value> = BTreeMap::new();
    let mut section = |name: &str, fallback: &[&str]| -> Result<Option<Section>, LoadError> {
        let (file, pointer) = match manifest.io.get(name) {
            Some(r) => {
                let path = source.path("module.yaml");
                let bad = |message: String| LoadError::Manifest {
                    path: path.clone(),
                    violations: vec![Violation {
                        pointer: format!("/io/{name}"),
                        keyword: "reference".into(),
                        message,
                    }],
                };
                let Some(r) = r.as_str() else { return Err(bad(format!("{r} is not a string"))) };
                let (file, pointer) = split_ref(r);
                if !pointer.starts_with('/') {
                    return Err(bad(format!("`{r}` needs a fragment such as `./schema.json#/{name}`")));
                }
                if file.as_deref().is_some_and(|f| f.starts_with('/') || f.split('/').any(|p| p == "..")) {
                    return Err(bad(format!("`{r}` must stay inside the module folder")));
                }
                (file, pointer)
            }
            None => {
                let found = std::iter::once(name).chain(fallback.iter().copied()).find(|k| schema.get(*k).is_some());
                match found {
                    Some(k) => (None, format!("/{k}")),
                    None => return Ok(None),
                }
            }
        };
        let (doc, path) = match file {
            None => (&schema, schema_path.clone()),
            Some(f) => {
                let path = source.path(&f);
                if !extra_docs.contains_key(&f) {
                    let text = source.read(&f)?.ok_or_else(|| LoadError::Io {
                        path: path.clone(),
                        source: std::io::Error::new(std::io::ErrorKind::NotFound, "referenced by io"),
                    })?;
                    extra_docs.insert(f.clone(), parse_json(path.clone(), &text)?);
                }
                (&extra_docs[&f], path)
            }
        };
        let Some(sub) = doc.pointer(&pointer) else {
            return Err(LoadError::Schema { path, section: pointer, message: "no such section".to_owned() });
        };
        let compiled = CompiledSchema::compile_section(doc, &pointer).map_err(|e| LoadError::Schema {
            path: path.clone(),
            section: e.section,
            message: e.message,
        })?;
        Ok(Some(Section { schema: sub.clone(), compiled }))
    };
    let input = section("input", &[])?;
    let data_fallback: &[&str] = &["output"];
    let data = section("data", data_fallback)?;
    let meta = section("meta", &[])?;
    let error = section("error", &[])?;
    let mut policy = manifest.policy();
    if format != Format::V22 {
        policy.auto_wrap = true;
    }
    let name = if manifest.name.is_empty() { source.dir_name() } else { manifest.name.clone() };
    Ok(Module {
        name,
        location: source.root(),
        format,
        manifest,
        policy,
        prompt,
        schema,
        input,
        data,
        meta,
        error,
        warnings: Vec::new(),
    })
}

/// `./schema.json#/data` → (None, "/data"); `./other.json#/x` → (Some("other.json"), "/x").
fn split_ref(r: &str) -> (Option<String>, String) {
    let (file, pointer) = r.split_once('#').unwrap_or((r, ""));
    let file = file.trim_start_matches("./");
    let file = if file.is_empty() || file == "schema.json" { None } else { Some(file.to_owned()) };
    (file, pointer.to_owned())
}

impl Module {
    /// The schema sections the module has, in the spec's order.
    pub fn schema_sections(&self) -> Vec<&'static str> {
        [("input", &self.input), ("data", &self.data), ("meta", &self.meta), ("error", &self.error)]
            .into_iter()
            .filter(|(_, section)| section.is_some())
            .map(|(name, _)| name)
            .collect()
    }

    /// What `noesis info --json` and a server's module description share:
    /// identity, rules, policies, schema sections and tests.
    pub fn summary(&self) -> Value {
        json!({
            "name": self.name,
            "version": self.manifest.version,
            "format": self.format.to_string(),
            "tier": self.policy.tier.as_str(),
            "responsibility": self.manifest.responsibility,
            "location": self.location.display().to_string(),
            "policy": self.policy,
            "context": self.manifest.context_mode(),
            "excludes": self.manifest.excludes,
            "policies": self.manifest.policies,
            "schema_sections": self.schema_sections(),
            "tests": self.manifest.tests,
            "prompt_chars": self.prompt.chars().count(),
        })
    }

    /// The schema the model's whole reply should satisfy: the envelope with
    /// this module's data and error sections, `$ref`s still resolvable.
    /// Providers send it as a structured-output schema; the test model
    /// fabricates replies from it.
    pub fn reply_schema(&self) -> Value {
        let mut doc = self.schema.as_object().cloned().unwrap_or_default();
        doc.remove("$schema");
        doc.remove("$id");
        let data = self.data.as_ref().map_or(
            json!({"type": "object", "required": ["rationale"], "properties": {"rationale": {"type": "string"}}}),
            |s| s.schema.clone(),
        );
        let error = self.error.as_ref().map_or(json!({"type": "object", "required": ["code", "message"], "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}), |s| s.schema.clone());
        let meta = json!({
            "type": "object",
            "required": ["confidence", "risk", "explain"],
            "properties": {
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "risk": {"type": "string", "enum": ["none", "low", "medium", "high"]},
                "explain": {"type": "string", "maxLength": 280}
            }
        });
        doc.insert("type".into(), json!("object"));
        doc.insert(
            "oneOf".into(),
            json!([
                {"type": "object", "required": ["ok", "meta", "data"], "additionalProperties": false,
                 "properties": {"ok": {"const": true}, "meta": meta, "data": data}},
                {"type": "object", "required": ["ok", "meta", "error"], "additionalProperties": false,
                 "properties": {"ok": {"const": false}, "meta": meta, "error": error, "partial_data": {"type": "object"}}}
            ]),
        );
        Value::Object(doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter() {
        assert_eq!(split_front_matter("---\na: 1\n---\nbody"), Some(("a: 1\n", "body")));
        assert_eq!(split_front_matter("---\r\na: 1\r\n---\r\nbody"), Some(("a: 1\r\n", "body")));
        assert_eq!(split_front_matter("no front"), None);
        assert_eq!(split_front_matter("---\na: 1\n"), None);
    }

    #[test]
    fn v20_and_v21_manifests_load_without_a_tier() {
        let base = "name: m\nversion: 1.0.0\nresponsibility: r\n";
        for (extra, format) in [("", Format::V20), ("policies:\n  network: deny\n", Format::V21)] {
            let yaml: &'static str = Box::leak(format!("{base}{extra}").into_boxed_str());
            let files: &'static [(&str, &str)] = Box::leak(Box::new([("module.yaml", yaml), ("prompt.md", "p")]));
            let m = load(Source::Embedded { name: "m", files }).unwrap();
            assert_eq!((m.format, m.policy.tier), (format, crate::Tier::Decision));
        }
        // v2.2 still needs one: `overflow` marks it as v2.2.
        let files: &'static [(&str, &str)] = &[
            ("module.yaml", "name: m\nversion: 1.0.0\nresponsibility: r\noverflow:\n  enabled: true\n"),
            ("prompt.md", "p"),
        ];
        let err = load(Source::Embedded { name: "m", files }).unwrap_err();
        assert!(err.to_string().contains("field /tier"), "{err}");
    }

    #[test]
    fn hostile_yaml_is_a_typed_error() {
        // An alias bomb (9^9 nodes once expanded) and nesting past any stack.
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        let mut prev = 'a';
        for n in 'b'..='i' {
            bomb.push_str(&format!("{n}: &{n} [{}]\n", vec![format!("*{prev}"); 9].join(", ")));
            prev = n;
        }
        bomb.push_str("name: m\nversion: 1.0.0\nresponsibility: r\ntier: decision\n");
        let deep = format!("name: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        for yaml in [bomb, deep] {
            let yaml: &'static str = Box::leak(yaml.into_boxed_str());
            let files: &'static [(&str, &str)] = Box::leak(Box::new([("module.yaml", yaml), ("prompt.md", "p")]));
            let err = load(Source::Embedded { name: "m", files }).unwrap_err();
            assert!(matches!(err, LoadError::Yaml { .. }), "{err}");
        }
    }

    #[test]
    fn io_refs() {
        assert_eq!(split_ref("./schema.json#/data"), (None, "/data".to_owned()));
        assert_eq!(split_ref("#/input"), (None, "/input".to_owned()));
        assert_eq!(split_ref("./x.json#/a"), (Some("x.json".to_owned()), "/a".to_owned()));
    }
}
