//! The file and store side of importing a Claude Code transcript (the pure
//! side is [`crate::import`]): where Claude Code keeps a project's sessions,
//! which file a session names, the transcript read with its subagents, a
//! redacted copy kept by hash, and the session recorded.

use std::path::{Path, PathBuf};

use noesis_frames::project::Project;
use noesis_frames::{FrameId, Timestamp};
use noesis_sandbox::Redactor;
use noesis_store::{NewSession, SessionKind, Store, StoreError};
use noesis_transcript::Transcript;

/// Why a transcript could not be found, read or imported.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// Neither a file nor a Claude Code project was named.
    #[error("name the transcript: noesis session import FILE.jsonl (or --claude-project DIR)")]
    Unnamed,
    /// The Claude Code project folder does not exist.
    #[error("--claude-project {}: no such folder", .0.display())]
    NoFolder(PathBuf, #[source] std::io::Error),
    /// No transcripts where the project's sessions should be.
    #[error("--claude-project {}: no transcripts there nor in {}", dir.display(), looked.display())]
    NoTranscripts {
        /// The folder named.
        dir: PathBuf,
        /// Where its sessions would be.
        looked: PathBuf,
    },
    /// The named session is not in the sessions folder.
    #[error("no session {name} in {}", dir.display())]
    NoSession {
        /// The session named.
        name: String,
        /// The sessions folder.
        dir: PathBuf,
    },
    /// The sessions folder holds no transcript.
    #[error("no transcripts in {}", .0.display())]
    Empty(PathBuf),
    /// An agent file not named `agent-<id>.jsonl`.
    #[error("--agent {}: an agent file is named agent-<id>.jsonl", .0.display())]
    AgentName(PathBuf),
    /// A file operation failed; `what` says which.
    #[error("{what}")]
    Io {
        /// What could not be done, naming the file.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file has no transcript records.
    #[error("{}: no records a transcript has (not a Claude Code session file?)", .0.display())]
    NoRecords(PathBuf),
    /// The copy could not be kept.
    #[error("keep a copy in {}", .0.display())]
    Keep(PathBuf, #[source] noesis_fs::WriteError),
    /// The session could not be built or stored.
    #[error("{}: nothing was imported", .path.display())]
    NotImported {
        /// The transcript.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> TranscriptError {
    move |source| TranscriptError::Io { what, source }
}

fn holds_jsonl(d: &Path) -> bool {
    std::fs::read_dir(d)
        .is_ok_and(|mut e| e.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "jsonl"))))
}

