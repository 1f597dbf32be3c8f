//! The pages as text: pure functions from store records to HTML. Every
//! piece of text that came from a frame, a session, a module or a model goes
//! through [`esc`]; links are built only from our own paths with their
//! parameters percent-encoded; there is no inline script or style (the
//! Content-Security-Policy forbids both).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use noesis_frames::{CausalFrame, Evidence, FileRole, Invalidation, SessionArtifacts, Status};

/// Text as HTML: `& < > " '` escaped, so it can go in an element or a
/// quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path segment or query value, percent-encoded.
pub fn enc(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A whole page around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · noesis</title><link rel=\"stylesheet\" href=\"/assets/app.css\">\
         <script src=\"/assets/app.js\" defer></script></head><body>\
         <header><a class=\"brand\" href=\"/\">noesis</a> <nav><a href=\"/\">Sessions</a> \
         <a href=\"/frames\">Frames</a> <a href=\"/runs\">Agent runs</a> <a href=\"/episodes\">Episodes</a> <a href=\"/catalog\">Modules</a> <a href=\"/usage\">Usage</a></nav>{}</header><main>{body}</main></body></html>\n",
        esc(title),
        search_form("", "", "")
    )
}

fn search_form(text: &str, file: &str, status: &str) -> String {
    let mut options = String::from("<option value=\"\">any status</option>");
    for s in Status::ALL {
        let selected = if s.as_str() == status { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{0}\"{selected}>{0}</option>", s.as_str());
    }
    format!(
        "<form class=\"search\" action=\"/frames\" method=\"get\">\
         <input name=\"text\" placeholder=\"text\" value=\"{}\" aria-label=\"text\">\
         <input name=\"file\" placeholder=\"file\" value=\"{}\" aria-label=\"file\">\
         <select name=\"status\" aria-label=\"status\">{options}</select><button>Search</button></form>",
        esc(text),
        esc(file)
    )
}

/// A status as a word with a colour class (never colour alone).
pub fn status_badge(status: Status) -> String {
    format!("<span class=\"status status-{0}\">{0}</span>", status.as_str())
}

fn frame_link(id: &str, label: &str) -> String {
    format!("<a href=\"/frames/{}\">{}</a>", enc(id), esc(label))
}

fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}

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

fn clip(text: &str, n: usize) -> String {
    let one = text.replace('\n', " ");
    if one.chars().count() <= n { one } else { format!("{}…", one.chars().take(n).collect::<String>()) }
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

/// A page for what is not there.
pub fn not_found(what: &str) -> String {
    page("Not found", &format!("<h1>Not found</h1><p>{}</p>", esc(what)))
}

/// A run's status as a word with a colour class.
fn run_badge(status: &str) -> String {
    let class = match status {
        "done" => "completed",
        "awaiting_approval" | "running" => "active",
        "cancelled" => "suspended",
        _ => "invalidated",
    };
    format!("<span class=\"status status-{class}\">{}</span>", esc(status))
}

/// The project's agent runs, most recently changed first.
pub fn runs_page(runs: &[noesis_store::AgentSummary]) -> String {
    let mut body = String::from("<h1>Agent runs</h1>");
    if runs.is_empty() {
        body.push_str("<p>No agent runs yet: <code>noesis agent \"TASK\"</code> starts one.</p>");
        return page("Agent runs", &body);
    }
    body.push_str(
        "<table><thead><tr><th>Run</th><th>Status</th><th>Step</th><th>Changed</th><th>Task</th></tr></thead><tbody>",
    );
    for r in runs {
        let forked = r
            .forked_from
            .as_ref()
            .map(|f| {
                format!(" <span class=\"pivot\">forked from <a href=\"/runs/{}\">{}</a></span>", enc(f), esc(short(f)))
            })
            .unwrap_or_default();
        let _ = write!(
            body,
            "<tr><td><a href=\"/runs/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}{forked}</td></tr>",
            enc(&r.run_id),
            esc(short(&r.run_id)),
            run_badge(&r.status),
            r.latest_step,
            esc(&noesis_frames::Timestamp::from_millis(r.updated_at).to_string()),
            esc(&clip(&r.task, 120)),
        );
    }
    body.push_str("</tbody></table>");
    page("Agent runs", &body)
}

fn episode_badge(status: &str) -> String {
    let class = match status {
        "archived" => "completed",
        "active" => "active",
        _ => "invalidated",
    };
    format!("<span class=\"status status-{class}\">{}</span>", esc(status))
}

fn text_of(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| if v.is_null() { String::new() } else { v.to_string() }, str::to_owned)
}

