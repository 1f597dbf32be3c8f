//! The frame plugins on the command line: `noesis docs sync|status`,
//! `noesis plugin list|run` (plugins that are programs). Each command opens
//! the frame core on the project's session, which checks what changed, and
//! steps through the plugin with a module as the model.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use noesis_modules::search::SearchPath;
use noesis_plugins::{ModuleThink, Setting, docs, programs, review, testgen};
use serde_json::{Value, json};

use crate::config::Config;
use crate::out;
use crate::provider::ProviderArgs;

/// What every plugin command needs: the config, the project, the store.
pub(crate) struct Setup {
    pub(crate) config: Config,
    pub(crate) project: noesis_frames::project::Project,
    pub(crate) store: Box<dyn noesis_store::Store>,
    /// The store's own files, which no scan reads.
    pub(crate) exclude: Vec<PathBuf>,
}

impl Setup {
    pub(crate) fn setting(&self) -> Setting<'_> {
        Setting { project: &self.project, store: self.store.as_ref(), exclude: &self.exclude }
    }
}

pub(crate) async fn setup() -> anyhow::Result<Setup> {
    let cwd = std::env::current_dir()?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let config = crate::config::load(&env, &cwd)?.config;
    let (project, store) = crate::memory::context().await?;
    Ok(Setup { config, project, store, exclude: crate::memory::store_files() })
}

/// A path a person typed, made absolute against the current directory.
fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    Ok(if p.is_absolute() { p.to_owned() } else { std::env::current_dir()?.join(p) })
}

pub(crate) fn model(
    search: &SearchPath,
    module: &str,
    flags: &ProviderArgs,
    config: &Config,
) -> anyhow::Result<ModuleThink> {
    let provider = crate::provider::select(flags, config, None)?;
    if let Some(w) = noesis_host::provider::unpriced_warning(flags, config, provider.as_ref()) {
        out::note(&w);
    }
    Ok(ModuleThink {
        search: search.clone(),
        module: module.to_owned(),
        provider,
        prices: crate::provider::prices(config),
        budget: crate::provider::budget(flags, config)?,
    })
}

// ---- docs ----

#[derive(Debug, clap::Args)]
pub(crate) struct DocsArgs {
    #[command(subcommand)]
    command: DocsSub,
}

#[derive(Debug, clap::Subcommand)]
enum DocsSub {
    /// Make the knowledge node (YAML) and page (Markdown) of every code unit
    /// whose node is missing or stale; leave the others byte for byte.
    Sync(Box<SyncArgs>),
    /// List the stale nodes (and why) without asking a model.
    Status(StatusArgs),
}

#[derive(Debug, clap::Args)]
struct SyncArgs {
    /// Only the units under this folder (default: the whole project).
    path: Option<PathBuf>,
    /// Where the nodes go (default: [frames] docs_dir, else docs/noesis).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print what was done as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    provider: ProviderArgs,
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// Only the units under this folder.
    path: Option<PathBuf>,
    /// Where the nodes are.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The docs folder: the flag, the config, or `docs/noesis` in the project.
fn docs_dir(flag: Option<&Path>, config: &Config, root: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| root.to_owned());
    docs::out_dir(flag, config.frames.docs_dir.as_deref(), root, &cwd)
}

/// The scope folder a person typed, checked to be a folder.
fn docs_scope(path: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    Ok(docs::scope(path, &std::env::current_dir()?)?)
}

pub(crate) fn docs(search: &SearchPath, a: DocsArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    rt.block_on(async move {
        let s = setup().await?;
        match a.command {
            DocsSub::Sync(x) => docs_sync(search, &s, *x).await,
            DocsSub::Status(x) => docs_status(&s, x).await,
        }
    })
}

async fn docs_sync(search: &SearchPath, s: &Setup, a: SyncArgs) -> anyhow::Result<ExitCode> {
    let out_dir = docs_dir(a.out.as_deref(), &s.config, &s.project.root);
    let scope = docs_scope(a.path.as_deref())?;
    let think = model(search, "docs-node", &a.provider, &s.config)?;
    let bar = crate::progress::Progress::spinner(a.quiet, "docs");
    let report = docs::sync_in(&s.setting(), &think, scope.as_deref(), &out_dir, &|unit| {
        bar.say(&format!("docs: writing {unit}"));
    })
    .await?;
    bar.finish();
    let code = if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
    if a.json {
        let mut v = json!({"out": out_dir});
        if let (Some(o), Value::Object(r)) = (v.as_object_mut(), report.to_json()) {
            o.extend(r);
        }
        out::json(&v, true)?;
        return Ok(code);
    }
    let text = report.to_text(&out_dir);
    out::data(&text)?;
    Ok(code)
}

