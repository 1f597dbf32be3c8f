//! Agent runs: a log of the states a run passes through, kept by step, and
//! the lease that says who may step it.
//!
//! A state is stored as the changes since the step stored before it (a
//! delta, see `noesis_json::delta`) or, now and then, whole (a snapshot), so
//! the bytes written per step follow the size of the step, not of the run.
//! A snapshot is written when the deltas since the last one add up to its
//! size (and at least [`MIN_SNAPSHOT_GAP`]): the bytes written stay within
//! about twice the deltas' and a read applies at most a snapshot's worth of
//! deltas. Every step stays readable (`replay`, `fork`, `show --at`); with
//! snapshots that far apart, all of them together are at most about twice
//! the run's final size, so none is pruned.
//!
//! Saving a state and moving the run's summary forward is one transaction,
//! conditional on the summary's step being the one the delta was made
//! from, so a crash leaves the previous state whole and two writers cannot
//! interleave their deltas.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::error::{Context, StoreError};

/// One stored state of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentState {
    /// The run.
    pub run_id: String,
    /// Its project.
    pub project_id: String,
    /// The task, for listings.
    pub task: String,
    /// What the run is doing (`running`, `awaiting_approval`, `done`, …).
    pub status: String,
    /// The run's step counter at this state.
    pub step: i64,
    /// The run this one was forked from, if any.
    pub forked_from: Option<String>,
    /// The run's JSON.
    pub state: serde_json::Value,
    /// When it was stored (ms since the epoch).
    pub at: i64,
}

/// A run as listed: its latest state's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSummary {
    /// The run.
    pub run_id: String,
    /// The task.
    pub task: String,
    /// What it is doing.
    pub status: String,
    /// Its latest stored step.
    pub latest_step: i64,
    /// The run it was forked from.
    pub forked_from: Option<String>,
    /// When it last changed.
    pub updated_at: i64,
}

/// The right to step one run, held until `expires_at` unless renewed.
/// Every state saved under it is refused once another holder has taken
/// the run over (its epoch is then higher).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The run.
    pub run_id: String,
    /// Who holds it (a process, a server, a worker).
    pub holder: String,
    /// Raised by each taking of the run; writes carry it.
    pub epoch: i64,
    /// Until when (ms since the epoch) it holds without a heartbeat.
    pub expires_at: i64,
}

/// Who holds a run's lease, as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The holder.
    pub holder: String,
    /// Its epoch.
    pub epoch: i64,
    /// Its last heartbeat (ms since the epoch).
    pub heartbeat_at: i64,
    /// When it lapses unless renewed.
    pub expires_at: i64,
}

impl LeaseHolder {
    /// "held by H (last heard from N s ago, lapses in M s)".
    pub fn describe(&self, now_ms: i64) -> String {
        let secs = |ms: i64| format!("{:.1} s", ms.max(0) as f64 / 1000.0);
        format!(
            "held by {} (last heard from {} ago; the lease lapses in {} unless renewed)",
            self.holder,
            secs(now_ms - self.heartbeat_at),
            secs(self.expires_at - now_ms)
        )
    }
}

/// What asking for a lease gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGrant {
    /// The run is the asker's to step.
    Granted(Lease),
    /// Another holder's lease is live.
    Held(LeaseHolder),
}

/// Fewest delta bytes between two snapshots of a run.
pub const MIN_SNAPSHOT_GAP: usize = 32 * 1024;

/// Runs whose last saved state a store keeps in memory to make deltas from.
const BASES: usize = 64;

/// The last state saved of a run, to make the next delta from.
struct Base {
    step: i64,
    state: Value,
    /// Delta bytes written since the last snapshot.
    since: usize,
    /// The last snapshot's bytes.
    snapshot: usize,
    used: u64,
}

/// The bases of the runs this store saved lately.
#[derive(Default)]
pub(crate) struct Bases {
    runs: Mutex<(HashMap<String, Base>, u64)>,
}

impl std::fmt::Debug for Bases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bases")
    }
}

