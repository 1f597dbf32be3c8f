//! The context protocol and policy/tool enforcement, through whole runs over
//! real HTTP against the fake server: what the prompt the server received
//! holds (accepted context, filtered; never an unaccepted type or a secret),
//! emitted context stored and served to a later run until its TTL passes (a
//! manual clock, no sleeping), and each E4007 path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use noesis_modules::Module;
use noesis_runtime::{
    ContextOptions, ContextStore, ManualClock, MemoryContextStore, OnText, RunOptions, RunRecord, run,
};
use noesis_testkit::{FakeServer, Reply, chat_completion};
use serde_json::{Value, json};

const SECRET: &str = "sk-live-0123456789abcdefghijKLMN";

fn module(context: &Value, extra_yaml: &str) -> (tempfile::TempDir, Module) {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "name: ctx-demo\nversion: 1.0.0\nresponsibility: answer with the context given\ntier: decision\ncontext: {context}\n{extra_yaml}"
    );
    std::fs::write(dir.path().join("module.yaml"), yaml).unwrap();
    std::fs::write(dir.path().join("prompt.md"), "Answer the question: ${question}\n").unwrap();
    let schema = json!({
        "input": {"type": "object", "required": ["question"], "additionalProperties": false,
                  "properties": {"question": {"type": "string"}}},
        "data": {"type": "object", "required": ["rationale", "answer"],
                 "properties": {"rationale": {"type": "string"}, "answer": {"type": "string"}}}
    });
    std::fs::write(dir.path().join("schema.json"), schema.to_string()).unwrap();
    let m = noesis_modules::load_dir(dir.path()).unwrap();
    (dir, m)
}

fn accepting() -> Value {
    json!({
        "accepts": [
            {"type": "conversation_history", "max_turns": 2},
            {"type": "user_profile", "fields": ["name", "api_key", "prefs"]},
            {"type": "session_state"}
        ],
        "emits": [{"type": "session_state", "ttl": 60, "key_pattern": "state:${module}:${user_id}"}]
    })
}

fn reply(emitted: Option<Value>) -> String {
    let mut meta = json!({"confidence": 0.9, "risk": "low", "explain": "answered"});
    if let Some(e) = emitted {
        meta["_emitted_context"] = e;
    }
    json!({"ok": true, "meta": meta, "data": {"rationale": "from the context", "answer": "42"}}).to_string()
}

fn provider(server: &FakeServer) -> OpenAiCompatible {
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = server.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry = RetryPolicy { max_retries: 0, base_delay: Duration::ZERO, max_delay: Duration::ZERO };
    OpenAiCompatible::new(cfg).unwrap()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// One run against a fresh fake server: the record and the prompt the
/// server received (None when no request was made).
fn run_once(m: &Module, replies: Vec<Reply>, input: Value, options: &RunOptions) -> (RunRecord, Option<String>) {
    let server = FakeServer::start(replies).unwrap();
    let record = block(run(m, &provider(&server), input, options));
    assert!(noesis_modules::validate_envelope(&record.envelope).is_empty(), "{}", record.envelope);
    let prompt = server.received().first().map(|r| {
        let body = r.json();
        body["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap_or("")).collect::<String>()
    });
    (record, prompt)
}

#[test]
fn the_prompt_holds_accepted_context_only_filtered_and_without_secrets() {
    let (_d, m) = module(&accepting(), "");
    let turns: Vec<Value> = (0..4)
        .map(|i| json!({"role": "user", "content": format!("turn-{i} Authorization: Bearer tok{i}abcdefgh"), "timestamp": "2025-01-01T00:00:00Z"}))
        .collect();
    let input = json!({
        "question": "what is the answer?",
        "_context": {
            "conversation_history": turns,
            "user_profile": {"name": "Ann", "api_key": SECRET, "email": "ann@example.com",
                             "prefs": {"max_tokens": 300, "keyboard": "dvorak", "db_password": "hunter2"}},
            "previous_result": {"module": "other", "data": {"marker": "PREVIOUS-RESULT-MARKER"}},
            "environment": {"cwd": "/ENVIRONMENT-MARKER"}
        }
    });
    let (record, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], input, &RunOptions::default());
    assert_eq!(record.envelope["ok"], true, "the closed input schema passed: {}", record.envelope);
    let prompt = prompt.unwrap();
    assert!(prompt.contains("## Context"), "{prompt}");
    assert!(prompt.contains("turn-2") && prompt.contains("turn-3"), "the last two turns: {prompt}");
    assert!(!prompt.contains("turn-0") && !prompt.contains("turn-1"), "max_turns: {prompt}");
    assert!(
        prompt.contains("\"name\": \"Ann\"") && prompt.contains("dvorak") && prompt.contains("\"max_tokens\": 300")
    );
    assert!(!prompt.contains("ann@example.com"), "fields filter: {prompt}");
    assert!(!prompt.contains("PREVIOUS-RESULT-MARKER") && !prompt.contains("ENVIRONMENT-MARKER"), "{prompt}");
    assert!(!prompt.contains("\"_context\""), "the input section never carries _context: {prompt}");
    for secret in [SECRET, "hunter2", "tok2abcdefgh", "tok3abcdefgh"] {
        assert!(!prompt.contains(secret), "{secret} reached the prompt: {prompt}");
    }
    assert!(prompt.contains("[REDACTED]"));
    // The prompt recorded is the one sent.
    assert!(record.prompt.unwrap().contains("## Context"));
}

#[test]
fn a_module_without_accepts_sees_no_context() {
    let (_d, m) = module(&json!("main"), "");
    let input = json!({"question": "q", "_context": {"user_profile": {"name": "SHOULD-NOT-APPEAR"}}});
    let (record, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], input, &RunOptions::default());
    assert_eq!(record.envelope["ok"], true, "{}", record.envelope);
    let prompt = prompt.unwrap();
    assert!(!prompt.contains("SHOULD-NOT-APPEAR") && !prompt.contains("## Context"), "{prompt}");
}

