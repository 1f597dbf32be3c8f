//! Every scenario of the loop over real HTTP in each wire format the
//! provider layer speaks: OpenAI, Anthropic, Gemini and Ollama. A scenario
//! is written once as model turns; each format renders them as its own
//! response bodies, and what the model is sent back is checked in that
//! format's request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use noesis_agent::{
    Action, AgentRun, ApprovalPolicy, CallStatus, Decision, Limits, Outcome, RunConfig, StopReason, Toolbox, Verdict,
    Workspace, drive,
};
use noesis_llm::{EndpointConfig, Provider, RetryPolicy};
use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy)]
enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
    Ollama,
}

const WIRES: [Wire; 4] = [Wire::OpenAi, Wire::Anthropic, Wire::Gemini, Wire::Ollama];

/// One model turn: calls (id, tool, arguments) and text.
struct Turn(Vec<(&'static str, &'static str, Value)>, &'static str);

fn calls(c: Vec<(&'static str, &'static str, Value)>) -> Turn {
    Turn(c, "")
}

fn say(text: &'static str) -> Turn {
    Turn(Vec::new(), text)
}

impl Wire {
    /// The turn as this format's response body (10 tokens in, 5 out).
    fn reply(self, turn: &Turn) -> Reply {
        let Turn(calls, text) = turn;
        let body = match self {
            Wire::OpenAi => {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, name, args)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
                    })
                    .collect();
                let mut message =
                    json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
                if !tool_calls.is_empty() {
                    message["tool_calls"] = json!(tool_calls);
                }
                json!({"id": "x", "object": "chat.completion", "created": 0, "model": "gpt-test",
                       "choices": [{"index": 0, "message": message,
                                    "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
            }
            Wire::Anthropic => {
                let mut content: Vec<Value> = Vec::new();
                if !text.is_empty() {
                    content.push(json!({"type": "text", "text": text}));
                }
                for (id, name, args) in calls {
                    content.push(json!({"type": "tool_use", "id": id, "name": name, "input": args}));
                }
                json!({"id": "m", "type": "message", "role": "assistant", "model": "claude-test", "content": content,
                       "stop_reason": if calls.is_empty() { "end_turn" } else { "tool_use" }, "stop_sequence": null,
                       "usage": {"input_tokens": 10, "output_tokens": 5}})
            }
            Wire::Gemini => {
                let mut parts: Vec<Value> = Vec::new();
                if !text.is_empty() {
                    parts.push(json!({"text": text}));
                }
                for (_, name, args) in calls {
                    parts.push(json!({"functionCall": {"name": name, "args": args}}));
                }
                json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                       "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}})
            }
            Wire::Ollama => {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|(_, name, args)| json!({"function": {"name": name, "arguments": args}}))
                    .collect();
                json!({"model": "llama-test", "message": {"role": "assistant", "content": text, "tool_calls": tool_calls},
                       "done_reason": "stop", "done": true, "prompt_eval_count": 10, "eval_count": 5})
            }
        };
        Reply::Status(200, body.to_string(), vec![])
    }

    fn provider(self, server: &FakeServer) -> Box<dyn Provider> {
        let cfg = |name: &str, base: String, model: &str| {
            let mut c = EndpointConfig::new(name, &base, model);
            c.api_key = Some("k".into());
            c.http.retry = RetryPolicy::none();
            c.http.timeout = Duration::from_secs(30);
            c
        };
        let addr = server.addr();
        match self {
            Wire::OpenAi => {
                let mut c = EndpointConfig::openai("gpt-test");
                c.base_url = server.base_url();
                c.api_key = Some("k".into());
                c.http.retry = RetryPolicy::none();
                Box::new(noesis_llm::OpenAiCompatible::new(c).unwrap())
            }
            Wire::Anthropic => {
                Box::new(noesis_llm::Anthropic::new(cfg("anthropic", format!("http://{addr}"), "claude-test")).unwrap())
            }
            Wire::Gemini => Box::new(
                noesis_llm::Gemini::new(cfg("gemini", format!("http://{addr}/v1beta"), "gemini-test")).unwrap(),
            ),
            Wire::Ollama => {
                Box::new(noesis_llm::Ollama::new(cfg("ollama", format!("http://{addr}"), "llama-test")).unwrap())
            }
        }
    }
}

struct Case {
    server: FakeServer,
    provider: Box<dyn Provider>,
    tools: Arc<Toolbox>,
    dir: tempfile::TempDir,
}

impl Case {
    fn new(wire: Wire, turns: &[Turn]) -> Case {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "teh cat\n").unwrap();
        std::fs::write(dir.path().join("check.sh"), "grep -q 'the cat' a.txt && echo PASS\n").unwrap();
        let server = FakeServer::start(turns.iter().map(|t| wire.reply(t)).collect()).unwrap();
        let provider = wire.provider(&server);
        let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec!["sh check.sh".into()]));
        Case { server, provider, tools, dir }
    }

    fn run(&self, approval: ApprovalPolicy, limits: Limits) -> AgentRun {
        let config = RunConfig {
            tools: self.tools.decls(),
            approval,
            limits,
            permissions: self.tools.permissions().clone(),
            ..RunConfig::default()
        };
        AgentRun::new("r", "Fix the typo in a.txt.", config, 0)
    }

    fn drive(&self, run: &mut AgentRun) -> Action {
        self.drive_with(run, &|| 0, &|_| 0.0)
    }

    fn drive_with(
        &self,
        run: &mut AgentRun,
        now: &(dyn Fn() -> u64 + Send + Sync),
        price: &(dyn Fn(&noesis_llm::ChatResponse) -> f64 + Send + Sync),
    ) -> Action {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        // A JSON round trip at every checkpoint: what is stored is what goes on.
        let mut check = |r: &AgentRun| assert_eq!(&AgentRun::from_json(&r.to_json()).unwrap(), r);
        rt.block_on(drive(run, self.provider.as_ref(), &self.tools, now, price, &mut check)).unwrap()
    }

    /// The body of request `i` as text (each format names things its way,
    /// but the result texts appear verbatim in all of them).
    fn sent(&self, i: usize) -> String {
        self.server.received()[i].body.clone()
    }

    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(name)).ok()
    }
}

