//! The plugin contract, run against the built-in recall plugin and the same
//! plugin written in Python (tests/data/recall_plugin.py), plus what the core
//! does when a program-plugin crashes, hangs or writes garbage.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use noesis_frames::project::Project;
use noesis_frames::{CausalFrame, Draft, Evidence, FrameId, SessionArtifacts, SessionLink, Status, Timestamp};
use noesis_plugin::{
    ContextSlice, Core, CoreError, ExternalPlugin, ExternalSpec, Plugin, PluginError, Step, Think, Thought,
};
use noesis_plugins::recall::Recall;
use noesis_store::{FrameFilter, NewSession, SessionKind, SqlStore, Store};
use serde_json::{Value, json};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    project: Project,
    store: SqlStore,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.py"), "def f():\n    return 1\n").unwrap();
    std::fs::write(root.join("b.py"), "def g():\n    return 2\n").unwrap();
    let project = Project { project_id: "path:/contract".into(), root: root.canonicalize().unwrap() };
    let store = SqlStore::open(dir.path().join("store.db").to_str().unwrap()).await.unwrap();
    store.ensure_project(&project.project_id, project.root.to_str().unwrap()).await.unwrap();
    Fixture { _dir: dir, project, store }
}

/// The model: answers with what it was given, records what it saw, and
/// makes one sub-step.
#[derive(Default)]
struct Echo {
    seen: Mutex<Vec<ContextSlice>>,
}

#[async_trait]
impl Think for Echo {
    async fn think(&self, slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        self.seen.lock().unwrap().push(slice.clone());
        let cites = slice.input["visible_frames"].as_array().cloned().unwrap_or_default();
        Ok(Thought {
            raw: json!({"answer": format!("answered: {}", slice.input["query"].as_str().unwrap_or("")), "confidence": 0.8, "cites": cites}),
            evidence: vec![Evidence::Observation { tool: "search_frames".into(), content: "1 hit".into() }],
            children: vec![Draft { confidence: 1.0, conclusion: "1 hit".into(), ..Draft::new("search_frames {}") }],
        })
    }
}

fn python() -> Option<String> {
    for p in ["python3", "python"] {
        if std::process::Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Some(p.to_owned());
        }
    }
    None
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/recall_plugin.py")
}

fn external(mode: &str, timeout: Duration) -> ExternalPlugin {
    let py = python().expect("python3 is needed for the external plugin tests");
    ExternalPlugin::new(ExternalSpec {
        name: format!("recall.py-{mode}"),
        command: vec![py, script().to_string_lossy().into_owned(), mode.into()],
        cwd: None,
        timeout,
    })
}

/// A session of another kind, with one frame, in the same project.
async fn other_session(f: &Fixture, id: &str, query: &str) -> CausalFrame {
    let root = Draft {
        confidence: 1.0,
        status: Some(Status::Completed),
        conclusion: "old conclusion".into(),
        ..Draft::new(query)
    }
    .into_frame(&f.project.project_id, Some(id), None, Timestamp::now())
    .unwrap();
    let art = SessionArtifacts {
        session_id: id.into(),
        project_id: f.project.project_id.clone(),
        initial_prompt: Some(query.into()),
        files: Default::default(),
        scope: vec![],
        root_frame_id: Some(root.frame_id.clone()),
        conversation_log: None,
        created_at: Timestamp::now(),
    };
    f.store
        .record_session(&NewSession {
            kind: SessionKind::Transcript,
            artifacts: &art,
            frames: std::slice::from_ref(&root),
            source_hash: None,
        })
        .await
        .unwrap();
    root
}

