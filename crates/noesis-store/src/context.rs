//! Emitted context, stored: rows of `context_entries` (migration 2).
//!
//! The store keeps and serves what the runtime hands it; which context a
//! module may see is decided in `noesis-modules`. The serving rule is the
//! runtime's (`ContextEntry::serves`): of the type, unexpired
//! (`expires_at > now`), recent enough, and each scope the row carries equal
//! to the asker's; the newest wins.

use noesis_frames::Timestamp;
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::error::{Context, StoreError};

/// One stored piece of emitted context.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextRow {
    /// Whose context it is (the CLI uses the project id).
    pub namespace: String,
    /// The expanded key pattern; with `kind`, the row's identity.
    pub key: String,
    /// The context type.
    pub kind: String,
    /// The context.
    pub value: serde_json::Value,
    /// The module that emitted it.
    pub module: String,
    /// Set when the key pattern names `${user_id}`: served only to this user.
    pub user_id: Option<String>,
    /// Set when the key pattern names `${session_id}`: served only to this
    /// session.
    pub session_id: Option<String>,
    /// When it was stored.
    pub created_at: Timestamp,
    /// When it expires; `None` = persistent.
    pub expires_at: Option<Timestamp>,
}

/// What a run asks for.
#[derive(Debug, Clone, Copy)]
pub struct ContextQuery<'a> {
    /// Whose context.
    pub namespace: &'a str,
    /// The context type.
    pub kind: &'a str,
    /// The asking run's user.
    pub user_id: &'a str,
    /// The asking run's session.
    pub session_id: &'a str,
    /// The time now.
    pub now: Timestamp,
    /// Rows stored before this are too old for the asker.
    pub not_before: Option<Timestamp>,
}

const COLUMNS: &str = "namespace, ctx_key, ctx_type, value, module, user_id, session_id, created_at, expires_at";

/// Stores a row (replacing the one with the same namespace, key and type),
/// dropping the namespace's expired rows in the same transaction.
pub(crate) async fn put(tx: &mut sqlx::AnyConnection, row: &ContextRow) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM context_entries WHERE namespace = $1 AND expires_at IS NOT NULL AND expires_at <= $2")
        .bind(row.namespace.clone())
        .bind(row.created_at.millis())
        .execute(&mut *tx)
        .await
        .ctx(|| "drop expired context".into())?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO context_entries ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (namespace, ctx_key, ctx_type) DO UPDATE SET value = excluded.value, module = excluded.module, \
         user_id = excluded.user_id, session_id = excluded.session_id, created_at = excluded.created_at, \
         expires_at = excluded.expires_at"
    )))
    .bind(row.namespace.clone())
    .bind(row.key.clone())
    .bind(row.kind.clone())
    .bind(row.value.to_string())
    .bind(row.module.clone())
    .bind(row.user_id.clone())
    .bind(row.session_id.clone())
    .bind(row.created_at.millis())
    .bind(row.expires_at.map(Timestamp::millis))
    .execute(&mut *tx)
    .await
    .ctx(|| format!("store context `{}` under `{}`", row.kind, row.key))?;
    Ok(())
}

/// The newest row that serves the query.
pub(crate) async fn latest(pool: &AnyPool, q: &ContextQuery<'_>) -> Result<Option<ContextRow>, StoreError> {
    // `not_before` is optional; a constant stands in rather than a NULL
    // parameter, whose type the Any driver cannot always tell PostgreSQL.
    let sql = format!(
        "SELECT {COLUMNS} FROM context_entries WHERE namespace = $1 AND ctx_type = $2 \
         AND (expires_at IS NULL OR expires_at > $3) AND created_at >= $4 \
         AND (user_id IS NULL OR user_id = $5) AND (session_id IS NULL OR session_id = $6) \
         ORDER BY created_at DESC, ctx_key DESC LIMIT 1"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(q.namespace.to_owned())
        .bind(q.kind.to_owned())
        .bind(q.now.millis())
        .bind(q.not_before.map_or(i64::MIN, Timestamp::millis))
        .bind(q.user_id.to_owned())
        .bind(q.session_id.to_owned())
        .fetch_optional(pool)
        .await
        .ctx(|| format!("read context `{}`", q.kind))?;
    let Some(r) = row else { return Ok(None) };
    let get = |e: sqlx::Error| StoreError::Corrupt(format!("context_entries: {e}"));
    let text: String = r.try_get(3).map_err(get)?;
    let key: String = r.try_get(1).map_err(get)?;
    let value = serde_json::from_str(&text)
        .map_err(|e| StoreError::Corrupt(format!("context_entries `{key}`: value is not JSON: {e}")))?;
    Ok(Some(ContextRow {
        namespace: r.try_get(0).map_err(get)?,
        key,
        kind: r.try_get(2).map_err(get)?,
        value,
        module: r.try_get(4).map_err(get)?,
        user_id: r.try_get(5).map_err(get)?,
        session_id: r.try_get(6).map_err(get)?,
        created_at: Timestamp::from_millis(r.try_get(7).map_err(get)?),
        expires_at: r.try_get::<Option<i64>, _>(8).map_err(get)?.map(Timestamp::from_millis),
    }))
}
