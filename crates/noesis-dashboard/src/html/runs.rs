//! Agent runs: the list and one run as a timeline.

use std::fmt::Write as _;

use super::{clip, enc, esc, frame_link, page, short};

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
/// The forms that decide the calls `waiting`, posting to `action`: one per
/// call (approve, deny with a reason, abort, approve edited arguments) and
/// "approve all" when several wait. Empty when nothing waits.
pub(crate) fn decide_forms(action: &str, waiting: &[noesis_agent::Pending]) -> String {
    let mut body = String::new();
    if waiting.is_empty() {
        return body;
    }
    let action = esc(action);
    let _ = write!(body, "<h2>Waiting for your decision ({})</h2>", waiting.len());
    if waiting.len() > 1 {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"call\" value=\"all\">\
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
             <form method=\"post\" action=\"{action}\" class=\"decide\">\
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
    body
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
            body.push_str(&decide_forms(&format!("/runs/{rid}/decide"), waiting));
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
            Entry::Compaction(c) => {
                let _ = write!(
                    body,
                    "<li class=\"compaction\"><span class=\"muted\">compacted</span> the turns above were summarised \
                     for the model ({}{}); {} fact(s) carried verbatim<div class=\"pre\">{}</div><ul>",
                    esc(&c.reason),
                    if c.by_rule { ", summary written by rule" } else { "" },
                    c.facts.len(),
                    esc(&clip(&c.summary, 2000)),
                );
                for f in &c.facts {
                    let _ = write!(
                        body,
                        "<li><span class=\"pre\">{}</span> <code>{}</code></li>",
                        esc(&f.text),
                        esc(&f.call_id)
                    );
                }
                body.push_str("</ul></li>");
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
