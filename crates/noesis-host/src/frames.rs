//! A finished run as causal frames: the run is a root frame (query = the
//! task), each model turn a child, each tool call a child of the turn that
//! asked for it, and the answer a last child citing the observations it
//! rests on. A tool's frame carries its evidence (a file read with its
//! blake3, a command with its exit code and output hash), so a later session
//! that sees the file changed invalidates exactly the runs that read it.

use std::collections::BTreeMap;
use std::path::Path;

use noesis_agent::{AgentRun, CallStatus, Entry, Outcome, ToolEvidence};
use noesis_frames::project::{Project, name_for};
use noesis_frames::scan::hash_bytes;
use noesis_frames::{CausalFrame, Draft, Evidence, FramesError, Status, Timestamp};
use serde_json::json;

/// How sure a frame is, by rule (the model states no confidence): a tool's
/// recorded result is what happened; a model's turn or answer is unrated
/// unless a critique confirmed the goal; the test model's are fabricated.
fn confidence(fabricated: bool, rated: f64) -> f64 {
    if fabricated { 0.0 } else { rated }
}

/// Unrated model output.
const UNRATED: f64 = 0.5;

fn clip(text: &str, n: usize) -> String {
    if text.chars().count() <= n { text.to_owned() } else { format!("{}…", text.chars().take(n).collect::<String>()) }
}

/// The frames of `run`, parents before children, under `parent` (a
/// session's root) when given. Sub-agent runs found in `children` hang
/// under the call that started them.
pub fn frames_of(
    run: &AgentRun,
    project: &Project,
    parent: Option<&CausalFrame>,
    now: Timestamp,
    children: &BTreeMap<String, AgentRun>,
) -> Result<Vec<CausalFrame>, FramesError> {
    let fabricated = run.host["provider"].as_str() == Some("test");
    let workspace = run.host["workspace"].as_str().map(Path::new).unwrap_or(&project.root);
    let file = |rel: &str, blake3: &str| Evidence::File {
        path: name_for(&project.root, &project.root, &workspace.join(rel)),
        hash: blake3.to_owned(),
    };
    let task = run.host["task"].as_str().unwrap_or(&run.task);
    let (conclusion, goal_confirmed) = match &run.outcome {
        Some(Outcome::Answer { text }) => (clip(text, 2000), run.goal_confirmed()),
        Some(other) => (format!("no answer: {}", noesis_agent::outcome_name(other)), false),
        None => ("unfinished".to_owned(), false),
    };
    // The root rests on every file the run's tools read or wrote.
    let mut files: Vec<Evidence> = Vec::new();
    for c in &run.calls {
        for e in &c.evidence {
            if let ToolEvidence::File { path, blake3 } = e {
                let ev = file(path, blake3);
                if !files.contains(&ev) {
                    files.push(ev);
                }
            }
        }
    }
    let mut slice = json!({
        "agent_run": run.id,
        "model": format!("{}/{}", run.host["provider"].as_str().unwrap_or_default(), run.host["model"].as_str().unwrap_or_default()),
        "strategy": run.config.strategy,
        "usage": run.usage,
    });
    if fabricated {
        slice["fabricated"] = json!(true);
    }
    if !run.traces.is_empty() {
        // One `invoke_agent` span per drive: a resumed run has several.
        slice["otel"] = json!(run.traces);
    }
    let root = Draft {
        context_slice: slice.to_string(),
        evidence: files,
        conclusion,
        confidence: confidence(fabricated, if goal_confirmed { 0.9 } else { UNRATED }),
        status: Some(Status::Completed),
        ..Draft::new(clip(task, 500))
    }
    .into_frame(&project.project_id, None, parent, now)?;
    let mut all = vec![root.clone()];
    let mut observed = Vec::new();
    let mut turn = 0u32;
    let mut cursor = 0;
    for e in &run.entries {
        let Entry::Assistant { content, calls } = e else { continue };
        turn += 1;
        // The reply this turn came from (replies also hold critiques and
        // plans, which make no turn): its route is the call's route.
        let found = run.replies[cursor..]
            .iter()
            .position(|r| {
                if calls.is_empty() {
                    r.tool_calls.is_empty() && r.text.trim() == content.trim()
                } else {
                    r.tool_calls.iter().map(|c| &c.id).eq(calls.iter())
                }
            })
            .map(|i| cursor + i);
        if let Some(i) = found {
            cursor = i + 1;
        }
        let reply = found.map(|i| &run.replies[i]);
        let mut slice = json!({"agent_run": run.id, "turn": turn});
        if let Some(route) = reply.and_then(|r| r.route.as_deref()) {
            slice["route"] = json!(route);
        }
        if let Some(ids) = reply.and_then(|r| r.span.as_ref()) {
            slice["otel"] = json!(ids);
        }
        let turn_frame = Draft {
            context_slice: slice.to_string(),
            conclusion: if content.is_empty() {
                format!("asked for {} tool call(s)", calls.len())
            } else {
                clip(content, 1000)
            },
            confidence: confidence(fabricated, UNRATED),
            status: Some(Status::Completed),
            ..Draft::new(format!("model turn {turn}"))
        }
        .into_frame(&project.project_id, None, Some(&root), now)?;
        let mut call_frames = Vec::new();
        let mut nested = Vec::new();
        for id in calls {
            let Some(c) = run.call(id) else { continue };
            let result = c.result.clone().unwrap_or_default();
            let mut evidence: Vec<Evidence> = c
                .evidence
                .iter()
                .filter_map(|e| match e {
                    ToolEvidence::File { path, blake3 } => Some(file(path, blake3)),
                    _ => None,
                })
                .collect();
            evidence.push(Evidence::Observation {
                tool: c.tool.clone(),
                content: format!("{} (blake3:{})", clip(&result, 200), &hash_bytes(result.as_bytes())[..16]),
            });
            let done = c.status == CallStatus::Completed;
            let mut slice = json!({"agent_run": run.id, "call_id": c.id, "tool": c.tool,
                                   "arguments": c.arguments, "status": c.status, "evidence": c.evidence});
            if let Some(ids) = &c.span {
                slice["otel"] = json!(ids);
            }
            let call_frame = Draft {
                context_slice: slice.to_string(),
                evidence,
                conclusion: format!("{}: {}", c.status.as_str(), clip(result.lines().next().unwrap_or_default(), 300)),
                confidence: if done { 1.0 } else { 0.0 },
                status: Some(Status::Completed),
                ..Draft::new(format!("{} {}", c.tool, clip(&c.arguments.to_string(), 300)))
            }
            .into_frame(&project.project_id, None, Some(&turn_frame), now)?;
            if done {
                observed.push(Evidence::Frame { frame_id: call_frame.frame_id.clone() });
            }
            for e in &c.evidence {
                if let ToolEvidence::SubAgent { run_id } = e
                    && let Some(child) = children.get(run_id)
                {
                    nested.extend(frames_of(child, project, Some(&call_frame), now, children)?);
                }
            }
            call_frames.push(call_frame);
        }
        all.push(turn_frame);
        all.extend(call_frames);
        all.extend(nested);
    }
    if let Some(Outcome::Answer { text }) = &run.outcome {
        let answer = Draft {
            context_slice: json!({"agent_run": run.id}).to_string(),
            evidence: observed,
            conclusion: clip(text, 2000),
            confidence: confidence(fabricated, if goal_confirmed { 0.9 } else { UNRATED }),
            status: Some(Status::Completed),
            ..Draft::new("answer")
        }
        .into_frame(&project.project_id, None, Some(&root), now)?;
        all.push(answer);
    }
    Ok(all)
}