async fn contract(plugin: &dyn Plugin) {
    let f = fixture().await;
    let hidden = other_session(&f, "other-session", "how does auth work").await;
    let mut core = Core::open(&f.store, &f.project, None, &[], Timestamp::now()).await.unwrap();
    let model = Echo::default();

    // 1. A step: the slice's files become evidence hashed by the core; the
    //    plugin's output sets the conclusion; the model's sub-step is a child.
    let raw = json!({"query": "what does f return", "files": ["a.py"]});
    let out = core
        .step(plugin, Step { query: "what does f return".into(), raw: &raw, parent: None }, &model, Timestamp::now())
        .await
        .unwrap();
    let stored = f.store.frame(&out.frame.frame_id).await.unwrap().unwrap();
    assert_eq!(stored.conclusion, "answered: what does f return");
    assert!((stored.confidence - 0.8).abs() < 1e-9);
    assert_eq!(stored.status, Status::Completed);
    let a_hash = noesis_frames::scan::hash_file(&f.project.root.join("a.py")).unwrap();
    assert_eq!(stored.invalidation_condition.files, vec![noesis_frames::FileRef { path: "a.py".into(), hash: a_hash }]);
    assert_eq!(stored.children.len(), 1);
    assert_eq!(f.store.frame(&stored.children[0]).await.unwrap().unwrap().query, "search_frames {}");
    assert!(stored.evidence.iter().any(|e| matches!(e, Evidence::Observation { tool, .. } if tool == "search_frames")));

    // 2. An unlinked session's frames never reach the plugin.
    let seen = model.seen.lock().unwrap().last().unwrap().input["visible_frames"].clone();
    assert!(!seen.as_array().unwrap().contains(&json!(hidden.frame_id)), "unlinked frames are invisible: {seen}");

    // 3. Linked on purpose, they are visible.
    let here = core.session().session_id.clone();
    f.store.link_sessions(&SessionLink::new(&here, "other-session", None, Timestamp::now()).unwrap()).await.unwrap();
    let mut core = Core::open(&f.store, &f.project, None, &[], Timestamp::now()).await.unwrap();
    let raw = json!({"query": "how does auth work now"});
    let out2 = core
        .step(plugin, Step { query: "auth".into(), raw: &raw, parent: None }, &model, Timestamp::now())
        .await
        .unwrap();
    let seen = model.seen.lock().unwrap().last().unwrap().input["visible_frames"].clone();
    assert!(seen.as_array().unwrap().contains(&json!(hidden.frame_id)), "linked frames are visible: {seen}");
    // What the plugin adds to the condition (cited frames) is kept with the
    // evidence-implied part.
    let stored2 = f.store.frame(&out2.frame.frame_id).await.unwrap().unwrap();
    assert!(stored2.invalidation_condition.frames.contains(&hidden.frame_id));

    // 4. The cited file changes: the first frame is invalidated when the core
    //    opens again, and the plugin is told.
    std::fs::write(f.project.root.join("a.py"), "def f():\n    return 10\n").unwrap();
    let core = Core::open(&f.store, &f.project, None, &[], Timestamp::now()).await.unwrap();
    assert!(core.invalidated().iter().any(|i| i.frame_id == out.frame.frame_id), "{:?}", core.invalidated());
    assert_eq!(core.changed_files(), ["a.py"]);
    assert_eq!(f.store.frame(&out.frame.frame_id).await.unwrap().unwrap().status, Status::Invalidated);

    // 5. A bad request: the plugin refuses, nothing is stored.
    let mut core = core;
    let before = f.store.count(&FrameFilter::project(&f.project.project_id)).await.unwrap();
    let e = core
        .step(plugin, Step { query: "x".into(), raw: &json!({"query": ""}), parent: None }, &model, Timestamp::now())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("query"), "{e}");
    assert_eq!(f.store.count(&FrameFilter::project(&f.project.project_id)).await.unwrap(), before);
    assert!(f.store.check().await.unwrap().is_empty());
}

#[test]
fn builtin_recall_keeps_the_contract() {
    rt().block_on(contract(&Recall));
}

#[test]
fn python_recall_keeps_the_contract() {
    rt().block_on(contract(&external("normal", Duration::from_secs(20))));
}

/// A misbehaving plugin: the error names the plugin and call, nothing is
/// stored (or the stored frame is invalidated when only `store` failed), and
/// the store stays consistent.
async fn misbehaves(mode: &str, expect: &str, frames_after: u64) {
    let f = fixture().await;
    let mut core = Core::open(&f.store, &f.project, None, &[], Timestamp::now()).await.unwrap();
    let before = f.store.count(&FrameFilter::project(&f.project.project_id)).await.unwrap();
    let plugin = external(mode, Duration::from_millis(1500));
    let raw = json!({"query": "q"});
    let e = core
        .step(&plugin, Step { query: "q".into(), raw: &raw, parent: None }, &Echo::default(), Timestamp::now())
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, CoreError::Plugin(_)), "{text}");
    assert!(text.contains(&format!("recall.py-{mode}")) && text.contains(expect), "{mode}: {text}");
    let all = f.store.frames(&FrameFilter::project(&f.project.project_id)).await.unwrap();
    assert_eq!(all.len() as u64, before + frames_after, "{mode}");
    assert!(all.iter().filter(|fr| fr.parent_id.is_some()).all(|fr| fr.status == Status::Invalidated), "{mode}");
    assert!(f.store.check().await.unwrap().is_empty());
    // The plugin recovers: the next call starts the program again (and
    // fails the same way, not with a stale process).
    let again = core
        .step(&plugin, Step { query: "q".into(), raw: &raw, parent: None }, &Echo::default(), Timestamp::now())
        .await
        .unwrap_err();
    assert!(again.to_string().contains(expect), "{mode} again: {again}");
}

#[test]
fn a_crashing_plugin_is_reported_with_its_stderr() {
    rt().block_on(misbehaves("crash", "something broke", 0));
}

/// The plugin sleeps an hour before it would answer: the step can only
/// end with the timeout's error, which is the check (no bound on time).
#[test]
fn a_hanging_plugin_is_stopped_after_its_timeout() {
    rt().block_on(misbehaves("hang", "no reply within", 0));
}

