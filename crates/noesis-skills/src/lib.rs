//! Agent Skills folders, found and read.
//!
//! A skill is a folder holding a `SKILL.md` — front matter with `name` and
//! `description` (and, for noesis, the `tools` and `modules` it needs;
//! Claude's `allowed-tools` counts as tools) above a Markdown body — and
//! any other files the body refers to. [`discover`] looks in
//! `<workspace>/.noesis/skills`, `<workspace>/.claude/skills` and
//! `<noesis home>/skills`, in that order: the first skill of a name wins and
//! the others are [`Shadowed`]. [`parse`] is the pure reading of one
//! `SKILL.md`.
//!
//! **Architecture invariant:** reading only, and never the first error
//! only: a broken `SKILL.md` is a [`Problem`] naming its file and field,
//! and every other skill is still found. Nothing outside a skill's folder
//! is read through it (paths go through `noesis_fs::Workspace::confine`;
//! linked skill folders are refused). The crate reads no environment: the
//! caller says where the noesis home is.
//!
//! ```
//! use noesis_skills::{Origin, Roots, discover};
//!
//! let ws = tempfile::tempdir()?;
//! let dir = ws.path().join(".noesis/skills/release-notes");
//! std::fs::create_dir_all(&dir)?;
//! std::fs::write(
//!     dir.join("SKILL.md"),
//!     "---\nname: release-notes\ndescription: Writes release notes from the git log.\n\
//!      tools: [run_command]\n---\nRead `git log`, group by kind, see template.md.\n",
//! )?;
//! std::fs::write(dir.join("template.md"), "## Added\n")?;
//!
//! let found = discover(&Roots { workspace: ws.path().to_owned(), home: None });
//! assert!(found.problems.is_empty());
//! let skill = found.get("release-notes").unwrap();
//! assert_eq!((skill.origin, skill.tools.as_slice()), (Origin::Project, &["run_command".to_owned()][..]));
//! assert!(skill.body().starts_with("Read `git log`"));
//! assert_eq!(skill.files()?.list, ["template.md"]);
//! assert_eq!(skill.read_file("template.md", 4096)?.text, "## Added\n");
//! assert!(skill.read_file("../../../etc/passwd", 4096).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod discover;
mod parse;

pub use discover::{
    Files, Found, MAX_FILES, MAX_SKILL_MD, Origin, Problem, Roots, Shadowed, Skill, SkillError, SkillFile, discover,
};
pub use parse::{FieldError, MAX_DESCRIPTION, MAX_NAME, SkillMd, check_name, parse};
