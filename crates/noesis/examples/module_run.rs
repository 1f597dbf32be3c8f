//! Writes a Cognitive Module (v2.2) to a folder, loads it and runs it twice:
//! once with the schema-driven test model, once with a scripted reply that
//! breaks the module's schema — which ends in an E-coded error envelope, not
//! a panic. Point `NOESIS_EXAMPLE_MODULE` at a module folder to run yours.
//!
//! `cargo run -p noesis --example module_run`

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use noesis::llm::{Scripted, TestModel};
use noesis::module::{RunOptions, load_dir, run};
use serde_json::json;

const MANIFEST: &str = "name: word-counter
version: 1.0.0
responsibility: Count the words of a text
tier: exec
schema_strictness: high
";

const PROMPT: &str = "Count the words of the text in the input and report the count.\n";

const SCHEMA: &str = r#"{
  "input": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
  "data": {
    "type": "object",
    "properties": {"words": {"type": "integer", "minimum": 0}, "rationale": {"type": "string"}},
    "required": ["words", "rationale"]
  }
}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let folder = match std::env::var_os("NOESIS_EXAMPLE_MODULE") {
        Some(path) => std::path::PathBuf::from(path),
        None => {
            let folder = dir.path().join("word-counter");
            std::fs::create_dir_all(&folder)?;
            std::fs::write(folder.join("module.yaml"), MANIFEST)?;
            std::fs::write(folder.join("prompt.md"), PROMPT)?;
            std::fs::write(folder.join("schema.json"), SCHEMA)?;
            folder
        }
    };
    let module = load_dir(&folder)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let input = json!({"text": "the quick brown fox"});

    // The test model makes a reply that fits the schema: the run succeeds.
    let ok = rt.block_on(run(&module, &TestModel, input.clone(), &RunOptions::default()));
    assert_eq!(ok.envelope["ok"], true, "{}", ok.envelope);
    println!("test model: ok, data = {}", ok.envelope["data"]);

    // A reply that is not JSON at all: the runtime cannot repair it and
    // answers with an error envelope carrying an E-code.
    let broken = Scripted::new(vec!["four words, I think".into()]);
    let failed = rt.block_on(run(&module, &broken, input, &RunOptions::default()));
    assert_eq!(failed.envelope["ok"], false);
    let code = failed.envelope["error"]["code"].as_str().unwrap_or_default().to_owned();
    assert!(code.starts_with('E'), "an E-code: {code}");
    println!("broken reply: {code} — {}", failed.envelope["error"]["message"]);
    Ok(())
}
