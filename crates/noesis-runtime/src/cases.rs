//! A module's own test cases: `tests:` in module.yaml (`tests/x.input.json
//! -> tests/x.expected.json`), or `tests/*.input.json` beside
//! `*.expected.json`; each expected file holds `$validate` (JSON Schema
//! fragments for the envelope's `ok`, `meta`, `data`, `error`) and may hold
//! `$example`, a sample envelope a test run can answer with offline.
//!
//! Everything is read and checked here before the first model call, so a
//! typo in case 9 does not cost eight live calls. Case files must lie inside
//! the module folder: a test run may send what it reads to a provider.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use noesis_modules::search::{Found, NotFound, SearchPath, is_module_dir};
use noesis_modules::{CompiledSchema, LoadError, Module, Violation, load_dir, validate_envelope};
use serde_json::Value;

/// Why a module's cases could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The name is a built-in module, which has no files.
    #[error(
        "`{0}` is a built-in module, which carries no test files; pass the path of a module folder that has a tests/ folder"
    )]
    Builtin(String),
    /// Neither a module on the search path nor a folder.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// The folder cannot be listed.
    #[error("{}: cannot read the folder", .path.display())]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A folder with no module in it.
    #[error("{}: no modules in this folder", .0.display())]
    NoModules(PathBuf),
    /// A module does not load.
    #[error("cannot load module {}", .dir.display())]
    Load {
        /// The module folder.
        dir: PathBuf,
        /// The loader's error.
        #[source]
        source: LoadError,
    },
    /// A case (or its line in `tests:`) is refused; `path` is the file at fault.
    #[error("{}: {why}", .path.display())]
    Case {
        /// The file at fault.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

fn case_error(path: &Path, why: String) -> CaseError {
    CaseError::Case { path: path.to_owned(), why }
}

/// One `$validate` fragment: the part of the envelope it checks, compiled.
#[derive(Debug)]
pub struct Fragment {
    /// `ok`, `meta`, `data` or `error`.
    pub key: String,
    /// The fragment, compiled inside its file.
    pub schema: CompiledSchema,
}

/// One test case, read and checked.
#[derive(Debug)]
pub struct Case {
    /// The input file's name without `.input.json`.
    pub name: String,
    /// The input file.
    pub input_path: PathBuf,
    /// The expected file.
    pub expected_path: PathBuf,
    /// The module's input (an object).
    pub input: Value,
    /// What the envelope must satisfy.
    pub fragments: Vec<Fragment>,
    /// The sample envelope (`$example`), if the file has one.
    pub example: Option<Value>,
}

/// A module and its cases.
#[derive(Debug)]
pub struct Suite {
    /// The module under test.
    pub module: Arc<Module>,
    /// Its cases, in the order written.
    pub cases: Vec<Case>,
}

/// Module folders under `dir`, depth first in name order; a module's own
/// subfolders are not searched and hidden folders are skipped.
fn modules_under(dir: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if is_module_dir(dir) {
        found.push(dir.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let hidden = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if p.is_dir() && !hidden {
            modules_under(&p, found)?;
        }
    }
    Ok(())
}

/// The module folders `target` names: a module on the search path or a
/// folder, itself a module or holding modules.
///
/// # Errors
/// A built-in module, nothing by that name, or a folder without modules.
pub fn module_dirs(search: &SearchPath, target: &str) -> Result<Vec<PathBuf>, CaseError> {
    let dir = match search.resolve(target) {
        Ok(Found::Dir(d)) => d,
        Ok(Found::Builtin(name)) => return Err(CaseError::Builtin(name.to_string())),
        Err(not_found) => {
            let p = Path::new(target);
            if p.is_dir() {
                p.to_path_buf()
            } else {
                return Err(not_found.into());
            }
        }
    };
    let mut found = Vec::new();
    modules_under(&dir, &mut found).map_err(|source| CaseError::Folder { path: dir.clone(), source })?;
    if found.is_empty() {
        return Err(CaseError::NoModules(dir));
    }
    Ok(found)
}

/// Loads the module in `dir` and reads every one of its cases.
///
/// # Errors
/// The module does not load, or a case is refused.
pub fn load_suite(dir: &Path) -> Result<Suite, CaseError> {
    let module = load_dir(dir).map_err(|source| CaseError::Load { dir: dir.to_owned(), source })?;
    let cases = case_files(&module, dir)?.into_iter().map(|(i, e)| load_case(i, e)).collect::<Result<Vec<_>, _>>()?;
    Ok(Suite { module: Arc::new(module), cases })
}

/// `search` with the folders of the suites' modules after it, so `@call`s
/// and composition steps find the search path's modules, then the siblings
/// of the module under test.
pub fn resolve_in(search: &SearchPath, suites: &[Suite]) -> SearchPath {
    let mut resolve_in = search.clone();
    for suite in suites {
        if let Some(parent) = suite.module.location.parent()
            && !resolve_in.dirs.iter().any(|d| d == parent)
        {
            resolve_in.dirs.push(parent.to_path_buf());
        }
    }
    resolve_in
}

fn read_json(path: &Path, what: &str) -> Result<Value, CaseError> {
    let text = std::fs::read_to_string(path).map_err(|e| case_error(path, format!("cannot read the {what}: {e}")))?;
    serde_json::from_str(&text).map_err(|e| case_error(path, format!("the {what} is not JSON: {e}")))
}

/// `(input, expected)` paths of a module's cases, in the order written.
///
/// # Errors
/// A `tests:` line of the wrong form, or a case file outside the folder.
pub fn case_files(module: &Module, dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>, CaseError> {
    if !module.manifest.tests.is_empty() {
        return module
            .manifest
            .tests
            .iter()
            .map(|t| match t.split_once("->") {
                Some((i, e)) => Ok((contained(dir, i.trim())?, contained(dir, e.trim())?)),
                None => Err(case_error(
                    &dir.join("module.yaml"),
                    format!("tests: `{t}` is not of the form `tests/x.input.json -> tests/x.expected.json`"),
                )),
            })
            .collect();
    }
    let tests = dir.join("tests");
    let Ok(entries) = std::fs::read_dir(&tests) else { return Ok(Vec::new()) };
    let mut inputs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".input.json")))
        .collect();
    inputs.sort();
    inputs
        .into_iter()
        .map(|i| {
            let stem = i.file_name().unwrap_or_default().to_string_lossy().trim_end_matches(".input.json").to_owned();
            let rel = |name: String| format!("tests/{name}");
            let input = contained(dir, &rel(format!("{stem}.input.json")))?;
            Ok((input, contained(dir, &rel(format!("{stem}.expected.json")))?))
        })
        .collect()
}