/// The name Claude Code gives a project folder under `projects/`: its
/// absolute path with every character but ASCII letters and digits `-`.
pub fn claude_name(abs: &Path) -> String {
    abs.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// Where Claude Code keeps a project's sessions: `dir` itself when it holds
/// transcripts, else `<config>/projects/<name>` for the project folder
/// `dir` (see [`claude_name`]); `config` is `$CLAUDE_CONFIG_DIR`, else
/// `~/.claude`.
///
/// # Errors
/// `dir` does not exist, or no transcripts are there.
pub fn sessions_dir(dir: &Path, config: &Path) -> Result<PathBuf, TranscriptError> {
    if holds_jsonl(dir) {
        return Ok(dir.to_owned());
    }
    let abs = std::fs::canonicalize(dir).map_err(|e| TranscriptError::NoFolder(dir.to_owned(), e))?;
    let found = config.join("projects").join(claude_name(&abs));
    if holds_jsonl(&found) {
        Ok(found)
    } else {
        Err(TranscriptError::NoTranscripts { dir: dir.to_owned(), looked: found })
    }
}

/// Claude Code's configuration folder from `CLAUDE_CONFIG_DIR` and `HOME`
/// as `env` gives them.
pub fn claude_config(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match env("CLAUDE_CONFIG_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env("HOME").unwrap_or_default()).join(".claude"),
    }
}

/// The transcript to import: the file named; with a Claude Code project
/// folder, the session of that id there (or a file named directly), or with
/// no id the newest session there.
///
/// # Errors
/// Nothing named, or no such session.
pub fn transcript_path(
    claude_project: Option<&Path>,
    transcript: Option<&str>,
    config: &Path,
) -> Result<PathBuf, TranscriptError> {
    match (claude_project, transcript) {
        (None, Some(t)) => Ok(PathBuf::from(t)),
        (None, None) => Err(TranscriptError::Unnamed),
        (Some(dir), Some(t)) => {
            let dir = sessions_dir(dir, config)?;
            let direct = PathBuf::from(t);
            if direct.is_file() {
                return Ok(direct);
            }
            let p = dir.join(format!("{}.jsonl", t.trim_end_matches(".jsonl")));
            if p.is_file() { Ok(p) } else { Err(TranscriptError::NoSession { name: t.to_owned(), dir }) }
        }
        (Some(dir), None) => {
            let dir = sessions_dir(dir, config)?;
            let newest = std::fs::read_dir(&dir)
                .map_err(io(format!("{}: cannot read", dir.display())))?
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .max();
            newest.map(|(_, p)| p).ok_or(TranscriptError::Empty(dir))
        }
    }
}

/// Reads the transcript at `path` (`bytes` are its contents) with its
/// subagents: the agent files found beside it and those in `agents`.
/// `warn` hears each line skipped and each agent no call started.
///
/// # Errors
/// An agent file misnamed or unreadable, or no transcript records.
pub fn parse(
    path: &Path,
    bytes: &[u8],
    agents: &[PathBuf],
    warn: &mut dyn FnMut(String),
) -> Result<Transcript, TranscriptError> {
    let mut t = noesis_transcript::parse(bytes);
    for p in t.problems() {
        warn(format!("warning: {} line {}: skipped: {}", path.display(), p.line, p.reason));
    }
    let mut found: Vec<(PathBuf, String, Option<String>)> = noesis_transcript::files::companions(path)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.path, c.agent_id, c.meta_tool_use_id))
        .collect();
    for f in agents {
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let Some((_, id)) = stem.rsplit_once("agent-") else {
            return Err(TranscriptError::AgentName(f.clone()));
        };
        found.push((f.clone(), id.to_owned(), None));
    }
    for (file, id, meta) in found {
        let b = std::fs::read(&file).map_err(io(format!("--agent {}: cannot read it", file.display())))?;
        let agent = noesis_transcript::parse(&b);
        for p in agent.problems() {
            warn(format!("warning: {} line {}: skipped: {}", file.display(), p.line, p.reason));
        }
        let s = t.attach_subagent(&id, meta.as_deref(), agent);
        if s.link == noesis_transcript::Link::Unmatched {
            warn(format!("warning: {}: no call of the session started agent {id}", file.display()));
        }
    }
    if t.records() == 0 {
        return Err(TranscriptError::NoRecords(path.to_owned()));
    }
    Ok(t)
}

/// Keeps a copy of the transcript in `dir` as `<hash>.jsonl`, secret values
/// redacted (a UTF-8 file; other bytes are kept as they are), unless one is
/// there: the transcript is the source of truth, so moving or deleting the
/// original loses nothing.
///
/// # Errors
/// The copy cannot be written.
pub fn keep(dir: &Path, hash: &str, bytes: &[u8], redactor: &Redactor) -> Result<PathBuf, TranscriptError> {
    let kept = dir.join(format!("{hash}.jsonl"));
    if !kept.exists() {
        std::fs::create_dir_all(dir).ok();
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => redactor.redact(text).into_owned().into_bytes(),
            Err(_) => bytes.to_vec(),
        };
        noesis_fs::write_atomic(&kept, &text).map_err(|e| TranscriptError::Keep(kept.clone(), e))?;
    }
    Ok(kept)
}