/// The workflow episodes (`noesis solve`, `noesis state`), newest first:
/// one row per episode from its latest version.
pub fn episodes_page(versions: &[noesis_store::WorkflowVersion]) -> String {
    let mut body = String::from("<h1>Workflow episodes</h1>");
    let mut latest: Vec<&noesis_store::WorkflowVersion> = Vec::new();
    for v in versions.iter().rev() {
        if !latest.iter().any(|l| l.episode_id == v.episode_id) {
            latest.push(v);
        }
    }
    if latest.is_empty() {
        body.push_str("<p>No episodes yet: <code>noesis solve \"TASK\" --test \"CMD\"</code> starts one.</p>");
        return page("Episodes", &body);
    }
    body.push_str(
        "<table><thead><tr><th>Episode</th><th>Status</th><th>Node</th><th>Retries</th><th>Changed</th><th>Task</th></tr></thead><tbody>",
    );
    for v in latest {
        let _ = write!(
            body,
            "<tr><td><a href=\"/episodes/{}\">{}</a></td><td>{}</td><td>{}</td><td>{} of {}</td><td>{}</td><td>{}</td></tr>",
            enc(&v.episode_id),
            esc(&v.episode_id),
            episode_badge(&v.status),
            esc(&v.node),
            esc(&text_of(&v.state["retry_count"])),
            esc(&text_of(&v.state["max_retries"])),
            esc(&noesis_frames::Timestamp::from_millis(v.at).to_string()),
            esc(&clip(&text_of(&v.state["user_query"]), 120)),
        );
    }
    body.push_str("</tbody></table>");
    page("Episodes", &body)
}

