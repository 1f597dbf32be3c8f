//! A Claude Code transcript as a session: the frame tree (a root for the
//! session, the prompts as refinements, backtracks and pivots, tool calls as
//! children, a subagent's calls under the call that started it) and the
//! files with what the session did to them. Pure: the caller reads the
//! files, hashes what the transcript does not show and stores the result.

use std::collections::{BTreeMap, HashMap};

use noesis_frames::project::Project;
use noesis_frames::scan::hash_bytes;
use noesis_frames::{CausalFrame, Draft, Evidence, FileEntry, FileRole, FrameId, SessionArtifacts, Status, Timestamp};
use noesis_transcript::{PromptKind, Role, ToolCall, Transcript};

/// The start of a prompt frame's context slice (`ask` finds an imported
/// session's prompts by it).
pub const PROMPT_SLICE: &str = "prompt at line";

/// How much of a prompt or result a frame keeps.
const TEXT: usize = 4000;

fn clip(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_owned();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A path as the session's files name it: project-relative when it lies in
/// the project (the transcript's cwd standing in for the project root, since
/// a transcript may come from another machine), else as written.
pub fn project_path(path: &str, cwd: Option<&str>, root: &str) -> String {
    for base in [Some(root), cwd].into_iter().flatten() {
        let base = base.trim_end_matches('/');
        if let Some(rest) = path.strip_prefix(base).and_then(|r| r.strip_prefix('/')) {
            return rest.to_owned();
        }
    }
    path.to_owned()
}

/// What an import makes.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The session, its files and what it did to them.
    pub session: SessionArtifacts,
    /// The root first, then parents before children.
    pub frames: Vec<CausalFrame>,
}

/// Replaces secret values in every text the import keeps: prompts,
/// conclusions, context slices and observations.
pub fn redact(imported: &mut Imported, redactor: &noesis_sandbox::Redactor) {
    if redactor.is_empty() {
        return;
    }
    let clean = |s: &mut String| {
        if let std::borrow::Cow::Owned(o) = redactor.redact(s) {
            *s = o;
        }
    };
    if let Some(p) = &mut imported.session.initial_prompt {
        clean(p);
    }
    for f in &mut imported.frames {
        clean(&mut f.query);
        clean(&mut f.conclusion);
        clean(&mut f.context_slice);
        for e in &mut f.evidence {
            if let Evidence::Observation { content, .. } = e {
                clean(content);
            }
        }
    }
}

fn time_of(text: Option<&str>, fallback: Timestamp) -> Timestamp {
    text.and_then(|t| Timestamp::parse(t).ok()).unwrap_or(fallback)
}

fn call_query(c: &ToolCall) -> String {
    let key = ["file_path", "path", "command", "pattern", "description", "url", "query"]
        .iter()
        .find_map(|k| c.input.get(*k).and_then(serde_json::Value::as_str));
    match key {
        Some(k) => format!("{} {}", c.name, clip(k, 200)),
        None => format!("{} {}", c.name, clip(&c.input.to_string(), 200)),
    }
}

