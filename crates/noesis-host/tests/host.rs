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
