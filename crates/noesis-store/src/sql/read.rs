//! Reads: whole frames in one snapshot, lookups for writers, invalidations
//! and sessions.

use super::*;

impl SqlStore {
    /// A read transaction: every statement in it sees one snapshot, so a
    /// frame another process commits between two of a load's queries is
    /// either wholly in the result or wholly out of it.
    pub(super) async fn read(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        let mut tx = self.pool.begin().await.ctx(|| "begin a read".into())?;
        if self.backend == Backend::Postgres {
            // The default (read committed) takes a new snapshot per statement.
            tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await
                .ctx(|| "begin a read".into())?;
        }
        Ok(tx)
    }

    pub(super) async fn load(&self, ids_sql: &str, args: &[Arg]) -> Result<Vec<CausalFrame>, StoreError> {
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
    pub(super) async fn lookup(
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

    /// Invalidated frames matching `cond` (on `frames f` / `frame_state
    /// st`), by depth, each with its reason: the one given (seeds), else its
    /// parent or a cited frame invalidated in the same batch; and each one's
    /// invalidation as a status change keyed by its integer key. The rows
    /// come back as one aggregated text (a driver round trip per row would
    /// cost more than the whole cascade), then are named and sorted here.
    pub(super) async fn invalidations(
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

    /// Sessions where `cond` = `arg`, newest first; `working`: only working
    /// sessions (not solve episodes).
    pub(super) async fn sessions_where(
        &self,
        cond: &str,
        arg: &str,
        limit: u32,
        working: bool,
    ) -> Result<Vec<SessionArtifacts>, StoreError> {
        let kind = if working { " AND kind = 'session'" } else { "" };
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT session_id, project_id, initial_prompt, scope, root_frame_id, conversation_log, created_at \
             FROM sessions WHERE {cond} = $1{kind} ORDER BY created_at DESC, session_id DESC LIMIT {limit}"
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
