//! Starting, resuming and forking runs, and driving them: the model through
//! the chosen provider, the tools over the workspace, every change stored
//! before the next step, live steps on stderr, approvals asked in a
//! terminal (or the run paused for `approve`/`deny`).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use noesis_agent::events::Event;
use noesis_agent::summary::{event_line, outcome_json, short_args};
use noesis_agent::{AgentRun, ApprovalPolicy, Decision, Outcome, Pending, Verdict};
use noesis_host::drive::{Drive, Front};
use noesis_host::host::recorded_sandbox;
use noesis_host::launch::{Launch, approval, continued_flags};
use noesis_host::runs::state_of;
use noesis_host::{Equipped, Host, Reach};
use noesis_modules::search::SearchPath;
use noesis_runtime::CancellationToken;
use serde_json::Value;

use super::{DriveArgs, StartArgs, exit_code, status};
use crate::config::Config;
use crate::out;
use crate::provider::{Providers, select, with_text_tools};

/// Everything a drive needs besides the run.
struct Ctx {
    host: Host,
    project_id: String,
    equipped: Equipped,
    json: bool,
    quiet: bool,
    /// Stream the model's text to stderr as it is written.
    stream: bool,
    tool_timeout: std::time::Duration,
    /// The stored step a resumed run was read at.
    from_step: Option<i64>,
}

/// Whether a drive streams: asked for, or by default on a terminal that
/// shows live steps.
fn streams(d: &DriveArgs) -> bool {
    !d.quiet && (d.stream || (!d.no_stream && std::io::stderr().is_terminal()))
}

fn load_config() -> anyhow::Result<Config> {
    Ok(crate::config::load(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()), &std::env::current_dir()?)?.config)
}

/// What a run started by another command (solve's CODER, ask) reports on
/// stderr as it goes, indented under that command's own lines.
pub(crate) fn progress_notes(
    quiet: bool,
    run_id: &str,
    indent: &'static str,
) -> impl Fn(&noesis_agent::Progress) + use<> {
    let id = run_id.to_owned();
    move |p: &noesis_agent::Progress| {
        if !quiet {
            let e = noesis_agent::events::progress_event("agents.runs", &id, p);
            out::note(&format!("{indent}{} {}", e.kind, e.data));
        }
    }
}

/// The command line's agent host: runs go on wherever they recorded, in
/// the store in force, remarks on stderr unless `quiet`.
fn host(
    rt: &tokio::runtime::Runtime,
    search: &SearchPath,
    providers: Arc<Providers>,
    quiet: bool,
) -> anyhow::Result<Host> {
    let (project, store) = rt.block_on(crate::memory::context())?;
    let note: Option<noesis_host::host::Note> = if quiet { None } else { Some(Arc::new(|m: &str| out::note(m))) };
    Ok(Host {
        search: search.clone(),
        store: Arc::from(store),
        project,
        providers,
        reach: Reach::Anywhere,
        note,
        home: crate::memory::home().ok(),
    })
}

pub(super) fn start(search: &SearchPath, a: StartArgs) -> anyhow::Result<ExitCode> {
    let config = load_config()?;
    let workspace = match &a.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("no current directory")?,
    };
    let launch = Launch {
        task: a.task.clone().unwrap_or_default(),
        workspace,
        strategy: a.strategy.clone(),
        max_iterations: a.max_iterations,
        max_tool_calls: a.max_tool_calls,
        max_seconds: a.max_seconds,
        reflect: a.reflect,
        tools: a.tools.clone(),
        no_tools: a.no_tools.clone(),
        allow_commands: a.allow_commands.clone(),
        rules: a.rules.clone(),
        session: a.session.clone(),
        system: a.system.clone(),
        mcp: a.mcp.clone(),
        run_id: a.run_id.clone(),
        approve: a.drive.approve.clone(),
        output_schema: a.output_schema.clone(),
    };
    let prepared = launch.prepare(&config, &a.drive.provider)?;
    let sandbox = a.sandbox.settings(&config);
    crate::cmd::sandbox::warn_if_off(&sandbox, a.drive.quiet);
    let rt = crate::memory::runtime()?;
    let provider = with_text_tools(select(&a.drive.provider, &config, None)?, &config);
    if let Some(w) = noesis_host::provider::unpriced_warning(&a.drive.provider, &config, provider.as_ref()) {
        out::note(&w);
    }
    let providers = Arc::new(Providers::new(a.drive.provider.clone(), config));
    let host = host(&rt, search, providers, a.drive.quiet)?;
    let (mut run, equipped) = rt.block_on(prepared.start(&host, provider, sandbox))?;
    if let Some(target) = a.cluster.target() {
        // Stored here, driven by the cluster's workers from the same store.
        crate::cluster::record(&run.id, &target).record(&mut run.host);
        if let Some(mcp) = &equipped.started {
            rt.block_on(mcp.shutdown());
        }
        let project_id = host.project.project_id.clone();
        rt.block_on(host.store.save_agent_state(&state_of(&run, &project_id)))?;
        return crate::cluster::submit(&rt, host.store.as_ref(), &run, &target, a.drive.json, a.drive.quiet);
    }
    let ctx = Ctx {
        project_id: host.project.project_id.clone(),
        host,
        equipped,
        json: a.drive.json,
        quiet: a.drive.quiet,
        stream: streams(&a.drive),
        tool_timeout: std::time::Duration::from_secs(a.drive.tool_timeout),
        from_step: None,
    };
    if !ctx.quiet {
        out::note(&format!("run {} ({})", run.id, run.host["provider"].as_str().unwrap_or_default()));
    }
    drive_to_end(&rt, &ctx, run)
}

