//! Sessions: what a session saw ([`SessionArtifacts`]) and what changed
//! since the previous one ([`SessionDiff`]). Pure: the scan that produces the
//! hashes lives in `scan`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{FrameId, Timestamp};

/// What a session did with a file. A scan (`noesis session start`) reads
/// every file it hashes; an imported transcript or a `solve` episode reads,
/// changes and creates files. What changed between two sessions is their
/// [`SessionDiff`], not a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileRole {
    /// Read (or hashed) it.
    Read,
    /// Changed a file that existed.
    Modified,
    /// Made it.
    Created,
}

impl FileRole {
    /// The lowercase name used in JSON and SQL.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FileRole::Read => "read",
            FileRole::Modified => "modified",
            FileRole::Created => "created",
        }
    }

    /// The role for a stored name.
    #[must_use]
    pub fn from_name(s: &str) -> Option<FileRole> {
        [FileRole::Read, FileRole::Modified, FileRole::Created].into_iter().find(|r| r.as_str() == s)
    }
}

/// One file of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// blake3 hex digest.
    pub hash: String,
    /// Relation to the previous session.
    pub role: FileRole,
}

/// What a session saw. Field names are those of `DESIGN.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionArtifacts {
    /// This session.
    pub session_id: String,
    /// The project (see `project::identify`).
    pub project_id: String,
    /// The prompt the session started with.
    pub initial_prompt: Option<String>,
    /// Project-relative path → hash and role, for every file in scope.
    pub files: BTreeMap<String, FileEntry>,
    /// The paths scanned, project-relative (`""` = the whole project).
    pub scope: Vec<String>,
    /// The session's root frame.
    pub root_frame_id: Option<FrameId>,
    /// Path to the raw transcript, if one was given.
    pub conversation_log: Option<String>,
    /// When the session started.
    pub created_at: Timestamp,
}

/// The files of a scan: the session read each of them.
#[must_use]
pub fn scanned(scan: &BTreeMap<String, String>) -> BTreeMap<String, FileEntry> {
    scan.iter().map(|(path, hash)| (path.clone(), FileEntry { hash: hash.clone(), role: FileRole::Read })).collect()
}

/// Whether `path` lies under one of the scope entries (`""` is everything).
#[must_use]
pub fn in_scope(scope: &[String], path: &str) -> bool {
    scope.iter().any(|s| s.is_empty() || path == s || path.strip_prefix(s.as_str()).is_some_and(|r| r.starts_with('/')))
}

/// Same prompt or a new one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "prompt", rename_all = "snake_case")]
pub enum PromptChange {
    /// No previous session.
    First,
    /// The same text (or both without one).
    Same,
    /// Another text.
    New {
        /// The previous session's prompt.
        previous: Option<String>,
        /// This session's prompt.
        current: Option<String>,
    },
}

/// What changed between two sessions' files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChanges {
    /// Present in both with another hash.
    pub changed: Vec<String>,
    /// Only in the later session.
    pub added: Vec<String>,
    /// Only in the earlier one, and inside the later one's scope.
    pub removed: Vec<String>,
    /// Present in both with the same hash.
    pub unchanged: usize,
}

/// The later session against the earlier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDiff {
    /// The later session.
    pub session_id: String,
    /// The earlier one, if any.
    pub previous_session_id: Option<String>,
    /// Same or new prompt.
    #[serde(flatten)]
    pub prompt: PromptChange,
    /// Files changed, added, removed.
    pub files: FileChanges,
}

/// Compares a session with the one before it (`None` for the first).
#[must_use]
pub fn diff(previous: Option<&SessionArtifacts>, current: &SessionArtifacts) -> SessionDiff {
    let mut files = FileChanges::default();
    let empty = BTreeMap::new();
    let before = previous.map_or(&empty, |p| &p.files);
    for (path, entry) in &current.files {
        match before.get(path) {
            None => files.added.push(path.clone()),
            Some(e) if e.hash == entry.hash => files.unchanged += 1,
            Some(_) => files.changed.push(path.clone()),
        }
    }
    files.removed =
        before.keys().filter(|p| !current.files.contains_key(*p) && in_scope(&current.scope, p)).cloned().collect();
    let prompt = match previous {
        None => PromptChange::First,
        Some(p) if p.initial_prompt == current.initial_prompt => PromptChange::Same,
        Some(p) => PromptChange::New { previous: p.initial_prompt.clone(), current: current.initial_prompt.clone() },
    };
    SessionDiff {
        session_id: current.session_id.clone(),
        previous_session_id: previous.map(|p| p.session_id.clone()),
        prompt,
        files,
    }
}

