//! The episode as causal frames: a root (the task, its outcome, the files
//! changed as evidence) and a child per node run since the last record.

use std::path::Path;

use noesis_agent::AgentRun;
use noesis_store::WorkflowVersion;
use serde_json::{Value, json};

use super::{DriveError, Driver};
use crate::episode::{Head, Outcome};
use crate::judge::strings;

impl Driver {
    /// The episode as causal frames: a root (the task, its outcome, the
    /// files changed as evidence) and a child per node run since the last
    /// record — VERIFIER's with each test run as evidence, and a CODER
    /// change that was reverted invalidated with the reason.
    pub(super) async fn record_frames(&self, head: &Head, outcome: Outcome) -> Result<(), DriveError> {
        use noesis_frames::{Draft, Evidence, Invalidation, Status, Timestamp};
        let outcome = outcome.as_str();
        let upto = head.episode["frames_upto"].as_i64().unwrap_or(0);
        // The episode's own session (of kind `episode`): one per record.
        let session_id = format!("solve-{}-{}", head.episode_id, head.version);
        let history = self.store().workflow_history(&self.states.project_id).await?;
        let visits: Vec<&WorkflowVersion> =
            history.iter().filter(|v| v.episode_id == head.episode_id && v.version > upto).collect();
        let now = Timestamp::now();
        let s = &head.state;
        let mut evidence = Vec::new();
        for (rel, _) in s["file_context"].as_object().into_iter().flatten() {
            if let Ok(bytes) = std::fs::read(self.workspace.join(rel)) {
                let path = noesis_frames::project::name_for(&self.project_root, &self.workspace, Path::new(rel));
                evidence.push(Evidence::File { path, hash: noesis_frames::scan::hash_bytes(&bytes) });
            }
        }
        let root = Draft {
            context_slice: json!({"episode_id": head.episode_id, "outcome": outcome, "retries": s["retry_count"],
                                  "versions": [upto + 1, head.version]})
            .to_string(),
            evidence,
            conclusion: format!("{outcome}: {}", s["selected_solution"].as_str().unwrap_or_default()),
            confidence: if outcome == "solved" { 1.0 } else { 0.0 },
            status: Some(Status::Completed),
            ..Draft::new(format!("solve: {}", s["user_query"].as_str().unwrap_or_default()))
        }
        .into_frame(&self.states.project_id, Some(&session_id), None, now)
        .map_err(|e| DriveError::failed("the episode's root frame", e))?;
        let mut frames = Vec::new();
        let mut reverted = Vec::new();
        let mut last_coder: Option<noesis_frames::FrameId> = None;
        for v in visits {
            let st = &v.state;
            let node = v.command.as_str();
            let (conclusion, evidence, slice) = match node {
                "PLANNER" => (st["selected_solution"].as_str().unwrap_or_default().to_owned(), Vec::new(), json!({})),
                "REASONER" => (strings(&st["current_plan"]).join("; "), Vec::new(), json!({})),
                "CODER" => {
                    let files: Vec<String> =
                        st["file_context"].as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
                    let run =
                        st["thought_trace"].as_array().and_then(|t| t.iter().rev().find(|e| e["type"] == "coder"));
                    (
                        format!("changed {}", files.join(", ")),
                        Vec::new(),
                        json!({"agent_run": run.map(|r| r["run"].clone())}),
                    )
                }
                "VERIFIER" | "VERIFIER (baseline)" => {
                    let tests = st["test_results"]["public_tests"].as_array().cloned().unwrap_or_default();
                    let passed = tests.iter().filter(|t| t["status"] == "passed").count();
                    let evidence = tests
                        .iter()
                        .map(|t| Evidence::Observation {
                            tool: "test".into(),
                            content: format!(
                                "{}: {} (`{}` exit {}, output blake3:{})",
                                t["name"].as_str().unwrap_or_default(),
                                t["status"].as_str().unwrap_or_default(),
                                t["command"].as_str().unwrap_or_default(),
                                t["exit_code"],
                                t["output_blake3"].as_str().unwrap_or_default().get(..16).unwrap_or_default()
                            ),
                        })
                        .collect();
                    (format!("{passed} of {} test(s) pass", tests.len()), evidence, json!({"tests": tests}))
                }
                "REFLECTOR" => {
                    let last = st["critiques"].as_array().and_then(|c| c.last()).cloned().unwrap_or(Value::Null);
                    (
                        last["critique"].as_str().unwrap_or_default().to_owned(),
                        Vec::new(),
                        json!({"route": last["route"]}),
                    )
                }
                _ => continue,
            };
            let frame = Draft {
                context_slice: json!({"episode_id": v.episode_id, "version": v.version, "node": node, "detail": slice})
                    .to_string(),
                evidence,
                conclusion,
                confidence: 1.0,
                status: Some(Status::Completed),
                ..Draft::new(node.to_owned())
            }
            .into_frame(&self.states.project_id, Some(&session_id), Some(&root), now)
            .map_err(|e| DriveError::failed("a frame of the episode", e))?;
            if node == "CODER" {
                last_coder = Some(frame.frame_id.clone());
            }
            // This VERIFIER found a regression (its error log grew by one) and
            // restored the tree: the CODER run before it is no longer true.
            let logged = |state: &Value| state["error_log"].as_array().map_or(0, Vec::len);
            let before = history.iter().find(|h| h.version == v.version - 1).map_or(0, |h| logged(&h.state));
            if node == "VERIFIER"
                && logged(st) > before
                && st["error_log"].as_array().and_then(|l| l.last()).is_some_and(|e| e["type"] == "anchor_regression")
                && let Some(id) = last_coder.take()
            {
                reverted.push(Invalidation { frame_id: id, reason: "anchor regression".into() });
            }
            frames.push(frame);
        }
        let session = noesis_frames::SessionArtifacts {
            session_id: session_id.clone(),
            project_id: self.states.project_id.clone(),
            initial_prompt: s["user_query"].as_str().map(str::to_owned),
            files: self.episode_files(s).await?,
            scope: vec![noesis_frames::project::name_for(&self.project_root, &self.workspace, &self.workspace)],
            root_frame_id: Some(root.frame_id.clone()),
            conversation_log: None,
            created_at: now,
        };
        self.store()
            .record_session(&noesis_store::NewSession {
                kind: noesis_store::SessionKind::Episode,
                artifacts: &session,
                frames: std::slice::from_ref(&root),
                source_hash: None,
            })
            .await?;
        self.store().insert_frames(&frames).await?;
        if !reverted.is_empty() {
            self.store().invalidate(&reverted, None, now).await?;
        }
        Ok(())
    }

