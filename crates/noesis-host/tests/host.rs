//! The agent host against a real store: a run resumed goes on in its own
//! recorded workspace, and a front end that cannot provide what it recorded
//! refuses it, leaving it as it was.

use std::path::Path;
use std::sync::Arc;

use noesis_agent::supervisor::{AgentRuns, Ceiling, Refusal, RunsPolicy};
use noesis_agent::{AgentRun, RunConfig, Workspace};
use noesis_config::{Config, ProviderArgs};
use noesis_frames::project::Project;
use noesis_host::provider::Providers;
use noesis_host::{Host, HostError, Reach};
use noesis_store::Store;
use serde_json::json;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    /// Where the front end stands (a server's workspace).
    here: std::path::PathBuf,
    /// Where the run was started.
    there: std::path::PathBuf,
    store: Arc<dyn Store>,
    project: Project,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (here, there) = (dir.path().join("here"), dir.path().join("there"));
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&there).unwrap();
    let url = format!("sqlite://{}", dir.path().join("noesis.db").display());
    let store: Arc<dyn Store> = Arc::from(noesis_store::open(&url).await.unwrap());
    let project = Project { project_id: "path:/demo".into(), root: dir.path().to_path_buf() };
    store.ensure_project(&project.project_id, &project.root.to_string_lossy()).await.unwrap();
    Fixture { here, there, store, project, _dir: dir }
}

fn host(f: &Fixture, reach: Reach) -> Host {
    let providers = Arc::new(Providers::new(
        ProviderArgs { provider: Some("test".into()), ..ProviderArgs::default() },
        Config::default(),
    ));
    Host {
        search: noesis_modules::search::SearchPath::default(),
        store: Arc::clone(&f.store),
        project: f.project.clone(),
        providers,
        reach,
        note: None,
        home: None,
    }
}

/// A run that was started over `workspace` and stopped.
fn run_over(id: &str, workspace: &Path) -> AgentRun {
    let mut run = AgentRun::new(id, "look around", RunConfig::default(), 0);
    run.host = json!({
        "task": "look around",
        "workspace": workspace.canonicalize().unwrap().to_string_lossy(),
        "provider": "test",
        "model": "schema",
        "project_id": "path:/demo",
        "origin": "http",
        "mcp_servers": [],
    });
    run
}

#[test]
fn a_resumed_run_works_in_the_workspace_it_recorded() {
    let rt = rt();
    rt.block_on(async {
        let f = fixture().await;
        // The command line resumes wherever the run was: not where it stands.
        let host = host(&f, Reach::Anywhere);
        let run = run_over("r1", &f.there);
        let equipped = host.equip(&run, Arc::new(noesis_llm::TestModel)).await.unwrap();
        assert_eq!(equipped.tools.workspace().root(), f.there.canonicalize().unwrap());
        assert!(equipped.started.is_none(), "no MCP server was recorded, none is started");
        // A server bound to that same folder provides it too.
        let bound = host_bound(&f, &f.there);
        let equipped = bound.equip(&run, Arc::new(noesis_llm::TestModel)).await.unwrap();
        assert_eq!(equipped.tools.workspace().root(), f.there.canonicalize().unwrap());
    });
}

fn host_bound(f: &Fixture, workspace: &Path) -> Host {
    host(f, Reach::Bound { workspace: Workspace::new(workspace).unwrap(), mcp: None })
}

