//! Two agents on one bus, each a ReAct loop over the OpenAI wire (the fake
//! server on 127.0.0.1): the first's answers are the second's tasks.
//! Stopping the runtime right after publishing drains both.

use std::sync::Arc;

use noesis_agent::events::{AgentRuntime, CognitiveAgent, Event, EventBus, Lifecycle, RuntimeError};
use noesis_agent::{CognitiveConfig, ReactAgent, Toolbox, Workspace};
use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use noesis_testkit::{FakeServer, Reply};
use serde_json::json;

fn agent(server: &FakeServer, dir: &std::path::Path) -> ReactAgent {
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.retry = RetryPolicy::none();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir).unwrap(), vec![]));
    ReactAgent::new(Arc::new(OpenAiCompatible::new(cfg).unwrap()), tools, CognitiveConfig::single_shot())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agents_answer_triggers_the_other_and_stopping_drains_both() {
    let dir = tempfile::tempdir().unwrap();
    let writer = FakeServer::start(vec![Reply::Chat("a draft".into())]).unwrap();
    let reviewer = FakeServer::start(vec![Reply::Chat("looks good".into())]).unwrap();
    let runtime = AgentRuntime::new(EventBus::new(4));
    let mut reviews = runtime.bus().subscribe("reviews");
    runtime.create_agent("writer", CognitiveAgent::new(agent(&writer, dir.path()), "drafts"), &["tasks"]).unwrap();
    runtime
        .create_agent("reviewer", CognitiveAgent::new(agent(&reviewer, dir.path()), "reviews"), &["drafts"])
        .unwrap();
    assert_eq!(
        runtime.create_agent("writer", CognitiveAgent::new(agent(&writer, dir.path()), "x"), &["y"]),
        Err(RuntimeError::NameTaken("writer".into()))
    );
    for i in 0..3 {
        runtime
            .bus()
            .publish(Event::new("tasks", "task", &format!("job-{i}"), json!({"task": "write"})))
            .await
            .unwrap();
    }
    // Stop at once: the tasks queued, the drafts they lead to, the reviews.
    let states = runtime.stop().await;
    let handled: Vec<(String, u64)> = states.iter().map(|s| (s.name.clone(), s.handled)).collect();
    assert_eq!(handled, [("writer".into(), 3), ("reviewer".into(), 3)]);
    let mut got: Vec<(String, String)> = std::iter::from_fn(|| reviews.try_recv())
        .map(|e| (e.correlation_id, e.data["text"].as_str().unwrap().to_owned()))
        .collect();
    got.sort();
    assert_eq!(got, (0..3).map(|i| (format!("job-{i}"), "looks good".to_owned())).collect::<Vec<_>>());
    // The reviewer was asked about the writer's draft.
    let asked = reviewer.received()[0].json();
    assert!(asked["messages"].to_string().contains("a draft"), "{asked}");
    assert_eq!((writer.received().len(), reviewer.received().len()), (3, 3));
    // Stopped: no more events from outside, agents ended.
    assert!(runtime.bus().publish(Event::new("tasks", "task", "late", json!("x"))).await.is_err());
    assert_eq!(runtime.lifecycle("writer"), None, "stopped agents are gone from the runtime");
}

#[tokio::test]
async fn an_agent_that_stops_itself_ends_and_its_queue_is_dropped() {
    use noesis_agent::events::{AgentAction, AgentBehavior, AgentState};
    struct Once;
    #[async_trait::async_trait]
    impl AgentBehavior for Once {
        async fn on_event(&mut self, _: &Event, _: &mut AgentState) -> Vec<AgentAction> {
            vec![AgentAction::Stop]
        }
    }
    let runtime = AgentRuntime::new(EventBus::new(8));
    runtime.create_agent("once", Once, &["t"]).unwrap();
    for _ in 0..3 {
        runtime.bus().publish(Event::new("t", "k", "c", json!(null))).await.unwrap();
    }
    while runtime.lifecycle("once") == Some(Lifecycle::Running) {
        tokio::task::yield_now().await;
    }
    let states = runtime.stop().await;
    assert_eq!(states[0].handled, 1);
}