/// Builds the session. `hash_now` gives the hash of a file on disk now (by
/// its project path), used for files whose content the transcript does not
/// show.
pub fn build(
    t: &Transcript,
    project: &Project,
    session_id: &str,
    log: &str,
    now: Timestamp,
    hash_now: &dyn Fn(&str) -> Option<String>,
) -> Result<Imported, noesis_frames::FramesError> {
    let root_text = project.root.to_string_lossy().into_owned();
    let cwd = t.cwd();
    let start = time_of(t.first_timestamp(), now);
    let pid = &project.project_id;
    let sid = Some(session_id);
    let first = t.prompts().first().map(|p| p.text.clone());
    let mut root = Draft {
        context_slice: format!(
            "Claude Code session {} (version {}), cwd {}, branch {}; {} record(s), {} prompt(s), {} tool call(s)",
            t.session_id().unwrap_or("?"),
            t.versions().join(", "),
            cwd.unwrap_or("?"),
            t.git_branch().unwrap_or("?"),
            t.records(),
            t.prompts().len(),
            t.tool_calls().len()
        ),
        confidence: 1.0,
        status: Some(Status::Completed),
        ..Draft::new(format!(
            "transcript: {}",
            clip(first.as_deref().filter(|f| !f.trim().is_empty()).unwrap_or("(no prompt)"), 200)
        ))
    }
    .into_frame(pid, sid, None, start)?;
    root.conclusion = t.last_timestamp().map(|l| format!("ended {l}")).unwrap_or_default();
    let mut frames: Vec<CausalFrame> = vec![root.clone()];
    let mut index: HashMap<FrameId, usize> = HashMap::from([(root.frame_id.clone(), 0)]);
    let push = |frames: &mut Vec<CausalFrame>, index: &mut HashMap<FrameId, usize>, f: CausalFrame| {
        if let Some(p) = f.parent_id.as_ref().and_then(|p| index.get(p).copied()) {
            frames[p].children.push(f.frame_id.clone());
        }
        index.insert(f.frame_id.clone(), frames.len());
        frames.push(f);
    };

    // What each prompt's turn concluded: the last text the model wrote
    // before the next prompt on its branch.
    let prompt_of_uuid: HashMap<&str, usize> =
        t.prompts().iter().enumerate().map(|(i, p)| (p.uuid.as_str(), i)).collect();
    let mut answer: BTreeMap<usize, String> = BTreeMap::new();
    for r in t.responses().iter().filter(|r| !r.sidechain && !r.text.trim().is_empty()) {
        let Some(first_uuid) = r.uuids.first() else { continue };
        if let Some(p) = t.ancestors(first_uuid).iter().find_map(|m| prompt_of_uuid.get(m.uuid.as_str()).copied()) {
            answer.insert(p, r.text.clone());
        }
    }

    // Prompts: the branch operations.
    let mut prompt_frames: Vec<FrameId> = Vec::new();
    for (i, p) in t.prompts().iter().enumerate() {
        let at = time_of(p.timestamp.as_deref(), start);
        // Only earlier prompts have frames; a link forward (a malformed
        // tree) hangs the prompt under the root.
        let earlier = |k: Option<usize>| k.filter(|&k| k < i);
        let parent_ix = match p.kind {
            PromptKind::Refine | PromptKind::Backtrack => earlier(p.follows).map_or(0, |f| index[&prompt_frames[f]]),
            PromptKind::Root | PromptKind::Pivot => 0,
        };
        let text =
            if p.text.trim().is_empty() { format!("({} image(s), no text)", p.images) } else { clip(&p.text, TEXT) };
        let parent = frames[parent_ix].clone();
        let mut f = Draft {
            context_slice: format!("{PROMPT_SLICE} {} ({})", p.line, format!("{:?}", p.kind).to_lowercase()),
            conclusion: answer.get(&i).map(|a| clip(a, TEXT)).unwrap_or_default(),
            confidence: 1.0,
            status: Some(Status::Completed),
            ..Draft::new(text)
        }
        .into_frame(pid, sid, Some(&parent), at)?;
        // A backtrack sets the branch it replaces aside; a pivot the
        // line of work before it.
        let aside = match p.kind {
            PromptKind::Backtrack => earlier(p.replaces),
            PromptKind::Pivot => i.checked_sub(1),
            _ => None,
        };
        if let Some(a) = aside {
            let old = &prompt_frames[a];
            f.branched_from = Some(old.clone());
            let ix = index[old];
            set_aside(&mut frames[ix], at, session_id, p.kind);
        }
        prompt_frames.push(f.frame_id.clone());
        push(&mut frames, &mut index, f);
    }

    // Tool calls, under their prompt, or under the call that started the
    // subagent they ran in.
    let mut call_frames: HashMap<&str, FrameId> = HashMap::new();
    let touches: HashMap<&str, &noesis_transcript::FileTouch> =
        t.file_touches().iter().map(|f| (f.tool_use_id.as_str(), f)).collect();
    let mut pending: Vec<&ToolCall> = t.tool_calls().iter().collect();
    // Parents first: a call whose parent call is not placed yet waits.
    let mut guard = pending.len() + 1;
    while !pending.is_empty() && guard > 0 {
        guard -= 1;
        let mut later = Vec::new();
        for c in pending {
            let parent = match &c.parent_call {
                Some(pc) if t.tool_call(pc).is_some() => match call_frames.get(pc.as_str()) {
                    Some(id) => index[id],
                    None => {
                        later.push(c);
                        continue;
                    }
                },
                _ => c.prompt.and_then(|p| prompt_frames.get(p)).map_or(0, |id| index[id]),
            };
            let parent = frames[parent].clone();
            let at = time_of(c.timestamp.as_deref(), start);
            let mut evidence = Vec::new();
            if let Some(touch) = touches.get(c.id.as_str()).filter(|x| x.succeeded) {
                let path = project_path(&touch.path, cwd, &root_text);
                match &touch.content {
                    Some(content) => evidence.push(Evidence::File { path, hash: hash_bytes(content.as_bytes()) }),
                    None => evidence.push(Evidence::Observation {
                        tool: c.name.clone(),
                        content: format!("{path} (its bytes are not in the transcript)"),
                    }),
                }
            } else if c.name == "Bash"
                && let Some(cmd) = c.input.get("command").and_then(serde_json::Value::as_str)
            {
                evidence.push(Evidence::Observation { tool: "Bash".into(), content: clip(cmd, 500) });
            }
            let (conclusion, confidence) = match &c.result {
                Some(r) if r.is_error => (format!("error: {}", clip(&r.text, TEXT)), 0.0),
                Some(r) => (clip(&r.text, TEXT), 1.0),
                None => ("(no result in the transcript)".to_owned(), 0.0),
            };
            let f = Draft {
                context_slice: format!("line {}: {}", c.line, clip(&c.input.to_string(), TEXT)),
                evidence,
                conclusion,
                confidence,
                status: Some(Status::Completed),
                ..Draft::new(call_query(c))
            }
            .into_frame(pid, sid, Some(&parent), at)?;
            call_frames.insert(c.id.as_str(), f.frame_id.clone());
            push(&mut frames, &mut index, f);
        }
        pending = later;
    }

    // Files: what the session did to each, with the last bytes the
    // transcript shows (else the file as it is now).
    let mut files = BTreeMap::new();
    for (path, role) in t.roles() {
        let name = project_path(&path, cwd, &root_text);
        let shown =
            t.file_touches().iter().rev().find(|x| x.path == path && x.succeeded).and_then(|x| x.content.as_deref());
        let hash = match shown {
            Some(c) => hash_bytes(c.as_bytes()),
            None => hash_now(&name).unwrap_or_else(|| hash_bytes(b"")),
        };
        let role = match role {
            Role::Read => FileRole::Read,
            Role::Modified => FileRole::Modified,
            Role::Created => FileRole::Created,
        };
        files.insert(name, FileEntry { hash, role });
    }
    let session = SessionArtifacts {
        session_id: session_id.to_owned(),
        project_id: project.project_id.clone(),
        initial_prompt: first,
        files,
        scope: Vec::new(),
        root_frame_id: Some(frames[0].frame_id.clone()),
        conversation_log: Some(log.to_owned()),
        created_at: start,
    };
    Ok(Imported { session, frames })
}

