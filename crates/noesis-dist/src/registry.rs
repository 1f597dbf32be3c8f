//! Registry indexes (`cognitive-registry.json`): `modules.NAME` with a
//! `source` (`github:…`, a git URL, a folder) or — the v1 entry format — a
//! `distribution.tarball` and `distribution.checksum` (`sha256:…`), plus
//! `version`, `tags` and `description`. An index is a URL or a file and is
//! cached for a while, so listing and searching need no network.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// One module of an index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    /// Where it comes from (git or a folder), when not a tarball.
    pub source: Option<String>,
    /// A tarball URL (v1 entries).
    pub tarball: Option<String>,
    /// The tarball's `sha256:…`.
    pub checksum: Option<String>,
    /// The version the index lists.
    pub version: Option<String>,
    /// Search words.
    pub tags: Vec<String>,
    /// What it does.
    pub description: String,
}

#[derive(Deserialize)]
struct RawIndex {
    modules: BTreeMap<String, RawEntry>,
}

#[derive(Deserialize)]
struct RawEntry {
    source: Option<String>,
    version: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    description: String,
    distribution: Option<RawDistribution>,
    /// v1 entries: `identity.version`.
    identity: Option<RawIdentity>,
    /// v1 entries: `metadata.description` and `metadata.keywords`.
    metadata: Option<RawMetadata>,
}

#[derive(Deserialize)]
struct RawIdentity {
    version: Option<String>,
}

#[derive(Deserialize)]
struct RawMetadata {
    #[serde(default)]
    description: String,
    #[serde(default)]
    keywords: Vec<String>,
}

#[derive(Deserialize)]
struct RawDistribution {
    tarball: String,
    checksum: Option<String>,
}

/// Reads an index; an entry with neither a source nor a tarball is named.
pub fn parse(text: &str) -> Result<BTreeMap<String, Entry>, String> {
    let raw: RawIndex = serde_json::from_str(text).map_err(|e| format!("not a registry index: {e}"))?;
    let mut out = BTreeMap::new();
    for (name, e) in raw.modules {
        let (tarball, checksum) = match e.distribution {
            Some(d) => (Some(d.tarball), d.checksum),
            None => (None, None),
        };
        if e.source.is_none() && tarball.is_none() {
            return Err(format!("modules.{name}: neither `source` nor `distribution.tarball`"));
        }
        if let Some(c) = &checksum
            && !c.starts_with("sha256:")
        {
            return Err(format!("modules.{name}.distribution.checksum: expected `sha256:…`, got `{c}`"));
        }
        let version = e.version.or_else(|| e.identity.and_then(|i| i.version));
        let (mut description, mut tags) = (e.description, e.tags);
        if let Some(m) = e.metadata {
            if description.is_empty() {
                description = m.description;
            }
            tags.extend(m.keywords);
        }
        out.insert(name, Entry { source: e.source, tarball, checksum, version, tags, description });
    }
    Ok(out)
}

/// The entries sharing a word with `query` (name, description, tags),
/// best first: more words matched, then by name.
pub fn search<'i>(index: &'i BTreeMap<String, Entry>, query: &str) -> Vec<(&'i String, &'i Entry)> {
    let words: Vec<String> =
        query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
    let mut hits: Vec<(usize, &String, &Entry)> = index
        .iter()
        .filter_map(|(name, e)| {
            let hay = format!("{name} {} {}", e.description, e.tags.join(" ")).to_lowercase();
            let n = words.iter().filter(|w| hay.contains(w.as_str())).count();
            (n > 0 || words.is_empty()).then_some((n, name, e))
        })
        .collect();
    hits.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    hits.into_iter().map(|(_, n, e)| (n, e)).collect()
}

/// Where an index comes from and how long a copy of it is trusted.
#[derive(Debug, Clone)]
pub struct Registry {
    /// An `http(s)://` URL or a file.
    pub url: String,
    /// Where copies are kept.
    pub cache_dir: PathBuf,
    /// How long a copy is used before it is fetched again.
    pub ttl: Duration,
}

/// An index as loaded.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Its modules.
    pub modules: BTreeMap<String, Entry>,
    /// When the copy was fetched.
    pub fetched: SystemTime,
    /// Whether it came from the cache.
    pub cached: bool,
}

impl Registry {
    fn cache_file(&self) -> PathBuf {
        let key = crate::tarball::sha256(self.url.as_bytes());
        self.cache_dir.join(format!("{}.json", &key["sha256:".len().."sha256:".len() + 16]))
    }

