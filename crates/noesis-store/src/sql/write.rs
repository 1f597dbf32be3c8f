//! Writes, each inside the caller's transaction: new frames with their
//! edges and file conditions, status changes, invalidation cascades.

use super::*;

impl SqlStore {
    /// Integer keys for `n` new frames. SQLite: after the largest, which is
    /// safe because the caller holds the write lock. PostgreSQL: drawn from
    /// the identity sequence, safe under concurrency.
    pub(super) async fn reserve_seqs(&self, conn: &mut AnyConnection, n: usize) -> Result<Vec<i64>, StoreError> {
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

    pub(super) async fn insert_tx(&self, conn: &mut AnyConnection, frames: &[CausalFrame]) -> Result<(), StoreError> {
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

    pub(super) async fn status_tx(conn: &mut AnyConnection, u: &noesis_frames::StatusUpdate) -> Result<(), StoreError> {
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
    pub(super) async fn invalidate_tx(
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
}