fn set_aside(f: &mut CausalFrame, at: Timestamp, session_id: &str, why: PromptKind) {
    // The turn was being worked on when the user left it: it was active,
    // then set aside (never completed).
    if let [only] = f.timestamps.history.as_mut_slice()
        && only.status == Status::Completed
    {
        only.status = Status::Active;
        f.status = Status::Active;
    }
    if f.status.can_become(Status::Suspended) {
        f.status = Status::Suspended;
        f.timestamps.updated_at = at.max(f.timestamps.created_at);
        f.timestamps.history.push(noesis_frames::StatusChange {
            status: Status::Suspended,
            at: f.timestamps.updated_at,
            reason: Some(match why {
                PromptKind::Backtrack => "the user went back and asked again".to_owned(),
                _ => "the user turned to something else".to_owned(),
            }),
            session_id: Some(session_id.to_owned()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_project_relative() {
        assert_eq!(project_path("/p/Demo/src/a.rs", Some("/p/Demo"), "/home/me/demo"), "src/a.rs");
        assert_eq!(project_path("/home/me/demo/x.py", Some("/p/Demo"), "/home/me/demo/"), "x.py");
        assert_eq!(project_path("/etc/hosts", Some("/p/Demo"), "/home/me/demo"), "/etc/hosts");
        assert_eq!(project_path("/p/Demox/a", Some("/p/Demo"), "/r"), "/p/Demox/a");
    }
}
