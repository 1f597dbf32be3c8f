//! A plugin of your own on the frame core: it counts the TODOs of a file.
//!
//! The plugin shapes what the model sees and reads what it says; the core
//! records the step as a frame whose evidence is the file's hash. When the
//! file changes, the next session's core finds the conclusion stale and
//! invalidates the frame — the causal memory at work.
//!
//! The "model" is a stand-in that counts lines, so the example runs
//! offline; a real one would be a module run or an agent run.
//!
//! `cargo run -p noesis --example custom_plugin`

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use noesis::frames::{CausalFrame, Timestamp, identify};
use noesis::plugin::{ContextSlice, CoreContext, Parsed, PluginError, Step, Think, Thought, inside};
use noesis::prelude::*;
use serde_json::{Value, json};

/// Reads files of one project (and no others: `inside` refuses `..` and
/// absolute paths).
struct TodoCounter {
    root: std::path::PathBuf,
}

impl Plugin for TodoCounter {
    fn name(&self) -> &str {
        "todo-counter"
    }

    fn transform_input(&self, raw: &Value, _ctx: &CoreContext<'_>) -> Result<ContextSlice, PluginError> {
        let Some(file) = raw["file"].as_str() else {
            return Err(PluginError::Failed {
                plugin: self.name().into(),
                method: "transform_input".into(),
                message: "the request needs a \"file\"".into(),
            });
        };
        let path = inside(&self.root, file).ok_or_else(|| PluginError::Failed {
            plugin: self.name().into(),
            method: "transform_input".into(),
            message: format!("{file}: not a file inside the project"),
        })?;
        let text = std::fs::read_to_string(path).unwrap_or_default();
        Ok(ContextSlice { text: text.clone(), input: json!({"file": file, "text": text}), files: vec![file.into()] })
    }

    fn parse_output(&self, raw: &Value, _frame: &CausalFrame) -> Result<Parsed, PluginError> {
        let n = raw["todos"].as_u64().ok_or_else(|| PluginError::Failed {
            plugin: self.name().into(),
            method: "parse_output".into(),
            message: "the reply has no \"todos\" count".into(),
        })?;
        Ok(Parsed::new(format!("{n} TODO(s)"), 0.9, raw.clone()))
    }

    fn store(&self, _parsed: &Parsed, _frame: &CausalFrame) -> Result<(), PluginError> {
        Ok(())
    }
}

/// The stand-in model.
struct LineCounter;

#[async_trait::async_trait]
impl Think for LineCounter {
    async fn think(&self, slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        let todos = slice.text.lines().filter(|l| l.contains("TODO")).count();
        Ok(Thought { raw: json!({"todos": todos}), ..Thought::default() })
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("project");
    std::fs::create_dir_all(&root)?;
    std::fs::write(root.join("app.py"), "# TODO: handle errors\nx = 1\n# TODO: tests\n")?;
    let project = identify(&root)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;

    rt.block_on(async {
        let store = SqlStore::open(dir.path().join("noesis.db").to_str().unwrap_or_default()).await?;
        store.ensure_project(&project.project_id, &project.root.to_string_lossy()).await?;

        let mut core = Core::open(&store, &project, None, &[], Timestamp::now()).await?;
        let raw = json!({"file": "app.py"});
        let step = Step { query: "how many TODOs in app.py".into(), raw: &raw, parent: None };
        let outcome =
            core.step(&TodoCounter { root: project.root.clone() }, step, &LineCounter, Timestamp::now()).await?;
        println!("frame {}: {}", outcome.frame.frame_id, outcome.frame.conclusion);
        assert_eq!(outcome.frame.conclusion, "2 TODO(s)");

        // The file changes: reopening the core checks every live frame's
        // condition against the files and invalidates the stale conclusion.
        std::fs::write(root.join("app.py"), "x = 1\n")?;
        let core = Core::open(&store, &project, None, &[], Timestamp::now()).await?;
        let stale: Vec<_> = core.invalidated().iter().map(|i| i.frame_id.clone()).collect();
        assert!(stale.contains(&outcome.frame.frame_id), "the frame went stale: {stale:?}");
        println!("after the edit, invalidated: {} ({})", outcome.frame.frame_id, core.invalidated()[0].reason);
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
