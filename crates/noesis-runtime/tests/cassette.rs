//! Record a whole module run over real HTTP, then replay it with the server
//! gone: the runtime must build the identical request, so the replay hits
//! and the envelope is the same apart from the per-run meta.

use std::sync::Arc;
use std::time::Duration;

use noesis_llm::{EndpointConfig, OpenAiCompatible, Provider, Recorder, Replayer, RetryPolicy};
use noesis_modules::search::Found;
use noesis_runtime::{RunOptions, run};
use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn without_run_meta(mut envelope: Value) -> Value {
    for k in ["trace_id", "latency_ms"] {
        envelope["meta"].as_object_mut().unwrap().remove(k);
    }
    envelope
}

#[test]
fn a_recorded_run_replays_offline_with_the_same_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let module = Found::Builtin("code-simplifier").load().unwrap();
    let input = json!({"code": "x = 1 + 0"});
    let reply = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
        "data": {"simplified_code": "x = 1", "changes": [], "behavior_equivalence": true, "summary": "s", "rationale": "r"}});
    let recorded = {
        let server = FakeServer::start(vec![Reply::Chat(reply.to_string())]).unwrap();
        let mut cfg = EndpointConfig::openai("gpt-4o-mini");
        cfg.base_url = server.base_url();
        cfg.api_key = Some("sk-never-in-a-cassette".into());
        cfg.http.retry = RetryPolicy::none();
        cfg.http.timeout = Duration::from_secs(5);
        let inner: Arc<dyn Provider> = Arc::new(OpenAiCompatible::new(cfg).unwrap());
        let recorder = Recorder::new(inner, dir.path()).unwrap();
        let r = block(run(&module, &recorder, input.clone(), &RunOptions::default()));
        assert_eq!(server.received().len(), 1);
        r
    };
    assert_eq!(recorded.envelope["ok"], true, "{}", recorded.envelope);
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1);
    assert!(!std::fs::read_to_string(&files[0]).unwrap().contains("sk-never-in-a-cassette"));

    // The server is gone: only the recording can answer.
    let replayer = Replayer::open(dir.path(), "openai", "gpt-4o-mini").unwrap();
    let replayed = block(run(&module, &replayer, input, &RunOptions::default()));
    assert_eq!(without_run_meta(replayed.envelope.clone()), without_run_meta(recorded.envelope.clone()));
    assert_eq!(replayed.prompt, recorded.prompt);
    assert_eq!(replayed.structured, recorded.structured);

    // Another input is not in the recording: fail closed, naming what differs.
    let missed = block(run(&module, &replayer, json!({"code": "y = 2 * 1"}), &RunOptions::default()));
    assert_eq!(missed.envelope["error"]["code"], "E4001");
    let message = missed.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("/messages/1/content"), "{message}");
}