impl Bases {
    fn take(&self, run_id: &str) -> Option<Base> {
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0.remove(run_id)
    }

    fn put(&self, run_id: &str, mut base: Base) {
        let mut guard = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (runs, tick) = &mut *guard;
        *tick += 1;
        base.used = *tick;
        if runs.len() >= BASES
            && let Some(oldest) = runs.iter().min_by_key(|(_, b)| b.used).map(|(k, _)| k.clone())
        {
            runs.remove(&oldest);
        }
        runs.insert(run_id.to_owned(), base);
    }
}

/// How one state goes into the log.
enum Entry {
    Snapshot,
    Delta { base: i64, delta: Value },
}

fn plan(base: Option<&Base>, s: &AgentState) -> Entry {
    match base {
        Some(b) if b.step < s.step => match noesis_json::delta::diff(&b.state, &s.state) {
            Some(delta) => Entry::Delta { base: b.step, delta },
            None => Entry::Delta { base: b.step, delta: json!({"{": {}}) },
        },
        _ => Entry::Snapshot,
    }
}

/// Saves `s` (under `lease` when given), as a delta from the last state
/// this store saved of the run when it has it, else whole.
pub(crate) async fn save(
    store: &crate::SqlStore,
    bases: &Bases,
    s: &AgentState,
    lease: Option<&Lease>,
) -> Result<(), StoreError> {
    let mut base = bases.take(&s.run_id);
    let mut entry = plan(base.as_ref(), s);
    if let (Entry::Delta { delta, .. }, Some(b)) = (&entry, &base) {
        // Too far from the last snapshot: write the state whole.
        let len = delta.to_string().len();
        if b.since + len >= b.snapshot.max(MIN_SNAPSHOT_GAP) {
            entry = Entry::Snapshot;
        }
    }
    loop {
        let body = match &entry {
            Entry::Snapshot => s.state.to_string(),
            Entry::Delta { base, delta } => delta_body(*base, delta),
        };
        let mut tx = store.write().await?;
        fence(&mut tx, &s.run_id, lease, s.at).await?;
        if !write(&mut tx, s, &entry, &body).await? {
            drop(tx);
            if matches!(entry, Entry::Delta { .. }) {
                // Another writer moved the run since this store's base:
                // the whole state is still right.
                entry = Entry::Snapshot;
                base = None;
                continue;
            }
            let latest = latest_step(store.pool(), &s.run_id).await?;
            return Err(StoreError::Conflict(format!(
                "agent run {}: the store holds step {latest}, ahead of this writer's step {}; it stops here",
                s.run_id, s.step
            )));
        }
        tx.commit().await.ctx(|| format!("commit agent run {}", s.run_id))?;
        let next = match (entry, base) {
            (Entry::Delta { delta, .. }, Some(mut b)) => {
                noesis_json::delta::apply(&mut b.state, &delta).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Base { step: s.step, state: b.state, since: b.since + body.len(), snapshot: b.snapshot, used: 0 }
            }
            _ => Base { step: s.step, state: s.state.clone(), since: 0, snapshot: body.len(), used: 0 },
        };
        bases.put(&s.run_id, next);
        return Ok(());
    }
}

/// Saves the change `delta` from the run's state at step `base` to step
/// `s.step` (`s.state` is not read), as its writer made it; refused
/// ([`StoreError::Conflict`]) unless the store is at step `base`.
pub(crate) async fn save_delta(
    store: &crate::SqlStore,
    bases: &Bases,
    s: &AgentState,
    base: i64,
    delta: &Value,
    lease: Option<&Lease>,
) -> Result<(), StoreError> {
    // This store's own base of the run is behind from now on.
    drop(bases.take(&s.run_id));
    let body = delta_body(base, delta);
    let mut tx = store.write().await?;
    fence(&mut tx, &s.run_id, lease, s.at).await?;
    if base >= s.step || !write(&mut tx, s, &Entry::Delta { base, delta: Value::Null }, &body).await? {
        return Err(StoreError::Conflict(format!(
            "agent run {}: the store is not at step {base}, which this change was made from",
            s.run_id
        )));
    }
    tx.commit().await.ctx(|| format!("commit agent run {}", s.run_id))
}

