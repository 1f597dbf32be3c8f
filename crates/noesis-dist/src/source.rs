//! What a person types for a module's source.

use std::path::{Path, PathBuf};

/// Which version of a git source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// The newest semver tag (the default branch when there is none).
    Latest,
    /// A tag, branch or commit, as typed.
    Exact(String),
    /// The newest semver tag in this range (`^2.1`, `>=1, <3`, `~1.4`).
    Range(semver::VersionReq),
}

/// Where a module comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A git repository, the module at `path` in it (`""`: its root).
    Git {
        /// What `git clone` is given.
        url: String,
        /// The module's folder inside the repository.
        path: String,
        /// Which version.
        reference: Reference,
    },
    /// A module folder on this machine.
    Dir(PathBuf),
    /// A `.tar.gz` at a URL or on disk, with the checksum it must have.
    Tarball {
        /// Where it is.
        url: String,
        /// `sha256:…`, checked before anything is unpacked.
        checksum: Option<String>,
    },
    /// A name looked up in the registry index.
    Registry {
        /// The module's name in the index.
        name: String,
        /// Which version, for an entry whose source is git.
        reference: Reference,
    },
}

/// A source that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("source `{typed}`: {why}")]
pub struct SourceError {
    /// What was typed.
    pub typed: String,
    /// What is wrong with it.
    pub why: String,
}

fn reference(r: Option<&str>, typed: &str) -> Result<Reference, SourceError> {
    let Some(r) = r.filter(|r| !r.is_empty()) else { return Ok(Reference::Latest) };
    if r.starts_with(['^', '~', '>', '<', '=', '*']) {
        return semver::VersionReq::parse(r)
            .map(Reference::Range)
            .map_err(|e| SourceError { typed: typed.to_owned(), why: format!("`{r}` is not a version range: {e}") });
    }
    Ok(Reference::Exact(r.to_owned()))
}

impl Source {
    /// Reads `typed`: `github:OWNER/REPO[/PATH][@REF]`, a git URL
    /// (`https://…`, `ssh://…`, `file://…`, `git@host:…`) with `--path` and
    /// an optional `@REF` after it, or a folder that exists.
    pub fn parse(typed: &str, path: Option<&str>) -> Result<Source, SourceError> {
        let bad = |why: String| SourceError { typed: typed.to_owned(), why };
        if let Some(rest) = typed.strip_prefix("github:") {
            let (spec, r) = match rest.rsplit_once('@') {
                Some((s, r)) => (s, Some(r)),
                None => (rest, None),
            };
            let mut parts = spec.splitn(3, '/');
            let (Some(owner), Some(repo)) = (parts.next(), parts.next()) else {
                return Err(bad("expected github:OWNER/REPO[/PATH][@REF]".into()));
            };
            let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !ok(owner) || !ok(repo) {
                return Err(bad("expected github:OWNER/REPO[/PATH][@REF]".into()));
            }
            let sub = path.unwrap_or_else(|| parts.next().unwrap_or_default());
            check_path(sub).map_err(bad)?;
            let sub = sub.trim_matches('/');
            return Ok(Source::Git {
                url: format!("https://github.com/{owner}/{repo}.git"),
                path: sub.to_owned(),
                reference: reference(r, typed)?,
            });
        }
        // `URL#sha256:HEX`: the checksum the download must have.
        let (file, checksum) = match typed.split_once("#sha256:") {
            Some((u, hex)) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                (u, Some(format!("sha256:{}", hex.to_ascii_lowercase())))
            }
            Some(_) => return Err(bad("a checksum is `#sha256:` and 64 hex digits".into())),
            None => (typed, None),
        };
        if crate::registry::is_tarball(file) {
            return Ok(Source::Tarball { url: file.to_owned(), checksum });
        }
        let is_url = ["https://", "http://", "ssh://", "file://", "git://"].iter().any(|p| typed.starts_with(p))
            || (typed.starts_with("git@") && typed.contains(':'));
        if is_url {
            // `@REF` after the URL; `git@host:` has an `@` of its own.
            let (url, r) = match typed.rsplit_once('@') {
                Some((u, r)) if !r.contains('/') && !r.contains(':') && !u.is_empty() && u != "git" => (u, Some(r)),
                _ => (typed, None),
            };
            let sub = path.unwrap_or_default();
            check_path(sub).map_err(bad)?;
            let sub = sub.trim_matches('/');
            return Ok(Source::Git { url: url.to_owned(), path: sub.to_owned(), reference: reference(r, typed)? });
        }
        let dir = Path::new(typed);
        if dir.is_dir() {
            return Ok(Source::Dir(dir.to_owned()));
        }
        let (name, r) = match typed.split_once('@') {
            Some((n, r)) => (n, Some(r)),
            None => (typed, None),
        };
        if valid_name(name) && !typed.contains('/') {
            return Ok(Source::Registry { name: name.to_owned(), reference: reference(r, typed)? });
        }
        Err(bad("not github:OWNER/REPO, a git URL, a .tar.gz, a folder that exists, or a module name".into()))
    }

    /// The name a module from here gets unless `--name` says otherwise:
    /// the last part of its path, else of the repository or folder.
    pub fn default_name(&self) -> String {
        let last = |s: &str| s.trim_end_matches('/').rsplit(['/', ':']).next().unwrap_or_default().to_owned();
        match self {
            Source::Git { path, .. } if !path.is_empty() => last(path),
            Source::Git { url, .. } => last(url).trim_end_matches(".git").to_owned(),
            Source::Dir(d) => d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            Source::Tarball { url, .. } => {
                let file = last(url);
                file.trim_end_matches(".tar.gz").trim_end_matches(".tgz").to_owned()
            }
            Source::Registry { name, .. } => name.clone(),
        }
    }
}

