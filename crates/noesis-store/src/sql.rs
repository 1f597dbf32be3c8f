//! [`SqlStore`]: one implementation of [`Store`] over sqlx's `Any` driver,
//! for SQLite and PostgreSQL. All SQL is portable (`$n` placeholders, TEXT,
//! BIGINT, DOUBLE PRECISION); the few differences (transaction start,
//! auto-increment keys, pragmas) are switched on [`Backend`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use noesis_frames::{
    CausalFrame, Changeset, Evidence, FileEntry, FileRef, FileRole, FrameId, Invalidation, InvalidationCondition,
    SessionArtifacts, Status, StatusChange, Timestamp, Timestamps,
};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, AssertSqlSafe, Connection, Executor, Row};

use crate::error::{Context, StoreError};
use crate::filter::{Arg, FrameFilter, ids_sql};
use crate::{Backend, Store, migrate};

/// A store in a SQLite file or a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    url: String,
}

/// How long a SQLite writer waits for another to finish.
const BUSY_TIMEOUT_MS: u64 = 30_000;

/// Rows per multi-row INSERT (keeps well under both back ends' bind limits).
const CHUNK: usize = 400;

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((auth, host)) = rest.split_once('@') else { return url.to_owned() };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// Percent-encodes what sqlx's SQLite URL parser would misread in a path.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_control() || b" \"#<>?`{}%".contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// The back end and the URL to hand sqlx. A bare path is a SQLite file
/// (created, with its folder, when missing).
pub(crate) fn parse_url(url: &str) -> Result<(Backend, String), StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok((Backend::Postgres, url.to_owned()));
    }
    let path = if let Some(rest) = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
        if rest.contains('?') {
            // The caller chose the parameters.
            return Ok((Backend::Sqlite, url.to_owned()));
        }
        rest.to_owned()
    } else if url.contains("://") || url.is_empty() {
        return Err(StoreError::BadUrl(redact(url)));
    } else {
        url.to_owned()
    };
    if path.is_empty() || path == ":memory:" {
        return Err(StoreError::BadUrl(url.to_owned()));
    }
    let p = std::path::Path::new(&path);
    let abs = if p.is_absolute() {
        p.to_owned()
    } else {
        std::env::current_dir().map_err(|_| StoreError::BadUrl(url.to_owned()))?.join(p)
    };
    if let Some(dir) = abs.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Invalid(format!("store {}: cannot create its folder {}: {e}", abs.display(), dir.display()))
        })?;
    }
    let text = abs.to_str().ok_or_else(|| StoreError::BadUrl(url.to_owned()))?;
    Ok((Backend::Sqlite, format!("sqlite://{}?mode=rwc", encode_path(text))))
}

fn bind_args<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    args: &[Arg],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    for a in args {
        match a {
            Arg::Text(t) => q = q.bind(t.clone()),
        }
    }
    q
}

fn u32_of(v: i64, what: &str) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what}: {v} is out of range")))
}

fn status_of(text: &str, frame: &str) -> Result<Status, StoreError> {
    Status::from_str(text).map_err(|_| StoreError::Corrupt(format!("frame {frame}: status `{text}`")))
}

fn id_of(text: String) -> Result<FrameId, StoreError> {
    FrameId::parse(&text).map_err(|_| StoreError::Corrupt(format!("frame id `{text}`")))
}

const FRAME_COLUMNS: &str = "frame_id, project_id, session_id, parent_id, depth, query, context_slice, evidence, \
     conclusion, confidence, expires_at, note, status, branched_from, created_at, updated_at";

fn frame_of_row(r: &AnyRow) -> Result<CausalFrame, StoreError> {
    let get = |e: sqlx::Error| StoreError::Corrupt(format!("frames row: {e}"));
    let id: String = r.try_get(0).map_err(get)?;
    let evidence_text: String = r.try_get(7).map_err(get)?;
    let evidence: Vec<Evidence> = serde_json::from_str(&evidence_text)
        .map_err(|e| StoreError::Corrupt(format!("frame {id}: evidence is not valid JSON: {e}")))?;
    let status: String = r.try_get(12).map_err(get)?;
    Ok(CausalFrame {
        status: status_of(&status, &id)?,
        project_id: r.try_get(1).map_err(get)?,
        session_id: r.try_get(2).map_err(get)?,
        parent_id: r.try_get::<Option<String>, _>(3).map_err(get)?.map(id_of).transpose()?,
        depth: u32_of(r.try_get(4).map_err(get)?, "depth")?,
        children: Vec::new(),
        query: r.try_get(5).map_err(get)?,
        context_slice: r.try_get(6).map_err(get)?,
        evidence,
        conclusion: r.try_get(8).map_err(get)?,
        confidence: r.try_get(9).map_err(get)?,
        invalidation_condition: InvalidationCondition {
            files: Vec::new(),
            frames: Vec::new(),
            expires_at: r.try_get::<Option<i64>, _>(10).map_err(get)?.map(Timestamp::from_millis),
            note: r.try_get(11).map_err(get)?,
        },
        branched_from: r.try_get::<Option<String>, _>(13).map_err(get)?.map(id_of).transpose()?,
        timestamps: Timestamps {
            created_at: Timestamp::from_millis(r.try_get(14).map_err(get)?),
            updated_at: Timestamp::from_millis(r.try_get(15).map_err(get)?),
            history: Vec::new(),
        },
        frame_id: id_of(id)?,
    })
}

