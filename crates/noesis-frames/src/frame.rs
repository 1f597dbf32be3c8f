//! The frame itself: [`CausalFrame`], its status, evidence and structured
//! invalidation condition. Pure data; no I/O.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::error::FramesError;

/// A frame's id: a UUID v7 in its hyphenated text form, so ids sort by
/// creation time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FrameId(String);

impl FrameId {
    /// A fresh, time-ordered id.
    #[must_use]
    pub fn generate() -> FrameId {
        FrameId(uuid::Uuid::now_v7().to_string())
    }

    /// Wraps an id read back from storage or typed by a person. Only the
    /// shape is checked: a non-empty string without whitespace.
    ///
    /// # Errors
    /// [`FramesError::BadId`] for an empty id or one with whitespace.
    pub fn parse(text: &str) -> Result<FrameId, FramesError> {
        if text.is_empty() || text.chars().any(char::is_whitespace) || text.len() > 128 {
            return Err(FramesError::BadId(text.to_owned()));
        }
        Ok(FrameId(text.to_owned()))
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FrameId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// Where a frame stands. Nothing is ever deleted: invalidation and pivots
/// change the status and record when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Being worked on.
    Active,
    /// Set aside by a pivot or a backtrack; can resume.
    Suspended,
    /// Finished; its conclusion stands.
    Completed,
    /// Its evidence no longer holds (terminal).
    Invalidated,
    /// Finished and promoted to lasting knowledge.
    Promoted,
}

impl Status {
    /// Every status, in a stable order.
    pub const ALL: [Status; 5] =
        [Status::Active, Status::Suspended, Status::Completed, Status::Invalidated, Status::Promoted];

    /// The lowercase name used in JSON, SQL and the CLI.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Suspended => "suspended",
            Status::Completed => "completed",
            Status::Invalidated => "invalidated",
            Status::Promoted => "promoted",
        }
    }

    /// Whether the frame's conclusion may still be relied on (anything but
    /// invalidated).
    #[must_use]
    pub fn is_live(self) -> bool {
        self != Status::Invalidated
    }

    /// The allowed transitions. `invalidated` is terminal; a suspended frame
    /// resumes to `active`; promotion needs a completed frame.
    #[must_use]
    pub fn can_become(self, next: Status) -> bool {
        use Status::{Active, Completed, Invalidated, Promoted, Suspended};
        matches!(
            (self, next),
            (Active, Suspended | Completed | Invalidated | Promoted)
                | (Suspended, Active | Completed | Invalidated)
                | (Completed, Active | Promoted | Invalidated)
                | (Promoted, Invalidated)
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Status {
    type Err = FramesError;
    fn from_str(s: &str) -> Result<Status, FramesError> {
        Status::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| FramesError::BadStatus(s.to_owned()))
    }
}

/// One status change, kept forever.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusChange {
    /// The status the frame took.
    pub status: Status,
    /// When.
    pub at: Timestamp,
    /// Why, in words (for invalidations: the cause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The session during which the change happened, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// A file as it was when a frame used it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileRef {
    /// Path relative to the project root with `/` separators, or an
    /// absolute path for a file outside the project.
    pub path: String,
    /// blake3 of the file's bytes, 64 lowercase hex digits.
    pub hash: String,
}

/// The kinds of part a condition may name: `sig`, a function's signature.
/// Only these are parts, so a file that happens to be named `a#b:c` is
/// still a file.
pub const PART_KINDS: &[&str] = &["sig"];

/// Splits a condition's path into the file and the part of it the hash
/// covers: `src/calc.py#sig:Calc.add` is the signature of `Calc.add` in
/// `src/calc.py`, so a change elsewhere in the file leaves it standing. A
/// part is `#`, a kind of [`PART_KINDS`], `:` and a name; any other path is
/// a whole file.
#[must_use]
pub fn split_part(path: &str) -> (&str, Option<(&str, &str)>) {
    if let Some(at) = path.rfind('#') {
        let (file, rest) = (&path[..at], &path[at + 1..]);
        if let Some((kind, name)) = rest.split_once(':')
            && !file.is_empty()
            && PART_KINDS.contains(&kind)
            && !name.is_empty()
        {
            return (file, Some((kind, name)));
        }
    }
    (path, None)
}

