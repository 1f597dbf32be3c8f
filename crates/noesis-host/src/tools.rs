//! The host's tools, beside the built-ins: `run_module` (any Cognitive
//! Module; its envelope is the observation), `search_frames` and
//! `open_frame` (past cognition as an environment the model navigates),
//! `sub_agent` (a child run, depth-limited), and `load_skill` (an Agent
//! Skill's instructions and files, read when the model asks for them).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use noesis_agent::{
    Action, AgentRun, ApprovalPolicy, CallStatus, Driver, Effects, Outcome, ToolDecl, ToolEvidence, ToolFn, ToolOutput,
    ToolSpend, Toolbox,
};
use noesis_frames::scan::json_digest;
use noesis_llm::Provider;
use noesis_modules::search::SearchPath;
use noesis_runtime::compose::{ComposeOptions, SearchResolver, execute};
use noesis_store::{FrameFilter, Store};
use serde_json::{Value, json};

use crate::merge::{Child, Comparison, FileEdit};
use crate::runs::{Keep, now_ms};
use crate::worktree::Worktree;

/// The tools a small model is offered by default: enough to read, search,
/// change files and run the tests, in as few prompt tokens as will do.
pub const COMPACT_TOOLS: [&str; 6] = ["list_dir", "read_file", "grep", "write_file", "edit_file", "run_command"];

/// `decls` cut down for a small model: only [`COMPACT_TOOLS`], each with
/// the first sentence of its description and without its optional
/// arguments (a call that leaves them out is as valid as before).
pub fn compact(decls: Vec<ToolDecl>) -> Vec<ToolDecl> {
    decls
        .into_iter()
        .filter(|d| COMPACT_TOOLS.contains(&d.name.as_str()))
        .map(|mut d| {
            if let Some(end) = d.description.find(". ") {
                d.description.truncate(end + 1);
            }
            let required: Vec<Value> = d.parameters["required"].as_array().cloned().unwrap_or_default();
            if let Some(props) = d.parameters.get_mut("properties").and_then(Value::as_object_mut) {
                props.retain(|k, _| required.iter().any(|r| r == k));
            }
            d
        })
        .collect()
}

/// How deep sub-agents may nest (a run started from the command line is
/// depth 0).
pub const MAX_DEPTH: u64 = 2;

/// What the host tools reach.
#[derive(Clone)]
pub struct HostTools {
    /// Where `run_module` finds modules.
    pub search: SearchPath,
    /// What answers `run_module` (and a sub-agent without a router).
    pub provider: Arc<dyn Provider>,
    /// Frames and runs.
    pub store: Arc<dyn Store>,
    /// The project whose frames are searched.
    pub project_id: String,
    /// The run the tools serve (sub-agents are named after it).
    pub run_id: String,
    /// The run's depth.
    pub depth: u64,
    /// The run's router: a sub-agent's calls go through it as `sub_agent`.
    pub router: Option<Arc<dyn noesis_agent::ModelRouter>>,
    /// When set, the only sessions whose frames `search_frames` and
    /// `open_frame` show (plus promoted frames): a plugin's view.
    pub visible: Option<Arc<Vec<String>>>,
    /// What redacts the results of the run's tools (a sub-agent's too).
    pub redactor: Arc<noesis_sandbox::Redactor>,
    /// Where `load_skill` finds skills (the run's recorded workspace and
    /// the noesis home); none: it finds none.
    pub skills: Option<noesis_skills::Roots>,
}

impl HostTools {
    fn sees(&self, f: &noesis_frames::CausalFrame) -> bool {
        match &self.visible {
            None => true,
            Some(v) => {
                f.status == noesis_frames::Status::Promoted
                    || f.session_id.as_ref().is_some_and(|s| v.iter().any(|x| x == s))
            }
        }
    }
}

/// `tools` with only the frame tools (`search_frames`, `open_frame`) added:
/// past cognition to navigate, nothing that runs or spawns.
pub fn with_frame_tools(tools: Toolbox, host: &HostTools) -> Toolbox {
    let mut tools = tools;
    for decl in decls(MAX_DEPTH).into_iter().filter(|d| matches!(d.name.as_str(), "search_frames" | "open_frame")) {
        let h = host.clone();
        let run: ToolFn = if decl.name == "search_frames" {
            Arc::new(move |args| Box::pin(search_frames(h.clone(), args)))
        } else {
            Arc::new(move |args| Box::pin(open_frame(h.clone(), args)))
        };
        tools = tools.with_tool(decl, run);
    }
    tools
}

/// The tool that reads a skill.
pub const LOAD_SKILL: &str = "load_skill";

/// The most bytes `load_skill` returns of one file of a skill.
pub const MAX_SKILL_FILE: u64 = 64 * 1024;

