//! An agent with a tool of your own, that must be approved before it runs.
//!
//! The model here is a stand-in that plays back two replies (ask for the
//! tool, then answer), so the example runs offline; swap in any
//! `noesis::llm` provider (e.g. `OpenAiCompatible`) for a real model.
//!
//! `cargo run -p noesis --example agent_with_tool`

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use std::sync::{Arc, Mutex};

use noesis::agent::{Pending, ToolFn};
use noesis::llm::{Capabilities, ProviderError, StructuredMode, ToolCall};
use noesis::prelude::*;
use serde_json::{Value, json};

/// Plays back its replies in order.
struct Playback(Mutex<Vec<ChatResponse>>);

#[async_trait::async_trait]
impl Provider for Playback {
    fn name(&self) -> &str {
        "playback"
    }
    fn model(&self) -> &str {
        "playback"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities { tools: true, ..Capabilities::default() }
    }
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        // The tool is offered to the model with its schema.
        assert!(request.tools.iter().any(|t| t.name == "save_note"));
        Ok(self.0.lock().unwrap().remove(0))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let notes: Arc<Mutex<Vec<String>>> = Arc::default();

    // The tool: declared with a JSON Schema and its effects (it writes, so
    // the approval policy applies), run by an async closure.
    let decl = ToolDecl::read_only(
        "save_note",
        "Saves a short note for the user.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    )
    .with_effects(Effects { writes_files: true, ..Effects::default() });
    let kept = Arc::clone(&notes);
    let save: ToolFn = Arc::new(move |arguments: Value| {
        let kept = Arc::clone(&kept);
        Box::pin(async move {
            let text = arguments["text"].as_str().unwrap_or_default().to_owned();
            kept.lock().unwrap().push(text.clone());
            ToolOutput::ok(format!("saved: {text}"))
        })
    });
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path())?, Vec::new()).with_tool(decl.clone(), save));

    let model = Playback(Mutex::new(vec![
        ChatResponse {
            tool_calls: vec![ToolCall {
                id: "call-1".into(),
                name: "save_note".into(),
                arguments: json!({"text": "buy milk"}),
            }],
            ..ChatResponse::text("", "playback", StructuredMode::Text)
        },
        ChatResponse::text("Saved your note.", "playback", StructuredMode::Text),
    ]));

    let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Ask, ..RunConfig::default() };
    let mut run = AgentRun::new("example-run", "Remember to buy milk.", config, 0);
    let driver = Driver::new(&model, Arc::clone(&tools));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;

    // Every change is checkpointed: here into a JSON string, in noesis into
    // the store, so the run can resume in another process.
    let mut saved = String::new();
    let mut checkpoint = |r: &AgentRun| saved = serde_json::to_string(r).unwrap_or_default();

    // The drive stops before the tool runs: a person must decide.
    let pending: Vec<Pending> = match rt.block_on(driver.drive(&mut run, &mut checkpoint))? {
        Action::AwaitApproval(pending) => pending,
        other => return Err(format!("expected an approval request, got {other:?}").into()),
    };
    assert!(notes.lock().unwrap().is_empty(), "nothing ran before the approval");
    println!("approve {} {}? yes", pending[0].tool, pending[0].arguments);
    let decisions: Vec<Decision> = pending
        .iter()
        .map(|p| Decision {
            call_id: p.call_id.clone(),
            tool: p.tool.clone(),
            arguments_hash: p.arguments_hash.clone(),
            verdict: Verdict::Approve,
        })
        .collect();
    run.decide(&decisions)?;

    match rt.block_on(driver.drive(&mut run, &mut checkpoint))? {
        Action::Done(Outcome::Answer { text }) => println!("answer: {text}"),
        other => return Err(format!("expected an answer, got {other:?}").into()),
    }
    assert_eq!(*notes.lock().unwrap(), ["buy milk"]);
    assert!(saved.contains("save_note"), "the checkpoint holds the call");
    Ok(())
}
