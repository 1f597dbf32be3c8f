//! Starting, resuming and forking runs, and driving them: the model through
//! the chosen provider, the tools over the workspace, every change stored
//! before the next step, live steps on stderr, approvals asked in a
//! terminal (or the run paused for `approve`/`deny`).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use noesis_agent::events::{Event, EventBus};
use noesis_agent::{
    Action, AgentRun, ApprovalPolicy, Decision, Driver, Limits, Outcome, Pending, RunConfig, Strategy, Verdict,
    Workspace,
};
use noesis_host::host::{connect_mcp, mcp_specs, recorded_sandbox};
use noesis_host::runs::{Keep, now_ms, record_frames, session_memory, state_of};
use noesis_host::{Equipped, Host, NewRun, Reach};
use noesis_llm::{ChatResponse, Provider};
use noesis_modules::search::SearchPath;
use noesis_runtime::CancellationToken;
use serde_json::{Value, json};

use super::{DriveArgs, StartArgs, exit_code, status};
use crate::config::Config;
use crate::out;
use crate::provider::{ProviderArgs, Providers, select, with_text_tools};

/// Everything a drive needs besides the run.
struct Ctx {
    host: Host,
    project_id: String,
    equipped: Equipped,
    json: bool,
    quiet: bool,
    tool_timeout: std::time::Duration,
}

fn load_config() -> anyhow::Result<Config> {
    Ok(crate::config::load(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()), &std::env::current_dir()?)?.config)
}

fn approval(flag: Option<&str>, config: &Config) -> ApprovalPolicy {
    match flag.or(config.agent.approve.as_deref()) {
        Some("auto") => ApprovalPolicy::Auto,
        Some("never") => ApprovalPolicy::Never,
        _ => ApprovalPolicy::Ask,
    }
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
    Ok(Host { search: search.clone(), store: Arc::from(store), project, providers, reach: Reach::Anywhere, note })
}

pub(super) fn start(search: &SearchPath, a: StartArgs) -> anyhow::Result<ExitCode> {
    let task = a.task.clone().unwrap_or_default();
    if task.trim().is_empty() {
        bail!("the task is empty; say what the agent should do: noesis agent \"TASK\"");
    }
    let config = load_config()?;
    let root = match &a.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("no current directory")?,
    };
    let workspace =
        Workspace::new(&root).with_context(|| format!("--workspace {}: not a usable folder", root.display()))?;
    let mut allow_commands = config.agent.allow_commands.clone();
    allow_commands.extend(a.allow_commands.iter().cloned());
    let commands: Vec<(&str, &str)> = config
        .agent
        .allow_commands
        .iter()
        .map(|c| (c.as_str(), "[agent] allow_commands"))
        .chain(a.allow_commands.iter().map(|c| (c.as_str(), "--allow-command")))
        .collect();
    let permissions = noesis_host::rules::operator(&config, &a.rules, &commands, &workspace)?;
    let sandbox = a.sandbox.settings(&config);
    crate::cmd::sandbox::warn_if_off(&sandbox, a.drive.quiet);
    let rt = crate::memory::runtime()?;
    let note = |m: &str| out::note(m);
    let note: Option<&(dyn Fn(&str) + Send + Sync)> = (!a.drive.quiet).then_some(&note);
    let mcp = rt.block_on(connect_mcp(mcp_specs(&config, &a.mcp)?, sandbox.clone(), &workspace, note))?;
    let strategy = match a.strategy.as_str() {
        "single-shot" => Strategy::SingleShot,
        "chain-of-thought" => Strategy::ChainOfThought,
        _ => Strategy::React,
    };
    // Checks --max-cost; the run keeps the figures in its limits.
    crate::provider::budget(&a.drive.provider, &config)?;
    let provider = with_text_tools(select(&a.drive.provider, &config, None)?, &config);
    let providers = Arc::new(Providers::new(a.drive.provider.clone(), config.clone()));
    let host = host(&rt, search, providers, a.drive.quiet)?;
    let limits = Limits {
        max_turns: a.max_iterations.or(config.agent.max_iterations).unwrap_or(Limits::default().max_turns),
        max_tool_calls: a.max_tool_calls,
        max_tokens: a.drive.provider.max_total_tokens.or(config.budget.max_tokens),
        max_cost_usd: a.drive.provider.max_cost.or(config.budget.max_cost_usd),
        max_wall_ms: a.max_seconds.map(|s| s.saturating_mul(1000)),
        ..Limits::default()
    };
    let run_config = RunConfig {
        strategy,
        system_prompt: a.system.clone(),
        approval: approval(a.drive.approve.as_deref(), &config),
        limits,
        reflect: a.reflect,
        tool_filter: noesis_agent::ToolFilter { only: a.tools.clone(), except: a.no_tools.clone() },
        permissions,
        ..RunConfig::default()
    };
    let project_id = host.project.project_id.clone();
    let remembered = match &a.session {
        Some(name) => rt.block_on(session_memory(host.store.as_ref(), &project_id, name))?,
        None => String::new(),
    };
    let id = a.run_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    if rt.block_on(host.store.agent_state(&id, None))?.is_some() {
        bail!("--run-id {id}: a run with this id exists; resume it with `noesis agent resume {id}`");
    }
    let record = json!({"allow_commands": allow_commands, "session": a.session, "mcp": a.mcp});
    let new = NewRun {
        id,
        task,
        remembered,
        workspace,
        config: run_config,
        provider,
        sandbox,
        mcp,
        owns_mcp: true,
        record: record.as_object().cloned().unwrap_or_default(),
    };
    let (run, equipped) = match host.start(new, now_ms()) {
        Ok(started) => started,
        Err(noesis_host::HostError::UnknownTool { name, known }) => {
            bail!("--tool/--no-tool {name}: no such tool (the tools are {})", known.join(", "))
        }
        Err(e) => return Err(e.into()),
    };
    let ctx = Ctx {
        host,
        project_id,
        equipped,
        json: a.drive.json,
        quiet: a.drive.quiet,
        tool_timeout: std::time::Duration::from_secs(a.drive.tool_timeout),
    };
    if !ctx.quiet {
        out::note(&format!("run {} ({})", run.id, run.host["provider"].as_str().unwrap_or_default()));
    }
    drive_to_end(&rt, &ctx, run)
}

