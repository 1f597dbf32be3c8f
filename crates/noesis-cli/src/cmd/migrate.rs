//! `noesis migrate`: the file system side of `noesis_modules::migrate`.
//!
//! Nothing the user has is touched until the new module exists in full and
//! has loaded as v2.2 with the same prompt and rules. The order is:
//! 1. with the module's folder locked against other processes, stage the new
//!    module in its work area (`noesis_dist::swap`: `<search dir>/.noesis-swap/`,
//!    the same file system as the module);
//! 2. load it and compare it with the original;
//! 3. copy the original to `$NOESIS_HOME/backups/<name>-<stamp>/` (outside
//!    every search path, so the backup is never picked up as a module),
//!    under a temporary name renamed into place when complete;
//! 4. commit and swap: the staged folder and the original are exchanged in
//!    one rename, and the original goes with the work area.
//!
//! The module folder is therefore always either the complete original or the
//! complete new module, and a run cut short is finished (committed) or
//! dropped (not yet) by the next `noesis migrate` or install in that folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use noesis_modules::migrate::{MIGRATION_INPUTS, Migration, ModuleFiles, migrate};
use noesis_modules::search::{Found, SearchPath};
use noesis_modules::{Format, load_dir};

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Module name, or a path to a module folder.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    module: Option<String>,
    /// Migrate every module on the search path that is not v2.2 (never the built-ins).
    #[arg(long)]
    all: bool,
    /// Print what would change and write nothing.
    #[arg(long)]
    dry_run: bool,
}

const MARKERS: [&str; 3] = ["module.yaml", "MODULE.md", "module.md"];

fn is_module_dir(p: &Path) -> bool {
    MARKERS.iter().any(|m| p.join(m).is_file())
}

fn noesis_home() -> anyhow::Result<PathBuf> {
    crate::memory::home().map_err(|_| anyhow!("cannot place the backup: set NOESIS_HOME or HOME"))
}

/// `20261121T110300Z`: sortable, and valid in a file name everywhere.
fn stamp() -> String {
    noesis_frames::Timestamp::now().to_string().split('.').next().unwrap_or_default().replace(['-', ':'], "") + "Z"
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    if !a.dry_run {
        // First, so a module an interrupted run left aside is found again.
        let mut parents: Vec<PathBuf> = search.dirs.clone();
        if let Some(name) = &a.module {
            parents.extend(Path::new(name).parent().filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf));
        }
        for parent in &parents {
            let area = noesis_dist::swap::Area::new(parent).observed(Some(crate::stop::observe_swap));
            for done in area.recover().with_context(|| format!("{}: cannot recover", parent.display()))? {
                out::note(&format!("note: {done}"));
            }
        }
    }
    let dirs = match (&a.module, a.all) {
        (Some(name), _) => match search.resolve(name)? {
            Found::Builtin(n) => {
                out::note(&format!(
                    "note: `{n}` is a built-in module: already v2.2 and part of the binary; nothing to migrate"
                ));
                return Ok(ExitCode::SUCCESS);
            }
            Found::Dir(d) if is_module_dir(&d) => vec![d],
            Found::Dir(d) => bail!("{}: not a module (no module.yaml, MODULE.md or module.md)", d.display()),
        },
        (None, _) => every_module(search),
    };
    let mut failed = 0;
    let mut migrated = 0;
    for dir in &dirs {
        match one(search, dir, a.dry_run) {
            Ok(true) => migrated += 1,
            Ok(false) => {}
            Err(e) if a.all => {
                failed += 1;
                out::error(&format!("{e:#}"));
            }
            Err(e) => return Err(e),
        }
    }
    if a.all {
        let verb = if a.dry_run { "to migrate" } else { "migrated" };
        out::note(&format!("{migrated} {verb}, {failed} failed, {} already v2.2", dirs.len() - migrated - failed));
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// Every module folder on the search path, shadowed ones included: each is
/// a module someone may load with a path.
fn every_module(search: &SearchPath) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for d in &search.dirs {
        let Ok(entries) = std::fs::read_dir(d) else { continue };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) && is_module_dir(p))
            .collect();
        dirs.sort();
        for p in dirs {
            let canon = p.canonicalize().unwrap_or_else(|_| p.clone());
            if !found.iter().any(|f: &PathBuf| f.canonicalize().is_ok_and(|c| c == canon)) {
                found.push(p);
            }
        }
    }
    found
}

fn read_files(dir: &Path) -> anyhow::Result<ModuleFiles> {
    let mut files = ModuleFiles::new();
    for name in MIGRATION_INPUTS {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                files.insert((*name).to_owned(), text);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow!("{}: cannot read: {e}", path.display())),
        }
    }
    Ok(files)
}