fn answer(a: &Action) -> &str {
    match a {
        Action::Done(Outcome::Answer { text }) => text,
        other => panic!("not an answer: {other:?}"),
    }
}

fn stopped(a: &Action) -> StopReason {
    match a {
        Action::Done(Outcome::Stopped { reason, .. }) => *reason,
        other => panic!("not a stop: {other:?}"),
    }
}

#[test]
fn read_edit_run_a_test_and_answer() {
    for wire in WIRES {
        let case = Case::new(
            wire,
            &[
                calls(vec![("c1", "read_file", json!({"path": "a.txt"}))]),
                calls(vec![("c2", "edit_file", json!({"path": "a.txt", "old": "teh", "new": "the"}))]),
                calls(vec![("c3", "run_command", json!({"command": "sh check.sh"}))]),
                say("Fixed."),
            ],
        );
        let mut run = case.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(answer(&case.drive(&mut run)), "Fixed.", "{wire:?}");
        assert_eq!(case.file("a.txt").as_deref(), Some("the cat\n"), "{wire:?}");
        assert!(case.sent(3).contains("PASS"), "{wire:?}: the test's output went back");
        assert!(run.calls.iter().all(|c| c.status == CallStatus::Completed), "{wire:?}");
    }
}

#[test]
fn a_tool_error_is_fed_back_and_the_model_recovers() {
    for wire in WIRES {
        let case = Case::new(
            wire,
            &[
                calls(vec![("c1", "read_file", json!({"path": "missing.txt"}))]),
                calls(vec![("c2", "read_file", json!({"path": "a.txt"}))]),
                say("It says teh cat."),
            ],
        );
        let mut run = case.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(answer(&case.drive(&mut run)), "It says teh cat.", "{wire:?}");
        assert_eq!(run.calls[0].status, CallStatus::Failed);
        let back = case.sent(1);
        assert!(back.contains("missing.txt") && back.contains("try again"), "{wire:?}: {back}");
    }
}