/// Sets the provider of a continued run: the flags' when they name one,
/// else the one the run was started with.
fn provider_for(run: &AgentRun, flags: &ProviderArgs, config: &Config) -> anyhow::Result<Arc<dyn Provider>> {
    let mut flags = flags.clone();
    if flags.provider.is_none() && crate::provider::env("LLM_PROVIDER").is_none() {
        flags.provider = run.host["provider"].as_str().map(str::to_owned);
        if flags.model.is_none() && crate::provider::env("LLM_MODEL").is_none() {
            flags.model = run.host["model"].as_str().map(str::to_owned);
        }
    }
    select(&flags, config, None)
}

/// The drive of a stored run: its own recorded host (workspace, rules,
/// sandbox, MCP servers), with the flags' provider or its own.
fn continued(search: &SearchPath, run: &AgentRun, d: &DriveArgs, rt: &tokio::runtime::Runtime) -> anyhow::Result<Ctx> {
    let config = load_config()?;
    let provider = with_text_tools(provider_for(run, &d.provider, &config)?, &config);
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
        tool_timeout: std::time::Duration::from_secs(d.tool_timeout),
    })
}

pub(super) fn resume(search: &SearchPath, id: &str, d: DriveArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (mut run, _) = super::manage::load_run(&rt, id, None)?;
    if matches!(run.outcome, Some(Outcome::Answer { .. } | Outcome::Aborted { .. })) {
        bail!("run {} is {}; there is nothing to resume (fork it to go on from a step)", run.id, status(&run));
    }
    let ctx = continued(search, &run, &d, &rt)?;
    run.resume();
    if let Some(p) = &d.approve {
        run.config.approval = approval(Some(p), &Config::default());
    }
    drive_to_end(&rt, &ctx, run)
}

pub(super) fn fork(search: &SearchPath, id: &str, at: i64, no_run: bool, d: DriveArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (mut run, stored) = super::manage::load_run(&rt, id, Some(at))?;
    let original = run.id.clone();
    run.id = uuid::Uuid::now_v7().to_string();
    run.forked_from = Some((original.clone(), u64::try_from(stored.step).unwrap_or_default()));
    run.resume();
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
    let prices = Arc::clone(&ctx.equipped.prices);
    let price = move |r: &ChatResponse| r.usage.and_then(|u| prices.cost(&r.model, u)).unwrap_or(0.0);
    let quiet = ctx.quiet;
    let spinner = Spinner::new(!quiet && std::io::stderr().is_terminal());
    // The live view is a subscriber of the run's events, as the server's
    // stream is: the driver publishes, this prints.
    let bus = EventBus::new(256);
    let mut events = bus.subscribe(&noesis_agent::events::run_topic(&run.id));
    let show = |e: &Event| {
        if quiet {
            return;
        }
        spinner.stop();
        out::note(&event_line(e));
        match e.kind.as_str() {
            "model_call" => spinner.start(format!("thinking (turn {})", e.data["turn"].as_u64().unwrap_or(0) + 1)),
            "tool_call" => spinner.start(format!("running {}", e.data["tool"].as_str().unwrap_or("?"))),
            _ => {}
        }
    };
    rt.block_on(async {
        let token = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                out::note("cancelling: the run stops after the current step (Ctrl-C again quits at once)");
                token.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(super::EXIT_CANCELLED));
                }
            }
        });
        let driver = Driver {
            now: &now_ms,
            price: &price,
            cancel: Some(cancel.clone()),
            events: Some(bus.clone()),
            tool_timeout: ctx.tool_timeout,
            router: Some(Arc::clone(&ctx.equipped.router)),
            ..Driver::new(ctx.equipped.provider.as_ref(), Arc::clone(&ctx.equipped.tools))
        };
        let mut keep = Keep { store: ctx.host.store.as_ref(), project_id: ctx.project_id.clone() };
        loop {
            let action = {
                let drive = driver.drive(&mut run, &mut keep);
                tokio::pin!(drive);
                loop {
                    tokio::select! {
                        biased;
                        Some(e) = events.recv() => show(&e),
                        action = &mut drive => break action?,
                    }
                }
            };
            // Every step is shown before the run's end or a question.
            while let Some(e) = events.try_recv() {
                show(&e);
            }
            let Action::AwaitApproval(pending) = action else { break };
            if !interactive {
                break;
            }
            // Blocking on stdin here stalls nothing: the drive is paused.
            let decisions = ask_in_terminal(&pending)?;
            run.decide(&decisions)?;
        }
        if run.outcome.as_ref().is_some_and(|o| *o != Outcome::Cancelled)
            && let Err(e) = record_frames(ctx.host.store.as_ref(), &ctx.host.project, &mut run).await
        {
            out::note(&format!("warning: the run was not recorded as frames: {e}"));
        }
        spinner.stop();
        if let Some(mcp) = &ctx.equipped.started {
            mcp.shutdown().await;
        }
        anyhow::Ok(())
    })?;
    report(&run, ctx.json)?;
    Ok(exit_code(&run))
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