#[test]
fn missing_required_context_is_e2007_and_malformed_context_names_the_pointer() {
    let ctx = json!({"accepts": [{"type": "conversation_history", "required": true}]});
    let (_d, m) = module(&ctx, "");
    let (record, prompt) =
        run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "q"}), &RunOptions::default());
    assert_eq!(record.envelope["error"]["code"], "E2007", "{}", record.envelope);
    assert_eq!(record.envelope["error"]["details"]["pointer"], "/_context/conversation_history");
    assert!(prompt.is_none(), "no request was made");
    let bad = json!({"question": "q", "_context": {"conversation_history": [{"role": "user"}]}});
    let (record, _) = run_once(&m, vec![Reply::Chat(reply(None))], bad, &RunOptions::default());
    assert_eq!(record.envelope["error"]["code"], "E1002", "{}", record.envelope);
    assert_eq!(record.envelope["error"]["details"]["pointer"], "/_context/conversation_history/0/content");
}

#[test]
fn emitted_context_is_kept_stored_and_served_to_a_later_run_until_it_expires() {
    let (_d, m) = module(&accepting(), "");
    let store = Arc::new(MemoryContextStore::new());
    let clock = ManualClock::new(1_700_000_000_000);
    let options = RunOptions {
        context: Some(ContextOptions {
            clock: Arc::new(clock.clone()),
            user_id: Some("u1".into()),
            ..ContextOptions::new(store.clone())
        }),
        ..RunOptions::default()
    };
    let emitted = json!({"session_state": {"step": 2, "STATE-MARKER": true, "token": "t0ps3cret-value"}, "user_profile": {"name": "not declared"}});
    let (first, prompt) = run_once(&m, vec![Reply::Chat(reply(Some(emitted)))], json!({"question": "first"}), &options);
    assert_eq!(first.envelope["ok"], true, "{}", first.envelope);
    assert!(first.envelope["meta"].get("_emitted_context").is_none(), "{}", first.envelope);
    assert_eq!(
        first.emitted_context,
        Some(json!({"session_state": {"step": 2, "STATE-MARKER": true, "token": "[REDACTED]"}}))
    );
    assert!(prompt.unwrap().contains("_emitted_context"), "the prompt says how to emit");
    let entries = store.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].key, "state:ctx-demo:u1");
    assert_eq!(entries[0].user_id.as_deref(), Some("u1"));
    assert_eq!(entries[0].expires_at_ms, Some(1_700_000_000_000 + 60_000));

    // A later run without session_state is served the stored one.
    clock.advance(59_000);
    let (second, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "second"}), &options);
    assert_eq!(second.envelope["ok"], true, "{}", second.envelope);
    let prompt = prompt.unwrap();
    assert!(prompt.contains("STATE-MARKER") && !prompt.contains("t0ps3cret"), "{prompt}");
    assert_eq!(second.emitted_context, None);

    // Another user is not served u1's state.
    let other = RunOptions {
        context: Some(ContextOptions { user_id: Some("u2".into()), ..options.context.clone().unwrap() }),
        ..RunOptions::default()
    };
    let (_, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "other"}), &other);
    assert!(!prompt.unwrap().contains("STATE-MARKER"));

    // Caller-supplied context wins over the store.
    let own = json!({"question": "own", "_context": {"session_state": {"OWN-MARKER": 1}}});
    let (_, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], own, &options);
    let prompt = prompt.unwrap();
    assert!(prompt.contains("OWN-MARKER") && !prompt.contains("STATE-MARKER"));

    // Past its TTL it is never served.
    clock.advance(1_000);
    let (_, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "late"}), &options);
    assert!(!prompt.unwrap().contains("STATE-MARKER"), "expired context was served");
}

