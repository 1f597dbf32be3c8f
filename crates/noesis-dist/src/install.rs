//! Fetching, validating and swapping modules in; the lockfile kept beside.
//!
//! A source is fetched first (git through the `git` program, shallow where
//! the tag or commit is known), then, with the modules folder locked
//! against other processes ([`crate::swap`]), the module is staged in the
//! work area, loaded there (a module that does not load is refused with the
//! loader's message) and put in place together with its lockfile entry as
//! one change: after a crash at any point both are old or both new, and the
//! next operation finishes or drops what was cut short.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::lock::{LockEntry, Lockfile, digest};
use crate::source::{Reference, Source, SourceError, valid_name};

/// An operation refused or failed; nothing was changed unless it says so.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// The source could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// `git` failed.
    #[error("git {args}: {stderr}")]
    Git {
        /// What was run.
        args: String,
        /// What it said.
        stderr: String,
    },
    /// No tag satisfies the range.
    #[error("no tag of {url} satisfies `{range}` (tags: {tags})")]
    NoVersion {
        /// The repository.
        url: String,
        /// The range.
        range: String,
        /// The tags found.
        tags: String,
    },
    /// The source holds no module where it was looked for.
    #[error("no module at `{path}` in {source_name}: {why}")]
    NotAModule {
        /// The source.
        source_name: String,
        /// The folder inside it.
        path: String,
        /// Why not.
        why: String,
    },
    /// The module does not load.
    #[error("module `{name}` is refused: {why}")]
    Invalid {
        /// The module.
        name: String,
        /// The loader's message.
        why: String,
    },
    /// A name that cannot be a module folder.
    #[error("`{0}` cannot be a module's name (letters, digits, - _ .; not starting with .)")]
    BadName(String),
    /// Versions asked of a source that has no tags.
    #[error("{0}: only a git source has versions (its tags)")]
    NotGit(String),
    /// Nothing installed under that name.
    #[error("no module `{0}` is installed here (cognitive.lock lists what is)")]
    NotInstalled(String),
    /// `--locked` and the lockfile would change.
    #[error("--locked: {0}")]
    Locked(String),
    /// The files differ from what the lockfile recorded.
    #[error("module `{name}`: its files are {found}, the lockfile says {locked}; refused")]
    Mismatch {
        /// The module.
        name: String,
        /// The digest found.
        found: String,
        /// The digest locked.
        locked: String,
    },
    /// The lockfile cannot be read.
    #[error("{path}: {why}")]
    Lock {
        /// The lockfile.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A tarball refused.
    #[error(transparent)]
    Tarball(#[from] crate::tarball::TarballError),
    /// A name the registry does not list, or no registry.
    #[error("`{name}` from the registry: {why}")]
    NotInRegistry {
        /// The name.
        name: String,
        /// Why.
        why: String,
    },
    /// A tarball over plain http with nothing to check it against.
    #[error(
        "`{0}` is plain http with no checksum: anything on the way could change it; use https, or give its checksum as `URL#sha256:HEX` (or in the registry's index)"
    )]
    Unverified(String),
    /// Staging, swapping or recovering failed.
    #[error(transparent)]
    Swap(#[from] crate::swap::SwapError),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DistError + '_ {
    move |source| DistError::Io { path: path.to_owned(), source }
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The module's name (its folder).
    pub name: String,
    /// What the lockfile now says of it.
    pub entry: LockEntry,
    /// Whether it replaced an installed module.
    pub replaced: bool,
}

impl Installed {
    /// One line for a person: what happened, the name, the version (or the
    /// commit's first 12 digits) and the source.
    pub fn summary(&self) -> String {
        let e = &self.entry;
        let at = e.version.clone().or_else(|| e.commit.as_ref().map(|c| c[..c.len().min(12)].to_owned()));
        format!(
            "{} {}{} ({})",
            if self.replaced { "updated" } else { "installed" },
            self.name,
            at.map(|v| format!(" {v}")).unwrap_or_default(),
            e.source
        )
    }
}

