//! `--max-total-tokens` / `--max-cost` on every command that takes them:
//! one meter per run tree (agent turns, sub-agents, `run_module`, each
//! module call of a command), each call refused before it goes out when it
//! could cross the limit. The fake server reports 3,000 tokens a reply, far
//! more than any prompt here is estimated at, so the call a limit stops is
//! known exactly: what the server received is what was allowed.

use noesis_testkit::{FakeServer, Reply, chat_completion, tool_call_completion};
use serde_json::{Value, json};

use crate::support::{Output, Work, output};

/// Tokens each reply reports.
const PER_REPLY: u64 = 3000;

/// `body` reporting [`PER_REPLY`] tokens.
fn costly(mut body: Value) -> Reply {
    body["usage"] = json!({"prompt_tokens": PER_REPLY, "completion_tokens": 0, "total_tokens": PER_REPLY});
    Reply::Status(200, body.to_string(), vec![])
}

fn call(id: &str, tool: &str, args: Value) -> Reply {
    costly(tool_call_completion(id, tool, &args))
}

fn envelope(data: Value) -> Reply {
    let text = json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": "scripted"}, "data": data});
    costly(chat_completion(&text.to_string(), "stop"))
}

/// Replies that must never be asked for: the limit stops the run first.
fn never(n: usize) -> Vec<Reply> {
    (0..n).map(|_| costly(chat_completion("this call crossed the limit", "stop"))).collect()
}

fn run(work: &Work, llm: &FakeServer, args: &[&str]) -> Output {
    output(
        work.noesis_bare()
            .args(args)
            .env("OPENAI_BASE_URL", llm.base_url())
            .env("OPENAI_API_KEY", "sk-test")
            .env("LLM_PROVIDER", "openai"),
    )
}

