//! Agent runs: each state a run passes through, kept by step. Saving a
//! state and moving the run's summary forward is one transaction, so a
//! crash leaves the previous state whole.

use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::error::{Context, StoreError};

/// One stored state of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentState {
    /// The run.
    pub run_id: String,
    /// Its project.
    pub project_id: String,
    /// The task, for listings.
    pub task: String,
    /// What the run is doing (`running`, `awaiting_approval`, `done`, …).
    pub status: String,
    /// The run's step counter at this state.
    pub step: i64,
    /// The run this one was forked from, if any.
    pub forked_from: Option<String>,
    /// The run's JSON.
    pub state: serde_json::Value,
    /// When it was stored (ms since the epoch).
    pub at: i64,
}

/// A run as listed: its latest state's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSummary {
    /// The run.
    pub run_id: String,
    /// The task.
    pub task: String,
    /// What it is doing.
    pub status: String,
    /// Its latest stored step.
    pub latest_step: i64,
    /// The run it was forked from.
    pub forked_from: Option<String>,
    /// When it last changed.
    pub updated_at: i64,
}

pub(crate) async fn save(tx: &mut sqlx::AnyConnection, s: &AgentState) -> Result<(), StoreError> {
    let state = s.state.to_string();
    sqlx::query(
        "INSERT INTO agent_runs (run_id, project_id, task, status, latest_step, forked_from, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7) \
         ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, latest_step = excluded.latest_step, \
         updated_at = excluded.updated_at",
    )
    .bind(s.run_id.clone())
    .bind(s.project_id.clone())
    .bind(s.task.clone())
    .bind(s.status.clone())
    .bind(s.step)
    .bind(s.forked_from.clone())
    .bind(s.at)
    .execute(&mut *tx)
    .await
    .ctx(|| format!("save agent run {}", s.run_id))?;
    // The same step saved twice (a retried checkpoint) keeps the last.
    sqlx::query(
        "INSERT INTO agent_run_states (run_id, step, state, at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (run_id, step) DO UPDATE SET state = excluded.state, at = excluded.at",
    )
    .bind(s.run_id.clone())
    .bind(s.step)
    .bind(state)
    .bind(s.at)
    .execute(&mut *tx)
    .await
    .ctx(|| format!("save step {} of agent run {}", s.step, s.run_id))?;
    Ok(())
}

/// The state of `run_id` at `step`, or its latest (the highest step at or
/// below `step` when one is given).
pub(crate) async fn load(pool: &AnyPool, run_id: &str, step: Option<i64>) -> Result<Option<AgentState>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(
        "SELECT r.run_id, r.project_id, r.task, r.status, s.step, r.forked_from, s.state, s.at \
         FROM agent_runs r JOIN agent_run_states s ON s.run_id = r.run_id \
         WHERE r.run_id = $1 AND s.step <= $2 ORDER BY s.step DESC LIMIT 1"
            .to_owned(),
    ))
    .bind(run_id.to_owned())
    .bind(step.unwrap_or(i64::MAX))
    .fetch_optional(pool)
    .await
    .ctx(|| format!("load agent run {run_id}"))?;
    let Some(r) = row else { return Ok(None) };
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    let text: String = r.try_get(6).map_err(corrupt)?;
    let state = serde_json::from_str(&text)
        .map_err(|e| StoreError::Corrupt(format!("agent run {run_id}: its state is not JSON: {e}")))?;
    Ok(Some(AgentState {
        run_id: r.try_get(0).map_err(corrupt)?,
        project_id: r.try_get(1).map_err(corrupt)?,
        task: r.try_get(2).map_err(corrupt)?,
        status: r.try_get(3).map_err(corrupt)?,
        step: r.try_get(4).map_err(corrupt)?,
        forked_from: r.try_get(5).map_err(corrupt)?,
        state,
        at: r.try_get(7).map_err(corrupt)?,
    }))
}

/// A project's runs, most recently changed first.
pub(crate) async fn list(pool: &AnyPool, project_id: &str, limit: u32) -> Result<Vec<AgentSummary>, StoreError> {
    let rows = sqlx::query(
        "SELECT run_id, task, status, latest_step, forked_from, updated_at FROM agent_runs \
         WHERE project_id = $1 ORDER BY updated_at DESC, run_id DESC LIMIT $2",
    )
    .bind(project_id.to_owned())
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .ctx(|| "list agent runs".into())?;
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    rows.iter()
        .map(|r| {
            Ok(AgentSummary {
                run_id: r.try_get(0).map_err(corrupt)?,
                task: r.try_get(1).map_err(corrupt)?,
                status: r.try_get(2).map_err(corrupt)?,
                latest_step: r.try_get(3).map_err(corrupt)?,
                forked_from: r.try_get(4).map_err(corrupt)?,
                updated_at: r.try_get(5).map_err(corrupt)?,
            })
        })
        .collect()
}