/// What a run with skills is told up front: each skill's name and
/// description, and how to read one (its body and files stay out of the
/// prompt until asked for).
pub fn skill_index(found: &noesis_skills::Found) -> String {
    let mut text = String::from("Skills in this workspace (instructions and files for particular kinds of task):\n");
    for s in &found.skills {
        let description: Vec<&str> = s.description.split_whitespace().collect();
        text.push_str(&format!("- {} — {}\n", s.name, description.join(" ")));
    }
    text.push_str(
        "When a task fits one of them, call `load_skill` with its name to read its instructions before you start; \
         call it again with `file` to read one of the files it lists.",
    );
    text
}

/// The declarations of the host tools (the same for every run, so a stored
/// run's tool list does not depend on where it is resumed). `load_skill` is
/// among them, and every toolbox can run it; `Host::start` keeps it in a
/// new run's own list only when the workspace has skills, and that list is
/// what a resumed run goes on with.
pub fn decls(depth: u64) -> Vec<ToolDecl> {
    let mut all = vec![
        ToolDecl::read_only(
            "run_module",
            "Runs a Cognitive Module by name with an input object; the result is its envelope (ok, data or error, meta).",
            json!({"type": "object", "properties": {
                "module": {"type": "string", "maxLength": 200},
                "input": {"type": "object"}
            }, "required": ["module", "input"], "additionalProperties": false}),
        ),
        ToolDecl::read_only(
            "search_frames",
            "Searches this project's past conclusions (frames) by text in the query or conclusion, by a file they rest on, \
             or by status (active, completed, invalidated, suspended, promoted). One line per frame: id, status, confidence, query → conclusion.",
            json!({"type": "object", "properties": {
                "text": {"type": "string", "maxLength": 200},
                "file": {"type": "string", "maxLength": 500},
                "status": {"type": "string", "enum": ["active", "suspended", "completed", "invalidated", "promoted"]}
            }, "additionalProperties": false}),
        ),
        ToolDecl::read_only(
            "open_frame",
            "Shows one past frame by id (or a unique prefix): its query, conclusion, evidence, invalidation condition, status and children.",
            json!({"type": "object", "properties": {"frame_id": {"type": "string", "maxLength": 100}},
                   "required": ["frame_id"], "additionalProperties": false}),
        ),
        ToolDecl::read_only(
            LOAD_SKILL,
            "Reads a skill listed in the instructions by its name: its instructions and the list of its files; \
             with `file`, that file of the skill (a path relative to the skill's folder).",
            json!({"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 64},
                "file": {"type": "string", "maxLength": 500}
            }, "required": ["name"], "additionalProperties": false}),
        ),
    ];
    if depth < MAX_DEPTH {
        // A person who approves the sub-agent approves its task: its own
        // calls then run without asking (it cannot ask in the middle of a
        // tool call). The calls of one turn run side by side.
        all.push(
            ToolDecl::read_only(
                "sub_agent",
                "Hands a self-contained sub-task to a new agent with the same tools; the result is its answer. \
                 Several sub_agent calls in one reply run at the same time.",
                json!({"type": "object", "properties": {"task": {"type": "string", "maxLength": 4000}},
                       "required": ["task"], "additionalProperties": false}),
            )
            .with_effects(Effects { writes_files: true, runs_commands: true, ..Effects::default() })
            .concurrent(),
        );
    }
    all
}

/// `tools` with the host's tools added.
pub fn with_host_tools(tools: Toolbox, host: &HostTools) -> Toolbox {
    let mut tools = tools;
    // What each isolated sub-agent of a batch changed, by call id, until
    // the batch ends and they are compared.
    let isolated: Isolation = Arc::default();
    for decl in decls(host.depth) {
        let h = host.clone();
        let run: ToolFn = match decl.name.as_str() {
            "run_module" => Arc::new(move |args| Box::pin(run_module(h.clone(), args))),
            "search_frames" => Arc::new(move |args| Box::pin(search_frames(h.clone(), args))),
            "open_frame" => Arc::new(move |args| Box::pin(open_frame(h.clone(), args))),
            LOAD_SKILL => Arc::new(move |args| Box::pin(load_skill(h.clone(), args))),
            _ => {
                let kept = Arc::clone(&isolated);
                Arc::new(move |args| Box::pin(sub_agent(h.clone(), Arc::clone(&kept), args)))
            }
        };
        tools = tools.with_tool(decl, run);
    }
    tools.with_batch_end("sub_agent", Arc::new(move |ended| Box::pin(merge_children(Arc::clone(&isolated), ended))))
}

/// The isolated sub-agents of a batch that have ended, by call id.
type Isolation = Arc<Mutex<HashMap<String, Isolated>>>;