    /// The index: the cached copy while it is younger than the TTL (and
    /// `refresh` is not set), else fetched and cached. A local file is read
    /// every time.
    pub fn load(&self, refresh: bool) -> Result<Loaded, String> {
        let remote = self.url.starts_with("http://") || self.url.starts_with("https://");
        let cache = self.cache_file();
        if remote
            && !refresh
            && let Ok(meta) = std::fs::metadata(&cache)
            && let Ok(at) = meta.modified()
            && at.elapsed().is_ok_and(|age| age < self.ttl)
        {
            let text = std::fs::read_to_string(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
            return Ok(Loaded { modules: parse(&text)?, fetched: at, cached: true });
        }
        let bytes = crate::tarball::fetch(&self.url).map_err(|e| e.to_string())?;
        let text = String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8", self.url))?;
        let modules = parse(&text).map_err(|e| format!("{}: {e}", self.url))?;
        if remote {
            let _ = std::fs::create_dir_all(&self.cache_dir);
            let _ = std::fs::write(&cache, &text);
        }
        Ok(Loaded { modules, fetched: SystemTime::now(), cached: false })
    }
}

impl Registry {
    /// The index without the network: a file is read, a URL's cached copy
    /// is used whatever its age; `None` when there is no copy.
    pub fn cached(&self) -> Option<BTreeMap<String, Entry>> {
        let remote = self.url.starts_with("http://") || self.url.starts_with("https://");
        let text = if remote {
            std::fs::read_to_string(self.cache_file()).ok()?
        } else {
            std::fs::read_to_string(self.url.strip_prefix("file://").unwrap_or(&self.url)).ok()?
        };
        parse(&text).ok()
    }
}

/// Whether `path` looks like a tarball.
pub fn is_tarball(path: &str) -> bool {
    path.ends_with(".tar.gz") || path.ends_with(".tgz")
}

/// An index entry's folder source made absolute against the index file's
/// folder (an index on disk may name modules beside it).
pub fn beside(index_url: &str, source: &str) -> String {
    let base = Path::new(index_url.strip_prefix("file://").unwrap_or(index_url)).parent();
    match base {
        Some(b) if !source.contains("://") && !source.contains(':') && Path::new(source).is_relative() => {
            b.join(source).to_string_lossy().into_owned()
        }
        _ => source.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: &str = r#"{"modules": {
        "greeter": {"source": "github:acme/mods/greeter@^1", "version": "1.1.0", "tags": ["hello"], "description": "Greets people"},
        "summarizer": {"version": "2.0.0", "description": "Summarizes text", "tags": ["text"],
                       "distribution": {"tarball": "https://x/s.tar.gz", "checksum": "sha256:abcd"}}
    }}"#;

    #[test]
    fn both_entry_formats_are_read_and_searched() {
        let idx = parse(INDEX).unwrap();
        assert_eq!(idx["greeter"].source.as_deref(), Some("github:acme/mods/greeter@^1"));
        assert_eq!(idx["summarizer"].tarball.as_deref(), Some("https://x/s.tar.gz"));
        assert_eq!(idx["summarizer"].checksum.as_deref(), Some("sha256:abcd"));
        let names = |q: &str| search(&idx, q).into_iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>();
        assert_eq!(names("greets"), ["greeter"]);
        assert_eq!(names("text hello"), ["greeter", "summarizer"]);
        assert!(names("nothing").is_empty());
        assert!(parse(r#"{"modules": {"x": {"version": "1"}}}"#).unwrap_err().contains("modules.x"));
        // The registry-entry v1 format: identity, metadata, distribution.
        let v1 = parse(
            r#"{"modules": {"code-simplifier": {"identity": {"name": "code-simplifier", "namespace": "official",
                "version": "2.2.0", "spec_version": "2.2"}, "metadata": {"description": "Simplifies code",
                "author": "x", "tier": "decision", "keywords": ["refactor"]}, "dependencies": {},
                "distribution": {"tarball": "https://x/cs.tar.gz", "checksum": "sha256:00"}}}}"#,
        )
        .unwrap();
        let e = &v1["code-simplifier"];
        assert_eq!((e.version.as_deref(), e.description.as_str()), (Some("2.2.0"), "Simplifies code"));
        assert_eq!(e.tags, ["refactor"]);
        assert!(
            parse(r#"{"modules": {"x": {"distribution": {"tarball": "t", "checksum": "md5:1"}}}}"#)
                .unwrap_err()
                .contains("sha256")
        );
        assert!(is_tarball("a/b.tar.gz") && is_tarball("b.tgz") && !is_tarball("b.zip"));
        assert_eq!(beside("/r/index.json", "mods/a"), "/r/mods/a");
        assert_eq!(beside("/r/index.json", "github:a/b"), "github:a/b");
    }
}
