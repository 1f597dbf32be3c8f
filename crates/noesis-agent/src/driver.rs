//! Driving an [`AgentRun`] for real: the model through a `noesis_llm`
//! provider, the tools through a [`Toolbox`], the run handed to `checkpoint`
//! after every change (to be stored before the next step, so a crash loses
//! nothing). Read-only calls of a batch run concurrently on the blocking
//! pool; results are reported in call order.

use std::sync::Arc;

use noesis_llm::Provider;

use crate::builtin;
use crate::run::{Action, AgentRun, Invocation, ToolOutput};
use crate::tool::ToolDecl;
use crate::workspace::Workspace;

/// The built-in tools over one workspace.
#[derive(Debug, Clone)]
pub struct Toolbox {
    workspace: Workspace,
    allowed_commands: Vec<String>,
}

impl Toolbox {
    /// The tools over `workspace`; `run_command` runs only what
    /// `allowed_commands` allows (leading words).
    pub fn new(workspace: Workspace, allowed_commands: Vec<String>) -> Toolbox {
        Toolbox { workspace, allowed_commands }
    }

    /// Every tool's declaration.
    pub fn decls(&self) -> Vec<ToolDecl> {
        let mut all = builtin::file_tools();
        all.extend(builtin::search_tools());
        all.push(builtin::command_tool());
        all
    }

    /// Runs one call (blocking).
    pub fn run(&self, call: &Invocation) -> ToolOutput {
        if call.tool == "run_command" {
            return builtin::run_command(&self.workspace, &self.allowed_commands, &call.arguments);
        }
        builtin::run_file_tool(&self.workspace, &call.tool, &call.arguments)
            .or_else(|| builtin::run_search_tool(&self.workspace, &call.tool, &call.arguments))
            .unwrap_or_else(|| ToolOutput::error(format!("no tool `{}` in this toolbox", call.tool)))
    }
}

/// Drives `run` until it is done or waits for a person (the returned
/// action says which). `now` is the clock in milliseconds; `price` prices a
/// reply in dollars; `checkpoint` sees the run after each change.
pub async fn drive(
    run: &mut AgentRun,
    provider: &dyn Provider,
    tools: &Arc<Toolbox>,
    now: &dyn Fn() -> u64,
    price: &dyn Fn(&noesis_llm::ChatResponse) -> f64,
    checkpoint: &mut dyn FnMut(&AgentRun),
) -> Action {
    loop {
        match run.next(now()) {
            Action::CallModel(request) => {
                checkpoint(run);
                let reported = match provider.chat(&request).await {
                    Ok(reply) => run.on_model_reply(&reply, price(&reply)),
                    Err(e) => run.on_model_error(&e.to_string()),
                };
                if let Err(e) = reported {
                    // Only a driver bug gets here; the run says what.
                    return Action::Done(crate::run::Outcome::Stopped {
                        reason: crate::run::StopReason::Provider,
                        detail: e.to_string(),
                    });
                }
            }
            Action::ExecuteTools(batch) => {
                for call in &batch {
                    if run.started(&call.call_id, now()).is_err() {
                        continue;
                    }
                }
                checkpoint(run);
                let handles: Vec<_> = batch
                    .into_iter()
                    .map(|call| {
                        let tools = Arc::clone(tools);
                        let id = call.call_id.clone();
                        (id, tokio::task::spawn_blocking(move || tools.run(&call)))
                    })
                    .collect();
                for (id, handle) in handles {
                    let output = handle.await.unwrap_or_else(|e| ToolOutput::error(format!("the tool failed: {e}")));
                    let _ = run.finished(&id, output, now());
                    checkpoint(run);
                }
            }
            other @ (Action::AwaitApproval(_) | Action::Done(_) | Action::Busy(_)) => {
                checkpoint(run);
                return other;
            }
        }
    }
}