/// What an isolated sub-agent left for the end of its batch.
struct Isolated {
    /// The parent's workspace, where a merge goes.
    workspace: PathBuf,
    /// Commands that must pass after a merge (`[agent] anchors`).
    anchors: Vec<String>,
    /// The parent's sandbox, which the anchors run in.
    sandbox: noesis_sandbox::Settings,
    /// What it changed, or why that could not be read.
    changes: Result<std::collections::BTreeMap<String, FileEdit>, String>,
}

/// Whether a run's record asks for its sub-agents to work in worktrees.
fn isolated_by_worktree(host: &Value) -> bool {
    host["isolation"].as_str() == Some("worktree")
}

async fn run_module(h: HostTools, args: Value) -> ToolOutput {
    let name = args["module"].as_str().unwrap_or_default().to_owned();
    let found = match h.search.resolve(&name) {
        Ok(f) => f,
        Err(e) => return ToolOutput::error(format!("{e}; run_module takes a module name on the search path")),
    };
    let module = match found.load() {
        Ok(m) => Arc::new(m),
        Err(e) => return ToolOutput::error(format!("module `{name}` does not load: {e}")),
    };
    let resolver = SearchResolver::new(h.search.clone());
    // The module's calls reserve against the calling run's tree and are
    // priced as its replies are.
    let tree = noesis_agent::tree_budget();
    let mut options = ComposeOptions::default();
    if let Some(t) = &tree {
        options.run.budget.clone_from(&t.meter);
        options.run.prices = Some(Arc::clone(&t.prices));
    }
    let record = execute(module, &resolver, h.provider.as_ref(), args["input"].clone(), &options).await;
    let mut spent = record.steps.iter().fold(ToolSpend::default(), |s, step| ToolSpend {
        calls: s.calls + step.calls,
        input_tokens: s.input_tokens + step.usage.map_or(0, |u| u.input_tokens),
        output_tokens: s.output_tokens + step.usage.map_or(0, |u| u.output_tokens),
        cost_usd: s.cost_usd + step.cost_usd.unwrap_or(0.0),
        model: None,
    });
    let envelope = record.envelope;
    spent.model = envelope["meta"]["model"].as_str().map(str::to_owned);
    let ok = envelope["ok"] == json!(true);
    let evidence = ToolEvidence::Envelope { module: name, ok, blake3: json_digest(&envelope) };
    let text = envelope.to_string();
    let out = if ok { ToolOutput::ok(text) } else { ToolOutput::error(text) }.with_evidence(evidence);
    if spent.calls == 0 { out } else { out.with_spent(spent) }
}

fn frame_line(f: &noesis_frames::CausalFrame) -> String {
    let one = |s: &str, n: usize| {
        let s = s.replace('\n', " ");
        if s.chars().count() <= n { s } else { format!("{}…", s.chars().take(n).collect::<String>()) }
    };
    format!(
        "{} {} {:.2} {} → {}",
        f.frame_id,
        f.status.as_str(),
        f.confidence,
        one(&f.query, 80),
        one(&f.conclusion, 120)
    )
}

async fn search_frames(h: HostTools, args: Value) -> ToolOutput {
    let status = match args["status"].as_str().map(str::parse::<noesis_frames::Status>) {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return ToolOutput::error(e.to_string()),
        None => None,
    };
    let filter = FrameFilter {
        project_id: Some(h.project_id.clone()),
        status,
        file: args["file"].as_str().map(str::to_owned),
        text: args["text"].as_str().map(str::to_owned),
        limit: Some(20),
        ..FrameFilter::default()
    };
    let found = match &h.visible {
        None => h.store.frames(&filter).await,
        // One query per visible session, and one for promoted frames,
        // each limited; merged oldest first like the plain search.
        Some(sessions) => {
            async {
                let mut all = Vec::new();
                for s in sessions.iter() {
                    all.extend(h.store.frames(&FrameFilter { session_id: Some(s.clone()), ..filter.clone() }).await?);
                }
                if status.is_none_or(|s| s == noesis_frames::Status::Promoted) {
                    let promoted = FrameFilter { status: Some(noesis_frames::Status::Promoted), ..filter.clone() };
                    all.extend(h.store.frames(&promoted).await?);
                }
                all.sort_by(|a, b| a.frame_id.cmp(&b.frame_id));
                all.dedup_by(|a, b| a.frame_id == b.frame_id);
                all.truncate(20);
                Ok(all)
            }
            .await
        }
    };
    match found {
        Ok(frames) if frames.is_empty() => ToolOutput::ok("no frames match"),
        Ok(frames) => {
            let lines: Vec<String> = frames.iter().map(frame_line).collect();
            frames.iter().fold(ToolOutput::ok(lines.join("\n")), |out, f| {
                out.with_evidence(ToolEvidence::Frame { frame_id: f.frame_id.to_string() })
            })
        }
        Err(e) => ToolOutput::error(format!("the frame store: {e}")),
    }
}

