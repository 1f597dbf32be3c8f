//! Episodic and procedural memory: archived episodes and lessons as
//! searchable text. SQLite searches with FTS5 (`memory_fts`, written in the
//! same transaction as the entries), PostgreSQL with a `tsvector` GIN index;
//! both rank by relevance and match any of the query's words, so a question
//! in a person's words finds an episode that shares some of them.

use sqlx::{AnyPool, Row};

use crate::Backend;
use crate::error::{Context, StoreError};

/// An entry to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    /// The project.
    pub project_id: String,
    /// The episode it came from.
    pub episode_id: String,
    /// `episode` or `lesson`.
    pub kind: String,
    /// What is searched.
    pub text: String,
    /// The entry's JSON (the episode's record, the lesson's context).
    pub record: serde_json::Value,
    /// When (ms since the epoch).
    pub at: i64,
}

/// An entry found.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// Its id.
    pub entry_id: i64,
    /// What was kept.
    pub entry: NewMemory,
}

/// What to look for.
#[derive(Debug, Clone, Default)]
pub struct MemoryQuery<'a> {
    /// Words, as a person types them.
    pub text: &'a str,
    /// Only this project's entries.
    pub project_id: Option<&'a str>,
    /// Only entries of this kind.
    pub kind: Option<&'a str>,
    /// At most this many, best first.
    pub limit: u32,
}

/// The query's words: letters and digits only, lower-cased, at most 16, so
/// nothing a person types can break the search syntax.
pub(crate) fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let w = w.to_lowercase();
        if !out.contains(&w) {
            out.push(w);
        }
        if out.len() == 16 {
            break;
        }
    }
    out
}

/// Replaces the entries of `episode_id` with `entries` (so archiving an
/// episode twice keeps one copy).
pub(crate) async fn replace(
    tx: &mut sqlx::AnyConnection,
    backend: Backend,
    episode_id: &str,
    entries: &[NewMemory],
) -> Result<(), StoreError> {
    if backend == Backend::Sqlite {
        sqlx::query(
            "DELETE FROM memory_fts WHERE entry_id IN (SELECT entry_id FROM memory_entries WHERE episode_id = $1)",
        )
        .bind(episode_id.to_owned())
        .execute(&mut *tx)
        .await
        .ctx(|| format!("forget the search text of episode {episode_id}"))?;
    }
    sqlx::query("DELETE FROM memory_entries WHERE episode_id = $1")
        .bind(episode_id.to_owned())
        .execute(&mut *tx)
        .await
        .ctx(|| format!("forget episode {episode_id}"))?;
    for e in entries {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO memory_entries (project_id, episode_id, kind, text, record, at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING entry_id",
        )
        .bind(e.project_id.clone())
        .bind(e.episode_id.clone())
        .bind(e.kind.clone())
        .bind(e.text.clone())
        .bind(e.record.to_string())
        .bind(e.at)
        .fetch_one(&mut *tx)
        .await
        .ctx(|| format!("keep a {} of episode {}", e.kind, e.episode_id))?;
        if backend == Backend::Sqlite {
            sqlx::query("INSERT INTO memory_fts (text, entry_id) VALUES ($1, $2)")
                .bind(e.text.clone())
                .bind(id)
                .execute(&mut *tx)
                .await
                .ctx(|| format!("index a {} of episode {}", e.kind, e.episode_id))?;
        }
    }
    Ok(())
}

/// The entries matching `q`, most relevant first.
pub(crate) async fn search(pool: &AnyPool, backend: Backend, q: &MemoryQuery<'_>) -> Result<Vec<Memory>, StoreError> {
    let words = words(q.text);
    if words.is_empty() {
        return Ok(Vec::new());
    }
    let (mut sql, expr) = match backend {
        Backend::Sqlite => (
            "SELECT m.entry_id, m.project_id, m.episode_id, m.kind, m.text, m.record, m.at \
             FROM memory_fts f JOIN memory_entries m ON m.entry_id = f.entry_id WHERE memory_fts MATCH $1"
                .to_owned(),
            words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" OR "),
        ),
        Backend::Postgres => (
            "SELECT m.entry_id, m.project_id, m.episode_id, m.kind, m.text, m.record, m.at \
             FROM memory_entries m WHERE to_tsvector('english', m.text) @@ to_tsquery('english', $1)"
                .to_owned(),
            words.join(" | "),
        ),
    };
    let mut n = 1;
    if q.project_id.is_some() {
        n += 1;
        sql.push_str(&format!(" AND m.project_id = ${n}"));
    }
    if q.kind.is_some() {
        n += 1;
        sql.push_str(&format!(" AND m.kind = ${n}"));
    }
    sql.push_str(match backend {
        Backend::Sqlite => " ORDER BY bm25(memory_fts), m.at DESC, m.entry_id DESC",
        Backend::Postgres => {
            " ORDER BY ts_rank(to_tsvector('english', m.text), to_tsquery('english', $1)) DESC, m.at DESC, m.entry_id DESC"
        }
    });
    sql.push_str(&format!(" LIMIT ${}", n + 1));
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(expr);
    if let Some(p) = q.project_id {
        query = query.bind(p.to_owned());
    }
    if let Some(k) = q.kind {
        query = query.bind(k.to_owned());
    }
    let rows = query.bind(i64::from(q.limit.max(1))).fetch_all(pool).await.ctx(|| "search memory".into())?;
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    rows.iter()
        .map(|r| {
            let text: String = r.try_get(5).map_err(corrupt)?;
            Ok(Memory {
                entry_id: r.try_get(0).map_err(corrupt)?,
                entry: NewMemory {
                    project_id: r.try_get(1).map_err(corrupt)?,
                    episode_id: r.try_get(2).map_err(corrupt)?,
                    kind: r.try_get(3).map_err(corrupt)?,
                    text: r.try_get(4).map_err(corrupt)?,
                    record: serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("memory entry: its record is not JSON: {e}")))?,
                    at: r.try_get(6).map_err(corrupt)?,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_letters_and_digits_reach_the_search() {
        assert_eq!(
            super::words("Fix \"add\" -- OR test_add.py: NEAR(x)"),
            ["fix", "add", "or", "test", "py", "near", "x"]
        );
        assert!(super::words("\"*:()-").is_empty());
    }
}
