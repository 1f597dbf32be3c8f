use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Module name (lowercase, digits and hyphens; starts with a letter).
    name: String,
    /// Parent folder for the module.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Tier: exec, decision or exploration.
    #[arg(long, default_value = "decision")]
    tier: String,
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

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let valid_name = a.name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && a.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_name {
        bail!("invalid module name `{}`: use lowercase letters, digits and hyphens, starting with a letter", a.name);
    }
    if !["exec", "decision", "exploration"].contains(&a.tier.as_str()) {
        bail!("invalid tier `{}`: use exec, decision or exploration", a.tier);
    }
    let dir = a.dir.join(&a.name);
    if dir.exists() {
        bail!("{} already exists; not overwriting it", dir.display());
    }
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\nresponsibility: Describe in one line what {name} does\ntier: {tier}\n\npolicies:\n  network: deny\n  filesystem_write: deny\n  side_effects: deny\n  code_execution: deny\n\nfailure:\n  contract: error_union\n  partial_allowed: true\n\nio:\n  input: ./schema.json#/input\n  data: ./schema.json#/data\n  error: ./schema.json#/error\n\ntests:\n  - tests/case1.input.json -> tests/case1.expected.json\n",
        name = a.name,
        tier = a.tier
    );
    let expected = r#"{
  "$validate": {
    "ok": { "const": true },
    "data": { "type": "object", "required": ["result", "rationale"] }
  }
}
"#;
    // Written into a fresh temporary sibling and renamed into place, so a
    // failure never leaves a half-written module behind (the temporary
    // folder removes itself), and two runs at once never share one.
    std::fs::create_dir_all(&a.dir).with_context(|| format!("cannot create {}", a.dir.display()))?;
    let write = || -> std::io::Result<()> {
        let tmp = tempfile::Builder::new().prefix(&format!(".{}.init-", a.name)).tempdir_in(&a.dir)?;
        let tmp_path = tmp.path();
        std::fs::create_dir_all(tmp_path.join("tests"))?;
        std::fs::write(tmp_path.join("module.yaml"), &manifest)?;
        std::fs::write(tmp_path.join("prompt.md"), PROMPT.replace("{name}", &a.name))?;
        std::fs::write(tmp_path.join("schema.json"), SCHEMA)?;
        std::fs::write(tmp_path.join("tests/case1.input.json"), "{\n  \"query\": \"an example request\"\n}\n")?;
        std::fs::write(tmp_path.join("tests/case1.expected.json"), expected)?;
        std::fs::rename(tmp_path, &dir)
    };
    write().with_context(|| format!("cannot create {}", dir.display()))?;
    noesis_modules::load_dir(&dir).with_context(|| format!("{} was created but does not validate", dir.display()))?;
    out::data(&format!("created {}", dir.display()))?;
    out::note(&format!("next: edit {0}/prompt.md and {0}/schema.json, then `noesis validate {0}`", dir.display()));
    Ok(ExitCode::SUCCESS)
}