/// A path inside a repository: relative, no `..`.
fn check_path(p: &str) -> Result<(), String> {
    if p.starts_with('/') || p.split('/').any(|c| c == "..") {
        return Err(format!("the path `{p}` must stay inside the repository"));
    }
    Ok(())
}

/// Whether `name` can be a module's folder name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 100
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_sources_with_paths_and_refs() {
        let s = Source::parse("github:acme/mods/text/summarize@^2.1", None).unwrap();
        let Source::Git { url, path, reference } = &s else { panic!() };
        assert_eq!(url, "https://github.com/acme/mods.git");
        assert_eq!(path, "text/summarize");
        assert!(matches!(reference, Reference::Range(r) if r.to_string() == "^2.1"));
        assert_eq!(s.default_name(), "summarize");
        let s = Source::parse("github:acme/one@v1.0.0", None).unwrap();
        assert!(
            matches!(&s, Source::Git { reference: Reference::Exact(r), path, .. } if r == "v1.0.0" && path.is_empty())
        );
        assert_eq!(s.default_name(), "one");
        assert!(Source::parse("github:acme", None).is_err());
        assert!(Source::parse("github:acme/x/../../etc", None).is_err());
        assert!(Source::parse("github:ac me/x", None).is_err());
        assert!(Source::parse("github:acme/x@^not", None).unwrap_err().to_string().contains("not a version range"));
    }

    #[test]
    fn git_urls_take_a_path_and_a_ref() {
        let s = Source::parse("file:///tmp/repo@^1", Some("mods/a")).unwrap();
        assert!(
            matches!(&s, Source::Git { url, path, reference: Reference::Range(_) } if url == "file:///tmp/repo" && path == "mods/a")
        );
        assert_eq!(s.default_name(), "a");
        let s = Source::parse("git@github.com:acme/x.git", None).unwrap();
        assert!(
            matches!(&s, Source::Git { url, reference: Reference::Latest, .. } if url == "git@github.com:acme/x.git")
        );
        assert_eq!(s.default_name(), "x");
        let s = Source::parse("https://host/x.git@main", None).unwrap();
        assert!(
            matches!(&s, Source::Git { url, reference: Reference::Exact(r), .. } if url == "https://host/x.git" && r == "main")
        );
        assert!(Source::parse("https://host/x.git", Some("/abs")).is_err());
    }

    #[test]
    fn folders_and_names() {
        let d = tempfile::tempdir().unwrap();
        let s = Source::parse(d.path().to_str().unwrap(), None).unwrap();
        assert_eq!(s, Source::Dir(d.path().to_owned()));
        assert!(Source::parse("/no/such/folder", None).is_err());
        assert_eq!(
            Source::parse("http://127.0.0.1:9/s-1.0.tar.gz", None).unwrap(),
            Source::Tarball { url: "http://127.0.0.1:9/s-1.0.tar.gz".into(), checksum: None }
        );
        assert_eq!(Source::parse("http://h/x/summarizer.tgz", None).unwrap().default_name(), "summarizer");
        let hex = "AB".repeat(32);
        assert_eq!(
            Source::parse(&format!("http://h/s.tar.gz#sha256:{hex}"), None).unwrap(),
            Source::Tarball { url: "http://h/s.tar.gz".into(), checksum: Some(format!("sha256:{}", "ab".repeat(32))) }
        );
        assert!(Source::parse("http://h/s.tar.gz#sha256:abc", None).unwrap_err().why.contains("64 hex digits"));
        let s = Source::parse("summarizer@^2", None).unwrap();
        assert!(matches!(&s, Source::Registry { name, reference: Reference::Range(_) } if name == "summarizer"));
        assert!(valid_name("code-simplifier") && !valid_name("../x") && !valid_name(".hidden") && !valid_name(""));
    }
}