/// The drive of a stored run: its own recorded host (workspace, rules,
/// sandbox, MCP servers), with the flags' provider or its own.
fn continued(search: &SearchPath, run: &AgentRun, d: &DriveArgs, rt: &tokio::runtime::Runtime) -> anyhow::Result<Ctx> {
    let config = load_config()?;
    let flags = continued_flags(run, &d.provider, &crate::provider::env);
    let provider = with_text_tools(select(&flags, &config, None)?, &config);
    let providers = Arc::new(Providers::new(d.provider.clone(), config));
    let host = host(rt, search, providers, d.quiet)?;
    // The run goes on under the confinement it was started with, wherever
    // it is resumed.
    crate::cmd::sandbox::warn_if_off(&recorded_sandbox(&run.host)?, d.quiet);
    let equipped = rt.block_on(host.equip(run, provider))?;
    let project_id = run.host["project_id"].as_str().map_or_else(|| host.project.project_id.clone(), str::to_owned);
    Ok(Ctx {
        host,
        project_id,
        equipped,
        json: d.json,
        quiet: d.quiet,
        stream: streams(d),
        tool_timeout: std::time::Duration::from_secs(d.tool_timeout),
        from_step: None,
    })
}

pub(super) fn resume(search: &SearchPath, id: &str, d: DriveArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (mut run, stored) = super::manage::load_run(&rt, id, None)?;
    if matches!(run.outcome, Some(Outcome::Answer { .. } | Outcome::Aborted { .. })) {
        bail!("run {} is {}; there is nothing to resume (fork it to go on from a step)", run.id, status(&run));
    }
    let mut ctx = continued(search, &run, &d, &rt)?;
    ctx.from_step = Some(stored.step);
    run.resume();
    if let Some(p) = &d.approve {
        run.config.approval = approval(Some(p), &Config::default());
    }
    drive_to_end(&rt, &ctx, run)
}

pub(super) fn fork(
    search: &SearchPath,
    id: &str,
    at: i64,
    no_run: bool,
    keep_files: bool,
    d: DriveArgs,
) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (run, stored) = super::manage::load_run(&rt, id, Some(at))?;
    let original = run.id.clone();
    if !keep_files {
        let undone = super::manage::restore_files(&run, u64::try_from(stored.step).unwrap_or(0))?;
        if !d.quiet {
            out::note(&undone);
        }
    }
    let mut run = noesis_host::launch::fork(run, stored.step);
    let ctx = continued(search, &run, &d, &rt)?;
    if let Some(p) = &d.approve {
        run.config.approval = approval(Some(p), &Config::default());
    }
    if !ctx.quiet {
        out::note(&format!("run {} forked from {original} at step {}", run.id, stored.step));
    }
    if no_run {
        rt.block_on(ctx.host.store.save_agent_state(&state_of(&run, &ctx.project_id)))?;
        if ctx.json {
            out::json(&outcome_json(&run), false)?;
        } else {
            out::data(&run.id)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    drive_to_end(&rt, &ctx, run)
}

fn drive_to_end(rt: &tokio::runtime::Runtime, ctx: &Ctx, mut run: AgentRun) -> anyhow::Result<ExitCode> {
    // Under `auto` an `ask` rule may still make a call wait: a terminal asks.
    let interactive = run.config.approval != ApprovalPolicy::Never
        && std::io::stdin().is_terminal()
        && std::io::stderr().is_terminal();
    let cancel = CancellationToken::new();
    let terminal = Terminal {
        quiet: ctx.quiet,
        mid_line: std::sync::atomic::AtomicBool::new(false),
        interactive,
        // A server's question waits for a person only where every call
        // would: under `auto` (and `never`) the run goes on unattended.
        questions: interactive && run.config.approval == ApprovalPolicy::Ask,
        spinner: Spinner::new(!ctx.quiet && std::io::stderr().is_terminal()),
    };
    rt.block_on(async {
        let token = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                out::note("cancelling: the run stops after the current step (Ctrl-C again quits at once)");
                token.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(noesis_agent::summary::EXIT_CANCELLED));
                }
            }
        });
        let drive = Drive {
            host: &ctx.host,
            equipped: &ctx.equipped,
            project_id: ctx.project_id.clone(),
            tool_timeout: ctx.tool_timeout,
            cancel,
            from_step: ctx.from_step,
            holder: "cli",
            lease_ttl: noesis_host::hold::LEASE_TTL,
            stream: ctx.stream,
        };
        let driven = noesis_host::drive::to_end(drive, &mut run, &terminal).await;
        terminal.spinner.stop();
        driven
    })?;
    report(&run, ctx.json)?;
    Ok(exit_code(&run))
}