#[test]
fn invalid_arguments_and_unknown_tools_are_fed_back() {
    for wire in WIRES {
        let case = Case::new(
            wire,
            &[
                calls(vec![("c1", "read_file", json!({"file": "a.txt"}))]),
                calls(vec![("c2", "teleport", json!({"to": "mars"}))]),
                say("Giving up politely."),
            ],
        );
        let mut run = case.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(answer(&case.drive(&mut run)), "Giving up politely.", "{wire:?}");
        assert!(
            run.calls.iter().all(|c| c.status == CallStatus::Failed && c.started_ms.is_none()),
            "{wire:?}: nothing ran"
        );
        assert!(case.sent(1).contains("invalid arguments"), "{wire:?}: {}", case.sent(1));
        assert!(case.sent(2).contains("teleport"), "{wire:?}: {}", case.sent(2));
    }
}

#[test]
fn parallel_reads_in_one_turn_come_back_in_call_order() {
    for wire in WIRES {
        let case = Case::new(
            wire,
            &[
                calls(vec![
                    ("c1", "read_file", json!({"path": "check.sh"})),
                    ("c2", "read_file", json!({"path": "a.txt"})),
                ]),
                say("Read both."),
            ],
        );
        let mut run = case.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(answer(&case.drive(&mut run)), "Read both.", "{wire:?}");
        let back = case.sent(1);
        let (first, second) = (back.find("grep -q").unwrap(), back.find("teh cat").unwrap());
        assert!(first < second, "{wire:?}: results out of call order: {back}");
    }
}

#[test]
fn the_same_call_over_and_over_is_warned_once_then_stopped_as_stalled() {
    for wire in WIRES {
        // The last reply repeats: the model keeps listing the same folder.
        let case = Case::new(wire, &[calls(vec![("c1", "list_dir", json!({"path": "."}))])]);
        let mut run = case.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(stopped(&case.drive(&mut run)), StopReason::Stalled, "{wire:?}");
        let requests = case.server.received().len();
        assert!(requests < 10, "{wire:?}: {requests} requests");
        assert!(case.sent(requests - 1).contains("added nothing new"), "{wire:?}: the warning was sent");
    }
}

fn detail(run: &AgentRun) -> String {
    match &run.outcome {
        Some(Outcome::Stopped { detail, .. }) => detail.clone(),
        other => panic!("not stopped: {other:?}"),
    }
}

fn forever(k: usize) -> Vec<Turn> {
    let paths = ["a.txt", "check.sh", ".", "a.txt", "check.sh", ".", "a.txt", "check.sh"];
    paths.iter().cycle().take(k).map(|p| calls(vec![("c", "read_file", json!({"path": p}))])).collect()
}

/// The first request's prompt, estimated as the driver's meter does.
fn first_estimate(case: &Case) -> u64 {
    let Action::CallModel(first) = case.run(ApprovalPolicy::Auto, Limits::default()).next(0) else {
        panic!("a new run calls the model first")
    };
    noesis_llm::estimate_request_tokens(&first)
}

#[test]
fn the_meter_stops_a_run_before_the_call_that_would_cross_its_token_limit() {
    for wire in WIRES {
        let case = Case::new(wire, &forever(12));
        // Room for a few calls: each reply reports 15 tokens, but each
        // prompt is estimated (and held) before it goes out.
        let limit = first_estimate(&case) + 100;
        let mut run = case.run(ApprovalPolicy::Auto, Limits { max_tokens: Some(limit), ..Limits::default() });
        assert_eq!(stopped(&case.drive(&mut run)), StopReason::TokenBudget, "{wire:?}");
        let used = run.usage.input_tokens + run.usage.output_tokens;
        assert!(run.usage.turns >= 1 && used <= limit, "{wire:?}: {used} of {limit} in {} turns", run.usage.turns);
        assert_eq!(case.server.received().len() as u32, run.usage.turns, "{wire:?}: the refused call was not sent");
        let d = detail(&run);
        assert!(d.contains("token budget exceeded") && d.contains(&format!("limit {limit}")), "{wire:?}: {d}");
        // Near the limit the request carries the room left as its output
        // cap, so the reply cannot cross it.
        let last = case.sent(case.server.received().len() - 1);
        assert!(
            ["max_tokens", "max_completion_tokens", "maxOutputTokens", "num_predict"].iter().any(|k| last.contains(k)),
            "{wire:?}: no output cap in {last}"
        );
    }
}