/// What a frame's conclusion rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    /// A file that was read, with its hash at the time.
    File {
        /// Project-relative (or absolute) path.
        path: String,
        /// blake3 hex digest of the bytes read.
        hash: String,
    },
    /// Another frame whose conclusion was used (a child or any other).
    Frame {
        /// The cited frame.
        frame_id: FrameId,
    },
    /// What a tool returned.
    Observation {
        /// The tool's name.
        tool: String,
        /// The observation, or a digest of it when it is large.
        content: String,
    },
}

/// When a frame stops holding. The structured parts are checked by machine;
/// the note is for people.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InvalidationCondition {
    /// Invalid as soon as one of these files has another hash (or is gone).
    #[serde(default)]
    pub files: Vec<FileRef>,
    /// Invalid as soon as one of these frames is invalidated.
    #[serde(default)]
    pub frames: Vec<FrameId>,
    /// Invalid from this time on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// Free text; never checked by machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl InvalidationCondition {
    /// The condition implied by the evidence: every file (path + hash) and
    /// every cited frame, normalised (see [`InvalidationCondition::normalise`]).
    #[must_use]
    pub fn from_evidence(evidence: &[Evidence]) -> InvalidationCondition {
        let mut c = InvalidationCondition::default();
        for e in evidence {
            match e {
                Evidence::File { path, hash } => c.files.push(FileRef { path: path.clone(), hash: hash.clone() }),
                Evidence::Frame { frame_id } => c.frames.push(frame_id.clone()),
                Evidence::Observation { .. } => {}
            }
        }
        c.normalise();
        c
    }

    /// Sorts files by path (one entry per path, the last wins) and frames by
    /// id without repeats, so equal conditions compare equal (and read back
    /// from a store as they were written).
    pub fn normalise(&mut self) {
        let mut files = std::collections::BTreeMap::new();
        for f in self.files.drain(..) {
            files.insert(f.path, f.hash);
        }
        self.files = files.into_iter().map(|(path, hash)| FileRef { path, hash }).collect();
        self.frames.sort();
        self.frames.dedup();
    }
}

/// When a frame was made, last changed, and every status it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timestamps {
    /// Creation time.
    pub created_at: Timestamp,
    /// Time of the last status change (or creation).
    pub updated_at: Timestamp,
    /// Every status the frame took, oldest first; the last is its status.
    pub history: Vec<StatusChange>,
}

/// One step of reasoning: a node of the call tree. Field names are those of
/// `DESIGN.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CausalFrame {
    /// This frame.
    pub frame_id: FrameId,
    /// The project it belongs to (see `project::identify`).
    pub project_id: String,
    /// The session it was made in, if any.
    #[serde(default)]
    pub session_id: Option<String>,
    /// 0 for a root, the parent's depth + 1 otherwise.
    pub depth: u32,
    /// The caller.
    pub parent_id: Option<FrameId>,
    /// The frames made under this one, oldest first.
    #[serde(default)]
    pub children: Vec<FrameId>,
    /// What was asked.
    pub query: String,
    /// The context the step was given.
    #[serde(default)]
    pub context_slice: String,
    /// What the conclusion rests on.
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// What was concluded.
    #[serde(default)]
    pub conclusion: String,
    /// 0 to 1.
    pub confidence: f64,
    /// When the conclusion stops holding.
    #[serde(default)]
    pub invalidation_condition: InvalidationCondition,
    /// Current status (the last entry of `timestamps.history`).
    pub status: Status,
    /// The frame this one pivoted or backtracked away from.
    #[serde(default)]
    pub branched_from: Option<FrameId>,
    /// Creation, last change and status history.
    pub timestamps: Timestamps,
}

