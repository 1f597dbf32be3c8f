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
            Arg::Int(i) => q = q.bind(*i),
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

/// The columns `frame_of_row` reads, from `frames f` joined with its parent
/// `p`; the last is the integer key.
const FRAME_SELECT: &str = "f.frame_id, f.project_id, f.session_id, p.frame_id, f.depth, f.query, f.context_slice, \
     f.evidence, f.conclusion, f.confidence, f.expires_at, f.note, st.status, f.branched_from, f.created_at, \
     st.updated_at, f.seq";

/// Columns written by an insert, in bind order.
const FRAME_INSERT: &str = "seq, frame_id, project_id, session_id, parent_seq, depth, query, context_slice, evidence, \
     conclusion, confidence, expires_at, note, branched_from, created_at, n_files, n_deps";

fn frame_of_row(r: &AnyRow) -> Result<(i64, CausalFrame), StoreError> {
    let get = |e: sqlx::Error| StoreError::Corrupt(format!("frames row: {e}"));
    let id: String = r.try_get(0).map_err(get)?;
    let evidence_text: String = r.try_get(7).map_err(get)?;
    let evidence: Vec<Evidence> = serde_json::from_str(&evidence_text)
        .map_err(|e| StoreError::Corrupt(format!("frame {id}: evidence is not valid JSON: {e}")))?;
    let status: String = r.try_get(12).map_err(get)?;
    let frame = CausalFrame {
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
    };
    Ok((r.try_get(16).map_err(get)?, frame))
}

