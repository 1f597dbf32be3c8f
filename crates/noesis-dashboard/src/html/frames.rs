//! Sessions, frames and the frame tree, and frame search.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use noesis_frames::{CausalFrame, Evidence, FileRole, Invalidation, SessionArtifacts, Status};

use super::{clip, enc, esc, frame_link, page, search_form, short, status_badge};

/// The sessions of a project, newest first.
pub fn sessions_page(project: &str, sessions: &[SessionArtifacts], others: &[(&str, SessionArtifacts)]) -> String {
    let mut body = format!("<h1>Sessions</h1><p class=\"muted\">project {}</p>", esc(project));
    if !others.is_empty() {
        body.push_str("<h2>Imported transcripts and solve episodes</h2><table><thead><tr><th>Session</th><th>Kind</th><th>Started</th><th>Prompt</th><th>Files</th><th>Modified</th><th>Created</th></tr></thead><tbody>");
        for (kind, s) in others {
            let count = |role: FileRole| s.files.values().filter(|f| f.role == role).count();
            let _ = write!(
                body,
                "<tr><td><a href=\"/sessions/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                enc(&s.session_id),
                esc(short(&s.session_id)),
                esc(kind),
                esc(&s.created_at.to_string()),
                esc(s.initial_prompt.as_deref().unwrap_or("")),
                s.files.len(),
                count(FileRole::Modified),
                count(FileRole::Created),
            );
        }
        body.push_str("</tbody></table><h2>Working sessions</h2>");
    }
    if sessions.is_empty() {
        body.push_str("<p>No sessions yet: <code>noesis session start</code> begins one.</p>");
        return page("Sessions", &body);
    }
    body.push_str("<table><thead><tr><th>Session</th><th>Started</th><th>Prompt</th><th>Files</th><th>Changed</th><th>Added</th></tr></thead><tbody>");
    for (i, s) in sessions.iter().enumerate() {
        // Newest first: the previous session is the next one.
        let d = noesis_frames::session::diff(sessions.get(i + 1), s);
        let _ = write!(
            body,
            "<tr><td><a href=\"/sessions/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            enc(&s.session_id),
            esc(short(&s.session_id)),
            esc(&s.created_at.to_string()),
            esc(s.initial_prompt.as_deref().unwrap_or("")),
            s.files.len(),
            d.files.changed.len(),
            d.files.added.len(),
        );
    }
    body.push_str("</tbody></table>");
    page("Sessions", &body)
}

