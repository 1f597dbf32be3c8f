//! `noesis solve "TASK" --test "CMD"…`: the verified coding workflow over
//! the project's CognitiveState. PLANNER, REASONER and REFLECTOR are
//! built-in modules (overridable on the search path), CODER an agent run
//! with the file tools confined to the workspace, VERIFIER the test
//! commands. Every node ends in one version of the state (the state and the
//! episode's record together), so `--resume` continues from the last node
//! boundary; CODER's run resumes through its own durable records. Before
//! CODER changes anything the tree is snapshotted; a change that makes an
//! anchor (a test that passed) fail is restored exactly.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use noesis_agent::{Action, AgentRun, ApprovalPolicy, Decision, Driver, Permissions, RunConfig, Toolbox, Workspace};
use noesis_llm::{ChatResponse, Provider};
use noesis_modules::search::SearchPath;
use noesis_store::{Store, WorkflowVersion};
use noesis_workflow::junit::CaseStatus;
use noesis_workflow::snapshot::{self, Snapshot};
use noesis_workflow::{Node, StateError};
use serde_json::{Value, json};

use super::state::States;
use crate::out;

/// The episode escalated to a person: the retry budget is spent.
pub(crate) const EXIT_ESCALATED: u8 = 4;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// What to do, e.g. "make the failing test in tests/test_calc.py pass".
    task: Option<String>,
    /// A test command, run with `sh -c` in the workspace (repeatable); exit 0 passes.
    #[arg(long = "test", value_name = "CMD")]
    tests: Vec<String>,
    /// A JUnit XML report the test commands write (relative to the workspace),
    /// read after each command that updated it, so results are per test case
    /// (pytest is asked for one without it).
    #[arg(long, value_name = "PATH")]
    junit: Option<PathBuf>,
    /// The folder CODER may change [default: the current one].
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Continue the project's unfinished or escalated episode.
    #[arg(long)]
    resume: bool,
    /// Advice for the next attempt (with --resume after an escalation).
    #[arg(long, value_name = "TEXT", requires = "resume")]
    hint: Option<String>,
    /// Attempts REFLECTOR may route back before the episode escalates [default: 3].
    #[arg(long, value_name = "N")]
    max_retries: Option<u64>,
    /// Seconds one test command may run.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    test_timeout: u64,
    /// Print the final state and outcome as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    sandbox: crate::cmd::sandbox::SandboxArgs,
    #[command(flatten)]
    rules: super::agent::rules::RuleFlags,
    #[command(flatten)]
    provider: crate::provider::ProviderArgs,
}

/// One tracked test: a case when the runner reported cases (JUnit XML),
/// else the whole command.
#[derive(Debug, Clone)]
struct TestRun {
    /// The case's id (`classname::name`), or the command.
    name: String,
    command: String,
    passed: bool,
    /// `passed`, `failed`, `error` or `skipped`.
    status: &'static str,
    exit: Option<i32>,
    message: Option<String>,
    tail: String,
    ms: u64,
}

impl TestRun {
    fn json(&self) -> Value {
        json!({"name": self.name, "command": self.command, "status": self.status, "exit_code": self.exit,
               "ms": self.ms, "output_blake3": blake3::hash(self.tail.as_bytes()).to_hex().to_string()})
    }

    fn failed(&self) -> bool {
        matches!(self.status, "failed" | "error")
    }
}

/// The end of `text`, at most `n` characters.
fn tail(text: &str, n: usize) -> String {
    let count = text.chars().count();
    if count <= n { text.to_owned() } else { format!("…{}", text.chars().skip(count - n).collect::<String>()) }
}

/// Whether `command` is a plain pytest run noesis may ask for a JUnit
/// report (`--junitxml`): pytest or `python -m pytest`, with nothing the
/// shell would treat specially after it.
fn is_plain_pytest(command: &str) -> bool {
    let first = command.split_whitespace().next().unwrap_or_default();
    let pytest = first.rsplit('/').next() == Some("pytest") || command.contains(" -m pytest");
    pytest && !command.contains([';', '&', '|', '>', '<', '`', '$', '\n'])
}

/// The program part of a plain pytest command (`pytest`, a path to it, or
/// `python -m pytest`), to run another file with.
fn pytest_program(command: &str) -> String {
    match command.find(" -m pytest") {
        Some(i) => command[..i + " -m pytest".len()].to_owned(),
        None => command.split_whitespace().next().unwrap_or("pytest").to_owned(),
    }
}

/// Runs each command with `sh -c` in `root`, confined by `sandbox` (the
/// whole tree killed at `limit`), and reports per case when the runner
/// says so: pytest is asked for a JUnit report (written in the sandbox's
/// own folder), and `junit` (a report the commands write themselves) is
/// read when a command updated it. Output is redacted before it is kept.
async fn run_tests(
    sandbox: &Arc<noesis_sandbox::Sandbox>,
    redactor: &noesis_sandbox::Redactor,
    root: &Path,
    commands: &[String],
    limit: Duration,
    junit: Option<&Path>,
) -> anyhow::Result<Vec<TestRun>> {
    let mut runs = Vec::new();
    for (n, command) in commands.iter().enumerate() {
        let started = std::time::Instant::now();
        let asked = (junit.is_none() && is_plain_pytest(command))
            .then(|| sandbox.scratch().join(format!("junit-{}-{n}.xml", std::process::id())));
        if let Some(p) = &asked {
            let _ = std::fs::remove_file(p);
        }
        let line = match &asked {
            Some(path) => format!("{command} --junitxml='{}'", path.display()),
            None => command.clone(),
        };
        let given = junit.map(|p| root.join(p));
        let before = given.as_ref().and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        let (sb, dir) = (Arc::clone(sandbox), root.to_path_buf());
        let done = tokio::task::spawn_blocking(move || {
            let opts =
                noesis_sandbox::RunOptions { cwd: &dir, timeout: limit, max_output: 1 << 20, cancelled: &|| false };
            sb.run(&["sh".to_owned(), "-c".to_owned(), line], &opts)
        })
        .await
        .map_err(|e| anyhow::anyhow!("test command `{command}`: {e}"))?;
        let (ok, exit, text) = match done {
            Err(e) => bail!("test command `{command}` could not run: {e}"),
            Ok(f) if f.timed_out => (false, None, format!("timed out after {} s and was killed", limit.as_secs())),
            Ok(f) => {
                let ok = f.success();
                let mut text = f.stdout;
                text.push_str(&f.stderr);
                (ok, f.code, text)
            }
        };
        let text = redactor.redact(&text).into_owned();
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let tail = tail(&text, 2000);
        let report = match (&asked, &given) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(path)) => {
                let after = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                (after.is_some() && after != before).then(|| path.clone())
            }
            _ => None,
        };
        let cases = report
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|xml| noesis_workflow::junit::parse(&xml).ok())
            .filter(|c| !c.is_empty());
        let run = |name: String, status: &'static str, message: Option<String>| TestRun {
            name,
            command: command.clone(),
            passed: status == "passed",
            status,
            exit,
            message: message.map(|m| redactor.redact(&m).into_owned()),
            tail: tail.clone(),
            ms,
        };
        match cases {
            Some(cases) => {
                let any_failed = cases.iter().any(|c| matches!(c.status, CaseStatus::Failed | CaseStatus::Error));
                for c in cases {
                    runs.push(run(c.id, c.status.as_str(), c.message));
                }
                // A command that failed with no failing case (a crash after
                // the report, a timeout) still fails, as itself.
                if !ok && !any_failed {
                    runs.push(run(command.clone(), "failed", None));
                }
            }
            None => runs.push(run(command.clone(), if ok { "passed" } else { "failed" }, None)),
        }
    }
    Ok(runs)
}

