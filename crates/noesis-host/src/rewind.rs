//! A run's workspace over time: before each batch of calls that may change
//! files (writes, commands, anything not read-only) runs, the workspace is
//! snapshotted (noesis-fs's incremental snapshots: after the first, a
//! metadata walk plus the files that changed), so `agent fork --at N` and
//! `agent rewind --at N` can put the files back as they were at step N.
//!
//! Kept in the noesis home: `snapshots/blobs/` (contents by blake3, shared
//! by every run) and `snapshots/agent/RUN/STEP.json` (one manifest per
//! batch, named by the run's step when the batch started).

use std::path::{Path, PathBuf};

use noesis_agent::{AgentRun, CallStatus, Checkpoint};
use noesis_fs::snapshot::{self, Changes, Snapshot};

use crate::{HostError, Result};
#[cfg(test)]
use std::sync::Arc;

/// Where a home's run snapshots live.
#[derive(Debug, Clone)]
pub struct Rewinds {
    root: PathBuf,
}

/// The workspace as it was at a step, found among a run's snapshots.
#[derive(Debug, Clone)]
pub struct Found {
    /// The step the snapshot was taken at (the first at or after the step
    /// asked for: nothing changed the files between the two).
    pub step: u64,
    /// The tree.
    pub snapshot: Snapshot,
}

impl Rewinds {
    /// The snapshots under `home` (the noesis home).
    pub fn new(home: &Path) -> Rewinds {
        Rewinds { root: home.join("snapshots") }
    }

    /// What a workspace holds that is noesis's, not the run's: its
    /// `.noesis` folder (hidden from the run's commands too) and the home
    /// these snapshots live in, should the workspace hold it.
    fn skipped(&self, workspace: &Path) -> Vec<PathBuf> {
        let mut skip = vec![workspace.join(".noesis")];
        if let Some(home) = self.root.parent() {
            skip.push(home.to_path_buf());
        }
        skip
    }

    fn blobs(&self) -> PathBuf {
        self.root.join("blobs")
    }

    fn dir(&self, run_id: &str) -> PathBuf {
        self.root.join("agent").join(run_id)
    }

