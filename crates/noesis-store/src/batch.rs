//! Module batches: one module over many inputs, each input answered once
//! by whichever worker takes it. The inputs are written with the batch in
//! one transaction (a batch is there whole or not at all); an answer is
//! written only while the item has none, so a slice of items retried after
//! its worker died keeps the first answer and a re-run is visible as a
//! refused write, never as a second answer.

use serde_json::Value;
use sqlx::{AnyPool, Row};

use crate::error::{Context, StoreError};

/// A batch as submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Its id.
    pub batch_id: String,
    /// The project it belongs to.
    pub project_id: String,
    /// The module: a name on the search path or a folder.
    pub module: String,
    /// How it runs (provider, model, limits), as the submitter chose.
    pub spec: Value,
    /// How many inputs.
    pub total: i64,
    /// When it was submitted (ms since the epoch).
    pub created_at: i64,
}

/// One input of a batch, with its answer once there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchItem {
    /// Its place in the batch (0-based, the input file's order).
    pub idx: i64,
    /// The input.
    pub input: Value,
    /// The envelope that answered it.
    pub output: Option<Value>,
    /// Who answered it (a worker's name).
    pub answered_by: Option<String>,
}

pub(crate) async fn create(store: &crate::SqlStore, batch: &Batch, inputs: &[Value]) -> Result<(), StoreError> {
    if i64::try_from(inputs.len()).ok() != Some(batch.total) {
        return Err(StoreError::Conflict(format!(
            "batch {}: says {} inputs, {} given",
            batch.batch_id,
            batch.total,
            inputs.len()
        )));
    }
    let id = &batch.batch_id;
    let mut tx = store.write().await?;
    let made = sqlx::query(
        "INSERT INTO batches (batch_id, project_id, module, spec, total, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (batch_id) DO NOTHING",
    )
    .bind(id.clone())
    .bind(batch.project_id.clone())
    .bind(batch.module.clone())
    .bind(batch.spec.to_string())
    .bind(batch.total)
    .bind(batch.created_at)
    .execute(&mut *tx)
    .await
    .ctx(|| format!("store batch {id}"))?;
    if made.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!("batch {id} exists")));
    }
    for (idx, input) in inputs.iter().enumerate() {
        sqlx::query("INSERT INTO batch_items (batch_id, idx, input) VALUES ($1, $2, $3)")
            .bind(id.clone())
            .bind(i64::try_from(idx).unwrap_or(i64::MAX))
            .bind(input.to_string())
            .execute(&mut *tx)
            .await
            .ctx(|| format!("store input {idx} of batch {id}"))?;
    }
    tx.commit().await.ctx(|| format!("commit batch {id}"))
}

pub(crate) async fn get(pool: &AnyPool, batch_id: &str) -> Result<Option<Batch>, StoreError> {
    let row = sqlx::query("SELECT project_id, module, spec, total, created_at FROM batches WHERE batch_id = $1")
        .bind(batch_id.to_owned())
        .fetch_optional(pool)
        .await
        .ctx(|| format!("read batch {batch_id}"))?;
    let corrupt = |e: String| StoreError::Corrupt(format!("batch {batch_id}: {e}"));
    row.map(|r| {
        let spec: String = r.try_get(2).map_err(|e| corrupt(e.to_string()))?;
        Ok(Batch {
            batch_id: batch_id.to_owned(),
            project_id: r.try_get(0).map_err(|e| corrupt(e.to_string()))?,
            module: r.try_get(1).map_err(|e| corrupt(e.to_string()))?,
            spec: serde_json::from_str(&spec).map_err(|e| corrupt(e.to_string()))?,
            total: r.try_get(3).map_err(|e| corrupt(e.to_string()))?,
            created_at: r.try_get(4).map_err(|e| corrupt(e.to_string()))?,
        })
    })
    .transpose()
}

pub(crate) async fn items(pool: &AnyPool, batch_id: &str, from: i64, to: i64) -> Result<Vec<BatchItem>, StoreError> {
    let rows = sqlx::query(
        "SELECT idx, input, output, answered_by FROM batch_items WHERE batch_id = $1 AND idx >= $2 AND idx < $3 \
         ORDER BY idx",
    )
    .bind(batch_id.to_owned())
    .bind(from)
    .bind(to)
    .fetch_all(pool)
    .await
    .ctx(|| format!("read the items of batch {batch_id}"))?;
    let corrupt = |e: String| StoreError::Corrupt(format!("batch {batch_id}: {e}"));
    let json = |text: String| serde_json::from_str::<Value>(&text).map_err(|e| corrupt(e.to_string()));
    rows.into_iter()
        .map(|r| {
            let input: String = r.try_get(1).map_err(|e| corrupt(e.to_string()))?;
            let output: Option<String> = r.try_get(2).map_err(|e| corrupt(e.to_string()))?;
            Ok(BatchItem {
                idx: r.try_get(0).map_err(|e| corrupt(e.to_string()))?,
                input: json(input)?,
                output: output.map(json).transpose()?,
                answered_by: r.try_get(3).map_err(|e| corrupt(e.to_string()))?,
            })
        })
        .collect()
}

pub(crate) async fn answer(
    store: &crate::SqlStore,
    batch_id: &str,
    idx: i64,
    output: &Value,
    by: &str,
    at: i64,
) -> Result<bool, StoreError> {
    let mut tx = store.write().await?;
    let done = sqlx::query(
        "UPDATE batch_items SET output = $1, answered_by = $2, answered_at = $3 \
         WHERE batch_id = $4 AND idx = $5 AND output IS NULL",
    )
    .bind(output.to_string())
    .bind(by.to_owned())
    .bind(at)
    .bind(batch_id.to_owned())
    .bind(idx)
    .execute(&mut *tx)
    .await
    .ctx(|| format!("answer item {idx} of batch {batch_id}"))?;
    tx.commit().await.ctx(|| format!("commit the answer to item {idx} of batch {batch_id}"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn answered(pool: &AnyPool, batch_id: &str) -> Result<i64, StoreError> {
    let row = sqlx::query("SELECT COUNT(*) FROM batch_items WHERE batch_id = $1 AND output IS NOT NULL")
        .bind(batch_id.to_owned())
        .fetch_one(pool)
        .await
        .ctx(|| format!("count the answers of batch {batch_id}"))?;
    row.try_get(0).map_err(|e| StoreError::Corrupt(e.to_string()))
}