fn shown(work: &Work, run: &str) -> Value {
    let o = output(work.noesis_bare().args(["agent", "show", run, "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    o.json()
}

fn tokens(run: &Value) -> u64 {
    run["usage"]["input_tokens"].as_u64().unwrap() + run["usage"]["output_tokens"].as_u64().unwrap()
}

#[test]
fn an_agent_tree_with_a_sub_agent_and_run_module_stops_before_the_call_that_would_cross_the_limit() {
    let work = Work::new();
    std::fs::create_dir_all(work.path().join("ws")).unwrap();
    let ws = work.path().join("ws").to_string_lossy().into_owned();
    let module = crate::support::example_module("code-simplifier");
    let read = |p: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(module.join(p)).unwrap()).unwrap() };
    let input = read("tests/case1.input.json");
    let example = read("tests/case1.expected.json")["$example"].clone();
    // Long tasks: every agent prompt is estimated at well over 500 tokens.
    let task = "Simplify the function, then report what the module said about it. ".repeat(60);
    let mut script = vec![
        // The parent hands the work to a sub-agent: 3,000 spent.
        call("s1", "sub_agent", json!({"task": task})),
        // The sub-agent runs a module: 6,000.
        call("m1", "run_module", json!({"module": "code-simplifier", "input": input})),
        // The module's own call, on the same meter: 9,000.
        costly(chat_completion(&example.to_string(), "stop")),
    ];
    // 9,000 spent, 9,500 the limit: neither the sub-agent's next turn nor
    // the parent's fits a prompt of theirs.
    script.extend(never(3));
    let server = FakeServer::start(script).unwrap();
    let modules = module.parent().unwrap().to_string_lossy().into_owned();
    let o = run(
        &work,
        &server,
        &[
            "agent",
            &task,
            "--workspace",
            &ws,
            "--approve",
            "auto",
            "--run-id",
            "tree",
            "--modules",
            &modules,
            "--max-total-tokens",
            "9500",
            "--json",
        ],
    );
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(server.received().len(), 3, "the call that would cross the limit was not sent");
    let out = o.json();
    assert_eq!(out["outcome"]["reason"], "token_budget", "{out}");
    let detail = out["outcome"]["detail"].as_str().unwrap();
    assert!(detail.contains("9000 tokens used") && detail.contains("limit 9500"), "{detail}");
    // The sub-agent's spend (its own turn and its module's call) is the
    // parent's: the tree spent 9,000 and never more than the limit.
    let parent = shown(&work, "tree");
    assert_eq!(tokens(&parent), 3 * PER_REPLY, "{}", parent["usage"]);
    assert_eq!(parent["calls"][0]["spent"]["input_tokens"], 2 * PER_REPLY, "{}", parent["calls"][0]);
    let child = shown(&work, "tree.s1");
    assert_eq!(child["outcome"]["reason"], "token_budget", "{}", child["outcome"]);
    assert_eq!(tokens(&child), 2 * PER_REPLY);
    assert_eq!(child["calls"][0]["spent"]["calls"], 1, "the module's call: {}", child["calls"][0]);
    assert_eq!(child["calls"][0]["status"], "completed", "the module ran within the limit");
    // `agent show --json` says who spent what: per agent, role and model.
    let spend = parent["spend"].as_array().unwrap();
    let row = |agent: &str, role: &str| {
        spend.iter().find(|r| r["agent"] == agent && r["role"] == role).unwrap_or_else(|| panic!("{spend:#?}")).clone()
    };
    assert_eq!(
        (row("tree", "think")["calls"].clone(), row("tree", "think")["parent"].clone()),
        (json!(1), Value::Null)
    );
    assert_eq!(row("tree.s1", "think")["parent"], "tree");
    assert_eq!(row("tree.s1", "run_module")["input_tokens"], PER_REPLY);
    assert!(row("tree", "think")["model"].as_str().unwrap().starts_with("openai/"), "{spend:#?}");
    let total: u64 = spend.iter().map(|r| r["input_tokens"].as_u64().unwrap()).sum();
    assert_eq!((spend.len(), total), (3, 3 * PER_REPLY), "{spend:#?}");
    let text = output(work.noesis_bare().args(["agent", "show", "tree"])).stdout;
    assert!(text.contains("\nspend ") && text.contains("  tree.s1 (under tree) / run_module / "), "{text}");
}

#[test]
fn an_agent_run_resumed_counts_what_it_spent_before() {
    let work = Work::new();
    std::fs::create_dir_all(work.path().join("ws")).unwrap();
    let ws = work.path().join("ws").to_string_lossy().into_owned();
    let task = "Write b.txt, then look around. ".repeat(60);
    let mut script = vec![call("w1", "write_file", json!({"path": "b.txt", "content": "x"}))];
    script.extend(never(2));
    let server = FakeServer::start(script).unwrap();
    // Paused for approval after one reply (3,000 spent) …
    let o = run(&work, &server, &["agent", &task, "--workspace", &ws, "--run-id", "r", "--max-total-tokens", "3400"]);
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(output(work.noesis_bare().args(["agent", "approve", "r"])).code, 0);
    // … and resumed in a new process: the 3,000 are still spent, so the
    // next prompt does not fit.
    let o = run(&work, &server, &["agent", "resume", "r"]);
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(server.received().len(), 1, "{}", o.stderr);
    let r = shown(&work, "r");
    assert_eq!(r["outcome"]["reason"], "token_budget", "{}", r["outcome"]);
    assert!(r["outcome"]["detail"].as_str().unwrap().contains("3000 tokens used"), "{}", r["outcome"]);
}

/// The limit after one reply: room for one more prompt, never two replies.
const ONE_CALL: &str = "3050";

#[test]
fn docs_review_and_testgen_stop_before_the_call_that_would_cross_the_limit() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    work.write("calc/add.py", "def add(a: int, b: int) -> int:\n    return a + b\n");
    work.write("text/fmt.py", "def shout(s: str) -> str:\n    return s.upper()\n");
    work.write("calc.py", "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n");
    let diff = "diff --git a/calc/add.py b/calc/add.py\nnew file mode 100644\n--- /dev/null\n+++ b/calc/add.py\n@@ -0,0 +1,2 @@\n+def add(a, b):\n+    return a + b\ndiff --git a/text/fmt.py b/text/fmt.py\nnew file mode 100644\n--- /dev/null\n+++ b/text/fmt.py\n@@ -0,0 +1,2 @@\n+def shout(s):\n+    return s.upper()\n";
    let d = work.write("change.diff", diff);
    let docs = envelope(json!({"purpose": "Adds.", "api_notes": [], "rationale": "r"}));
    let review = envelope(json!({"findings": [], "summary": "fine", "rationale": "r"}));
    let spec = envelope(json!({"function": "add", "signature_hash": "x", "rationale": "r", "cases": []}));
    for (name, first, args) in [
        ("docs", docs, vec!["docs", "sync"]),
        ("review", review, vec!["review", "--diff", d.to_str().unwrap()]),
        ("testgen", spec, vec!["testgen", "calc.py"]),
    ] {
        let mut script = vec![first];
        script.extend(never(3));
        let llm = FakeServer::start(script).unwrap();
        let mut args = args.clone();
        args.extend(["--quiet", "--max-total-tokens", ONE_CALL]);
        let o = run(&work, &llm, &args);
        assert_eq!(llm.received().len(), 1, "{name}: the second call was not sent: {}\n{}", o.stdout, o.stderr);
        let said = format!("{}{}", o.stdout, o.stderr);
        assert!(said.contains("token budget exceeded") && said.contains("limit 3050"), "{name}: {said}");
        assert_ne!(o.code, 0, "{name}: {said}");
    }
}

