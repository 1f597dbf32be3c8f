//! The frame plugins on the command line: `noesis docs sync|status`,
//! `noesis plugin list|run` (plugins that are programs). Each command opens
//! the frame core on the project's session, which checks what changed, and
//! steps through the plugin with a module as the model.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use noesis_frames::{CausalFrame, Timestamp};
use noesis_llm::Provider;
use noesis_modules::search::SearchPath;
use noesis_plugin::docs::{self, Docs};
use noesis_plugin::{ContextSlice, Core, ExternalPlugin, ExternalSpec, Step, Think, Thought};
use serde_json::{Value, json};

use crate::config::Config;
use crate::out;
use crate::provider::ProviderArgs;

/// The model of a step: a Cognitive Module run on the slice's input. The
/// reply a plugin reads is `{"input": …, "output": data}`.
pub(crate) struct ModuleThink {
    pub(crate) search: SearchPath,
    pub(crate) module: String,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) prices: Arc<noesis_llm::PriceTable>,
}

#[async_trait]
impl Think for ModuleThink {
    async fn think(&self, slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        let module = self
            .search
            .resolve(&self.module)
            .map_err(|e| e.to_string())?
            .load()
            .map_err(|e| format!("module {}: {e}", self.module))?;
        let options = noesis_runtime::RunOptions { prices: Some(Arc::clone(&self.prices)), ..Default::default() };
        let record = noesis_runtime::run(&module, self.provider.as_ref(), slice.input.clone(), &options).await;
        let envelope = record.envelope;
        if envelope["ok"] != json!(true) {
            return Err(format!(
                "{}: {} {}",
                self.module,
                envelope["error"]["code"].as_str().unwrap_or("E4000"),
                envelope["error"]["message"].as_str().unwrap_or_default()
            ));
        }
        Ok(Thought { raw: json!({"input": slice.input, "output": envelope["data"]}), ..Thought::default() })
    }
}

/// What every plugin command needs: the config, the project, the store.
pub(crate) struct Setup {
    pub(crate) config: Config,
    pub(crate) project: noesis_frames::project::Project,
    pub(crate) store: Box<dyn noesis_store::Store>,
}

pub(crate) async fn setup() -> anyhow::Result<Setup> {
    let cwd = std::env::current_dir()?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let config = crate::config::load(&env, &cwd)?.config;
    let (project, store) = crate::memory::context().await?;
    Ok(Setup { config, project, store })
}