/// The files that judge CODER's work: files named in the test commands
/// and the files of anchor cases (`file::case`), those that exist in the
/// workspace. No command CODER runs may change them (read-only in its
/// sandbox), and VERIFIER runs them as they were.
fn judging_files(workspace: &Path, tests: &[String], anchors: &[String]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let words = tests.iter().flat_map(|t| shlex::split(t).unwrap_or_default());
    let cases = anchors.iter().filter_map(|a| a.split_once("::").map(|(f, _)| f.to_owned()));
    for w in words.chain(cases) {
        // Options, and the reports they name, judge nothing.
        if w.starts_with('-') {
            continue;
        }
        let rel = PathBuf::from(&w);
        if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            continue;
        }
        if workspace.join(&rel).is_file() && !out.contains(&rel) {
            out.push(rel);
        }
    }
    out
}

/// What VERIFIER found, kept in the episode before a restore so a crash
/// after it cannot lose the regression.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Verdict {
    /// The `--test` commands' results.
    public: Vec<Value>,
    /// The failing tests, with their output's end.
    failed: Vec<Value>,
    /// Every passing test's name.
    passing: Vec<String>,
    /// Anchors that no longer pass.
    broken: Vec<String>,
    /// CODER's own tests.
    ai: Vec<Value>,
    /// What the restore undoes (taken before it), when there is one.
    #[serde(default)]
    reverting: Value,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default()
}

struct Solver<'a> {
    search: &'a SearchPath,
    store: Arc<dyn Store>,
    project_id: String,
    project_root: PathBuf,
    provider: Arc<dyn Provider>,
    prices: Arc<noesis_llm::PriceTable>,
    states: States<'a>,
    workspace: PathBuf,
    blobs: PathBuf,
    test_timeout: Duration,
    quiet: bool,
    /// The operator's rules for CODER (`[permissions]`, the rule flags,
    /// `[agent] allow_commands`); each run adds the tests as commands and
    /// protects the files that judge it.
    permissions: Permissions,
    /// How the tests and CODER's commands are confined.
    sandbox: noesis_sandbox::Settings,
    /// What redacts what they print.
    redactor: Arc<noesis_sandbox::Redactor>,
}

