//! `noesis install | update | remove | versions`: modules from git
//! repositories (`github:OWNER/REPO[/PATH][@REF]`, any git URL with
//! `--path`, `@^RANGE` over semver tags) and folders, into
//! `./cognitive/modules` (or `~/.cognitive/modules` with `--global`), with
//! `cognitive.lock` beside them.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use noesis_dist::Installer;
use serde_json::json;

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Where {
    /// Into ~/.cognitive/modules instead of ./cognitive/modules.
    #[arg(long)]
    global: bool,
    /// Fail instead of changing cognitive.lock.
    #[arg(long)]
    locked: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// The registry index to look names up in (a URL or a file) [default: `[registry] url`].
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    /// Words to look for in names, descriptions and tags.
    query: String,
    /// The registry index [default: `[registry] url`].
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RegistryArgs {
    /// The registry index [default: `[registry] url`].
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Fetch the index now instead of using the cached copy.
    #[arg(long)]
    refresh: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct InstallArgs {
    /// github:OWNER/REPO[/PATH][@REF|@^RANGE], a git URL[@REF], or a folder; none: what cognitive.lock lists.
    source: Option<String>,
    /// The module's folder inside a git repository.
    #[arg(long, value_name = "PATH")]
    path: Option<String>,
    /// Install under this name.
    #[arg(long, value_name = "N")]
    name: Option<String>,
    #[command(flatten)]
    at: Where,
}

#[derive(Debug, clap::Args)]
pub(crate) struct UpdateArgs {
    /// The module (see cognitive.lock).
    name: Option<String>,
    /// Every module in cognitive.lock.
    #[arg(long, conflicts_with = "name")]
    all: bool,
    /// The newest version there is, not only what the recorded range allows.
    #[arg(long)]
    latest: bool,
    #[command(flatten)]
    at: Where,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RemoveArgs {
    /// The module.
    name: String,
    #[command(flatten)]
    at: Where,
}

#[derive(Debug, clap::Args)]
pub(crate) struct VersionsArgs {
    /// github:OWNER/REPO or a git URL.
    source: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The registry named by `flag`, else by `[registry] url`.
fn registry(flag: Option<&str>) -> anyhow::Result<Option<noesis_dist::registry::Registry>> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let config = crate::config::load(&env, &std::env::current_dir()?)?.config;
    let Some(url) = flag.map(str::to_owned).or(config.registry.url) else { return Ok(None) };
    // A file is named relative to where the command runs.
    let url = if url.contains("://") { url } else { std::path::absolute(&url)?.to_string_lossy().into_owned() };
    Ok(Some(noesis_dist::registry::Registry {
        url,
        cache_dir: crate::memory::home()?.join("registry"),
        ttl: std::time::Duration::from_secs(config.registry.ttl_seconds.unwrap_or(3600)),
    }))
}

pub(crate) fn installer_for(global: bool) -> anyhow::Result<Installer> {
    installer(&Where { global, locked: false, json: false, registry: None })
}

fn installer(at: &Where) -> anyhow::Result<Installer> {
    let base = if at.global {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).context("--global: no HOME")?;
        PathBuf::from(home).join(".cognitive")
    } else {
        std::env::current_dir()?.join("cognitive")
    };
    Ok(Installer {
        modules_dir: base.join("modules"),
        lock_path: base.join("cognitive.lock"),
        locked: at.locked,
        registry: registry(at.registry.as_deref())?,
        observe: Some(crate::stop::observe_swap),
    })
}

fn recovered(i: &Installer) -> anyhow::Result<()> {
    for line in i.recover()? {
        out::note(&format!("note: {line}"));
    }
    Ok(())
}

fn report(done: &[noesis_dist::Installed], as_json: bool) -> anyhow::Result<()> {
    if as_json {
        let rows: Vec<_> = done
            .iter()
            .map(|d| {
                json!({"name": d.name, "source": d.entry.source, "path": d.entry.path, "commit": d.entry.commit,
                       "version": d.entry.version, "sha256": d.entry.sha256, "replaced": d.replaced})
            })
            .collect();
        out::json(&json!(rows), true)?;
        return Ok(());
    }
    let mut text = String::new();
    for d in done {
        text.push_str(&d.summary());
        text.push('\n');
    }
    if text.is_empty() {
        text.push_str("nothing to install\n");
    }
    out::data(&text)?;
    Ok(())
}

pub(crate) fn install(a: InstallArgs) -> anyhow::Result<ExitCode> {
    let i = installer(&a.at)?;
    recovered(&i)?;
    let done = match &a.source {
        Some(s) => vec![i.install(s, a.path.as_deref(), a.name.as_deref())?],
        None => i.install_locked()?,
    };
    report(&done, a.at.json)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn update(a: UpdateArgs) -> anyhow::Result<ExitCode> {
    let i = installer(&a.at)?;
    recovered(&i)?;
    let names: Vec<String> = match (&a.name, a.all) {
        (Some(n), _) => vec![n.clone()],
        (None, true) => i.lockfile()?.modules.keys().cloned().collect(),
        (None, false) => anyhow::bail!("name a module to update, or --all"),
    };
    let mut done = Vec::new();
    for n in names {
        done.push(i.update(&n, a.latest)?);
    }
    report(&done, a.at.json)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn remove(a: RemoveArgs) -> anyhow::Result<ExitCode> {
    let i = installer(&a.at)?;
    recovered(&i)?;
    i.remove(&a.name)?;
    if a.at.json {
        out::json(&json!({"removed": a.name}), true)?;
    } else {
        out::data(&format!("removed {}", a.name))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn versions(a: VersionsArgs) -> anyhow::Result<ExitCode> {
    let (url, tags) = noesis_dist::install::versions(&a.source)?;
    if a.json {
        out::json(
            &json!(tags.iter().map(|(v, t)| json!({"version": v.to_string(), "tag": t})).collect::<Vec<_>>()),
            true,
        )?;
    } else if tags.is_empty() {
        out::note(&format!("{url} has no semver tags"));
    } else {
        out::data(&tags.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join("\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn add(a: InstallArgs) -> anyhow::Result<ExitCode> {
    match &a.source {
        Some(s) if s.starts_with("github:") => install(a),
        _ => anyhow::bail!("`noesis add` takes github:OWNER/REPO[/PATH][@REF]; `noesis install` takes any source"),
    }
}

pub(crate) fn search(a: SearchArgs) -> anyhow::Result<ExitCode> {
    let r = registry(a.registry.as_deref())?
        .context("no registry is configured: set [registry] url in noesis.toml or pass --registry URL")?;
    let index = r.load(false).map_err(|e| anyhow::anyhow!(e))?;
    let hits = noesis_dist::registry::search(&index.modules, &a.query);
    if a.json {
        let rows: Vec<_> = hits
            .iter()
            .map(|(n, e)| {
                json!({"name": n, "version": e.version, "description": e.description, "tags": e.tags,
                                 "source": e.source, "tarball": e.tarball})
            })
            .collect();
        out::json(&json!(rows), true)?;
    } else if hits.is_empty() {
        out::note(&format!("nothing in {} matches `{}`", r.url, a.query));
    } else {
        let text: Vec<String> = hits
            .iter()
            .map(|(n, e)| format!("{n:<24} {:<10} {}", e.version.as_deref().unwrap_or("-"), e.description))
            .collect();
        out::data(&text.join("\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn registry_status(a: RegistryArgs) -> anyhow::Result<ExitCode> {
    let r = registry(a.registry.as_deref())?
        .context("no registry is configured: set [registry] url in noesis.toml or pass --registry URL")?;
    let index = r.load(a.refresh).map_err(|e| anyhow::anyhow!(e))?;
    let at = index.fetched.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let at = noesis_frames::Timestamp::from_millis(i64::try_from(at).unwrap_or(i64::MAX)).to_string();
    if a.json {
        out::json(
            &json!({"url": r.url, "modules": index.modules.len(), "fetched_at": at, "cached": index.cached,
                           "ttl_seconds": r.ttl.as_secs()}),
            true,
        )?;
    } else {
        out::data(&format!(
            "{}: {} module(s), fetched {at}{}",
            r.url,
            index.modules.len(),
            if index.cached { " (cached)" } else { "" }
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