/// What a caller supplies to make a frame; the rest (id, depth, parent,
/// timestamps) comes from where the frame is put.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    /// What is asked.
    pub query: String,
    /// The context the step is given.
    pub context_slice: String,
    /// What the conclusion rests on.
    pub evidence: Vec<Evidence>,
    /// What was concluded (empty while active).
    pub conclusion: String,
    /// 0 to 1.
    pub confidence: f64,
    /// Extra conditions; the evidence's files and frames are always added.
    pub condition: InvalidationCondition,
    /// Initial status (`None` = active).
    pub status: Option<Status>,
}

impl Draft {
    /// A draft with only a query.
    #[must_use]
    pub fn new(query: impl Into<String>) -> Draft {
        Draft { query: query.into(), ..Draft::default() }
    }

    /// Makes the frame: a root when `parent` is `None`, otherwise a child one
    /// level deeper in the parent's project and session.
    ///
    /// # Errors
    /// [`FramesError::Invalid`] when the confidence is not a number in 0..=1
    /// or the query is empty.
    pub fn into_frame(
        self,
        project_id: &str,
        session_id: Option<&str>,
        parent: Option<&CausalFrame>,
        now: Timestamp,
    ) -> Result<CausalFrame, FramesError> {
        if !(0.0..=1.0).contains(&self.confidence) {
            return Err(FramesError::Invalid(format!("confidence {} is not in 0..=1", self.confidence)));
        }
        if self.query.trim().is_empty() {
            return Err(FramesError::Invalid("the query is empty".to_owned()));
        }
        let mut condition = InvalidationCondition::from_evidence(&self.evidence);
        condition.files.extend(self.condition.files);
        condition.frames.extend(self.condition.frames);
        condition.expires_at = self.condition.expires_at;
        condition.note = self.condition.note;
        condition.normalise();
        let status = self.status.unwrap_or(Status::Active);
        let (project_id, session_id) = match parent {
            Some(p) => (p.project_id.clone(), session_id.map(str::to_owned).or_else(|| p.session_id.clone())),
            None => (project_id.to_owned(), session_id.map(str::to_owned)),
        };
        Ok(CausalFrame {
            frame_id: FrameId::generate(),
            project_id,
            session_id: session_id.clone(),
            depth: parent.map_or(0, |p| p.depth + 1),
            parent_id: parent.map(|p| p.frame_id.clone()),
            children: Vec::new(),
            query: self.query,
            context_slice: self.context_slice,
            evidence: self.evidence,
            conclusion: self.conclusion,
            confidence: self.confidence,
            invalidation_condition: condition,
            status,
            branched_from: None,
            timestamps: Timestamps {
                created_at: now,
                updated_at: now,
                history: vec![StatusChange { status, at: now, reason: None, session_id }],
            },
        })
    }
}

impl CausalFrame {
    /// Whether the frame's structured condition names `path`.
    #[must_use]
    pub fn cites_file(&self, path: &str) -> bool {
        self.invalidation_condition.files.iter().any(|f| f.path == path)
    }

    /// Whether the query or the conclusion contains `text`, ignoring case.
    #[must_use]
    pub fn mentions(&self, text: &str) -> bool {
        let t = text.to_lowercase();
        self.query.to_lowercase().contains(&t) || self.conclusion.to_lowercase().contains(&t)
    }

    /// Whether no model produced the conclusion (see [`is_fabricated`]).
    #[must_use]
    pub fn is_fabricated(&self) -> bool {
        is_fabricated(&self.context_slice)
    }
}