fn tests_table(title: &str, tests: &serde_json::Value, anchors: &[String]) -> String {
    let rows = tests.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "<h2>{}</h2><table><thead><tr><th>Test</th><th>Status</th><th>Anchor</th><th>Command</th></tr></thead><tbody>",
        esc(title)
    );
    for t in rows {
        let name = text_of(&t["name"]).to_owned();
        let name = if name.is_empty() { text_of(&t["file"]) } else { name };
        let status = text_of(&t["status"]);
        let class = match status.as_str() {
            "passed" => "completed",
            "failed" | "error" => "invalidated",
            _ => "suspended",
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td><span class=\"status status-{class}\">{}</span></td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&name),
            esc(&status),
            if anchors.contains(&name) { "anchor" } else { "" },
            esc(&text_of(&t["command"])),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// One episode: its node timeline (every version: when, what made it, the
/// node after it), the tests per case with the anchors, the changes that
/// were reverted and why, the critiques, the retries left and whether it
/// escalated.
pub fn episode_page(versions: &[&noesis_store::WorkflowVersion]) -> String {
    let Some(last) = versions.last() else { return not_found("no such episode") };
    let s = &last.state;
    let title = format!("Episode {}", last.episode_id);
    let retries = s["retry_count"].as_u64().unwrap_or(0);
    let max = s["max_retries"].as_u64().unwrap_or(0);
    let mut body = format!(
        "<h1>{}</h1><p class=\"query\">{}</p><p>{} at <strong>{}</strong> · retries used {retries} of {max}, {} left</p>",
        esc(&title),
        esc(&text_of(&s["user_query"])),
        episode_badge(&last.status),
        esc(&last.node),
        max.saturating_sub(retries),
    );
    if last.status == "escalated" {
        body.push_str("<p class=\"warn\">Escalated: the retry budget is spent. <code>noesis solve --resume --hint \"…\"</code> gives it one more attempt.</p>");
    }
    if let Some(sol) = s["selected_solution"].as_str().filter(|x| !x.is_empty()) {
        let _ = write!(body, "<h2>Solution</h2><p>{}</p>", esc(sol));
    }
    let plan = s["current_plan"].as_array().cloned().unwrap_or_default();
    if !plan.is_empty() {
        body.push_str("<ol class=\"plan\">");
        for step in plan {
            let _ = write!(body, "<li>{}</li>", esc(&text_of(&step)));
        }
        body.push_str("</ol>");
    }
    body.push_str("<h2>Timeline</h2><ol class=\"timeline\">");
    for v in versions {
        let run = v.state["thought_trace"]
            .as_array()
            .and_then(|t| t.iter().rev().find(|e| e["type"] == "coder"))
            .and_then(|e| e["run"].as_str())
            .filter(|_| v.command == "CODER")
            .map(|r| format!(" — <a href=\"/runs/{}\">agent run</a>", enc(r)))
            .unwrap_or_default();
        let _ = write!(
            body,
            "<li><span class=\"node\">{}</span> v{} {} · {} {}{run}</li>",
            esc(&v.node),
            v.version,
            esc(&noesis_frames::Timestamp::from_millis(v.at).to_string()),
            esc(&v.command),
            if v.status == "escalated" { episode_badge("escalated") } else { String::new() },
        );
    }
    body.push_str("</ol>");
    let anchors: Vec<String> =
        s["test_results"]["anchor_tests"].as_array().map(|a| a.iter().map(text_of).collect()).unwrap_or_default();
    body.push_str(&tests_table("Tests", &s["test_results"]["public_tests"], &anchors));
    body.push_str(&tests_table("CODER's tests", &s["test_results"]["ai_tests"], &anchors));
    if !anchors.is_empty() {
        body.push_str("<h2>Anchors</h2><ul>");
        for a in &anchors {
            let _ = write!(body, "<li>{}</li>", esc(a));
        }
        body.push_str("</ul>");
    }
    let reverted: Vec<&serde_json::Value> = s["error_log"]
        .as_array()
        .map(|l| l.iter().filter(|e| e["type"] == "anchor_regression").collect())
        .unwrap_or_default();
    if !reverted.is_empty() {
        body.push_str("<h2>Reverted changes</h2><ul class=\"reverted\">");
        for r in reverted {
            let mut paths = Vec::new();
            for kind in ["modified", "created", "deleted", "mode_changed"] {
                for p in r["reverted"][kind].as_array().into_iter().flatten() {
                    paths.push(format!("{} ({kind})", text_of(p)));
                }
            }
            let broke: Vec<String> =
                r["anchors"].as_array().map(|a| a.iter().map(text_of).collect()).unwrap_or_default();
            let _ = write!(
                body,
                "<li>{}: broke {} — restored {}</li>",
                esc(&text_of(&r["reason"])),
                esc(&broke.join(", ")),
                esc(&paths.join(", "))
            );
        }
        body.push_str("</ul>");
    }
    let critiques = s["critiques"].as_array().cloned().unwrap_or_default();
    if !critiques.is_empty() {
        body.push_str("<h2>Critiques</h2><ul>");
        for c in critiques {
            let _ = write!(
                body,
                "<li>{} → {}{}</li>",
                esc(&text_of(&c["critique"])),
                esc(&text_of(&c["route"])),
                c["lesson"].as_str().map(|l| format!(" <em>lesson: {}</em>", esc(l))).unwrap_or_default()
            );
        }
        body.push_str("</ul>");
    }
    page(&title, &body)
}

/// Tokens and cost of the model calls of one day and one provider/model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Usage {
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    /// `provider/model` that answered.
    pub model: String,
    /// Model calls.
    pub calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// US dollars, as priced when the call was made.
    pub cost_usd: f64,
}

/// The usage of agent runs by day and model: each reply counts on the day
/// its run started (`started_ms`), under the model that answered it (the
/// router's "answered by" when it chose, else the run's provider and the
/// reply's model).
pub fn usage_of(runs: &[noesis_agent::AgentRun]) -> Vec<Usage> {
    let mut rows: BTreeMap<(String, String), Usage> = BTreeMap::new();
    for run in runs {
        let day = noesis_frames::Timestamp::from_millis(i64::try_from(run.started_ms).unwrap_or(i64::MAX))
            .to_string()
            .chars()
            .take(10)
            .collect::<String>();
        let provider = run.host["provider"].as_str().unwrap_or("?");
        for r in &run.replies {
            let model = r
                .route
                .as_deref()
                .and_then(|route| route.rsplit_once("answered by ").map(|(_, m)| m.to_owned()))
                .unwrap_or_else(|| format!("{provider}/{}", r.model));
            let row = rows.entry((day.clone(), model.clone())).or_insert_with(|| Usage {
                day: day.clone(),
                model,
                ..Usage::default()
            });
            row.calls += 1;
            if let Some(u) = r.usage {
                row.input_tokens += u.input_tokens;
                row.output_tokens += u.output_tokens;
            }
            row.cost_usd += r.cost_usd;
        }
    }
    rows.into_values().collect()
}

/// The usage of module runs, from their frames' `usage_total` (the run's
/// frame carries the whole run's calls), by the day the frame was made and
/// the model the envelope names.
pub fn usage_of_frames(frames: &[CausalFrame]) -> Vec<Usage> {
    let mut rows: BTreeMap<(String, String), Usage> = BTreeMap::new();
    for f in frames {
        let Ok(slice) = serde_json::from_str::<serde_json::Value>(&f.context_slice) else { continue };
        let total = &slice["usage_total"];
        if !total.is_object() {
            continue;
        }
        let day: String = f.timestamps.created_at.to_string().chars().take(10).collect();
        let model = slice["model"].as_str().unwrap_or("?").to_owned();
        let row = rows.entry((day.clone(), model.clone())).or_insert_with(|| Usage { day, model, ..Usage::default() });
        row.calls += total["calls"].as_u64().unwrap_or(0);
        row.input_tokens += total["input_tokens"].as_u64().unwrap_or(0);
        row.output_tokens += total["output_tokens"].as_u64().unwrap_or(0);
        row.cost_usd += total["cost_usd"].as_f64().unwrap_or(0.0);
    }
    rows.into_values().collect()
}

/// Rows of several sources added up by day and model.
pub fn merge_usage(parts: impl IntoIterator<Item = Vec<Usage>>) -> Vec<Usage> {
    let mut rows: BTreeMap<(String, String), Usage> = BTreeMap::new();
    for u in parts.into_iter().flatten() {
        let row = rows.entry((u.day.clone(), u.model.clone())).or_insert_with(|| Usage {
            day: u.day.clone(),
            model: u.model.clone(),
            ..Usage::default()
        });
        row.calls += u.calls;
        row.input_tokens += u.input_tokens;
        row.output_tokens += u.output_tokens;
        row.cost_usd += u.cost_usd;
    }
    rows.into_values().collect()
}

/// A bar chart as SVG (presentation attributes only: the CSP forbids
/// inline style): one stacked bar of input and output tokens per day.
fn tokens_chart(rows: &[Usage]) -> String {
    let mut days: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for r in rows {
        let d = days.entry(r.day.as_str()).or_default();
        d.0 += r.input_tokens;
        d.1 += r.output_tokens;
    }
    let top = days.values().map(|(i, o)| i + o).max().unwrap_or(0).max(1);
    let (bar, gap, height) = (28u64, 12u64, 160u64);
    let width = (bar + gap) * u64::try_from(days.len()).unwrap_or(0) + gap;
    let mut svg = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"tokens per day\" width=\"{width}\" height=\"{}\" \
         viewBox=\"0 0 {width} {}\" xmlns=\"http://www.w3.org/2000/svg\">",
        height + 40,
        height + 40
    );
    for (k, (day, (input, output))) in days.iter().enumerate() {
        let x = gap + (bar + gap) * u64::try_from(k).unwrap_or(0);
        let hi = input * height / top;
        let ho = output * height / top;
        let _ = write!(
            svg,
            "<g><title>{} — {input} in, {output} out</title>\
             <rect x=\"{x}\" y=\"{}\" width=\"{bar}\" height=\"{hi}\" fill=\"#1d4ed8\"></rect>\
             <rect x=\"{x}\" y=\"{}\" width=\"{bar}\" height=\"{ho}\" fill=\"#93c5fd\"></rect>\
             <text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{}</text></g>",
            esc(day),
            height - hi,
            height - hi - ho,
            x + bar / 2,
            height + 14,
            esc(day.get(5..).unwrap_or(day)),
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Tokens and cost per day and per provider/model, as a chart and tables.
pub fn usage_page(rows: &[Usage]) -> String {
    let mut body = String::from("<h1>Usage</h1>");
    if rows.is_empty() {
        body.push_str(
            "<p>No model calls recorded yet (agent runs and <code>noesis solve</code>'s CODER count here).</p>",
        );
        return page("Usage", &body);
    }
    let (calls, input, output, cost) = rows
        .iter()
        .fold((0, 0, 0, 0.0), |(c, i, o, d), r| (c + r.calls, i + r.input_tokens, o + r.output_tokens, d + r.cost_usd));
    let _ = write!(
        body,
        "<p>{calls} model call(s), {input} input and {output} output tokens, ${cost:.4}.</p>\
         <h2>Tokens per day</h2><p class=\"legend\"><span class=\"in\">■</span> input \
         <span class=\"out\">■</span> output</p>{}",
        tokens_chart(rows)
    );
    let mut by_model: BTreeMap<&str, Usage> = BTreeMap::new();
    for r in rows {
        let m = by_model.entry(r.model.as_str()).or_default();
        m.calls += r.calls;
        m.input_tokens += r.input_tokens;
        m.output_tokens += r.output_tokens;
        m.cost_usd += r.cost_usd;
    }
    body.push_str(
        "<h2>By provider and model</h2><table><thead><tr><th>Model</th><th>Calls</th><th>Input</th><th>Output</th>\
         <th>Cost</th></tr></thead><tbody>",
    );
    for (model, u) in &by_model {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>${:.4}</td></tr>",
            esc(model),
            u.calls,
            u.input_tokens,
            u.output_tokens,
            u.cost_usd
        );
    }
    body.push_str(
        "</tbody></table><h2>By day</h2><table><thead><tr><th>Day</th><th>Model</th><th>Calls</th>\
                   <th>Input</th><th>Output</th><th>Cost</th></tr></thead><tbody>",
    );
    for r in rows {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>${:.4}</td></tr>",
            esc(&r.day),
            esc(&r.model),
            r.calls,
            r.input_tokens,
            r.output_tokens,
            r.cost_usd
        );
    }
    body.push_str("</tbody></table>");
    page("Usage", &body)
}

/// One agent run as a timeline: every model turn with the calls it asked
/// for (arguments, status, result, time), notes, what is pending and how to
/// decide it, usage and the outcome.
pub fn run_page(
    run: &noesis_agent::AgentRun,
    status: &str,
    live: Option<&(bool, Vec<noesis_agent::Pending>, u64)>,
) -> String {
    use noesis_agent::{CallStatus, Entry, Outcome};
    let task = run.host.get("task").and_then(|t| t.as_str()).unwrap_or(&run.task);
    let mut body = format!("<h1>{} {}</h1>", run_badge(status), esc(&clip(task, 200)));
    let model = format!(
        "{}/{}",
        run.host["provider"].as_str().unwrap_or_default(),
        run.host["model"].as_str().unwrap_or_default()
    );
    let u = run.usage;
    let _ = write!(
        body,
        "<dl><dt>Run</dt><dd><code>{}</code></dd><dt>Task</dt><dd class=\"pre\">{}</dd><dt>Model</dt><dd>{}</dd>\
         <dt>Step</dt><dd>{}</dd><dt>Usage</dt><dd>{} turns, {} tool calls, {} tokens in, {} out, ${:.4}</dd>",
        esc(&run.id),
        esc(task),
        esc(&model),
        run.step,
        u.turns,
        u.tool_calls,
        u.input_tokens,
        u.output_tokens,
        u.cost_usd
    );
    if let Some((from, step)) = &run.forked_from {
        let _ = write!(
            body,
            "<dt>Forked from</dt><dd><a href=\"/runs/{}\">{}</a> at step {step}</dd>",
            enc(from),
            esc(from)
        );
    }
    if let Some(f) = run.host.get("frame_id").and_then(|f| f.as_str()) {
        let _ = write!(body, "<dt>Frame</dt><dd>{}</dd>", frame_link(f, f));
    }
    if let Some(p) = run.host.get("parent_run").and_then(|p| p.as_str()) {
        let _ = write!(body, "<dt>Sub-agent of</dt><dd><a href=\"/runs/{}\">{}</a></dd>", enc(p), esc(p));
    }
    body.push_str("</dl>");
    let rid = enc(&run.id);
    match live {
        // Driven by this server: follow it, decide here, cancel it.
        Some((true, waiting, after)) => {
            let _ = write!(
                body,
                "<form method=\"post\" action=\"/runs/{rid}/cancel\"><button>Cancel the run</button></form>\
                 <h2>Live</h2><ol class=\"timeline\" id=\"live\" data-events=\"/agents/runs/{rid}/events?after={after}\"></ol>"
            );
            if !waiting.is_empty() {
                let _ = write!(body, "<h2>Waiting for your decision ({})</h2>", waiting.len());
                if waiting.len() > 1 {
                    let _ = write!(
                        body,
                        "<form method=\"post\" action=\"/runs/{rid}/decide\"><input type=\"hidden\" name=\"call\" value=\"all\">\
                         <button name=\"verdict\" value=\"approve\">Approve all</button></form>"
                    );
                }
                body.push_str("<ul class=\"pending\">");
                for p in waiting {
                    let (call, hash) = (esc(&p.call_id), esc(&p.arguments_hash));
                    let args = serde_json::to_string_pretty(&p.arguments).unwrap_or_default();
                    let _ = write!(
                        body,
                        "<li><code>{}</code> <span class=\"pre\">{}</span>\
                         <form method=\"post\" action=\"/runs/{rid}/decide\" class=\"decide\">\
                         <input type=\"hidden\" name=\"call\" value=\"{call}\"><input type=\"hidden\" name=\"hash\" value=\"{hash}\">\
                         <button name=\"verdict\" value=\"approve\" data-call=\"{call}\">Approve</button> \
                         <label>Why not <input name=\"message\"></label> <button name=\"verdict\" value=\"deny\">Deny</button> \
                         <button name=\"verdict\" value=\"abort\">Abort the run</button>\
                         <details><summary>Edit the arguments</summary><textarea name=\"arguments\" rows=\"6\" cols=\"60\">{}</textarea>\
                         <button name=\"verdict\" value=\"approve_edited\">Approve edited</button></details></form></li>",
                        esc(&p.tool),
                        esc(&clip(&p.arguments.to_string(), 400)),
                        esc(&args),
                    );
                }
                body.push_str("</ul>");
            }
        }
        Some((false, _, _)) if matches!(status, "running" | "awaiting_approval" | "cancelled" | "stopped") => {
            let _ = write!(
                body,
                "<form method=\"post\" action=\"/runs/{rid}/resume\"><button>Resume the run here</button></form>"
            );
        }
        _ => {}
    }
    let pending: Vec<_> = run.calls.iter().filter(|c| c.status == CallStatus::AwaitingApproval).collect();
    if !pending.is_empty() && !live.is_some_and(|(l, _, _)| *l) {
        let _ = write!(body, "<h2>Waiting for a decision ({})</h2><ul class=\"pending\">", pending.len());
        for c in pending {
            let _ = write!(
                body,
                "<li><code>{}</code> <span class=\"pre\">{}</span><br><code>noesis agent approve {} {} --hash {}</code> \
                 or <code>noesis agent deny {} {} -m WHY</code>, then <code>noesis agent resume {}</code></li>",
                esc(&c.tool),
                esc(&clip(&c.arguments.to_string(), 400)),
                esc(&run.id),
                esc(&c.id),
                esc(&c.arguments_hash),
                esc(&run.id),
                esc(&c.id),
                esc(&run.id),
            );
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Timeline</h2><ol class=\"timeline\">");
    for e in &run.entries {
        match e {
            Entry::Assistant { content, calls } => {
                body.push_str("<li><span class=\"muted\">model</span>");
                if !content.is_empty() {
                    let _ = write!(body, " <span class=\"pre\">{}</span>", esc(&clip(content, 2000)));
                }
                if !calls.is_empty() {
                    body.push_str("<ul>");
                    for id in calls {
                        let Some(c) = run.call(id) else { continue };
                        let took = match (c.started_ms, c.finished_ms) {
                            (Some(a), Some(b)) => format!(" in {} ms", b.saturating_sub(a)),
                            _ => String::new(),
                        };
                        let sub = c.evidence.iter().find_map(|ev| match ev {
                            noesis_agent::ToolEvidence::SubAgent { run_id } => {
                                Some(format!(" <a href=\"/runs/{}\">sub-agent run</a>", enc(run_id)))
                            }
                            _ => None,
                        });
                        let _ = write!(
                            body,
                            "<li><code>{}</code> <span class=\"pre\">{}</span> <span class=\"status status-{}\">{}</span>{took}{}\
                             <div class=\"pre result\">{}</div></li>",
                            esc(&c.tool),
                            esc(&clip(&c.arguments.to_string(), 400)),
                            match c.status {
                                CallStatus::Completed => "completed",
                                CallStatus::AwaitingApproval | CallStatus::Running | CallStatus::Approved => "active",
                                CallStatus::Interrupted => "suspended",
                                _ => "invalidated",
                            },
                            c.status.as_str(),
                            sub.unwrap_or_default(),
                            esc(&clip(c.result.as_deref().unwrap_or(""), 2000)),
                        );
                    }
                    body.push_str("</ul>");
                }
                body.push_str("</li>");
            }
            Entry::Note { content } => {
                let _ = write!(
                    body,
                    "<li><span class=\"muted\">note</span> <span class=\"pre\">{}</span></li>",
                    esc(&clip(content, 2000))
                );
            }
            Entry::ToolResult { .. } => {}
        }
    }
    body.push_str("</ol>");
    let outcome = match &run.outcome {
        Some(Outcome::Answer { text }) => format!("<h2>Answer</h2><div class=\"pre\">{}</div>", esc(text)),
        Some(Outcome::Stopped { reason, detail }) => format!(
            "<h2>Stopped</h2><p>{}: {}</p>",
            esc(&serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()),
            esc(detail)
        ),
        Some(Outcome::Cancelled) => {
            format!("<h2>Cancelled</h2><p><code>noesis agent resume {}</code> continues it.</p>", esc(&run.id))
        }
        Some(Outcome::Aborted { message }) => {
            format!("<h2>Aborted</h2><p>{}</p>", esc(message.as_deref().unwrap_or("at an approval")))
        }
        None => String::new(),
    };
    body.push_str(&outcome);
    page("Agent run", &body)
}

/// The modules on the search path (rows as `noesis list --json` gives them).
pub fn modules_page(rows: &[serde_json::Value]) -> String {
    let mut body = String::from("<h1>Modules</h1>");
    if rows.is_empty() {
        body.push_str(
            "<p>No modules on the search path (<code>--modules DIR</code>, <code>./cognitive/modules</code>).</p>",
        );
        return page("Modules", &body);
    }
    body.push_str(
        "<table><thead><tr><th>Module</th><th>Version</th><th>Tier</th><th>What it is for</th></tr></thead><tbody>",
    );
    for r in rows {
        let name = r["name"].as_str().unwrap_or_default();
        let note = if r["valid"] == serde_json::json!(false) {
            format!(" <span class=\"why\">does not load: {}</span>", esc(r["error"].as_str().unwrap_or_default()))
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr><td><a href=\"/catalog/{}\">{}</a>{note}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            enc(name),
            esc(name),
            esc(r["version"].as_str().unwrap_or_default()),
            esc(r["tier"].as_str().unwrap_or_default()),
            esc(r["responsibility"].as_str().unwrap_or_default()),
        );
    }
    body.push_str("</tbody></table>");
    page("Modules", &body)
}

/// One module: its manifest summary and schemas, a form generated from its
/// input schema, and — after a run — the envelope.
pub fn module_page(
    info: &serde_json::Value,
    values: &serde_json::Map<String, serde_json::Value>,
    problem: Option<&str>,
    envelope: Option<&serde_json::Value>,
) -> String {
    let name = info["name"].as_str().unwrap_or_default();
    let mut body = format!("<h1>{}</h1>", esc(name));
    let _ = write!(
        body,
        "<dl><dt>Version</dt><dd>{}</dd><dt>Tier</dt><dd>{}</dd><dt>What it is for</dt><dd>{}</dd><dt>Where</dt><dd><code>{}</code></dd></dl>",
        esc(info["version"].as_str().unwrap_or_default()),
        esc(info["tier"].as_str().unwrap_or_default()),
        esc(info["responsibility"].as_str().unwrap_or_default()),
        esc(info["location"].as_str().unwrap_or_default()),
    );
    if let Some(env) = envelope {
        let ok = env["ok"] == serde_json::json!(true);
        let _ = write!(
            body,
            "<h2>Result {}</h2><pre class=\"pre envelope\">{}</pre>",
            if ok {
                "<span class=\"status status-completed\">ok</span>".to_owned()
            } else {
                format!(
                    "<span class=\"status status-invalidated\">{}</span>",
                    esc(env["error"]["code"].as_str().unwrap_or("failed"))
                )
            },
            esc(&serde_json::to_string_pretty(env).unwrap_or_default())
        );
    }
    let schema = &info["input_schema"];
    let _ = write!(
        body,
        "<h2>Run it</h2>{}<form class=\"run\" method=\"post\" action=\"/catalog/{}\">{}<button>Run</button></form>",
        problem.map(|p| format!("<p class=\"why\">{}</p>", esc(p))).unwrap_or_default(),
        enc(name),
        crate::form::fields(schema, values)
    );
    for (title, key) in [("Input schema", "input_schema"), ("Data schema", "data_schema")] {
        let _ = write!(
            body,
            "<details><summary>{title}</summary><pre class=\"pre\">{}</pre></details>",
            esc(&serde_json::to_string_pretty(&info[key]).unwrap_or_default())
        );
    }
    page("Module", &body)
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
    fn an_episode_shows_its_timeline_tests_anchors_reverts_and_budget() {
        use serde_json::json;
        let version =
            |n: i64, node: &str, command: &str, status: &str, state: serde_json::Value| noesis_store::WorkflowVersion {
                project_id: "p".into(),
                version: n,
                episode_id: "ep<1>".into(),
                node: node.into(),
                status: status.into(),
                command: command.into(),
                state,
                episode: json!({}),
                at: n * 1000,
            };
        let last = json!({
            "user_query": "Fix <script>alert(1)</script>", "current_node": "VERIFIER", "retry_count": 3, "max_retries": 3,
            "selected_solution": "fix the operator", "current_plan": ["change - to +"],
            "test_results": {"public_tests": [{"name": "t::add", "status": "failed", "command": "pytest -q"},
                                                {"name": "t::mul", "status": "passed", "command": "pytest -q"}],
                             "ai_tests": [], "anchor_tests": ["t::mul"]},
            "error_log": [{"type": "anchor_regression", "reason": "anchor regression", "anchors": ["t::mul"],
                           "reverted": {"modified": ["calc.py"], "created": ["x.py"]}}],
            "critiques": [{"critique": "mul broke", "route": "CODER", "lesson": "run all tests"}],
            "thought_trace": [{"type": "coder", "run": "ep1-coder-0"}],
        });
        let v1 = version(1, "PLANNER", "solve", "active", json!({"user_query": "x"}));
        let v2 = version(2, "VERIFIER", "CODER", "active", last.clone());
        let v3 = version(3, "VERIFIER", "VERIFIER", "escalated", last);
        let html = episode_page(&[&v1, &v2, &v3]);
        assert!(!html.contains("<script>alert"), "escaped");
        assert!(html.contains("Fix &lt;script&gt;"));
        assert!(html.contains("retries used 3 of 3, 0 left"), "{html}");
        assert!(html.contains("Escalated: the retry budget is spent"));
        assert!(html.contains("<a href=\"/runs/ep1-coder-0\">agent run</a>"), "the CODER visit links its run");
        assert!(
            html.contains("anchor regression: broke t::mul — restored calc.py (modified), x.py (created)"),
            "{html}"
        );
        assert!(
            html.contains(
                "<td>t::mul</td><td><span class=\"status status-completed\">passed</span></td><td>anchor</td>"
            )
        );
        assert!(
            html.contains("<td>t::add</td><td><span class=\"status status-invalidated\">failed</span></td><td></td>")
        );
        assert!(html.contains("mul broke → CODER <em>lesson: run all tests</em>"));
        let list = episodes_page(&[v1, v2, v3]);
        assert_eq!(list.matches("<tr><td><a href=\"/episodes/").count(), 1, "one row per episode");
        assert!(list.contains("/episodes/ep%3C1%3E") && list.contains("status-invalidated\">escalated"), "{list}");
    }

    #[test]
    fn usage_adds_up_by_day_and_model_and_charts_as_svg() {
        use noesis_agent::{AgentRun, RunConfig};
        let reply = |model: &str, input: u64, output: u64, cost: f64, route: Option<&str>| noesis_agent::ReplyRecord {
            text: String::new(),
            model: model.into(),
            tool_calls: Vec::new(),
            usage: Some(noesis_llm::Usage { input_tokens: input, output_tokens: output }),
            cost_usd: cost,
            route: route.map(str::to_owned),
            span: None,
        };
        let day = 86_400_000;
        let mut a = AgentRun::new("a", "t", RunConfig::default(), 20_000 * day as u64);
        a.host = serde_json::json!({"provider": "openai"});
        a.replies = vec![
            reply("gpt-4o", 100, 10, 0.01, None),
            reply("gpt-4o", 50, 5, 0.005, None),
            reply("m", 7, 1, 0.0, Some("think: rule x; answered by local/smol")),
        ];
        let mut b = AgentRun::new("b", "t", RunConfig::default(), 20_001 * day as u64);
        b.host = serde_json::json!({"provider": "openai"});
        b.replies = vec![reply("gpt-4o", 1, 1, 0.001, None)];
        let rows = usage_of(&[a, b]);
        let got: Vec<(&str, &str, u64, u64, u64)> =
            rows.iter().map(|r| (r.day.as_str(), r.model.as_str(), r.calls, r.input_tokens, r.output_tokens)).collect();
        assert_eq!(
            got,
            [
                ("2024-10-04", "local/smol", 1, 7, 1),
                ("2024-10-04", "openai/gpt-4o", 2, 150, 15),
                ("2024-10-05", "openai/gpt-4o", 1, 1, 1)
            ]
        );
        let html = usage_page(&rows);
        assert!(html.contains("4 model call(s), 158 input and 17 output tokens, $0.0160."), "{html}");
        assert_eq!(html.matches("<rect ").count(), 4, "two stacked bars, one per day");
        assert!(html.contains("<title>2024-10-04 — 157 in, 16 out</title>"), "{html}");
        assert!(!html.contains("style="), "no inline style: the CSP forbids it");
        assert!(html.contains("<td>openai/gpt-4o</td><td>3</td><td>151</td><td>16</td><td>$0.0160</td>"));
    }

    #[test]
    fn module_run_frames_add_their_whole_runs_usage_once() {
        let mk = |slice: serde_json::Value, at: i64| {
            Draft { context_slice: slice.to_string(), ..Draft::new("run") }
                .into_frame("p", None, None, Timestamp::from_millis(at))
                .unwrap()
        };
        let day = 86_400_000;
        let frames = [
            mk(
                serde_json::json!({"model": "openai/gpt-4o", "usage_total": {"calls": 2, "input_tokens": 10, "output_tokens": 4, "cost_usd": 0.5}}),
                20_000 * day,
            ),
            mk(
                serde_json::json!({"model": "openai/gpt-4o", "usage_total": {"calls": 1, "input_tokens": 1, "output_tokens": 1, "cost_usd": null}}),
                20_000 * day,
            ),
            // A step's frame has no total: not counted again.
            mk(serde_json::json!({"model": "openai/gpt-4o", "module": "child"}), 20_000 * day),
            mk(serde_json::json!("not an object"), 20_000 * day),
        ];
        let rows = usage_of_frames(&frames);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].calls, rows[0].input_tokens, rows[0].output_tokens), (3, 11, 5));
        assert!((rows[0].cost_usd - 0.5).abs() < 1e-9);
        let merged = merge_usage([rows.clone(), rows]);
        assert_eq!((merged.len(), merged[0].calls), (1, 6));
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
