//! `noesis skills list|show`: the Agent Skills a run over this folder is
//! offered (noesis-skills finds and reads them; this prints).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use noesis_skills::{Found, Roots, Skill, discover};
use serde_json::{Value, json};

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// List the skills found (.noesis/skills, .claude/skills, then ~/.noesis/skills): name, where, description.
    List(ListArgs),
    /// Show one skill: its front matter, body and files.
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Print JSON (one array) instead of a table.
    #[arg(long)]
    json: bool,
    /// The project folder (default: the current one).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The skill's name.
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// The project folder (default: the current one).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    match a.command {
        Sub::List(a) => list(&a),
        Sub::Show(a) => show(&a),
    }
}

/// The skills of `workspace` and the person's own, with every problem and
/// shadowed skill said on stderr.
fn found(workspace: Option<&Path>) -> anyhow::Result<(PathBuf, Found)> {
    let workspace = match workspace {
        Some(w) => w.to_path_buf(),
        None => std::env::current_dir().context("no current directory")?,
    };
    let workspace = workspace
        .canonicalize()
        .with_context(|| format!("--workspace {}: not a usable folder", workspace.display()))?;
    let found = discover(&Roots { workspace: workspace.clone(), home: crate::memory::home().ok() });
    for p in &found.problems {
        out::note(&format!("warning: skill left out: {}: {}: {}", shown(&workspace, &p.path), p.field, p.message));
    }
    for s in &found.shadowed {
        out::note(&format!(
            "note: skill `{}` in {} is shadowed by the one in {}",
            s.name,
            shown(&workspace, &s.dir),
            shown(&workspace, &s.by)
        ));
    }
    Ok((workspace, found))
}

/// `path` relative to the workspace when inside it.
fn shown(workspace: &Path, path: &Path) -> String {
    path.strip_prefix(workspace).unwrap_or(path).display().to_string()
}

fn row(workspace: &Path, s: &Skill) -> Value {
    json!({
        "name": s.name,
        "description": s.description,
        "origin": s.origin.as_str(),
        "location": shown(workspace, &s.dir),
        "tools": s.tools,
        "modules": s.modules,
    })
}

fn list(a: &ListArgs) -> anyhow::Result<ExitCode> {
    let (workspace, found) = found(a.workspace.as_deref())?;
    if a.json {
        let rows: Vec<Value> = found.skills.iter().map(|s| row(&workspace, s)).collect();
        out::json(&json!(rows), true)?;
        return Ok(ExitCode::SUCCESS);
    }
    if found.skills.is_empty() {
        out::note("no skills (looked in .noesis/skills, .claude/skills and the noesis home's skills/)");
        return Ok(ExitCode::SUCCESS);
    }
    // The location goes last: a home folder's path is as long as it is.
    let width = found.skills.iter().map(|s| s.name.len()).max().unwrap_or(4).max(4);
    let said: Vec<String> = found.skills.iter().map(|s| one_line(&s.description, 72)).collect();
    let wide = said.iter().map(|d| d.chars().count()).max().unwrap_or(11).max(11);
    out::data(&format!("{:width$}  {:7}  {:wide$}  LOCATION", "NAME", "FROM", "DESCRIPTION"))?;
    for (s, description) in found.skills.iter().zip(&said) {
        let place = shown(&workspace, &s.dir);
        out::data(&format!("{:width$}  {:7}  {description:wide$}  {place}", s.name, s.origin.as_str()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn one_line(text: &str, max: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= max { line } else { format!("{}…", line.chars().take(max - 1).collect::<String>()) }
}

fn show(a: &ShowArgs) -> anyhow::Result<ExitCode> {
    let (workspace, found) = found(a.workspace.as_deref())?;
    let Some(skill) = found.get(&a.name) else {
        // A broken SKILL.md of that name was just warned about: say so.
        let broken = found.problems.iter().any(|p| p.path.parent().and_then(Path::file_name) == Some(a.name.as_ref()));
        let hint = if broken {
            format!(
                "its SKILL.md has the problems warned about above; fix them and `noesis skills show {}` again",
                a.name
            )
        } else if found.skills.is_empty() {
            "no skills are found here; a skill is a folder .noesis/skills/NAME holding a SKILL.md".to_owned()
        } else {
            format!("the skills are {} (`noesis skills list`)", found.names().join(", "))
        };
        anyhow::bail!("no skill `{}`\nhint: {hint}", a.name);
    };
    let files = skill.files()?;
    if a.json {
        let mut v = row(&workspace, skill);
        v["body"] = json!(skill.body());
        v["files"] = json!(files.list);
        v["more_files"] = json!(files.more);
        out::json(&v, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!(
        "{} ({}: {})\n  description: {}\n",
        skill.name,
        skill.origin.as_str(),
        shown(&workspace, &skill.dir),
        one_line(&skill.description, usize::MAX)
    );
    let list = |v: &[String]| if v.is_empty() { "-".to_owned() } else { v.join(", ") };
    text.push_str(&format!("  tools:       {}\n  modules:     {}\n", list(&skill.tools), list(&skill.modules)));
    let more = if files.more { format!(" (only the first {})", files.list.len()) } else { String::new() };
    text.push_str(&format!("  files:       {}{more}\n\n{}", list(&files.list), skill.body()));
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}