fn check_frame(f: &CausalFrame) -> Result<(), StoreError> {
    let bad = |m: String| Err(StoreError::Invalid(format!("frame {}: {m}", f.frame_id)));
    if !(0.0..=1.0).contains(&f.confidence) {
        return bad(format!("confidence {} is not in 0..=1", f.confidence));
    }
    if f.project_id.is_empty() {
        return bad("no project".into());
    }
    match f.timestamps.history.last() {
        None => return bad("no status history".into()),
        Some(last) if last.status != f.status => {
            return bad(format!("status {} but the history ends with {}", f.status, last.status));
        }
        _ => {}
    }
    if f.parent_id.is_none() && f.depth != 0 {
        return bad(format!("a root with depth {}", f.depth));
    }
    Ok(())
}

impl SqlStore {
    /// Opens (creating when needed) a store and brings its schema up to date.
    /// `url` is `sqlite://PATH`, a plain file path, or
    /// `postgres://USER@HOST[:PORT]/DB` (add
    /// `?options[search_path]=SCHEMA` to use a schema other than `public`;
    /// it must exist).
    ///
    /// # Errors
    /// [`StoreError::BadUrl`], [`StoreError::Open`] when the database cannot
    /// be reached, [`StoreError::NewerSchema`] when a newer noesis wrote it.
    pub async fn open(url: &str) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        let (backend, conn_url) = parse_url(url)?;
        let shown = redact(url);
        let open_err = |source: sqlx::Error| StoreError::Open { url: shown.clone(), source: Box::new(source) };
        let options = AnyConnectOptions::from_str(&conn_url).map_err(open_err)?;
        // One direct connection first: a pool would retry until its timeout
        // and report only that; this names the real cause at once.
        sqlx::AnyConnection::connect_with(&options).await.map_err(open_err)?.close().await.map_err(open_err)?;
        let pool = match backend {
            Backend::Sqlite => AnyPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(120))
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute(AssertSqlSafe(format!("PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}"))).await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                        Ok(())
                    })
                }),
            Backend::Postgres => AnyPoolOptions::new().max_connections(8).acquire_timeout(Duration::from_secs(30)),
        }
        .connect_with(options)
        .await
        .map_err(open_err)?;
        let store = SqlStore { pool, backend, url: shown };
        if backend == Backend::Sqlite {
            store.wal().await?;
        }
        let mut tx = store.write().await?;
        migrate::run(&mut tx, backend, &store.url).await?;
        tx.commit().await.ctx(|| "commit migrations".into())?;
        Ok(store)
    }

    /// WAL lets readers and one writer work at once; switching needs a moment
    /// alone with the file, so it is retried while others hold it.
    async fn wal(&self) -> Result<(), StoreError> {
        let deadline = std::time::Instant::now() + Duration::from_millis(BUSY_TIMEOUT_MS);
        loop {
            match sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL").fetch_one(&self.pool).await {
                Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
                Ok(mode) => {
                    return Err(StoreError::Invalid(format!("{}: cannot use WAL (journal mode {mode})", self.url)));
                }
                Err(e) if crate::error::is_busy(&e) && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(StoreError::Sql { context: "set WAL mode".into(), source: Box::new(e) }),
            }
        }
    }

    /// A write transaction: SQLite takes the write lock at once (`BEGIN
    /// IMMEDIATE`, waiting up to the busy timeout), so a transaction that
    /// reads then writes never fails half-way on another writer.
    async fn write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .ctx(|| "begin a write".into())
    }

    /// Closes the pool (pending writes finish first).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn load(&self, ids_sql: &str, args: &[Arg]) -> Result<Vec<CausalFrame>, StoreError> {
        let mut conn = self.pool.acquire().await.ctx(|| "connect".into())?;
        let q = |sql: String| bind_args(sqlx::query(AssertSqlSafe(sql)), args);
        let rows = q(format!(
            "SELECT {FRAME_COLUMNS} FROM frames WHERE frame_id IN ({ids_sql}) ORDER BY created_at, frame_id"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read frames".into())?;
        let mut frames = rows.iter().map(frame_of_row).collect::<Result<Vec<_>, _>>()?;
        let index: HashMap<String, usize> =
            frames.iter().enumerate().map(|(i, f)| (f.frame_id.as_str().to_owned(), i)).collect();
        let slot =
            |id: &str| index.get(id).copied().ok_or_else(|| StoreError::Corrupt(format!("row for unknown frame {id}")));
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        for r in q(format!(
            "SELECT frame_id, path, hash FROM frame_files WHERE frame_id IN ({ids_sql}) ORDER BY frame_id, path"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read frame files".into())?
        {
            let id: String = r.try_get(0).map_err(corrupt)?;
            let f = FileRef { path: r.try_get(1).map_err(corrupt)?, hash: r.try_get(2).map_err(corrupt)? };
            frames[slot(&id)?].invalidation_condition.files.push(f);
        }
        for r in
            q(format!("SELECT dst, src FROM frame_edges WHERE kind = 'cites' AND dst IN ({ids_sql}) ORDER BY dst, src"))
                .fetch_all(&mut *conn)
                .await
                .ctx(|| "read frame dependencies".into())?
        {
            let id: String = r.try_get(0).map_err(corrupt)?;
            let dep = id_of(r.try_get(1).map_err(corrupt)?)?;
            frames[slot(&id)?].invalidation_condition.frames.push(dep);
        }
        for r in q(format!(
            "SELECT parent_id, frame_id FROM frames WHERE parent_id IN ({ids_sql}) ORDER BY created_at, frame_id"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read frame children".into())?
        {
            let id: String = r.try_get(0).map_err(corrupt)?;
            let child = id_of(r.try_get(1).map_err(corrupt)?)?;
            frames[slot(&id)?].children.push(child);
        }
        for r in q(format!(
            "SELECT frame_id, status, at, reason, session_id FROM frame_status WHERE frame_id IN ({ids_sql}) ORDER BY seq"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read status history".into())?
        {
            let id: String = r.try_get(0).map_err(corrupt)?;
            let status: String = r.try_get(1).map_err(corrupt)?;
            let change = StatusChange {
                status: status_of(&status, &id)?,
                at: Timestamp::from_millis(r.try_get(2).map_err(corrupt)?),
                reason: r.try_get(3).map_err(corrupt)?,
                session_id: r.try_get(4).map_err(corrupt)?,
            };
            frames[slot(&id)?].timestamps.history.push(change);
        }
        Ok(frames)
    }

    /// Parent/dependency facts for the frames of a batch: from the batch
    /// itself or the database.
    async fn lookup(
        conn: &mut AnyConnection,
        id: &FrameId,
        batch: &HashMap<FrameId, (String, u32, Status)>,
    ) -> Result<(String, u32, Status), StoreError> {
        if let Some(hit) = batch.get(id) {
            return Ok(hit.clone());
        }
        let row = sqlx::query("SELECT project_id, depth, status FROM frames WHERE frame_id = $1")
            .bind(id.as_str())
            .fetch_optional(&mut *conn)
            .await
            .ctx(|| format!("look up frame {id}"))?
            .ok_or_else(|| StoreError::Frames(noesis_frames::FramesError::NotFound(id.clone())))?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        let status: String = row.try_get(2).map_err(corrupt)?;
        Ok((
            row.try_get(0).map_err(corrupt)?,
            u32_of(row.try_get(1).map_err(corrupt)?, "depth")?,
            status_of(&status, id.as_str())?,
        ))
    }

    async fn insert_tx(conn: &mut AnyConnection, frames: &[CausalFrame]) -> Result<(), StoreError> {
        let mut batch: HashMap<FrameId, (String, u32, Status)> = HashMap::new();
        let mut frame_rows = Vec::with_capacity(frames.len());
        let mut status_rows = Vec::new();
        let mut edge_rows = Vec::new();
        let mut file_rows = Vec::new();
        for f in frames {
            check_frame(f)?;
            if batch.contains_key(&f.frame_id) {
                return Err(StoreError::Invalid(format!("frame {} appears twice", f.frame_id)));
            }
            if let Some(pid) = &f.parent_id {
                let (project, depth, status) = Self::lookup(conn, pid, &batch).await?;
                if project != f.project_id {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: parent {pid} belongs to project {project}, not {}",
                        f.frame_id, f.project_id
                    )));
                }
                if f.depth != depth + 1 {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: depth {} under parent {pid} of depth {depth}",
                        f.frame_id, f.depth
                    )));
                }
                if status == Status::Invalidated {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: parent {pid} is invalidated; nothing can be added under it",
                        f.frame_id
                    )));
                }
                edge_rows.push((pid.as_str().to_owned(), f.frame_id.as_str().to_owned(), "parent"));
            }
            if let Some(b) = &f.branched_from {
                Self::lookup(conn, b, &batch).await?;
            }
            let mut cond = f.invalidation_condition.clone();
            cond.normalise();
            for dep in &cond.frames {
                if dep == &f.frame_id {
                    return Err(StoreError::Invalid(format!("frame {} names itself as a dependency", f.frame_id)));
                }
                Self::lookup(conn, dep, &batch).await?;
                edge_rows.push((dep.as_str().to_owned(), f.frame_id.as_str().to_owned(), "cites"));
            }
            for file in &cond.files {
                file_rows.push((f.frame_id.as_str().to_owned(), file.path.clone(), file.hash.clone()));
            }
            for h in &f.timestamps.history {
                status_rows.push((f.frame_id.as_str().to_owned(), h.clone()));
            }
            let evidence = serde_json::to_string(&f.evidence)
                .map_err(|e| StoreError::Invalid(format!("frame {}: evidence: {e}", f.frame_id)))?;
            frame_rows.push((f, evidence, cond.files.len(), cond.frames.len()));
            batch.insert(f.frame_id.clone(), (f.project_id.clone(), f.depth, f.status));
        }
        for chunk in frame_rows.chunks(CHUNK / 4) {
            let mut sql = format!(
                "INSERT INTO frames ({FRAME_COLUMNS}, n_files, n_deps) VALUES {}",
                placeholders(chunk.len(), 18)
            );
            sql.shrink_to_fit();
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (f, evidence, n_files, n_deps) in chunk {
                q = q
                    .bind(f.frame_id.as_str().to_owned())
                    .bind(f.project_id.clone())
                    .bind(f.session_id.clone())
                    .bind(f.parent_id.as_ref().map(|p| p.as_str().to_owned()))
                    .bind(i64::from(f.depth))
                    .bind(f.query.clone())
                    .bind(f.context_slice.clone())
                    .bind(evidence.clone())
                    .bind(f.conclusion.clone())
                    .bind(f.confidence)
                    .bind(f.invalidation_condition.expires_at.map(Timestamp::millis))
                    .bind(f.invalidation_condition.note.clone())
                    .bind(f.status.as_str())
                    .bind(f.branched_from.as_ref().map(|p| p.as_str().to_owned()))
                    .bind(f.timestamps.created_at.millis())
                    .bind(f.timestamps.updated_at.millis())
                    .bind(i64::try_from(*n_files).unwrap_or(i64::MAX))
                    .bind(i64::try_from(*n_deps).unwrap_or(i64::MAX));
            }
            q.execute(&mut *conn)
                .await
                .ctx(|| format!("insert frames ({} from {})", chunk.len(), chunk[0].0.frame_id))?;
        }
        for chunk in status_rows.chunks(CHUNK) {
            let sql = format!(
                "INSERT INTO frame_status (frame_id, status, at, reason, session_id) VALUES {}",
                placeholders(chunk.len(), 5)
            );
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (id, h) in chunk {
                q = q
                    .bind(id.clone())
                    .bind(h.status.as_str())
                    .bind(h.at.millis())
                    .bind(h.reason.clone())
                    .bind(h.session_id.clone());
            }
            q.execute(&mut *conn).await.ctx(|| "insert status history".into())?;
        }
        for chunk in edge_rows.chunks(CHUNK) {
            let sql = format!("INSERT INTO frame_edges (src, dst, kind) VALUES {}", placeholders(chunk.len(), 3));
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (src, dst, kind) in chunk {
                q = q.bind(src.clone()).bind(dst.clone()).bind(*kind);
            }
            q.execute(&mut *conn).await.ctx(|| "insert frame edges".into())?;
        }
        for chunk in file_rows.chunks(CHUNK) {
            let sql = format!("INSERT INTO frame_files (frame_id, path, hash) VALUES {}", placeholders(chunk.len(), 3));
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (id, path, hash) in chunk {
                q = q.bind(id.clone()).bind(path.clone()).bind(hash.clone());
            }
            q.execute(&mut *conn).await.ctx(|| "insert frame files".into())?;
        }
        Ok(())
    }

    async fn status_tx(conn: &mut AnyConnection, u: &noesis_frames::StatusUpdate) -> Result<(), StoreError> {
        if !u.from.can_become(u.change.status) {
            return Err(noesis_frames::FramesError::Transition {
                frame_id: u.frame_id.clone(),
                from: u.from,
                to: u.change.status,
            }
            .into());
        }
        let done = sqlx::query("UPDATE frames SET status = $1, updated_at = $2 WHERE frame_id = $3 AND status = $4")
            .bind(u.change.status.as_str())
            .bind(u.change.at.millis())
            .bind(u.frame_id.as_str())
            .bind(u.from.as_str())
            .execute(&mut *conn)
            .await
            .ctx(|| format!("set the status of {}", u.frame_id))?;
        if done.rows_affected() != 1 {
            // Either gone or changed by someone else since it was read.
            let (_, _, now) = Self::lookup(conn, &u.frame_id, &HashMap::new()).await?;
            return Err(noesis_frames::FramesError::Transition {
                frame_id: u.frame_id.clone(),
                from: now,
                to: u.change.status,
            }
            .into());
        }
        sqlx::query("INSERT INTO frame_status (frame_id, status, at, reason, session_id) VALUES ($1, $2, $3, $4, $5)")
            .bind(u.frame_id.as_str())
            .bind(u.change.status.as_str())
            .bind(u.change.at.millis())
            .bind(u.change.reason.clone())
            .bind(u.change.session_id.clone())
            .execute(&mut *conn)
            .await
            .ctx(|| format!("record the status of {}", u.frame_id))?;
        Ok(())
    }

    /// The cascade, in SQL: seeds first, then a recursive walk over
    /// `frame_edges` (children and citers) through live frames; one history
    /// row per frame (the smallest reason when several paths reach it), all
    /// tagged with one batch id.
    async fn invalidate_tx(
        conn: &mut AnyConnection,
        seeds: &[Invalidation],
        session_id: Option<&str>,
        at: Timestamp,
    ) -> Result<Vec<Invalidation>, StoreError> {
        let batch = uuid_like();
        let mut seen = HashSet::new();
        for s in seeds.iter().filter(|s| seen.insert(s.frame_id.clone())) {
            sqlx::query(
                "INSERT INTO frame_status (frame_id, status, at, reason, session_id, batch) \
                 SELECT frame_id, 'invalidated', $2, $3, $4, $5 FROM frames WHERE frame_id = $1 AND status <> 'invalidated'",
            )
            .bind(s.frame_id.as_str())
            .bind(at.millis())
            .bind(s.reason.clone())
            .bind(session_id.map(str::to_owned))
            .bind(batch.clone())
            .execute(&mut *conn)
            .await
            .ctx(|| format!("invalidate {}", s.frame_id))?;
        }
        sqlx::query(
            "WITH RECURSIVE doomed(id, reason) AS ( \
                 SELECT frame_id, reason FROM frame_status WHERE batch = $1 \
               UNION \
                 SELECT e.dst, CASE WHEN e.kind = 'parent' THEN 'parent ' || d.id || ' invalidated' \
                                    ELSE 'cites invalidated frame ' || d.id END \
                 FROM doomed d JOIN frame_edges e ON e.src = d.id JOIN frames f ON f.frame_id = e.dst \
                 WHERE f.status <> 'invalidated' \
             ) \
             INSERT INTO frame_status (frame_id, status, at, reason, session_id, batch) \
             SELECT id, 'invalidated', $2, MIN(reason), $3, $1 FROM doomed \
             WHERE id NOT IN (SELECT frame_id FROM frame_status WHERE batch = $1) GROUP BY id",
        )
        .bind(batch.clone())
        .bind(at.millis())
        .bind(session_id.map(str::to_owned))
        .execute(&mut *conn)
        .await
        .ctx(|| "cascade the invalidation".into())?;
        sqlx::query(
            "UPDATE frames SET status = 'invalidated', updated_at = $2 \
             WHERE frame_id IN (SELECT frame_id FROM frame_status WHERE batch = $1)",
        )
        .bind(batch.clone())
        .bind(at.millis())
        .execute(&mut *conn)
        .await
        .ctx(|| "mark frames invalidated".into())?;
        let rows = sqlx::query(
            "SELECT s.frame_id, s.reason FROM frame_status s JOIN frames f ON f.frame_id = s.frame_id \
             WHERE s.batch = $1 ORDER BY f.depth, f.created_at, s.frame_id",
        )
        .bind(batch)
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read the invalidation".into())?;
        let mut all = Vec::with_capacity(rows.len());
        for r in rows {
            let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
            all.push(Invalidation {
                frame_id: id_of(r.try_get(0).map_err(corrupt)?)?,
                reason: r.try_get::<Option<String>, _>(1).map_err(corrupt)?.unwrap_or_default(),
            });
        }
        // Seeds first, in the order given; then the cascade by depth.
        let seed_ids: HashSet<&FrameId> = seen.iter().collect();
        let (mut first, rest): (Vec<_>, Vec<_>) = all.into_iter().partition(|i| seed_ids.contains(&i.frame_id));
        let order: HashMap<&FrameId, usize> = seeds.iter().enumerate().map(|(i, s)| (&s.frame_id, i)).rev().collect();
        first.sort_by_key(|i| order.get(&i.frame_id).copied().unwrap_or(usize::MAX));
        first.extend(rest);
        Ok(first)
    }

    async fn sessions_where(&self, cond: &str, arg: &str, limit: u32) -> Result<Vec<SessionArtifacts>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT session_id, project_id, initial_prompt, scope, root_frame_id, conversation_log, created_at \
             FROM sessions WHERE {cond} = $1 ORDER BY created_at DESC, session_id DESC LIMIT {limit}"
        )))
        .bind(arg.to_owned())
        .fetch_all(&self.pool)
        .await
        .ctx(|| "read sessions".into())?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(format!("sessions row: {e}"));
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let session_id: String = r.try_get(0).map_err(corrupt)?;
            let scope: String = r.try_get(3).map_err(corrupt)?;
            let scope: Vec<String> = serde_json::from_str(&scope)
                .map_err(|e| StoreError::Corrupt(format!("session {session_id}: scope: {e}")))?;
            let mut files = BTreeMap::new();
            for f in sqlx::query("SELECT path, hash, role FROM session_files WHERE session_id = $1")
                .bind(session_id.clone())
                .fetch_all(&self.pool)
                .await
                .ctx(|| format!("read the files of session {session_id}"))?
            {
                let role: String = f.try_get(2).map_err(corrupt)?;
                let role = FileRole::from_name(&role)
                    .ok_or_else(|| StoreError::Corrupt(format!("session {session_id}: file role `{role}`")))?;
                files.insert(f.try_get(0).map_err(corrupt)?, FileEntry { hash: f.try_get(1).map_err(corrupt)?, role });
            }
            out.push(SessionArtifacts {
                project_id: r.try_get(1).map_err(corrupt)?,
                initial_prompt: r.try_get(2).map_err(corrupt)?,
                files,
                scope,
                root_frame_id: r.try_get::<Option<String>, _>(4).map_err(corrupt)?.map(id_of).transpose()?,
                conversation_log: r.try_get(5).map_err(corrupt)?,
                created_at: Timestamp::from_millis(r.try_get(6).map_err(corrupt)?),
                session_id,
            });
        }
        Ok(out)
    }
}