/// What inserting a child needs to know about a frame already stored (or
/// earlier in the same batch).
#[derive(Debug, Clone)]
struct Known {
    seq: i64,
    project_id: String,
    depth: u32,
    status: Status,
    /// Made up by the test model: never evidence.
    fabricated: bool,
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
    if f.timestamps.history.iter().any(|h| h.status == Status::Invalidated) {
        return bad("a frame is stored live; invalidate it afterwards".into());
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
                        // Cascades sort and deduplicate in temporary b-trees:
                        // keep them, and a 32 MiB page cache, in memory.
                        conn.execute("PRAGMA temp_store = MEMORY").await?;
                        conn.execute("PRAGMA cache_size = -32768").await?;
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
        // Up to date is the common case: a read settles it without taking
        // the write lock (every `noesis run` opens the store).
        let current: Result<i64, _> =
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM noesis_migrations").fetch_one(&store.pool).await;
        if current.is_ok_and(|v| v == migrate::LATEST) {
            return Ok(store);
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

    /// A read transaction: every statement in it sees one snapshot, so a
    /// frame another process commits between two of a load's queries is
    /// either wholly in the result or wholly out of it.
    async fn read(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        let mut tx = self.pool.begin().await.ctx(|| "begin a read".into())?;
        if self.backend == Backend::Postgres {
            // The default (read committed) takes a new snapshot per statement.
            tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await
                .ctx(|| "begin a read".into())?;
        }
        Ok(tx)
    }

    async fn load(&self, ids_sql: &str, args: &[Arg]) -> Result<Vec<CausalFrame>, StoreError> {
        let mut conn = self.read().await?;
        let q = |sql: String| bind_args(sqlx::query(AssertSqlSafe(sql)), args);
        let rows = q(format!(
            "SELECT {FRAME_SELECT} FROM frames f JOIN frame_state st ON st.seq = f.seq \
             LEFT JOIN frames p ON p.seq = f.parent_seq \
             WHERE f.seq IN ({ids_sql}) ORDER BY f.created_at, f.frame_id"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read frames".into())?;
        let mut frames = Vec::with_capacity(rows.len());
        let mut index: HashMap<i64, usize> = HashMap::with_capacity(rows.len());
        for r in &rows {
            let (seq, f) = frame_of_row(r)?;
            index.insert(seq, frames.len());
            frames.push(f);
        }
        let slot = |seq: i64| {
            index.get(&seq).copied().ok_or_else(|| StoreError::Corrupt(format!("row for unknown frame #{seq}")))
        };
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        for r in q(format!(
            "SELECT frame_seq, path, hash FROM frame_files WHERE frame_seq IN ({ids_sql}) ORDER BY frame_seq, path"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read frame files".into())?
        {
            let seq: i64 = r.try_get(0).map_err(corrupt)?;
            let f = FileRef { path: r.try_get(1).map_err(corrupt)?, hash: r.try_get(2).map_err(corrupt)? };
            frames[slot(seq)?].invalidation_condition.files.push(f);
        }
        for r in q(format!(
            "SELECT e.dst, c.frame_id FROM frame_edges e JOIN frames c ON c.seq = e.src \
             WHERE e.kind = 1 AND e.dst IN ({ids_sql}) ORDER BY e.dst, c.frame_id"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read frame dependencies".into())?
        {
            let seq: i64 = r.try_get(0).map_err(corrupt)?;
            let dep = id_of(r.try_get(1).map_err(corrupt)?)?;
            frames[slot(seq)?].invalidation_condition.frames.push(dep);
        }
        for r in q(format!(
            "SELECT parent_seq, frame_id FROM frames WHERE parent_seq IN ({ids_sql}) ORDER BY created_at, frame_id"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read frame children".into())?
        {
            let seq: i64 = r.try_get(0).map_err(corrupt)?;
            let child = id_of(r.try_get(1).map_err(corrupt)?)?;
            frames[slot(seq)?].children.push(child);
        }
        for r in q(format!(
            "SELECT frame_seq, status, at, reason, session_id FROM frame_status \
             WHERE frame_seq IN ({ids_sql}) ORDER BY seq"
        ))
        .fetch_all(&mut *conn)
        .await
        .ctx(|| "read status history".into())?
        {
            let seq: i64 = r.try_get(0).map_err(corrupt)?;
            let status: String = r.try_get(1).map_err(corrupt)?;
            let i = slot(seq)?;
            let change = StatusChange {
                status: status_of(&status, frames[i].frame_id.as_str())?,
                at: Timestamp::from_millis(r.try_get(2).map_err(corrupt)?),
                reason: r.try_get(3).map_err(corrupt)?,
                session_id: r.try_get(4).map_err(corrupt)?,
            };
            frames[i].timestamps.history.push(change);
        }
        // The terminal change of invalidated frames comes last.
        for (_, (seq, change)) in
            Self::invalidations(&mut conn, self.backend, &format!("f.seq IN ({ids_sql})"), args).await?
        {
            frames[slot(seq)?].timestamps.history.push(change);
        }
        conn.commit().await.ctx(|| "end a read".into())?;
        Ok(frames)
    }

    /// Facts about a frame referenced by a batch: from the batch itself or
    /// the database.
    async fn lookup(
        conn: &mut AnyConnection,
        id: &FrameId,
        batch: &HashMap<FrameId, Known>,
    ) -> Result<Known, StoreError> {
        if let Some(hit) = batch.get(id) {
            return Ok(hit.clone());
        }
        let row = sqlx::query(
            "SELECT f.seq, f.project_id, f.depth, st.status, f.context_slice FROM frames f \
             JOIN frame_state st ON st.seq = f.seq WHERE f.frame_id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *conn)
        .await
        .ctx(|| format!("look up frame {id}"))?
        .ok_or_else(|| StoreError::Frames(noesis_frames::FramesError::NotFound(id.clone())))?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        let status: String = row.try_get(3).map_err(corrupt)?;
        Ok(Known {
            seq: row.try_get(0).map_err(corrupt)?,
            project_id: row.try_get(1).map_err(corrupt)?,
            depth: u32_of(row.try_get(2).map_err(corrupt)?, "depth")?,
            status: status_of(&status, id.as_str())?,
            fabricated: noesis_frames::is_fabricated(&row.try_get::<String, _>(4).map_err(corrupt)?),
        })
    }

    /// Integer keys for `n` new frames. SQLite: after the largest, which is
    /// safe because the caller holds the write lock. PostgreSQL: drawn from
    /// the identity sequence, safe under concurrency.
    async fn reserve_seqs(&self, conn: &mut AnyConnection, n: usize) -> Result<Vec<i64>, StoreError> {
        let n64 = i64::try_from(n).unwrap_or(i64::MAX);
        match self.backend {
            Backend::Sqlite => {
                let max: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM frames")
                    .fetch_one(&mut *conn)
                    .await
                    .ctx(|| "reserve frame keys".into())?;
                Ok((1..=n64).map(|i| max + i).collect())
            }
            Backend::Postgres => sqlx::query_scalar(
                "SELECT nextval(pg_get_serial_sequence('frames', 'seq')) FROM generate_series(1, $1)",
            )
            .bind(n64)
            .fetch_all(&mut *conn)
            .await
            .ctx(|| "reserve frame keys".into()),
        }
    }

    async fn insert_tx(&self, conn: &mut AnyConnection, frames: &[CausalFrame]) -> Result<(), StoreError> {
        if frames.is_empty() {
            return Ok(());
        }
        let seqs = self.reserve_seqs(conn, frames.len()).await?;
        let mut batch: HashMap<FrameId, Known> = HashMap::new();
        let mut frame_rows = Vec::with_capacity(frames.len());
        let mut status_rows = Vec::new();
        let mut edge_rows: Vec<(i64, i64, i64)> = Vec::new();
        let mut file_rows = Vec::new();
        for (f, &seq) in frames.iter().zip(&seqs) {
            check_frame(f)?;
            if batch.contains_key(&f.frame_id) {
                return Err(StoreError::Invalid(format!("frame {} appears twice", f.frame_id)));
            }
            let mut parent_seq = None;
            if let Some(pid) = &f.parent_id {
                let parent = Self::lookup(conn, pid, &batch).await?;
                if parent.project_id != f.project_id {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: parent {pid} belongs to project {}, not {}",
                        f.frame_id, parent.project_id, f.project_id
                    )));
                }
                if f.depth != parent.depth + 1 {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: depth {} under parent {pid} of depth {}",
                        f.frame_id, f.depth, parent.depth
                    )));
                }
                if parent.status == Status::Invalidated {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: parent {pid} is invalidated; nothing can be added under it",
                        f.frame_id
                    )));
                }
                edge_rows.push((parent.seq, seq, 0));
                parent_seq = Some(parent.seq);
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
                let d = Self::lookup(conn, dep, &batch).await?;
                if d.status == Status::Invalidated {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: it cites frame {dep}, which is invalidated",
                        f.frame_id
                    )));
                }
                if d.fabricated {
                    return Err(StoreError::Invalid(format!(
                        "frame {}: it cites frame {dep}, which the test model fabricated; a fabricated answer is \
                         never evidence",
                        f.frame_id
                    )));
                }
                edge_rows.push((d.seq, seq, 1));
            }
            for file in &cond.files {
                file_rows.push((seq, file.path.clone(), file.hash.clone()));
            }
            for h in &f.timestamps.history {
                status_rows.push((seq, h.clone()));
            }
            let evidence = serde_json::to_string(&f.evidence)
                .map_err(|e| StoreError::Invalid(format!("frame {}: evidence: {e}", f.frame_id)))?;
            frame_rows.push((seq, parent_seq, f, evidence, cond.files.len(), cond.frames.len()));
            batch.insert(
                f.frame_id.clone(),
                Known {
                    seq,
                    project_id: f.project_id.clone(),
                    depth: f.depth,
                    status: f.status,
                    fabricated: f.is_fabricated(),
                },
            );
        }
        for chunk in frame_rows.chunks(CHUNK / 4) {
            let sql = format!("INSERT INTO frames ({FRAME_INSERT}) VALUES {}", placeholders(chunk.len(), 17));
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (seq, parent_seq, f, evidence, n_files, n_deps) in chunk {
                q = q
                    .bind(*seq)
                    .bind(f.frame_id.as_str().to_owned())
                    .bind(f.project_id.clone())
                    .bind(f.session_id.clone())
                    .bind(*parent_seq)
                    .bind(i64::from(f.depth))
                    .bind(f.query.clone())
                    .bind(f.context_slice.clone())
                    .bind(evidence.clone())
                    .bind(f.conclusion.clone())
                    .bind(f.confidence)
                    .bind(f.invalidation_condition.expires_at.map(Timestamp::millis))
                    .bind(f.invalidation_condition.note.clone())
                    .bind(f.branched_from.as_ref().map(|p| p.as_str().to_owned()))
                    .bind(f.timestamps.created_at.millis())
                    .bind(i64::try_from(*n_files).unwrap_or(i64::MAX))
                    .bind(i64::try_from(*n_deps).unwrap_or(i64::MAX));
            }
            q.execute(&mut *conn)
                .await
                .ctx(|| format!("insert frames ({} from {})", chunk.len(), chunk[0].2.frame_id))?;
        }
        for chunk in frame_rows.chunks(CHUNK) {
            let sql =
                format!("INSERT INTO frame_state (seq, status, updated_at) VALUES {}", placeholders(chunk.len(), 3));
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (seq, _, f, _, _, _) in chunk {
                q = q.bind(*seq).bind(f.status.as_str()).bind(f.timestamps.updated_at.millis());
            }
            q.execute(&mut *conn).await.ctx(|| "insert frame states".into())?;
        }
        for chunk in status_rows.chunks(CHUNK) {
            let sql = format!(
                "INSERT INTO frame_status (frame_seq, status, at, reason, session_id) VALUES {}",
                placeholders(chunk.len(), 5)
            );
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (seq, h) in chunk {
                q = q
                    .bind(*seq)
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
                q = q.bind(*src).bind(*dst).bind(*kind);
            }
            q.execute(&mut *conn).await.ctx(|| "insert frame edges".into())?;
        }
        for chunk in file_rows.chunks(CHUNK) {
            let sql =
                format!("INSERT INTO frame_files (frame_seq, path, hash) VALUES {}", placeholders(chunk.len(), 3));
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for (seq, path, hash) in chunk {
                q = q.bind(*seq).bind(path.clone()).bind(hash.clone());
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
        let done = sqlx::query(
            "UPDATE frame_state SET status = $1, updated_at = $2 \
             WHERE seq = (SELECT seq FROM frames WHERE frame_id = $3) AND status = $4",
        )
        .bind(u.change.status.as_str())
        .bind(u.change.at.millis())
        .bind(u.frame_id.as_str())
        .bind(u.from.as_str())
        .execute(&mut *conn)
        .await
        .ctx(|| format!("set the status of {}", u.frame_id))?;
        if done.rows_affected() != 1 {
            // Either gone or changed by someone else since it was read.
            let now = Self::lookup(conn, &u.frame_id, &HashMap::new()).await?;
            return Err(noesis_frames::FramesError::Transition {
                frame_id: u.frame_id.clone(),
                from: now.status,
                to: u.change.status,
            }
            .into());
        }
        sqlx::query(
            "INSERT INTO frame_status (frame_seq, status, at, reason, session_id) \
             SELECT seq, $2, $3, $4, $5 FROM frames WHERE frame_id = $1",
        )
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

    /// The cascade, in SQL: the seeds are marked with a new batch number,
    /// then one recursive UPDATE walks `frame_edges` (children and citers)
    /// from them through live frames and marks every frame it reaches.
    async fn invalidate_tx(
        conn: &mut AnyConnection,
        backend: Backend,
        seeds: &[Invalidation],
        session_id: Option<&str>,
        at: Timestamp,
    ) -> Result<Vec<Invalidation>, StoreError> {
        let batch = i64::try_from(uuid_like_u64() >> 1).unwrap_or(1);
        if backend == Backend::Postgres {
            // The planner cannot estimate a recursive walk and picks merge
            // or hash joins over whole tables (and JIT) for it; index
            // lookups per step are what a cascade needs. Local to this
            // transaction.
            for setting in
                ["SET LOCAL enable_mergejoin = off", "SET LOCAL enable_hashjoin = off", "SET LOCAL jit = off"]
            {
                sqlx::query(setting).execute(&mut *conn).await.ctx(|| "tune the cascade".into())?;
            }
        }
        let mut seen = HashSet::new();
        for s in seeds.iter().filter(|s| seen.insert(s.frame_id.clone())) {
            sqlx::query(
                "UPDATE frame_state SET status = 'invalidated', updated_at = $2, invalidated_at = $2, \
                 invalidated_reason = $3, invalidated_session = $4, invalidated_batch = $5 \
                 WHERE seq = (SELECT seq FROM frames WHERE frame_id = $1) AND status <> 'invalidated'",
            )
            .bind(s.frame_id.as_str())
            .bind(at.millis())
            .bind(s.reason.clone())
            .bind(session_id.map(str::to_owned))
            .bind(batch)
            .execute(&mut *conn)
            .await
            .ctx(|| format!("invalidate {}", s.frame_id))?;
        }
        sqlx::query(
            "WITH RECURSIVE doomed(id) AS ( \
                 SELECT seq FROM frame_state WHERE invalidated_batch = $1 \
               UNION \
                 SELECT e.dst FROM doomed d JOIN frame_edges e ON e.src = d.id \
                 JOIN frame_state s ON s.seq = e.dst WHERE s.status <> 'invalidated' \
             ) \
             UPDATE frame_state SET status = 'invalidated', updated_at = $2, invalidated_at = $2, \
                 invalidated_session = $3, invalidated_batch = $1 \
             WHERE seq IN (SELECT id FROM doomed) AND status <> 'invalidated'",
        )
        .bind(batch)
        .bind(at.millis())
        .bind(session_id.map(str::to_owned))
        .execute(&mut *conn)
        .await
        .ctx(|| "cascade the invalidation".into())?;
        let all = Self::invalidations(conn, backend, "st.invalidated_batch = $1", &[Arg::Int(batch)]).await?;
        // Seeds first, in the order given; then the cascade by depth.
        let order: HashMap<&FrameId, usize> = seeds.iter().enumerate().map(|(i, s)| (&s.frame_id, i)).rev().collect();
        let (mut first, rest): (Vec<_>, Vec<_>) = all.into_iter().partition(|i| order.contains_key(&i.0.frame_id));
        first.sort_by_key(|i| order.get(&i.0.frame_id).copied().unwrap_or(usize::MAX));
        first.extend(rest);
        Ok(first.into_iter().map(|(inv, _)| inv).collect())
    }

    /// Invalidated frames matching `cond` (on `frames f` / `frame_state
    /// st`), by depth, each with its reason: the one given (seeds), else its
    /// parent or a cited frame invalidated in the same batch; and each one's
    /// invalidation as a status change keyed by its integer key. The rows
    /// come back as one aggregated text (a driver round trip per row would
    /// cost more than the whole cascade), then are named and sorted here.
    async fn invalidations(
        conn: &mut AnyConnection,
        backend: Backend,
        cond: &str,
        args: &[Arg],
    ) -> Result<Vec<(Invalidation, (i64, StatusChange))>, StoreError> {
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
        let mut given: HashMap<i64, String> = HashMap::new();
        let sql = format!(
            "SELECT f.seq, st.invalidated_reason FROM frame_state st JOIN frames f ON f.seq = st.seq \
             WHERE st.invalidated_at IS NOT NULL AND st.invalidated_reason IS NOT NULL AND {cond}"
        );
        for r in bind_args(sqlx::query(AssertSqlSafe(sql)), args)
            .fetch_all(&mut *conn)
            .await
            .ctx(|| "read invalidation reasons".into())?
        {
            given.insert(r.try_get(0).map_err(corrupt)?, r.try_get(1).map_err(corrupt)?);
        }
        let agg = match backend {
            Backend::Sqlite => "group_concat(line, char(10))",
            Backend::Postgres => "string_agg(line, chr(10))",
        };
        // seq id depth created_at invalidated_at session cause — ids and
        // session ids never hold whitespace.
        let sql = format!(
            "SELECT {agg} FROM (SELECT f.seq || ' ' || f.frame_id || ' ' || f.depth || ' ' || f.created_at || ' ' \
                 || st.invalidated_at || ' ' || COALESCE(st.invalidated_session, '-') || ' ' \
                 || COALESCE('p' || ps.seq, 'c' || (SELECT MIN(e.src) FROM frame_edges e \
                        JOIN frame_state cs ON cs.seq = e.src \
                        WHERE e.dst = f.seq AND e.kind = 1 AND cs.invalidated_batch = st.invalidated_batch), '-') AS line \
             FROM frame_state st JOIN frames f ON f.seq = st.seq \
             LEFT JOIN frame_state ps ON ps.seq = f.parent_seq AND ps.invalidated_batch = st.invalidated_batch \
             WHERE st.invalidated_at IS NOT NULL AND {cond}) AS lines"
        );
        let text: Option<String> = bind_args(sqlx::query(AssertSqlSafe(sql)), args)
            .fetch_one(&mut *conn)
            .await
            .ctx(|| "read invalidations".into())?
            .try_get(0)
            .map_err(corrupt)?;
        struct Row<'a> {
            seq: i64,
            id: &'a str,
            depth: i64,
            created: i64,
            at: i64,
            session: Option<&'a str>,
            cause: Option<(bool, i64)>,
        }
        let text = text.unwrap_or_default();
        let bad = |line: &str| StoreError::Corrupt(format!("invalidation row `{line}`"));
        let mut rows = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let mut p = line.split(' ');
            let mut next = || p.next().ok_or_else(|| bad(line));
            let int = |t: &str| t.parse::<i64>().map_err(|_| bad(line));
            let (seq, id, depth, created, at, session, cause) =
                (int(next()?)?, next()?, int(next()?)?, int(next()?)?, int(next()?)?, next()?, next()?);
            let cause = match cause.split_at_checked(1) {
                Some(("p", n)) => Some((true, int(n)?)),
                Some(("c", n)) => Some((false, int(n)?)),
                _ => None,
            };
            rows.push(Row { seq, id, depth, created, at, session: (session != "-").then_some(session), cause });
        }
        let mut names: HashMap<i64, String> = HashMap::new();
        let index: HashMap<i64, usize> = rows.iter().enumerate().map(|(i, r)| (r.seq, i)).collect();
        let missing: Vec<i64> =
            rows.iter().filter_map(|r| r.cause.map(|c| c.1)).filter(|s| !index.contains_key(s)).collect();
        for chunk in missing.chunks(CHUNK) {
            let list: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!("SELECT seq, frame_id FROM frames WHERE seq IN ({})", list.join(", "));
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for s in chunk {
                q = q.bind(*s);
            }
            for r in q.fetch_all(&mut *conn).await.ctx(|| "name invalidation causes".into())? {
                names.insert(r.try_get(0).map_err(corrupt)?, r.try_get(1).map_err(corrupt)?);
            }
        }
        let name = |seq: i64| index.get(&seq).map(|&i| rows[i].id).or_else(|| names.get(&seq).map(String::as_str));
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (&rows[a], &rows[b]);
            (x.depth, x.created, x.id).cmp(&(y.depth, y.created, y.id))
        });
        let mut out = Vec::with_capacity(rows.len());
        for i in order {
            let r = &rows[i];
            let reason = match (given.remove(&r.seq), r.cause) {
                (Some(g), _) => g,
                (None, Some((true, p))) => format!("parent {} invalidated", name(p).unwrap_or("?")),
                (None, Some((false, c))) => format!("cites invalidated frame {}", name(c).unwrap_or("?")),
                (None, None) => "invalidated".to_owned(),
            };
            let change = StatusChange {
                status: Status::Invalidated,
                at: Timestamp::from_millis(r.at),
                reason: Some(reason.clone()),
                session_id: r.session.map(str::to_owned),
            };
            out.push((Invalidation { frame_id: id_of(r.id.to_owned())?, reason }, (r.seq, change)));
        }
        Ok(out)
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

