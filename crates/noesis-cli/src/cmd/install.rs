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

fn installer(at: &Where) -> anyhow::Result<Installer> {
    let base = if at.global {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).context("--global: no HOME")?;
        PathBuf::from(home).join(".cognitive")
    } else {
        std::env::current_dir()?.join("cognitive")
    };
    Ok(Installer { modules_dir: base.join("modules"), lock_path: base.join("cognitive.lock"), locked: at.locked })
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
        let at = d.entry.version.clone().or_else(|| d.entry.commit.as_ref().map(|c| c[..c.len().min(12)].to_owned()));
        text.push_str(&format!(
            "{} {}{} ({})\n",
            if d.replaced { "updated" } else { "installed" },
            d.name,
            at.map(|v| format!(" {v}")).unwrap_or_default(),
            d.entry.source
        ));
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
    let url = match noesis_dist::Source::parse(&a.source, None)? {
        noesis_dist::Source::Git { url, .. } => url,
        noesis_dist::Source::Dir(_) => anyhow::bail!("{}: a folder has no versions; give a git source", a.source),
    };
    let mut tags: Vec<(semver::Version, String)> = noesis_dist::install::tags(&url)?
        .into_iter()
        .filter_map(|t| noesis_dist::version::of_tag(&t).map(|v| (v, t)))
        .collect();
    tags.sort();
    tags.reverse();
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
