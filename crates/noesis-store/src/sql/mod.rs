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
    SessionArtifacts, SessionLink, Status, StatusChange, Timestamp, Timestamps,
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
    /// The last state saved of each recent agent run, to store the next as
    /// a delta from it.
    bases: std::sync::Arc<crate::agent::Bases>,
}

/// How long a SQLite writer waits for another to finish.
const BUSY_TIMEOUT_MS: u64 = 30_000;

/// SQLite connections a store opens at most unless told otherwise.
pub const SQLITE_CONNECTIONS: u32 = 4;

/// Every SQLite connection's settings: the busy timeout above; every
/// commit synced to disk before it returns (`synchronous = FULL`: in WAL
/// mode NORMAL may lose the last commits on power loss, and a run's
/// "call started" must not be lost, or the call runs again on resume);
/// cascades sort and deduplicate in temporary b-trees, kept in memory with
/// a 32 MiB page cache.
const PRAGMAS: &str = "PRAGMA busy_timeout = 30000; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
                       PRAGMA temp_store = MEMORY; PRAGMA cache_size = -32768;";

/// [`PRAGMAS`] for a store opened with `?synchronous=normal`: commits reach
/// the operating system, not the disk, before they return — a process
/// crash loses nothing, an OS crash or power loss may lose the last ones.
const PRAGMAS_NORMAL: &str = "PRAGMA busy_timeout = 30000; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
                              PRAGMA temp_store = MEMORY; PRAGMA cache_size = -32768;";

/// Takes noesis's own `synchronous=full|normal` out of a SQLite URL's
/// query (sqlx does not know it): the URL left, and whether commits wait
/// for the disk.
fn durability(url: &str) -> Result<(String, bool), StoreError> {
    let Some((base, query)) = url.split_once('?') else { return Ok((url.to_owned(), true)) };
    let mut full = true;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("synchronous", v)) if v.eq_ignore_ascii_case("full") => full = true,
            Some(("synchronous", v)) if v.eq_ignore_ascii_case("normal") => full = false,
            Some(("synchronous", v)) => {
                return Err(StoreError::Invalid(format!(
                    "store `{}`: synchronous={v}: expected full (the default) or normal",
                    redact(url)
                )));
            }
            _ => rest.push(pair),
        }
    }
    Ok(if rest.is_empty() { (base.to_owned(), full) } else { (format!("{base}?{}", rest.join("&")), full) })
}

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
    not_another_file(&abs)?;
    let text = abs.to_str().ok_or_else(|| StoreError::BadUrl(url.to_owned()))?;
    Ok((Backend::Sqlite, format!("sqlite://{}?mode=rwc", encode_path(text))))
}