/// A delta's stored form, `{"base": STEP, "d": DELTA}`, written straight
/// out: building it as a value would copy the delta on every checkpoint.
fn delta_body(base: i64, delta: &Value) -> String {
    format!("{{\"base\":{base},\"d\":{delta}}}")
}

/// Writes the summary and the log entry; `false` when the summary is not
/// where the entry was made from (nothing written).
async fn write(tx: &mut sqlx::AnyConnection, s: &AgentState, entry: &Entry, body: &str) -> Result<bool, StoreError> {
    let (guard, base) = match entry {
        // A stale writer never moves the run back.
        Entry::Snapshot => ("agent_runs.latest_step <= excluded.latest_step", -1),
        Entry::Delta { base, .. } => ("agent_runs.latest_step = $8", *base),
    };
    let moved = sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO agent_runs (run_id, project_id, task, status, latest_step, forked_from, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7) \
         ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, latest_step = excluded.latest_step, \
         updated_at = excluded.updated_at WHERE {guard}"
    )))
    .bind(s.run_id.clone())
    .bind(s.project_id.clone())
    .bind(s.task.clone())
    .bind(s.status.clone())
    .bind(s.step)
    .bind(s.forked_from.clone())
    .bind(s.at)
    .bind(base)
    .execute(&mut *tx)
    .await
    .ctx(|| format!("save agent run {}", s.run_id))?;
    if moved.rows_affected() == 0 {
        return Ok(false);
    }
    let kind = if matches!(entry, Entry::Snapshot) { "snapshot" } else { "delta" };
    // The same step saved twice (a retried checkpoint) keeps the last.
    sqlx::query(
        "INSERT INTO agent_run_states (run_id, step, state, at, kind) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (run_id, step) DO UPDATE SET state = excluded.state, at = excluded.at, kind = excluded.kind",
    )
    .bind(s.run_id.clone())
    .bind(s.step)
    .bind(body.to_owned())
    .bind(s.at)
    .bind(kind)
    .execute(&mut *tx)
    .await
    .ctx(|| format!("save step {} of agent run {}", s.step, s.run_id))?;
    Ok(true)
}

async fn latest_step(pool: &AnyPool, run_id: &str) -> Result<i64, StoreError> {
    sqlx::query_scalar("SELECT latest_step FROM agent_runs WHERE run_id = $1")
        .bind(run_id.to_owned())
        .fetch_optional(pool)
        .await
        .ctx(|| format!("read agent run {run_id}"))
        .map(Option::unwrap_or_default)
}

/// Refuses a write by a holder whose lease was taken over, or a write
/// without a lease to a run whose lease is live; a holder's write is its
/// heartbeat too.
async fn fence(tx: &mut sqlx::AnyConnection, run_id: &str, lease: Option<&Lease>, now: i64) -> Result<(), StoreError> {
    match lease {
        Some(l) => {
            let beat = sqlx::query(
                "UPDATE run_leases SET heartbeat_at = $4, expires_at = $4 + (expires_at - heartbeat_at) \
                 WHERE run_id = $1 AND holder = $2 AND epoch = $3",
            )
            .bind(l.run_id.clone())
            .bind(l.holder.clone())
            .bind(l.epoch)
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("check the lease of agent run {run_id}"))?;
            if beat.rows_affected() == 1 {
                return Ok(());
            }
            let now_held = holder_of(&mut *tx, run_id).await?;
            Err(StoreError::Fenced(match now_held {
                Some(h) => format!(
                    "agent run {run_id}: this process's lease (epoch {}) was taken over; the run is now {}; \
                     this process stops stepping it",
                    l.epoch,
                    h.describe(now)
                ),
                None => format!("agent run {run_id}: this process's lease (epoch {}) was released", l.epoch),
            }))
        }
        None => match holder_of(&mut *tx, run_id).await? {
            Some(h) if h.expires_at > now => {
                Err(StoreError::Fenced(format!("agent run {run_id} is {}; only its holder writes it", h.describe(now))))
            }
            _ => Ok(()),
        },
    }
}