#[test]
fn ask_stops_before_the_call_that_would_cross_the_limit() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    let mut script = vec![call("c0", "search_frames", json!({"text": "parser"}))];
    script.extend(never(3));
    let llm = FakeServer::start(script).unwrap();
    let o = run(&work, &llm, &["ask", "how does the parser split fields", "-q", "--max-total-tokens", ONE_CALL]);
    assert_eq!(llm.received().len(), 1, "{}\n{}", o.stdout, o.stderr);
    assert_ne!(o.code, 0, "{}", o.stdout);
    assert!(o.stderr.contains("token_budget") || o.stderr.contains("token budget"), "{}", o.stderr);
}

#[test]
fn a_cost_limit_is_priced_by_the_configured_prices() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    // A dollar a thousand tokens: one reply costs $3.
    work.write("noesis.toml", "[prices.fake-model]\ninput = 1000.0\noutput = 1000.0\n");
    work.write("calc/add.py", "def add(a: int, b: int) -> int:\n    return a + b\n");
    work.write("text/fmt.py", "def shout(s: str) -> str:\n    return s.upper()\n");
    let mut script = vec![envelope(json!({"purpose": "Adds.", "api_notes": [], "rationale": "r"}))];
    script.extend(never(3));
    let llm = FakeServer::start(script).unwrap();
    let o = run(&work, &llm, &["docs", "sync", "--quiet", "--model", "fake-model", "--max-cost", "3.05"]);
    assert_eq!(llm.received().len(), 1, "{}\n{}", o.stdout, o.stderr);
    let said = format!("{}{}", o.stdout, o.stderr);
    assert!(said.contains("cost budget exceeded") && said.contains("limit $3.0500"), "{said}");
    assert!(!said.contains("no price is known"), "{said}");
    // A model with no price: the limit cannot hold it, and the person is told.
    let llm = FakeServer::start(never(3)).unwrap();
    let o = run(&work, &llm, &["docs", "sync", "--quiet", "--model", "unpriced-model", "--max-cost", "3.05"]);
    assert!(
        o.stderr.contains("warning: no price is known for `unpriced-model`, so --max-cost 3.05 cannot hold its calls"),
        "{}",
        o.stderr
    );
}

#[test]
fn plugin_run_and_solve_refuse_a_call_that_cannot_fit() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    // solve: a failing test and a passing one; the planner's prompt alone
    // is over 10 tokens.
    work.write("proj/fail.sh", "exit 1\n");
    work.write("proj/ok.sh", "exit 0\n");
    let llm = FakeServer::start(never(3)).unwrap();
    let o = run(
        &work,
        &llm,
        &["solve", "Make fail.sh pass", "--workspace", "proj", "--test", "sh fail.sh", "--test", "sh ok.sh"]
            .into_iter()
            .chain(["--max-total-tokens", "10"])
            .collect::<Vec<_>>(),
    );
    assert_eq!(llm.received().len(), 0, "solve: {}\n{}", o.stdout, o.stderr);
    let said = format!("{}{}", o.stdout, o.stderr);
    assert!(said.contains("token budget exceeded") && said.contains("limit 10"), "solve: {said}");
    // plugin run: its module is the model.
    let py = if std::process::Command::new("python3").arg("--version").output().is_ok() { "python3" } else { "python" };
    let script = work.write("echo.py", ECHO_PLUGIN);
    work.write(
        "noesis.toml",
        &format!("[plugins.echo]\ncommand = [\"{py}\", \"{}\"]\nmodule = \"code-simplifier\"\n", script.display()),
    );
    let llm = FakeServer::start(never(3)).unwrap();
    let o = run(&work, &llm, &["plugin", "run", "echo", "def f(x): return x", "--max-total-tokens", "10"]);
    assert_eq!(llm.received().len(), 0, "plugin run: {}\n{}", o.stdout, o.stderr);
    let said = format!("{}{}", o.stdout, o.stderr);
    assert!(said.contains("token budget exceeded") && said.contains("limit 10"), "plugin run: {said}");
}

