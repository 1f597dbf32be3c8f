//! The supervisor's one event path: the driver publishes each step on the
//! bus, and the run's log (what the server streams and the dashboard
//! follows) is a subscriber like any other — the same events, in the same
//! order, as a subscriber of `agents.runs.*` sees. And each live run is an
//! agent on the supervisor's runtime, which is what drives it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use noesis_agent::events::EventBus;
use noesis_agent::events::Lifecycle;
use noesis_agent::supervisor::{AgentHost, AgentRequest, AgentRuns, LOG_END, RunsPolicy, agent_name};
use noesis_agent::{AgentRun, RunConfig, Toolbox, Workspace};
use noesis_llm::{Provider, Scripted};
use serde_json::Value;

struct Host {
    dir: tempfile::TempDir,
    runs: Mutex<HashMap<String, AgentRun>>,
}

#[async_trait::async_trait]
impl AgentHost for Host {
    fn create(&self, id: &str, request: &AgentRequest) -> Result<AgentRun, String> {
        Ok(AgentRun::new(id, request.task.clone(), RunConfig::default(), 0))
    }
    async fn equip(&self, _run: &AgentRun) -> Result<(Arc<dyn Provider>, Arc<Toolbox>), String> {
        let workspace = Workspace::new(self.dir.path()).map_err(|e| e.to_string())?;
        Ok((Arc::new(Scripted::new(vec!["forty-two".into()])), Arc::new(Toolbox::new(workspace, Vec::new()))))
    }
    async fn save(&self, run: &AgentRun) -> Result<(), String> {
        self.runs.lock().unwrap().insert(run.id.clone(), run.clone());
        Ok(())
    }
    async fn load(&self, id: &str) -> Result<Option<AgentRun>, String> {
        Ok(self.runs.lock().unwrap().get(id).cloned())
    }
    async fn list(&self, _limit: u32) -> Result<Vec<Value>, String> {
        Ok(Vec::new())
    }
    async fn unfinished(&self) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_and_every_other_subscriber_read_the_same_published_events() {
    let host = Arc::new(Host { dir: tempfile::tempdir().unwrap(), runs: Mutex::default() });
    let bus = EventBus::new(64);
    let mut everything = bus.subscribe("agents.runs.*");
    let runs = AgentRuns::with_policy(host, bus, RunsPolicy { http: true, ..RunsPolicy::default() });
    let id = runs.start(AgentRequest { task: "the answer?".into(), ..AgentRequest::default() }).await.unwrap();
    let run = runs.wait(&id, |_| {}, &tokio_util::sync::CancellationToken::new()).await.unwrap();
    assert_eq!(run.outcome, Some(noesis_agent::Outcome::Answer { text: "forty-two".into() }));
    let logged: Vec<String> = runs.events(&id, 0).expect("a log").map(|e| e.kind).collect().await;
    let mut seen = Vec::new();
    while let Some(e) = everything.try_recv() {
        assert_eq!((e.topic.as_str(), e.correlation_id.as_str()), (format!("agents.runs.{id}").as_str(), id.as_str()));
        if e.kind != LOG_END {
            seen.push(e.kind);
        }
    }
    assert_eq!(logged, ["run_started", "model_call", "model_reply", "done"]);
    assert_eq!(seen, logged, "the log is one subscriber of the bus, not a second path");
    runs.shutdown().await;
}

/// Asks to write a file, then answers "written".
struct TwoTurns(Mutex<usize>);

#[async_trait::async_trait]
impl Provider for TwoTurns {
    fn name(&self) -> &str {
        "two-turns"
    }
    fn model(&self) -> &str {
        "script"
    }
    fn capabilities(&self) -> noesis_llm::Capabilities {
        noesis_llm::Capabilities { tools: true, ..noesis_llm::Capabilities::default() }
    }
    async fn chat(&self, _r: &noesis_llm::ChatRequest) -> Result<noesis_llm::ChatResponse, noesis_llm::ProviderError> {
        let turn = {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            *n
        };
        let call = noesis_llm::ToolCall {
            id: "w1".into(),
            name: "write_file".into(),
            arguments: serde_json::json!({"path": "a.txt", "content": "x"}),
        };
        Ok(noesis_llm::ChatResponse {
            text: if turn == 1 { String::new() } else { "written".into() },
            model: "script".into(),
            usage: None,
            finish_reason: Some(noesis_llm::FinishReason::Stop),
            structured: noesis_llm::StructuredMode::Text,
            tool_calls: if turn == 1 { vec![call] } else { Vec::new() },
            served_by: None,
        })
    }
}

/// A run waiting for a decision is a running agent on the runtime;
/// decided, it ends and its agent stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_live_run_is_an_agent_on_the_supervisors_runtime() {
    struct Asking(Host);
    #[async_trait::async_trait]
    impl AgentHost for Asking {
        fn create(&self, id: &str, request: &AgentRequest) -> Result<AgentRun, String> {
            let workspace = Workspace::new(self.0.dir.path()).map_err(|e| e.to_string())?;
            let tools = Toolbox::new(workspace, Vec::new()).decls();
            let config = RunConfig { tools, approval: noesis_agent::ApprovalPolicy::Ask, ..RunConfig::default() };
            Ok(AgentRun::new(id, request.task.clone(), config, 0))
        }
        async fn equip(&self, _run: &AgentRun) -> Result<(Arc<dyn Provider>, Arc<Toolbox>), String> {
            let workspace = Workspace::new(self.0.dir.path()).map_err(|e| e.to_string())?;
            let provider = TwoTurns(Mutex::new(0));
            Ok((Arc::new(provider), Arc::new(Toolbox::new(workspace, Vec::new()))))
        }
        async fn save(&self, run: &AgentRun) -> Result<(), String> {
            self.0.save(run).await
        }
        async fn load(&self, id: &str) -> Result<Option<AgentRun>, String> {
            self.0.load(id).await
        }
        async fn list(&self, limit: u32) -> Result<Vec<Value>, String> {
            self.0.list(limit).await
        }
        async fn unfinished(&self) -> Result<Vec<String>, String> {
            self.0.unfinished().await
        }
    }
    let host = Arc::new(Asking(Host { dir: tempfile::tempdir().unwrap(), runs: Mutex::default() }));
    let runs = AgentRuns::with_policy(host, EventBus::new(64), RunsPolicy { http: true, ..RunsPolicy::default() });
    let id = runs.start(AgentRequest { task: "write a.txt".into(), ..AgentRequest::default() }).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while runs.pending(&id).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the call never waited");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(runs.runtime().lifecycle(&agent_name(&id)), Some(Lifecycle::Running), "waiting is the agent's drive");
    let pending = runs.pending(&id);
    let decision = noesis_agent::Decision {
        call_id: pending[0].call_id.clone(),
        tool: pending[0].tool.clone(),
        arguments_hash: pending[0].arguments_hash.clone(),
        verdict: noesis_agent::Verdict::Deny { message: Some("not now".into()) },
    };
    runs.decide(&id, vec![decision]).await.unwrap();
    let run = runs.wait(&id, |_| {}, &tokio_util::sync::CancellationToken::new()).await.unwrap();
    assert_eq!(run.outcome, Some(noesis_agent::Outcome::Answer { text: "written".into() }));
    runs.runtime().idle().await;
    // The agent's loop ends just after its last event is handled.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while runs.runtime().lifecycle(&agent_name(&id)) != Some(Lifecycle::Stopped) {
        assert!(tokio::time::Instant::now() < deadline, "the agent never ended with its run");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(runs.runtime().lifecycle("run:nobody").is_none());
    runs.shutdown().await;
}