impl Solver<'_> {
    /// The sandbox tests run in: the episode's settings, the installations
    /// of test programs named by full path readable, the judging files
    /// read-only.
    fn test_sandbox(&self, tests: &[String], anchors: &[String]) -> anyhow::Result<Arc<noesis_sandbox::Sandbox>> {
        let mut settings = self.sandbox.clone();
        let named = tests.iter().filter_map(|t| shlex::split(t).and_then(|w| w.into_iter().next()));
        for program in named.chain(self.permissions.command_programs()) {
            settings.read_extra.extend(noesis_sandbox::paths::program_root(&program));
        }
        let protected = judging_files(&self.workspace, tests, anchors);
        Ok(Arc::new(noesis_sandbox::Sandbox::new(&settings, &self.workspace, &protected)?))
    }

    async fn run_tests(
        &self,
        head: &WorkflowVersion,
        commands: &[String],
        junit: Option<&Path>,
    ) -> anyhow::Result<Vec<TestRun>> {
        let tests = strings(&head.episode["tests"]);
        let anchors = strings(&head.state["test_results"]["anchor_tests"]);
        let sandbox = self.test_sandbox(&tests, &anchors)?;
        run_tests(&sandbox, &self.redactor, &self.workspace, commands, self.test_timeout, junit).await
    }

    fn note(&self, text: &str) {
        if !self.quiet {
            out::note(text);
        }
    }

    /// Runs a node's module on `input`; its `data`, or why not.
    async fn module(&self, name: &str, input: Value) -> anyhow::Result<Value> {
        let module = self
            .search
            .resolve(name)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .load()
            .map_err(|e| anyhow::anyhow!("module {name}: {e}"))?;
        let options = noesis_runtime::RunOptions { prices: Some(Arc::clone(&self.prices)), ..Default::default() };
        let record = noesis_runtime::run(&module, self.provider.as_ref(), input, &options).await;
        let envelope = record.envelope;
        if envelope["ok"] != json!(true) {
            bail!(
                "{name} failed: {} {}",
                envelope["error"]["code"].as_str().unwrap_or("E4000"),
                envelope["error"]["message"].as_str().unwrap_or_default()
            );
        }
        Ok(envelope["data"].clone())
    }

    /// Writes one node boundary; the version, or the state's refusal.
    async fn step(
        &self,
        command: &str,
        op: impl Fn(&mut Value, &mut Value) -> Result<(), StateError>,
    ) -> anyhow::Result<Result<WorkflowVersion, StateError>> {
        match self.states.try_step(command, |s, e| op(s, e).map(|()| Value::Null)).await? {
            Ok((v, _)) => Ok(Ok(v)),
            Err(Some(e)) => Ok(Err(e)),
            Err(None) => bail!("the workflow state is gone (was it reset?)"),
        }
    }

    /// The JUnit report the test commands write (`--junit`), if any.
    fn junit(&self, head: &WorkflowVersion) -> Option<PathBuf> {
        head.episode["junit"].as_str().map(PathBuf::from)
    }

    fn manifest_path(&self, episode: &Value, attempt: u64) -> PathBuf {
        let id = episode["episode_id"].as_str().unwrap_or("episode");
        self.blobs.with_file_name(format!("{id}-{attempt}.json"))
    }

    async fn planner(&self, head: &WorkflowVersion) -> anyhow::Result<()> {
        let (s, e) = (&head.state, &head.episode);
        let mut input = json!({
            "task": s["user_query"],
            "tests": s["test_results"]["public_tests"],
            "anchors": s["test_results"]["anchor_tests"],
        });
        if let Some(h) = e["hint"].as_str() {
            input["hint"] = json!(h);
        }
        // What earlier episodes of this project did and learnt, by the
        // words of this task.
        let task = s["user_query"].as_str().unwrap_or_default();
        let recall = |kind: &'static str, limit: u32| noesis_store::MemoryQuery {
            text: task,
            project_id: Some(&self.project_id),
            kind: Some(kind),
            limit,
        };
        let episodes = self.store.search_memory(&recall("episode", 3)).await?;
        input["episodes"] = json!(
            episodes
                .iter()
                .map(|m| json!({"task": m.entry.record["task"], "solution": m.entry.record["selected_solution"],
                                "outcome": m.entry.record["outcome"]}))
                .collect::<Vec<_>>()
        );
        let lessons = self.store.search_memory(&recall("lesson", 5)).await?;
        input["lessons"] = json!(lessons.iter().map(|m| m.entry.text.clone()).collect::<Vec<_>>());
        if !episodes.is_empty() || !lessons.is_empty() {
            self.note(&format!("    recalled {} episode(s), {} lesson(s)", episodes.len(), lessons.len()));
        }
        let data = self.module("workflow-planner", input).await?;
        self.note(&format!("    selected: {}", data["selected_solution"].as_str().unwrap_or_default()));
        self.step("PLANNER", |s, _| {
            noesis_workflow::set(s, "problem_reflection", data["problem_reflection"].clone())?;
            noesis_workflow::set(s, "possible_solutions", data["possible_solutions"].clone())?;
            noesis_workflow::set(s, "selected_solution", data["selected_solution"].clone())?;
            noesis_workflow::transition(s, "REASONER", &now()).map(|_| ())
        })
        .await??;
        Ok(())
    }

    async fn reasoner(&self, head: &WorkflowVersion) -> anyhow::Result<()> {
        let s = &head.state;
        let input = json!({
            "task": s["user_query"],
            "problem_reflection": s["problem_reflection"],
            "selected_solution": s["selected_solution"],
            "tests": s["test_results"]["public_tests"],
            "critiques": s["critiques"],
        });
        let data = self.module("workflow-reasoner", input).await?;
        self.note(&format!("    plan: {} step(s)", data["plan"].as_array().map_or(0, Vec::len)));
        self.step("REASONER", |s, _| {
            noesis_workflow::set(s, "current_plan", data["plan"].clone())?;
            for t in strings(&data["thoughts"]) {
                noesis_workflow::append(
                    s,
                    "thought_trace",
                    json!({"type": "thought", "node": "REASONER", "content": t}),
                )?;
            }
            noesis_workflow::transition(s, "CODER", &now()).map(|_| ())
        })
        .await??;
        Ok(())
    }

    async fn coder(&self, head: &WorkflowVersion) -> anyhow::Result<()> {
        let attempt = head.episode["attempt"].as_u64().unwrap_or(0);
        // The snapshot and the run's id are on record before anything
        // changes: a crash from here on resumes the same run against the
        // same snapshot.
        let head = if head.episode["coder_run"].is_null() {
            let previous = head.episode["last_manifest"]
                .as_str()
                .and_then(|p| std::fs::read(p).ok())
                .and_then(|b| serde_json::from_slice::<Snapshot>(&b).ok());
            let snap = snapshot::take(&self.workspace, &self.blobs, previous.as_ref())?;
            let path = self.manifest_path(&head.state, attempt);
            std::fs::write(&path, serde_json::to_vec(&snap)?).with_context(|| path.display().to_string())?;
            self.note(&format!("    snapshot: {} files", snap.entries.len()));
            let run_id = format!("{}-coder-{attempt}", head.state["episode_id"].as_str().unwrap_or("episode"));
            let path = path.to_string_lossy().into_owned();
            self.step("CODER (snapshot)", |_, e| {
                e["snapshot"] = json!(path);
                e["last_manifest"] = json!(path);
                e["coder_run"] = json!(run_id);
                Ok(())
            })
            .await??
        } else {
            head.clone()
        };
        let run_id = head.episode["coder_run"].as_str().unwrap_or_default().to_owned();
        let tests = strings(&head.episode["tests"]);
        let workspace = Workspace::new(&self.workspace).map_err(|e| anyhow::anyhow!("{e}"))?;
        let snap = load_manifest(head.episode["snapshot"].as_str())?;
        let permissions = self.coder_permissions(&head, &tests, &snap)?;
        let mut run = match self.store.agent_state(&run_id, None).await? {
            Some(stored) => {
                let mut run = AgentRun::from_json(&stored.state).with_context(|| format!("agent run {run_id}"))?;
                if !run.config.permissions.has_rules() {
                    run.config.permissions = permissions;
                }
                run.resume();
                run
            }
            None => {
                let decls = Toolbox::with_permissions(workspace.clone(), permissions.clone()).decls();
                let config =
                    RunConfig { tools: decls, approval: ApprovalPolicy::Auto, permissions, ..RunConfig::default() };
                let mut run =
                    AgentRun::new(run_id.clone(), coder_task(&head.state, &tests), config, super::agent::now_ms());
                run.host = json!({"task": format!("CODER of episode {}", head.state["episode_id"].as_str().unwrap_or_default()),
                                  "workspace": self.workspace.to_string_lossy(), "provider": self.provider.name(),
                                  "model": self.provider.model(), "project_id": self.project_id, "solve": true});
                run
            }
        };
        // CODER's commands may not change what judges it either: the same
        // paths are read-only in its sandbox.
        let protected: Vec<PathBuf> = run.config.permissions.extra_protected().iter().map(PathBuf::from).collect();
        let tools = Arc::new(tracked_only(
            Toolbox::with_permissions(workspace, run.config.permissions.clone())
                .with_sandbox(self.sandbox.clone(), protected)
                .with_redactor(Arc::clone(&self.redactor)),
        ));
        if run.outcome.is_none() {
            let prices = Arc::clone(&self.prices);
            let price = move |r: &ChatResponse| r.usage.and_then(|u| prices.cost(&r.model, u)).unwrap_or(0.0);
            let observe = super::agent::progress_notes(self.quiet, &run.id, "    ");
            let driver = Driver {
                now: &super::agent::now_ms,
                price: &price,
                observe: Some(&observe),
                ..Driver::new(self.provider.as_ref(), Arc::clone(&tools))
            };
            let mut keep = super::agent::Keep { store: self.store.as_ref(), project_id: self.project_id.clone() };
            // Only an `ask` rule makes CODER wait: no person is there, so
            // the call is denied and the model told, and the run goes on.
            while let Action::AwaitApproval(pending) = driver.drive(&mut run, &mut keep).await? {
                let message =
                    Some("solve asks no one: a rule asks a person about this call, so it does not run".into());
                let denied: Vec<Decision> = pending
                    .into_iter()
                    .map(|p| Decision {
                        call_id: p.call_id,
                        tool: p.tool,
                        arguments_hash: p.arguments_hash,
                        verdict: noesis_agent::Verdict::Deny { message: message.clone() },
                    })
                    .collect();
                run.decide(&denied).with_context(|| format!("CODER's run {run_id}"))?;
            }
        }
        let outcome = run.outcome.as_ref().map_or_else(|| "unfinished".to_owned(), noesis_agent::outcome_name);
        let changes = snapshot::diff(&self.workspace, &snap)?;
        self.note(&format!("    {outcome}; {} path(s) changed", changes.count()));
        let refused = protected_refusals(&run);
        if !refused.is_empty() {
            self.note(&format!("    refused: CODER may not change {} (they judge it)", refused.join(", ")));
        }
        let mut files = serde_json::Map::new();
        for (paths, role) in
            [(&changes.modified, "modified"), (&changes.created, "created"), (&changes.deleted, "deleted")]
        {
            for p in paths {
                files.insert(p.clone(), json!(role));
            }
        }
        // AI tests: test files CODER wrote, this attempt or an earlier one
        // whose change was kept.
        let mut ai_tests: Vec<String> = head.state["test_results"]["ai_tests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["file"].as_str().map(str::to_owned))
            .filter(|f| self.workspace.join(f).is_file())
            .collect();
        for f in changes.created.iter().filter(|p| is_test_file(p)) {
            if !ai_tests.contains(f) {
                ai_tests.push(f.clone());
            }
        }
        let ai_tests: Vec<Value> = ai_tests.iter().map(|f| json!({"file": f, "status": "not run"})).collect();
        self.step("CODER", |s, _| {
            noesis_workflow::set(s, "file_context", Value::Object(files.clone()))?;
            noesis_workflow::set(s, "test_results.ai_tests", json!(ai_tests))?;
            noesis_workflow::append(
                s,
                "thought_trace",
                json!({"type": "coder", "run": run_id, "outcome": outcome, "changed": changes.count()}),
            )?;
            if !refused.is_empty() {
                noesis_workflow::append(
                    s,
                    "error_log",
                    json!({"type": "protected_write", "run": run_id, "paths": refused}),
                )?;
            }
            noesis_workflow::transition(s, "VERIFIER", &now()).map(|_| ())
        })
        .await??;
        Ok(())
    }

    /// Runs the tests; `Some(exit)` when the episode ends here.
    async fn verifier(&self, head: &WorkflowVersion) -> anyhow::Result<Option<ExitCode>> {
        // A regression found before a crash is on record: the tree may be
        // restored already, so the tests would no longer show it.
        let verdict = match head.episode.get("regression").filter(|r| !r.is_null()) {
            Some(recorded) => serde_json::from_value(recorded.clone()).context("the recorded regression")?,
            None => self.verdict(head).await?,
        };
        let Verdict { public, failed, passing, broken, ai, reverting } = verdict;
        let mut reverted = Value::Null;
        if !broken.is_empty()
            && let Some(path) = head.episode["snapshot"].as_str()
        {
            let snap = load_manifest(Some(path))?;
            if head.episode["regression"].is_null() {
                // The verdict and what the restore will undo, before it does.
                let record = Verdict {
                    public: public.clone(),
                    failed: failed.clone(),
                    passing: passing.clone(),
                    broken: broken.clone(),
                    ai: ai.clone(),
                    reverting: serde_json::to_value(snapshot::diff(&self.workspace, &snap)?)?,
                };
                let record = serde_json::to_value(&record)?;
                self.step("VERIFIER (regression)", |_, e| {
                    e["regression"] = record.clone();
                    Ok(())
                })
                .await??;
            }
            let undone = snapshot::restore(&self.workspace, &self.blobs, &snap)?;
            crate::stop::point("verifier-restored");
            self.note(&format!("    anchor regression: {} path(s) restored", undone.count()));
            // Restored already before a crash: what was undone is on record.
            reverted = if undone.is_empty() { reverting } else { serde_json::to_value(&undone)? };
        }
        let solved = failed.is_empty() && broken.is_empty();
        let ai_json = ai;
        let v = self
            .step("VERIFIER", |s, e| {
                noesis_workflow::set(s, "test_results.public_tests", json!(public))?;
                // A reverted change took its test files with it.
                let ai = if broken.is_empty() { json!(ai_json) } else { json!([]) };
                noesis_workflow::set(s, "test_results.ai_tests", ai)?;
                if broken.is_empty() {
                    // A test that passes after a change is an anchor from now on.
                    let mut all = strings(&s["test_results"]["anchor_tests"]);
                    all.extend(passing.iter().filter(|p| !all.contains(p)).cloned().collect::<Vec<_>>());
                    noesis_workflow::set(s, "test_results.anchor_tests", json!(all))?;
                }
                if solved {
                    return noesis_workflow::transition(s, "CONSOLIDATOR", &now()).map(|_| ());
                }
                let entry = if broken.is_empty() {
                    json!({"type": "tests_failed", "tests": failed})
                } else {
                    json!({"type": "anchor_regression", "reason": "anchor regression", "anchors": broken,
                           "reverted": reverted, "tests": failed})
                };
                noesis_workflow::append(s, "error_log", entry)?;
                e["failing"] = json!(failed);
                e["reverted"] = json!(!broken.is_empty());
                e["regression"] = Value::Null;
                e["attempt"] = json!(e["attempt"].as_u64().unwrap_or(0) + 1);
                e["coder_run"] = Value::Null;
                e["snapshot"] = Value::Null;
                match noesis_workflow::transition(s, "REFLECTOR", &now()) {
                    Ok(_) => Ok(()),
                    // No retry left: the episode stops here for a person.
                    Err(StateError::Escalate { .. }) => {
                        e["escalated"] = json!(true);
                        Ok(())
                    }
                    Err(other) => Err(other),
                }
            })
            .await??;
        if v.episode["escalated"] == json!(true) && v.state["current_node"] == "VERIFIER" {
            return Ok(Some(ExitCode::from(EXIT_ESCALATED)));
        }
        Ok(None)
    }

    /// Runs the tests (and CODER's own) and judges them against the anchors.
    async fn verdict(&self, head: &WorkflowVersion) -> anyhow::Result<Verdict> {
        let tests = strings(&head.episode["tests"]);
        let mut results = self.run_tests(head, &tests, self.junit(head).as_deref()).await?;
        // CODER's own tests run with the project's pytest, when it has one.
        let ai_files: Vec<String> = head.state["test_results"]["ai_tests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["file"].as_str().map(str::to_owned))
            .collect();
        let runner = tests.iter().find(|t| is_plain_pytest(t)).map(|t| pytest_program(t));
        let mut ai = Vec::new();
        if let Some(runner) = &runner {
            for file in &ai_files {
                let command = format!("{runner} -q '{}'", file.replace('\'', ""));
                for r in self.run_tests(head, &[command], None).await? {
                    ai.push((file.clone(), r));
                }
            }
        }
        let ai_json: Vec<Value> = if runner.is_some() {
            ai.iter()
                .map(|(f, r)| {
                    let mut v = r.json();
                    v["file"] = json!(f);
                    v
                })
                .collect()
        } else {
            ai_files
                .iter()
                .map(|f| json!({"file": f, "status": "not run", "why": "no pytest among the --test commands"}))
                .collect()
        };
        results.extend(ai.into_iter().map(|(_, r)| r));
        let anchors = strings(&head.state["test_results"]["anchor_tests"]);
        let failing: Vec<&TestRun> = results.iter().filter(|r| r.failed()).collect();
        let passing: Vec<String> = results.iter().filter(|r| r.passed).map(|r| r.name.clone()).collect();
        // Anchors are immutable: one that fails, is skipped or is gone (a
        // deleted test) is broken.
        let broken: Vec<String> = anchors.iter().filter(|a| !passing.contains(a)).cloned().collect();
        self.note(&format!(
            "    {} of {} test(s) pass; {} anchor(s){}",
            results.len() - failing.len(),
            results.len(),
            anchors.len(),
            if broken.is_empty() { String::new() } else { format!(", {} broken", broken.len()) }
        ));
        Ok(Verdict {
            public: results.iter().filter(|r| tests.contains(&r.command)).map(TestRun::json).collect(),
            failed: failing
                .iter()
                .map(|r| json!({"test": r.name, "command": r.command, "exit_code": r.exit, "message": r.message, "tail": r.tail}))
                .collect(),
            passing,
            broken,
            ai: ai_json,
            reverting: Value::Null,
        })
    }

    async fn reflector(&self, head: &WorkflowVersion) -> anyhow::Result<()> {
        let (s, e) = (&head.state, &head.episode);
        let input = json!({
            "task": s["user_query"],
            "plan": s["current_plan"],
            "changes": s["file_context"],
            "reverted": e["reverted"].as_bool().unwrap_or(false),
            "failing": e["failing"],
            "critiques": s["critiques"],
        });
        let mut input = input;
        if let Some(h) = e["hint"].as_str() {
            input["hint"] = json!(h);
        }
        let data = self.module("workflow-reflector", input).await?;
        let route = data["route"].as_str().unwrap_or("CODER").to_owned();
        self.note(&format!("    {} → {route}", data["critique"].as_str().unwrap_or_default()));
        let attempt = e["attempt"].as_u64().unwrap_or(0);
        self.step("REFLECTOR", |s, _| {
            noesis_workflow::append(
                s,
                "critiques",
                json!({"attempt": attempt, "critique": data["critique"], "lesson": data["lesson"], "route": route}),
            )?;
            noesis_workflow::transition(s, &route, &now()).map(|_| ())
        })
        .await??;
        Ok(())
    }
}

fn now() -> String {
    noesis_frames::Timestamp::now().to_string()
}

/// CODER's `write_file` and `edit_file`, refusing paths the snapshot leaves
/// out (git-ignored ones, `.git`): a change there could not be restored if
/// it broke an anchor. Commands CODER may run (the tests, `[agent]
/// allow_commands`) can still write there — caches and build output, which
/// the tests make again.
fn tracked_only(tools: Toolbox) -> Toolbox {
    let workspace = tools.workspace().clone();
    let permissions = tools.permissions().clone();
    let mut tools = tools;
    for decl in noesis_agent::builtin::file_tools() {
        if decl.name != "write_file" && decl.name != "edit_file" {
            continue;
        }
        let (ws, name, rules) = (workspace.clone(), decl.name.clone(), permissions.clone());
        let run: noesis_agent::ToolFn = Arc::new(move |args: Value| {
            let (ws, name, rules) = (ws.clone(), name.clone(), rules.clone());
            Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    let path = args["path"].as_str().unwrap_or_default();
                    // A path the workspace refuses gets the tool's own message.
                    if let Ok(real) = ws.confine(path) {
                        // The rules by the real path, as the built-in checks them.
                        if let Err(why) = rules.check_path(&name, &ws.shown(&real)) {
                            return noesis_agent::ToolOutput::error(why);
                        }
                        if snapshot::outside(ws.root(), &ws.shown(&real)) {
                            return noesis_agent::ToolOutput::error(format!(
                                "`{path}` is git-ignored (or under .git): it is outside the snapshot solve restores when a change breaks a test, so it may not be changed here; change tracked files only"
                            ));
                        }
                    }
                    noesis_agent::builtin::run_file_tool(&ws, &name, &args)
                        .unwrap_or_else(|| noesis_agent::ToolOutput::error(format!("no tool `{name}`")))
                })
                .await
                .unwrap_or_else(|e| noesis_agent::ToolOutput::error(format!("the tool failed: {e}")))
            })
        });
        tools = tools.with_tool(decl, run);
    }
    tools
}