async fn holder_of(conn: &mut sqlx::AnyConnection, run_id: &str) -> Result<Option<LeaseHolder>, StoreError> {
    let row = sqlx::query("SELECT holder, epoch, heartbeat_at, expires_at FROM run_leases WHERE run_id = $1")
        .bind(run_id.to_owned())
        .fetch_optional(&mut *conn)
        .await
        .ctx(|| format!("read the lease of agent run {run_id}"))?;
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    row.map(|r| {
        Ok(LeaseHolder {
            holder: r.try_get(0).map_err(corrupt)?,
            epoch: r.try_get(1).map_err(corrupt)?,
            heartbeat_at: r.try_get(2).map_err(corrupt)?,
            expires_at: r.try_get(3).map_err(corrupt)?,
        })
    })
    .transpose()
}

/// Who holds `run_id`'s lease, if anyone ever took it.
pub(crate) async fn lease_of(pool: &AnyPool, run_id: &str) -> Result<Option<LeaseHolder>, StoreError> {
    let mut conn = pool.acquire().await.ctx(|| "connect".into())?;
    holder_of(&mut conn, run_id).await
}

/// Takes `run_id`'s lease for `holder` for `ttl_ms` unless another holder's
/// lease is live at `now`. Taking a lapsed lease (or one's own again)
/// raises the epoch, which fences off every earlier writer.
pub(crate) async fn acquire(
    store: &crate::SqlStore,
    run_id: &str,
    holder: &str,
    ttl_ms: i64,
    now: i64,
) -> Result<LeaseGrant, StoreError> {
    for _ in 0..5 {
        let mut tx = store.write().await?;
        let seen = holder_of(&mut tx, run_id).await?;
        let epoch = match &seen {
            Some(h) if h.expires_at > now && h.holder != holder => return Ok(LeaseGrant::Held(h.clone())),
            Some(h) => {
                let taken = sqlx::query(
                    "UPDATE run_leases SET holder = $2, epoch = epoch + 1, acquired_at = $3, heartbeat_at = $3, \
                     expires_at = $4 WHERE run_id = $1 AND epoch = $5",
                )
                .bind(run_id.to_owned())
                .bind(holder.to_owned())
                .bind(now)
                .bind(now + ttl_ms)
                .bind(h.epoch)
                .execute(&mut *tx)
                .await
                .ctx(|| format!("take the lease of agent run {run_id}"))?;
                (taken.rows_affected() == 1).then_some(h.epoch + 1)
            }
            None => {
                let made = sqlx::query(
                    "INSERT INTO run_leases (run_id, holder, epoch, acquired_at, heartbeat_at, expires_at) \
                     VALUES ($1, $2, 1, $3, $3, $4) ON CONFLICT (run_id) DO NOTHING",
                )
                .bind(run_id.to_owned())
                .bind(holder.to_owned())
                .bind(now)
                .bind(now + ttl_ms)
                .execute(&mut *tx)
                .await
                .ctx(|| format!("take the lease of agent run {run_id}"))?;
                (made.rows_affected() == 1).then_some(1)
            }
        };
        if let Some(epoch) = epoch {
            tx.commit().await.ctx(|| format!("commit the lease of agent run {run_id}"))?;
            return Ok(LeaseGrant::Granted(Lease {
                run_id: run_id.to_owned(),
                holder: holder.to_owned(),
                epoch,
                expires_at: now + ttl_ms,
            }));
        }
    }
    Err(StoreError::Conflict(format!("agent run {run_id}: its lease kept changing hands; try again")))
}

