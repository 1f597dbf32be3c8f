//! `noesis mcp`: the modules as a Model Context Protocol server on stdin and
//! stdout. stdout carries only protocol messages; notes go to stderr.

use std::process::ExitCode;
use std::sync::Arc;

use noesis_mcp::server::{Mcp, PROTOCOL_VERSIONS};
use noesis_modules::search::SearchPath;
use noesis_serve::Service;
use noesis_serve::mcp::McpAgents;
use tokio::sync::mpsc;

use super::serve::HostArgs;
use crate::out;
use crate::provider::env;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Seconds requests in flight may go on after stdin closes before they
    /// are cancelled (and answered with E2002).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    grace: u64,
    #[command(flatten)]
    host: HostArgs,
    /// Longest message accepted, in bytes; a longer line is dropped unread
    /// and answered with a JSON-RPC error, so one line cannot exhaust memory.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024)]
    max_line: usize,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    let config = crate::config::load(&env, &std::env::current_dir()?)?.config;
    let frames = a.host.frame_writer();
    let settings = a.host.settings(&config, frames.clone())?;
    // Providers are chosen as `noesis serve` chooses them: the client's
    // provider and model over the flags, one provider per choice.
    // No HTTP routes here; the cap and the ceiling hold for the `agent` tool.
    let policy = a.host.runs_policy(&config, false)?;
    let providers = Arc::new(a.host.providers(config)?);
    // A provider that cannot be set up is a configuration error: exit 2
    // now, before a client has connected, not on its first run.
    let default = providers.get(&a.host.provider, None)?;
    let service =
        Service::new(search.clone(), Arc::new(crate::provider::Served(Arc::clone(&providers)))).with_settings(settings);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let grace = std::time::Duration::from_secs(a.grace);
    // The `agent` tool, when the store opens (agent runs are kept there).
    let agents = super::serve::agent_runs(&rt, search, &providers, "mcp", policy)?;
    let mcp = match agents.clone() {
        Some(agents) => {
            // What an earlier session left unfinished (it ended, or was
            // killed) goes on here; `agent` with `run_id` follows it.
            match rt.block_on(agents.resume_unfinished()) {
                Ok(0) => {}
                Ok(n) => out::note(&format!("resuming {n} agent run(s) an earlier session left unfinished")),
                Err(e) => out::note(&format!("warning: unfinished agent runs were not resumed: {e}")),
            }
            Mcp::with_agents(Arc::new(service), grace, Arc::new(McpAgents(agents)))
        }
        None => Mcp::with_grace(Arc::new(service), grace),
    };

    let (lines_in, lines) = mpsc::channel::<Vec<u8>>(64);
    let (answers, mut answers_out) = mpsc::unbounded_channel::<String>();
    // Blocking stdio on threads of their own; the server sees channels.
    let max_line = a.max_line;
    let refusals = answers.clone();
    std::thread::spawn(move || {
        noesis_mcp::server::stdio::read_lines(std::io::stdin().lock(), max_line, &lines_in, &refusals);
    });
    let writer = std::thread::spawn(move || {
        while let Some(line) = answers_out.blocking_recv() {
            // A closed stdout means the client has gone; the end of stdin follows.
            if out::data(&line).is_err() {
                break;
            }
        }
    });
    out::note(&format!(
        "noesis mcp: serving modules on stdio (MCP {}; provider {}/{})",
        PROTOCOL_VERSIONS.join(", "),
        default.name(),
        default.model()
    ));
    rt.block_on(async {
        mcp.serve(lines, answers).await;
        if let Some(agents) = &agents {
            // Runs no request waits on (resumed ones) stop as the server's
            // doing, so the next session resumes them.
            agents.shutdown().await;
        }
    });
    // Blocking module loads may still be finishing; the answers are sent.
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    if let Some(w) = frames {
        // The session is over: what its runs queued is written before exit.
        w.finish();
    }
    if writer.join().is_err() {
        anyhow::bail!("noesis mcp: the stdout writer failed");
    }
    Ok(ExitCode::SUCCESS)
}