fn load_manifest(path: Option<&str>) -> anyhow::Result<Snapshot> {
    let path = path.context("the episode has no snapshot on record")?;
    let bytes = std::fs::read(path).with_context(|| format!("the snapshot manifest {path}"))?;
    serde_json::from_slice(&bytes).with_context(|| format!("the snapshot manifest {path}"))
}

impl Solver<'_> {
    /// CODER's rules: the operator's, the test commands admitted as
    /// `--allow-command` does, and what judges CODER protected.
    fn coder_permissions(
        &self,
        head: &WorkflowVersion,
        tests: &[String],
        snap: &Snapshot,
    ) -> anyhow::Result<Permissions> {
        let mut permissions = self.permissions.clone();
        let mut layer = noesis_agent::Layer::granting("tests");
        for t in tests {
            // A test line the tool could not split is no command it runs.
            let _ = layer.add_command(t, "--test");
        }
        permissions.push(layer);
        let own: Vec<String> = head.state["test_results"]["ai_tests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["file"].as_str().map(str::to_owned))
            .collect();
        for path in judged_files(snap, tests, &strings(&head.state["test_results"]["anchor_tests"]), &own) {
            permissions.protect(&path)?;
        }
        Ok(permissions)
    }
}

/// What judges CODER, which it may not change: the files and folders the
/// test commands name, the anchors' files, and the tree's test files by
/// name (`tests/`, `test_*`, `*_test.*`, `*.test.*`, `*.spec.*`,
/// `conftest.py`) — not CODER's own earlier tests unless they became
/// anchors. Only what exists: CODER may add tests of its own.
fn judged_files(snap: &Snapshot, tests: &[String], anchors: &[String], own: &[String]) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    for word in tests.iter().flat_map(|t| t.split_whitespace()) {
        let word = word.trim_matches(['\'', '"', ';']);
        // A report the command writes judges nothing; it must stay writable.
        if word.starts_with("--junitxml") || word.starts_with("--junit-xml") {
            continue;
        }
        let word = word.rsplit_once('=').map_or(word, |(_, v)| v);
        let path = word.split("::").next().unwrap_or(word).trim_start_matches("./").trim_end_matches('/');
        let exists = snap.entries.contains_key(path) || snap.dirs.contains(path);
        if exists && !path.is_empty() && path != "." && !path.starts_with('-') {
            out.insert(path.to_owned());
        }
    }
    for anchor in anchors {
        // `tests/test_x.py::name`, or JUnit's dotted `tests.test_x.Case::name`.
        let Some((module, _)) = anchor.split_once("::") else { continue };
        if snap.entries.contains_key(module) {
            out.insert(module.to_owned());
            continue;
        }
        let mut parts: Vec<&str> = module.split('.').collect();
        while !parts.is_empty() {
            let file = format!("{}.py", parts.join("/"));
            if snap.entries.contains_key(&file) {
                out.insert(file);
                break;
            }
            parts.pop();
        }
    }
    for path in snap.entries.keys() {
        let name = path.rsplit('/').next().unwrap_or(path);
        let by_name =
            is_test_file(path) || name == "conftest.py" || name.contains(".spec.") || path.contains("/tests/");
        if by_name && !own.contains(path) {
            out.insert(path.clone());
        }
    }
    out.into_iter().collect()
}