/// Migrates one module folder; whether it was (or, dry, would be) migrated.
fn one(search: &SearchPath, dir: &Path, dry_run: bool) -> anyhow::Result<bool> {
    let module = load_dir(dir).with_context(|| format!("cannot migrate {}: it does not load", dir.display()))?;
    let files = read_files(dir)?;
    let Some(plan) = migrate(&module, &files).with_context(|| format!("cannot migrate {}", dir.display()))? else {
        out::note(&format!("note: {} ({}) is already v2.2; left alone", module.name, dir.display()));
        return Ok(false);
    };
    out::data(&format!(
        "{} {} ({} → v2.2) at {}",
        if dry_run { "would migrate" } else { "migrating" },
        plan.name,
        plan.from,
        dir.display()
    ))?;
    for c in &plan.changes {
        out::data(&format!("  - {c}"))?;
    }
    if dry_run {
        out::note("dry run: nothing was written");
        return Ok(true);
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let folder = dir.file_name().ok_or_else(|| anyhow!("{}: not a module folder", dir.display()))?;
    let area = noesis_dist::swap::Area::new(parent).observed(Some(crate::stop::observe_swap));
    let held = area.lock().with_context(|| format!("{}: cannot lock", parent.display()))?;
    for done in held.recover()? {
        out::note(&format!("note: {done}"));
    }
    let staged = held.stage(&folder.to_string_lossy())?;
    let result = stage(dir, staged.path(), &plan)
        .and_then(|()| check(&module, staged.path()))
        .and_then(|()| back_up(search, dir, &plan.name, &stamp()));
    let backup = match result {
        Ok(b) => b,
        Err(e) => {
            held.discard(staged);
            return Err(e.context(format!("cannot migrate {}; nothing was changed", dir.display())));
        }
    };
    held.replace(staged, Vec::new()).with_context(|| {
        format!(
            "{}: cannot move the migrated module into place; the next `noesis migrate` finishes it, and {} holds the original",
            dir.display(),
            backup.display()
        )
    })?;
    out::data(&format!("migrated {} to v2.2 at {}", plan.name, dir.display()))?;
    out::data(&format!("backup: {}", backup.display()))?;
    Ok(true)
}

/// `path`, or `path-2`, `path-3`, … when it exists (two runs in one second).
fn unique(path: &Path) -> PathBuf {
    let mut candidate = path.to_path_buf();
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{}-{n}", path.display()));
        n += 1;
    }
    candidate
}

/// A copy of the module with the legacy files left out and the new files
/// written over it.
fn stage(dir: &Path, staged: &Path, plan: &Migration) -> anyhow::Result<()> {
    copy_tree(dir, staged, &|rel| plan.remove.iter().any(|r| Path::new(r) == rel))?;
    for (rel, text) in &plan.write {
        let path = staged.join(rel);
        write_synced(&path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}

fn write_synced(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// Copies `from` to `to` (which must not exist), skipping paths relative to
/// `from` that `skip` names. Links are copied as links.
fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> anyhow::Result<()> {
    fn walk(root: &Path, from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> anyhow::Result<()> {
        std::fs::create_dir_all(to).with_context(|| format!("{}: cannot create", to.display()))?;
        for entry in std::fs::read_dir(from).with_context(|| format!("{}: cannot read", from.display()))? {
            let entry = entry.with_context(|| format!("{}: cannot read", from.display()))?;
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            if skip(rel) {
                continue;
            }
            let target = to.join(entry.file_name());
            let kind = entry.file_type().with_context(|| format!("{}: cannot read", path.display()))?;
            if kind.is_dir() {
                walk(root, &path, &target, skip)?;
            } else if kind.is_symlink() {
                let link = std::fs::read_link(&path).with_context(|| format!("{}: cannot read", path.display()))?;
                symlink(&link, &target).with_context(|| format!("{}: cannot create", target.display()))?;
            } else {
                std::fs::copy(&path, &target).with_context(|| format!("{}: cannot copy", path.display()))?;
            }
        }
        Ok(())
    }
    walk(from, from, to, skip)
}

#[cfg(unix)]
fn symlink(link: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(link, at)
}

#[cfg(not(unix))]
fn symlink(link: &Path, at: &Path) -> std::io::Result<()> {
    std::fs::copy(link, at).map(|_| ())
}

/// The staged module must load as v2.2 and run with the original's prompt
/// and rules; anything else is a bug in the migration, caught before the
/// original is touched.
fn check(original: &noesis_modules::Module, staged: &Path) -> anyhow::Result<()> {
    let m = load_dir(staged).context("the migrated module does not load")?;
    if m.format != Format::V22 {
        bail!("the migrated module loads as {}, not v2.2", m.format);
    }
    if m.prompt != original.prompt {
        bail!("the migrated module's prompt differs from the original's");
    }
    if m.policy != original.policy {
        bail!("the migrated module's rules differ: {:?} became {:?}", original.policy, m.policy);
    }
    Ok(())
}

/// Copies the original to `$NOESIS_HOME/backups/<name>-<stamp>/`, refusing a
/// place inside the search path.
fn back_up(search: &SearchPath, dir: &Path, name: &str, stamp: &str) -> anyhow::Result<PathBuf> {
    let backups = noesis_home()?.join("backups");
    std::fs::create_dir_all(&backups)
        .with_context(|| format!("{}: cannot create the backup folder", backups.display()))?;
    let canon = backups.canonicalize().with_context(|| format!("{}: cannot resolve", backups.display()))?;
    for d in search.dirs.iter().chain(std::iter::once(&dir.to_path_buf())) {
        if let Ok(sd) = d.canonicalize()
            && canon.starts_with(&sd)
        {
            bail!(
                "the backup folder {} is inside the module search path ({}); set NOESIS_HOME to a folder outside it",
                backups.display(),
                d.display()
            );
        }
    }
    let target = unique(&canon.join(format!("{name}-{stamp}")));
    // Complete or clearly partial: copied under a temporary name, renamed when done.
    let partial = PathBuf::from(format!("{}.partial", target.display()));
    if let Err(e) = copy_tree(dir, &partial, &|_| false) {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e.context("cannot back up the original"));
    }
    std::fs::rename(&partial, &target).with_context(|| format!("{}: cannot create the backup", target.display()))?;
    Ok(target)
}