/// Builds the session of `t` (read from `path`, whose contents hash to
/// `hash`), redacts it and records it; returns the new session's id.
///
/// # Errors
/// The session cannot be built or stored.
pub async fn record(
    store: &dyn Store,
    project: &Project,
    path: &Path,
    hash: &str,
    t: &Transcript,
    redactor: &Redactor,
    now: Timestamp,
) -> Result<String, TranscriptError> {
    let not_imported =
        |e: Box<dyn std::error::Error + Send + Sync>| TranscriptError::NotImported { path: path.to_owned(), source: e };
    let session_id = FrameId::generate().to_string();
    let root = project.root.clone();
    let hash_now = |name: &str| noesis_frames::scan::hash_file(&noesis_frames::project::resolve(&root, name)).ok();
    let mut imported = crate::import::build(t, project, &session_id, &path.to_string_lossy(), now, &hash_now)
        .map_err(|e| not_imported(Box::new(e)))?;
    crate::import::redact(&mut imported, redactor);
    store
        .record_session(&NewSession {
            kind: SessionKind::Transcript,
            artifacts: &imported.session,
            frames: &imported.frames,
            source_hash: Some(hash),
        })
        .await
        .map_err(|e: StoreError| not_imported(Box::new(e)))?;
    Ok(session_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_names_a_project_by_its_path() {
        assert_eq!(claude_name(Path::new("/home/a.b/my_proj")), "-home-a-b-my-proj");
    }

    #[test]
    fn the_config_folder_is_claude_config_dir_else_dot_claude() {
        let env = |vars: &'static [(&str, &str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(claude_config(&env(&[("CLAUDE_CONFIG_DIR", "/c"), ("HOME", "/h")])), Path::new("/c"));
        assert_eq!(claude_config(&env(&[("CLAUDE_CONFIG_DIR", ""), ("HOME", "/h")])), Path::new("/h/.claude"));
    }

    #[test]
    fn a_project_folder_leads_to_its_sessions_and_the_newest_one() {
        let t = tempfile::tempdir().unwrap();
        let project = t.path().join("proj");
        std::fs::create_dir(&project).unwrap();
        let config = t.path().join("config");
        let sessions = config.join("projects").join(claude_name(&project.canonicalize().unwrap()));
        assert!(matches!(sessions_dir(&project, &config), Err(TranscriptError::NoTranscripts { .. })));
        std::fs::create_dir_all(&sessions).unwrap();
        std::fs::write(sessions.join("s1.jsonl"), "{}").unwrap();
        assert_eq!(sessions_dir(&project, &config).unwrap(), sessions);
        assert_eq!(sessions_dir(&sessions, &config).unwrap(), sessions, "a folder of transcripts is itself");
        assert_eq!(transcript_path(Some(&project), Some("s1"), &config).unwrap(), sessions.join("s1.jsonl"));
        assert_eq!(transcript_path(Some(&project), None, &config).unwrap(), sessions.join("s1.jsonl"));
        assert!(matches!(
            transcript_path(Some(&project), Some("s2.jsonl"), &config),
            Err(TranscriptError::NoSession { .. })
        ));
        assert!(matches!(transcript_path(None, None, &config), Err(TranscriptError::Unnamed)));
        assert!(matches!(sessions_dir(&t.path().join("missing"), &config), Err(TranscriptError::NoFolder(..))));
    }

    #[test]
    fn a_misnamed_agent_file_and_an_empty_transcript_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("s.jsonl");
        let mut warnings = Vec::new();
        let e = parse(&path, b"", &[t.path().join("helper.jsonl")], &mut |w| warnings.push(w)).unwrap_err();
        assert!(matches!(e, TranscriptError::AgentName(_)), "{e}");
        let e = parse(&path, b"not json\n", &[], &mut |w| warnings.push(w)).unwrap_err();
        assert!(matches!(e, TranscriptError::NoRecords(_)), "{e}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn the_copy_is_kept_once_and_redacted() {
        let t = tempfile::tempdir().unwrap();
        let secret = "ghp_Zq8v3LmN0pRt5WxY2bC7dE9fG1hJ4kM6";
        let redactor = Redactor::new(&[], &[], &[secret.to_owned()]);
        let kept = keep(&t.path().join("transcripts"), "h", format!("token {secret}\n").as_bytes(), &redactor).unwrap();
        let text = std::fs::read_to_string(&kept).unwrap();
        assert!(!text.contains(secret) && text.starts_with("token "), "{text}");
        keep(&t.path().join("transcripts"), "h", b"other", &redactor).unwrap();
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), text, "an existing copy is left alone");
    }
}