#[test]
fn a_plugin_writing_garbage_is_stopped() {
    rt().block_on(misbehaves("garbage", "not JSON", 0));
}

#[test]
fn a_reply_for_another_request_is_garbage() {
    rt().block_on(misbehaves("wrong-id", "expected 1", 0));
}

#[test]
fn a_plugin_refusing_is_its_own_error() {
    rt().block_on(misbehaves("refuse", "I refuse", 0));
}

#[test]
fn a_plugin_crashing_in_store_leaves_its_frame_invalidated() {
    // The frame and its child are stored, then invalidated (cascade).
    rt().block_on(misbehaves("crash-in-store", "crashed", 2));
}

#[test]
fn a_missing_program_is_reported() {
    let p = ExternalPlugin::new(ExternalSpec {
        name: "ghost".into(),
        command: vec!["/nonexistent/noesis-plugin".into()],
        cwd: None,
        timeout: Duration::from_secs(1),
    });
    let e = p
        .parse_output(&Value::Null, &Draft::new("q").into_frame("p", None, None, Timestamp::now()).unwrap())
        .unwrap_err();
    assert!(matches!(e, PluginError::Spawn { .. }), "{e}");
    assert!(e.to_string().contains("ghost") && e.to_string().contains("/nonexistent/noesis-plugin"), "{e}");
}

#[test]
fn frame_ids_in_cites_must_parse() {
    let f = Draft::new("q").into_frame("p", None, None, Timestamp::now()).unwrap();
    let e = Recall.parse_output(&json!({"answer": "a", "cites": ["has space"]}), &f).unwrap_err();
    assert!(e.to_string().contains("has space"), "{e}");
    let ok = Recall.parse_output(&json!({"answer": "a", "cites": [f.frame_id.as_str(), "x1"]}), &f).unwrap();
    assert_eq!(ok.also().frames(), [FrameId::parse("x1").unwrap()], "a frame cannot depend on itself");
}

#[test]
fn a_plugin_that_stops_reading_is_stopped_after_its_timeout() {
    rt().block_on(async {
        let f = fixture().await;
        let mut core = Core::open(&f.store, &f.project, None, &[], Timestamp::now()).await.unwrap();
        let plugin = external("deaf", Duration::from_millis(1500));
        // Far more than a pipe holds: the write itself would block.
        let raw = json!({"query": "q".repeat(4 << 20)});
        // It sleeps an hour after `hello`: only the timeout ends the step.
        let e = core
            .step(&plugin, Step { query: "q".into(), raw: &raw, parent: None }, &Echo::default(), Timestamp::now())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no reply within"), "{e}");
        assert!(f.store.check().await.unwrap().is_empty());
    });
}

/// A model citing frames the session cannot see (or that are invalidated,
/// or do not exist) gets observations, not dependencies; the step is kept.
struct Cites(Vec<String>);

#[async_trait]
impl Think for Cites {
    async fn think(&self, _slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        let evidence = self.0.iter().map(|id| Evidence::Frame { frame_id: FrameId::parse(id).unwrap() }).collect();
        Ok(Thought { raw: json!({"answer": "a", "confidence": 0.9, "cites": self.0}), evidence, children: vec![] })
    }
}

#[test]
fn cites_the_session_cannot_see_are_observations_not_dependencies() {
    rt().block_on(async {
        let f = fixture().await;
        let hidden = other_session(&f, "other-session", "how does auth work").await;
        let mut core = Core::open(&f.store, &f.project, None, &[], Timestamp::now()).await.unwrap();
        let model = Cites(vec![hidden.frame_id.to_string(), "no-such-frame".into()]);
        let raw = json!({"query": "q"});
        let out = core
            .step(&Recall, Step { query: "q".into(), raw: &raw, parent: None }, &model, Timestamp::now())
            .await
            .unwrap();
        assert!(out.frame.invalidation_condition.frames.is_empty(), "{:?}", out.frame.invalidation_condition);
        let notes: Vec<&str> = out
            .frame
            .evidence
            .iter()
            .filter_map(|e| match e {
                Evidence::Observation { tool, content } if tool == "core" => Some(content.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(notes.len(), 4, "two evidence cites, two plugin cites: {notes:?}");
        assert!(notes.iter().all(|n| n.contains("not in this session or a linked one")), "{notes:?}");
        // A parent the session cannot see is refused before the model runs.
        let e = core
            .step(
                &Recall,
                Step { query: "q".into(), raw: &raw, parent: Some(hidden.frame_id.clone()) },
                &model,
                Timestamp::now(),
            )
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("not in this session or a linked one") || e.to_string().contains("no frame"),
            "{e}"
        );
        assert!(f.store.check().await.unwrap().is_empty());
    });
}