/// The paths CODER's calls were refused for as protected (at proposal, or
/// by the toolbox through a symlink).
fn protected_refusals(run: &AgentRun) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in &run.calls {
        let Some(text) = c.result.as_deref().filter(|_| c.is_error) else { continue };
        let Some(start) = text.find("refused: `").map(|i| i + "refused: `".len()) else { continue };
        let Some(len) = text[start..].find("` is a protected path") else { continue };
        let path = text[start..start + len].to_owned();
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

fn is_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("test_") || name.contains("_test.") || name.contains(".test.") || path.starts_with("tests/")
}

/// CODER's task: the goal, the plan, what fails, what was said before.
fn coder_task(state: &Value, tests: &[String]) -> String {
    let mut t = format!("{}\n\n", state["user_query"].as_str().unwrap_or_default());
    if let Some(sol) = state["selected_solution"].as_str().filter(|s| !s.is_empty()) {
        t.push_str(&format!("Approach: {sol}\n\n"));
    }
    let plan = strings(&state["current_plan"]);
    if !plan.is_empty() {
        t.push_str("Plan:\n");
        for (i, p) in plan.iter().enumerate() {
            t.push_str(&format!("{}. {p}\n", i + 1));
        }
        t.push('\n');
    }
    for c in state["critiques"].as_array().into_iter().flatten() {
        t.push_str(&format!("An earlier attempt failed: {}\n", c["critique"].as_str().unwrap_or_default()));
    }
    t.push_str(&format!(
        "\nChange the files in the workspace so that these commands pass: {}. Tests that pass now must keep passing.",
        tests.join("; ")
    ));
    t
}