/// A plugin whose slice is a code-simplifier input.
const ECHO_PLUGIN: &str = r#"import json, sys
for line in sys.stdin:
    req = json.loads(line)
    m, p = req["method"], req.get("params", {})
    if m == "hello":
        out = {"protocol": 1}
    elif m == "transform_input":
        out = {"text": p["raw"]["query"], "input": {"code": p["raw"]["query"], "language": "python"}}
    elif m == "parse_output":
        out = {"conclusion": "done", "confidence": 0.6}
    else:
        out = {}
    print(json.dumps({"id": req["id"], "result": out}), flush=True)
"#;

#[test]
fn a_sub_agent_is_priced_as_its_parent_and_the_cost_limit_holds_across_them() {
    let work = Work::new();
    std::fs::create_dir_all(work.path().join("ws")).unwrap();
    let ws = work.path().join("ws").to_string_lossy().into_owned();
    // A dollar a thousand tokens: each reply costs $3.
    work.write("noesis.toml", "[prices.fake-model]\ninput = 1000.0\noutput = 1000.0\n");
    let task = "Ask a helper to look around and report back in detail. ".repeat(60);
    let start = |limit: &str, id: &str, script: Vec<Reply>| {
        let server = FakeServer::start(script).unwrap();
        let o = run(
            &work,
            &server,
            &["agent", &task, "--workspace", &ws, "--approve", "auto", "--run-id", id]
                .into_iter()
                .chain(["--model", "fake-model", "--max-cost", limit, "--json"])
                .collect::<Vec<_>>(),
        );
        (o, server.received().len())
    };
    let answer = |text: &str| costly(chat_completion(text, "stop"));
    // Room for all three replies: the sub-agent's $3 is the parent's.
    let (o, sent) = start(
        "100",
        "priced",
        vec![call("s1", "sub_agent", json!({"task": "Look around."})), answer("all quiet"), answer("It is quiet.")],
    );
    assert_eq!((o.code, sent), (0, 3), "{}", o.stderr);
    let child = shown(&work, "priced.s1");
    assert!((child["usage"]["cost_usd"].as_f64().unwrap() - 3.0).abs() < 1e-9, "{}", child["usage"]);
    let parent = shown(&work, "priced");
    assert!((parent["usage"]["cost_usd"].as_f64().unwrap() - 9.0).abs() < 1e-9, "{}", parent["usage"]);
    let by_agent: f64 = parent["spend"].as_array().unwrap().iter().map(|r| r["cost_usd"].as_f64().unwrap()).sum();
    assert!((by_agent - 9.0).abs() < 1e-9, "{}", parent["spend"]);
    // $6.50: after the parent's $3 and the sub-agent's $3, the parent's
    // next prompt (over 500 tokens, so over $0.50) is not sent.
    let mut script = vec![call("s1", "sub_agent", json!({"task": "Look around."})), answer("all quiet")];
    script.extend(never(2));
    let (o, sent) = start("6.5", "capped", script);
    assert_eq!((o.code, sent), (1, 2), "{}\n{}", o.stdout, o.stderr);
    let out = o.json();
    assert_eq!(out["outcome"]["reason"], "cost_budget", "{out}");
    let detail = out["outcome"]["detail"].as_str().unwrap();
    assert!(detail.contains("$6.0000 spent") && detail.contains("limit $6.5000"), "{detail}");
}