    /// The files of the episode with their roles, project-relative: what
    /// CODER's runs read (hash as read), and what the episode changed
    /// (hash now).
    async fn episode_files(
        &self,
        state: &Value,
    ) -> Result<std::collections::BTreeMap<String, noesis_frames::FileEntry>, DriveError> {
        use noesis_frames::{FileEntry, FileRole};
        let name = |rel: &str| noesis_frames::project::name_for(&self.project_root, &self.workspace, Path::new(rel));
        let mut files = std::collections::BTreeMap::new();
        let runs: Vec<String> = state["thought_trace"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "coder")
            .filter_map(|e| e["run"].as_str().map(str::to_owned))
            .collect();
        for id in runs {
            let Some(stored) = self.store().agent_state(&id, None).await? else { continue };
            let Ok(run) = AgentRun::from_json(&stored.state) else { continue };
            for c in run.calls.iter().filter(|c| c.tool == "read_file") {
                for e in &c.evidence {
                    if let noesis_agent::ToolEvidence::File { path, blake3 } = e {
                        files.insert(name(path), FileEntry { hash: blake3.clone(), role: FileRole::Read });
                    }
                }
            }
        }
        for (rel, role) in state["file_context"].as_object().into_iter().flatten() {
            let role = match role.as_str() {
                Some("created") => FileRole::Created,
                Some("modified") => FileRole::Modified,
                // Deleted: no file, no hash to keep.
                _ => continue,
            };
            if let Ok(bytes) = std::fs::read(self.workspace.join(rel)) {
                files.insert(name(rel), FileEntry { hash: noesis_frames::scan::hash_bytes(&bytes), role });
            }
        }
        Ok(files)
    }
}
