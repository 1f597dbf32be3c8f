//! `noesis migrate`: `noesis_dist::migrate` over the modules named, with
//! the plan and the backup printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use noesis_dist::migrate::{Migrator, every_module, plan};
use noesis_modules::search::{Found, SearchPath, is_module_dir};

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
        (None, _) => every_module(&search.dirs),
    };
    let migrator = Migrator {
        search_dirs: search.dirs.clone(),
        backups: crate::memory::home().ok().map(|h| h.join("backups")),
        observe: Some(crate::stop::observe_swap),
    };
    let mut failed = 0;
    let mut migrated = 0;
    for dir in &dirs {
        match one(&migrator, dir, a.dry_run) {
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

/// Migrates one module folder; whether it was (or, dry, would be) migrated.
fn one(migrator: &Migrator, dir: &Path, dry_run: bool) -> anyhow::Result<bool> {
    let planned = plan(dir)?;
    let Some(migration) = &planned.migration else {
        out::note(&format!("note: {} ({}) is already v2.2; left alone", planned.module.name, dir.display()));
        return Ok(false);
    };
    out::data(&format!(
        "{} {} ({} → v2.2) at {}",
        if dry_run { "would migrate" } else { "migrating" },
        migration.name,
        migration.from,
        dir.display()
    ))?;
    for c in &migration.changes {
        out::data(&format!("  - {c}"))?;
    }
    if dry_run {
        out::note("dry run: nothing was written");
        return Ok(true);
    }
    let backup =
        migrator.apply(dir, &planned.module, migration, &stamp(), &mut |done| out::note(&format!("note: {done}")))?;
    out::data(&format!("migrated {} to v2.2 at {}", migration.name, dir.display()))?;
    out::data(&format!("backup: {}", backup.display()))?;
    Ok(true)
}