/// The terminal a run is driven from: steps on stderr (with a spinner
/// while the model or a tool works), approvals asked when it can ask.
struct Terminal {
    quiet: bool,
    /// Streamed text was written and its line is not ended yet.
    mid_line: std::sync::atomic::AtomicBool,
    interactive: bool,
    /// MCP servers' questions are put to the person (else declined).
    questions: bool,
    spinner: Spinner,
}

impl Front for Terminal {
    fn event(&self, e: &Event) {
        if self.quiet {
            return;
        }
        self.spinner.stop();
        if e.kind == "text_delta" {
            out::stream(e.data["text"].as_str().unwrap_or_default());
            self.mid_line.store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        if self.mid_line.swap(false, std::sync::atomic::Ordering::Relaxed) {
            out::note("");
        }
        out::note(&event_line(e));
        match e.kind.as_str() {
            "model_call" => {
                self.spinner.start(format!("thinking (turn {})", e.data["turn"].as_u64().unwrap_or(0) + 1));
            }
            "tool_call" => self.spinner.start(format!("running {}", e.data["tool"].as_str().unwrap_or("?"))),
            _ => {}
        }
    }

    fn decide(&self, pending: &[Pending]) -> Result<Option<Vec<Decision>>, String> {
        if !self.interactive {
            return Ok(None);
        }
        ask_in_terminal(pending).map(Some).map_err(|e| format!("{e:#}"))
    }

    fn warn(&self, message: &str) {
        out::note(message);
    }

    fn elicit(&self, server: &str, question: &noesis_mcp::Elicitation) -> noesis_mcp::Elicited {
        if !self.questions {
            return noesis_mcp::Elicited::Decline;
        }
        self.spinner.stop();
        ask_question(server, question).unwrap_or_else(|e| {
            out::note(&format!("{e:#}; the question is declined"));
            noesis_mcp::Elicited::Decline
        })
    }
}

/// An MCP server's question put to the person at the terminal: whether to
/// answer it, then each field its schema asks for, read as its type says.
fn ask_question(server: &str, question: &noesis_mcp::Elicitation) -> anyhow::Result<noesis_mcp::Elicited> {
    use noesis_mcp::Elicited;
    fn read(line: &mut String) -> anyhow::Result<&str> {
        line.clear();
        if std::io::stdin().read_line(line)? == 0 {
            bail!("stdin closed while an MCP server's question was asked");
        }
        Ok(line.trim())
    }
    out::note(&format!("the MCP server `{server}` asks: {}", question.message));
    let mut line = String::new();
    loop {
        out::note("answer? [y]es / [n]o (decline) / [c]ancel");
        match read(&mut line)? {
            "y" | "yes" => break,
            "n" | "no" => return Ok(Elicited::Decline),
            "c" | "cancel" => return Ok(Elicited::Cancel),
            _ => {}
        }
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
    };
    let required = strings(&question.schema["required"]);
    let mut content = serde_json::Map::new();
    for (name, field) in question.schema["properties"].as_object().into_iter().flatten() {
        let kind = field["type"].as_str().unwrap_or("string");
        let choices = strings(&field["enum"]);
        let must = required.contains(name);
        let mut prompt = format!("{name} ({kind}");
        if !choices.is_empty() {
            prompt.push_str(&format!(": one of {}", choices.join(", ")));
        }
        if !must {
            prompt.push_str("; empty to leave out");
        }
        prompt.push(')');
        if let Some(about) = field["description"].as_str().or(field["title"].as_str()) {
            prompt.push_str(&format!(" {about}"));
        }
        loop {
            out::note(&format!("{prompt}:"));
            let text = read(&mut line)?;
            if text.is_empty() && !must {
                break;
            }
            let value = match kind {
                "boolean" => match text {
                    "y" | "yes" | "true" => Some(Value::Bool(true)),
                    "n" | "no" | "false" => Some(Value::Bool(false)),
                    _ => None,
                },
                "integer" => text.parse::<i64>().ok().map(Value::from),
                "number" => text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number),
                _ => (!text.is_empty() && (choices.is_empty() || choices.iter().any(|c| c == text)))
                    .then(|| Value::String(text.to_owned())),
            };
            match value {
                Some(v) => {
                    content.insert(name.clone(), v);
                    break;
                }
                None => out::note(&format!("not a {kind} this question accepts")),
            }
        }
    }
    Ok(Elicited::Accept(content))
}

