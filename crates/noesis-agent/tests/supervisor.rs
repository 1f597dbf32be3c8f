//! The supervisor's one event path: the driver publishes each step on the
//! bus, and the run's log (what the server streams and the dashboard
//! follows) is a subscriber like any other — the same events, in the same
//! order, as a subscriber of `agents.runs.*` sees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use noesis_agent::events::EventBus;
use noesis_agent::supervisor::{AgentHost, AgentRequest, AgentRuns, LOG_END, RunsPolicy};
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
