//! Test generation: the model writes a spec per function (rationale and
//! cases), never code; test files are rendered from the specs by fixed
//! templates. A spec rests on its function's signature (the part
//! `file#sig:name`), so a change inside the body leaves it standing and a
//! signature change invalidates it; only missing or invalidated specs go
//! back to the model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use noesis_code::{Function, Lang, TestSpec};
use noesis_frames::{CausalFrame, FrameId, Status, Timestamp};
use serde_json::{Value, json};

use noesis_plugin::{ContextSlice, Core, CoreContext, CoreError, Parsed, PartHasher, Plugin, PluginError, Step, Think};

use crate::{Error, Setting};

/// The part kind of a function's signature.
pub const SIG: &str = "sig";

/// Hashes `file#sig:Qualified.name`: the function's signature hash.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signatures;

impl PartHasher for Signatures {
    fn hash_part(&self, file: &str, source: &str, kind: &str, name: &str) -> Option<String> {
        if kind != SIG {
            return None;
        }
        let lang = Lang::from_path(Path::new(file))?;
        noesis_code::functions(lang, source)
            .ok()?
            .into_iter()
            .find(|f| f.qualified_name == name)
            .map(|f| f.signature_hash)
    }

    fn kinds(&self) -> &[&str] {
        &[SIG]
    }
}

/// The part that names a function's signature.
#[must_use]
pub fn sig_part(file: &str, function: &str) -> String {
    format!("{file}#{SIG}:{function}")
}

/// The functions of a file that get tests: public, not tests themselves.
#[must_use]
/// Functions that share a qualified name (a property's getter and setter,
/// two trait impls of one method) have one spec, the first's: a spec is
/// found by that name.
pub fn testable(lang: Lang, source: &str) -> Vec<Function> {
    let mut seen = std::collections::HashSet::new();
    noesis_code::functions(lang, source)
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.is_public && !f.is_test && !f.name.starts_with("__"))
        .filter(|f| seen.insert(f.qualified_name.clone()))
        .collect()
}

/// The built-in test-generation plugin: specs kept as JSON under
/// `out/specs`, test files rendered into `out`.
#[derive(Debug, Clone)]
pub struct Testgen {
    root: PathBuf,
    out: PathBuf,
}

/// A spec on disk with the frame that made it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredSpec {
    /// The source file, project-relative.
    pub file: String,
    /// The frame that made the spec.
    pub frame_id: String,
    /// The spec.
    pub spec: TestSpec,
}

impl Testgen {
    /// Specs and tests of the project at `root`, written under `out`.
    #[must_use]
    pub fn new(root: &Path, out: &Path) -> Testgen {
        Testgen { root: root.to_owned(), out: out.to_owned() }
    }

    /// Where a function's spec is kept.
    #[must_use]
    pub fn spec_path(&self, file: &str, function: &str) -> PathBuf {
        let safe: String =
            function.chars().map(|c| if c.is_alphanumeric() || c == '_' || c == '.' { c } else { '_' }).collect();
        self.out.join("specs").join(file).join(format!("{safe}.json"))
    }

    fn fail(method: &str, message: String) -> PluginError {
        PluginError::Failed { plugin: "testgen".into(), method: method.into(), message }
    }