#[test]
fn runs_sharing_a_meter_stop_together_on_the_cost_limit() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for wire in WIRES {
        // A tenth of a cent a token, in and out.
        let price = noesis_llm::Price { input: 1000.0, output: 1000.0 };
        let parent = Case::new(wire, &forever(12));
        let mut prices = noesis_llm::PriceTable::default();
        prices.set(parent.provider.model(), price);
        let prices = Arc::new(prices);
        let limit = (first_estimate(&parent) + 100) as f64 / 1000.0;
        let meter =
            Arc::new(noesis_llm::BudgetMeter::new(noesis_llm::Budget { max_tokens: None, max_cost_usd: Some(limit) }));
        let priced = {
            let prices = Arc::clone(&prices);
            move |r: &noesis_llm::ChatResponse| r.usage.and_then(|u| prices.cost(&r.model, u)).unwrap_or(0.0)
        };
        let drive = |case: &Case, run: &mut AgentRun| {
            let driver = noesis_agent::Driver {
                price: &priced,
                meter: Some(Arc::clone(&meter)),
                prices: Some(Arc::clone(&prices)),
                ..noesis_agent::Driver::new(case.provider.as_ref(), Arc::clone(&case.tools))
            };
            let mut keep = |_: &AgentRun| {};
            rt.block_on(driver.drive(run, &mut keep)).unwrap()
        };
        // No limits of its own: only the shared meter stops it.
        let mut first = parent.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(stopped(&drive(&parent, &mut first)), StopReason::CostBudget, "{wire:?}");
        assert!(first.usage.turns >= 1, "{wire:?}");
        assert!(meter.spent().cost_usd <= limit, "{wire:?}: {} of {limit}", meter.spent().cost_usd);
        assert!((meter.spent().cost_usd - first.usage.cost_usd).abs() < 1e-9, "{wire:?}: every reply priced");
        // A second run on the same meter (a sub-agent's place) finds what
        // the first spent gone: it stops sooner than the first did, and the
        // two together stay within the one limit.
        let child = Case::new(wire, &forever(12));
        let mut second = child.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(stopped(&drive(&child, &mut second)), StopReason::CostBudget, "{wire:?}");
        assert!(second.usage.turns < first.usage.turns, "{wire:?}: {} then {}", first.usage.turns, second.usage.turns);
        assert_eq!(child.server.received().len() as u32, second.usage.turns, "{wire:?}");
        let both = first.usage.cost_usd + second.usage.cost_usd;
        assert!((meter.spent().cost_usd - both).abs() < 1e-9 && both <= limit, "{wire:?}: {both} of {limit}");
        assert!(detail(&second).contains("cost budget exceeded"), "{wire:?}: {}", detail(&second));
    }
}

#[test]
fn each_budget_stops_the_run() {
    for wire in WIRES {
        let case = Case::new(wire, &forever(8));
        let mut run = case.run(ApprovalPolicy::Auto, Limits { max_turns: 2, ..Limits::default() });
        assert_eq!(stopped(&case.drive(&mut run)), StopReason::MaxTurns, "{wire:?}");
        assert_eq!(run.usage.turns, 2);

        let case = Case::new(wire, &forever(8));
        let mut run = case.run(ApprovalPolicy::Auto, Limits { max_tool_calls: 2, ..Limits::default() });
        assert_eq!(stopped(&case.drive(&mut run)), StopReason::MaxToolCalls, "{wire:?}");

        // The first request's prompt alone (the task and seven tool
        // schemas) is estimated above 40 tokens: refused before it is sent.
        let case = Case::new(wire, &forever(8));
        let mut run = case.run(ApprovalPolicy::Auto, Limits { max_tokens: Some(40), ..Limits::default() });
        assert_eq!(stopped(&case.drive(&mut run)), StopReason::TokenBudget, "{wire:?}");
        assert_eq!((case.server.received().len(), run.usage.turns), (0, 0), "{wire:?}: nothing sent");
        assert!(detail(&run).contains("limit 40"), "{wire:?}: {}", detail(&run));

        let case = Case::new(wire, &forever(8));
        let mut run = case.run(ApprovalPolicy::Auto, Limits { max_cost_usd: Some(0.025), ..Limits::default() });
        assert_eq!(stopped(&case.drive_with(&mut run, &|| 0, &|_| 0.01)), StopReason::CostBudget, "{wire:?}");

        let case = Case::new(wire, &forever(8));
        let clock = AtomicU64::new(0);
        let now = || clock.fetch_add(400, Ordering::SeqCst);
        let mut run = case.run(ApprovalPolicy::Auto, Limits { max_wall_ms: Some(2_000), ..Limits::default() });
        assert_eq!(stopped(&case.drive_with(&mut run, &now, &|_| 0.0)), StopReason::WallClock, "{wire:?}");

        let case = Case::new(wire, &[say("")]);
        let mut run = case.run(ApprovalPolicy::Auto, Limits::default());
        assert_eq!(stopped(&case.drive(&mut run)), StopReason::FormatErrors, "{wire:?}");
        assert_eq!(case.server.received().len(), 3, "{wire:?}: three empty replies in a row");
    }
}