/// One session: what it saw, what changed since the previous one, what it
/// invalidated, and its frame tree.
pub fn session_page(
    session: &SessionArtifacts,
    previous: Option<&SessionArtifacts>,
    invalidated: &[Invalidation],
    tree: &[CausalFrame],
) -> String {
    let mut body = format!("<h1>Session {}</h1>", esc(short(&session.session_id)));
    let _ = write!(
        body,
        "<dl><dt>Prompt</dt><dd>{}</dd><dt>Started</dt><dd>{}</dd><dt>Scope</dt><dd>{}</dd><dt>Files in scope</dt><dd>{}</dd></dl>",
        esc(session.initial_prompt.as_deref().unwrap_or("(none)")),
        esc(&session.created_at.to_string()),
        esc(&if session.scope.iter().all(String::is_empty) {
            "the whole project".to_owned()
        } else {
            session.scope.join(", ")
        }),
        session.files.len()
    );
    // A session that changed files (an imported transcript, a solve
    // episode) says what it did; a scan says what changed since the
    // previous scan.
    let did = session.files.values().any(|f| f.role != FileRole::Read);
    let by_role = |role: FileRole| -> Vec<String> {
        session.files.iter().filter(|(_, f)| f.role == role).map(|(p, _)| p.clone()).collect()
    };
    let (changed, added, removed): (Vec<String>, Vec<String>, Vec<String>) = if did {
        body.push_str("<h2>What the session did</h2>");
        (by_role(FileRole::Modified), by_role(FileRole::Created), Vec::new())
    } else {
        body.push_str("<h2>Since the previous session</h2>");
        if previous.is_none() {
            body.push_str("<p class=\"muted\">This is the project's first session.</p>");
        }
        let d = noesis_frames::session::diff(previous, session);
        let removed = if previous.is_some() { d.files.removed } else { Vec::new() };
        (d.files.changed, if previous.is_some() { d.files.added } else { Vec::new() }, removed)
    };
    for (what, list) in [("Changed", &changed), ("Added", &added), ("Removed", &removed)] {
        let _ = write!(body, "<h3>{what} ({})</h3>", list.len());
        if !list.is_empty() {
            body.push_str("<ul class=\"files\">");
            for f in list.iter() {
                let _ = write!(body, "<li><a href=\"/frames?file={}\">{}</a></li>", enc(f), esc(f));
            }
            body.push_str("</ul>");
        }
    }
    let _ = write!(body, "<h2>Frames invalidated ({})</h2>", invalidated.len());
    if !invalidated.is_empty() {
        body.push_str("<ul>");
        for i in invalidated {
            let id = i.frame_id.to_string();
            let _ = write!(body, "<li>{} — {}</li>", frame_link(&id, short(&id)), esc(&i.reason));
        }
        body.push_str("</ul>");
    }
    let suspended: Vec<&CausalFrame> = tree.iter().filter(|f| f.status == Status::Suspended).collect();
    if !suspended.is_empty() {
        let _ = write!(body, "<h2>Resumable ({})</h2><ul>", suspended.len());
        for f in suspended {
            let id = f.frame_id.to_string();
            let _ = write!(body, "<li>{} {}</li>", frame_link(&id, &f.query), resume_form(&id));
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Frame tree</h2>");
    body.push_str(&tree_html(tree));
    page("Session", &body)
}

/// Frames as a collapsible tree (parents before children in `frames`;
/// a frame whose parent is not among them is a root of the view).
pub fn tree_html(frames: &[CausalFrame]) -> String {
    if frames.is_empty() {
        return "<p class=\"muted\">No frames.</p>".into();
    }
    let ids: BTreeSet<String> = frames.iter().map(|f| f.frame_id.to_string()).collect();
    let mut children: BTreeMap<String, Vec<&CausalFrame>> = BTreeMap::new();
    let mut roots = Vec::new();
    for f in frames {
        match f.parent_id.as_ref().map(ToString::to_string).filter(|p| ids.contains(p)) {
            Some(p) => children.entry(p).or_default().push(f),
            None => roots.push(f),
        }
    }
    let mut out = String::from(
        "<div class=\"tree\"><p class=\"tree-actions\"><button type=\"button\" data-expand=\"all\">Expand all</button> <button type=\"button\" data-expand=\"none\">Collapse all</button></p><ul>",
    );
    // An explicit stack instead of recursion: a deep tree cannot overflow.
    enum Step<'a> {
        Open(&'a CausalFrame),
        Close,
    }
    let mut stack: Vec<Step> = roots.iter().rev().map(|f| Step::Open(f)).collect();
    while let Some(step) = stack.pop() {
        match step {
            Step::Close => out.push_str("</ul></details></li>"),
            Step::Open(f) => {
                let id = f.frame_id.to_string();
                let kids = children.get(&id).map(Vec::as_slice).unwrap_or_default();
                let line = frame_line(f);
                if kids.is_empty() {
                    let _ = write!(out, "<li class=\"leaf\">{line}</li>");
                } else {
                    // Live frames start open; finished branches stay folded past depth 1.
                    let open = if f.depth < 2 { " open" } else { "" };
                    let _ = write!(out, "<li><details{open}><summary>{line}</summary><ul>");
                    stack.push(Step::Close);
                    stack.extend(kids.iter().rev().map(|k| Step::Open(k)));
                }
            }
        }
    }
    out.push_str("</ul></div>");
    out
}

fn frame_line(f: &CausalFrame) -> String {
    let id = f.frame_id.to_string();
    let pivot = match &f.branched_from {
        Some(from) => format!(
            " <span class=\"pivot\">branched from {}</span>",
            frame_link(&from.to_string(), short(&from.to_string()))
        ),
        None => String::new(),
    };
    let why = match (f.status, f.timestamps.history.last()) {
        (Status::Invalidated, Some(change)) => format!(
            " <span class=\"why\">invalidated {}: {}</span>",
            esc(&change.at.to_string()),
            esc(change.reason.as_deref().unwrap_or("no reason recorded"))
        ),
        _ => String::new(),
    };
    format!(
        "{} <span class=\"conf\">{:.2}</span> {} <span class=\"conclusion\">{}</span>{pivot}{why}",
        status_badge(f.status),
        f.confidence,
        frame_link(&id, &clip(&f.query, 120)),
        esc(&clip(&f.conclusion, 160)),
    )
}
/// A button that resumes a suspended frame (a form posting to this
/// server; the server refuses it from any other site).
fn resume_form(id: &str) -> String {
    format!(
        "<form class=\"inline\" method=\"post\" action=\"/frames/{}/resume\"><button>Resume</button></form>",
        enc(id)
    )
}

/// One frame in full. `current` holds the latest known hash of each file
/// (the newest session's), to say whether evidence changed since.
pub fn frame_page(frame: &CausalFrame, subtree: &[CausalFrame], current: &BTreeMap<String, String>) -> String {
    let id = frame.frame_id.to_string();
    let mut body = format!("<h1>{} {}</h1>", status_badge(frame.status), esc(&clip(&frame.query, 200)));
    let _ = write!(
        body,
        "<dl><dt>Frame</dt><dd><code>{}</code></dd><dt>Confidence</dt><dd>{:.2}</dd><dt>Query</dt><dd class=\"pre\">{}</dd>\
         <dt>Conclusion</dt><dd class=\"pre\">{}</dd><dt>Created</dt><dd>{}</dd>",
        esc(&id),
        frame.confidence,
        esc(&frame.query),
        esc(&frame.conclusion),
        esc(&frame.timestamps.created_at.to_string()),
    );
    if let Some(p) = &frame.parent_id {
        let _ = write!(body, "<dt>Parent</dt><dd>{}</dd>", frame_link(&p.to_string(), &p.to_string()));
    }
    if let Some(b) = &frame.branched_from {
        let _ = write!(body, "<dt>Branched from</dt><dd>{}</dd>", frame_link(&b.to_string(), &b.to_string()));
    }
    if let Some(s) = &frame.session_id {
        let _ = write!(body, "<dt>Session</dt><dd><a href=\"/sessions/{}\">{}</a></dd>", enc(s), esc(short(s)));
    }
    body.push_str("</dl>");
    if frame.status == Status::Suspended {
        let _ = write!(body, "<p>Suspended: it can be taken up again. {}</p>", resume_form(&id));
    }
    if frame.status == Status::Invalidated
        && let Some(change) = frame.timestamps.history.last()
    {
        let _ = write!(
            body,
            "<p class=\"invalidated\">Invalidated {} — {}</p>",
            esc(&change.at.to_string()),
            esc(change.reason.as_deref().unwrap_or("no reason recorded"))
        );
    }
    body.push_str("<h2>Evidence</h2>");
    if frame.evidence.is_empty() {
        body.push_str("<p class=\"muted\">None.</p>");
    } else {
        body.push_str("<ul class=\"evidence\">");
        for e in &frame.evidence {
            match e {
                Evidence::File { path, hash } => {
                    let state = match current.get(path) {
                        Some(now) if now == hash => "<span class=\"same\">unchanged since</span>",
                        Some(_) => "<span class=\"changed\">changed since</span>",
                        None => "<span class=\"muted\">not in the latest session</span>",
                    };
                    let _ = write!(
                        body,
                        "<li>file <a href=\"/frames?file={}\">{}</a> <code>{}</code> {state}</li>",
                        enc(path),
                        esc(path),
                        esc(hash.get(..16).unwrap_or(hash))
                    );
                }
                Evidence::Frame { frame_id } => {
                    let f = frame_id.to_string();
                    let _ = write!(body, "<li>frame {}</li>", frame_link(&f, &f));
                }
                Evidence::Observation { tool, content } => {
                    let _ = write!(
                        body,
                        "<li>observation of <code>{}</code>: <span class=\"pre\">{}</span></li>",
                        esc(tool),
                        esc(content)
                    );
                }
            }
        }
        body.push_str("</ul>");
    }
    let c = &frame.invalidation_condition;
    body.push_str("<h2>Invalidation condition</h2><ul>");
    for f in &c.files {
        let _ = write!(
            body,
            "<li>file {} changes from <code>{}</code></li>",
            esc(&f.path),
            esc(f.hash.get(..16).unwrap_or(&f.hash))
        );
    }
    for f in &c.frames {
        let f = f.to_string();
        let _ = write!(body, "<li>frame {} is invalidated</li>", frame_link(&f, &f));
    }
    if let Some(at) = &c.expires_at {
        let _ = write!(body, "<li>expires {}</li>", esc(&at.to_string()));
    }
    if let Some(note) = &c.note {
        let _ = write!(body, "<li>{}</li>", esc(note));
    }
    body.push_str("</ul><h2>History</h2><ol>");
    for h in &frame.timestamps.history {
        let _ = write!(
            body,
            "<li>{} {}{}</li>",
            esc(&h.at.to_string()),
            status_badge(h.status),
            h.reason.as_deref().map(|r| format!(" — {}", esc(r))).unwrap_or_default()
        );
    }
    body.push_str("</ol><h2>Below it</h2>");
    body.push_str(&tree_html(subtree));
    page("Frame", &body)
}

/// Search results.
pub fn search_page(text: &str, file: &str, status: &str, frames: &[CausalFrame], limit: usize) -> String {
    let mut body = format!("<h1>Frames</h1>{}", search_form(text, file, status));
    let _ = write!(
        body,
        "<p class=\"muted\">{} frame(s){}</p><ul class=\"results\">",
        frames.len(),
        if frames.len() >= limit { format!(", the newest {limit}") } else { String::new() }
    );
    for f in frames {
        let _ = write!(body, "<li>{}</li>", frame_line(f));
    }
    body.push_str("</ul>");
    page("Frames", &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use noesis_frames::{Draft, Timestamp};

    fn frame(query: &str, parent: Option<&CausalFrame>) -> CausalFrame {
        Draft { conclusion: format!("about {query}"), confidence: 0.5, ..Draft::new(query) }
            .into_frame("p", None, parent, Timestamp::from_millis(0))
            .unwrap()
    }

    #[test]
    fn text_is_escaped_everywhere_it_goes() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        let evil = frame("<img src=x onerror=alert(1)>", None);
        let mut f = evil.clone();
        f.conclusion = "<a href=\"javascript:alert(1)\">click</a>".into();
        let html = frame_page(&f, &[], &BTreeMap::new());
        assert!(!html.contains("<img src=x") && !html.contains("<a href=\"javascript:"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(!html.contains("<script>") || html.matches("<script").count() == 1, "only our own script tag");
        assert_eq!(html.matches("<script").count(), 1);
        assert!(html.contains("<script src=\"/assets/app.js\" defer></script>"));
        // A search value cannot break out of its attribute.
        let page = search_page("\"><script>alert(1)</script>", "", "", &[], 100);
        assert!(page.contains("value=\"&quot;&gt;&lt;script&gt;"), "{page}");
    }

    #[test]
    fn the_tree_nests_children_and_marks_status_in_words() {
        let root = frame("root", None);
        let child = frame("child", Some(&root));
        let grandchild = frame("grandchild", Some(&child));
        let other = frame("other root", None);
        let html = tree_html(&[root.clone(), child.clone(), grandchild.clone(), other]);
        let (r, c, g, o) = (
            html.find(">root<").unwrap(),
            html.find(">child<").unwrap(),
            html.find(">grandchild<").unwrap(),
            html.find(">other root<").unwrap(),
        );
        assert!(r < c && c < g && g < o, "{html}");
        assert_eq!(html.matches("<details").count(), 2, "root and child have children");
        assert!(html.contains("class=\"status status-active\">active<"));
        // Balanced: every opened list is closed.
        assert_eq!(html.matches("<ul").count(), html.matches("</ul>").count());
        assert_eq!(html.matches("<details").count(), html.matches("</details>").count());
    }

    #[test]
    fn a_deep_tree_renders_without_recursion() {
        let mut frames = vec![frame("0", None)];
        for i in 1..5000 {
            let next = frame(&i.to_string(), frames.last());
            frames.push(next);
        }
        let html = tree_html(&frames);
        assert_eq!(html.matches("<details").count(), 4999);
    }

    #[test]
    fn links_encode_their_parameters() {
        assert_eq!(enc("a b/&c"), "a+b%2F%26c");
        let s = SessionArtifacts {
            session_id: "s/1".into(),
            project_id: "p".into(),
            initial_prompt: Some("<b>".into()),
            files: BTreeMap::new(),
            scope: vec![],
            root_frame_id: None,
            conversation_log: None,
            created_at: Timestamp::from_millis(0),
        };
        let html = sessions_page("p", std::slice::from_ref(&s), &[]);
        assert!(html.contains("href=\"/sessions/s%2F1\"") && html.contains("&lt;b&gt;"), "{html}");
        assert!(!html.contains("Imported transcripts"), "{html}");
        let html = sessions_page("p", &[], &[("transcript", SessionArtifacts { session_id: "t<1>".into(), ..s })]);
        assert!(html.contains("href=\"/sessions/t%3C1%3E\"") && html.contains("<td>transcript</td>"), "{html}");
        assert!(html.contains("No sessions yet"), "{html}");
    }
}
