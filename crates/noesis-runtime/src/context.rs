//! Where emitted context waits for later runs: the [`ContextStore`] trait,
//! an in-memory implementation, and the clock TTLs are measured by.
//!
//! A run of a module that emits context stores each kept entry under its
//! expanded key pattern with its TTL; a later run of a module that accepts a
//! type its `_context` lacks is served the newest live entry of that type.
//! The clock is injected ([`ContextOptions::clock`]) so expiry is tested
//! without sleeping. A failing store never fails a run: the run goes on
//! without stored context and the failure goes to
//! [`ContextOptions::on_warning`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use crate::OnText;

/// Milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time now.
    fn now_ms(&self) -> i64;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock that moves only when told (tests, replays). Clones share the
/// time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock stopped at `ms`.
    pub fn new(ms: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(ms)))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// One stored piece of emitted context.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ContextEntry {
    /// The expanded key pattern; with `kind`, the entry's identity (a later
    /// entry with the same key and type replaces it).
    pub key: String,
    /// The context type.
    pub kind: String,
    /// The context itself (secrets already redacted).
    pub value: Value,
    /// The module that emitted it.
    pub module: String,
    /// The user it belongs to, when its key pattern names `${user_id}`.
    pub user_id: Option<String>,
    /// The session it belongs to, when its key pattern names `${session_id}`.
    pub session_id: Option<String>,
    /// When it was stored (ms since the epoch).
    pub created_at_ms: i64,
    /// When it expires (ms since the epoch); `None` = persistent.
    pub expires_at_ms: Option<i64>,
}

/// What a run asks a store for.
#[derive(Debug, Clone, Copy)]
pub struct ContextLookup<'a> {
    /// The context type.
    pub kind: &'a str,
    /// The run's user (`anonymous` when it has none).
    pub user_id: &'a str,
    /// The run's session (`none` when it has none).
    pub session_id: &'a str,
    /// The time now (ms since the epoch).
    pub now_ms: i64,
    /// Entries stored before this are too old for the asking module
    /// (its `accepts[].ttl`).
    pub not_before_ms: Option<i64>,
}

impl ContextEntry {
    /// The rule every store applies: an entry serves a lookup when it is of
    /// the type, has not expired (`expires_at > now`), is recent enough, and
    /// each scope it carries is the lookup's.
    pub fn serves(&self, q: &ContextLookup<'_>) -> bool {
        self.kind == q.kind
            && self.expires_at_ms.is_none_or(|e| e > q.now_ms)
            && q.not_before_ms.is_none_or(|nb| self.created_at_ms >= nb)
            && self.user_id.as_deref().is_none_or(|u| u == q.user_id)
            && self.session_id.as_deref().is_none_or(|s| s == q.session_id)
    }
}

/// A store failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextStoreError(pub String);

impl std::fmt::Display for ContextStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ContextStoreError {}

/// Emitted context, kept for later runs. Object-safe.
#[async_trait]
pub trait ContextStore: Send + Sync {
    /// Stores an entry, replacing the one with the same key and type.
    async fn put(&self, entry: &ContextEntry) -> Result<(), ContextStoreError>;

    /// The newest entry that [`serves`](ContextEntry::serves) the lookup.
    async fn latest(&self, lookup: &ContextLookup<'_>) -> Result<Option<ContextEntry>, ContextStoreError>;
}

/// A store in memory (tests, servers without a database). Expired entries
/// are dropped when the next one is stored.
#[derive(Debug, Default)]
pub struct MemoryContextStore {
    entries: Mutex<Vec<ContextEntry>>,
}

impl MemoryContextStore {
    /// An empty store.
    pub fn new() -> MemoryContextStore {
        MemoryContextStore::default()
    }