/// Installs into one modules folder with its lockfile.
#[derive(Debug, Clone)]
pub struct Installer {
    /// Where modules go (`./cognitive/modules`, `~/.cognitive/modules`).
    pub modules_dir: PathBuf,
    /// The lockfile (`cognitive.lock` beside the modules folder).
    pub lock_path: PathBuf,
    /// Fail instead of changing the lockfile.
    pub locked: bool,
    /// The registry index bare names are looked up in.
    pub registry: Option<crate::registry::Registry>,
    /// Told where each change is (see [`crate::swap::Observer`]).
    pub observe: Option<crate::swap::Observer>,
}

/// A fetched source: the folder holding the repository or module, kept
/// alive while it is used.
struct Fetched {
    root: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    commit: Option<String>,
    version: Option<String>,
}

fn git(args: &[&str], cwd: Option<&Path>) -> Result<String, DistError> {
    let mut c = Command::new("git");
    c.args(args).env("GIT_TERMINAL_PROMPT", "0");
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let out = c.output().map_err(|e| DistError::Git { args: args.join(" "), stderr: e.to_string() })?;
    if !out.status.success() {
        return Err(DistError::Git {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The tags of a repository, by `git ls-remote` (nothing is cloned).
pub fn tags(url: &str) -> Result<Vec<String>, DistError> {
    let out = git(&["ls-remote", "--tags", "--refs", url], None)?;
    Ok(out.lines().filter_map(|l| l.split_once("refs/tags/").map(|(_, t)| t.trim().to_owned())).collect())
}

/// The semver tags among `tags`, newest first, each with its version.
pub fn semver_tags(tags: Vec<String>) -> Vec<(semver::Version, String)> {
    let mut found: Vec<(semver::Version, String)> =
        tags.into_iter().filter_map(|t| crate::version::of_tag(&t).map(|v| (v, t))).collect();
    found.sort();
    found.reverse();
    found
}

/// The repository of the git source `source` and its semver tags, newest
/// first.
///
/// # Errors
/// A source that cannot be read or is not git, or `git` failing.
pub fn versions(source: &str) -> Result<(String, Vec<(semver::Version, String)>), DistError> {
    let url = match Source::parse(source, None)? {
        Source::Git { url, .. } => url,
        _ => return Err(DistError::NotGit(source.to_owned())),
    };
    let found = semver_tags(tags(&url)?);
    Ok((url, found))
}

/// Whether `r` names a commit (hex, 7 to 40 digits) rather than a tag or
/// branch.
fn is_commit(r: &str) -> bool {
    (7..=40).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A checkout of `url` at `want` (a tag, branch or commit; `None`: the
/// default branch) in `repo`, fetching as little as the reference allows:
/// one commit for a tag or branch, and for a commit one commit when the
/// server serves commits by id, else the history without file contents.
/// References go after `--end-of-options`, so none is read as an option.
fn clone_at(url: &str, want: Option<&str>, repo: &Path) -> Result<(), DistError> {
    let repo_s = repo.to_string_lossy().into_owned();
    let checkout = |target: &str| {
        git(&["-c", "advice.detachedHead=false", "checkout", "--quiet", "--end-of-options", target], Some(repo))
    };
    match want {
        Some(r) if is_commit(r) => {
            std::fs::create_dir_all(repo).map_err(io(repo))?;
            git(&["init", "--quiet"], Some(repo))?;
            let shallow = git(&["fetch", "--quiet", "--depth", "1", "--end-of-options", url, r], Some(repo));
            if shallow.is_ok() {
                checkout("FETCH_HEAD")?;
            } else {
                std::fs::remove_dir_all(repo).map_err(io(repo))?;
                git(&["clone", "--quiet", "--no-checkout", "--filter=blob:none", "--", url, &repo_s], None)?;
                checkout(r)?;
            }
        }
        Some(r) => {
            git(&["clone", "--quiet", "--depth", "1", &format!("--branch={r}"), "--", url, &repo_s], None)?;
        }
        None => {
            git(&["clone", "--quiet", "--depth", "1", "--", url, &repo_s], None)?;
        }
    }
    Ok(())
}

/// Fetches `source`. `pinned`: the files will be checked against a
/// lockfile's digest, which is what a checksum would prove.
fn fetch(source: &Source, pinned: bool) -> Result<Fetched, DistError> {
    match source {
        Source::Dir(d) => Ok(Fetched { root: d.clone(), _tmp: None, commit: None, version: None }),
        Source::Registry { name, .. } => {
            Err(DistError::NotInRegistry { name: name.clone(), why: "not resolved to a source".into() })
        }
        Source::Tarball { url, checksum } => {
            if url.starts_with("http://") && checksum.is_none() && !pinned {
                return Err(DistError::Unverified(url.clone()));
            }
            let bytes = crate::tarball::fetch(url)?;
            let tmp = tempfile::tempdir().map_err(io(Path::new("a temporary folder")))?;
            let into = tmp.path().join("unpacked");
            crate::tarball::unpack(url, &bytes, checksum.as_deref(), &into)?;
            let root = crate::tarball::module_root(&into).ok_or_else(|| DistError::NotAModule {
                source_name: url.clone(),
                path: String::new(),
                why: "the tarball holds no NAME/module.yaml".into(),
            })?;
            Ok(Fetched { root, _tmp: Some(tmp), commit: None, version: None })
        }
        Source::Git { url, reference, .. } => {
            let (want, version) = match reference {
                Reference::Exact(r) => (Some(r.clone()), None),
                Reference::Latest => {
                    let tags = tags(url)?;
                    let t = crate::version::pick(&tags, None).cloned();
                    (t.clone(), t)
                }
                Reference::Range(req) => {
                    let tags = tags(url)?;
                    let Some(t) = crate::version::pick(&tags, Some(req)).cloned() else {
                        return Err(DistError::NoVersion {
                            url: url.clone(),
                            range: req.to_string(),
                            tags: tags.join(", "),
                        });
                    };
                    (Some(t.clone()), Some(t))
                }
            };
            let tmp = tempfile::tempdir().map_err(io(Path::new("a temporary folder")))?;
            let repo = tmp.path().join("repo");
            clone_at(url, want.as_deref(), &repo)?;
            let commit = git(&["rev-parse", "HEAD"], Some(&repo))?.trim().to_owned();
            let version = version.or_else(|| want.filter(|w| crate::version::of_tag(w).is_some()));
            Ok(Fetched { root: repo, _tmp: Some(tmp), commit: Some(commit), version })
        }
    }
}

/// Copies `from` to `to` (a new folder), leaving out `.git`.
fn copy_tree(from: &Path, to: &Path) -> Result<(), DistError> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for e in std::fs::read_dir(from).map_err(io(from))? {
        let e = e.map_err(io(from))?;
        let name = e.file_name();
        if name == ".git" {
            continue;
        }
        let t = e.file_type().map_err(io(&e.path()))?;
        let dest = to.join(&name);
        if t.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest).map_err(io(&e.path()))?;
        }
        // Links are left out: a module is files, and a link could point
        // anywhere.
    }
    Ok(())
}

impl Installer {
    fn area(&self) -> crate::swap::Area {
        crate::swap::Area::new(&self.modules_dir).observed(self.observe)
    }

    /// Finishes or drops what a crash cut short (see [`crate::swap`]),
    /// waiting for any other process working here first. Says what it did.
    pub fn recover(&self) -> Result<Vec<String>, DistError> {
        Ok(self.area().recover()?)
    }

    /// The lockfile (empty when there is none).
    pub fn lockfile(&self) -> Result<Lockfile, DistError> {
        match std::fs::read_to_string(&self.lock_path) {
            Ok(t) => Lockfile::parse(&t).map_err(|why| DistError::Lock { path: self.lock_path.clone(), why }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Lockfile::new()),
            Err(e) => Err(io(&self.lock_path)(e)),
        }
    }

    fn lock_file(&self, lock: &Lockfile) -> crate::swap::SideFile {
        crate::swap::SideFile { path: self.lock_path.clone(), text: lock.render() }
    }

    /// Installs `typed` (see [`Source::parse`]) as `name` (default: from the
    /// source), or, with `locked_entry`, exactly what a lockfile recorded.
    pub fn install(&self, typed: &str, path: Option<&str>, name: Option<&str>) -> Result<Installed, DistError> {
        let source = Source::parse(typed, path)?;
        let name = name.map_or_else(|| source.default_name(), str::to_owned);
        self.put(&name, typed, &source, None)
    }

    /// Installs every module the lockfile lists, at its commit, refusing
    /// any whose files differ from the recorded digest.
    pub fn install_locked(&self) -> Result<Vec<Installed>, DistError> {
        let lock = self.lockfile()?;
        let mut done = Vec::new();
        for (name, e) in &lock.modules {
            let mut source = Source::parse(e.resolved.as_deref().unwrap_or(&e.source), Some(&e.path))?;
            if let (Source::Git { reference, .. }, Some(commit)) = (&mut source, &e.commit) {
                *reference = Reference::Exact(commit.clone());
            }
            done.push(self.put(name, &e.source, &source, Some(e))?);
        }
        Ok(done)
    }

    /// Installs `name` again from its recorded source: the newest version
    /// its range allows, or with `latest` the newest there is.
    pub fn update(&self, name: &str, latest: bool) -> Result<Installed, DistError> {
        let lock = self.lockfile()?;
        let e = lock.modules.get(name).ok_or_else(|| DistError::NotInstalled(name.to_owned()))?;
        let mut source = Source::parse(&e.source, Some(&e.path))?;
        if latest && let Source::Git { reference, .. } = &mut source {
            *reference = Reference::Latest;
        }
        self.put(name, &e.source.clone(), &source, None)
    }

    /// The newer version there is for an installed module, if any: from
    /// the registry's cached index for a registry name (no network), and —
    /// only when `online` — from the tags of a git source (within its
    /// recorded range).
    pub fn update_available(&self, entry: &LockEntry, online: bool) -> Option<String> {
        let newer = |candidate: &str| {
            let (Some(have), Some(there)) =
                (entry.version.as_deref().and_then(crate::version::of_tag), crate::version::of_tag(candidate))
            else {
                return entry.version.as_deref() != Some(candidate);
            };
            there > have
        };
        match Source::parse(&entry.source, Some(&entry.path)).ok()? {
            Source::Registry { name, .. } => {
                let index = self.registry.as_ref()?.cached()?;
                let v = index.get(&name)?.version.clone()?;
                newer(&v).then_some(v)
            }
            Source::Git { url, reference, .. } if online => {
                let tags = tags(&url).ok()?;
                let req = match &reference {
                    Reference::Range(r) => Some(r),
                    _ => None,
                };
                let t = crate::version::pick(&tags, req)?.clone();
                newer(&t).then_some(t)
            }
            _ => None,
        }
    }

    /// Removes `name` and its lockfile entry, as one change.
    pub fn remove(&self, name: &str) -> Result<(), DistError> {
        if !valid_name(name) {
            return Err(DistError::BadName(name.to_owned()));
        }
        let target = self.modules_dir.join(name);
        if !self.modules_dir.is_dir() && !self.lockfile()?.modules.contains_key(name) {
            return Err(DistError::NotInstalled(name.to_owned()));
        }
        std::fs::create_dir_all(&self.modules_dir).map_err(io(&self.modules_dir))?;
        let area = self.area();
        let held = area.lock()?;
        held.recover()?;
        // Read under the lock: another process's change is in it, or waits.
        let mut lock = self.lockfile()?;
        if !target.exists() && !lock.modules.contains_key(name) {
            return Err(DistError::NotInstalled(name.to_owned()));
        }
        let mut files = Vec::new();
        if lock.modules.remove(name).is_some() {
            if self.locked {
                return Err(DistError::Locked(format!("removing `{name}` changes cognitive.lock")));
            }
            files.push(self.lock_file(&lock));
        }
        held.remove(name, files)?;
        Ok(())
    }

    /// A registry name as the source its index entry names (and that
    /// source as text, for the lockfile), with the version the index lists.
    #[allow(clippy::type_complexity)]
    fn resolve(&self, source: &Source) -> Result<(Option<(Source, String)>, Option<String>), DistError> {
        let Source::Registry { name, reference } = source else { return Ok((None, None)) };
        let registry = self.registry.as_ref().ok_or_else(|| DistError::NotInRegistry {
            name: name.clone(),
            why: "no registry is configured ([registry] url in noesis.toml, or --registry)".into(),
        })?;
        let index = registry.load(false).map_err(|why| DistError::NotInRegistry { name: name.clone(), why })?;
        let entry = index.modules.get(name).ok_or_else(|| DistError::NotInRegistry {
            name: name.clone(),
            why: format!("{} lists no such module", registry.url),
        })?;
        if let Some(url) = &entry.tarball {
            let s = Source::Tarball { url: url.clone(), checksum: entry.checksum.clone() };
            return Ok((Some((s, url.clone())), entry.version.clone()));
        }
        let text = crate::registry::beside(&registry.url, entry.source.as_deref().unwrap_or_default());
        let mut s = Source::parse(&text, None)?;
        if let Source::Git { reference: r, .. } = &mut s
            && !matches!(reference, Reference::Latest)
        {
            *r = reference.clone();
        }
        Ok((Some((s, text)), entry.version.clone()))
    }

    fn put(
        &self,
        name: &str,
        typed: &str,
        source: &Source,
        locked: Option<&LockEntry>,
    ) -> Result<Installed, DistError> {
        if !valid_name(name) {
            return Err(DistError::BadName(name.to_owned()));
        }
        let (resolved, index_version) = self.resolve(source)?;
        let source = resolved.as_ref().map_or(source, |(s, _)| s);
        // Fetched before the folder is locked: a slow download holds up no
        // other process.
        let mut fetched = fetch(source, locked.is_some())?;
        if fetched.version.is_none() {
            fetched.version = index_version;
        }
        let sub = match source {
            Source::Git { path, .. } => path.clone(),
            _ => String::new(),
        };
        let module_dir = if sub.is_empty() { fetched.root.clone() } else { fetched.root.join(&sub) };
        if !module_dir.join("module.yaml").is_file() && !module_dir.join("MODULE.md").is_file() {
            return Err(DistError::NotAModule {
                source_name: typed.to_owned(),
                path: sub,
                why: "no module.yaml (or MODULE.md) there".into(),
            });
        }
        std::fs::create_dir_all(&self.modules_dir).map_err(io(&self.modules_dir))?;
        let area = self.area();
        let held = area.lock()?;
        held.recover()?;
        let staged = held.stage(name)?;
        let checked = (|| {
            copy_tree(&module_dir, staged.path())?;
            noesis_modules::load_dir(staged.path())
                .map_err(|e| DistError::Invalid { name: name.to_owned(), why: e.to_string() })?;
            let sha256 = digest(staged.path()).map_err(io(staged.path()))?;
            if let Some(l) = locked
                && l.sha256 != sha256
            {
                return Err(DistError::Mismatch { name: name.to_owned(), found: sha256, locked: l.sha256.clone() });
            }
            // Installed from the lockfile: the entry stays as recorded.
            let entry = locked.cloned().unwrap_or_else(|| LockEntry {
                source: typed.to_owned(),
                path: match source {
                    Source::Git { path, .. } => path.clone(),
                    _ => String::new(),
                },
                resolved: resolved.as_ref().map(|(_, r)| r.clone()),
                commit: fetched.commit.clone(),
                version: fetched.version.clone(),
                sha256,
            });
            // Read under the lock, so no other process's entry is lost.
            let mut lock = self.lockfile()?;
            let mut files = Vec::new();
            if lock.modules.get(name) != Some(&entry) {
                if self.locked {
                    return Err(DistError::Locked(format!("installing `{name}` changes cognitive.lock")));
                }
                lock.modules.insert(name.to_owned(), entry.clone());
                files.push(self.lock_file(&lock));
            }
            Ok((entry, files))
        })();
        let (entry, files) = match checked {
            Ok(v) => v,
            Err(e) => {
                held.discard(staged);
                return Err(e);
            }
        };
        let replaced = held.replace(staged, files)?;
        Ok(Installed { name: name.to_owned(), entry, replaced })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_tags_are_newest_first_and_others_left_out() {
        let tags = ["v1.2.0", "latest", "v1.10.0", "1.3.0"].map(str::to_owned).to_vec();
        let got: Vec<String> = semver_tags(tags).into_iter().map(|(_, t)| t).collect();
        assert_eq!(got, ["v1.10.0", "1.3.0", "v1.2.0"]);
    }

    fn installer() -> (tempfile::TempDir, Installer) {
        let d = tempfile::tempdir().unwrap();
        let i = Installer {
            modules_dir: d.path().join("cognitive/modules"),
            lock_path: d.path().join("cognitive/cognitive.lock"),
            locked: false,
            registry: None,
            observe: None,
        };
        (d, i)
    }

    /// What the two-rename scheme of earlier versions left is tidied too.
    #[test]
    fn an_interrupted_swap_of_an_earlier_version_is_finished_or_undone() {
        let (_d, i) = installer();
        let m = &i.modules_dir;
        // Cut short after the old copy moved aside, before the new one came in.
        std::fs::create_dir_all(m.join(".old-a")).unwrap();
        std::fs::write(m.join(".old-a/module.yaml"), "old").unwrap();
        // Cut short after the new copy came in.
        std::fs::create_dir_all(m.join("b")).unwrap();
        std::fs::create_dir_all(m.join(".old-b")).unwrap();
        std::fs::create_dir_all(m.join(".staging-c")).unwrap();
        let done = i.recover().unwrap();
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(std::fs::read_to_string(m.join("a/module.yaml")).unwrap(), "old");
        assert!(m.join("b").is_dir() && !m.join(".old-b").exists() && !m.join(".staging-c").exists());
        assert!(i.recover().unwrap().is_empty());
    }

    fn git_in(dir: &Path, args: &[&str]) -> String {
        let o = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }

    /// Issue 31: clones were full, and a reference went to `checkout` where
    /// one starting with `-` was read as an option (`@--detach` checked out
    /// the default branch instead of failing).
    #[test]
    fn clones_are_shallow_and_references_are_never_options() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        git_in(&src, &["init", "-q", "-b", "main"]);
        let mut commits = Vec::new();
        for tag in ["v1.0.0", "v2.0.0", "v3.0.0"] {
            std::fs::write(src.join("module.yaml"), tag).unwrap();
            git_in(&src, &["add", "-A"]);
            git_in(&src, &["commit", "-q", "-m", tag]);
            git_in(&src, &["tag", tag]);
            commits.push(git_in(&src, &["rev-parse", "HEAD"]));
        }
        let url = format!("file://{}", src.display());
        let at = |r: Reference| fetch(&Source::Git { url: url.clone(), path: String::new(), reference: r }, false);
        let count = |f: &Fetched| git_in(&f.root, &["rev-list", "--count", "HEAD"]);
        let f = at(Reference::Exact("v2.0.0".into())).unwrap();
        assert_eq!((f.commit.as_deref(), count(&f).as_str()), (Some(commits[1].as_str()), "1"));
        assert_eq!(git_in(&f.root, &["rev-parse", "--is-shallow-repository"]), "true");
        let f = at(Reference::Exact(commits[0].clone())).unwrap();
        assert_eq!((f.commit.as_deref(), count(&f).as_str()), (Some(commits[0].as_str()), "1"));
        let f = at(Reference::Latest).unwrap();
        assert_eq!((f.commit.as_deref(), f.version.as_deref()), (Some(commits[2].as_str()), Some("v3.0.0")));
        // An abbreviated commit still resolves (through a clone without file contents).
        let f = at(Reference::Exact(commits[1][..10].to_owned())).unwrap();
        assert_eq!(f.commit.as_deref(), Some(commits[1].as_str()));
        for bad in ["--detach", "-b", "--orphan=x"] {
            let e = at(Reference::Exact(bad.into())).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(bad), "`{bad}` was not refused as a reference: {e}");
        }
    }
}
