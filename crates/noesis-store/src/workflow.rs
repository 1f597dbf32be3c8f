//! Workflow states: every version of a project's CognitiveState. A new
//! version is written only over the head it was made from; a writer that
//! lost the race gets [`StoreError::Conflict`] and makes its change again
//! on the new head.

use sqlx::{AnyPool, Row};

use crate::error::{Context, StoreError};

/// One version of a project's state.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowVersion {
    /// The project.
    pub project_id: String,
    /// 1 for the first, the head's + 1 for each after.
    pub version: i64,
    /// The state's episode.
    pub episode_id: String,
    /// The state's `current_node`.
    pub node: String,
    /// The episode's status: `active`, `escalated` or `archived`.
    pub status: String,
    /// What made this version (`init`, `set KEY`, `transition CODER`, …).
    pub command: String,
    /// The state's JSON.
    pub state: serde_json::Value,
    /// What `noesis solve` keeps beside the state (`{}` otherwise).
    pub episode: serde_json::Value,
    /// When it was written (ms since the epoch).
    pub at: i64,
}

const COLUMNS: &str = "project_id, version, episode_id, node, status, command, state, at, episode";

fn row(r: &sqlx::any::AnyRow) -> Result<WorkflowVersion, StoreError> {
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    let version: i64 = r.try_get(1).map_err(corrupt)?;
    let text: String = r.try_get(6).map_err(corrupt)?;
    let state = serde_json::from_str(&text)
        .map_err(|e| StoreError::Corrupt(format!("workflow state version {version}: not JSON: {e}")))?;
    let text: String = r.try_get(8).map_err(corrupt)?;
    let episode = serde_json::from_str(&text)
        .map_err(|e| StoreError::Corrupt(format!("workflow state version {version}: its episode is not JSON: {e}")))?;
    Ok(WorkflowVersion {
        project_id: r.try_get(0).map_err(corrupt)?,
        version,
        episode_id: r.try_get(2).map_err(corrupt)?,
        node: r.try_get(3).map_err(corrupt)?,
        status: r.try_get(4).map_err(corrupt)?,
        command: r.try_get(5).map_err(corrupt)?,
        state,
        episode,
        at: r.try_get(7).map_err(corrupt)?,
    })
}

/// Writes `v` as version `v.version`, which must be the head's + 1 (1 for
/// a project without a state).
pub(crate) async fn append(tx: &mut sqlx::AnyConnection, v: &WorkflowVersion) -> Result<(), StoreError> {
    let head: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM workflow_states WHERE project_id = $1")
        .bind(v.project_id.clone())
        .fetch_one(&mut *tx)
        .await
        .ctx(|| "read the workflow state's head".into())?;
    let head = head.unwrap_or(0);
    if v.version != head + 1 {
        return Err(StoreError::Conflict(format!(
            "the state moved to version {head} while version {} was being written from {}",
            v.version,
            v.version - 1
        )));
    }
    let inserted = sqlx::query(
        "INSERT INTO workflow_states (project_id, version, episode_id, node, status, command, state, at, episode) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(v.project_id.clone())
    .bind(v.version)
    .bind(v.episode_id.clone())
    .bind(v.node.clone())
    .bind(v.status.clone())
    .bind(v.command.clone())
    .bind(v.state.to_string())
    .bind(v.at)
    .bind(v.episode.to_string())
    .execute(&mut *tx)
    .await;
    match inserted {
        Ok(_) => Ok(()),
        // PostgreSQL: another writer inserted this version after our read.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            Err(StoreError::Conflict(format!("version {} was written by another writer", v.version)))
        }
        Err(e) => Err(e).ctx(|| format!("write workflow state version {}", v.version)),
    }
}

/// Version `version` of the project's state, or its head.
pub(crate) async fn load(
    pool: &AnyPool,
    project_id: &str,
    version: Option<i64>,
) -> Result<Option<WorkflowVersion>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM workflow_states WHERE project_id = $1 AND version <= $2 ORDER BY version DESC LIMIT 1"
    );
    let found = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(project_id.to_owned())
        .bind(version.unwrap_or(i64::MAX))
        .fetch_optional(pool)
        .await
        .ctx(|| "read the workflow state".into())?;
    match found {
        Some(r) => {
            let v = row(&r)?;
            // An exact version was asked for and does not exist.
            if version.is_some_and(|n| n != v.version) { Ok(None) } else { Ok(Some(v)) }
        }
        None => Ok(None),
    }
}

/// Every version of the project's state, oldest first.
pub(crate) async fn history(pool: &AnyPool, project_id: &str) -> Result<Vec<WorkflowVersion>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM workflow_states WHERE project_id = $1 ORDER BY version");
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(project_id.to_owned())
        .fetch_all(pool)
        .await
        .ctx(|| "read the workflow state's history".into())?;
    rows.iter().map(row).collect()
}