/// Renews `lease` until `now + ttl_ms`; [`StoreError::Fenced`] when it was
/// taken over.
pub(crate) async fn renew(store: &crate::SqlStore, lease: &Lease, ttl_ms: i64, now: i64) -> Result<Lease, StoreError> {
    let mut tx = store.write().await?;
    let beat = sqlx::query(
        "UPDATE run_leases SET heartbeat_at = $4, expires_at = $5 WHERE run_id = $1 AND holder = $2 AND epoch = $3",
    )
    .bind(lease.run_id.clone())
    .bind(lease.holder.clone())
    .bind(lease.epoch)
    .bind(now)
    .bind(now + ttl_ms)
    .execute(&mut *tx)
    .await
    .ctx(|| format!("renew the lease of agent run {}", lease.run_id))?;
    if beat.rows_affected() == 0 {
        let now_held = holder_of(&mut tx, &lease.run_id).await?;
        return Err(StoreError::Fenced(match now_held {
            Some(h) => {
                format!("agent run {}: the lease was taken over; the run is now {}", lease.run_id, h.describe(now))
            }
            None => format!("agent run {}: the lease was released", lease.run_id),
        }));
    }
    tx.commit().await.ctx(|| format!("commit the lease of agent run {}", lease.run_id))?;
    Ok(Lease { expires_at: now + ttl_ms, ..lease.clone() })
}

/// Gives `lease` up (nothing happens when it was taken over meanwhile).
pub(crate) async fn release(pool: &AnyPool, lease: &Lease) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM run_leases WHERE run_id = $1 AND holder = $2 AND epoch = $3")
        .bind(lease.run_id.clone())
        .bind(lease.holder.clone())
        .bind(lease.epoch)
        .execute(pool)
        .await
        .ctx(|| format!("release the lease of agent run {}", lease.run_id))
        .map(drop)
}

/// The state of `run_id` at `step`, or its latest (the highest step at or
/// below `step` when one is given): the latest snapshot at or before it
/// and the deltas after that.
pub(crate) async fn load(pool: &AnyPool, run_id: &str, step: Option<i64>) -> Result<Option<AgentState>, StoreError> {
    let rows = sqlx::query(AssertSqlSafe(
        "SELECT r.run_id, r.project_id, r.task, r.status, s.step, r.forked_from, s.state, s.at, s.kind \
         FROM agent_runs r JOIN agent_run_states s ON s.run_id = r.run_id \
         WHERE r.run_id = $1 AND s.step <= $2 AND s.step >= COALESCE((SELECT MAX(step) FROM agent_run_states \
         WHERE run_id = $1 AND kind = 'snapshot' AND step <= $2), 0) ORDER BY s.step"
            .to_owned(),
    ))
    .bind(run_id.to_owned())
    .bind(step.unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .ctx(|| format!("load agent run {run_id}"))?;
    let Some(last) = rows.last() else { return Ok(None) };
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    let mut state = Value::Null;
    let mut at_step = None;
    for r in &rows {
        let row_step: i64 = r.try_get(4).map_err(corrupt)?;
        let kind: String = r.try_get(8).map_err(corrupt)?;
        let text: String = r.try_get(6).map_err(corrupt)?;
        let bad = |what: String| StoreError::Corrupt(format!("agent run {run_id}, step {row_step}: {what}"));
        let body: Value = serde_json::from_str(&text).map_err(|e| bad(format!("its state is not JSON: {e}")))?;
        match (kind.as_str(), at_step) {
            ("snapshot", _) => state = body,
            ("delta", Some(prev)) => {
                if body["base"].as_i64() != Some(prev) {
                    return Err(bad(format!("a change made from step {} follows step {prev}", body["base"])));
                }
                noesis_json::delta::apply(&mut state, &body["d"]).map_err(|e| bad(e.to_string()))?;
            }
            ("delta", None) => return Err(bad("the log begins with a change, not a whole state".into())),
            (other, _) => return Err(bad(format!("unknown kind of entry `{other}`"))),
        }
        at_step = Some(row_step);
    }
    Ok(Some(AgentState {
        run_id: last.try_get(0).map_err(corrupt)?,
        project_id: last.try_get(1).map_err(corrupt)?,
        task: last.try_get(2).map_err(corrupt)?,
        status: last.try_get(3).map_err(corrupt)?,
        step: last.try_get(4).map_err(corrupt)?,
        forked_from: last.try_get(5).map_err(corrupt)?,
        state,
        at: last.try_get(7).map_err(corrupt)?,
    }))
}

/// A project's runs, most recently changed first.
pub(crate) async fn list(pool: &AnyPool, project_id: &str, limit: u32) -> Result<Vec<AgentSummary>, StoreError> {
    let rows = sqlx::query(
        "SELECT run_id, task, status, latest_step, forked_from, updated_at FROM agent_runs \
         WHERE project_id = $1 ORDER BY updated_at DESC, run_id DESC LIMIT $2",
    )
    .bind(project_id.to_owned())
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .ctx(|| "list agent runs".into())?;
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    rows.iter()
        .map(|r| {
            Ok(AgentSummary {
                run_id: r.try_get(0).map_err(corrupt)?,
                task: r.try_get(1).map_err(corrupt)?,
                status: r.try_get(2).map_err(corrupt)?,
                latest_step: r.try_get(3).map_err(corrupt)?,
                forked_from: r.try_get(4).map_err(corrupt)?,
                updated_at: r.try_get(5).map_err(corrupt)?,
            })
        })
        .collect()
}

/// An event a server streamed of a run, by the id it went out under.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvent {
    /// Its id in the run's stream (1, 2, …).
    pub seq: i64,
    /// What happened (`model_call`, `tool_result`, …).
    pub kind: String,
    /// Its data.
    pub data: Value,
    /// When (ms since the epoch).
    pub at: i64,
}

