use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use noesis_modules::search::SearchPath;
use noesis_modules::{ErrorCode, Failure};
use noesis_runtime::compose::{ChildProviders, ComposeOptions, ComposeRecord, SearchResolver, execute};
use noesis_runtime::{CancellationToken, Instant, OnText, RunOptions, stamp};
use serde_json::{Value, json};

use super::{Loaded, load};
use crate::out;
use crate::provider::{ProviderArgs, budget, prices, select};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Module name, or a path to a module folder.
    module: String,
    /// Input JSON: a file, `-` for stdin, or inline JSON starting with `{`.
    #[arg(long, short, value_name = "FILE|-|JSON")]
    input: Option<String>,
    /// Argument text for $ARGUMENTS (also sets input.query when absent).
    #[arg(long, value_name = "TEXT")]
    args: Option<String>,
    /// Put a file's text into an input field: FIELD=PATH (repeatable).
    #[arg(long = "file", value_name = "FIELD=PATH")]
    files: Vec<String>,
    /// Grant what a module's policies may ask for: network,
    /// filesystem_write, side_effects, code_execution (comma-separated or
    /// repeated; added to `[policies] allow` in noesis.toml).
    #[arg(long = "allow", value_name = "POLICY[,POLICY…]", value_delimiter = ',')]
    allow: Vec<String>,
    /// Offer the module a tool by name (repeatable); its `tools` section
    /// must permit it, and the model may call only tools offered.
    #[arg(long = "tool", value_name = "NAME")]
    tools: Vec<String>,
    #[command(flatten)]
    provider: ProviderArgs,
    /// Cap on output tokens.
    #[arg(long, value_name = "N")]
    max_tokens: Option<u32>,
    /// Times an invalid reply is sent back with its violations for another try.
    #[arg(long, value_name = "N", default_value_t = 1)]
    reask: u32,
    /// Show the model's text on stderr as it arrives; the validated
    /// envelope still ends up on stdout.
    #[arg(long)]
    stream: bool,
    /// Pretty-print the envelope.
    #[arg(long)]
    pretty: bool,
    /// Print the prompt, the raw reply and repairs on stderr.
    #[arg(long, short)]
    verbose: bool,
    /// Run the module over every line of a JSONL file (one input object
    /// per line): the envelopes come out as JSONL, in the file's order.
    #[arg(long, value_name = "FILE.jsonl", conflicts_with_all = ["input", "args", "files", "stream", "verbose"])]
    batch: Option<PathBuf>,
    /// Inputs per unit of work of a batch.
    #[arg(long, value_name = "N", default_value_t = noesis_temporal::job::DEFAULT_SLICE, requires = "batch")]
    slice: i64,
    /// Units of a batch answered at once in this process (without --on).
    #[arg(long, value_name = "N", default_value_t = 4, requires = "batch")]
    parallel: usize,
    /// With --on: the batch is answered by a Temporal cluster's workers.
    #[command(flatten)]
    cluster: crate::cluster::OnArgs,
}

fn read_input(spec: Option<&str>) -> Result<Value, String> {
    let Some(spec) = spec else { return Ok(json!({})) };
    let (text, origin) = if spec == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| format!("stdin: {e}"))?;
        (s, "stdin".to_owned())
    } else if spec.trim_start().starts_with('{') {
        (spec.to_owned(), "--input".to_owned())
    } else {
        let s = std::fs::read_to_string(spec).map_err(|e| format!("{spec}: cannot read input: {e}"))?;
        (s, spec.to_owned())
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| format!("{origin}: input is not JSON: {e}"))?;
    if !value.is_object() {
        return Err(format!("{origin}: input must be a JSON object"));
    }
    Ok(value)
}

/// What `noesis compose` adds to a run.
#[derive(Debug, Default)]
pub(crate) struct Composing {
    /// Print every step on stderr.
    pub(crate) trace: Option<super::compose::TraceFormat>,
    /// Total time allowed, instead of the module's `composition.timeout_ms`.
    pub(crate) timeout: Option<Duration>,
}

impl Args {
    /// Whether this is a batch (`--batch FILE`, `--on ADDR`).
    pub(crate) fn is_batch(&self) -> bool {
        self.batch.is_some() || self.cluster.target().is_some()
    }
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    if let Some(file) = a.batch.clone() {
        let on = a.cluster.target();
        let batching = super::batch::Batching { file, slice: a.slice, parallel: a.parallel, on, pretty: a.pretty };
        return super::batch::run(search, &a.module, &a.provider, batching);
    }
    if a.cluster.target().is_some() {
        anyhow::bail!("--on runs a batch on a cluster: give the inputs with --batch FILE.jsonl");
    }
    execute_module(search, a, &Composing::default())
}

