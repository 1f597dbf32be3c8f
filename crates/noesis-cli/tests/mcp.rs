//! `noesis mcp` driven by a real MCP client: the official Python SDK
//! (`tests/mcp/client.py`), which scripts/test.sh installs and names in
//! `NOESIS_MCP_PYTHON`. Without it the test is skipped, loudly, except
//! under CI, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Work, assert_valid_envelope};

/// The Python that has the SDK; without it the test fails, or is skipped
/// with `NOESIS_SKIP_MCP_SDK` set.
pub(crate) fn client_python() -> Option<PathBuf> {
    let named = std::env::var_os("NOESIS_MCP_PYTHON").map(PathBuf::from);
    // scripts/python-deps.sh's default, for a run of cargo test after test.sh.
    let cached = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/noesis/mcp-client/bin/python"));
    let found = named
        .or(cached)
        .filter(|p| Command::new(p).args(["-c", "import mcp"]).output().is_ok_and(|o| o.status.success()));
    if found.is_none() {
        let why = "the MCP Python SDK is not installed (. scripts/python-deps.sh; install_mcp_client)";
        noesis_testkit::skip::missing(noesis_testkit::skip::Dependency::McpSdk, "mcp_python_sdk_client", why);
    }
    found
}

fn envelope(result: &Value) -> Value {
    let structured = result["structuredContent"].clone();
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, structured, "the text content is the envelope");
    assert_valid_envelope(&structured);
    structured
}