fn decide(run: &mut AgentRun, pending: &Action, verdict: Verdict) {
    let Action::AwaitApproval(p) = pending else { panic!("not waiting: {pending:?}") };
    let d = Decision {
        call_id: p[0].call_id.clone(),
        tool: p[0].tool.clone(),
        arguments_hash: p[0].arguments_hash.clone(),
        verdict,
    };
    run.decide(&[d]).unwrap();
}

#[test]
fn approve_edit_deny_and_abort_and_a_pause_that_outlives_the_process() {
    let write = || calls(vec![("w1", "write_file", json!({"path": "b.txt", "content": "x"}))]);
    for wire in WIRES {
        // Approve, after the paused run went through JSON (a new process).
        let case = Case::new(wire, &[write(), say("Written.")]);
        let mut run = case.run(ApprovalPolicy::Ask, Limits::default());
        let pause = case.drive(&mut run);
        assert!(case.file("b.txt").is_none(), "{wire:?}: nothing runs before approval");
        let mut run = AgentRun::from_json(&serde_json::from_str(&run.to_json().to_string()).unwrap()).unwrap();
        decide(&mut run, &pause, Verdict::Approve);
        assert_eq!(answer(&case.drive(&mut run)), "Written.", "{wire:?}");
        assert_eq!(case.file("b.txt").as_deref(), Some("x"));

        // Edited arguments run instead.
        let case = Case::new(wire, &[write(), say("Written.")]);
        let mut run = case.run(ApprovalPolicy::Ask, Limits::default());
        let pause = case.drive(&mut run);
        decide(&mut run, &pause, Verdict::ApproveEdited { arguments: json!({"path": "c.txt", "content": "y"}) });
        assert_eq!(answer(&case.drive(&mut run)), "Written.", "{wire:?}");
        assert_eq!((case.file("b.txt"), case.file("c.txt").as_deref()), (None, Some("y")), "{wire:?}");

        // A denial's message reaches the model in its own format.
        let case = Case::new(wire, &[write(), say("Not writing.")]);
        let mut run = case.run(ApprovalPolicy::Ask, Limits::default());
        let pause = case.drive(&mut run);
        decide(&mut run, &pause, Verdict::Deny { message: Some("read-only today".into()) });
        assert_eq!(answer(&case.drive(&mut run)), "Not writing.", "{wire:?}");
        assert!(case.sent(1).contains("denied by the user: read-only today"), "{wire:?}: {}", case.sent(1));
        assert!(case.file("b.txt").is_none());

        // Abort ends it with no further model call.
        let case = Case::new(wire, &[write(), say("unused")]);
        let mut run = case.run(ApprovalPolicy::Ask, Limits::default());
        let pause = case.drive(&mut run);
        decide(&mut run, &pause, Verdict::Abort { message: None });
        assert!(matches!(case.drive(&mut run), Action::Done(Outcome::Aborted { .. })), "{wire:?}");
        assert_eq!(case.server.received().len(), 1, "{wire:?}");
    }
}