/// One line of the live view, read from the step's event (the same event
/// `noesis serve` streams to HTTP clients).
fn event_line(e: &noesis_agent::events::Event) -> String {
    let d = &e.data;
    let turn = d["turn"].as_u64().unwrap_or(0) + 1;
    let tool = d["tool"].as_str().unwrap_or("?");
    match e.kind.as_str() {
        "model_call" => format!("  think   turn {turn}"),
        "model_reply" => format!(
            "  think   turn {turn} done in {} ms: {} tool call(s)",
            d["ms"].as_u64().unwrap_or(0),
            d["tool_calls"].as_u64().unwrap_or(0)
        ),
        "tool_call" => format!("  act     {tool} {}", short_args(&d["arguments"])),
        "tool_result" => format!(
            "  act     {tool} {} in {} ms",
            if d["is_error"].as_bool().unwrap_or(false) { "failed" } else { "done" },
            d["ms"].as_u64().unwrap_or(0)
        ),
        "tools_changed" => format!("  tools   changed: {} offered now", d["tools"].as_u64().unwrap_or(0)),
        other => format!("  {other}"),
    }
}

/// Arguments in one short line: `key=value` with long values cut.
pub(super) fn short_args(args: &Value) -> String {
    let Some(map) = args.as_object() else { return clip(&args.to_string(), 60) };
    map.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{k}={}", clip(&v.replace('\n', "⏎"), 40))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

/// The run's outcome, calls and usage as JSON.
pub(super) fn outcome_json(run: &AgentRun) -> Value {
    let pending: Vec<Value> = run
        .calls
        .iter()
        .filter(|c| c.status == noesis_agent::CallStatus::AwaitingApproval)
        .map(|c| json!({"call_id": c.id, "tool": c.tool, "arguments": c.arguments, "arguments_hash": c.arguments_hash}))
        .collect();
    json!({
        "run_id": run.id,
        "status": status(run),
        "step": run.step,
        "task": run.host.get("task").cloned().unwrap_or_else(|| json!(run.task)),
        "forked_from": run.forked_from.as_ref().map(|(id, step)| json!({"run_id": id, "step": step})),
        "outcome": run.outcome,
        "answer": match &run.outcome { Some(Outcome::Answer { text }) => json!(text), _ => Value::Null },
        "usage": run.usage,
        "calls": run.calls,
        "pending": pending,
    })
}

/// Prints where the run ended: the answer (or the JSON) on stdout, what to
/// do next on stderr.
pub(super) fn report(run: &AgentRun, json: bool) -> anyhow::Result<()> {
    if json {
        out::json(&outcome_json(run), false)?;
    }
    match &run.outcome {
        Some(Outcome::Answer { text }) => {
            if !json {
                out::data(text)?;
            }
        }
        Some(Outcome::Stopped { reason, detail }) => {
            let reason = serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned));
            out::note(&format!("run {} stopped ({}): {detail}", run.id, reason.unwrap_or_default()));
        }
        Some(Outcome::Cancelled) => {
            out::note(&format!("run {} cancelled; continue it with `noesis agent resume {}`", run.id, run.id));
        }
        Some(Outcome::Aborted { message }) => {
            out::note(&format!(
                "run {} aborted{}",
                run.id,
                message.as_ref().map(|m| format!(": {m}")).unwrap_or_default()
            ));
        }
        None if run.awaiting_approval() => {
            out::note(&format!("run {} waits for approval:", run.id));
            for c in run.calls.iter().filter(|c| c.status == noesis_agent::CallStatus::AwaitingApproval) {
                out::note(&format!("  {}  {} {}  (hash {})", c.id, c.tool, short_args(&c.arguments), c.arguments_hash));
            }
            out::note(&format!(
                "decide with `noesis agent approve {0} [CALL]` or `noesis agent deny {0} [CALL] -m WHY`, then `noesis agent resume {0}`",
                run.id
            ));
        }
        None => out::note(&format!("run {} is paused; `noesis agent resume {}` continues it", run.id, run.id)),
    }
    Ok(())
}
