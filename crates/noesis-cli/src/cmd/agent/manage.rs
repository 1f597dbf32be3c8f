//! The runs kept in the store: list, show, replay, and the decisions on a
//! paused run's calls.

use std::process::ExitCode;

use anyhow::Context;
use noesis_agent::summary::outcome_json;
use noesis_agent::{AgentRun, Verdict};
use noesis_store::AgentState;
use serde_json::Value;

use crate::out;

/// The run `id` (or the project's one run whose id starts with it), as it
/// stands or as it stood at `step`.
pub(super) fn load_run(
    rt: &tokio::runtime::Runtime,
    id: &str,
    step: Option<i64>,
) -> anyhow::Result<(AgentRun, AgentState)> {
    rt.block_on(async {
        let (project, store) = crate::memory::context().await?;
        Ok(noesis_host::runs::find(store.as_ref(), &project.project_id, id, step).await?)
    })
}

pub(super) fn list(limit: u32, json: bool) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let runs = rt.block_on(async {
        let (project, store) = crate::memory::context().await?;
        anyhow::Ok(store.agent_runs(&project.project_id, limit).await?)
    })?;
    if json {
        let rows = runs.iter().map(noesis_host::runs::summary_json).collect();
        out::json(&Value::Array(rows), false)?;
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        out::note("no agent runs in this project yet (`noesis agent \"TASK\"` starts one)");
        return Ok(ExitCode::SUCCESS);
    }
    let text = noesis_host::runs::list_text(&runs);
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn show(id: &str, at: Option<i64>, json: bool) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (run, stored) = load_run(&rt, id, at)?;
    // What the run tree spent per agent, role and model (its sub-agents as
    // they are now).
    let children = rt.block_on(async {
        let (_, store) = crate::memory::context().await?;
        anyhow::Ok(noesis_host::runs::sub_agent_runs(store.as_ref(), &run).await?)
    })?;
    let spend = noesis_agent::summary::spend(&run, &children);
    if json {
        let mut shown = stored.state.clone();
        if let Value::Object(m) = &mut shown {
            m.insert("spend".into(), serde_json::to_value(&spend)?);
        }
        out::json(&shown, false)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = noesis_agent::summary::run_text(&run, &stored.task, stored.step);
    t.push_str(&noesis_agent::summary::spend_text(&spend));
    out::data(&t)?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn replay(id: &str, from: i64, json: bool) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (record, replayed) = rt.block_on(async {
        let (project, store) = crate::memory::context().await?;
        anyhow::Ok(noesis_host::runs::replay(store.as_ref(), &project.project_id, id, from).await?)
    })?;
    if json {
        out::json(&noesis_host::runs::replay_json(&record, from, &replayed), false)?;
    } else {
        let mut t = String::new();
        for s in &replayed.steps {
            t.push_str(s);
            t.push('\n');
        }
        out::data(&t)?;
        match (&replayed.diverged, replayed.matches) {
            (Some(d), _) => out::note(&format!("the replay left the record: {d}")),
            (None, true) => out::note("the replay matches the record"),
            (None, false) => out::note("the replay ended differently from the record"),
        }
    }
    Ok(if replayed.matches { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Applies decisions made from the command line and stores the run.
fn decide(
    id: &str,
    call: Option<String>,
    hash: Option<String>,
    json: bool,
    verdict: &dyn Fn(&noesis_agent::CallRecord) -> Verdict,
) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (mut run, stored) = load_run(&rt, id, None)?;
    let decisions = noesis_host::runs::decisions(&run, call.as_deref(), hash.as_deref(), verdict)?;
    let on_cluster = noesis_temporal::job::ClusterRecord::of(&run.host).ok().flatten().is_some();
    rt.block_on(async {
        let store = crate::memory::open().await?;
        let mut tries = 0;
        loop {
            match noesis_host::runs::decide(store.as_ref(), &stored.project_id, &mut run, &decisions).await {
                // A worker stores a pause a moment before it lets the run
                // go: a cluster run is asked again for a little while.
                Err(e) if on_cluster && tries < 50 && e.to_string().contains(" is held by worker:") => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                decided => return anyhow::Ok(decided?),
            }
        }
    })?;
    crate::cluster::decided(&rt, &run)?;
    if json {
        out::json(&outcome_json(&run), false)?;
    } else {
        for d in &decisions {
            let what = match &d.verdict {
                Verdict::Approve => "approved",
                Verdict::ApproveEdited { .. } => "approved with edited arguments",
                Verdict::Deny { .. } => "denied",
                Verdict::Abort { .. } => "aborted the run at",
            };
            out::note(&format!("{what} {} ({})", d.call_id, d.tool));
        }
        if on_cluster {
            out::note(&format!("the cluster's workers go on with run {}", run.id));
        } else if run.outcome.is_none() {
            out::note(&format!("continue with `noesis agent resume {}`", run.id));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn approve(
    id: &str,
    call: Option<String>,
    args: Option<String>,
    hash: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let edited = match &args {
        Some(text) => Some(serde_json::from_str::<Value>(text).context("--args: not JSON")?),
        None => None,
    };
    decide(id, call, hash, json, &|_| match &edited {
        Some(arguments) => Verdict::ApproveEdited { arguments: arguments.clone() },
        None => Verdict::Approve,
    })
}

pub(super) fn deny(
    id: &str,
    call: Option<String>,
    message: Option<String>,
    abort: bool,
    hash: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    decide(id, call, hash, json, &|_| {
        if abort { Verdict::Abort { message: message.clone() } } else { Verdict::Deny { message: message.clone() } }
    })
}

pub(super) fn cancel(id: &str) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (run, _) = load_run(&rt, id, None)?;
    if run.outcome.is_some() {
        anyhow::bail!("run {} is {}; there is nothing to cancel", run.id, super::status(&run));
    }
    let Some(record) = noesis_temporal::job::ClusterRecord::of(&run.host).map_err(anyhow::Error::msg)? else {
        anyhow::bail!(
            "run {} is not on a cluster: stop it with Ctrl-C where it runs (a server's run: its dashboard or \
             POST /agents/runs/{}/cancel)",
            run.id,
            run.id
        );
    };
    crate::cluster::cancel(&rt, &run, &record)?;
    let stopped = rt.block_on(async {
        let store = crate::memory::open().await?;
        // The worker stops the run after its current step; a paused run
        // holds no worker and stays as it is.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (now, _) = noesis_host::runs::find(store.as_ref(), "", &run.id, None).await?;
            if now.outcome.is_some() || now.awaiting_approval() || std::time::Instant::now() > deadline {
                return anyhow::Ok(now);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })?;
    out::note(&format!(
        "run {} is {} at step {} (its workflow is cancelled; `noesis agent resume {}` goes on here)",
        stopped.id,
        super::status(&stopped),
        stopped.step,
        stopped.id
    ));
    Ok(ExitCode::SUCCESS)
}

/// Puts run `run`'s workspace files back as they were at `step`; what was
/// done, in words.
pub(super) fn restore_files(run: &AgentRun, step: u64) -> anyhow::Result<String> {
    Ok(describe(run, step, &undo(run, step)?))
}

fn undo(run: &AgentRun, step: u64) -> anyhow::Result<Option<noesis_workflow::snapshot::Changes>> {
    let workspace = run.host["workspace"]
        .as_str()
        .with_context(|| format!("run {} has no recorded workspace; its files cannot be restored", run.id))?;
    let rewinds = noesis_host::rewind::Rewinds::new(&crate::memory::home()?);
    Ok(rewinds.restore(&run.id, step, std::path::Path::new(workspace))?)
}

fn describe(run: &AgentRun, step: u64, undone: &Option<noesis_workflow::snapshot::Changes>) -> String {
    match undone {
        None => format!("the files are as at step {step}: run {} changed none after it", run.id),
        Some(c) if c.is_empty() => format!("the files are as at step {step} already"),
        Some(c) => format!(
            "the files are back as at step {step}: {} modified, {} created, {} deleted path(s) undone",
            c.modified.len() + c.mode_changed.len(),
            c.created.len() + c.created_dirs.len(),
            c.deleted.len() + c.deleted_dirs.len()
        ),
    }
}

pub(super) fn rewind(id: &str, at: i64, json: bool) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    let (run, stored) = load_run(&rt, id, Some(at))?;
    let step = u64::try_from(stored.step).unwrap_or(0);
    let undone = undo(&run, step)?;
    if json {
        out::json(&serde_json::json!({"run_id": run.id, "step": step, "undone": undone}), false)?;
    } else {
        out::note(&describe(&run, step, &undone));
    }
    Ok(ExitCode::SUCCESS)
}
