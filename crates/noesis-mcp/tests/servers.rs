//! The MCP client against real third-party servers, installed pinned by
//! `scripts/mcp-servers.sh`: the reference filesystem server (npm),
//! `mcp-server-git` and `mcp-server-time` (PyPI). Each test starts its
//! own server processes on a temporary folder.

use std::sync::Arc;

use noesis_agent::{
    Action, AgentRun, ApprovalPolicy, CallStatus, Decision, McpOutcome, Outcome, RunConfig, ToolEvidence, ToolOutput,
    ToolSource, Toolbox, Verdict, Workspace, drive,
};
use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use noesis_mcp::{Answers, Elicitation, Elicited, Elicitor, McpRun, McpServers, RouterSampler, ServerSpec};
use noesis_testkit::skip::{Dependency, missing};
use noesis_testkit::{FakeServer, Reply, tool_call_completion};
use serde_json::{Value, json};

/// The program `var` names, or `None` (the test is skipped, loudly) when
/// the servers are not installed and the opt-out is set.
fn server(var: &str, test: &str) -> Option<String> {
    match std::env::var(var).ok().filter(|p| std::path::Path::new(p).exists()) {
        Some(p) => Some(p),
        None => {
            missing(Dependency::McpServers, test, &format!("{var} does not name an installed server"));
            None
        }
    }
}

async fn call(servers: &McpServers, tool: &str, args: Value) -> ToolOutput {
    servers.call(tool, args).unwrap_or_else(|| panic!("no source for {tool}")).await
}