#[test]
fn a_front_end_that_cannot_provide_the_recorded_host_refuses_and_says_where_to_go_on() {
    let rt = rt();
    rt.block_on(async {
        let f = fixture().await;
        let server = host_bound(&f, &f.here);
        let refused = |run: &AgentRun| match server.check(run) {
            Err(HostError::Refused(m)) => m,
            other => panic!("not refused: {:?}", other.map(|r| r.workspace)),
        };
        let elsewhere = run_over("r2", &f.there);
        let m = refused(&elsewhere);
        let there = f.there.canonicalize().unwrap();
        assert!(m.contains(&there.display().to_string()), "{m}");
        assert!(m.contains("not in this server's workspace") && m.contains("noesis agent resume r2"), "{m}");
        // Equipping is refused the same way: no tools over the server's folder.
        assert!(matches!(server.equip(&elsewhere, Arc::new(noesis_llm::TestModel)).await, Err(HostError::Refused(_))));

        let mut flagged = run_over("r3", &f.here);
        flagged.host["mcp"] = json!(["files=npx fs-server"]);
        let m = refused(&flagged);
        assert!(m.contains("files=npx fs-server") && m.contains("cannot start them"), "{m}");

        let mut configured = run_over("r4", &f.here);
        configured.host["mcp_servers"] = json!(["fs"]);
        let m = refused(&configured);
        assert!(m.contains("MCP server `fs`") && m.contains("has not started"), "{m}");

        // The command line refuses an MCP server it has no configuration for.
        let cli = host(&f, Reach::Anywhere);
        match cli.equip(&configured, Arc::new(noesis_llm::TestModel)).await {
            Err(HostError::Refused(m)) => assert!(m.contains("`fs`") && m.contains("not configured here"), "{m}"),
            other => panic!("not refused: {}", other.is_ok()),
        }

        // What it recorded, it gets.
        assert!(server.check(&run_over("r5", &f.here)).is_ok());
    });
}