/// `($1, $2), ($3, $4)` for `rows` rows of `cols` columns.
fn placeholders(rows: usize, cols: usize) -> String {
    let mut s = String::with_capacity(rows * cols * 5);
    for r in 0..rows {
        if r > 0 {
            s.push_str(", ");
        }
        s.push('(');
        for c in 0..cols {
            if c > 0 {
                s.push_str(", ");
            }
            s.push('$');
            s.push_str(&(r * cols + c + 1).to_string());
        }
        s.push(')');
    }
    s
}

fn uuid_like() -> String {
    FrameId::generate().as_str().to_owned()
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> Backend {
        self.backend
    }

    fn describe(&self) -> &str {
        &self.url
    }

    async fn ensure_project(&self, project_id: &str, root: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO projects (project_id, root, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (project_id) DO UPDATE SET root = excluded.root",
        )
        .bind(project_id.to_owned())
        .bind(root.to_owned())
        .bind(Timestamp::now().millis())
        .execute(&self.pool)
        .await
        .ctx(|| format!("register project {project_id}"))?;
        Ok(())
    }

    async fn insert_frames(&self, frames: &[CausalFrame]) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        Self::insert_tx(&mut tx, frames).await?;
        tx.commit().await.ctx(|| "commit frames".into())
    }

    async fn apply(&self, changes: &Changeset) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        Self::insert_tx(&mut tx, &changes.frames).await?;
        for u in &changes.statuses {
            Self::status_tx(&mut tx, u).await?;
        }
        tx.commit().await.ctx(|| "commit changes".into())
    }

    async fn frame(&self, id: &FrameId) -> Result<Option<CausalFrame>, StoreError> {
        let mut v = self.load("SELECT $1", &[Arg::Text(id.as_str().to_owned())]).await?;
        Ok(v.pop())
    }

    async fn resolve(&self, project_id: Option<&str>, prefix: &str) -> Result<FrameId, StoreError> {
        if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(noesis_frames::FramesError::BadId(prefix.to_owned()).into());
        }
        let mut sql = String::from("SELECT frame_id FROM frames WHERE frame_id LIKE $1");
        if project_id.is_some() {
            sql += " AND project_id = $2";
        }
        sql += " ORDER BY frame_id LIMIT 2";
        let mut q = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql)).bind(format!("{}%", prefix.to_lowercase()));
        if let Some(p) = project_id {
            q = q.bind(p.to_owned());
        }
        let found = q.fetch_all(&self.pool).await.ctx(|| format!("look up frame {prefix}"))?;
        match found.as_slice() {
            [one] => id_of(one.clone()),
            [] => Err(StoreError::Invalid(match project_id {
                Some(p) => format!("no frame {prefix} in project {p}"),
                None => format!("no frame {prefix}"),
            })),
            _ => Err(StoreError::Invalid(format!("`{prefix}` names more than one frame; give more of the id"))),
        }
    }

    async fn frames(&self, filter: &FrameFilter) -> Result<Vec<CausalFrame>, StoreError> {
        let (sql, args) = ids_sql(filter);
        self.load(&sql, &args).await
    }

    async fn count(&self, filter: &FrameFilter) -> Result<u64, StoreError> {
        let (sql, args) = ids_sql(filter);
        let mut q = sqlx::query_scalar::<_, i64>(AssertSqlSafe(format!("SELECT COUNT(*) FROM ({sql}) AS c")));
        for Arg::Text(t) in args {
            q = q.bind(t);
        }
        let n = q.fetch_one(&self.pool).await.ctx(|| "count frames".into())?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn invalidate(
        &self,
        seeds: &[Invalidation],
        session_id: Option<&str>,
        at: Timestamp,
    ) -> Result<Vec<Invalidation>, StoreError> {
        let mut tx = self.write().await?;
        let hit = Self::invalidate_tx(&mut tx, seeds, session_id, at).await?;
        tx.commit().await.ctx(|| "commit the invalidation".into())?;
        Ok(hit)
    }

    async fn file_conditions(&self, project_id: &str) -> Result<Vec<(FrameId, FileRef)>, StoreError> {
        let rows = sqlx::query(
            "SELECT ff.frame_id, ff.path, ff.hash FROM frame_files ff JOIN frames f ON f.frame_id = ff.frame_id \
             WHERE f.project_id = $1 AND f.status <> 'invalidated' ORDER BY ff.frame_id, ff.path",
        )
        .bind(project_id.to_owned())
        .fetch_all(&self.pool)
        .await
        .ctx(|| "read file conditions".into())?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        rows.iter()
            .map(|r| {
                Ok((
                    id_of(r.try_get(0).map_err(corrupt)?)?,
                    FileRef { path: r.try_get(1).map_err(corrupt)?, hash: r.try_get(2).map_err(corrupt)? },
                ))
            })
            .collect()
    }

    async fn expired(&self, project_id: &str, now: Timestamp) -> Result<Vec<(FrameId, Timestamp)>, StoreError> {
        let rows = sqlx::query(
            "SELECT frame_id, expires_at FROM frames WHERE project_id = $1 AND status <> 'invalidated' \
             AND expires_at IS NOT NULL AND expires_at <= $2 ORDER BY frame_id",
        )
        .bind(project_id.to_owned())
        .bind(now.millis())
        .fetch_all(&self.pool)
        .await
        .ctx(|| "read expired frames".into())?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        rows.iter()
            .map(|r| {
                Ok((id_of(r.try_get(0).map_err(corrupt)?)?, Timestamp::from_millis(r.try_get(1).map_err(corrupt)?)))
            })
            .collect()
    }

    async fn begin_session(
        &self,
        session: &SessionArtifacts,
        root: &CausalFrame,
        seeds: &[Invalidation],
    ) -> Result<Vec<Invalidation>, StoreError> {
        if session.root_frame_id.as_ref() != Some(&root.frame_id) || root.parent_id.is_some() {
            return Err(StoreError::Invalid(format!(
                "session {}: the root frame must be a root and be named by root_frame_id",
                session.session_id
            )));
        }
        let mut tx = self.write().await?;
        Self::insert_tx(&mut tx, std::slice::from_ref(root)).await?;
        let scope = serde_json::to_string(&session.scope).unwrap_or_else(|_| "[]".into());
        sqlx::query(
            "INSERT INTO sessions (session_id, project_id, initial_prompt, scope, root_frame_id, conversation_log, created_at, n_files) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(session.session_id.clone())
        .bind(session.project_id.clone())
        .bind(session.initial_prompt.clone())
        .bind(scope)
        .bind(root.frame_id.as_str().to_owned())
        .bind(session.conversation_log.clone())
        .bind(session.created_at.millis())
        .bind(i64::try_from(session.files.len()).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .ctx(|| format!("insert session {}", session.session_id))?;
        let files: Vec<(&String, &FileEntry)> = session.files.iter().collect();
        for chunk in files.chunks(CHUNK) {
            let sql = format!(
                "INSERT INTO session_files (session_id, path, hash, role) VALUES {}",
                placeholders(chunk.len(), 4)
            );
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (path, e) in chunk {
                q = q.bind(session.session_id.clone()).bind((*path).clone()).bind(e.hash.clone()).bind(e.role.as_str());
            }
            q.execute(&mut *tx).await.ctx(|| format!("insert the files of session {}", session.session_id))?;
        }
        let hit = Self::invalidate_tx(&mut tx, seeds, Some(&session.session_id), session.created_at).await?;
        tx.commit().await.ctx(|| format!("commit session {}", session.session_id))?;
        Ok(hit)
    }

    async fn session(&self, session_id: &str) -> Result<Option<SessionArtifacts>, StoreError> {
        Ok(self.sessions_where("session_id", session_id, 1).await?.pop())
    }

    async fn sessions(&self, project_id: &str, limit: u32) -> Result<Vec<SessionArtifacts>, StoreError> {
        self.sessions_where("project_id", project_id, limit).await
    }

    async fn invalidated_in_session(&self, session_id: &str) -> Result<Vec<Invalidation>, StoreError> {
        let rows = sqlx::query(
            "SELECT frame_id, reason FROM frame_status WHERE session_id = $1 AND status = 'invalidated' ORDER BY seq",
        )
        .bind(session_id.to_owned())
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("read the invalidations of session {session_id}"))?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        rows.iter()
            .map(|r| {
                Ok(Invalidation {
                    frame_id: id_of(r.try_get(0).map_err(corrupt)?)?,
                    reason: r.try_get::<Option<String>, _>(1).map_err(corrupt)?.unwrap_or_default(),
                })
            })
            .collect()
    }

    async fn check(&self) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        let checks: [(&str, &str); 8] = [
            (
                "frame without status history",
                "SELECT f.frame_id FROM frames f WHERE NOT EXISTS (SELECT 1 FROM frame_status s WHERE s.frame_id = f.frame_id)",
            ),
            (
                "status differs from the last history entry",
                "SELECT f.frame_id FROM frames f JOIN frame_status s ON s.frame_id = f.frame_id \
                 WHERE s.seq = (SELECT MAX(s2.seq) FROM frame_status s2 WHERE s2.frame_id = f.frame_id) AND s.status <> f.status",
            ),
            (
                "file conditions missing",
                "SELECT f.frame_id FROM frames f WHERE f.n_files <> (SELECT COUNT(*) FROM frame_files ff WHERE ff.frame_id = f.frame_id)",
            ),
            (
                "dependencies missing",
                "SELECT f.frame_id FROM frames f WHERE f.n_deps <> \
                 (SELECT COUNT(*) FROM frame_edges e WHERE e.dst = f.frame_id AND e.kind = 'cites')",
            ),
            (
                "parent edge missing",
                "SELECT f.frame_id FROM frames f WHERE f.parent_id IS NOT NULL AND NOT EXISTS \
                 (SELECT 1 FROM frame_edges e WHERE e.src = f.parent_id AND e.dst = f.frame_id AND e.kind = 'parent')",
            ),
            (
                "depth is not the parent's + 1",
                "SELECT c.frame_id FROM frames c JOIN frames p ON p.frame_id = c.parent_id WHERE c.depth <> p.depth + 1",
            ),
            (
                "live frame under an invalidated parent",
                "SELECT c.frame_id FROM frames c JOIN frames p ON p.frame_id = c.parent_id \
                 WHERE p.status = 'invalidated' AND c.status <> 'invalidated'",
            ),
            (
                "session files missing",
                "SELECT s.session_id FROM sessions s WHERE s.n_files <> \
                 (SELECT COUNT(*) FROM session_files sf WHERE sf.session_id = s.session_id)",
            ),
        ];
        for (what, sql) in checks {
            let ids: Vec<String> =
                sqlx::query_scalar(sql).fetch_all(&self.pool).await.ctx(|| format!("check: {what}"))?;
            for id in ids.into_iter().take(20) {
                problems.push(format!("{what}: {id}"));
            }
        }
        if self.backend == Backend::Sqlite {
            let ok: String = sqlx::query_scalar("PRAGMA integrity_check")
                .fetch_one(&self.pool)
                .await
                .ctx(|| "integrity check".into())?;
            if ok != "ok" {
                problems.push(format!("integrity_check: {ok}"));
            }
            let fk =
                sqlx::query("PRAGMA foreign_key_check").fetch_all(&self.pool).await.ctx(|| "foreign keys".into())?;
            if !fk.is_empty() {
                problems.push(format!("{} rows break a foreign key", fk.len()));
            }
        }
        Ok(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse_url("postgres://u@h/db").unwrap().0, Backend::Postgres);
        assert_eq!(
            parse_url("sqlite:///x/y.db?mode=ro").unwrap(),
            (Backend::Sqlite, "sqlite:///x/y.db?mode=ro".into())
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a b#?.db");
        let (b, u) = parse_url(p.to_str().unwrap()).unwrap();
        assert_eq!(b, Backend::Sqlite);
        assert!(u.ends_with("a%20b%23%3F.db?mode=rwc"), "{u}");
        let (_, u) = parse_url(&format!("sqlite://{}", dir.path().join("sub/s.db").display())).unwrap();
        assert!(u.ends_with("sub/s.db?mode=rwc"), "{u}");
        assert!(dir.path().join("sub").is_dir(), "the folder is created");
        for bad in ["", "mysql://x", "http://h", "sqlite::memory:"] {
            assert!(matches!(parse_url(bad), Err(StoreError::BadUrl(_))), "{bad}");
        }
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }

    #[test]
    fn placeholder_lists() {
        assert_eq!(placeholders(2, 2), "($1, $2), ($3, $4)");
    }
}
