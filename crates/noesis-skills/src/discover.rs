//! Where skills are found and what a skill holds on disk: the three skill
//! folders in order of precedence, each `SKILL.md` read and checked, and a
//! skill's other files listed and read without leaving its folder.

use std::path::{Path, PathBuf};

use crate::parse::{SkillMd, check_name, parse};

/// The largest `SKILL.md` read; a bigger one is a problem, not a skill.
pub const MAX_SKILL_MD: u64 = 256 * 1024;

/// The most files a skill's listing shows (its folder may hold more).
pub const MAX_FILES: usize = 200;

/// How deep under a skill's folder files are listed.
const MAX_DEPTH: usize = 8;

/// The most entries looked at in one walk, so a skill folder holding a
/// large tree costs a bounded amount before the listing is cut.
const MAX_WALKED: usize = 10_000;

/// Which skill folder a skill came from, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// `<workspace>/.noesis/skills`.
    Project,
    /// `<workspace>/.claude/skills`, read for compatibility.
    Claude,
    /// `<noesis home>/skills`, the person's own.
    User,
}

impl Origin {
    /// `project`, `claude` or `user`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Project => "project",
            Origin::Claude => "claude",
            Origin::User => "user",
        }
    }
}

/// The folders searched: a workspace and, when known, the noesis home
/// (`$NOESIS_HOME`, else `~/.noesis`; the caller resolves it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The project's folder.
    pub workspace: PathBuf,
    /// The noesis home; none: no user skills.
    pub home: Option<PathBuf>,
}

impl Roots {
    /// The skill folders, first wins.
    pub fn dirs(&self) -> Vec<(Origin, PathBuf)> {
        let mut dirs = vec![
            (Origin::Project, self.workspace.join(".noesis").join("skills")),
            (Origin::Claude, self.workspace.join(".claude").join("skills")),
        ];
        if let Some(home) = &self.home {
            dirs.push((Origin::User, home.join("skills")));
        }
        dirs
    }
}

/// A skill found: its front matter, where it is, and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name (its folder's name too).
    pub name: String,
    /// What it is for.
    pub description: String,
    /// The tools it names.
    pub tools: Vec<String>,
    /// The modules it names.
    pub modules: Vec<String>,
    /// Which skill folder it came from.
    pub origin: Origin,
    /// Its folder.
    pub dir: PathBuf,
    body: String,
    source: String,
}

impl Skill {
    /// Its `SKILL.md`.
    pub fn path(&self) -> PathBuf {
        self.dir.join("SKILL.md")
    }

    /// What follows the front matter.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The whole `SKILL.md` as it was read (what a digest of it covers).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The other files of its folder, relative to it with `/`, sorted;
    /// links are listed only when they lead to a file inside the folder,
    /// and never followed into folders.
    pub fn files(&self) -> Result<Files, SkillError> {
        let within = noesis_fs::Workspace::new(&self.dir).map_err(|e| self.io(&self.dir, &e.to_string()))?;
        let mut walk = noesis_fs::walk(&self.dir);
        // A skill's files are its own: the project's ignore files above it
        // (which often leave out `.claude/`) have no say over them.
        walk.parents(false).max_depth(Some(MAX_DEPTH));
        let mut list = Vec::new();
        let mut more = false;
        for (seen, entry) in walk.build().filter_map(Result::ok).enumerate() {
            if seen >= MAX_WALKED {
                more = true;
                break;
            }
            let Some(kind) = entry.file_type() else { continue };
            let Ok(rel) = entry.path().strip_prefix(&self.dir) else { continue };
            let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            let rel = rel.join("/");
            if rel.is_empty() || rel == "SKILL.md" {
                continue;
            }
            let file = kind.is_file() || (kind.is_symlink() && within.confine(&rel).is_ok_and(|real| real.is_file()));
            if file {
                list.push(rel);
            }
        }
        list.sort();
        if list.len() > MAX_FILES {
            list.truncate(MAX_FILES);
            more = true;
        }
        Ok(Files { list, more })
    }