/// What a person needs after an escalation: the goal, what was tried, each
/// critique, the failing tests.
fn escalation_report(state: &Value, episode: &Value) -> String {
    let mut r = format!("escalated: {}\n", state["user_query"].as_str().unwrap_or_default());
    r.push_str(&format!("goal: {}\n", state["problem_reflection"]["goal"].as_str().unwrap_or_default()));
    r.push_str(&format!("tried: {}\n", state["selected_solution"].as_str().unwrap_or_default()));
    for c in state["critiques"].as_array().into_iter().flatten() {
        r.push_str(&format!("critique (attempt {}): {}\n", c["attempt"], c["critique"].as_str().unwrap_or_default()));
    }
    for f in episode["failing"].as_array().into_iter().flatten() {
        r.push_str(&format!(
            "failing: {} (`{}` exit {})\n",
            f["test"].as_str().unwrap_or_default(),
            f["command"].as_str().unwrap_or_default(),
            f["exit_code"]
        ));
    }
    r.push_str("continue with: noesis solve --resume [--hint \"…\"]\n");
    r
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let config = crate::config::load(&env, &cwd)?.config;
    let rt = crate::memory::runtime()?;
    rt.block_on(async {
        let (project, store) = crate::memory::context().await?;
        let store: Arc<dyn Store> = Arc::from(store);
        let mirror = super::state::mirror_path(false, &config, &env);
        let states = States { store: store.as_ref(), project_id: &project.project_id, mirror: mirror.as_deref() };
        let head = states.head().await?;
        // An episode of solve's that is not archived yet (one stopped at
        // CONSOLIDATOR before its memory was written still needs that).
        let in_progress = head.as_ref().filter(|h| h.episode.get("tests").is_some() && h.episode["archived"] != json!(true));
        // A resumed episode keeps the confinement it was started with.
        let sandbox: noesis_sandbox::Settings =
            match in_progress.filter(|_| a.resume).and_then(|h| h.episode.get("sandbox").cloned()) {
                Some(v) => serde_json::from_value(v).context("the episode's recorded sandbox settings")?,
                None => a.sandbox.settings(&config),
            };
        crate::cmd::sandbox::warn_if_off(&sandbox, a.quiet);
        // A restored file keeps its size and mtime, so bytecode Python
        // cached from the version that was reverted would look current:
        // test runs of an episode write none.
        let mut sandbox = sandbox;
        sandbox.set_env.insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
        let recorded_sandbox = serde_json::to_value(&sandbox)?;
        let workspace = if a.resume {
            let Some(h) = in_progress else { bail!("no unfinished episode to resume in this project") };
            PathBuf::from(h.episode["workspace"].as_str().unwrap_or_default())
        } else {
            if let Some(h) = in_progress {
                bail!(
                    "episode {} is unfinished (at {}, {}); continue it with `noesis solve --resume` or start over with `noesis state reset`",
                    h.episode_id,
                    h.node,
                    h.status
                );
            }
            let task = a.task.clone().unwrap_or_default();
            if task.trim().is_empty() {
                bail!("the task is empty; say what to do: noesis solve \"TASK\" --test \"CMD\"");
            }
            if a.tests.is_empty() {
                bail!("no --test given: solve verifies every change with the project's tests (--test \"CMD\", repeatable)");
            }
            let root = a.workspace.clone().unwrap_or(cwd.clone());
            let root = root.canonicalize().with_context(|| format!("--workspace {}: not a folder", root.display()))?;
            let crate::cmd::state::Reply::Ok(_) = states.init(super::state::project_hash(&project.root), "solve").await? else {
                bail!("could not start an episode");
            };
            let tests = a.tests.clone();
            let junit = a.junit.as_ref().map(|p| p.to_string_lossy().into_owned());
            let max = a.max_retries;
            let ws = root.to_string_lossy().into_owned();
            let v = states
                .try_step("solve", |s, e| {
                    noesis_workflow::set(s, "user_query", json!(task))?;
                    if let Some(m) = max {
                        noesis_workflow::set(s, "max_retries", json!(m))?;
                    }
                    *e = json!({"task": task, "tests": tests, "workspace": ws, "attempt": 0, "junit": junit,
                                "coder_run": null, "snapshot": null, "baseline": null,
                                "sandbox": recorded_sandbox});
                    Ok(Value::Null)
                })
                .await?
                .map_err(|e| anyhow::anyhow!("{}", e.map_or_else(|| "no state".to_owned(), |e| e.to_string())))?;
            if !a.quiet {
                out::note(&format!("episode {} in {}", v.0.episode_id, root.display()));
            }
            root
        };
        let commands: Vec<(&str, &str)> =
            config.agent.allow_commands.iter().map(|c| (c.as_str(), "[agent] allow_commands")).collect();
        let ws = Workspace::new(&workspace).with_context(|| format!("the workspace {}", workspace.display()))?;
        let permissions = super::agent::rules::operator(&config, &a.rules, &commands, &ws)?;
        let noesis_home = crate::memory::home()?;
        let blobs = noesis_home.join("snapshots").join(super::state::project_hash(&project.root)).join("blobs");
        let provider = crate::cmd::agent::with_text_tools(crate::provider::select(&a.provider, &config, None)?, &config);
        let solver = Solver {
            search,
            store: Arc::clone(&store),
            project_id: project.project_id.clone(),
            project_root: project.root.clone(),
            provider,
            prices: crate::provider::prices(&config),
            states,
            workspace,
            blobs,
            test_timeout: Duration::from_secs(a.test_timeout),
            quiet: a.quiet,
            permissions,
            sandbox,
            redactor: config.redactor(),
        };
        if a.resume {
            let hint = a.hint.clone();
            solver
                .step("solve --resume", |s, e| {
                    if e["escalated"] == json!(true) {
                        // A person looked: one more attempt than was spent.
                        let spent = s["retry_count"].as_u64().unwrap_or(0);
                        noesis_workflow::set(s, "max_retries", json!(spent + 1))?;
                        e["escalated"] = json!(false);
                    }
                    if let Some(h) = &hint {
                        e["hint"] = json!(h);
                        noesis_workflow::append(s, "thought_trace", json!({"type": "hint", "content": h}))?;
                    }
                    Ok(())
                })
                .await??;
        }
        solver.drive(a.json).await
    })
}