/// Appends `events` to run `run_id`'s stream in one transaction; an id
/// already stored is refused ([`StoreError::Conflict`]): ids are never
/// reused for another event.
pub(crate) async fn append_events(
    store: &crate::SqlStore,
    run_id: &str,
    events: &[RunEvent],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut tx = store.write().await?;
    for e in events {
        let done = sqlx::query(
            "INSERT INTO agent_run_events (run_id, seq, kind, data, at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (run_id, seq) DO NOTHING",
        )
        .bind(run_id.to_owned())
        .bind(e.seq)
        .bind(e.kind.clone())
        .bind(e.data.to_string())
        .bind(e.at)
        .execute(&mut *tx)
        .await
        .ctx(|| format!("store event {} of agent run {run_id}", e.seq))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Conflict(format!("agent run {run_id}: event {} is stored already", e.seq)));
        }
    }
    tx.commit().await.ctx(|| format!("commit events of agent run {run_id}"))
}

/// Run `run_id`'s stored events after id `after`, at most `limit`, in order.
pub(crate) async fn events(pool: &AnyPool, run_id: &str, after: i64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
    let rows = sqlx::query(
        "SELECT seq, kind, data, at FROM agent_run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(run_id.to_owned())
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .ctx(|| format!("read events of agent run {run_id}"))?;
    let corrupt = |e: sqlx::Error| StoreError::Corrupt(e.to_string());
    rows.iter()
        .map(|r| {
            let text: String = r.try_get(2).map_err(corrupt)?;
            Ok(RunEvent {
                seq: r.try_get(0).map_err(corrupt)?,
                kind: r.try_get(1).map_err(corrupt)?,
                data: serde_json::from_str(&text)
                    .map_err(|e| StoreError::Corrupt(format!("agent run {run_id}: an event is not JSON: {e}")))?,
                at: r.try_get(3).map_err(corrupt)?,
            })
        })
        .collect()
}

/// The id of run `run_id`'s last stored event (0: none).
pub(crate) async fn last_event(pool: &AnyPool, run_id: &str) -> Result<i64, StoreError> {
    sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM agent_run_events WHERE run_id = $1")
        .bind(run_id.to_owned())
        .fetch_one(pool)
        .await
        .ctx(|| format!("read events of agent run {run_id}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_delta_body_reads_back_as_its_base_and_change() {
        let delta = serde_json::json!({"{": {"step": {"=": 4}, "note": {"=": "a \"quoted\" line"}}});
        let body: serde_json::Value = serde_json::from_str(&super::delta_body(3, &delta)).unwrap();
        assert_eq!((body["base"].as_i64(), &body["d"]), (Some(3), &delta));
    }
}