    /// Reads a stored spec, if there is a readable one.
    #[must_use]
    pub fn stored(&self, file: &str, function: &str) -> Option<StoredSpec> {
        let text = std::fs::read_to_string(self.spec_path(file, function)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

impl Plugin for Testgen {
    fn name(&self) -> &str {
        "testgen"
    }

    fn transform_input(&self, raw: &Value, _ctx: &CoreContext<'_>) -> Result<ContextSlice, PluginError> {
        let file =
            raw["file"].as_str().ok_or_else(|| Self::fail("transform_input", "`file` must be a string".into()))?;
        let name = raw["function"]
            .as_str()
            .ok_or_else(|| Self::fail("transform_input", "`function` must be a string".into()))?;
        let lang = Lang::from_path(Path::new(file))
            .ok_or_else(|| Self::fail("transform_input", format!("{file}: not Python or Rust")))?;
        let path = crate::inside(&self.root, file)
            .ok_or_else(|| Self::fail("transform_input", format!("{file}: not a file inside the project")))?;
        let source =
            std::fs::read_to_string(path).map_err(|e| Self::fail("transform_input", format!("{file}: {e}")))?;
        let f = noesis_code::functions(lang, &source)
            .map_err(|e| Self::fail("transform_input", e.to_string()))?
            .into_iter()
            .find(|f| f.qualified_name == name)
            .ok_or_else(|| Self::fail("transform_input", format!("{file}: no function {name}")))?;
        let lines: Vec<&str> = source.lines().collect();
        let (a, b) = ((f.start_line as usize).saturating_sub(1), (f.end_line as usize).min(lines.len()));
        let text = lines.get(a..b).map(|l| l.join("\n")).unwrap_or_default();
        let input = json!({"language": match lang { Lang::Python => "python", Lang::Rust => "rust" },
                           "file": file, "function": name, "signature": f.signature, "signature_hash": f.signature_hash, "source": text});
        Ok(ContextSlice {
            text: format!("spec for {name} in {file}: {}", f.signature),
            input,
            files: vec![sig_part(file, name)],
        })
    }

    fn parse_output(&self, raw: &Value, _frame: &CausalFrame) -> Result<Parsed, PluginError> {
        let spec: TestSpec = serde_json::from_value(raw["output"].clone())
            .map_err(|e| Self::fail("parse_output", format!("not a test spec: {e}")))?;
        let want = raw["input"]["signature_hash"].as_str().unwrap_or_default();
        if spec.signature_hash != want {
            return Err(Self::fail(
                "parse_output",
                format!("the spec cites signature {} but the function's is {want}", spec.signature_hash),
            ));
        }
        if spec.function != raw["input"]["function"].as_str().unwrap_or_default() {
            return Err(Self::fail(
                "parse_output",
                format!("the spec is for {}, not {}", spec.function, raw["input"]["function"]),
            ));
        }
        if spec.cases.is_empty() {
            return Err(Self::fail("parse_output", "the spec has no cases".into()));
        }
        let data = json!({"file": raw["input"]["file"], "spec": spec});
        Ok(Parsed::new(spec.rationale.clone(), 0.8, data))
    }

    fn store(&self, parsed: &Parsed, frame: &CausalFrame) -> Result<(), PluginError> {
        let file = parsed.data()["file"].as_str().unwrap_or_default().to_owned();
        let spec: TestSpec =
            serde_json::from_value(parsed.data()["spec"].clone()).map_err(|e| Self::fail("store", e.to_string()))?;
        let path = self.spec_path(&file, &spec.function);
        let stored = StoredSpec { file, frame_id: frame.frame_id.to_string(), spec };
        let mut bytes = serde_json::to_vec_pretty(&stored).map_err(|e| Self::fail("store", e.to_string()))?;
        bytes.push(b'\n');
        noesis_fs::write_atomic(&path, &bytes)
            .map_err(|e| Self::fail("store", format!("{}: {}", path.display(), e.source)))
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TestgenReport {
    /// Specs made (again): `file`, function, why.
    pub specified: Vec<(String, String, String)>,
    /// Specs that still hold: `file`, function.
    pub kept: Vec<(String, String)>,
    /// Functions that failed: `file`, function, error.
    pub failed: Vec<(String, String, String)>,
    /// Test files written.
    pub written: Vec<String>,
    /// Specs dropped because their function is gone: `file`, function.
    pub dropped: Vec<(String, String)>,
    /// Test files removed because no spec is left for their source file.
    pub removed: Vec<String>,
}

/// Whether a function's stored spec still holds: its frame live and its
/// signature the one it was written against.
async fn holds(core: &Core<'_>, stored: &StoredSpec, f: &Function) -> Result<Result<(), String>, CoreError> {
    if stored.spec.signature_hash != f.signature_hash {
        return Ok(Err("signature changed".into()));
    }
    let Ok(id) = FrameId::parse(&stored.frame_id) else { return Ok(Err("bad frame id".into())) };
    match core.frame(&id).await? {
        None => Ok(Err("its frame is not in the store".into())),
        Some(fr) if fr.status == Status::Invalidated => Ok(Err(format!(
            "invalidated: {}",
            fr.timestamps.history.last().and_then(|h| h.reason.clone()).unwrap_or_default()
        ))),
        Some(_) => Ok(Ok(())),
    }
}

/// The module a Python file is imported as (`src/pkg/calc.py` → `pkg.calc`).
#[must_use]
pub fn python_module(file: &str) -> String {
    let stem = file.strip_suffix(".py").unwrap_or(file);
    let stem = stem.strip_prefix("src/").unwrap_or(stem);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.replace('/', ".")
}

/// The Rust path of a source file's module (`src/calc.rs` → `crate::calc`).
#[must_use]
pub fn rust_module(file: &str) -> String {
    let after = file.rsplit_once("src/").map_or(file, |(_, r)| r);
    let stem = after.strip_suffix(".rs").unwrap_or(after);
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    if matches!(stem, "lib" | "main") { "crate".to_owned() } else { format!("crate::{}", stem.replace('/', "::")) }
}

/// Where a file's generated tests go.
#[must_use]
pub fn test_path(out: &Path, file: &str) -> PathBuf {
    // `__` between folders keeps `a/b_c.py` and `a_b/c.py` apart.
    let flat = file.trim_end_matches(".py").trim_end_matches(".rs").replace('/', "__");
    if file.ends_with(".rs") {
        out.join(format!("{flat}_noesis_tests.rs"))
    } else {
        out.join(format!("test_{flat}.py"))
    }
}

/// Specifies every testable function of `files` whose spec is missing or no
/// longer holds, then renders each file's tests from its specs.
///
/// # Errors
/// A store error.
pub async fn generate(
    core: &mut Core<'_>,
    plugin: &Testgen,
    think: &dyn Think,
    files: &[String],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<TestgenReport, CoreError> {
    let mut report = TestgenReport::default();
    for file in files {
        let Some(lang) = Lang::from_path(Path::new(file)) else { continue };
        let relative = !file.starts_with('/') && !file.split('/').any(|c| c == "..");
        if !relative {
            continue;
        }
        let functions = match crate::inside(&core.project().root, file).map(std::fs::read_to_string) {
            Some(Ok(source)) => testable(lang, &source),
            // A file that is gone has no functions: its specs and tests go.
            None => Vec::new(),
            Some(Err(e)) => {
                report.failed.push((file.clone(), String::new(), format!("cannot be read: {e}")));
                continue;
            }
        };
        let mut specs: BTreeMap<String, TestSpec> = BTreeMap::new();
        for f in &functions {
            let why = match plugin.stored(file, &f.qualified_name) {
                None => "no spec yet".to_owned(),
                Some(stored) => match holds(core, &stored, f).await? {
                    Ok(()) => {
                        report.kept.push((file.clone(), f.qualified_name.clone()));
                        specs.insert(f.qualified_name.clone(), stored.spec);
                        continue;
                    }
                    Err(why) => why,
                },
            };
            progress(&format!("{file} {}", f.qualified_name));
            let raw = json!({"file": file, "function": f.qualified_name});
            let step = Step { query: format!("testgen: {file} {}", f.qualified_name), raw: &raw, parent: None };
            match core.step(plugin, step, think, Timestamp::now()).await {
                Ok(out) => {
                    if let Ok(spec) = serde_json::from_value::<TestSpec>(out.parsed.data()["spec"].clone()) {
                        specs.insert(f.qualified_name.clone(), spec);
                    }
                    report.specified.push((file.clone(), f.qualified_name.clone(), why));
                }
                Err(CoreError::Store(e)) => return Err(CoreError::Store(e)),
                Err(e) => report.failed.push((file.clone(), f.qualified_name.clone(), e.to_string())),
            }
        }
        // Specs of functions that are gone are dropped with their tests.
        let dir = plugin.out.join("specs").join(file);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().trim_end_matches(".json").to_owned();
                if e.path().extension().is_some_and(|x| x == "json")
                    && !functions.iter().any(|f| plugin.spec_path(file, &f.qualified_name) == e.path())
                {
                    let _ = std::fs::remove_file(e.path());
                    report.dropped.push((file.clone(), name));
                }
            }
        }
        let all: Vec<TestSpec> = specs.into_values().collect();
        let target = test_path(&plugin.out, file);
        if all.is_empty() {
            if target.exists() {
                std::fs::remove_file(&target).map_err(|e| CoreError::Invalid(format!("{}: {e}", target.display())))?;
                report
                    .removed
                    .push(target.strip_prefix(&core.project().root).unwrap_or(&target).to_string_lossy().into_owned());
            }
            continue;
        }
        let text = match lang {
            Lang::Python => noesis_code::render_pytest(&python_module(file), &all),
            Lang::Rust => noesis_code::render_rust(&rust_module(file), &all),
        };
        if std::fs::read_to_string(&target).ok().as_deref() != Some(text.as_str()) {
            noesis_fs::write_atomic(&target, text.as_bytes())
                .map_err(|e| CoreError::Invalid(format!("{}: {}", target.display(), e.source)))?;
            report
                .written
                .push(target.strip_prefix(&core.project().root).unwrap_or(&target).to_string_lossy().into_owned());
        }
    }
    Ok(report)
}

/// Which files `testgen` writes tests for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// These files or folders (absolute paths).
    Paths(Vec<PathBuf>),
    /// The files changed since the session recorded them, and those whose
    /// specs were invalidated.
    Changed,
}

/// Writes specs and tests for `targets` into `out`, with `think` as the
/// model (`testgen-spec` on the command line); `progress` hears each file.
///
/// # Errors
/// A path that does not exist, files that cannot be scanned, or a store
/// error.
pub async fn generate_in(
    setting: &Setting<'_>,
    think: &dyn Think,
    targets: &Targets,
    out: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<TestgenReport, Error> {
    let parts: std::sync::Arc<dyn PartHasher> = std::sync::Arc::new(Signatures);
    let mut core = setting.core(Some(parts)).await?;
    let testable = |p: &String| Lang::from_path(Path::new(p)).is_some();
    let files: Vec<String> = match targets {
        Targets::Changed => {
            let mut f: Vec<String> = core.changed_files().iter().filter(|p| testable(p)).cloned().collect();
            for i in core.invalidated() {
                if let Some(fr) = core.frame(&i.frame_id).await?
                    && let Some(rest) = fr.query.strip_prefix("testgen: ")
                    && let Some((file, _)) = rest.split_once(' ')
                {
                    f.push(file.to_owned());
                }
            }
            f.sort();
            f.dedup();
            f
        }
        Targets::Paths(paths) => {
            if paths.is_empty() {
                return Err(Error::Invalid("name the files to write tests for, or --changed".into()));
            }
            for p in paths {
                if !p.exists() {
                    return Err(Error::Invalid(format!("{}: no such file or folder", p.display())));
                }
            }
            setting.files(paths, &[out.to_owned()])?.into_iter().filter(testable).collect()
        }
    };
    let plugin = Testgen::new(&setting.project.root, out);
    Ok(generate(&mut core, &plugin, think, &files, progress).await?)
}

impl TestgenReport {
    /// The report as text: a line per spec written or failed, per test file
    /// written or removed, and the counts.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for (f, func, why) in &self.specified {
            text.push_str(&format!("spec   {f} {func}  ({why})\n"));
        }
        for (f, func, e) in &self.failed {
            text.push_str(&format!("failed {f} {func}  {e}\n"));
        }
        for w in &self.written {
            text.push_str(&format!("wrote  {w}\n"));
        }
        for w in &self.removed {
            text.push_str(&format!("removed {w}  (no function left to test)\n"));
        }
        text.push_str(&format!(
            "{} spec(s) written, {} kept, {} failed, {} test file(s) written\n",
            self.specified.len(),
            self.kept.len(),
            self.failed.len(),
            self.written.len()
        ));
        text
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn the_report_reads_as_a_line_per_spec_and_file_and_the_counts() {
        let report = TestgenReport {
            specified: vec![("a.py".into(), "f".into(), "new".into())],
            kept: vec![("a.py".into(), "g".into())],
            failed: vec![("b.py".into(), "h".into(), "boom".into())],
            written: vec!["tests/noesis/test_a.py".into()],
            dropped: Vec::new(),
            removed: vec!["tests/noesis/test_c.py".into()],
        };
        assert_eq!(
            report.to_text(),
            "spec   a.py f  (new)\nfailed b.py h  boom\nwrote  tests/noesis/test_a.py\n\
             removed tests/noesis/test_c.py  (no function left to test)\n\
             1 spec(s) written, 1 kept, 1 failed, 1 test file(s) written\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths() {
        assert_eq!(python_module("src/pkg/calc.py"), "pkg.calc");
        assert_eq!(python_module("calc.py"), "calc");
        assert_eq!(python_module("pkg/__init__.py"), "pkg");
        assert_eq!(rust_module("src/calc.rs"), "crate::calc");
        assert_eq!(rust_module("src/a/mod.rs"), "crate::a");
        assert_eq!(rust_module("src/lib.rs"), "crate");
        assert_eq!(test_path(Path::new("t"), "pkg/calc.py"), Path::new("t/test_pkg__calc.py"));
        assert_ne!(test_path(Path::new("t"), "a/b_c.py"), test_path(Path::new("t"), "a_b/c.py"));
    }

    #[test]
    fn signature_parts_hash_only_the_signature() {
        let a = "def add(a: int, b: int) -> int:\n    return a + b\n";
        let body = "def add(a: int, b: int) -> int:\n    return b + a\n";
        let sig = "def add(a: int, b: int, c: int = 0) -> int:\n    return a + b\n";
        let h = |s: &str| Signatures.hash_part("calc.py", s, SIG, "add");
        assert!(h(a).is_some());
        assert_eq!(h(a), h(body));
        assert_ne!(h(a), h(sig));
        assert_eq!(Signatures.hash_part("calc.py", a, SIG, "gone"), None);
        assert_eq!(Signatures.hash_part("calc.py", a, "body", "add"), None);
    }
}