/// 64 random-enough bits (the low half of a UUID v7) for a batch number.
fn uuid_like_u64() -> u64 {
    let id = FrameId::generate();
    let hex: String = id.as_str().chars().filter(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex[hex.len() - 16..], 16).unwrap_or(1)
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
        self.insert_tx(&mut tx, frames).await?;
        tx.commit().await.ctx(|| "commit frames".into())
    }

    async fn apply(&self, changes: &Changeset) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        self.insert_tx(&mut tx, &changes.frames).await?;
        for u in &changes.statuses {
            if u.change.status == Status::Invalidated {
                // Through the cascade, so nothing live stays under it.
                let now = Self::lookup(&mut tx, &u.frame_id, &HashMap::new()).await?;
                if now.status != u.from || !u.from.can_become(Status::Invalidated) {
                    return Err(noesis_frames::FramesError::Transition {
                        frame_id: u.frame_id.clone(),
                        from: now.status,
                        to: Status::Invalidated,
                    }
                    .into());
                }
                let seed =
                    Invalidation { frame_id: u.frame_id.clone(), reason: u.change.reason.clone().unwrap_or_default() };
                Self::invalidate_tx(&mut tx, self.backend, &[seed], u.change.session_id.as_deref(), u.change.at)
                    .await?;
            } else {
                Self::status_tx(&mut tx, u).await?;
            }
        }
        tx.commit().await.ctx(|| "commit changes".into())
    }

    async fn frame(&self, id: &FrameId) -> Result<Option<CausalFrame>, StoreError> {
        let mut v =
            self.load("SELECT seq FROM frames WHERE frame_id = $1", &[Arg::Text(id.as_str().to_owned())]).await?;
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
        for a in args {
            q = match a {
                Arg::Text(t) => q.bind(t),
                Arg::Int(i) => q.bind(i),
            };
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
        let hit = Self::invalidate_tx(&mut tx, self.backend, seeds, session_id, at).await?;
        tx.commit().await.ctx(|| "commit the invalidation".into())?;
        Ok(hit)
    }

    async fn file_conditions(&self, project_id: &str) -> Result<Vec<(FrameId, FileRef)>, StoreError> {
        let rows = sqlx::query(
            "SELECT f.frame_id, ff.path, ff.hash FROM frame_files ff JOIN frames f ON f.seq = ff.frame_seq \
             JOIN frame_state st ON st.seq = f.seq \
             WHERE f.project_id = $1 AND st.status <> 'invalidated' ORDER BY f.frame_id, ff.path",
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
            "SELECT f.frame_id, f.expires_at FROM frames f JOIN frame_state st ON st.seq = f.seq \
             WHERE f.project_id = $1 AND st.status <> 'invalidated' \
             AND f.expires_at IS NOT NULL AND f.expires_at <= $2 ORDER BY f.frame_id",
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
        self.insert_tx(&mut tx, std::slice::from_ref(root)).await?;
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
        let hit =
            Self::invalidate_tx(&mut tx, self.backend, seeds, Some(&session.session_id), session.created_at).await?;
        tx.commit().await.ctx(|| format!("commit session {}", session.session_id))?;
        Ok(hit)
    }

    async fn session(&self, session_id: &str) -> Result<Option<SessionArtifacts>, StoreError> {
        Ok(self.sessions_where("session_id", session_id, 1).await?.pop())
    }

    async fn latest_session_root(&self, project_id: &str) -> Result<Option<FrameId>, StoreError> {
        let root: Option<Option<String>> = sqlx::query_scalar(
            "SELECT root_frame_id FROM sessions WHERE project_id = $1 ORDER BY created_at DESC, session_id DESC LIMIT 1",
        )
        .bind(project_id.to_owned())
        .fetch_optional(&self.pool)
        .await
        .ctx(|| "read the latest session".into())?;
        root.flatten().map(id_of).transpose()
    }

    async fn sessions(&self, project_id: &str, limit: u32) -> Result<Vec<SessionArtifacts>, StoreError> {
        self.sessions_where("project_id", project_id, limit).await
    }

    async fn invalidated_in_session(&self, session_id: &str) -> Result<Vec<Invalidation>, StoreError> {
        let mut conn = self.pool.acquire().await.ctx(|| "connect".into())?;
        let all = Self::invalidations(
            &mut conn,
            self.backend,
            "st.invalidated_session = $1",
            &[Arg::Text(session_id.to_owned())],
        )
        .await?;
        Ok(all.into_iter().map(|(inv, _)| inv).collect())
    }

    async fn put_context(&self, row: &crate::ContextRow) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        crate::context::put(&mut tx, row).await?;
        tx.commit().await.ctx(|| format!("commit context `{}`", row.key))
    }

    async fn latest_context(&self, query: &crate::ContextQuery<'_>) -> Result<Option<crate::ContextRow>, StoreError> {
        crate::context::latest(&self.pool, query).await
    }

    async fn check(&self) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        let checks: [(&str, &str); 10] = [
            (
                "frame without status history",
                "SELECT f.frame_id FROM frames f WHERE NOT EXISTS (SELECT 1 FROM frame_status s WHERE s.frame_seq = f.seq)",
            ),
            (
                "frame without state",
                "SELECT f.frame_id FROM frames f WHERE NOT EXISTS (SELECT 1 FROM frame_state st WHERE st.seq = f.seq)",
            ),
            (
                "status differs from the last history entry",
                "SELECT f.frame_id FROM frames f JOIN frame_state st ON st.seq = f.seq \
                 JOIN frame_status s ON s.frame_seq = f.seq \
                 WHERE s.seq = (SELECT MAX(s2.seq) FROM frame_status s2 WHERE s2.frame_seq = f.seq) \
                 AND s.status <> st.status AND st.status <> 'invalidated'",
            ),
            (
                "status disagrees with the invalidation record",
                "SELECT f.frame_id FROM frames f JOIN frame_state st ON st.seq = f.seq \
                 WHERE (st.status = 'invalidated') <> (st.invalidated_at IS NOT NULL)",
            ),
            (
                "file conditions missing",
                "SELECT f.frame_id FROM frames f WHERE f.n_files <> (SELECT COUNT(*) FROM frame_files ff WHERE ff.frame_seq = f.seq)",
            ),
            (
                "dependencies missing",
                "SELECT f.frame_id FROM frames f WHERE f.n_deps <> \
                 (SELECT COUNT(*) FROM frame_edges e WHERE e.dst = f.seq AND e.kind = 1)",
            ),
            (
                "parent edge missing",
                "SELECT f.frame_id FROM frames f WHERE f.parent_seq IS NOT NULL AND NOT EXISTS \
                 (SELECT 1 FROM frame_edges e WHERE e.src = f.parent_seq AND e.dst = f.seq AND e.kind = 0)",
            ),
            (
                "depth is not the parent's + 1",
                "SELECT c.frame_id FROM frames c JOIN frames p ON p.seq = c.parent_seq WHERE c.depth <> p.depth + 1",
            ),
            (
                "live frame under an invalidated parent",
                "SELECT c.frame_id FROM frames c JOIN frame_state cs ON cs.seq = c.seq \
                 JOIN frame_state ps ON ps.seq = c.parent_seq \
                 WHERE ps.status = 'invalidated' AND cs.status <> 'invalidated'",
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
