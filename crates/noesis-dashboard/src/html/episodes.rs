//! Workflow episodes: the list and one episode's timeline, tests and budget.

use std::fmt::Write as _;

use super::{clip, enc, esc, not_found, page};

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
///
/// `live`: the episode as the server running it knows it; while it runs,
/// the page follows its events and decides CODER's waiting calls.
pub fn episode_page(
    versions: &[&noesis_store::WorkflowVersion],
    live: Option<&noesis_workflow::served::LiveEpisode>,
) -> String {
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
    if let Some(l) = live.filter(|l| l.running) {
        let eid = enc(&last.episode_id);
        let _ = write!(
            body,
            "<h2>Live</h2><ol class=\"timeline\" id=\"live\" data-events=\"/episodes/{eid}/events?after={}\"></ol>",
            l.last_event
        );
        if let Some((_, waiting)) = &l.pending {
            body.push_str(&super::runs::decide_forms(&format!("/episodes/{eid}/decide"), waiting));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let html = episode_page(&[&v1, &v2, &v3], None);
        assert!(!html.contains("id=\"live\""), "a stored episode is not followed");
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
    fn a_live_episode_is_followed_and_its_waiting_call_decided_on_the_page() {
        use noesis_workflow::served::LiveEpisode;
        use serde_json::json;
        let v = noesis_store::WorkflowVersion {
            project_id: "p".into(),
            version: 4,
            episode_id: "ep<2>".into(),
            node: "CODER".into(),
            status: "active".into(),
            command: "transition CODER".into(),
            state: json!({"user_query": "fix", "retry_count": 0, "max_retries": 3}),
            episode: json!({}),
            at: 0,
        };
        let waiting = noesis_agent::Pending {
            call_id: "c1".into(),
            tool: "edit_file".into(),
            arguments: json!({"path": "calc.py"}),
            arguments_hash: "h1".into(),
        };
        let live = LiveEpisode { running: true, last_event: 7, pending: Some(("ep-coder-0".into(), vec![waiting])) };
        let html = episode_page(&[&v], Some(&live));
        assert!(html.contains("id=\"live\" data-events=\"/episodes/ep%3C2%3E/events?after=7\""), "{html}");
        assert!(html.contains("action=\"/episodes/ep%3C2%3E/decide\""), "{html}");
        assert!(html.contains("name=\"hash\" value=\"h1\"") && html.contains("<code>edit_file</code>"), "{html}");
        // Finished: shown as stored, nothing to follow or decide.
        let done = LiveEpisode { running: false, last_event: 9, pending: None };
        let html = episode_page(&[&v], Some(&done));
        assert!(!html.contains("id=\"live\"") && !html.contains("/decide"), "{html}");
    }
}