/// Whether a context slice marks its frame as fabricated — made up by the
/// test model from a schema, not concluded by any model — with
/// `"fabricated": true`. Such a frame is never evidence for another.
#[must_use]
pub fn is_fabricated(context_slice: &str) -> bool {
    // Cheap test first: most slices are not marked.
    context_slice.contains("\"fabricated\"")
        && serde_json::from_str::<serde_json::Value>(context_slice)
            .is_ok_and(|v| v.get("fabricated") == Some(&serde_json::Value::Bool(true)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parts_of_files() {
        use super::split_part;
        assert_eq!(split_part("src/calc.py#sig:Calc.add"), ("src/calc.py", Some(("sig", "Calc.add"))));
        assert_eq!(split_part("a#b#sig:f"), ("a#b", Some(("sig", "f"))));
        for whole in ["src/calc.py", "notes#1.md", "x#Sig:f", "#sig:f", "x#sig:", "x#:f", "notes#fix:login.md"] {
            assert_eq!(split_part(whole), (whole, None), "{whole}");
        }
    }

    use super::*;

    #[test]
    fn fabricated_frames_are_marked_in_their_context() {
        assert!(is_fabricated(r#"{"model": "test/schema", "fabricated": true}"#));
        assert!(!is_fabricated(r#"{"model": "x", "fabricated": false}"#));
        assert!(!is_fabricated(r#"{"note": "\"fabricated\": true"}"#));
        assert!(!is_fabricated("not json \"fabricated\""));
    }

    #[test]
    fn statuses_round_trip_and_reject_unknown_names() {
        for s in Status::ALL {
            assert_eq!(s.as_str().parse::<Status>().unwrap(), s);
        }
        let err = "done".parse::<Status>().unwrap_err().to_string();
        assert!(err.contains("done") && err.contains("active"), "{err}");
    }

    #[test]
    fn transitions() {
        use Status::*;
        let ok = |a: Status, b: Status| a.can_become(b);
        assert!(ok(Active, Suspended) && ok(Suspended, Active) && ok(Completed, Promoted));
        assert!(!ok(Invalidated, Active) && !ok(Invalidated, Suspended) && !ok(Active, Active));
        assert!(!ok(Suspended, Promoted) && !ok(Promoted, Active));
        for s in Status::ALL {
            assert_eq!(ok(s, Invalidated), s != Invalidated);
        }
    }

    #[test]
    fn condition_comes_from_evidence() {
        let ev = vec![
            Evidence::File { path: "b.rs".into(), hash: "1".into() },
            Evidence::Frame { frame_id: FrameId::parse("f1").unwrap() },
            Evidence::File { path: "a.rs".into(), hash: "2".into() },
            Evidence::File { path: "b.rs".into(), hash: "3".into() },
            Evidence::Observation { tool: "ls".into(), content: "x".into() },
            Evidence::Frame { frame_id: FrameId::parse("f1").unwrap() },
        ];
        let c = InvalidationCondition::from_evidence(&ev);
        assert_eq!(
            c.files,
            vec![FileRef { path: "a.rs".into(), hash: "2".into() }, FileRef { path: "b.rs".into(), hash: "3".into() }]
        );
        assert_eq!(c.frames, vec![FrameId::parse("f1").unwrap()]);
    }

    #[test]
    fn drafts_check_confidence_and_query() {
        let t = Timestamp::from_millis(0);
        let mut d = Draft::new("q");
        d.confidence = 1.5;
        assert!(d.into_frame("p", None, None, t).unwrap_err().to_string().contains("confidence 1.5"));
        let mut d = Draft::new(" ");
        d.confidence = 0.5;
        assert!(d.into_frame("p", None, None, t).unwrap_err().to_string().contains("query is empty"));
        let mut d = Draft::new("q");
        d.confidence = f64::NAN;
        assert!(d.into_frame("p", None, None, t).is_err());
    }

    #[test]
    fn children_are_one_level_deeper_in_the_parents_project() {
        let t = Timestamp::from_millis(5);
        let root = Draft::new("root").into_frame("p", Some("s1"), None, t).unwrap();
        let child = Draft::new("child").into_frame("other", None, Some(&root), t).unwrap();
        assert_eq!((child.depth, child.project_id.as_str()), (1, "p"));
        assert_eq!(child.parent_id.as_ref(), Some(&root.frame_id));
        assert_eq!(child.session_id.as_deref(), Some("s1"));
        assert_eq!(child.timestamps.history.len(), 1);
        assert_eq!(child.status, Status::Active);
    }

    #[test]
    fn ids_reject_whitespace() {
        assert!(FrameId::parse("a b").is_err());
        assert!(FrameId::parse("").is_err());
        assert_ne!(FrameId::generate(), FrameId::generate());
    }
}