async fn open_frame(h: HostTools, args: Value) -> ToolOutput {
    let prefix = args["frame_id"].as_str().unwrap_or_default();
    let id = match h.store.resolve(Some(&h.project_id), prefix).await {
        Ok(id) => id,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    match h.store.frame(&id).await {
        Ok(Some(f)) if !h.sees(&f) => ToolOutput::error(format!("no frame {id} in this session or a linked one")),
        Ok(Some(f)) => {
            let shown = json!({
                "frame_id": f.frame_id, "status": f.status, "confidence": f.confidence, "query": f.query,
                "conclusion": f.conclusion, "evidence": f.evidence, "invalidation_condition": f.invalidation_condition,
                "parent_id": f.parent_id, "children": f.children,
            });
            ToolOutput::ok(shown.to_string()).with_evidence(ToolEvidence::Frame { frame_id: f.frame_id.to_string() })
        }
        Ok(None) => ToolOutput::error(format!("no frame {id}")),
        Err(e) => ToolOutput::error(e.to_string()),
    }
}

/// A child run of the same configuration, one level deeper, driven to its
/// end here and stored like any run (its frames hang under the parent's
/// call when the parent's are written).
async fn sub_agent(h: HostTools, isolation: Isolation, args: Value) -> ToolOutput {
    let task = args["task"].as_str().unwrap_or_default().to_owned();
    let parent = match h.store.agent_state(&h.run_id, None).await {
        Ok(Some(s)) => match AgentRun::from_json(&s.state) {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("the parent run cannot be read: {e}")),
        },
        Ok(None) => return ToolOutput::error("the parent run is not stored".to_owned()),
        Err(e) => return ToolOutput::error(format!("the run store: {e}")),
    };
    // Named after the call that starts it (the one running now), so the
    // child's id is stable and unique within the parent; siblings running
    // at the same time are told apart by the driver's call id.
    let call_id_given = noesis_agent::current_call_id();
    let call = match &call_id_given {
        Some(id) => parent.calls.iter().find(|c| &c.id == id),
        None => parent.calls.iter().rev().find(|c| c.tool == "sub_agent" && c.status == CallStatus::Running),
    };
    let suffix = call.map_or_else(|| parent.calls.len().to_string(), |c| c.id.clone());
    let id = format!("{}.{suffix}", h.run_id);
    let depth = h.depth + 1;
    let mut config = parent.config.clone();
    config.approval = ApprovalPolicy::Auto;
    config.tools.retain(|t| t.name != "sub_agent" || depth < MAX_DEPTH);
    let mut run = AgentRun::new(id.clone(), task.clone(), config, now_ms());
    let mut host = parent.host.clone();
    host["task"] = json!(task);
    host["depth"] = json!(depth);
    host["parent_run"] = json!(h.run_id);
    host["frame_id"] = Value::Null;
    run.host = host;
    let child = HostTools { run_id: id.clone(), depth, ..h.clone() };
    // Isolated: the child works in a worktree of what the parent sees now.
    let checkout = if isolated_by_worktree(&parent.host) {
        let Some(parent_ws) = parent.host["workspace"].as_str().map(PathBuf::from) else {
            return ToolOutput::error("the parent run names no workspace".to_owned());
        };
        // Its changes are kept by call id until the batch ends: without
        // one they could never be merged, so the child does not start.
        if call.is_none() {
            return ToolOutput::error(format!("sub-agent {id}: its call is not on record in the parent run"));
        }
        let made = tokio::task::spawn_blocking(move || {
            let base = crate::worktree::base(&parent_ws)?;
            let tree = Worktree::add(&base)?;
            Ok::<_, crate::worktree::WorktreeError>((base, tree, parent_ws))
        })
        .await;
        match made {
            Ok(Ok((base, tree, parent_ws))) => {
                run.host["workspace"] = json!(tree.workspace().to_string_lossy());
                Some((base, tree, parent_ws))
            }
            Ok(Err(e)) => return ToolOutput::error(format!("sub-agent {id}: {e}")),
            Err(e) => return ToolOutput::error(format!("sub-agent {id}: {e}")),
        }
    } else {
        None
    };
    let workspace = match run.host["workspace"].as_str().map(std::path::Path::new) {
        Some(p) => match noesis_agent::Workspace::new(p) {
            Ok(w) => w,
            Err(e) => return ToolOutput::error(e.to_string()),
        },
        None => return ToolOutput::error("the parent run names no workspace".to_owned()),
    };
    let sandbox = match crate::host::recorded_sandbox(&run.host) {
        Ok(s) => s,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    // The parent's rules, as its config carries them; its confinement and
    // redaction.
    let tools = Arc::new(with_host_tools(
        Toolbox::with_permissions(workspace, run.config.permissions.clone())
            .with_sandbox(sandbox, Vec::new())
            .with_redactor(Arc::clone(&h.redactor)),
        &child,
    ));
    let router = h
        .router
        .clone()
        .map(|r| Arc::new(noesis_agent::AsRole::new("sub_agent", r)) as Arc<dyn noesis_agent::ModelRouter>);
    // One meter for the tree: the child reserves against the parent's, and
    // its replies are priced as the parent's are (never at $0).
    let tree = noesis_agent::tree_budget();
    let prices = tree.as_ref().map(|t| Arc::clone(&t.prices));
    let table = prices.clone();
    let price = move |r: &noesis_llm::ChatResponse| {
        r.usage.and_then(|u| table.as_ref().and_then(|t| t.cost(&r.model, u))).unwrap_or(0.0)
    };
    let driver = Driver {
        now: &now_ms,
        router,
        price: &price,
        meter: tree.and_then(|t| t.meter),
        prices,
        ..Driver::new(h.provider.as_ref(), tools)
    };
    let mut keep = Keep::new(h.store.as_ref(), h.project_id.clone());
    let evidence = ToolEvidence::SubAgent { run_id: id.clone() };
    // The child's future holds its own driver; boxing keeps the recursion
    // finite in type.
    let end: Result<Action, _> = Box::pin(driver.drive(&mut run, &mut keep)).await;
    let u = run.usage;
    let spent = ToolSpend {
        calls: u.turns,
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cost_usd: u.cost_usd,
        model: None,
    };
    let isolated_call = checkout.as_ref().and(call.map(|c| c.id.clone()));
    if let (Some((base, tree, parent_ws)), Some(call_id)) = (checkout, isolated_call.clone()) {
        // Read back, then the worktree goes; what it changed waits for the
        // end of the batch.
        let read = tokio::task::spawn_blocking(move || {
            let changes = tree.changes(&base).map_err(|e| e.to_string());
            let removed = tree.remove().map_err(|e| e.to_string());
            changes.and_then(|c| removed.map(|()| c))
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        let kept = Isolated {
            workspace: parent_ws,
            anchors: parent.host["anchors"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default(),
            sandbox: crate::host::recorded_sandbox(&parent.host).unwrap_or_default(),
            changes: read,
        };
        isolation.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(call_id, kept);
    }
    let out = match (end, &run.outcome) {
        (Err(e), _) => ToolOutput::error(format!("sub-agent {id}: {e}")),
        (Ok(_), Some(Outcome::Answer { text })) => ToolOutput::ok(text.clone()).with_evidence(evidence),
        (Ok(_), Some(other)) => {
            ToolOutput::error(format!("sub-agent {id} ended without an answer: {}", noesis_agent::outcome_name(other)))
                .with_evidence(evidence)
        }
        (Ok(_), None) => ToolOutput::error(format!("sub-agent {id} stopped before its end")).with_evidence(evidence),
    };
    let out = out.with_spent(spent);
    match isolated_call {
        // Not run by a driver (no batch end will come): merged alone, now.
        Some(call_id) if call_id_given.is_none() => merge_children(isolation, vec![(call_id, out)])
            .await
            .pop()
            .unwrap_or_else(|| ToolOutput::error("the merge gave no result".to_owned())),
        _ => out,
    }
}

/// The end of a batch of sub-agents: the changes of those that worked in
/// worktrees are compared ([`crate::merge::compare`]); what does not clash
/// is written into the parent's workspace, and kept only if the anchors
/// still pass; each call's result then says what became of its changes.
async fn merge_children(isolation: Isolation, ended: Vec<(String, ToolOutput)>) -> Vec<ToolOutput> {
    let mut kept: Vec<(String, Isolated)> = {
        let mut all = isolation.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ended.iter().filter_map(|(id, _)| all.remove(id).map(|i| (id.clone(), i))).collect()
    };
    let Some((_, first)) = kept.first() else { return ended.into_iter().map(|(_, out)| out).collect() };
    let (workspace, anchors, sandbox) = (first.workspace.clone(), first.anchors.clone(), first.sandbox.clone());
    let names: Vec<String> = kept.iter().map(|(id, _)| id.clone()).collect();
    // Only the changes of a child that reached its answer are merged.
    let mut unread: HashMap<String, String> = HashMap::new();
    let mut children = Vec::new();
    for (id, i) in &mut kept {
        let finished = ended.iter().any(|(e, out)| e == id && !out.is_error);
        match std::mem::replace(&mut i.changes, Ok(Default::default())) {
            Ok(files) if finished => children.push(Child { name: id.clone(), files }),
            Ok(files) if files.is_empty() => {}
            Ok(_) => {
                unread.insert(id.clone(), "it did not reach an answer, so its changes were not merged".to_owned());
            }
            Err(e) => {
                unread.insert(id.clone(), format!("its changes could not be read: {e}"));
            }
        }
    }
    let merged = tokio::task::spawn_blocking(move || merge_into(&workspace, &anchors, &sandbox, &children))
        .await
        .unwrap_or_else(|e| Merge::failed(e.to_string()));
    ended
        .into_iter()
        .map(|(id, mut out)| {
            if names.contains(&id) {
                out.content.push_str(&merged.report(&id, &names, unread.get(&id)));
            }
            out
        })
        .collect()
}

/// What a merge did.
#[derive(Debug, Default)]
struct Merge {
    /// The comparison of the children's changes.
    compared: Comparison,
    /// Merged files the workspace no longer held as the children found
    /// them (someone changed them meanwhile), left alone.
    stale: Vec<String>,
    /// Files written.
    written: Vec<String>,
    /// The anchors' verdict: `Some(failure)` when one failed (everything
    /// written was put back).
    red: Option<String>,
    /// Anchors that ran.
    anchors: Vec<String>,
    /// Why nothing could be merged at all.
    failed: Option<String>,
}

impl Merge {
    fn failed(why: String) -> Merge {
        Merge { failed: Some(why), ..Merge::default() }
    }

    /// What the call `id` is told of the merge.
    fn report(&self, id: &str, siblings: &[String], unread: Option<&String>) -> String {
        let others: Vec<&str> = siblings.iter().map(String::as_str).filter(|s| *s != id).collect();
        let mut text = String::from("\n\n---\nThis sub-agent worked in its own git worktree");
        if others.is_empty() {
            text.push_str(".\n");
        } else {
            text.push_str(&format!(
                "; its changes were compared with those of {} before any merge.\n",
                others.join(", ")
            ));
        }
        if let Some(why) = unread {
            text.push_str(&format!("Nothing of it was merged: {why}.\n"));
            return text;
        }
        if let Some(why) = &self.failed {
            text.push_str(&format!("Nothing was merged: {why}.\n"));
            return text;
        }
        let of_child = |m: &crate::merge::Merged| m.children.iter().any(|c| c == id);
        let mine: Vec<&String> = self.compared.merged.iter().filter(|(_, m)| of_child(m)).map(|(p, _)| p).collect();
        let written: Vec<&str> = mine.iter().filter(|p| self.written.contains(p)).map(|p| p.as_str()).collect();
        let stale: Vec<&str> = mine.iter().filter(|p| self.stale.contains(p)).map(|p| p.as_str()).collect();
        match (&self.red, written.is_empty()) {
            (_, true) => {}
            (None, false) => text.push_str(&format!("Merged into the workspace: {}.\n", written.join(", "))),
            (Some(_), false) => text.push_str(&format!(
                "Not merged (the anchors failed after the merge, which was undone): {}.\n",
                written.join(", ")
            )),
        }
        if !stale.is_empty() {
            text.push_str(&format!(
                "Not merged, changed in the workspace while the sub-agents worked: {}.\n",
                stale.join(", ")
            ));
        }
        for (path, clashes) in &self.compared.conflicts {
            if !self.compared.conflicting(path).contains(&id) {
                continue;
            }
            text.push_str(&format!("Not merged, in conflict: {path}\n"));
            for clash in clashes.iter().filter(|c| c.sides.iter().any(|(n, _)| n == id)) {
                let at = match clash.lines {
                    None => "the whole file".to_owned(),
                    Some((a, b)) if b < a => format!("before line {a}"),
                    Some((a, b)) if a == b => format!("line {a}"),
                    Some((a, b)) => format!("lines {a}-{b}"),
                };
                text.push_str(&format!("  {at}; it was:\n{}", indented(&clash.base)));
                for (name, side) in &clash.sides {
                    text.push_str(&format!("  {name} made it:\n{}", indented(side)));
                }
            }
        }
        if mine.is_empty() && !self.compared.conflicts.keys().any(|p| self.compared.conflicting(p).contains(&id)) {
            text.push_str("It changed no file.\n");
        }
        if let Some(failure) = &self.red {
            text.push_str(&format!("Anchors: {failure}\n"));
        } else if !self.anchors.is_empty() && !self.written.is_empty() {
            text.push_str(&format!("Anchors passed after the merge: {}.\n", self.anchors.join(", ")));
        }
        text
    }
}

/// `text` indented for a report, each line once, clipped.
fn indented(text: &str) -> String {
    const MOST: usize = 2000;
    let clipped: String = text.chars().take(MOST).collect();
    let mut out: String = clipped.lines().map(|l| format!("    {l}\n")).collect();
    if text.chars().count() > MOST {
        out.push_str("    …\n");
    }
    if out.is_empty() {
        out.push_str("    (nothing)\n");
    }
    out
}

/// Compares `children`, writes what does not clash into `workspace`, runs
/// the anchors and puts everything back if one fails. Blocking.
fn merge_into(
    workspace: &std::path::Path,
    anchors: &[String],
    sandbox: &noesis_sandbox::Settings,
    children: &[Child],
) -> Merge {
    let ws = match noesis_agent::Workspace::new(workspace) {
        Ok(w) => w,
        Err(e) => return Merge::failed(format!("the workspace {}: {e}", workspace.display())),
    };
    let mut merge = Merge { compared: crate::merge::compare(children), ..Merge::default() };
    // Every target checked before anything is written: a file the
    // workspace no longer holds as the base did is left out.
    let mut plan = Vec::new();
    for (path, m) in &merge.compared.merged {
        let now = ws.confine(path).ok().and_then(|real| match std::fs::read(&real) {
            Ok(bytes) => Some((real, Some(bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some((real, None)),
            Err(_) => None,
        });
        match now {
            Some((real, held)) if held == m.before => plan.push((path.clone(), real, m)),
            _ => merge.stale.push(path.clone()),
        }
    }
    let mut undo: Vec<(PathBuf, Option<Vec<u8>>)> = Vec::new();
    for (path, real, m) in plan {
        if let Err(e) = put(&real, m.after.as_deref()) {
            restore(&undo);
            return Merge::failed(format!("{path} could not be written: {e}"));
        }
        undo.push((real, m.before.clone()));
        merge.written.push(path);
    }
    if merge.written.is_empty() {
        return merge;
    }
    for line in anchors {
        merge.anchors.push(format!("`{line}`"));
        if let Err(failure) = run_anchor(ws.root(), sandbox, line) {
            restore(&undo);
            merge.red = Some(failure);
            break;
        }
    }
    merge
}

/// Writes `bytes` at `path` (folders made), or removes it.
fn put(path: &std::path::Path, bytes: Option<&[u8]>) -> std::io::Result<()> {
    match bytes {
        Some(b) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            noesis_fs::write_atomic(path, b).map_err(std::io::Error::other)
        }
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// Puts back what a merge wrote, last first.
fn restore(undo: &[(PathBuf, Option<Vec<u8>>)]) {
    for (path, before) in undo.iter().rev() {
        // Best effort: the report says the merge was undone; a file that
        // cannot be put back is what the person would see with git status.
        let _ = put(path, before.as_deref());
    }
}

/// Runs one anchor command in the parent's workspace and sandbox: `Ok`
/// when it exits 0, else what it said.
fn run_anchor(root: &std::path::Path, settings: &noesis_sandbox::Settings, line: &str) -> Result<(), String> {
    let Some(argv) = shlex::split(line).filter(|a| !a.is_empty()) else {
        return Err(format!("`{line}` is not a command line ([agent] anchors)"));
    };
    let sandbox = noesis_sandbox::Sandbox::new(settings, root, &[]).map_err(|e| format!("`{line}`: {e}"))?;
    let opts = noesis_sandbox::RunOptions {
        cwd: root,
        timeout: std::time::Duration::from_secs(600),
        max_output: 4000,
        cancelled: &|| false,
    };
    let done = sandbox.run(&argv, &opts).map_err(|e| format!("`{line}`: {e}"))?;
    if done.success() {
        return Ok(());
    }
    let why = if done.timed_out {
        "timed out".to_owned()
    } else {
        done.code.map_or_else(|| "was killed".to_owned(), |c| format!("exited {c}"))
    };
    let said = format!("{}{}", done.stdout, done.stderr);
    Err(format!("`{line}` {why} after the merge, which was undone; it said:\n{}", indented(said.trim_end())))
}

/// A skill's body and files, or one of its files. The skills are found
/// again at each call, so an edit made during the run is what is read.
async fn load_skill(h: HostTools, args: Value) -> ToolOutput {
    let name = args["name"].as_str().unwrap_or_default();
    let Some(roots) = &h.skills else { return ToolOutput::error("this run has no skills".to_owned()) };
    let found = noesis_skills::discover(roots);
    let Some(skill) = found.get(name) else {
        let known = found.names();
        return ToolOutput::error(if known.is_empty() {
            format!("no skill `{name}`: this workspace has no skills now")
        } else {
            format!("no skill `{name}`; the skills are {}", known.join(", "))
        });
    };
    // Evidence names a file of the workspace by its relative path; a
    // person's own skill lies outside it and keeps its full path.
    let shown = |p: &std::path::Path| p.strip_prefix(&roots.workspace).unwrap_or(p).display().to_string();
    if let Some(file) = args["file"].as_str() {
        return match skill.read_file(file, MAX_SKILL_FILE) {
            Ok(read) => {
                let blake3 = noesis_frames::scan::hash_bytes(read.text.as_bytes());
                ToolOutput::ok(read.text).with_evidence(ToolEvidence::File { path: shown(&read.path), blake3 })
            }
            Err(e) => ToolOutput::error(e.to_string()),
        };
    }
    let mut text = format!("Skill `{}` ({}):\n\n{}", skill.name, skill.description, skill.body().trim_end());
    match skill.files() {
        Ok(files) if files.list.is_empty() => {}
        Ok(files) => {
            text.push_str(&format!(
                "\n\nIts files (read one with load_skill {{\"name\": \"{}\", \"file\": PATH}}):\n",
                skill.name
            ));
            for f in &files.list {
                text.push_str(&format!("- {f}\n"));
            }
            if files.more {
                text.push_str(&format!("(only the first {} are listed)\n", files.list.len()));
            }
        }
        Err(e) => text.push_str(&format!("\n\nIts files cannot be listed: {e}")),
    }
    let missing = missing_for(&h, skill).await;
    if !missing.is_empty() {
        text.push_str(&format!("\n\n{}", missing.join("\n")));
    }
    let blake3 = noesis_frames::scan::hash_bytes(skill.source().as_bytes());
    ToolOutput::ok(text.trim_end().to_owned()).with_evidence(ToolEvidence::File { path: shown(&skill.path()), blake3 })
}

/// What `skill` names that this run cannot use: tools it is not offered,
/// modules that do not resolve (or all of them, without `run_module`).
async fn missing_for(h: &HostTools, skill: &noesis_skills::Skill) -> Vec<String> {
    if skill.tools.is_empty() && skill.modules.is_empty() {
        return Vec::new();
    }
    // The run's own list, as stored: what its model is really offered.
    let offered: Option<Vec<String>> = match h.store.agent_state(&h.run_id, None).await {
        Ok(Some(s)) => AgentRun::from_json(&s.state).ok().map(|r| r.config.tools.into_iter().map(|t| t.name).collect()),
        _ => None,
    };
    let Some(offered) = offered else { return Vec::new() };
    let mut said = Vec::new();
    let tools: Vec<&str> = skill.tools.iter().filter(|t| !offered.contains(t)).map(String::as_str).collect();
    if !tools.is_empty() {
        said.push(format!("This skill names tools this run is not offered: {}.", tools.join(", ")));
    }
    let modules: Vec<&str> = if offered.iter().any(|t| t == "run_module") {
        skill.modules.iter().filter(|m| h.search.resolve(m).is_err()).map(String::as_str).collect()
    } else {
        skill.modules.iter().map(String::as_str).collect()
    };
    if !modules.is_empty() {
        let why = if offered.iter().any(|t| t == "run_module") {
            "not found on the module search path"
        } else {
            "run_module is not offered"
        };
        said.push(format!("This skill names modules this run cannot run ({why}): {}.", modules.join(", ")));
    }
    said
}

#[cfg(test)]
mod tests {
    use noesis_agent::{Toolbox, Workspace};

    use super::*;

    #[test]
    fn the_compact_set_keeps_what_a_small_model_needs_in_fewer_words() {
        let dir = tempfile::tempdir().unwrap();
        let mut all = Toolbox::new(Workspace::new(dir.path()).unwrap(), Vec::new()).decls();
        all.extend(decls(0));
        let small = compact(all.clone());
        let names: Vec<&str> = small.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names.len(), COMPACT_TOOLS.len(), "{names:?}");
        assert!(COMPACT_TOOLS.iter().all(|n| names.contains(n)), "{names:?}");
        let size =
            |d: &[ToolDecl]| d.iter().map(|t| t.description.len() + t.parameters.to_string().len()).sum::<usize>();
        assert!(size(&small) * 2 < size(&all), "{} of {}", size(&small), size(&all));
        let read = small.iter().find(|d| d.name == "read_file").unwrap();
        assert_eq!(read.parameters["properties"].as_object().unwrap().keys().collect::<Vec<_>>(), ["path"]);
        assert_eq!(read.parameters["required"], json!(["path"]));
        assert!(read.description.ends_with('.') && !read.description.contains(". "), "{}", read.description);
        // What the compact schema requires, the full one requires too.
        let full = all.iter().find(|d| d.name == "read_file").unwrap();
        assert_eq!(full.parameters["required"], read.parameters["required"]);
    }
}