/// Two sessions a person declared related (`noesis session link A B`): the
/// only way one session's frames reach a plugin working in the other. A link
/// has no direction; `a` is the smaller id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLink {
    /// One session (the smaller id).
    pub a: String,
    /// The other.
    pub b: String,
    /// Why, in the words of whoever linked them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the link was made.
    pub created_at: Timestamp,
}

impl SessionLink {
    /// A link between two different sessions, in its stored order; `None`
    /// when both ids are the same.
    #[must_use]
    pub fn new(x: &str, y: &str, reason: Option<String>, created_at: Timestamp) -> Option<SessionLink> {
        let (a, b) = match x.cmp(y) {
            std::cmp::Ordering::Less => (x, y),
            std::cmp::Ordering::Greater => (y, x),
            std::cmp::Ordering::Equal => return None,
        };
        Some(SessionLink { a: a.to_owned(), b: b.to_owned(), reason, created_at })
    }

    /// The session on the other end from `session_id`, if the link touches it.
    #[must_use]
    pub fn other(&self, session_id: &str) -> Option<&str> {
        if self.a == session_id {
            Some(&self.b)
        } else if self.b == session_id {
            Some(&self.a)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn links_have_no_direction() {
        let t = crate::Timestamp::from_millis(5);
        let l = super::SessionLink::new("s2", "s1", None, t).unwrap();
        assert_eq!((l.a.as_str(), l.b.as_str()), ("s1", "s2"));
        assert_eq!(l, super::SessionLink::new("s1", "s2", None, t).unwrap());
        assert_eq!(l.other("s1"), Some("s2"));
        assert_eq!(l.other("s2"), Some("s1"));
        assert_eq!(l.other("s3"), None);
        assert!(super::SessionLink::new("s1", "s1", None, t).is_none());
    }

    use super::*;

    fn scan(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(p, h)| ((*p).to_owned(), (*h).to_owned())).collect()
    }

    fn session(id: &str, prompt: Option<&str>, files: BTreeMap<String, FileEntry>, scope: &[&str]) -> SessionArtifacts {
        SessionArtifacts {
            session_id: id.into(),
            project_id: "p".into(),
            initial_prompt: prompt.map(str::to_owned),
            files,
            scope: scope.iter().map(|s| (*s).to_owned()).collect(),
            root_frame_id: None,
            conversation_log: None,
            created_at: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn a_scan_reads_every_file() {
        let files = scanned(&scan(&[("a", "1"), ("b", "2")]));
        assert!(files.values().all(|e| e.role == FileRole::Read));
        assert_eq!(files["b"].hash, "2");
        for r in [FileRole::Read, FileRole::Modified, FileRole::Created] {
            assert_eq!(FileRole::from_name(r.as_str()), Some(r));
        }
    }

    #[test]
    fn diff_names_changed_added_removed_and_the_prompt() {
        let a = session("s1", Some("fix it"), scanned(&scan(&[("src/a", "1"), ("src/b", "1"), ("doc/x", "1")])), &[""]);
        let files = scanned(&scan(&[("src/a", "2"), ("src/c", "1")]));
        let b = session("s2", Some("fix it"), files, &["src"]);
        let d = diff(Some(&a), &b);
        assert_eq!(d.prompt, PromptChange::Same);
        assert_eq!(d.files.changed, vec!["src/a"]);
        assert_eq!(d.files.added, vec!["src/c"]);
        assert_eq!(d.files.removed, vec!["src/b"], "doc/x is outside the new scope, so not removed");
        let c = session("s3", Some("other"), b.files.clone(), &["src"]);
        assert!(matches!(diff(Some(&b), &c).prompt, PromptChange::New { .. }));
        assert_eq!(diff(None, &a).prompt, PromptChange::First);
        assert_eq!(diff(None, &a).files.added.len(), 3);
    }

    #[test]
    fn scope_matching_is_by_path_component() {
        let scope = vec!["src".to_owned()];
        assert!(in_scope(&scope, "src/a.rs") && in_scope(&scope, "src"));
        assert!(!in_scope(&scope, "srcx/a.rs"));
        assert!(in_scope(&[String::new()], "anything"));
    }
}