#[test]
fn stored_context_satisfies_a_required_type_and_failed_runs_store_nothing() {
    let ctx = json!({"accepts": [{"type": "session_state", "required": true}],
                     "emits": [{"type": "session_state", "ttl": -1}]});
    let (_d, m) = module(&ctx, "");
    let store = Arc::new(MemoryContextStore::new());
    let options = RunOptions { context: Some(ContextOptions::new(store.clone())), ..RunOptions::default() };
    let with = json!({"question": "q", "_context": {"session_state": {"n": 1}}});
    // A failure envelope emits nothing, whatever it carries.
    let failed = json!({"ok": false, "meta": {"confidence": 0.0, "risk": "high", "explain": "no",
                        "_emitted_context": {"session_state": {"n": 99}}},
                        "error": {"code": "E2004", "message": "nothing to do"}})
    .to_string();
    let (r, _) = run_once(&m, vec![Reply::Chat(failed)], with.clone(), &options);
    assert_eq!(r.envelope["ok"], false);
    assert!(store.entries().is_empty() && r.emitted_context.is_none());
    // Top-level _emitted_context is read too (and removed before the check).
    let top = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "ok"},
                     "data": {"rationale": "r", "answer": "a"}, "_emitted_context": {"session_state": {"n": 2}}})
    .to_string();
    let (r, _) = run_once(&m, vec![Reply::Chat(top)], with, &options);
    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
    assert_eq!(store.entries()[0].expires_at_ms, None, "ttl -1 is persistent");
    assert_eq!(store.entries()[0].key, "ctx-demo:session_state", "the default key pattern");
    let (r, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "q"}), &options);
    assert_eq!(r.envelope["ok"], true, "the stored state satisfies `required`: {}", r.envelope);
    assert!(prompt.unwrap().contains("\"n\": 2"));
}

/// A store that always fails: the run goes on, the failure is a warning.
struct Broken;

#[async_trait::async_trait]
impl ContextStore for Broken {
    async fn put(&self, _: &noesis_runtime::ContextEntry) -> Result<(), noesis_runtime::ContextStoreError> {
        Err(noesis_runtime::ContextStoreError("disk full".into()))
    }
    async fn latest(
        &self,
        _: &noesis_runtime::ContextLookup<'_>,
    ) -> Result<Option<noesis_runtime::ContextEntry>, noesis_runtime::ContextStoreError> {
        Err(noesis_runtime::ContextStoreError("unreachable".into()))
    }
}

#[test]
fn a_failing_store_only_warns() {
    let (_d, m) = module(&accepting(), "");
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = warnings.clone();
    let options = RunOptions {
        context: Some(ContextOptions {
            on_warning: Some(OnText(Arc::new(move |w: &str| sink.lock().unwrap().push(w.to_owned())))),
            ..ContextOptions::new(Arc::new(Broken))
        }),
        ..RunOptions::default()
    };
    let (r, _) = run_once(
        &m,
        vec![Reply::Chat(reply(Some(json!({"session_state": {"n": 1}}))))],
        json!({"question": "q"}),
        &options,
    );
    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
    let w = warnings.lock().unwrap().join("\n");
    assert!(w.contains("unreachable") && w.contains("disk full"), "{w}");
}