#[test]
fn a_server_asked_to_resume_a_run_it_cannot_provide_for_refuses_and_leaves_it_as_it_was() {
    let rt = rt();
    rt.block_on(async {
        let f = fixture().await;
        let leases = Arc::new(noesis_host::lease::Leases::new(f._dir.path().join("leases")).unwrap());
        let served = noesis_host::served::ServedAgents::new(
            host_bound(&f, &f.here),
            noesis_sandbox::Settings::default(),
            "http",
            leases,
            Ceiling::default(),
            Arc::new(|_: &str| {}),
        );
        let run = run_over("0190-elsewhere", &f.there);
        let stored = noesis_host::runs::state_of(&run, &f.project.project_id);
        f.store.save_agent_state(&stored).await.unwrap();
        let policy = RunsPolicy { http: true, ..RunsPolicy::default() };
        let runs = AgentRuns::with_policy(Arc::new(served), noesis_agent::events::EventBus::new(16), policy);
        let (refusal, message) = runs.resume(&run.id).await.unwrap_err();
        assert_eq!(refusal, Refusal::Conflict);
        assert!(message.contains("not in this server's workspace"), "{message}");
        assert!(!runs.is_live(&run.id));
        // Not stopped, not changed: `noesis agent resume` in its folder goes on.
        let after = f.store.agent_state(&run.id, None).await.unwrap().unwrap();
        assert_eq!((after.status.as_str(), after.step), (stored.status.as_str(), stored.step));
        assert_eq!(runs.resume_unfinished().await.unwrap(), 0, "nor is it taken up at start");
        runs.shutdown().await;
    });
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn new_run(id: &str, workspace: &Path, system: Option<&str>) -> noesis_host::NewRun {
    noesis_host::NewRun {
        id: id.into(),
        task: "fill the form".into(),
        remembered: String::new(),
        workspace: Workspace::new(workspace).unwrap(),
        config: RunConfig { system_prompt: system.map(str::to_owned), ..RunConfig::default() },
        provider: Arc::new(noesis_llm::TestModel),
        sandbox: noesis_sandbox::Settings::default(),
        mcp: None,
        owns_mcp: false,
        record: serde_json::Map::new(),
    }
}

async fn call(tools: &Arc<noesis_agent::Toolbox>, args: serde_json::Value) -> noesis_agent::ToolOutput {
    let call = noesis_agent::Invocation { call_id: "c1".into(), tool: "load_skill".into(), arguments: args };
    Arc::clone(tools).run_async(call).await
}

#[test]
fn a_run_over_skills_is_told_their_names_and_load_skill_reads_one_and_its_files_only() {
    let rt = rt();
    rt.block_on(async {
        let f = fixture().await;
        let home = f._dir.path().join("home");
        let skill = "---\nname: forms\ndescription: Fills PDF\n  forms.\ntools: [read_file, Bash]\nmodules: [no-such-module]\n---\nStep 1: read ref.md.\n";
        write(&f.there, ".noesis/skills/forms/SKILL.md", skill);
        write(&f.there, ".noesis/skills/forms/ref.md", "the reference");
        write(&f.there, "secret.txt", "not a skill's");
        write(&home, "skills/mine/SKILL.md", "---\nname: mine\ndescription: My own.\n---\nMine.\n");
        let mut host = host(&f, Reach::Anywhere);
        host.home = Some(home.clone());

        let (run, equipped) = host.start(new_run("r-skills", &f.there, Some("Be brief.")), 0).unwrap();
        assert!(run.config.tools.iter().any(|t| t.name == "load_skill"));
        let prompt = run.config.system_prompt.clone().unwrap();
        assert!(prompt.starts_with("Be brief.\n\nSkills in this workspace"), "{prompt}");
        assert!(prompt.contains("\n- forms — Fills PDF forms.\n- mine — My own.\n"), "{prompt}");
        assert!(prompt.contains("call `load_skill`"), "{prompt}");
        assert!(!prompt.contains("Step 1"), "the body waits until it is asked for: {prompt}");
        f.store.save_agent_state(&noesis_host::runs::state_of(&run, &f.project.project_id)).await.unwrap();

        let out = call(&equipped.tools, json!({"name": "forms"})).await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("Step 1: read ref.md.") && !out.content.contains("description:"), "{}", out.content);
        assert!(out.content.contains("\n- ref.md"), "{}", out.content);
        assert!(out.content.contains("tools this run is not offered: Bash."), "{}", out.content);
        assert!(out.content.contains("not found on the module search path): no-such-module."), "{}", out.content);
        let digest = noesis_frames::scan::hash_bytes(skill.as_bytes());
        assert_eq!(
            out.evidence,
            [noesis_agent::ToolEvidence::File { path: ".noesis/skills/forms/SKILL.md".into(), blake3: digest }]
        );

        let file = call(&equipped.tools, json!({"name": "forms", "file": "ref.md"})).await;
        assert_eq!((file.is_error, file.content.as_str()), (false, "the reference"));
        assert!(matches!(&file.evidence[0], noesis_agent::ToolEvidence::File { path, .. } if path == ".noesis/skills/forms/ref.md"));
        let out = call(&equipped.tools, json!({"name": "forms", "file": "../../../secret.txt"})).await;
        assert!(out.is_error && out.content.contains("not inside skill `forms`"), "{}", out.content);
        assert!(out.evidence.is_empty());
        let out = call(&equipped.tools, json!({"name": "nope"})).await;
        assert!(out.is_error && out.content.contains("no skill `nope`; the skills are forms, mine"), "{}", out.content);
        // A person's own skill lies outside the workspace: its evidence
        // keeps its full path.
        let mine = call(&equipped.tools, json!({"name": "mine"})).await;
        let path = home.join("skills/mine/SKILL.md").display().to_string();
        assert!(matches!(&mine.evidence[0], noesis_agent::ToolEvidence::File { path: p, .. } if *p == path), "{mine:?}");

        // Resumed elsewhere, the run keeps its declaration and its index,
        // and the tool still reads from the recorded workspace.
        let resumed = host.equip(&run, Arc::new(noesis_llm::TestModel)).await.unwrap();
        assert!(!call(&resumed.tools, json!({"name": "forms", "file": "ref.md"})).await.is_error);

        // A workspace without skills: no tool, no index, the prompt as given.
        host.home = None;
        let (plain, _) = host.start(new_run("r-plain", &f.here, Some("Be brief.")), 0).unwrap();
        assert!(!plain.config.tools.iter().any(|t| t.name == "load_skill"));
        assert!(plain.config.tools.iter().any(|t| t.name == "read_file"));
        assert_eq!(plain.config.system_prompt.as_deref(), Some("Be brief."));
        // Nor when the person leaves the tool out.
        let mut no_tool = new_run("r-no", &f.there, None);
        no_tool.config.tool_filter.except = vec!["load_skill".into()];
        let (run, _) = host.start(no_tool, 0).unwrap();
        assert!(run.config.system_prompt.is_none() && !run.config.tools.iter().any(|t| t.name == "load_skill"));
    });
}