    /// The text of `file` (relative to the skill's folder), at most
    /// `max_bytes` long; a path that leaves the folder, by `..`, by being
    /// absolute elsewhere or through a link, is refused.
    pub fn read_file(&self, file: &str, max_bytes: u64) -> Result<SkillFile, SkillError> {
        let within = noesis_fs::Workspace::new(&self.dir).map_err(|e| self.io(&self.dir, &e.to_string()))?;
        let real = within.confine(file).map_err(|e| SkillError::Outside {
            skill: self.name.clone(),
            file: file.to_owned(),
            why: e.to_string(),
        })?;
        let meta = match std::fs::metadata(&real) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SkillError::NoFile { skill: self.name.clone(), file: file.to_owned() });
            }
            Err(e) => return Err(self.io(&real, &e.to_string())),
        };
        if !meta.is_file() {
            return Err(SkillError::NotAFile { skill: self.name.clone(), file: file.to_owned() });
        }
        if meta.len() > max_bytes {
            return Err(SkillError::TooLarge {
                skill: self.name.clone(),
                file: file.to_owned(),
                size: meta.len(),
                max: max_bytes,
            });
        }
        let bytes = std::fs::read(&real).map_err(|e| self.io(&real, &e.to_string()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| SkillError::NotText { skill: self.name.clone(), file: file.to_owned() })?;
        Ok(SkillFile { path: real, text })
    }

    fn io(&self, path: &Path, why: &str) -> SkillError {
        SkillError::Io { path: path.to_owned(), why: why.to_owned() }
    }
}

/// One file of a skill, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// Where it really is (links inside the folder followed), so a record
    /// of the read names one path however the file was asked for.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// A skill's files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Files {
    /// Relative paths, sorted, at most [`MAX_FILES`].
    pub list: Vec<String>,
    /// Whether the folder holds more than the list shows.
    pub more: bool,
}

/// Why a skill's file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    /// The path leaves the skill's folder.
    #[error("`{file}` is not inside skill `{skill}`'s folder: {why}")]
    Outside {
        /// The skill.
        skill: String,
        /// The path asked for.
        file: String,
        /// How it leaves.
        why: String,
    },
    /// No such file.
    #[error("skill `{skill}` has no file `{file}`")]
    NoFile {
        /// The skill.
        skill: String,
        /// The path asked for.
        file: String,
    },
    /// A folder or something else that is not a plain file.
    #[error("`{file}` of skill `{skill}` is not a file")]
    NotAFile {
        /// The skill.
        skill: String,
        /// The path asked for.
        file: String,
    },
    /// Bigger than the caller reads.
    #[error("`{file}` of skill `{skill}` is {size} bytes; at most {max} are read")]
    TooLarge {
        /// The skill.
        skill: String,
        /// The path asked for.
        file: String,
        /// Its size.
        size: u64,
        /// The most read.
        max: u64,
    },
    /// Not UTF-8 text.
    #[error("`{file}` of skill `{skill}` is not UTF-8 text")]
    NotText {
        /// The skill.
        skill: String,
        /// The path asked for.
        file: String,
    },
    /// The file system refused.
    #[error("{}: {why}", path.display())]
    Io {
        /// What was being read.
        path: PathBuf,
        /// What the system said.
        why: String,
    },
}

/// A skill left out because one of the same name comes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadowed {
    /// The name both have.
    pub name: String,
    /// The folder left out.
    pub dir: PathBuf,
    /// Where it came from.
    pub origin: Origin,
    /// The folder of the skill that wins.
    pub by: PathBuf,
}

/// A `SKILL.md` (or skill folder) that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {field}: {message}", path.display())]
pub struct Problem {
    /// The file (or folder) at fault.
    pub path: PathBuf,
    /// The field at fault (`name`, `tools[1]`, `front matter`), or `file`
    /// when the file itself cannot be read.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// What the skill folders hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The skills in force, by name.
    pub skills: Vec<Skill>,
    /// Skills of a name that an earlier folder also has.
    pub shadowed: Vec<Shadowed>,
    /// Skills that could not be read, each with the file and the field.
    pub problems: Vec<Problem>,
}

impl Found {
    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The names in force, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.skills.iter().map(|s| s.name.as_str()).collect()
    }
}