fn code(r: &RunRecord) -> &str {
    r.envelope["error"]["code"].as_str().unwrap_or("(ok)")
}

#[test]
fn a_policy_the_host_does_not_grant_is_e4007_before_any_call() {
    let (_d, m) = module(&json!("main"), "policies:\n  network: allow\n  filesystem_write: deny\n");
    let (r, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "q"}), &RunOptions::default());
    assert_eq!(code(&r), "E4007", "{}", r.envelope);
    let message = r.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("`network: allow`"), "{message}");
    assert!(r.envelope["error"]["suggestion"].as_str().unwrap().contains("--allow network"));
    assert!(prompt.is_none() && r.calls == 0);
    let granted = RunOptions { allow: vec!["network".into()], ..RunOptions::default() };
    let (r, _) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "q"}), &granted);
    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
}

#[test]
fn an_offered_tool_the_module_denies_is_e4007_before_any_call() {
    let (_d, m) = module(&json!("main"), "tools:\n  policy: deny_by_default\n  allowed: [grep]\n  denied: [shell]\n");
    for (tool, why) in [("shell", "tools.denied"), ("curl", "not in tools.allowed")] {
        let options = RunOptions { tools: vec!["grep".into(), tool.into()], ..RunOptions::default() };
        let (r, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "q"}), &options);
        assert_eq!(code(&r), "E4007", "{}", r.envelope);
        let message = r.envelope["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("tool `{tool}`")) && message.contains(why), "{message}");
        assert!(prompt.is_none());
    }
    let ok = RunOptions { tools: vec!["grep".into()], ..RunOptions::default() };
    let (r, _) = run_once(&m, vec![Reply::Chat(reply(None))], json!({"question": "q"}), &ok);
    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
}

fn tool_call_reply(tool: &str) -> Reply {
    let mut body = chat_completion(&reply(None), "tool_calls");
    body["choices"][0]["message"]["tool_calls"] =
        json!([{"id": "call_1", "type": "function", "function": {"name": tool, "arguments": "{}"}}]);
    Reply::Status(200, body.to_string(), vec![("content-type".into(), "application/json".into())])
}

#[test]
fn a_reply_calling_a_tool_out_of_bounds_is_e4007() {
    let (_d, m) = module(&json!("main"), "tools:\n  allowed: [grep, ls]\n");
    let options = RunOptions { tools: vec!["grep".into()], ..RunOptions::default() };
    let (r, _) = run_once(&m, vec![tool_call_reply("rm")], json!({"question": "q"}), &options);
    assert_eq!(code(&r), "E4007", "{}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("tool `rm`"));
    assert_eq!(r.calls, 1);
    let (r, _) = run_once(&m, vec![tool_call_reply("ls")], json!({"question": "q"}), &options);
    assert_eq!(code(&r), "E4007", "permitted but not offered: {}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("did not offer"));
    let (r, _) = run_once(&m, vec![tool_call_reply("grep")], json!({"question": "q"}), &options);
    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
}

#[test]
fn accepted_context_counts_toward_max_input_tokens() {
    let ctx = json!({"accepts": [{"type": "session_state"}]});
    let (_d, m) = module(&ctx, "runtime_requirements:\n  max_input_tokens: 200\n");
    let big =
        json!({"question": "q", "_context": {"session_state": {"notes": "lorem ipsum dolor sit amet ".repeat(100)}}});
    let (r, prompt) = run_once(&m, vec![Reply::Chat(reply(None))], big.clone(), &RunOptions::default());
    assert_eq!(code(&r), "E1005", "{}", r.envelope);
    assert!(prompt.is_none());
    // Context the module does not accept is dropped, so it does not count.
    let (_d, plain) = module(&json!("main"), "runtime_requirements:\n  max_input_tokens: 200\n");
    let (r, _) = run_once(&plain, vec![Reply::Chat(reply(None))], big, &RunOptions::default());
    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
}