/// Refuses a file that is not a SQLite database: the pool would retry the
/// failing connection until its timeout instead of saying so. Reading the
/// header costs less than the probe connection it replaces.
fn not_another_file(path: &std::path::Path) -> Result<(), StoreError> {
    use std::io::Read as _;
    const HEADER: &[u8; 16] = b"SQLite format 3\0";
    let Ok(mut file) = std::fs::File::open(path) else { return Ok(()) };
    let mut head = Vec::with_capacity(16);
    // A file that cannot be read is SQLite's to report.
    if file.by_ref().take(16).read_to_end(&mut head).is_err() || head.is_empty() || head.as_slice() == HEADER {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "store {}: not a SQLite database (it does not begin with SQLite's header); name another file",
        path.display()
    )))
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
        SqlStore::open_with(url, SQLITE_CONNECTIONS).await
    }

    /// [`SqlStore::open`] with at most `connections` SQLite connections
    /// (at least one; PostgreSQL keeps its own pool size). One suits a
    /// short command: its calls take turns on one connection instead of a
    /// second being opened because the first is still on its way back to
    /// the pool.
    ///
    /// # Errors
    /// As [`SqlStore::open`].
    pub async fn open_with(url: &str, connections: u32) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        let (stripped, full) = if url.starts_with("postgres") { (url.to_owned(), true) } else { durability(url)? };
        let (backend, conn_url) = parse_url(&stripped)?;
        let pragmas = if full { PRAGMAS } else { PRAGMAS_NORMAL };
        let shown = redact(url);
        let open_err = |source: sqlx::Error| StoreError::Open { url: shown.clone(), source: Box::new(source) };
        let options = AnyConnectOptions::from_str(&conn_url).map_err(open_err)?;
        // One direct connection first: a pool retries a refused connection
        // until its timeout and reports only that; this names the real cause
        // at once. A file's errors are never retried, so SQLite needs none
        // (and every short command opens the store).
        if backend == Backend::Postgres {
            sqlx::AnyConnection::connect_with(&options).await.map_err(open_err)?.close().await.map_err(open_err)?;
        }
        let pool = match backend {
            Backend::Sqlite => AnyPoolOptions::new()
                .max_connections(connections.max(1))
                .acquire_timeout(Duration::from_secs(120))
                // A file has no connection to lose: pinging it before every
                // use (the pool's default) only costs a round trip to the
                // connection's worker thread per query.
                .test_before_acquire(false)
                // One round trip to the connection's worker thread, not five.
                .after_connect(move |conn, _| {
                    Box::pin(async move { sqlx::raw_sql(pragmas).execute(conn).await.map(drop) })
                }),
            Backend::Postgres => AnyPoolOptions::new().max_connections(8).acquire_timeout(Duration::from_secs(30)),
        }
        .connect_with(options)
        .await
        .map_err(open_err)?;
        let store = SqlStore { pool, backend, url: shown, bases: Default::default() };
        if backend == Backend::Sqlite {
            store.wal().await?;
        }
        // Up to date is the common case: a read settles it without taking
        // the write lock (every `noesis run` opens the store).
        // Versions run 1..=LATEST without gaps, so all applied and none
        // newer means the highest is LATEST and there are LATEST of them.
        let current = sqlx::query("SELECT COALESCE(MAX(version), 0), COUNT(*) FROM _sqlx_migrations WHERE success")
            .fetch_one(&store.pool)
            .await
            .and_then(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?)));
        if current.is_ok_and(|(max, count)| max == migrate::LATEST && count == migrate::LATEST) {
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
    pub(crate) async fn write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .ctx(|| "begin a write".into())
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Closes the pool (pending writes finish first).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

mod read;
mod rows;
mod write;

use rows::*;

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
        begin(self, session, root, &[], seeds, "session", None).await
    }

    async fn record_session(&self, new: &crate::NewSession<'_>) -> Result<(), StoreError> {
        if new.kind == crate::SessionKind::Working {
            return Err(StoreError::Invalid(format!(
                "session {}: a working session starts with begin_session",
                new.artifacts.session_id
            )));
        }
        let Some((root, rest)) = new.frames.split_first() else {
            return Err(StoreError::Invalid(format!("session {}: no root frame", new.artifacts.session_id)));
        };
        begin(self, new.artifacts, root, rest, &[], new.kind.as_str(), new.source_hash).await.map(|_| ())
    }

    async fn session_by_source(&self, project_id: &str, hash: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.pool.acquire().await.ctx(|| "connect".into())?;
        crate::links::by_source(&mut conn, project_id, hash).await
    }

    async fn link_sessions(&self, link: &SessionLink) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let new = crate::links::link(&mut tx, link).await?;
        tx.commit().await.ctx(|| "commit the link".into())?;
        Ok(new)
    }

    async fn unlink_sessions(&self, a: &str, b: &str) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let gone = crate::links::unlink(&mut tx, a, b).await?;
        tx.commit().await.ctx(|| "commit the unlink".into())?;
        Ok(gone)
    }

    async fn session_kinds(&self, project_id: &str) -> Result<Vec<(String, crate::SessionKind)>, StoreError> {
        let rows = sqlx::query(
            "SELECT session_id, kind FROM sessions WHERE project_id = $1 ORDER BY created_at DESC, session_id DESC",
        )
        .bind(project_id.to_owned())
        .fetch_all(&self.pool)
        .await
        .ctx(|| "read session ids".into())?;
        let corrupt = |e: sqlx::Error| StoreError::Corrupt(format!("sessions row: {e}"));
        rows.iter()
            .map(|r| {
                let id: String = r.try_get(0).map_err(corrupt)?;
                let kind: String = r.try_get(1).map_err(corrupt)?;
                let kind = crate::SessionKind::from_name(&kind)
                    .ok_or_else(|| StoreError::Corrupt(format!("session {id}: kind `{kind}`")))?;
                Ok((id, kind))
            })
            .collect()
    }

    async fn session_links(&self, project_id: &str) -> Result<Vec<SessionLink>, StoreError> {
        let mut conn = self.pool.acquire().await.ctx(|| "connect".into())?;
        crate::links::links(&mut conn, project_id).await
    }

    async fn session(&self, session_id: &str) -> Result<Option<SessionArtifacts>, StoreError> {
        Ok(self.sessions_where("session_id", session_id, 1, false).await?.pop())
    }

    async fn latest_session_root(&self, project_id: &str) -> Result<Option<FrameId>, StoreError> {
        let root: Option<Option<String>> = sqlx::query_scalar(
            "SELECT root_frame_id FROM sessions WHERE project_id = $1 AND kind = 'session' \
             ORDER BY created_at DESC, session_id DESC LIMIT 1",
        )
        .bind(project_id.to_owned())
        .fetch_optional(&self.pool)
        .await
        .ctx(|| "read the latest session".into())?;
        root.flatten().map(id_of).transpose()
    }

    async fn sessions(&self, project_id: &str, limit: u32) -> Result<Vec<SessionArtifacts>, StoreError> {
        self.sessions_where("project_id", project_id, limit, true).await
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

    async fn save_agent_state_held(
        &self,
        state: &crate::AgentState,
        lease: Option<&crate::Lease>,
    ) -> Result<(), StoreError> {
        crate::agent::save(self, &self.bases, state, lease).await
    }

    async fn append_run_events(&self, run_id: &str, events: &[crate::RunEvent]) -> Result<(), StoreError> {
        crate::agent::append_events(self, run_id, events).await
    }

    async fn run_events(&self, run_id: &str, after: i64, limit: u32) -> Result<Vec<crate::RunEvent>, StoreError> {
        crate::agent::events(&self.pool, run_id, after, limit).await
    }

    async fn last_run_event(&self, run_id: &str) -> Result<i64, StoreError> {
        crate::agent::last_event(&self.pool, run_id).await
    }

    async fn create_batch(&self, batch: &crate::Batch, inputs: &[serde_json::Value]) -> Result<(), StoreError> {
        crate::batch::create(self, batch, inputs).await
    }

    async fn batch(&self, batch_id: &str) -> Result<Option<crate::Batch>, StoreError> {
        crate::batch::get(&self.pool, batch_id).await
    }

    async fn batch_items(&self, batch_id: &str, from: i64, to: i64) -> Result<Vec<crate::BatchItem>, StoreError> {
        crate::batch::items(&self.pool, batch_id, from, to).await
    }

    async fn answer_batch_item(
        &self,
        batch_id: &str,
        idx: i64,
        output: &serde_json::Value,
        by: &str,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        crate::batch::answer(self, batch_id, idx, output, by, at_ms).await
    }

    async fn batch_answered(&self, batch_id: &str) -> Result<i64, StoreError> {
        crate::batch::answered(&self.pool, batch_id).await
    }

    async fn save_agent_delta(
        &self,
        state: &crate::AgentState,
        base: i64,
        delta: &serde_json::Value,
        lease: Option<&crate::Lease>,
    ) -> Result<(), StoreError> {
        crate::agent::save_delta(self, &self.bases, state, base, delta, lease).await
    }

    async fn acquire_run_lease(
        &self,
        run_id: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<crate::LeaseGrant, StoreError> {
        crate::agent::acquire(self, run_id, holder, ttl_ms, now_ms).await
    }

    async fn renew_run_lease(
        &self,
        lease: &crate::Lease,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<crate::Lease, StoreError> {
        crate::agent::renew(self, lease, ttl_ms, now_ms).await
    }

    async fn release_run_lease(&self, lease: &crate::Lease) -> Result<(), StoreError> {
        crate::agent::release(&self.pool, lease).await
    }

    async fn run_lease(&self, run_id: &str) -> Result<Option<crate::LeaseHolder>, StoreError> {
        crate::agent::lease_of(&self.pool, run_id).await
    }

    async fn agent_state(&self, run_id: &str, step: Option<i64>) -> Result<Option<crate::AgentState>, StoreError> {
        crate::agent::load(&self.pool, run_id, step).await
    }

    async fn agent_runs(&self, project_id: &str, limit: u32) -> Result<Vec<crate::AgentSummary>, StoreError> {
        crate::agent::list(&self.pool, project_id, limit).await
    }

    async fn append_workflow_state(&self, version: &crate::WorkflowVersion) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        crate::workflow::append(&mut tx, version).await?;
        match tx.commit().await {
            Ok(()) => Ok(()),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(StoreError::Conflict(format!("version {} was written by another writer", version.version)))
            }
            Err(e) => Err(e).ctx(|| format!("commit workflow state version {}", version.version)),
        }
    }

    async fn workflow_state(
        &self,
        project_id: &str,
        version: Option<i64>,
    ) -> Result<Option<crate::WorkflowVersion>, StoreError> {
        crate::workflow::load(&self.pool, project_id, version).await
    }

    async fn workflow_history(&self, project_id: &str) -> Result<Vec<crate::WorkflowVersion>, StoreError> {
        crate::workflow::history(&self.pool, project_id).await
    }

    async fn replace_memory(&self, episode_id: &str, entries: &[crate::NewMemory]) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        crate::memory::replace(&mut tx, self.backend, episode_id, entries).await?;
        tx.commit().await.ctx(|| format!("commit the memory of episode {episode_id}"))
    }

    async fn search_memory(&self, query: &crate::MemoryQuery<'_>) -> Result<Vec<crate::Memory>, StoreError> {
        crate::memory::search(&self.pool, self.backend, query).await
    }

    async fn check(&self) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        let checks: [(&str, &str); 13] = [
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
            (
                "agent run without its latest state",
                "SELECT r.run_id FROM agent_runs r WHERE NOT EXISTS \
                 (SELECT 1 FROM agent_run_states s WHERE s.run_id = r.run_id AND s.step = r.latest_step)",
            ),
            (
                "agent run log that does not begin with a whole state",
                "SELECT r.run_id FROM agent_runs r WHERE (SELECT s.kind FROM agent_run_states s \
                 WHERE s.run_id = r.run_id ORDER BY s.step LIMIT 1) <> 'snapshot'",
            ),
            (
                "agent run state past the run's latest step",
                "SELECT DISTINCT s.run_id FROM agent_run_states s JOIN agent_runs r ON r.run_id = s.run_id \
                 WHERE s.step > r.latest_step",
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

/// A session of `kind` with its files, root frame and other frames, and the
/// invalidation `seeds`, in one transaction.
async fn begin(
    store: &SqlStore,
    session: &SessionArtifacts,
    root: &CausalFrame,
    rest: &[CausalFrame],
    seeds: &[Invalidation],
    kind: &str,
    source_hash: Option<&str>,
) -> Result<Vec<Invalidation>, StoreError> {
    if session.root_frame_id.as_ref() != Some(&root.frame_id) || root.parent_id.is_some() {
        return Err(StoreError::Invalid(format!(
            "session {}: the root frame must be a root and be named by root_frame_id",
            session.session_id
        )));
    }
    let mut tx = store.write().await?;
    if rest.is_empty() {
        store.insert_tx(&mut tx, std::slice::from_ref(root)).await?;
    } else {
        let all: Vec<CausalFrame> = std::iter::once(root).chain(rest).cloned().collect();
        store.insert_tx(&mut tx, &all).await?;
    }
    let scope = serde_json::to_string(&session.scope).unwrap_or_else(|_| "[]".into());
    sqlx::query(
        "INSERT INTO sessions (session_id, project_id, initial_prompt, scope, root_frame_id, conversation_log, created_at, n_files, kind, source_hash) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(session.session_id.clone())
    .bind(session.project_id.clone())
    .bind(session.initial_prompt.clone())
    .bind(scope)
    .bind(root.frame_id.as_str().to_owned())
    .bind(session.conversation_log.clone())
    .bind(session.created_at.millis())
    .bind(i64::try_from(session.files.len()).unwrap_or(i64::MAX))
    .bind(kind)
    .bind(source_hash.map(str::to_owned))
    .execute(&mut *tx)
    .await
    .ctx(|| format!("insert session {}", session.session_id))?;
    let files: Vec<(&String, &FileEntry)> = session.files.iter().collect();
    for chunk in files.chunks(CHUNK) {
        let sql =
            format!("INSERT INTO session_files (session_id, path, hash, role) VALUES {}", placeholders(chunk.len(), 4));
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for (path, e) in chunk {
            q = q.bind(session.session_id.clone()).bind((*path).clone()).bind(e.hash.clone()).bind(e.role.as_str());
        }
        q.execute(&mut *tx).await.ctx(|| format!("insert the files of session {}", session.session_id))?;
    }
    let hit =
        SqlStore::invalidate_tx(&mut tx, store.backend, seeds, Some(&session.session_id), session.created_at).await?;
    tx.commit().await.ctx(|| format!("commit session {}", session.session_id))?;
    Ok(hit)
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

    #[tokio::test]
    async fn a_store_may_trade_power_loss_durability_for_speed() {
        assert_eq!(durability("sqlite:///a/b.db").unwrap(), ("sqlite:///a/b.db".to_owned(), true));
        assert_eq!(durability("sqlite:///a/b.db?synchronous=normal").unwrap(), ("sqlite:///a/b.db".to_owned(), false));
        assert_eq!(
            durability("sqlite:///a.db?mode=rwc&synchronous=FULL").unwrap(),
            ("sqlite:///a.db?mode=rwc".to_owned(), true)
        );
        let e = durability("sqlite:///a.db?synchronous=off").unwrap_err().to_string();
        assert!(e.contains("synchronous=off: expected full (the default) or normal"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?synchronous=normal", dir.path().join("s.db").display());
        let store = SqlStore::open(&url).await.unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(&mut *conn).await.unwrap();
        assert_eq!(level, 1, "NORMAL");
        drop(conn);
        store.close().await;
    }

    #[tokio::test]
    async fn every_connection_has_the_settings_and_a_bad_file_is_refused_at_once() {
        assert!(PRAGMAS.contains(&format!("busy_timeout = {BUSY_TIMEOUT_MS};")), "{PRAGMAS}");
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::open(&dir.path().join("s.db").to_string_lossy()).await.unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        for (pragma, want) in [
            ("busy_timeout", "30000"),
            ("synchronous", "2"),
            ("foreign_keys", "1"),
            ("temp_store", "2"),
            ("cache_size", "-32768"),
            ("journal_mode", "wal"),
        ] {
            let row = sqlx::raw_sql(AssertSqlSafe(format!("PRAGMA {pragma}"))).fetch_one(&mut *conn).await.unwrap();
            let got = row.try_get::<i64, _>(0).map(|v| v.to_string()).or_else(|_| row.try_get::<String, _>(0));
            assert_eq!(got.unwrap(), want, "{pragma}");
        }
        drop(conn);
        store.close().await;
        // Not a database: named at once, not after the pool's timeout.
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, "not a database, only text; ".repeat(200)).unwrap();
        let refused = tokio::time::timeout(Duration::from_secs(20), SqlStore::open(&junk.to_string_lossy()))
            .await
            .expect("refused before any pool timeout");
        match refused {
            Err(e) => {
                assert!(e.to_string().contains("junk.db") && e.to_string().contains("not a SQLite database"), "{e}")
            }
            Ok(_) => panic!("a text file opened as a store"),
        }
        // An empty file is a new database.
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, "").unwrap();
        SqlStore::open(&empty.to_string_lossy()).await.unwrap().close().await;
    }

    #[tokio::test]
    async fn one_connection_serves_concurrent_calls_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("one.db").to_string_lossy().into_owned();
        let store = std::sync::Arc::new(SqlStore::open_with(&url, 1).await.unwrap());
        let calls: Vec<_> = (0..8)
            .map(|i| {
                let store = std::sync::Arc::clone(&store);
                tokio::spawn(async move {
                    store.ensure_project(&format!("p{i}"), "/tmp/x").await.unwrap();
                    store.frames(&FrameFilter::project(&format!("p{i}"))).await.unwrap().len()
                })
            })
            .collect();
        let all = tokio::time::timeout(Duration::from_secs(20), async {
            let mut found = Vec::new();
            for c in calls {
                found.push(c.await.unwrap());
            }
            found
        })
        .await
        .expect("calls take turns, none waits forever");
        assert_eq!(all, [0; 8]);
        assert_eq!(store.pool.size(), 1, "never a second connection");
    }

    #[test]
    fn placeholder_lists() {
        assert_eq!(placeholders(2, 2), "($1, $2), ($3, $4)");
    }
}