/// Every skill under `roots`, the first of a name winning; one broken
/// `SKILL.md` is a [`Problem`] and never hides the others. A skill folder
/// that does not exist is simply empty.
pub fn discover(roots: &Roots) -> Found {
    let mut found = Found::default();
    let mut read: Vec<PathBuf> = Vec::new();
    for (origin, dir) in roots.dirs() {
        // Working in the home folder itself makes the project's folder
        // and the user's one folder: read once, it shadows nothing.
        let real = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if read.contains(&real) {
            continue;
        }
        read.push(real);
        for skill in read_folder(origin, &dir, &mut found.problems) {
            match found.skills.iter().find(|s| s.name == skill.name) {
                Some(first) => found.shadowed.push(Shadowed {
                    name: skill.name.clone(),
                    dir: skill.dir.clone(),
                    origin,
                    by: first.dir.clone(),
                }),
                None => found.skills.push(skill),
            }
        }
    }
    found.skills.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The skills of one skill folder, its subfolders by name.
fn read_folder(origin: Origin, dir: &Path, problems: &mut Vec<Problem>) -> Vec<Skill> {
    let problem =
        |path: &Path, field: &str, message: String| Problem { path: path.to_owned(), field: field.to_owned(), message };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            problems.push(problem(dir, "file", format!("the skill folder cannot be read: {e}")));
            return Vec::new();
        }
    };
    let mut folders: Vec<(String, PathBuf, std::fs::FileType)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kind = e.file_type().ok()?;
            (!name.starts_with('.') && (kind.is_dir() || kind.is_symlink())).then(|| (name, e.path(), kind))
        })
        .collect();
    folders.sort_by(|a, b| a.0.cmp(&b.0));
    let mut skills = Vec::new();
    for (folder, path, kind) in folders {
        if kind.is_symlink() {
            // A linked folder could lead anywhere on the machine, and its
            // files would then be offered to the model as this skill's.
            problems.push(problem(
                &path,
                "file",
                "a symbolic link; skills are read only from real folders (copy it here instead)".into(),
            ));
            continue;
        }
        let md = path.join("SKILL.md");
        let text = match read_bounded(&md) {
            Ok(Some(t)) => t,
            Ok(None) => {
                problems.push(problem(&md, "file", "missing; every skill folder needs a SKILL.md".into()));
                continue;
            }
            Err(why) => {
                problems.push(problem(&md, "file", why));
                continue;
            }
        };
        let SkillMd { name, description, tools, modules, body } = match parse(&text) {
            Ok(s) => s,
            Err(errors) => {
                problems.extend(errors.into_iter().map(|e| problem(&md, &e.field, e.message)));
                continue;
            }
        };
        if name != folder {
            // The model asks for a skill by name and a person finds it by
            // folder: two names for one skill would send each elsewhere.
            let hint = if check_name(&folder).is_ok() {
                format!("rename the folder or set `name: {folder}`")
            } else {
                format!("rename the folder to `{name}`")
            };
            problems.push(problem(&md, "name", format!("`{name}` is not its folder's name `{folder}`; {hint}")));
            continue;
        }
        skills.push(Skill { name, description, tools, modules, origin, dir: path, body, source: text });
    }
    skills
}