/// The SDK fixture of noesis-mcp (tests/servers/full.py), started for
/// runs over `workspace`; `None` (the test is skipped, loudly) when the SDK
/// is not installed and the opt-out is set.
async fn full_server(test: &str, workspace: &Workspace) -> Option<Arc<noesis_mcp::McpServers>> {
    let Some(python) = std::env::var("NOESIS_MCP_PYTHON").ok().filter(|p| Path::new(p).exists()) else {
        noesis_testkit::skip::missing(
            noesis_testkit::skip::Dependency::McpSdk,
            test,
            "NOESIS_MCP_PYTHON does not name the SDK's Python",
        );
        return None;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../noesis-mcp/tests/servers/full.py");
    let servers = noesis_host::host::connect_mcp(
        vec![noesis_mcp::ServerSpec::command("full", &python, &[script.to_str().unwrap()]).trusted()],
        noesis_sandbox::Settings::default(),
        workspace,
        None,
    )
    .await
    .unwrap()
    .expect("the server started");
    Some(servers)
}

/// A provider over the OpenAI wire to the fake on 127.0.0.1.
fn fake_provider(llm: &noesis_testkit::FakeServer) -> Arc<dyn noesis_llm::Provider> {
    let mut cfg = noesis_llm::EndpointConfig::openai("gpt-test");
    cfg.base_url = llm.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.retry = noesis_llm::RetryPolicy::none();
    Arc::new(noesis_llm::OpenAiCompatible::new(cfg).unwrap())
}

/// A run's MCP server asks for a completion mid-call (`summarize`): the
/// host lends every run its router, so the run's own provider (OpenAI
/// wire, the fake on 127.0.0.1) answers, and the call's spend carries the
/// tokens for the run's budget.
#[test]
fn a_runs_mcp_server_is_answered_by_the_runs_provider_and_the_call_carries_the_spend() {
    let rt = rt();
    rt.block_on(async {
        let f = fixture().await;
        let workspace = Workspace::new(&f.there).unwrap();
        let Some(servers) = full_server("a_runs_mcp_server_is_answered", &workspace).await else { return };
        let llm = noesis_testkit::FakeServer::start(vec![noesis_testkit::Reply::Chat("short".into())]).unwrap();
        let host = host(&f, Reach::Bound { workspace, mcp: Some(Arc::clone(&servers)) });
        let mut run = run_over("r1", &f.there);
        run.host["mcp_servers"] = json!(["full"]);
        let equipped = host.equip(&run, fake_provider(&llm)).await.unwrap();
        let call = noesis_agent::Invocation {
            call_id: "c1".into(),
            tool: "full__summarize".into(),
            arguments: json!({"text": "a long story"}),
        };
        let out = Arc::clone(&equipped.tools).run_async(call).await;
        assert_eq!((out.is_error, out.content.as_str()), (false, "fake-model says: short"));
        let spent = out.spent.expect("the model call is the call's spend");
        assert_eq!((spent.calls, spent.input_tokens, spent.output_tokens), (1, 11, 7));
        assert_eq!(llm.received()[0].json()["messages"][1]["content"], "Summarize: a long story");
        servers.shutdown().await;
    });
}

/// A front end that answers an MCP server's question with `answer` (none:
/// the default, which declines) and keeps what it was asked.
struct Asking {
    answer: Option<noesis_mcp::Elicited>,
    asked: std::sync::Mutex<Vec<(String, String)>>,
}

impl noesis_host::drive::Front for Asking {
    fn event(&self, _: &noesis_agent::events::Event) {}

    fn decide(&self, _: &[noesis_agent::Pending]) -> Result<Option<Vec<noesis_agent::Decision>>, String> {
        Ok(None)
    }

    fn warn(&self, _: &str) {}

    fn elicit(&self, server: &str, question: &noesis_mcp::Elicitation) -> noesis_mcp::Elicited {
        self.asked.lock().unwrap().push((server.to_owned(), question.message.clone()));
        self.answer.clone().unwrap_or(noesis_mcp::Elicited::Decline)
    }
}

/// A question an MCP server asks mid-call (`deploy`) reaches the front end
/// that drives the run, and its answer reaches the server; a run equipped
/// but not driven, or a front end with nobody to ask, declines.
#[test]
fn a_servers_question_mid_call_is_put_to_the_front_end_that_drives_the_run() {
    let rt = rt();
    rt.block_on(async {
        let f = fixture().await;
        let workspace = Workspace::new(&f.there).unwrap();
        let Some(servers) = full_server("a_servers_question_mid_call", &workspace).await else { return };
        let host = host(&f, Reach::Bound { workspace: workspace.clone(), mcp: Some(Arc::clone(&servers)) });
        let mut content = serde_json::Map::new();
        content.insert("name".into(), json!("ada"));
        content.insert("confirm".into(), json!(true));
        for (i, (answer, said)) in
            [(Some(noesis_mcp::Elicited::Accept(content)), "deployed by ada"), (None, "deploy: decline")]
                .into_iter()
                .enumerate()
        {
            let llm = noesis_testkit::FakeServer::start(vec![
                noesis_testkit::Reply::Status(
                    200,
                    noesis_testkit::tool_call_completion("c1", "full__deploy", &json!({})).to_string(),
                    vec![],
                ),
                noesis_testkit::Reply::Chat("Done.".into()),
            ])
            .unwrap();
            let new = noesis_host::NewRun {
                id: format!("q{i}"),
                task: "Deploy".into(),
                remembered: String::new(),
                workspace: workspace.clone(),
                config: RunConfig { approval: noesis_agent::ApprovalPolicy::Auto, ..RunConfig::default() },
                provider: fake_provider(&llm),
                sandbox: noesis_sandbox::Settings::default(),
                mcp: Some(Arc::clone(&servers)),
                owns_mcp: false,
                record: serde_json::Map::new(),
            };
            let (mut run, equipped) = host.start(new, 0).unwrap();
            if i == 0 {
                // Equipped, not driven: nobody listens, the question is declined.
                let call = noesis_agent::Invocation {
                    call_id: "c0".into(),
                    tool: "full__deploy".into(),
                    arguments: json!({}),
                };
                let out = Arc::clone(&equipped.tools).run_async(call).await;
                assert_eq!(out.content, "deploy: decline");
            }
            let front = Asking { answer, asked: std::sync::Mutex::new(Vec::new()) };
            let drive = noesis_host::drive::Drive {
                host: &host,
                equipped: &equipped,
                project_id: f.project.project_id.clone(),
                tool_timeout: std::time::Duration::from_secs(60),
                cancel: noesis_runtime::CancellationToken::new(),
                from_step: None,
                holder: "test",
                lease_ttl: noesis_host::hold::LEASE_TTL,
                stream: false,
            };
            noesis_host::drive::to_end(drive, &mut run, &front).await.unwrap();
            assert_eq!(run.calls[0].result.as_deref(), Some(said), "{:?}", run.calls);
            assert_eq!(
                front.asked.lock().unwrap().as_slice(),
                [("full".to_owned(), "Deploy to production?".to_owned())]
            );
        }
        servers.shutdown().await;
    });
}
