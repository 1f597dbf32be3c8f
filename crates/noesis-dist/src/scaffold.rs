//! A new module folder from a template (`noesis init`): a v2.2 module with
//! a prompt, a schema and one test case, written into a temporary sibling
//! and renamed into place, so a failure never leaves half a module behind.

use std::path::{Path, PathBuf};

/// Why a module could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// A name that is not lowercase letters, digits and hyphens.
    #[error("invalid module name `{0}`: use lowercase letters, digits and hyphens, starting with a letter")]
    BadName(String),
    /// A tier other than exec, decision or exploration.
    #[error("invalid tier `{0}`: use exec, decision or exploration")]
    BadTier(String),
    /// The folder is there already.
    #[error("{} already exists; not overwriting it", .0.display())]
    Exists(PathBuf),
    /// The files could not be written.
    #[error("cannot create {}", .path.display())]
    Io {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The module written does not load (a template bug).
    #[error("{} was created but does not validate", .path.display())]
    Invalid {
        /// The module folder.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: noesis_modules::LoadError,
    },
}

const PROMPT: &str = "# {name}\n\nDescribe what the module does, step by step.\n\nThe request: $ARGUMENTS\n\nReturn `data.result` with your answer and `data.rationale` with your reasoning.\n";

const SCHEMA: &str = r##"{
  "input": {
    "type": "object",
    "properties": {
      "query": { "type": "string", "description": "What to do" }
    }
  },
  "data": {
    "type": "object",
    "required": ["result", "rationale"],
    "properties": {
      "result": { "type": "string" },
      "rationale": { "type": "string" },
      "extensions": { "$ref": "#/$defs/extensions" }
    }
  },
  "error": {
    "type": "object",
    "required": ["code", "message"],
    "properties": {
      "code": { "type": "string" },
      "message": { "type": "string" }
    }
  },
  "$defs": {
    "extensions": {
      "type": "object",
      "properties": {
        "insights": {
          "type": "array",
          "items": {
            "type": "object",
            "required": ["text", "suggested_mapping"],
            "properties": {
              "text": { "type": "string" },
              "suggested_mapping": { "type": "string" },
              "evidence": { "type": "string" }
            }
          }
        }
      }
    }
  }
}
"##;

/// The files of a new module `name` of `tier`, by path inside its folder.
///
/// # Errors
/// A bad name or tier.
pub fn files(name: &str, tier: &str) -> Result<Vec<(&'static str, String)>, ScaffoldError> {
    let valid_name = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_name {
        return Err(ScaffoldError::BadName(name.to_owned()));
    }
    if !["exec", "decision", "exploration"].contains(&tier) {
        return Err(ScaffoldError::BadTier(tier.to_owned()));
    }
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\nresponsibility: Describe in one line what {name} does\ntier: {tier}\n\npolicies:\n  network: deny\n  filesystem_write: deny\n  side_effects: deny\n  code_execution: deny\n\nfailure:\n  contract: error_union\n  partial_allowed: true\n\nio:\n  input: ./schema.json#/input\n  data: ./schema.json#/data\n  error: ./schema.json#/error\n\ntests:\n  - tests/case1.input.json -> tests/case1.expected.json\n",
        name = name,
        tier = tier
    );
    let expected = r#"{
  "$validate": {
    "ok": { "const": true },
    "data": { "type": "object", "required": ["result", "rationale"] }
  }
}
"#;
    Ok(vec![
        ("module.yaml", manifest),
        ("prompt.md", PROMPT.replace("{name}", name)),
        ("schema.json", SCHEMA.to_owned()),
        ("tests/case1.input.json", "{\n  \"query\": \"an example request\"\n}\n".to_owned()),
        ("tests/case1.expected.json", expected.to_owned()),
    ])
}

/// Creates the module `name` in `parent` and checks that it loads; returns
/// its folder.
///
/// # Errors
/// A bad name or tier, a folder already there, a write that fails, or a
/// module that does not load.
pub fn create(parent: &Path, name: &str, tier: &str) -> Result<PathBuf, ScaffoldError> {
    let files = files(name, tier)?;
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(dir));
    }
    // A fresh temporary sibling (it removes itself on failure), so two runs
    // at once never share one.
    std::fs::create_dir_all(parent).map_err(|source| ScaffoldError::Io { path: parent.to_owned(), source })?;
    let write = || -> std::io::Result<()> {
        let tmp = tempfile::Builder::new().prefix(&format!(".{name}.init-")).tempdir_in(parent)?;
        let tmp_path = tmp.path();
        std::fs::create_dir_all(tmp_path.join("tests"))?;
        for (rel, text) in &files {
            std::fs::write(tmp_path.join(rel), text)?;
        }
        std::fs::rename(tmp_path, &dir)
    };
    write().map_err(|source| ScaffoldError::Io { path: dir.clone(), source })?;
    noesis_modules::load_dir(&dir).map_err(|source| ScaffoldError::Invalid { path: dir.clone(), source })?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tiers_are_checked() {
        for bad in ["", "1abc", "Abc", "a_b", "a b"] {
            assert!(matches!(files(bad, "decision"), Err(ScaffoldError::BadName(_))), "{bad}");
        }
        assert!(matches!(files("ok-1", "other"), Err(ScaffoldError::BadTier(_))));
        let f = files("ok-1", "exec").unwrap();
        assert!(f[0].1.starts_with("name: ok-1\n") && f[0].1.contains("tier: exec\n"), "{}", f[0].1);
        assert!(f[1].1.starts_with("# ok-1\n"));
    }

    #[test]
    fn a_created_module_loads_and_is_not_overwritten() {
        let t = tempfile::tempdir().unwrap();
        let dir = create(t.path(), "greeter", "decision").unwrap();
        assert_eq!(dir, t.path().join("greeter"));
        let m = noesis_modules::load_dir(&dir).unwrap();
        assert_eq!(m.name, "greeter");
        assert!(matches!(create(t.path(), "greeter", "decision"), Err(ScaffoldError::Exists(_))));
        let left: Vec<_> = std::fs::read_dir(t.path()).unwrap().filter_map(Result::ok).map(|e| e.file_name()).collect();
        assert_eq!(left, ["greeter"], "no temporary folder left behind");
    }
}