pub(crate) fn model(
    search: &SearchPath,
    module: &str,
    flags: &ProviderArgs,
    config: &Config,
) -> anyhow::Result<ModuleThink> {
    Ok(ModuleThink {
        search: search.clone(),
        module: module.to_owned(),
        provider: crate::provider::select(flags, config, None)?,
        prices: crate::provider::prices(config),
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
    match flag {
        Some(p) if p.is_absolute() => p.to_owned(),
        Some(p) => cwd.join(p),
        None => root.join(config.frames.docs_dir.as_deref().unwrap_or("docs/noesis")),
    }
}

/// The project's code units under `path`, leaving out the docs folder and
/// the store's files.
fn code_units(
    project: &noesis_frames::project::Project,
    path: Option<&Path>,
    out: &Path,
) -> anyhow::Result<Vec<docs::Unit>> {
    let cwd = std::env::current_dir()?;
    let scope: Vec<PathBuf> = match path {
        Some(p) => {
            let abs = if p.is_absolute() { p.to_owned() } else { cwd.join(p) };
            if !abs.is_dir() {
                anyhow::bail!("{}: not a folder (docs are kept per folder of source)", p.display());
            }
            vec![abs]
        }
        None => vec![project.root.clone()],
    };
    let mut exclude = crate::memory::store_files();
    exclude.push(out.to_owned());
    let scan = noesis_frames::scan::scan_excluding(&project.root, &scope, &exclude)?;
    Ok(docs::units(scan.files.keys().map(String::as_str)))
}

/// A scope folder as the project names it (`None`: the whole project).
fn scope_name(project: &noesis_frames::project::Project, path: Option<&Path>) -> anyhow::Result<Option<String>> {
    let Some(p) = path else { return Ok(None) };
    let abs = if p.is_absolute() { p.to_owned() } else { std::env::current_dir()?.join(p) };
    let abs = abs.canonicalize().unwrap_or(abs);
    Ok(Some(noesis_frames::project::relative_path(&project.root, &abs)))
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
    let units = code_units(&s.project, a.path.as_deref(), &out_dir)?;
    let think = model(search, "docs-node", &a.provider, &s.config)?;
    let mut core =
        Core::open(s.store.as_ref(), &s.project, None, &crate::memory::store_files(), Timestamp::now()).await?;
    let plugin = Docs::new(&s.project.root, &out_dir);
    let bar = crate::progress::Progress::spinner(a.quiet, &format!("docs: {} units", units.len()));
    let under = scope_name(&s.project, a.path.as_deref())?;
    let report = docs::sync(&mut core, &plugin, &think, &units, under.as_deref(), &|unit| {
        bar.say(&format!("docs: writing {unit}"));
    })
    .await?;
    bar.finish();
    let code = if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
    if a.json {
        out::json(
            &json!({"out": out_dir, "removed": report.removed, "regenerated": report.regenerated.iter().map(|(u, w)| json!({"unit": u, "why": w})).collect::<Vec<_>>(),
                          "kept": report.kept, "failed": report.failed.iter().map(|(u, e)| json!({"unit": u, "error": e})).collect::<Vec<_>>()}),
            true,
        )?;
        return Ok(code);
    }
    let mut text = String::new();
    for (u, why) in &report.regenerated {
        text.push_str(&format!("wrote  {u}  ({why})\n"));
    }
    for (u, e) in &report.failed {
        text.push_str(&format!("failed {u}  {e}\n"));
    }
    for u in &report.removed {
        text.push_str(&format!("removed {u}  (its files are gone)\n"));
    }
    text.push_str(&format!(
        "{} regenerated, {} unchanged, {} removed, {} failed; nodes in {}\n",
        report.regenerated.len(),
        report.kept.len(),
        report.removed.len(),
        report.failed.len(),
        out_dir.display()
    ));
    out::data(&text)?;
    Ok(code)
}

async fn docs_status(s: &Setup, a: StatusArgs) -> anyhow::Result<ExitCode> {
    let out_dir = docs_dir(a.out.as_deref(), &s.config, &s.project.root);
    let units = code_units(&s.project, a.path.as_deref(), &out_dir)?;
    let core = Core::open(s.store.as_ref(), &s.project, None, &crate::memory::store_files(), Timestamp::now()).await?;
    let plugin = Docs::new(&s.project.root, &out_dir);
    let mut stale = Vec::new();
    let under = scope_name(&s.project, a.path.as_deref())?;
    for (module, _) in docs::orphans(&plugin, &units, under.as_deref()) {
        stale.push((module, "its files are gone".to_owned()));
    }
    for u in &units {
        if let Some(why) = docs::staleness(&core, &plugin, u).await? {
            stale.push((u.path.clone(), why.to_string()));
        }
    }
    if a.json {
        out::json(
            &json!({"units": units.len(), "stale": stale.iter().map(|(u, w)| json!({"unit": u, "why": w})).collect::<Vec<_>>()}),
            true,
        )?;
    } else {
        let mut text = String::new();
        for (u, why) in &stale {
            text.push_str(&format!("stale  {u}  ({why})\n"));
        }
        text.push_str(&format!("{} of {} nodes stale\n", stale.len(), units.len()));
        out::data(&text)?;
    }
    Ok(if stale.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
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

/// No model: the slice's input is the reply (for plugins that only shape
/// and keep, and for trying a plugin without a provider).
struct Echo;

#[async_trait]
impl Think for Echo {
    async fn think(&self, slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        Ok(Thought { raw: slice.input.clone(), ..Thought::default() })
    }
}

pub(crate) fn external(name: &str, config: &Config) -> anyhow::Result<ExternalPlugin> {
    let Some(entry) = config.plugins.get(name) else {
        let known: Vec<&str> = config.plugins.keys().map(String::as_str).collect();
        anyhow::bail!(
            "no plugin `{name}` in the config{}\nhint: add [plugins.{name}] with `command = [\"python3\", \"plugin.py\"]` to noesis.toml",
            if known.is_empty() { String::new() } else { format!(" (configured: {})", known.join(", ")) }
        );
    };
    Ok(ExternalPlugin::new(ExternalSpec {
        name: name.to_owned(),
        command: entry.command.clone(),
        cwd: None,
        timeout: Duration::from_secs(entry.timeout_seconds.unwrap_or(30)),
    }))
}

pub(crate) fn plugin(search: &SearchPath, a: PluginArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::memory::runtime()?;
    rt.block_on(async move {
        match a.command {
            PluginSub::List { json } => {
                let cwd = std::env::current_dir()?;
                let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
                let config = crate::config::load(&env, &cwd)?.config;
                let mut rows = vec![
                    json!({"name": "docs", "kind": "built-in", "command": "noesis docs sync|status"}),
                    json!({"name": "recall", "kind": "built-in", "command": "noesis ask"}),
                    json!({"name": "review", "kind": "built-in", "command": "noesis review"}),
                    json!({"name": "testgen", "kind": "built-in", "command": "noesis testgen"}),
                ];
                for (name, e) in &config.plugins {
                    rows.push(
                        json!({"name": name, "kind": "program", "command": e.command.join(" "), "module": e.module}),
                    );
                }
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
                let plugin = external(&r.name, &s.config)?;
                let raw: Value = match &r.input {
                    Some(t) => serde_json::from_str(t).context("--input must be JSON")?,
                    None => json!({"query": r.query}),
                };
                let module = r.module.clone().or_else(|| s.config.plugins[&r.name].module.clone());
                let mut core =
                    Core::open(s.store.as_ref(), &s.project, None, &crate::memory::store_files(), Timestamp::now())
                        .await?;
                let step = Step { query: r.query.clone(), raw: &raw, parent: None };
                let outcome = match module {
                    Some(m) => {
                        core.step(&plugin, step, &model(search, &m, &r.provider, &s.config)?, Timestamp::now()).await?
                    }
                    None => core.step(&plugin, step, &Echo, Timestamp::now()).await?,
                };
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

fn git_diff(root: &Path, range: Option<&str>) -> anyhow::Result<String> {
    let mut cmd = std::process::Command::new("git");
    cmd.current_dir(root).args(["diff", "--no-color", "--no-ext-diff"]);
    cmd.arg(range.unwrap_or("HEAD"));
    let out = cmd.output().context("run git (is it installed?)")?;
    if !out.status.success() {
        anyhow::bail!("git diff {}: {}", range.unwrap_or("HEAD"), String::from_utf8_lossy(&out.stderr).trim());
    }
    String::from_utf8(out.stdout).context("git diff printed something that is not UTF-8")
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
            None => git_diff(&s.project.root, a.git.as_deref())?,
        };
        let think = model(search, "review-diff", &a.provider, &s.config)?;
        let mut core =
            Core::open(s.store.as_ref(), &s.project, None, &crate::memory::store_files(), Timestamp::now()).await?;
        let plugin = noesis_plugin::review::Review::new(&s.project.root);
        let bar = crate::progress::Progress::spinner(a.quiet, "review");
        let report =
            noesis_plugin::review::review(&mut core, &plugin, &think, &diff, &|f| bar.say(&format!("review: {f}")))
                .await?;
        bar.finish();
        let findings = report.findings();
        let summary = format!(
            "{} file(s) reviewed ({} reused), {} finding(s), {} promoted to principles",
            report.files.len(),
            report.files.iter().filter(|f| f.reused).count(),
            findings.len(),
            report.promotions.len()
        );
        let text = match a.format.as_str() {
            "json" => {
                let mut v = noesis_review::to_json(&findings, &summary);
                v["files"] = json!(
                    report
                        .files
                        .iter()
                        .map(|f| json!({"path": f.path, "frame_id": f.frame.frame_id, "reused": f.reused}))
                        .collect::<Vec<_>>()
                );
                v["promotions"] = json!(report.promotions.iter().map(|p| p.principle()).collect::<Vec<_>>());
                v["failed"] =
                    json!(report.failed.iter().map(|(f, e)| json!({"path": f, "error": e})).collect::<Vec<_>>());
                v["skipped"] =
                    json!(report.skipped.iter().map(|(f, e)| json!({"path": f, "why": e})).collect::<Vec<_>>());
                format!("{}\n", serde_json::to_string_pretty(&v)?)
            }
            "sarif" => {
                let tool = noesis_review::SarifTool {
                    name: "noesis",
                    version: env!("CARGO_PKG_VERSION"),
                    information_uri: None,
                };
                format!(
                    "{}\n",
                    serde_json::to_string_pretty(&noesis_review::to_sarif(&tool, &findings, &report.principles))?
                )
            }
            _ => {
                let mut t = noesis_review::render_text(&findings, &summary);
                for p in &report.promotions {
                    t.push_str(&format!("promoted: {}\n", p.principle().text));
                }
                for (f, e) in &report.failed {
                    t.push_str(&format!("failed: {f}: {e}\n"));
                }
                t
            }
        };
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
        let cwd = std::env::current_dir()?;
        let out_dir = match &a.out {
            Some(p) if p.is_absolute() => p.clone(),
            Some(p) => cwd.join(p),
            None => s.project.root.join("tests/noesis"),
        };
        let think = model(search, "testgen-spec", &a.provider, &s.config)?;
        let parts: Arc<dyn noesis_plugin::PartHasher> = Arc::new(noesis_plugin::testgen::Signatures);
        let mut core =
            Core::open(s.store.as_ref(), &s.project, Some(parts), &crate::memory::store_files(), Timestamp::now())
                .await?;
        let files: Vec<String> = if a.changed {
            let mut f: Vec<String> = core
                .changed_files()
                .iter()
                .filter(|p| noesis_code::Lang::from_path(Path::new(p)).is_some())
                .cloned()
                .collect();
            for i in core.invalidated() {
                if let Some(fr) = core.frame(&i.frame_id).await?
                    && let Some(rest) = fr.query.strip_prefix("testgen: ")
                    && let Some((file, _)) = rest.split_once(' ')
                {
                    f.push(file.to_owned());
                }
            }
            f.sort();
            f.dedup();
            f
        } else {
            let scope: Vec<PathBuf> =
                a.paths.iter().map(|p| if p.is_absolute() { p.clone() } else { cwd.join(p) }).collect();
            for p in &scope {
                if !p.exists() {
                    anyhow::bail!("{}: no such file or folder", p.display());
                }
            }
            let mut exclude = crate::memory::store_files();
            exclude.push(out_dir.clone());
            let scan = noesis_frames::scan::scan_excluding(&s.project.root, &scope, &exclude)?;
            scan.files.keys().filter(|p| noesis_code::Lang::from_path(Path::new(p)).is_some()).cloned().collect()
        };
        let plugin = noesis_plugin::testgen::Testgen::new(&s.project.root, &out_dir);
        let bar = crate::progress::Progress::spinner(a.quiet, "testgen");
        let report = noesis_plugin::testgen::generate(&mut core, &plugin, &think, &files, &|f| {
            bar.say(&format!("testgen: {f}"))
        })
        .await?;
        bar.finish();
        let code = if report.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
        if a.json {
            out::json(&serde_json::to_value(&report)?, true)?;
            return Ok(code);
        }
        let mut text = String::new();
        for (f, func, why) in &report.specified {
            text.push_str(&format!("spec   {f} {func}  ({why})\n"));
        }
        for (f, func, e) in &report.failed {
            text.push_str(&format!("failed {f} {func}  {e}\n"));
        }
        for w in &report.written {
            text.push_str(&format!("wrote  {w}\n"));
        }
        for w in &report.removed {
            text.push_str(&format!("removed {w}  (no function left to test)\n"));
        }
        text.push_str(&format!(
            "{} spec(s) written, {} kept, {} failed, {} test file(s) written\n",
            report.specified.len(),
            report.kept.len(),
            report.failed.len(),
            report.written.len()
        ));
        out::data(&text)?;
        Ok(code)
    })
}