/// A run goes through composition, so `@call` and `composition:` work from
/// `noesis run` too; children resolve on the same search path and use the
/// provider chosen for the module named on the command line.
pub(crate) fn execute_module(search: &SearchPath, a: Args, composing: &Composing) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let config =
        crate::config::load(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()), &std::env::current_dir()?)?.config;
    // Envelopes made here, before a run starts, get the same runtime meta.
    let refuse = |env: Value, model_id: &str| -> anyhow::Result<ExitCode> {
        let trace_id = uuid::Uuid::now_v7().to_string();
        out::json(&stamp(env, &trace_id, model_id, started), a.pretty)?;
        Ok(ExitCode::from(1))
    };
    let module: Arc<noesis_modules::Module> = match load(search, &a.module)? {
        Loaded::Module(m) => Arc::from(m),
        Loaded::NotFound(env) => {
            let provider = select(&a.provider, &config, None)?;
            return refuse(env, &format!("{}/{}", provider.name(), provider.model()));
        }
    };
    let provider = select(&a.provider, &config, Some((&module.name, Some(module.policy.tier.as_str()))))?;
    crate::local::note_schema(provider.as_ref(), &module.reply_schema());
    if let Some(w) = noesis_host::provider::unpriced_warning(&a.provider, &config, provider.as_ref()) {
        out::note(&w);
    }
    let model_id = format!("{}/{}", provider.name(), provider.model());
    let refuse = |env: Value| refuse(env, &model_id);
    let mut input = match read_input(a.input.as_deref()) {
        Ok(v) => v,
        Err(message) => return refuse(Failure::new(ErrorCode::E1001, message).into_envelope()),
    };
    let mut files_read = Vec::new();
    for spec in &a.files {
        let Some((field, path)) = spec.split_once('=') else {
            anyhow::bail!("--file expects FIELD=PATH, got `{spec}`");
        };
        match std::fs::read_to_string(PathBuf::from(path)) {
            Ok(text) => {
                files_read.push(crate::memory::FileRead::new(field, path, &text));
                input[field] = json!(text);
            }
            Err(e) => {
                let message = format!("{path}: cannot read the file for input field `{field}`: {e}");
                return refuse(Failure::new(ErrorCode::E1001, message).into_envelope());
            }
        }
    }
    let cancel = CancellationToken::new();
    let run_options = RunOptions {
        arguments: a.args,
        max_tokens: a.max_tokens,
        reask: a.reask,
        on_text: a.stream.then(|| OnText(std::sync::Arc::new(out::stream))),
        cancel: Some(cancel.clone()),
        budget: budget(&a.provider, &config)?,
        prices: Some(prices(&config)),
        allow: crate::config::granted(&config, &a.allow)?,
        tools: a.tools.clone(),
        context: Some(crate::memory::ProjectContext::options()),
        ..RunOptions::default()
    };
    let children = crate::provider::Providers::new(a.provider.clone(), config.clone());
    children.seed(&a.provider, Some((&module.name, Some(module.policy.tier.as_str()))), Arc::clone(&provider));
    let options = ComposeOptions {
        run: run_options,
        timeout: composing.timeout,
        providers: Some(ChildProviders(Arc::new(children))),
    };
    let resolver = SearchResolver::new(search.clone());
    // Every run is recorded as a frame (after the run; never failing it).
    let pending = crate::memory::Pending::new(&module.name, &input, files_read);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (composed, interrupted): (ComposeRecord, bool) = rt.block_on(async {
        let run = execute(Arc::clone(&module), &resolver, provider.as_ref(), input, &options);
        tokio::pin!(run);
        tokio::select! {
            record = &mut run => (record, false),
            _ = tokio::signal::ctrl_c() => {
                // Let the run finish with its E2002 envelope rather than
                // dying mid-write: the caller still gets valid JSON.
                cancel.cancel();
                (run.await, true)
            }
        }
    });
    if a.stream {
        out::stream("\n");
    }
    if let Some(format) = composing.trace {
        super::compose::print_trace(&composed.steps, format);
    }
    if a.verbose
        && let Some(record) = &composed.root
    {
        if let Some(p) = &record.prompt {
            out::note(&format!("--- prompt ({} chars)\n{p}", p.chars().count()));
        }
        if let Some(r) = &record.reply {
            out::note(&format!("--- reply\n{r}"));
        }
        if let Some(s) = record.structured {
            out::note(&format!("--- structured output: {}", serde_json::to_string(&s).unwrap_or_default()));
        }
        for r in &record.repairs {
            out::note(&format!("--- repaired: {r}"));
        }
    }
    crate::memory::record(pending, &composed.envelope, &composed.steps);
    out::json(&composed.envelope, a.pretty)?;
    if interrupted {
        return Ok(ExitCode::from(130));
    }
    Ok(if composed.envelope["ok"] == json!(true) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