async fn docs_status(s: &Setup, a: StatusArgs) -> anyhow::Result<ExitCode> {
    let out_dir = docs_dir(a.out.as_deref(), &s.config, &s.project.root);
    let scope = docs_scope(a.path.as_deref())?;
    let status = docs::status_in(&s.setting(), scope.as_deref(), &out_dir).await?;
    if a.json {
        out::json(&status.to_json(), true)?;
    } else {
        out::data(&status.to_text())?;
    }
    Ok(if status.stale.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

// ---- plugins that are programs ----

#[derive(Debug, clap::Args)]
pub(crate) struct PluginArgs {
    #[command(subcommand)]
    command: PluginSub,
}

#[derive(Debug, clap::Subcommand)]
enum PluginSub {
    /// The plugins: built-in ones and those configured under [plugins.NAME].
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One step through a configured plugin: its transform_input gets
    /// `{"query": QUERY}` (or --input), its module (or, without one, the
    /// slice's input itself) is the model.
    Run(Box<PluginRunArgs>),
}

#[derive(Debug, clap::Args)]
struct PluginRunArgs {
    /// The plugin's name.
    name: String,
    /// The question or request.
    query: String,
    /// The raw request as JSON (default: {"query": QUERY}).
    #[arg(long, value_name = "JSON")]
    input: Option<String>,
    /// The module that is the model (default: the plugin's `module`).
    #[arg(long, value_name = "NAME")]
    module: Option<String>,
    /// Print the frame as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    provider: ProviderArgs,
}

pub(crate) fn plugin(search: &SearchPath, a: PluginArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    rt.block_on(async move {
        match a.command {
            PluginSub::List { json } => {
                let cwd = std::env::current_dir()?;
                let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
                let config = crate::config::load(&env, &cwd)?.config;
                let rows = programs::listing(&config.plugins);
                if json {
                    out::json(&Value::Array(rows), true)?;
                } else {
                    let text: String = rows
                        .iter()
                        .map(|r| {
                            format!(
                                "{:<10} {:<9} {}\n",
                                r["name"].as_str().unwrap_or_default(),
                                r["kind"].as_str().unwrap_or_default(),
                                r["command"].as_str().unwrap_or_default()
                            )
                        })
                        .collect();
                    out::data(&text)?;
                }
                Ok(ExitCode::SUCCESS)
            }
            PluginSub::Run(r) => {
                let s = setup().await?;
                let plugin = programs::external(&r.name, &s.config.plugins)?;
                let raw = programs::request(&r.query, r.input.as_deref())?;
                let module = r.module.clone().or_else(|| s.config.plugins[&r.name].module.clone());
                let think = module.map(|m| model(search, &m, &r.provider, &s.config)).transpose()?;
                let think = think.as_ref().map(|t| t as &dyn noesis_plugins::Think);
                let outcome = programs::step(&s.setting(), &plugin, &r.query, &raw, think).await?;
                if r.json {
                    out::json(&serde_json::to_value(&outcome.frame)?, true)?;
                } else {
                    out::data(&format!("{}\n{}\n", outcome.frame.frame_id, outcome.frame.conclusion))?;
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

// ---- review ----

#[derive(Debug, clap::Args)]
pub(crate) struct ReviewArgs {
    /// A unified diff to review (`-` for stdin).
    #[arg(long, value_name = "FILE", conflicts_with = "git")]
    diff: Option<PathBuf>,
    /// A git range to review (`git diff RANGE`, e.g. `main..HEAD`); default:
    /// the working tree against HEAD.
    #[arg(long, value_name = "RANGE")]
    git: Option<String>,
    /// Output: text, json or sarif (SARIF 2.1.0, for code-scanning tools).
    #[arg(long, default_value = "text", value_parser = ["text", "json", "sarif"])]
    format: String,
    /// Write the report here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    provider: ProviderArgs,
}

pub(crate) fn review(search: &SearchPath, a: ReviewArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    rt.block_on(async move {
        let s = setup().await?;
        let diff = match &a.diff {
            Some(p) if p.as_os_str() == "-" => {
                let mut t = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut t).context("read the diff from stdin")?;
                t
            }
            Some(p) => std::fs::read_to_string(p).with_context(|| format!("{}: cannot read the diff", p.display()))?,
            None => review::git_diff(&s.project.root, a.git.as_deref())?,
        };
        let think = model(search, "review-diff", &a.provider, &s.config)?;
        let bar = crate::progress::Progress::spinner(a.quiet, "review");
        let report = review::review_in(&s.setting(), &think, &diff, &|f| bar.say(&format!("review: {f}"))).await?;
        bar.finish();
        let text = report.render(&a.format, env!("CARGO_PKG_VERSION"));
        match &a.output {
            Some(p) => std::fs::write(p, text).with_context(|| format!("{}: cannot write the report", p.display()))?,
            None => out::data(&text)?,
        }
        Ok(if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
    })
}

// ---- testgen ----

#[derive(Debug, clap::Args)]
pub(crate) struct TestgenArgs {
    /// Python or Rust files (or folders) to write tests for.
    paths: Vec<PathBuf>,
    /// The files changed since the session recorded them (and those whose
    /// specs were invalidated).
    #[arg(long, conflicts_with = "paths")]
    changed: bool,
    /// Where specs and tests go (default: tests/noesis).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print what was done as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    provider: ProviderArgs,
}

pub(crate) fn testgen(search: &SearchPath, a: TestgenArgs) -> anyhow::Result<ExitCode> {
    if a.paths.is_empty() && !a.changed {
        anyhow::bail!("name the files to write tests for, or --changed");
    }
    let rt = crate::memory::runtime()?;
    rt.block_on(async move {
        let s = setup().await?;
        let out_dir = match &a.out {
            Some(p) => absolute(p)?,
            None => s.project.root.join("tests/noesis"),
        };
        let think = model(search, "testgen-spec", &a.provider, &s.config)?;
        let targets = if a.changed {
            testgen::Targets::Changed
        } else {
            testgen::Targets::Paths(a.paths.iter().map(|p| absolute(p)).collect::<anyhow::Result<_>>()?)
        };
        let bar = crate::progress::Progress::spinner(a.quiet, "testgen");
        let report =
            testgen::generate_in(&s.setting(), &think, &targets, &out_dir, &|f| bar.say(&format!("testgen: {f}")))
                .await?;
        bar.finish();
        let code = if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
        if a.json {
            out::json(&serde_json::to_value(&report)?, true)?;
            return Ok(code);
        }
        let text = report.to_text();
        out::data(&text)?;
        Ok(code)
    })
}