/// A `SKILL.md`'s text; none when it does not exist.
fn read_bounded(path: &Path) -> Result<Option<String>, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read: {e}")),
    };
    if !meta.is_file() {
        return Err("not a plain file (a link or a folder); SKILL.md must be a file in the skill's folder".into());
    }
    if meta.len() > MAX_SKILL_MD {
        return Err(format!("{} bytes; at most {MAX_SKILL_MD} are read", meta.len()));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))?;
    String::from_utf8(bytes).map(Some).map_err(|_| "not UTF-8 text".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn skill_md(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\nBody of {name}.\n")
    }

    struct Tree {
        _dirs: (tempfile::TempDir, tempfile::TempDir),
        roots: Roots,
    }

    fn tree() -> Tree {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let roots = Roots { workspace: ws.path().to_owned(), home: Some(home.path().to_owned()) };
        Tree { _dirs: (ws, home), roots }
    }

    #[test]
    fn no_skill_folders_is_no_skills_and_no_problems() {
        let t = tree();
        assert_eq!(discover(&t.roots), Found::default());
        assert_eq!(discover(&Roots { home: None, ..t.roots.clone() }), Found::default());
    }

    #[test]
    fn the_project_comes_first_then_claude_then_the_user_and_the_shadowed_are_told() {
        let t = tree();
        let (ws, home) = (&t.roots.workspace, t.roots.home.as_ref().unwrap());
        write(ws, ".noesis/skills/deploy/SKILL.md", &skill_md("deploy", "project's deploy"));
        write(ws, ".claude/skills/deploy/SKILL.md", &skill_md("deploy", "claude's deploy"));
        write(ws, ".claude/skills/review/SKILL.md", &skill_md("review", "claude's review"));
        write(home, "skills/review/SKILL.md", &skill_md("review", "my review"));
        write(home, "skills/deploy/SKILL.md", &skill_md("deploy", "my deploy"));
        write(home, "skills/notes/SKILL.md", &skill_md("notes", "my notes"));
        let f = discover(&t.roots);
        let got: Vec<(&str, &str, Origin)> =
            f.skills.iter().map(|s| (s.name.as_str(), s.description.as_str(), s.origin)).collect();
        assert_eq!(
            got,
            [
                ("deploy", "project's deploy", Origin::Project),
                ("notes", "my notes", Origin::User),
                ("review", "claude's review", Origin::Claude)
            ]
        );
        let shadowed: Vec<(&str, Origin, PathBuf)> =
            f.shadowed.iter().map(|s| (s.name.as_str(), s.origin, s.by.clone())).collect();
        assert_eq!(
            shadowed,
            [
                ("deploy", Origin::Claude, ws.join(".noesis/skills/deploy")),
                ("deploy", Origin::User, ws.join(".noesis/skills/deploy")),
                ("review", Origin::User, ws.join(".claude/skills/review")),
            ]
        );
        assert!(f.problems.is_empty(), "{:?}", f.problems);
        assert_eq!(f.get("deploy").unwrap().body(), "Body of deploy.\n");
        assert_eq!(f.names(), ["deploy", "notes", "review"]);
    }

    #[test]
    fn a_broken_skill_is_a_problem_with_file_and_field_and_the_others_stay() {
        let t = tree();
        let ws = &t.roots.workspace;
        write(ws, ".noesis/skills/good/SKILL.md", &skill_md("good", "fine"));
        write(ws, ".noesis/skills/nameless/SKILL.md", "---\ndescription: d\n---\n");
        write(ws, ".noesis/skills/moved/SKILL.md", &skill_md("other", "d"));
        write(ws, ".noesis/skills/empty/README.md", "no SKILL.md here");
        write(ws, ".noesis/skills/bad-tools/SKILL.md", "---\nname: bad-tools\ndescription: d\ntools: [1]\n---\n");
        write(ws, ".noesis/skills/huge/SKILL.md", &"x".repeat(usize::try_from(MAX_SKILL_MD).unwrap() + 1));
        write(ws, ".noesis/skills/.hidden/SKILL.md", "not read");
        write(ws, ".noesis/skills/loose-file.md", "not a folder");
        let f = discover(&t.roots);
        assert_eq!(f.names(), ["good"]);
        let got: Vec<(String, &str)> = f
            .problems
            .iter()
            .map(|p| (p.path.strip_prefix(ws).unwrap().display().to_string(), p.field.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (".noesis/skills/bad-tools/SKILL.md".to_owned(), "tools[0]"),
                (".noesis/skills/empty/SKILL.md".to_owned(), "file"),
                (".noesis/skills/huge/SKILL.md".to_owned(), "file"),
                (".noesis/skills/moved/SKILL.md".to_owned(), "name"),
                (".noesis/skills/nameless/SKILL.md".to_owned(), "name"),
            ]
        );
        let moved = f.problems.iter().find(|p| p.field == "name" && p.message.contains("other")).unwrap();
        assert!(
            moved
                .to_string()
                .ends_with("name: `other` is not its folder's name `moved`; rename the folder or set `name: moved`"),
            "{moved}"
        );
    }

    #[test]
    fn working_in_the_home_folder_reads_its_skills_once() {
        let t = tree();
        let home = t.roots.home.clone().unwrap();
        write(&home, ".noesis/skills/solo/SKILL.md", &skill_md("solo", "d"));
        let roots = Roots { workspace: home.clone(), home: Some(home.join(".noesis")) };
        let f = discover(&roots);
        assert_eq!((f.names(), f.shadowed.len(), f.problems.len()), (vec!["solo"], 0, 0));
        assert_eq!(f.skills[0].origin, Origin::Project);
    }

    #[test]
    fn a_linked_skill_folder_is_refused() {
        let t = tree();
        let elsewhere = tempfile::tempdir().unwrap();
        write(elsewhere.path(), "SKILL.md", &skill_md("linked", "d"));
        std::fs::create_dir_all(t.roots.workspace.join(".noesis/skills")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), t.roots.workspace.join(".noesis/skills/linked")).unwrap();
        let f = discover(&t.roots);
        assert!(f.skills.is_empty());
        assert_eq!(f.problems.len(), 1);
        assert!(f.problems[0].message.contains("symbolic link"), "{}", f.problems[0]);
    }

    fn with_files() -> (Tree, tempfile::TempDir, Skill) {
        let t = tree();
        let ws = t.roots.workspace.clone();
        write(&ws, ".noesis/skills/forms/SKILL.md", &skill_md("forms", "d"));
        write(&ws, ".noesis/skills/forms/reference.md", "the reference");
        write(&ws, ".noesis/skills/forms/scripts/fill.py", "print(1)");
        write(&ws, ".noesis/skills/forms/templates/a/b.txt", "deep");
        write(&ws, ".noesis/skills/forms/blob.bin", "");
        std::fs::write(ws.join(".noesis/skills/forms/blob.bin"), [0xff, 0xfe, 0x00]).unwrap();
        write(&ws, "secret.txt", "workspace secret");
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "key", "outside secret");
        let dir = ws.join(".noesis/skills/forms");
        std::os::unix::fs::symlink(outside.path().join("key"), dir.join("leak")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.join("out")).unwrap();
        std::os::unix::fs::symlink(dir.join("reference.md"), dir.join("alias.md")).unwrap();
        // The project ignoring `.noesis/` must not hide the skill's files.
        write(&ws, ".gitignore", ".noesis/\n");
        let skill = discover(&t.roots).get("forms").unwrap().clone();
        (t, outside, skill)
    }

    #[test]
    fn a_skills_files_are_listed_inside_its_folder_only() {
        let (_t, _o, skill) = with_files();
        let files = skill.files().unwrap();
        assert_eq!(files.list, ["alias.md", "blob.bin", "reference.md", "scripts/fill.py", "templates/a/b.txt"]);
        assert!(!files.more);
    }

    #[test]
    fn a_long_listing_is_cut_and_says_so() {
        let t = tree();
        let ws = &t.roots.workspace;
        write(ws, ".noesis/skills/many/SKILL.md", &skill_md("many", "d"));
        for i in 0..=MAX_FILES {
            write(ws, &format!(".noesis/skills/many/f{i:04}.txt"), "");
        }
        let files = discover(&t.roots).get("many").unwrap().files().unwrap();
        assert_eq!((files.list.len(), files.more), (MAX_FILES, true));
        assert_eq!(files.list[0], "f0000.txt");
    }

    #[test]
    fn reading_a_file_stays_in_the_skill_folder() {
        let (_t, _o, skill) = with_files();
        assert_eq!(skill.read_file("reference.md", 100).unwrap().text, "the reference");
        assert_eq!(skill.read_file("scripts/../reference.md", 100).unwrap().text, "the reference");
        assert_eq!(skill.read_file("alias.md", 100).unwrap().text, "the reference");
        // However it is asked for, a read names the file it really read.
        let real = skill.dir.canonicalize().unwrap().join("reference.md");
        for asked in ["alias.md", "scripts/../reference.md", "./reference.md"] {
            assert_eq!(skill.read_file(asked, 100).unwrap().path, real, "{asked}");
        }
        for escape in ["../../../secret.txt", "leak", "out/key", "/etc/passwd"] {
            let e = skill.read_file(escape, 100).unwrap_err();
            assert!(matches!(e, SkillError::Outside { .. }), "{escape}: {e}");
            assert!(e.to_string().contains("not inside skill `forms`"), "{e}");
        }
        let abs = skill.dir.join("reference.md");
        assert_eq!(skill.read_file(abs.to_str().unwrap(), 100).unwrap().text, "the reference");
        assert!(matches!(skill.read_file("missing.md", 100), Err(SkillError::NoFile { .. })));
        assert!(matches!(skill.read_file("scripts", 100), Err(SkillError::NotAFile { .. })));
        assert!(matches!(skill.read_file("blob.bin", 100), Err(SkillError::NotText { .. })));
        let e = skill.read_file("reference.md", 5).unwrap_err();
        assert_eq!(e.to_string(), "`reference.md` of skill `forms` is 13 bytes; at most 5 are read");
    }
}