    /// The steps a run has snapshots at, in order.
    fn steps(&self, run_id: &str) -> Result<Vec<u64>> {
        let dir = self.dir(run_id);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(HostError::Message(format!("{}: {e}", dir.display()))),
        };
        let mut steps: Vec<u64> =
            entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json")?.parse().ok()).collect();
        steps.sort_unstable();
        Ok(steps)
    }

    fn read(&self, run_id: &str, step: u64) -> Result<Snapshot> {
        let path = self.dir(run_id).join(format!("{step}.json"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| HostError::Message(format!("{}: {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| HostError::Message(format!("{}: not a snapshot: {e}", path.display())))
    }

    /// Snapshots `workspace` as run `run_id` stands at `step`, from the
    /// run's latest snapshot (so only what changed is read).
    pub fn take(&self, run_id: &str, step: u64, workspace: &Path) -> Result<()> {
        let previous = match self.steps(run_id)?.last() {
            Some(last) => Some(self.read(run_id, *last)?),
            None => None,
        };
        let blobs = self.blobs();
        let dir = self.dir(run_id);
        for d in [&blobs, &dir] {
            std::fs::create_dir_all(d).map_err(|e| HostError::Message(format!("{}: {e}", d.display())))?;
        }
        let snap = snapshot::take_skipping(workspace, &blobs, previous.as_ref(), &self.skipped(workspace))
            .map_err(|e| HostError::Message(format!("snapshot of {}: {e}", workspace.display())))?;
        let json = serde_json::to_vec(&snap).unwrap_or_default();
        let path = dir.join(format!("{step}.json"));
        noesis_fs::write_atomic(&path, &json).map_err(|e| HostError::Message(format!("{}: {e}", path.display())))
    }

    /// Snapshots `workspace` when `run`, as its checkpoint stores it, is
    /// about to run calls that may change files (the driver saves the run,
    /// its calls marked running, right before it runs them); once a step.
    pub fn before_changes(&self, run: &AgentRun, workspace: &Path) -> Result<()> {
        if !changing(run) || self.dir(&run.id).join(format!("{}.json", run.step)).exists() {
            return Ok(());
        }
        self.take(&run.id, run.step, workspace)
    }

    /// The workspace as run `run_id` found it at `step`: the first snapshot
    /// taken at or after it. `None` when none was (nothing the run did after
    /// `step` could change a file).
    pub fn at(&self, run_id: &str, step: u64) -> Result<Option<Found>> {
        match self.steps(run_id)?.into_iter().find(|s| *s >= step) {
            Some(s) => Ok(Some(Found { step: s, snapshot: self.read(run_id, s)? })),
            None => Ok(None),
        }
    }

    /// Puts `workspace` back as run `run_id` found it at `step`; what was
    /// undone, or `None` when the run changed nothing after `step`.
    pub fn restore(&self, run_id: &str, step: u64, workspace: &Path) -> Result<Option<Changes>> {
        let Some(found) = self.at(run_id, step)? else { return Ok(None) };
        snapshot::restore_skipping(workspace, &self.blobs(), &found.snapshot, &self.skipped(workspace))
            .map(Some)
            .map_err(|e| HostError::Message(format!("restoring {}: {e}", workspace.display())))
    }
}

/// Whether the calls about to run may change files: any running call of a
/// tool that is not read-only.
fn changing(run: &AgentRun) -> bool {
    run.calls
        .iter()
        .filter(|c| c.status == CallStatus::Running)
        .any(|c| run.config.tools.iter().find(|t| t.name == c.tool).is_none_or(|t| !t.effects.read_only()))
}

/// A checkpoint that also snapshots the workspace before a batch that may
/// change it runs (see [`Rewinds::before_changes`]).
pub struct Snapshotting<C> {
    /// The checkpoint underneath.
    pub inner: C,
    /// Where snapshots go; none: none are taken.
    pub rewinds: Option<Rewinds>,
    /// The run's workspace.
    pub workspace: PathBuf,
    /// Told when a snapshot cannot be taken (the run goes on, but cannot
    /// be rewound with its files to before that step).
    pub warn: Option<crate::host::Note>,
}

#[async_trait::async_trait]
impl<C: Checkpoint> Checkpoint for Snapshotting<C> {
    async fn save(&mut self, run: &AgentRun) -> std::result::Result<(), String> {
        self.inner.save(run).await?;
        if let Some(rewinds) = &self.rewinds
            // A snapshot that cannot be taken costs the rewind, not the run;
            // the person is told.
            && let Err(e) = rewinds.before_changes(run, &self.workspace)
            && let Some(warn) = &self.warn
        {
            warn(&unsnapshotted(run, &e));
        }
        Ok(())
    }
}

/// The warning for a snapshot of `run`'s workspace that failed with `e`.
pub(crate) fn unsnapshotted(run: &AgentRun, e: &HostError) -> String {
    format!(
        "warning: run {}: the workspace was not snapshotted at step {} ({e}); rewinding to before this step will \
         not restore its files",
        run.id, run.step
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose write is about to run, as its checkpoint stores it.
    fn about_to_write() -> AgentRun {
        let schema = serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}});
        let write = noesis_agent::ToolDecl::read_only("write_file", "Writes.", schema)
            .with_effects(noesis_agent::Effects { writes_files: true, ..Default::default() });
        let config = noesis_agent::RunConfig {
            tools: vec![write],
            approval: noesis_agent::ApprovalPolicy::Auto,
            ..Default::default()
        };
        let mut run = AgentRun::new("w", "write", config, 0);
        let noesis_agent::Action::CallModel(_) = run.next(0) else { panic!() };
        let call = noesis_llm::ToolCall {
            id: "c".into(),
            name: "write_file".into(),
            arguments: serde_json::json!({"path": "a"}),
        };
        let reply = noesis_llm::ChatResponse {
            tool_calls: vec![call],
            ..noesis_llm::ChatResponse::text("", "m", noesis_llm::StructuredMode::Text)
        };
        run.on_model_reply(&reply, 0.0).unwrap();
        let noesis_agent::Action::ExecuteTools(_) = run.next(0) else { panic!() };
        run.started("c", 0).unwrap();
        run
    }

    #[tokio::test]
    async fn a_snapshot_that_cannot_be_taken_is_said_and_the_run_goes_on() {
        let home = tempfile::tempdir().unwrap();
        let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let heard = Arc::clone(&said);
        let mut saved = 0;
        let mut keep = Snapshotting {
            inner: |_: &AgentRun| saved += 1,
            rewinds: Some(Rewinds::new(home.path())),
            workspace: home.path().join("no such folder"),
            warn: Some(Arc::new(move |m: &str| heard.lock().unwrap().push(m.to_owned()))),
        };
        let run = about_to_write();
        keep.save(&run).await.unwrap();
        drop(keep);
        assert_eq!(saved, 1, "the run is stored all the same");
        let said = said.lock().unwrap();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("warning: run w: the workspace was not snapshotted at step "), "{}", said[0]);
        assert!(said[0].contains("no such folder"), "{}", said[0]);
    }

    /// A workspace that holds noesis's own state (its `.noesis`, the home
    /// itself): rewinding the run's files never rolls that back, nor
    /// deletes what it gained since.
    #[test]
    fn a_rewind_leaves_noesis_own_state_in_the_workspace_alone() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        let home = root.join("home");
        std::fs::create_dir_all(root.join(".noesis")).unwrap();
        std::fs::write(root.join(".noesis/noesis.db"), "v1").unwrap();
        std::fs::write(root.join("a.txt"), "zero").unwrap();
        let rewinds = Rewinds::new(&home);
        rewinds.take("r", 3, root).unwrap();
        std::fs::write(root.join("a.txt"), "one").unwrap();
        std::fs::write(root.join("b.txt"), "new").unwrap();
        std::fs::write(root.join(".noesis/noesis.db"), "v2").unwrap();
        rewinds.take("r", 7, root).unwrap();
        let undone = rewinds.restore("r", 2, root).unwrap().unwrap();
        assert_eq!(
            (undone.modified.as_slice(), undone.created.as_slice()),
            (&["a.txt".to_owned()][..], &["b.txt".to_owned()][..])
        );
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "zero");
        assert!(!root.join("b.txt").exists());
        assert_eq!(std::fs::read_to_string(root.join(".noesis/noesis.db")).unwrap(), "v2");
        assert!(home.join("snapshots/agent/r/7.json").is_file(), "the later snapshot is kept");
        // Between the two snapshots the files were as the second found them.
        assert_eq!(rewinds.at("r", 5).unwrap().unwrap().step, 7);
        assert!(rewinds.at("r", 8).unwrap().is_none());
    }
}