fn mcp_evidence(out: &ToolOutput) -> (McpOutcome, String) {
    match out.evidence.as_slice() {
        [ToolEvidence::Mcp { outcome, tool, .. }] => (*outcome, tool.clone()),
        other => panic!("expected one MCP evidence, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_server_tools_are_listed_with_their_hints_and_called() {
    let Some(fs) = server("NOESIS_MCP_SERVER_FILESYSTEM", "filesystem_server_tools") else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let root = dir.path().canonicalize().unwrap();
    let servers =
        McpServers::connect(vec![ServerSpec::command("fs", &fs, &[root.to_str().unwrap()]).trusted()]).await.unwrap();
    let decls = servers.decls();
    let find = |name: &str| decls.iter().find(|d| d.name == name).unwrap_or_else(|| panic!("no {name} in {decls:?}"));
    // Read tools carry readOnlyHint: read-only, idempotent; writing ones
    // change the world outside the run's view and need a decision.
    let read = find("fs__read_text_file");
    assert!(read.effects.read_only() && read.idempotent, "{read:?}");
    assert!(read.description.contains("MCP server `fs`; read-only"), "{}", read.description);
    let write = find("fs__write_file");
    assert!(!write.effects.read_only() && write.effects.external, "{write:?}");
    // The server marks it idempotent (the same content twice is one write):
    // a crash mid-call may run it again on resume.
    assert!(write.idempotent && write.description.contains("may change or delete data"), "{write:?}");
    assert!(write.parameters["properties"]["path"].is_object(), "{}", write.parameters);

    let path = root.join("notes.txt");
    let out = call(&servers, "fs__read_text_file", json!({"path": path})).await;
    assert!(!out.is_error && out.content.contains("alpha\nbeta"), "{out:?}");
    assert_eq!(mcp_evidence(&out), (McpOutcome::Ok, "read_text_file".into()));

    // Outside the allowed folder: the server's own isError, a typed tool error.
    let out = call(&servers, "fs__read_text_file", json!({"path": "/etc/hostname"})).await;
    assert!(out.is_error, "{out:?}");
    assert!(out.content.to_lowercase().contains("access denied"), "{}", out.content);
    assert_eq!(mcp_evidence(&out).0, McpOutcome::ToolError);

    let out = call(&servers, "fs__write_file", json!({"path": root.join("new.txt"), "content": "written"})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(std::fs::read_to_string(root.join("new.txt")).unwrap(), "written");
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_and_time_servers_from_pypi_answer() {
    let Some(git) = server("NOESIS_MCP_SERVER_GIT", "git_and_time_servers") else { return };
    let Some(time) = server("NOESIS_MCP_SERVER_TIME", "git_and_time_servers") else { return };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    let sh = |args: &[&str]| {
        let ok = std::process::Command::new("git").args(args).current_dir(repo).status().unwrap().success();
        assert!(ok, "git {args:?}");
    };
    sh(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    sh(&["-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", "README"]);
    sh(&["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "first commit"]);
    std::fs::write(repo.join("untracked.txt"), "x").unwrap();
    let servers = McpServers::connect(vec![
        ServerSpec::command("git", &git, &["--repository", repo.to_str().unwrap()]).trusted(),
        ServerSpec::command("time", &time, &["--local-timezone", "UTC"]).trusted(),
    ])
    .await
    .unwrap();
    assert_eq!(servers.names(), ["git", "time"]);
    let decls = servers.decls();
    let status = decls.iter().find(|d| d.name == "git__git_status").expect("git_status");
    assert!(status.effects.read_only(), "{status:?}");
    let commit = decls.iter().find(|d| d.name == "git__git_commit").expect("git_commit");
    assert!(!commit.effects.read_only(), "{commit:?}");

    let out = call(&servers, "git__git_status", json!({"repo_path": repo})).await;
    assert!(!out.is_error && out.content.contains("untracked.txt"), "{out:?}");
    let out = call(&servers, "git__git_log", json!({"repo_path": repo})).await;
    assert!(out.content.contains("first commit"), "{out:?}");

    let out = call(&servers, "time__get_current_time", json!({"timezone": "UTC"})).await;
    assert!(!out.is_error, "{out:?}");
    let answer: Value = serde_json::from_str(&out.content).unwrap();
    assert_eq!(answer["timezone"], "UTC");
    // An unknown zone is the server's error, typed as such.
    let out = call(&servers, "time__get_current_time", json!({"timezone": "Mars/Olympus"})).await;
    assert!(out.is_error, "{out:?}");
    servers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_is_restarted_once_then_its_tools_report_it() {
    let Some(time) = server("NOESIS_MCP_SERVER_TIME", "a_server_that_dies") else { return };
    let servers =
        McpServers::connect(vec![ServerSpec::command("time", &time, &["--local-timezone", "UTC"])]).await.unwrap();
    let kill = |pid: u32| {
        assert!(std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    };
    let first = servers.pid("time").unwrap();
    kill(first);
    // Give the client time to see the pipe close.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let out = call(&servers, "time__get_current_time", json!({"timezone": "UTC"})).await;
    assert!(!out.is_error, "restarted and answered: {out:?}");
    let second = servers.pid("time").unwrap();
    assert_ne!(first, second);

    let before = servers.revision();
    kill(second);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let out = call(&servers, "time__get_current_time", json!({"timezone": "UTC"})).await;
    assert!(out.is_error && out.content.contains("already started again once"), "{out:?}");
    assert_eq!(mcp_evidence(&out).0, McpOutcome::Unavailable);
    // Its tools are withdrawn from the run's next request.
    assert!(servers.decls().is_empty() && servers.revision() != before);
    let out = call(&servers, "time__convert_time", json!({})).await;
    assert!(out.is_error, "{out:?}");
}

#[test]
fn a_server_that_cannot_start_is_a_clear_error() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(McpServers::connect(vec![ServerSpec::command("nope", "/nonexistent/mcp-server", &[])]))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("MCP server `nope` could not be started") && e.contains("/nonexistent/mcp-server"), "{e}");
    // A program that exits at once: its stderr explains.
    let e = rt
        .block_on(McpServers::connect(vec![ServerSpec::command("sh", "sh", &["-c", "echo broken config >&2; exit 3"])]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("broken config"), "{e}");
    let e = rt.block_on(McpServers::connect(vec![ServerSpec::command("a__b", "true", &[])])).unwrap_err().to_string();
    assert!(e.contains("cannot name a server"), "{e}");
}

/// One server that cannot start is left out; the others serve. Only a
/// bad configuration (a name) fails them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_left_out_and_the_others_serve() {
    let Some(time) = server("NOESIS_MCP_SERVER_TIME", "a_server_that_cannot_start_is_left_out") else { return };
    let confine = noesis_mcp::Confine {
        settings: noesis_sandbox::Settings::default(),
        workspace: std::env::current_dir().unwrap(),
    };
    let specs = vec![
        ServerSpec::command("time", &time, &["--local-timezone", "UTC"]),
        ServerSpec::command("nope", "/nonexistent/mcp-server", &[]),
    ];
    let (servers, failed) = McpServers::connect_each(specs.clone(), confine.clone()).await.unwrap();
    assert_eq!(servers.names(), ["time"]);
    assert_eq!(failed.len(), 1);
    assert!(failed[0].to_string().starts_with("MCP server `nope` could not be started"), "{}", failed[0]);
    let out = call(&servers, "time__get_current_time", json!({"timezone": "UTC"})).await;
    assert!(!out.is_error, "{out:?}");
    servers.shutdown().await;
    // All or nothing where a caller asks for that.
    let e = McpServers::connect_confined(specs, confine.clone()).await.unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
    let bad = vec![ServerSpec::command("a__b", "true", &[])];
    assert!(McpServers::connect_each(bad, confine).await.is_err());
}

#[test]
fn a_server_runs_in_the_sandbox_unless_trusted() {
    // A "server" that tries to leave marks outside its workspace and to
    // read a file the run may not, then exits: confined, neither works.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mark = outside.path().join("mark");
    let script = format!("echo pwned > '{}'; env | grep -c SERVER_SECRET_TOKEN >&2; exit 3", mark.display());
    let confine =
        noesis_mcp::Confine { settings: noesis_sandbox::Settings::default(), workspace: ws.path().to_path_buf() };
    let mut spec = ServerSpec::command("evil", "sh", &["-c", &script]);
    if let noesis_mcp::Transport::Command { env, .. } = &mut spec.transport {
        // What the operator configures for the server is the server's.
        env.insert("SERVER_SECRET_TOKEN".into(), "configured".into());
    }
    let e = rt.block_on(McpServers::connect_confined(vec![spec.clone()], confine.clone())).unwrap_err().to_string();
    assert!(!mark.exists(), "a confined server wrote outside its workspace: {e}");
    assert!(e.contains("could not be started"), "{e}");
    spec.trusted = true;
    let _ = rt.block_on(McpServers::connect_confined(vec![spec], confine));
    assert!(mark.exists(), "a trusted server runs unconfined");
}

fn provider(server: &FakeServer) -> OpenAiCompatible {
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.retry = RetryPolicy::none();
    OpenAiCompatible::new(cfg).unwrap()
}

fn tool_call(id: &str, name: &str, args: Value) -> Reply {
    Reply::Status(200, tool_call_completion(id, name, &args).to_string(), vec![])
}

/// A run over the OpenAI wire (the fake server on 127.0.0.1) with the
/// filesystem server's tools: the read runs at once, the write waits for a
/// decision, then runs, and the model sees both results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reads_without_asking_and_waits_for_approval_to_write() {
    let Some(fs) = server("NOESIS_MCP_SERVER_FILESYSTEM", "a_run_reads_without_asking") else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("in.txt"), "42\n").unwrap();
    let servers = Arc::new(
        McpServers::connect(vec![ServerSpec::command("fs", &fs, &[root.to_str().unwrap()]).trusted()]).await.unwrap(),
    );
    let llm = FakeServer::start(vec![
        tool_call("c1", "fs__read_text_file", json!({"path": root.join("in.txt")})),
        tool_call("c2", "fs__write_file", json!({"path": root.join("out.txt"), "content": "42 doubled is 84"})),
        Reply::Chat("Wrote out.txt.".into()),
    ])
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let tools = Arc::new(
        Toolbox::new(Workspace::new(ws.path()).unwrap(), vec![])
            .with_source(Arc::clone(&servers) as Arc<dyn ToolSource>),
    );
    let config = RunConfig {
        tools: tools.decls().into_iter().filter(|d| d.name.starts_with("fs__")).collect(),
        approval: ApprovalPolicy::Ask,
        ..RunConfig::default()
    };
    let mut run = AgentRun::new("r1", "Double the number in in.txt into out.txt", config, 0);
    let provider = provider(&llm);
    let action = drive(&mut run, &provider, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    let Action::AwaitApproval(pending) = action else { panic!("{action:?}") };
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool, "fs__write_file");
    assert_eq!(run.calls[0].status, CallStatus::Completed);
    assert!(!root.join("out.txt").exists(), "nothing written before the decision");
    run.decide(&[Decision {
        call_id: pending[0].call_id.clone(),
        tool: pending[0].tool.clone(),
        arguments_hash: pending[0].arguments_hash.clone(),
        verdict: Verdict::Approve,
    }])
    .unwrap();
    let action = drive(&mut run, &provider, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(action, Action::Done(Outcome::Answer { text: "Wrote out.txt.".into() }));
    assert_eq!(std::fs::read_to_string(root.join("out.txt")).unwrap(), "42 doubled is 84");
    let sent = llm.received()[2].json();
    let results: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(results[0].contains("42") && results[1].to_lowercase().contains("successfully wrote"), "{results:?}");
    servers.shutdown().await;
}

/// A server that is not configured `trusted` gets no approval for its
/// `readOnlyHint`: the same read waits for a person, its description says
/// why, and a rule `mcp:fs__read*` lets it run without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_servers_read_only_hint_approves_nothing() {
    let Some(fs) = server("NOESIS_MCP_SERVER_FILESYSTEM", "an_untrusted_servers_read_only_hint") else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("in.txt"), "42\n").unwrap();
    let servers =
        Arc::new(McpServers::connect(vec![ServerSpec::command("fs", &fs, &[root.to_str().unwrap()])]).await.unwrap());
    let decls = servers.decls();
    let read = decls.iter().find(|d| d.name == "fs__read_text_file").unwrap();
    assert!(!read.effects.read_only() && read.effects.external, "{read:?}");
    assert!(read.description.contains("not trusted"), "{}", read.description);
    assert_eq!(read.source.as_deref(), Some("mcp"));
    let ws = tempfile::tempdir().unwrap();
    let tools = Arc::new(
        Toolbox::new(Workspace::new(ws.path()).unwrap(), vec![])
            .with_source(Arc::clone(&servers) as Arc<dyn ToolSource>),
    );
    let read_call = tool_call("c1", "fs__read_text_file", json!({"path": root.join("in.txt")}));
    for allowed in [false, true] {
        let llm = FakeServer::start(vec![read_call.clone(), Reply::Chat("42".into())]).unwrap();
        let mut permissions = noesis_agent::Permissions::default();
        if allowed {
            let mut layer = noesis_agent::Layer::granting("operator");
            layer.add(noesis_agent::Effect::Allow, "mcp:fs__read*", "test").unwrap();
            permissions.push(layer);
        }
        let config = RunConfig {
            tools: tools.decls().into_iter().filter(|d| d.name.starts_with("fs__")).collect(),
            approval: ApprovalPolicy::Ask,
            permissions,
            ..RunConfig::default()
        };
        let mut run = AgentRun::new("r1", "What is in in.txt?", config, 0);
        let action = drive(&mut run, &provider(&llm), &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
        if allowed {
            assert_eq!(action, Action::Done(Outcome::Answer { text: "42".into() }));
        } else {
            let Action::AwaitApproval(pending) = action else { panic!("{action:?}") };
            assert_eq!(pending[0].tool, "fs__read_text_file");
            assert_eq!(llm.received().len(), 1, "nothing read before the decision");
        }
    }
    servers.shutdown().await;
}

/// The Python the official MCP SDK is installed in (scripts/python-deps.sh).
fn sdk_python(test: &str) -> Option<String> {
    match std::env::var("NOESIS_MCP_PYTHON").ok().filter(|p| std::path::Path::new(p).exists()) {
        Some(p) => Some(p),
        None => {
            missing(Dependency::McpSdk, test, "NOESIS_MCP_PYTHON does not name the SDK's Python");
            None
        }
    }
}

/// A server (the official Python SDK) adds a tool mid-run and sends
/// `notifications/tools/list_changed`: the run's next request offers it,
/// the model is told, and calling it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_that_changes_mid_run_is_offered_from_the_next_turn() {
    let Some(python) = sdk_python("a_tool_list_that_changes_mid_run") else { return };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/changing.py");
    let servers = Arc::new(
        McpServers::connect(vec![ServerSpec::command("chg", &python, &[script.to_str().unwrap()]).trusted()])
            .await
            .unwrap(),
    );
    let names = |d: Vec<noesis_agent::ToolDecl>| d.into_iter().map(|d| d.name).collect::<Vec<_>>();
    assert_eq!(names(servers.decls()), ["chg__unlock"]);
    let llm = FakeServer::start(vec![
        tool_call("c1", "chg__unlock", json!({})),
        tool_call("c2", "chg__shout", json!({"word": "hey"})),
        Reply::Chat("HEY".into()),
    ])
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let tools = Arc::new(
        Toolbox::new(Workspace::new(ws.path()).unwrap(), vec![])
            .with_source(Arc::clone(&servers) as Arc<dyn ToolSource>),
    );
    let config = RunConfig {
        tools: tools.decls().into_iter().filter(|d| d.name.starts_with("chg__")).collect(),
        ..RunConfig::default()
    };
    let mut run = AgentRun::new("r1", "Shout hey", config, 0);
    let action = drive(&mut run, &provider(&llm), &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(action, Action::Done(Outcome::Answer { text: "HEY".into() }));
    let offered = |i: usize| -> Vec<String> {
        llm.received()[i].json()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(offered(0), ["chg__unlock"]);
    assert_eq!(offered(1), ["chg__unlock", "chg__shout"]);
    assert_eq!(run.calls[1].result.as_deref(), Some("HEY"));
    let told = llm.received()[1].json()["messages"].to_string();
    assert!(told.contains("The tools changed (now available: chg__shout)"), "{told}");
    servers.shutdown().await;
}

/// The Python SDK's HTTP server (tests/servers/http_server.py `extra`)
/// listening on 127.0.0.1: its process and URL.
async fn http_server(python: &str, extra: &[&str]) -> (std::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/http_server.py");
    let mut child = std::process::Command::new(python)
        .arg(script)
        .arg(port.to_string())
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the HTTP server never listened");
        assert!(child.try_wait().unwrap().is_none(), "the HTTP server exited");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// A streamable-HTTP server that wants a bearer token and a header: the
/// token comes from the variable the spec names, read when the server is
/// reached; without them the server is refused, and a variable that is not
/// set is said by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_gets_its_headers_and_the_bearer_token_from_the_environment() {
    let Some(python) = sdk_python("an_http_server_gets_its_headers") else { return };
    // The test cannot set a variable of its own process (edition 2024 makes
    // that unsafe), so the token is the value of one every process has.
    let token = std::env::var("HOME").unwrap();
    let (mut child, url) = http_server(&python, &[&token]).await;
    let spec = |headers: &[(&str, &str)], bearer: Option<&str>| {
        let mut s = ServerSpec::http("web", &url).trusted();
        if let noesis_mcp::Transport::Http { headers: h, bearer_env, .. } = &mut s.transport {
            h.extend(headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
            *bearer_env = bearer.map(str::to_owned);
        }
        s
    };
    let plain = McpServers::connect(vec![spec(&[], None)]).await;
    assert!(plain.is_err(), "no token, no header: refused");
    let unset = McpServers::connect(vec![spec(&[("X-Team", "noesis")], Some("NOESIS_TEST_NO_SUCH_VAR"))]).await;
    let e = unset.err().unwrap().to_string();
    assert!(e.contains("`NOESIS_TEST_NO_SUCH_VAR` is not set"), "{e}");
    let servers = McpServers::connect(vec![spec(&[("X-Team", "noesis")], Some("HOME"))]).await;
    let servers = match servers {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            panic!("{e}");
        }
    };
    let out = call(&servers, "web__echo", json!({"text": "with a token"})).await;
    assert_eq!((out.is_error, out.content.as_str()), (false, "echo: with a token"));
    servers.shutdown().await;
    let _ = child.kill();
    let _ = child.wait();
}

/// The streamable-HTTP transport against the official Python SDK's server
/// on 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_streamable_http_is_listed_and_called() {
    let Some(python) = sdk_python("a_server_over_streamable_http") else { return };
    let (mut child, url) = http_server(&python, &[]).await;
    let servers = McpServers::connect(vec![ServerSpec::http("web", &url).trusted()]).await;
    let servers = match servers {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            panic!("{e}");
        }
    };
    let decls = servers.decls();
    let echo = decls.iter().find(|d| d.name == "web__echo").expect("echo");
    assert!(echo.effects.read_only());
    let fail = decls.iter().find(|d| d.name == "web__fail").expect("fail");
    assert!(fail.effects.external, "no hint: it may change things");
    let out = call(&servers, "web__echo", json!({"text": "hi"})).await;
    assert_eq!((out.is_error, out.content.as_str()), (false, "echo: hi"));
    let out = call(&servers, "web__fail", json!({"reason": "on purpose"})).await;
    // The SDK hides the exception text; the failure itself is the point.
    assert!(out.is_error && out.content.contains("fail"), "{out:?}");
    assert_eq!(mcp_evidence(&out).0, McpOutcome::ToolError);
    servers.shutdown().await;
    let _ = child.kill();
    let _ = child.wait();
}

/// The SDK fixture that uses what a client offers beside tools
/// (tests/servers/full.py), started over stdio with `workspace` as the
/// client's workspace.
async fn full_server(python: &str, workspace: &std::path::Path, answers: Option<Answers>) -> (Arc<McpServers>, McpRun) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/full.py");
    let confine = noesis_mcp::Confine { settings: noesis_sandbox::Settings::default(), workspace: workspace.into() };
    let servers = Arc::new(
        McpServers::connect_confined(
            vec![ServerSpec::command("full", python, &[script.to_str().unwrap()]).trusted()],
            confine,
        )
        .await
        .unwrap(),
    );
    let run = servers.for_run(answers.unwrap_or_default());
    (servers, run)
}

/// Resources and prompts, listed two to a page by the server, are offered
/// as `full__read_resource` and `full__get_prompt`, read-only, every page
/// in their descriptions; reading and getting work, and a resource or
/// prompt the server does not have is its refusal, not a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_prompts_are_offered_as_two_read_only_tools() {
    let Some(python) = sdk_python("resources_and_prompts_are_offered") else { return };
    let ws = tempfile::tempdir().unwrap();
    let (servers, _) = full_server(&python, ws.path(), None).await;
    let decls = servers.decls();
    let find = |name: &str| decls.iter().find(|d| d.name == name).unwrap_or_else(|| panic!("no {name} in {decls:?}"));
    let read = find("full__read_resource");
    assert!(read.effects.read_only() && read.idempotent && read.source.as_deref() == Some("mcp"), "{read:?}");
    for listed in
        ["- notes://readme (readme, text/plain): What the project is", "- notes://todo (todo", "- notes://logo (logo"]
    {
        assert!(read.description.contains(listed), "{listed} not in {}", read.description);
    }
    let prompt = find("full__get_prompt");
    assert!(prompt.effects.read_only(), "{prompt:?}");
    for listed in ["- review(path, focus?): Review a file", "- greet(name): Say hello", "- plan(): Plan the work"] {
        assert!(prompt.description.contains(listed), "{listed} not in {}", prompt.description);
    }

    let out = call(&servers, "full__read_resource", json!({"uri": "notes://todo"})).await;
    assert_eq!((out.is_error, out.content.as_str()), (false, "- write the tests\n- ship"));
    assert_eq!(mcp_evidence(&out), (McpOutcome::Ok, "resources/read".into()));
    assert!(
        read.description.contains("- notes://day/{day} (day, a template: fill in the braces): The notes of a day"),
        "{}",
        read.description
    );
    let out = call(&servers, "full__read_resource", json!({"uri": "notes://day/monday"})).await;
    assert_eq!((out.is_error, out.content.as_str()), (false, "notes of monday"));
    let out = call(&servers, "full__read_resource", json!({"uri": "notes://logo"})).await;
    assert!(!out.is_error && out.content.starts_with("[binary resource notes://logo, image/png"), "{out:?}");
    let out = call(&servers, "full__read_resource", json!({"uri": "notes://nothing"})).await;
    assert!(out.is_error && out.content.contains("refused"), "{out:?}");
    assert_eq!(mcp_evidence(&out).0, McpOutcome::ProtocolError);
    let out = call(&servers, "full__read_resource", json!({})).await;
    assert!(out.is_error && out.content.contains("`uri` must be given"), "{out:?}");

    let out = call(&servers, "full__get_prompt", json!({"name": "review", "arguments": {"path": "src/lib.rs"}})).await;
    assert_eq!(
        (out.is_error, out.content.as_str()),
        (false, "Review a file\n[user] Review src/lib.rs, looking for bugs.")
    );
    assert_eq!(mcp_evidence(&out), (McpOutcome::Ok, "prompts/get".into()));
    let out = call(&servers, "full__get_prompt", json!({"name": "review"})).await;
    assert!(out.is_error, "a required argument left out: {out:?}");
    let out = call(&servers, "full__get_prompt", json!({"name": "greet", "arguments": "ada"})).await;
    assert!(out.is_error && out.content.contains("`arguments` must be an object"), "{out:?}");
    servers.shutdown().await;
}

/// `roots/list` answers the workspace as a `file://` URI, then the
/// folders the server's command line names: the SDK fixture's tool says
/// so, and the reference filesystem server (npm), which serves its roots in
/// place of its own folders, serves the workspace and keeps the folder it
/// was configured with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_given_the_workspace_and_its_own_folders_as_roots() {
    let Some(python) = sdk_python("a_server_is_given_the_workspace") else { return };
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let (servers, _) = full_server(&python, &root, None).await;
    let out = call(&servers, "full__roots", json!({})).await;
    assert_eq!((out.is_error, out.content.clone()), (false, format!("file://{} workspace", root.display())));
    servers.shutdown().await;

    let Some(fs) = server("NOESIS_MCP_SERVER_FILESYSTEM", "a_server_is_given_the_workspace") else { return };
    let elsewhere = tempfile::tempdir().unwrap();
    let other = elsewhere.path().canonicalize().unwrap();
    std::fs::write(root.join("in.txt"), "from the workspace").unwrap();
    std::fs::write(other.join("in.txt"), "from its own folder").unwrap();
    let confine = noesis_mcp::Confine { settings: noesis_sandbox::Settings::default(), workspace: root.clone() };
    let spec = ServerSpec::command("fs", &fs, &[other.to_str().unwrap()]).trusted();
    let servers = McpServers::connect_confined(vec![spec], confine).await.unwrap();
    // The server asks for the roots once it is initialized, on its own time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = call(&servers, "fs__list_allowed_directories", json!({})).await;
        if out.content.contains(root.to_str().unwrap()) {
            assert!(out.content.contains(other.to_str().unwrap()), "{out:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the workspace never became its root: {out:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let out = call(&servers, "fs__read_text_file", json!({"path": root.join("in.txt")})).await;
    assert_eq!((out.is_error, out.content.as_str()), (false, "from the workspace"));
    let out = call(&servers, "fs__read_text_file", json!({"path": other.join("in.txt")})).await;
    assert_eq!((out.is_error, out.content.as_str()), (false, "from its own folder"));
    servers.shutdown().await;
}

/// A router that sends every call to one provider, and says which roles
/// it was asked for.
struct OneProvider(Arc<dyn noesis_llm::Provider>, std::sync::Mutex<Vec<String>>);

impl noesis_agent::ModelRouter for OneProvider {
    fn route(
        &self,
        role: &str,
        _: &noesis_llm::ChatRequest,
    ) -> Result<(Arc<dyn noesis_llm::Provider>, String), String> {
        self.1.lock().unwrap().push(role.to_owned());
        Ok((Arc::clone(&self.0), "the only provider".into()))
    }
}

fn sampler(llm: &FakeServer) -> (Arc<OneProvider>, Answers) {
    let router = Arc::new(OneProvider(Arc::new(provider(llm)), std::sync::Mutex::new(Vec::new())));
    let prices = noesis_llm::PriceTable::default();
    let sampler =
        RouterSampler { router: Arc::clone(&router) as Arc<dyn noesis_agent::ModelRouter>, prices: Arc::new(prices) };
    (router, Answers { sampler: Some(Arc::new(sampler)), elicitor: None })
}

/// A server's model call (`sampling/createMessage`, from the SDK
/// fixture's `summarize`) is answered through the run's router as
/// `mcp_sampling`, over the OpenAI wire to the fake on 127.0.0.1, and its
/// tokens are the call's spend, so the run's usage counts them. Without a
/// run that lends a model, the call is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_model_call_is_answered_by_the_runs_router_and_metered_to_the_run() {
    let Some(python) = sdk_python("a_servers_model_call_is_answered") else { return };
    let llm = FakeServer::start(vec![
        tool_call("c1", "full__summarize", json!({"text": "a long story"})),
        Reply::Chat("a short story".into()),
        Reply::Chat("It is a short story.".into()),
    ])
    .unwrap();
    let (router, answers) = sampler(&llm);
    let ws = tempfile::tempdir().unwrap();
    let (servers, run_source) = full_server(&python, ws.path(), Some(answers)).await;

    // No run lent a model: refused, and nothing was sent to a model.
    let out = call(&servers, "full__summarize", json!({"text": "x"})).await;
    assert!(out.is_error && out.spent.is_none(), "{out:?}");
    assert!(llm.received().is_empty());

    let tools = Arc::new(
        Toolbox::new(Workspace::new(ws.path()).unwrap(), vec![])
            .with_source(Arc::new(run_source) as Arc<dyn ToolSource>),
    );
    let config = RunConfig {
        tools: tools.decls().into_iter().filter(|d| d.name == "full__summarize").collect(),
        ..RunConfig::default()
    };
    let mut run = AgentRun::new("r1", "Summarize a long story", config, 0);
    let action = drive(&mut run, &provider(&llm), &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(action, Action::Done(Outcome::Answer { text: "It is a short story.".into() }));
    assert_eq!(run.calls[0].result.as_deref(), Some("fake-model says: a short story"));
    assert_eq!(router.1.lock().unwrap().as_slice(), ["mcp_sampling"]);
    let sampled = llm.received()[1].json();
    assert_eq!(sampled["messages"][0], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(sampled["messages"][1]["content"], "Summarize: a long story");
    assert_eq!(sampled["max_tokens"].as_u64().or(sampled["max_completion_tokens"].as_u64()), Some(50));
    // Two turns of the run and one model call of the server, each 11 in
    // and 7 out (the fake's usage).
    assert_eq!((run.usage.input_tokens, run.usage.output_tokens), (33, 21), "{:?}", run.usage);
    servers.shutdown().await;
}

/// Answers every question with what it was made with, and keeps them.
struct Person(Elicited, std::sync::Mutex<Vec<Elicitation>>);

impl Elicitor for Person {
    fn elicit<'a>(&'a self, _server: &'a str, request: Elicitation) -> futures_util::future::BoxFuture<'a, Elicited> {
        self.1.lock().unwrap().push(request);
        Box::pin(std::future::ready(self.0.clone()))
    }
}

/// A server's question (`elicitation/create`, from the SDK fixture's
/// `deploy`) is declined when no person was lent, and otherwise put to the
/// person, whose answer (accepted with content, declined, cancelled) the
/// server gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_question_is_declined_without_a_person_and_put_to_one() {
    let Some(python) = sdk_python("a_servers_question_is_declined") else { return };
    let ws = tempfile::tempdir().unwrap();
    let (servers, nobody) = full_server(&python, ws.path(), None).await;
    let out = nobody.call("full__deploy", json!({})).unwrap().await;
    assert_eq!((out.is_error, out.content.as_str()), (false, "deploy: decline"));
    let mut content = serde_json::Map::new();
    content.insert("name".into(), json!("ada"));
    content.insert("confirm".into(), json!(true));
    for (answer, said) in [
        (Elicited::Accept(content), "deployed by ada"),
        (Elicited::Decline, "deploy: decline"),
        (Elicited::Cancel, "deploy: cancel"),
    ] {
        let person = Arc::new(Person(answer, std::sync::Mutex::new(Vec::new())));
        let run = servers.for_run(Answers { sampler: None, elicitor: Some(Arc::clone(&person) as Arc<dyn Elicitor>) });
        let out = run.call("full__deploy", json!({})).unwrap().await;
        assert_eq!((out.is_error, out.content.as_str()), (false, said));
        let asked = person.1.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].message, "Deploy to production?");
        let fields = asked[0].schema["properties"].as_object().unwrap();
        assert!(fields.contains_key("name") && fields.contains_key("confirm"), "{}", asked[0].schema);
    }
    servers.shutdown().await;
}
