//! Session kinds, recorded sessions with their frames, and the links that
//! let one session's frames be seen from another.

use noesis_frames::{CausalFrame, SessionArtifacts, SessionLink, Timestamp};
use sqlx::{AnyConnection, Row};

use crate::error::{Context, StoreError};

/// How a session came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// `noesis session start` (a scan of the project): the only kind that is
    /// a project's previous session and the parent of later runs.
    Working,
    /// The files of a `noesis solve` episode.
    Episode,
    /// An imported transcript (`noesis session import`): the files the
    /// conversation touched, and its frame tree.
    Transcript,
}

impl SessionKind {
    /// The kind stored under `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<SessionKind> {
        [SessionKind::Working, SessionKind::Episode, SessionKind::Transcript].into_iter().find(|k| k.as_str() == name)
    }

    /// The name stored in `sessions.kind`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Working => "session",
            SessionKind::Episode => "episode",
            SessionKind::Transcript => "transcript",
        }
    }
}

/// A session to record with every frame it made, in one transaction.
#[derive(Debug, Clone, Copy)]
pub struct NewSession<'a> {
    /// What kind.
    pub kind: SessionKind,
    /// Its artifacts; `root_frame_id` names `frames[0]`.
    pub artifacts: &'a SessionArtifacts,
    /// The root first, then the rest of its tree (parents before children).
    pub frames: &'a [CausalFrame],
    /// blake3 of the source the session was made from (a transcript's
    /// bytes), so the same source is recognised later.
    pub source_hash: Option<&'a str>,
}

pub(crate) async fn link(tx: &mut AnyConnection, link: &SessionLink) -> Result<bool, StoreError> {
    for id in [&link.a, &link.b] {
        let found: Option<String> = sqlx::query_scalar("SELECT session_id FROM sessions WHERE session_id = $1")
            .bind(id.clone())
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("look up session {id}"))?;
        if found.is_none() {
            return Err(StoreError::Invalid(format!("no session {id}")));
        }
    }
    let exists: Option<String> =
        sqlx::query_scalar("SELECT session_a FROM session_links WHERE session_a = $1 AND session_b = $2")
            .bind(link.a.clone())
            .bind(link.b.clone())
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| "look up the link".into())?;
    if exists.is_some() {
        sqlx::query("UPDATE session_links SET reason = $3 WHERE session_a = $1 AND session_b = $2")
            .bind(link.a.clone())
            .bind(link.b.clone())
            .bind(link.reason.clone())
            .execute(&mut *tx)
            .await
            .ctx(|| "update the link".into())?;
        return Ok(false);
    }
    sqlx::query("INSERT INTO session_links (session_a, session_b, reason, created_at) VALUES ($1, $2, $3, $4)")
        .bind(link.a.clone())
        .bind(link.b.clone())
        .bind(link.reason.clone())
        .bind(link.created_at.millis())
        .execute(&mut *tx)
        .await
        .ctx(|| format!("link {} and {}", link.a, link.b))?;
    Ok(true)
}

pub(crate) async fn unlink(tx: &mut AnyConnection, a: &str, b: &str) -> Result<bool, StoreError> {
    let (a, b) = if a <= b { (a, b) } else { (b, a) };
    let done = sqlx::query("DELETE FROM session_links WHERE session_a = $1 AND session_b = $2")
        .bind(a.to_owned())
        .bind(b.to_owned())
        .execute(&mut *tx)
        .await
        .ctx(|| format!("unlink {a} and {b}"))?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn links(conn: &mut AnyConnection, project_id: &str) -> Result<Vec<SessionLink>, StoreError> {
    let rows = sqlx::query(
        "SELECT l.session_a, l.session_b, l.reason, l.created_at FROM session_links l \
         WHERE l.session_a IN (SELECT session_id FROM sessions WHERE project_id = $1) \
            OR l.session_b IN (SELECT session_id FROM sessions WHERE project_id = $1) \
         ORDER BY l.created_at, l.session_a, l.session_b",
    )
    .bind(project_id.to_owned())
    .fetch_all(&mut *conn)
    .await
    .ctx(|| "read session links".into())?;
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(format!("session_links row: {e}"));
    rows.iter()
        .map(|r| {
            Ok(SessionLink {
                a: r.try_get(0).map_err(corrupt)?,
                b: r.try_get(1).map_err(corrupt)?,
                reason: r.try_get(2).map_err(corrupt)?,
                created_at: Timestamp::from_millis(r.try_get(3).map_err(corrupt)?),
            })
        })
        .collect()
}

pub(crate) async fn by_source(
    conn: &mut AnyConnection,
    project_id: &str,
    hash: &str,
) -> Result<Option<String>, StoreError> {
    sqlx::query_scalar(
        "SELECT session_id FROM sessions WHERE project_id = $1 AND source_hash = $2 \
         ORDER BY created_at, session_id LIMIT 1",
    )
    .bind(project_id.to_owned())
    .bind(hash.to_owned())
    .fetch_optional(&mut *conn)
    .await
    .ctx(|| "look up a session by its source".into())
}