/// `rel` inside the module folder `dir`, or an error naming the module
/// file: a case file may not be absolute, climb out with `..`, or be a
/// symlink (or under one) that leads out of the folder — a test run may
/// send what it reads to a provider. A symlink loop is an error, not a hang.
fn contained(dir: &Path, rel: &str) -> Result<PathBuf, CaseError> {
    let manifest = dir.join("module.yaml");
    let refuse = |why: &str| case_error(&manifest, format!("tests: `{rel}` {why}"));
    let path = Path::new(rel);
    if path.is_absolute() || path.has_root() {
        return Err(refuse("is an absolute path; case files must be inside the module folder"));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(refuse("leaves the module folder (`..`)"));
    }
    let joined = dir.join(path);
    let root = dir.canonicalize().map_err(|e| case_error(dir, e.to_string()))?;
    match joined.canonicalize() {
        Ok(real) if real.starts_with(&root) => Ok(joined),
        Ok(real) => Err(refuse(&format!("leads out of the module folder (to {})", real.display()))),
        // A missing file is reported when it is read, with its own message.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::fs::symlink_metadata(&joined).is_err() => Ok(joined),
        Err(e) => Err(refuse(&format!("cannot be resolved: {e}"))),
    }
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Reads one case: its input (an object) and its expected file's
/// `$validate` fragments, each compiled, and `$example`.
///
/// # Errors
/// A file that cannot be read or is not JSON, an input that is not an
/// object, no `$validate`, or a fragment that is not a valid schema.
pub fn load_case(input_path: PathBuf, expected_path: PathBuf) -> Result<Case, CaseError> {
    let name = input_path.file_name().unwrap_or_default().to_string_lossy().trim_end_matches(".input.json").to_owned();
    let input = read_json(&input_path, "test input")?;
    if !input.is_object() {
        return Err(case_error(&input_path, "the test input must be a JSON object".to_owned()));
    }
    let expected = read_json(&expected_path, "expected result")?;
    let Some(validate) = expected.get("$validate").and_then(Value::as_object) else {
        return Err(case_error(
            &expected_path,
            "no `$validate` object (JSON Schema fragments for ok, meta, data, error)".to_owned(),
        ));
    };
    let mut fragments = Vec::new();
    for key in validate.keys() {
        // Compiled inside the whole file so a `$ref` to its own definitions resolves.
        let schema = CompiledSchema::compile_section(&expected, &format!("/$validate/{}", escape_pointer(key)))
            .map_err(|e| {
                case_error(&expected_path, format!("`$validate.{key}` is not a valid schema: {}", e.message))
            })?;
        fragments.push(Fragment { key: key.clone(), schema });
    }
    let example = expected.get("$example").cloned();
    Ok(Case { name, input_path, expected_path, input, fragments, example })
}

impl Case {
    /// Every violation of `envelope`: the official envelope schema, then
    /// each fragment against its part, pointers relative to the envelope.
    pub fn judge(&self, envelope: &Value) -> Vec<Violation> {
        judge(envelope, &self.fragments)
    }
}

fn judge(envelope: &Value, fragments: &[Fragment]) -> Vec<Violation> {
    let mut violations = validate_envelope(envelope);
    for f in fragments {
        let at = format!("/{}", escape_pointer(&f.key));
        match envelope.get(&f.key) {
            None => violations.push(Violation {
                pointer: at,
                keyword: "required".to_owned(),
                message: format!("the envelope has no `{}`", f.key),
            }),
            Some(part) => violations.extend(f.schema.violations(part).into_iter().map(|mut v| {
                v.pointer = format!("{at}{}", v.pointer);
                v
            })),
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fragments(validate: Value) -> Vec<Fragment> {
        let doc = json!({ "$validate": validate });
        doc["$validate"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| Fragment {
                key: k.clone(),
                schema: CompiledSchema::compile_section(&doc, &format!("/$validate/{k}")).unwrap(),
            })
            .collect()
    }

    #[test]
    fn violations_point_into_the_envelope() {
        let env =
            json!({"ok": true, "meta": {"confidence": 0.3, "risk": "low", "explain": "e"}, "data": {"rationale": "r"}});
        let f = fragments(json!({
            "ok": {"const": true},
            "meta": {"properties": {"confidence": {"minimum": 0.5}}},
            "data": {"required": ["summary"]},
            "error": {"type": "object"}
        }));
        let got: Vec<(String, String)> = judge(&env, &f).into_iter().map(|v| (v.pointer, v.keyword)).collect();
        assert_eq!(
            got,
            [
                ("/meta/confidence".to_owned(), "minimum".to_owned()),
                ("/data/summary".to_owned(), "required".to_owned()),
                ("/error".to_owned(), "required".to_owned()),
            ]
        );
    }

    #[test]
    fn escape_pointer_follows_rfc_6901() {
        assert_eq!(escape_pointer("a/b~c"), "a~1b~0c");
    }

    fn refused(dir: &Path, rel: &str) -> String {
        match contained(dir, rel) {
            Err(CaseError::Case { why, .. }) => why,
            other => panic!("{rel}: {other:?}"),
        }
    }

    #[test]
    fn case_files_stay_inside_the_module_folder() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("m");
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        assert!(refused(&dir, "/etc/passwd").contains("is an absolute path"));
        assert!(refused(&dir, "tests/../../x.json").contains("leaves the module folder"));
        assert_eq!(contained(&dir, "tests/missing.json").unwrap(), dir.join("tests/missing.json"));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(t.path(), dir.join("tests/out")).unwrap();
            std::fs::write(t.path().join("secret.json"), "{}").unwrap();
            assert!(refused(&dir, "tests/out/secret.json").contains("leads out of the module folder"));
            std::os::unix::fs::symlink("loop", dir.join("tests/loop")).unwrap();
            assert!(refused(&dir, "tests/loop").contains("cannot be resolved"));
        }
    }

    #[test]
    fn a_case_needs_an_object_input_and_validate_fragments() {
        let t = tempfile::tempdir().unwrap();
        let (i, e) = (t.path().join("a.input.json"), t.path().join("a.expected.json"));
        std::fs::write(&i, "[1]").unwrap();
        std::fs::write(&e, r#"{"$validate": {"ok": {"const": true}}, "$example": {"ok": true}}"#).unwrap();
        assert!(load_case(i.clone(), e.clone()).unwrap_err().to_string().ends_with("must be a JSON object"));
        std::fs::write(&i, r#"{"x": 1}"#).unwrap();
        let case = load_case(i.clone(), e.clone()).unwrap();
        assert_eq!((case.name.as_str(), case.fragments.len()), ("a", 1));
        assert_eq!(case.example, Some(json!({"ok": true})));
        std::fs::write(&e, r#"{"$example": {}}"#).unwrap();
        assert!(load_case(i.clone(), e.clone()).unwrap_err().to_string().contains("no `$validate` object"));
        std::fs::write(&e, "{").unwrap();
        assert!(load_case(i, e).unwrap_err().to_string().contains("the expected result is not JSON"));
    }

    #[test]
    fn modules_are_found_depth_first_and_not_inside_a_module() {
        let t = tempfile::tempdir().unwrap();
        for m in ["b", "a/inner", "a/inner/nested", ".hidden"] {
            std::fs::create_dir_all(t.path().join(m)).unwrap();
            std::fs::write(t.path().join(m).join("module.yaml"), "").unwrap();
        }
        let mut found = Vec::new();
        modules_under(t.path(), &mut found).unwrap();
        assert_eq!(found, [t.path().join("a/inner"), t.path().join("b")]);
    }
}