    /// Every entry held, expired or not, oldest first.
    pub fn entries(&self) -> Vec<ContextEntry> {
        self.entries.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl ContextStore for MemoryContextStore {
    async fn put(&self, entry: &ContextEntry) -> Result<(), ContextStoreError> {
        let mut entries = self.entries.lock().map_err(|_| ContextStoreError("context store lock poisoned".into()))?;
        let now = entry.created_at_ms;
        entries.retain(|e| !(e.key == entry.key && e.kind == entry.kind) && e.expires_at_ms.is_none_or(|x| x > now));
        entries.push(entry.clone());
        Ok(())
    }

    async fn latest(&self, lookup: &ContextLookup<'_>) -> Result<Option<ContextEntry>, ContextStoreError> {
        let entries = self.entries.lock().map_err(|_| ContextStoreError("context store lock poisoned".into()))?;
        // Later in the list wins a tie: it was stored after.
        Ok(entries.iter().filter(|e| e.serves(lookup)).max_by_key(|e| e.created_at_ms).cloned())
    }
}

/// How a run meets stored context.
#[derive(Clone)]
pub struct ContextOptions {
    /// Where emitted context is kept and looked up.
    pub store: Arc<dyn ContextStore>,
    /// What TTLs are measured by.
    pub clock: Arc<dyn Clock>,
    /// The run's user (`${user_id}`); else `_context.user_profile.user_id`.
    pub user_id: Option<String>,
    /// The run's session (`${session_id}`); else
    /// `_context.session_state.session_id`.
    pub session_id: Option<String>,
    /// Told when the store fails (the run goes on without it).
    pub on_warning: Option<OnText>,
}

impl ContextOptions {
    /// A store with the system clock and no user or session.
    pub fn new(store: Arc<dyn ContextStore>) -> ContextOptions {
        ContextOptions { store, clock: Arc::new(SystemClock), user_id: None, session_id: None, on_warning: None }
    }

    pub(crate) fn warn(&self, message: &str) {
        if let Some(OnText(f)) = &self.on_warning {
            f(message);
        }
    }
}

impl std::fmt::Debug for ContextOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextOptions")
            .field("clock", &self.clock)
            .field("user_id", &self.user_id)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(key: &str, kind: &str, at: i64, expires: Option<i64>) -> ContextEntry {
        ContextEntry {
            key: key.into(),
            kind: kind.into(),
            value: json!({"at": at}),
            module: "m".into(),
            user_id: None,
            session_id: None,
            created_at_ms: at,
            expires_at_ms: expires,
        }
    }

    fn lookup(kind: &str, now: i64) -> ContextLookup<'_> {
        ContextLookup { kind, user_id: "anonymous", session_id: "none", now_ms: now, not_before_ms: None }
    }

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn newest_live_entry_of_the_type_is_served() {
        block(async {
            let s = MemoryContextStore::new();
            s.put(&entry("a", "t", 10, None)).await.unwrap();
            s.put(&entry("b", "t", 20, Some(100))).await.unwrap();
            s.put(&entry("c", "u", 30, None)).await.unwrap();
            assert_eq!(s.latest(&lookup("t", 50)).await.unwrap().unwrap().key, "b");
            // At the expiry instant it is gone; the older persistent one serves.
            assert_eq!(s.latest(&lookup("t", 100)).await.unwrap().unwrap().key, "a");
            assert_eq!(s.latest(&ContextLookup { not_before_ms: Some(11), ..lookup("t", 100) }).await.unwrap(), None);
            assert_eq!(s.latest(&lookup("v", 0)).await.unwrap(), None);
            // Same key and type: replaced. Expired entries are dropped on put.
            s.put(&entry("a", "t", 200, None)).await.unwrap();
            let keys: Vec<_> = s.entries().iter().map(|e| (e.key.clone(), e.created_at_ms)).collect();
            assert_eq!(keys, [("c".to_owned(), 30), ("a".to_owned(), 200)]);
        });
    }

    #[test]
    fn scoped_entries_serve_only_their_user_and_session() {
        let mut e = entry("k", "t", 1, None);
        e.user_id = Some("u1".into());
        assert!(e.serves(&ContextLookup { user_id: "u1", ..lookup("t", 2) }));
        assert!(!e.serves(&ContextLookup { user_id: "u2", ..lookup("t", 2) }));
        assert!(!e.serves(&lookup("t", 2)));
        e.session_id = Some("s1".into());
        assert!(!e.serves(&ContextLookup { user_id: "u1", ..lookup("t", 2) }));
        assert!(e.serves(&ContextLookup { user_id: "u1", session_id: "s1", ..lookup("t", 2) }));
    }

    #[test]
    fn manual_clock_moves_when_told() {
        let c = ManualClock::new(5);
        let shared = c.clone();
        c.advance(10);
        assert_eq!(shared.now_ms(), 15);
        assert!(SystemClock.now_ms() > 1_600_000_000_000);
    }
}