/// A one-line spinner on a terminal's stderr while the model or a tool
/// works, erased before the next line is printed.
struct Spinner {
    on: bool,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Spinner {
    fn new(on: bool) -> Spinner {
        Spinner { on, task: std::sync::Mutex::new(None) }
    }

    fn start(&self, what: String) {
        if !self.on {
            return;
        }
        let began = std::time::Instant::now();
        let task = tokio::spawn(async move {
            const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
            for i in 0usize.. {
                tick.tick().await;
                out::stream(&format!(
                    "\r  {} {what} {:.1}s\x1b[K",
                    FRAMES[i % FRAMES.len()],
                    began.elapsed().as_secs_f64()
                ));
            }
        });
        if let Ok(mut slot) = self.task.lock() {
            *slot = Some(task);
        }
    }

    fn stop(&self) {
        let task = self.task.lock().ok().and_then(|mut slot| slot.take());
        if let Some(task) = task {
            task.abort();
            out::stream("\r\x1b[K");
        }
    }
}

/// Asks about each pending call on stderr, reading answers from stdin.
fn ask_in_terminal(pending: &[Pending]) -> anyhow::Result<Vec<Decision>> {
    let mut decisions = Vec::new();
    let mut line = String::new();
    for p in pending {
        let verdict = loop {
            out::note(&format!("approve {} {}? [y]es / [n]o / [e]dit / [a]bort", p.tool, short_args(&p.arguments)));
            line.clear();
            if std::io::stdin().read_line(&mut line)? == 0 {
                bail!("stdin closed while asking for approval; the run is paused (`noesis agent resume`)");
            }
            match line.trim() {
                "y" | "yes" => break Verdict::Approve,
                "a" | "abort" => break Verdict::Abort { message: None },
                "n" | "no" => {
                    out::note("why (for the model; empty for no reason)?");
                    line.clear();
                    std::io::stdin().read_line(&mut line)?;
                    let m = line.trim();
                    break Verdict::Deny { message: (!m.is_empty()).then(|| m.to_owned()) };
                }
                "e" | "edit" => {
                    out::note(&format!("arguments as JSON (now {}):", p.arguments));
                    line.clear();
                    std::io::stdin().read_line(&mut line)?;
                    match serde_json::from_str::<Value>(line.trim()) {
                        Ok(arguments) => break Verdict::ApproveEdited { arguments },
                        Err(e) => out::note(&format!("not JSON: {e}")),
                    }
                }
                _ => {}
            }
        };
        decisions.push(Decision {
            call_id: p.call_id.clone(),
            tool: p.tool.clone(),
            arguments_hash: p.arguments_hash.clone(),
            verdict,
        });
    }
    Ok(decisions)
}

/// Prints where the run ended: the answer (or the JSON) on stdout, what to
/// do next on stderr.
pub(crate) fn report(run: &AgentRun, json: bool) -> anyhow::Result<()> {
    if json {
        out::json(&outcome_json(run), false)?;
    } else if let Some(output) = run.output() {
        // Stored compact; shown to a person laid out.
        out::json(&output, true)?;
    } else if let Some(Outcome::Answer { text }) = &run.outcome {
        out::data(text)?;
    }
    for note in noesis_agent::summary::next_steps(run) {
        out::note(&note);
    }
    Ok(())
}