#[test]
fn mcp_python_sdk_client() {
    let Some(python) = client_python() else { return };
    let w = Work::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let o = Command::new(python)
        .arg(script)
        .arg(assert_cmd::cargo::cargo_bin("noesis"))
        .arg(w.path())
        .current_dir(w.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "the client failed:\n{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));

    // The SDK offers its newest handshake revision, which noesis speaks.
    let init = &r["initialize"];
    assert_eq!(init["protocolVersion"], "2025-11-25");
    assert_eq!(init["serverInfo"]["name"], "noesis");
    assert_eq!(init["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(init["capabilities"]["tools"].is_object() && init["capabilities"]["resources"].is_object(), "{init}");

    let names: Vec<&str> =
        r["tools"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["run", "compose", "list", "info", "agent"]);

    let ok = &r["run_ok"];
    assert_eq!(ok["isError"], false, "{ok}");
    let env = envelope(ok);
    assert_eq!(env["ok"], true);
    assert_eq!(env["meta"]["model"], "test/schema");

    let missing = &r["run_missing"];
    assert_eq!(missing["isError"], true, "{missing}");
    assert_eq!(envelope(missing)["error"]["code"], "E4006");

    // 2025-11-25: a bad argument is a tool error naming the field.
    let no_module = &r["run_no_module"];
    assert_eq!(no_module["isError"], true, "{no_module}");
    let env = envelope(no_module);
    assert_eq!(env["error"]["code"], "E1002");
    assert!(env["error"]["message"].as_str().unwrap().contains("`module`"), "{env}");

    let modules = r["list"]["structuredContent"]["modules"].as_array().unwrap();
    assert!(modules.iter().any(|m| m["name"] == "code-simplifier" && m["valid"] == true), "{modules:?}");
    assert_eq!(r["unknown_tool"]["code"], -32602, "{}", r["unknown_tool"]);

    let resources = r["resources"]["resources"].as_array().unwrap();
    let cs = resources.iter().find(|x| x["uri"] == "module://code-simplifier").expect("a resource per module");
    assert_eq!((&cs["name"], &cs["mimeType"]), (&json!("code-simplifier"), &json!("application/json")));
    assert!(cs["description"].as_str().is_some_and(|d| !d.is_empty()), "{cs}");

    let content = &r["read"]["contents"][0];
    assert_eq!(content["uri"], "module://code-simplifier");
    let body: Value = serde_json::from_str(content["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["manifest"]["name"], "code-simplifier");
    assert!(body["prompt"].as_str().is_some_and(|p| !p.is_empty()) && body["schema"].is_object(), "{body}");
    assert_eq!(r["read_missing"]["code"], -32002, "{}", r["read_missing"]);

    // Modules as prompts (an editor's slash commands), arguments from the input schema.
    assert!(init["capabilities"]["prompts"].is_object(), "{init}");
    let prompts = r["prompts"]["prompts"].as_array().unwrap();
    let meeting = prompts.iter().find(|p| p["name"] == "meeting-details").expect("a prompt per module");
    assert_eq!(meeting["arguments"][0]["name"], "message", "{meeting}");
    assert_eq!(meeting["arguments"][0]["required"], true, "{meeting}");
    let message = &r["prompt"]["messages"][0];
    assert_eq!(message["role"], "user", "{}", r["prompt"]);
    let text = message["content"]["text"].as_str().unwrap();
    assert!(text.contains("Lunch with Ada on Friday at noon"), "{text}");
    let missing = &r["prompt_missing_argument"];
    assert_eq!(missing["code"], -32602, "{missing}");
    assert!(missing["message"].as_str().unwrap().contains("`message`"), "{missing}");
    assert_eq!(r["prompt_unknown"]["code"], -32602, "{}", r["prompt_unknown"]);
}

/// Each module is an MCP prompt over stdio: an editor lists the modules as
/// slash commands (before, `prompts/list` was an unknown method), and a
/// prompt is the module's prompt rendered with the arguments given.
#[test]
fn mcp_serves_each_module_as_a_prompt_over_stdio() {
    let w = Work::new();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/get",
               "params": {"name": "code-simplifier", "arguments": {"code": "x = 1 + 0", "language": "python"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
               "params": {"name": "code-simplifier", "arguments": {"code": "x", "options": "not json"}}}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let o = w.noesis().args(["mcp", "--provider", "test"]).write_stdin(input).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Vec<Value> =
        String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let answer = |id: i64| out.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no answer {id}: {out:?}"));
    assert_eq!(answer(1)["result"]["capabilities"]["prompts"], json!({"listChanged": false}));
    let prompts = answer(2)["result"]["prompts"].as_array().unwrap();
    let cs = prompts.iter().find(|p| p["name"] == "code-simplifier").expect("code-simplifier is a prompt");
    let arguments: Vec<(&str, bool)> = cs["arguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap(), a["required"].as_bool().unwrap()))
        .collect();
    assert_eq!(arguments[0], ("code", true), "{cs}");
    assert!(arguments.contains(&("language", false)), "{cs}");
    let text = answer(3)["result"]["messages"][0]["content"]["text"].as_str().unwrap().to_owned();
    assert!(text.starts_with("# Code Simplifier"), "{text}");
    assert!(text.contains("x = 1 + 0") && text.contains("python"), "the arguments are in the prompt: {text}");
    let refused = &answer(4)["error"];
    assert_eq!(refused["code"], -32602, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("`options`"), "{refused}");
}

#[test]
fn mcp_drops_an_oversized_line_and_keeps_serving() {
    let w = Work::new();
    let huge =
        format!("{{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\", \"pad\": \"{}\"}}\n", "x".repeat(5000));
    let ping = "{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"ping\"}\n";
    let o = w
        .noesis()
        .args(["mcp", "--provider", "test", "--max-line", "1024"])
        .write_stdin(format!("{huge}{ping}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let answers: Vec<Value> =
        String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["error"]["code"], -32600, "{answers:?}");
    assert!(answers[0]["error"]["message"].as_str().unwrap().contains("1024 bytes"));
    assert_eq!(answers[1], json!({"jsonrpc": "2.0", "id": 2, "result": {}}), "the next message is served");
}

#[test]
fn mcp_agent_tool_delegates_a_task_and_reports_each_step_as_progress() {
    let w = Work::new();
    let fake = noesis_testkit::FakeServer::start(vec![
        noesis_testkit::Reply::Status(
            200,
            noesis_testkit::tool_call_completion("w1", "write_file", &json!({"path": "note.txt", "content": "hi"}))
                .to_string(),
            vec![],
        ),
        noesis_testkit::Reply::Chat("Wrote note.txt.".into()),
    ])
    .unwrap();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "agent",
               "arguments": {"task": "Write note.txt", "approve": "auto"}, "_meta": {"progressToken": "p1"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "agent",
               "arguments": {"task": "x", "approve": "ask"}}}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    // The operator allows `auto`; without it the client's `auto` would be
    // narrowed to the operator's `ask`, which over MCP means `never`.
    let o = w
        .noesis_bare()
        .args(["mcp", "--approve", "auto"])
        .env("OPENAI_BASE_URL", fake.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .write_stdin(input)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Vec<Value> =
        String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let answer = |id: i64| out.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no answer {id}: {out:?}"));
    let tools = answer(2)["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "agent"), "{tools:?}");
    let result = &answer(3)["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["answer"], "Wrote note.txt.");
    assert_eq!(result["structuredContent"]["status"], "done");
    assert_eq!(std::fs::read_to_string(w.path().join("note.txt")).unwrap(), "hi");
    // Each step went out as progress before the answer, counting up.
    let position = |id: i64| out.iter().position(|m| m["id"] == id).unwrap();
    let progress: Vec<(usize, &Value)> =
        out.iter().enumerate().filter(|(_, m)| m["method"] == "notifications/progress").collect();
    assert!(progress.len() >= 4, "{out:?}");
    assert!(progress.iter().all(|(i, m)| *i < position(3) && m["params"]["progressToken"] == "p1"));
    let counts: Vec<u64> = progress.iter().map(|(_, m)| m["params"]["progress"].as_u64().unwrap()).collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    assert!(progress.iter().any(|(_, m)| m["params"]["message"] == "tool_call write_file"), "{progress:?}");
    // Nobody can be asked over MCP: `ask` is refused, naming the field.
    let refused = &answer(4)["result"];
    assert_eq!(refused["isError"], true);
    assert!(refused["structuredContent"]["error"]["message"].as_str().unwrap().contains("`approve`"), "{refused}");
}

/// One `noesis mcp` session on a scripted OpenAI endpoint, initialized.
struct Session {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Session {
    fn start(w: &Work, fake: &noesis_testkit::FakeServer) -> Session {
        use std::io::BufRead;
        let mut child = w
            .noesis_std()
            .arg("mcp")
            .env("LLM_PROVIDER", "openai")
            .env("OPENAI_BASE_URL", fake.base_url())
            .env("OPENAI_API_KEY", "sk-test")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut s = Session { child, stdin, lines };
        s.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "t", "version": "1"}}}));
        s.answer(1);
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, message: &Value) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The answer to request `id` (notifications before it are skipped).
    fn answer(&mut self, id: i64) -> Value {
        for line in self.lines.by_ref() {
            let m: Value = serde_json::from_str(&line.unwrap()).unwrap();
            if m["id"] == id {
                return m;
            }
        }
        panic!("the session ended before answering {id}");
    }

    fn call_agent(&mut self, id: i64, arguments: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "agent", "arguments": arguments}}));
        self.answer(id)["result"].clone()
    }

    /// Ends the session as a client does (end of input); what it said on stderr.
    fn close(mut self) -> String {
        use std::io::Read;
        drop(self.stdin.take());
        let mut said = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut said).unwrap();
        assert!(self.child.wait().unwrap().success(), "{said}");
        said
    }
}

/// Issue 31: runs started through `noesis mcp`'s agent tool were not
/// resumed after a restart. Killed mid-run (kill -9), the next session
/// resumes the run — its completed command does not run again — and the
/// agent tool with `run_id` follows it to its answer. While the session
/// driving it lives, another session may not take the run over.
#[test]
fn a_new_mcp_session_resumes_the_agent_run_a_killed_one_left() {
    use noesis_testkit::{FakeServer, Reply};
    let w = Work::new();
    // The operator lets the agent tool's `approve: auto` stand.
    w.write("noesis.toml", "[agent]\nallow_commands = [\"sh count.sh\"]\napprove = \"auto\"\n");
    w.write("count.sh", "echo ran >> count.txt\n");
    let call = noesis_testkit::tool_call_completion("c1", "run_command", &json!({"command": "sh count.sh"}));
    let fake = FakeServer::start(vec![
        Reply::Status(200, call.to_string(), vec![]),
        // The first session is killed while it waits for this.
        Reply::Delay(std::time::Duration::from_secs(3600), Box::new(Reply::Chat("too late".into()))),
        Reply::Chat("Counted once.".into()),
    ])
    .unwrap();
    let mut first = Session::start(&w, &fake);
    first.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "agent", "arguments": {"task": "Count", "approve": "auto"}}}));
    // Progress, not time: the command has run once the second model call is out.
    while fake.received().len() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let listed = crate::support::output(w.noesis_bare().args(["agent", "list", "--json"])).json();
    let id = listed[0]["run_id"].as_str().unwrap().to_owned();

    let mut other = Session::start(&w, &fake);
    let refused = other.call_agent(2, json!({"run_id": id}));
    assert_eq!(refused["isError"], true, "{refused}");
    let message = refused["structuredContent"]["error"].to_string();
    assert!(message.contains("another noesis process"), "{refused}");
    assert!(!other.close().contains("resuming"), "a live session's run was taken over");

    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let mut next = Session::start(&w, &fake);
    let result = next.call_agent(2, json!({"run_id": id}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["answer"], "Counted once.", "{result}");
    let said = next.close();
    assert!(said.contains("resuming 1 agent run"), "{said}");
    assert_eq!(std::fs::read_to_string(w.path().join("count.txt")).unwrap(), "ran\n");
    assert_eq!(fake.received().len(), 3);
}