impl Solver<'_> {
    async fn drive(&self, as_json: bool) -> anyhow::Result<ExitCode> {
        loop {
            let head = self.states.head().await?.context("the workflow state is gone")?;
            let node = noesis_workflow::current(&head.state)?;
            // The heading only where the node has work to do: not before the
            // baseline (it has its own), nor for an episode that only ends.
            let ends = match node {
                Node::Planner => head.episode["baseline"].is_null(),
                Node::Verifier => head.episode["escalated"] == json!(true),
                Node::Consolidator => head.episode["archived"] == json!(true),
                _ => false,
            };
            if !ends {
                self.note(&format!(
                    "==> {node} (retry {} of {})",
                    head.state["retry_count"], head.state["max_retries"]
                ));
            }
            match node {
                Node::Planner => {
                    if head.episode["baseline"].is_null() {
                        self.baseline(&head).await?;
                        continue;
                    }
                    self.planner(&head).await?;
                }
                Node::Reasoner => self.reasoner(&head).await?,
                Node::Coder => self.coder(&head).await?,
                Node::Verifier => {
                    if head.episode["escalated"] == json!(true) {
                        return self.finish(&head, as_json, "escalated", ExitCode::from(EXIT_ESCALATED));
                    }
                    if let Some(code) = self.verifier(&head).await? {
                        let head = self.states.head().await?.context("the workflow state is gone")?;
                        self.frames_or_warn(&head, "escalated").await;
                        return self.finish(&head, as_json, "escalated", code);
                    }
                }
                Node::Reflector => self.reflector(&head).await?,
                Node::Consolidator => {
                    if head.episode["archived"] != json!(true) {
                        self.consolidate(&head).await?;
                        let head = self.states.head().await?.context("the workflow state is gone")?;
                        self.frames_or_warn(&head, "solved").await;
                        continue;
                    }
                    return self.finish(&head, as_json, "solved", ExitCode::SUCCESS);
                }
            }
        }
    }

    /// The files of the episode with their roles, project-relative: what
    /// CODER's runs read (hash as read), and what the episode changed
    /// (hash now).
    async fn episode_files(
        &self,
        state: &Value,
    ) -> anyhow::Result<std::collections::BTreeMap<String, noesis_frames::FileEntry>> {
        use noesis_frames::{FileEntry, FileRole};
        let name = |rel: &str| noesis_frames::project::name_for(&self.project_root, &self.workspace, Path::new(rel));
        let mut files = std::collections::BTreeMap::new();
        let runs: Vec<String> = state["thought_trace"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "coder")
            .filter_map(|e| e["run"].as_str().map(str::to_owned))
            .collect();
        for id in runs {
            let Some(stored) = self.store.agent_state(&id, None).await? else { continue };
            let Ok(run) = AgentRun::from_json(&stored.state) else { continue };
            for c in run.calls.iter().filter(|c| c.tool == "read_file") {
                for e in &c.evidence {
                    if let noesis_agent::ToolEvidence::File { path, blake3 } = e {
                        files.insert(name(path), FileEntry { hash: blake3.clone(), role: FileRole::Read });
                    }
                }
            }
        }
        for (rel, role) in state["file_context"].as_object().into_iter().flatten() {
            let role = match role.as_str() {
                Some("created") => FileRole::Created,
                Some("modified") => FileRole::Modified,
                // Deleted: no file, no hash to keep.
                _ => continue,
            };
            if let Ok(bytes) = std::fs::read(self.workspace.join(rel)) {
                files.insert(name(rel), FileEntry { hash: noesis_frames::scan::hash_bytes(&bytes), role });
            }
        }
        Ok(files)
    }

    /// Frames are the episode's explanation, not its result: a failure to
    /// write them is a warning.
    async fn frames_or_warn(&self, head: &WorkflowVersion, outcome: &str) {
        if let Err(e) = self.record_frames(head, outcome).await {
            out::note(&format!("warning: the episode was not recorded as frames: {e:#}"));
        }
    }

    /// CONSOLIDATOR: the episode into episodic memory, the lessons of the
    /// critiques that led to this success into procedural memory.
    async fn consolidate(&self, head: &WorkflowVersion) -> anyhow::Result<()> {
        let s = &head.state;
        let task = s["user_query"].as_str().unwrap_or_default();
        let critiques: Vec<&Value> = s["critiques"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
        let files: Vec<String> = s["file_context"].as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
        let mut text = format!(
            "{task}\n{}\n{}\n",
            s["problem_reflection"]["goal"].as_str().unwrap_or_default(),
            s["selected_solution"].as_str().unwrap_or_default()
        );
        for c in &critiques {
            text.push_str(&format!("{}\n", c["critique"].as_str().unwrap_or_default()));
        }
        text.push_str(&files.join(" "));
        let at = noesis_frames::Timestamp::now().millis();
        let record = json!({
            "task": task, "outcome": "solved", "problem_reflection": s["problem_reflection"],
            "selected_solution": s["selected_solution"], "plan": s["current_plan"], "critiques": s["critiques"],
            "tests": s["test_results"], "files": s["file_context"], "retries": s["retry_count"],
        });
        let mut entries = vec![noesis_store::NewMemory {
            project_id: self.project_id.clone(),
            episode_id: head.episode_id.clone(),
            kind: "episode".into(),
            text,
            record,
            at,
        }];
        for c in &critiques {
            if let Some(lesson) = c["lesson"].as_str().filter(|l| !l.trim().is_empty()) {
                entries.push(noesis_store::NewMemory {
                    project_id: self.project_id.clone(),
                    episode_id: head.episode_id.clone(),
                    kind: "lesson".into(),
                    text: lesson.to_owned(),
                    record: json!({"lesson": lesson, "critique": c["critique"], "task": task}),
                    at,
                });
            }
        }
        self.store.replace_memory(&head.episode_id, &entries).await?;
        self.note(&format!("==> CONSOLIDATOR: episode and {} lesson(s) kept", entries.len() - 1));
        self.step("CONSOLIDATOR (archived)", |_, e| {
            e["archived"] = json!(true);
            Ok(())
        })
        .await??;
        Ok(())
    }

    /// VERIFIER's first run, before anything changes: what passes now is an anchor.
    async fn baseline(&self, head: &WorkflowVersion) -> anyhow::Result<()> {
        self.note("==> VERIFIER (baseline, before any change)");
        let tests = strings(&head.episode["tests"]);
        let results = self.run_tests(head, &tests, self.junit(head).as_deref()).await?;
        let passing: Vec<String> = results.iter().filter(|r| r.passed).map(|r| r.name.clone()).collect();
        self.note(&format!("    {} of {} test(s) pass; they are the anchors", passing.len(), results.len()));
        let public: Vec<Value> = results.iter().map(TestRun::json).collect();
        let baseline: serde_json::Map<String, Value> =
            results.iter().map(|r| (r.command.clone(), json!(r.passed))).collect();
        self.step("VERIFIER (baseline)", |s, e| {
            noesis_workflow::set(s, "test_results.public_tests", json!(public))?;
            noesis_workflow::set(s, "test_results.anchor_tests", json!(passing))?;
            e["baseline"] = Value::Object(baseline.clone());
            Ok(())
        })
        .await??;
        Ok(())
    }

    /// The episode as causal frames: a root (the task, its outcome, the
    /// files changed as evidence) and a child per node run since the last
    /// record — VERIFIER's with each test run as evidence, and a CODER
    /// change that was reverted invalidated with the reason.
    async fn record_frames(&self, head: &WorkflowVersion, outcome: &str) -> anyhow::Result<()> {
        use noesis_frames::{Draft, Evidence, Invalidation, Status, Timestamp};
        let upto = head.episode["frames_upto"].as_i64().unwrap_or(0);
        // The episode's own session (of kind `episode`): one per record.
        let session_id = format!("solve-{}-{}", head.episode_id, head.version);
        let history = self.store.workflow_history(&self.project_id).await?;
        let visits: Vec<&WorkflowVersion> =
            history.iter().filter(|v| v.episode_id == head.episode_id && v.version > upto).collect();
        let now = Timestamp::now();
        let s = &head.state;
        let mut evidence = Vec::new();
        for (rel, _) in s["file_context"].as_object().into_iter().flatten() {
            if let Ok(bytes) = std::fs::read(self.workspace.join(rel)) {
                let path = noesis_frames::project::name_for(&self.project_root, &self.workspace, Path::new(rel));
                evidence.push(Evidence::File { path, hash: noesis_frames::scan::hash_bytes(&bytes) });
            }
        }
        let root = Draft {
            context_slice: json!({"episode_id": head.episode_id, "outcome": outcome, "retries": s["retry_count"],
                                  "versions": [upto + 1, head.version]})
            .to_string(),
            evidence,
            conclusion: format!("{outcome}: {}", s["selected_solution"].as_str().unwrap_or_default()),
            confidence: if outcome == "solved" { 1.0 } else { 0.0 },
            status: Some(Status::Completed),
            ..Draft::new(format!("solve: {}", s["user_query"].as_str().unwrap_or_default()))
        }
        .into_frame(&self.project_id, Some(&session_id), None, now)?;
        let mut frames = Vec::new();
        let mut reverted = Vec::new();
        let mut last_coder: Option<noesis_frames::FrameId> = None;
        for v in visits {
            let st = &v.state;
            let node = v.command.as_str();
            let (conclusion, evidence, slice) = match node {
                "PLANNER" => (st["selected_solution"].as_str().unwrap_or_default().to_owned(), Vec::new(), json!({})),
                "REASONER" => (strings(&st["current_plan"]).join("; "), Vec::new(), json!({})),
                "CODER" => {
                    let files: Vec<String> =
                        st["file_context"].as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
                    let run =
                        st["thought_trace"].as_array().and_then(|t| t.iter().rev().find(|e| e["type"] == "coder"));
                    (
                        format!("changed {}", files.join(", ")),
                        Vec::new(),
                        json!({"agent_run": run.map(|r| r["run"].clone())}),
                    )
                }
                "VERIFIER" | "VERIFIER (baseline)" => {
                    let tests = st["test_results"]["public_tests"].as_array().cloned().unwrap_or_default();
                    let passed = tests.iter().filter(|t| t["status"] == "passed").count();
                    let evidence = tests
                        .iter()
                        .map(|t| Evidence::Observation {
                            tool: "test".into(),
                            content: format!(
                                "{}: {} (`{}` exit {}, output blake3:{})",
                                t["name"].as_str().unwrap_or_default(),
                                t["status"].as_str().unwrap_or_default(),
                                t["command"].as_str().unwrap_or_default(),
                                t["exit_code"],
                                t["output_blake3"].as_str().unwrap_or_default().get(..16).unwrap_or_default()
                            ),
                        })
                        .collect();
                    (format!("{passed} of {} test(s) pass", tests.len()), evidence, json!({"tests": tests}))
                }
                "REFLECTOR" => {
                    let last = st["critiques"].as_array().and_then(|c| c.last()).cloned().unwrap_or(Value::Null);
                    (
                        last["critique"].as_str().unwrap_or_default().to_owned(),
                        Vec::new(),
                        json!({"route": last["route"]}),
                    )
                }
                _ => continue,
            };
            let frame = Draft {
                context_slice: json!({"episode_id": v.episode_id, "version": v.version, "node": node, "detail": slice})
                    .to_string(),
                evidence,
                conclusion,
                confidence: 1.0,
                status: Some(Status::Completed),
                ..Draft::new(node.to_owned())
            }
            .into_frame(&self.project_id, Some(&session_id), Some(&root), now)?;
            if node == "CODER" {
                last_coder = Some(frame.frame_id.clone());
            }
            // This VERIFIER found a regression (its error log grew by one) and
            // restored the tree: the CODER run before it is no longer true.
            let logged = |state: &Value| state["error_log"].as_array().map_or(0, Vec::len);
            let before = history.iter().find(|h| h.version == v.version - 1).map_or(0, |h| logged(&h.state));
            if node == "VERIFIER"
                && logged(st) > before
                && st["error_log"].as_array().and_then(|l| l.last()).is_some_and(|e| e["type"] == "anchor_regression")
                && let Some(id) = last_coder.take()
            {
                reverted.push(Invalidation { frame_id: id, reason: "anchor regression".into() });
            }
            frames.push(frame);
        }
        let session = noesis_frames::SessionArtifacts {
            session_id: session_id.clone(),
            project_id: self.project_id.clone(),
            initial_prompt: s["user_query"].as_str().map(str::to_owned),
            files: self.episode_files(s).await?,
            scope: vec![noesis_frames::project::name_for(&self.project_root, &self.workspace, &self.workspace)],
            root_frame_id: Some(root.frame_id.clone()),
            conversation_log: None,
            created_at: now,
        };
        self.store
            .record_session(&noesis_store::NewSession {
                kind: noesis_store::SessionKind::Episode,
                artifacts: &session,
                frames: std::slice::from_ref(&root),
                source_hash: None,
            })
            .await?;
        self.store.insert_frames(&frames).await?;
        if !reverted.is_empty() {
            self.store.invalidate(&reverted, None, now).await?;
        }
        let version = head.version;
        self.step("frames", |_, e| {
            e["frames_upto"] = json!(version);
            Ok(())
        })
        .await??;
        Ok(())
    }

    fn finish(&self, head: &WorkflowVersion, as_json: bool, outcome: &str, code: ExitCode) -> anyhow::Result<ExitCode> {
        if as_json {
            out::json(
                &json!({"outcome": outcome, "episode_id": head.episode_id, "version": head.version,
                               "state": head.state}),
                true,
            )?;
        } else if outcome == "escalated" {
            out::data(&escalation_report(&head.state, &head.episode))?;
        } else {
            let anchors = strings(&head.state["test_results"]["anchor_tests"]);
            out::data(&format!(
                "solved: {} ({} test(s) pass; anchors: {}; {} retr{})",
                head.state["user_query"].as_str().unwrap_or_default(),
                head.state["test_results"]["public_tests"].as_array().map_or(0, Vec::len),
                anchors.join(", "),
                head.state["retry_count"],
                if head.state["retry_count"] == json!(1) { "y" } else { "ies" }
            ))?;
        }
        Ok(code)
    }
}