/// An MCP client's `approve: auto` only narrows: under the operator's
/// default (`ask`), and with nobody to ask over MCP, the write is denied
/// and the agent is told.
#[test]
fn mcp_agent_tool_cannot_raise_the_operators_approval_policy() {
    let w = Work::new();
    let fake = noesis_testkit::FakeServer::start(vec![
        noesis_testkit::Reply::Status(
            200,
            noesis_testkit::tool_call_completion("w1", "write_file", &json!({"path": "note.txt", "content": "hi"}))
                .to_string(),
            vec![],
        ),
        noesis_testkit::Reply::Chat("Could not write note.txt.".into()),
    ])
    .unwrap();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "agent",
               "arguments": {"task": "Write note.txt", "approve": "auto"}}}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let o = w
        .noesis_bare()
        .args(["mcp"])
        .env("OPENAI_BASE_URL", fake.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .write_stdin(input)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Vec<Value> =
        String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let result = &out.iter().find(|m| m["id"] == 2).unwrap()["result"];
    assert_eq!(result["structuredContent"]["status"], "done", "{result}");
    assert!(!w.path().join("note.txt").exists(), "the write was denied");
    let id = result["structuredContent"]["run_id"].as_str().unwrap();
    let shown = w.noesis_bare().args(["agent", "show", id, "--json"]).output().unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["calls"][0]["status"], "denied", "{shown}");
    assert_eq!(shown["config"]["approval"], "never", "{shown}");
}
