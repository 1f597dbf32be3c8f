//! Emitted context on both back ends: the serving rule (type, expiry,
//! age, user/session scope, newest first), replacement by key, namespaces,
//! and expired rows dropped on the next write.

use noesis_frames::Timestamp;
use noesis_store::{ContextQuery, ContextRow, Store};
use serde_json::json;

use crate::support::{TestStore, raw};

both!(context_serving_rule, context_replaced_by_key_and_expired_rows_dropped, context_table_added_to_a_version_1_store);

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

fn row(ns: &str, key: &str, kind: &str, at: i64, expires: Option<i64>) -> ContextRow {
    ContextRow {
        namespace: ns.into(),
        key: key.into(),
        kind: kind.into(),
        value: json!({"key": key, "at": at}),
        module: "m".into(),
        user_id: None,
        session_id: None,
        created_at: t(at),
        expires_at: expires.map(t),
    }
}

fn q<'a>(kind: &'a str, now: i64) -> ContextQuery<'a> {
    ContextQuery { namespace: "p", kind, user_id: "anonymous", session_id: "none", now: t(now), not_before: None }
}

async fn key_of(s: &dyn Store, query: ContextQuery<'_>) -> Option<String> {
    s.latest_context(&query).await.unwrap().map(|r| r.key)
}

async fn context_serving_rule(t_: &TestStore) {
    let s = &t_.store;
    s.put_context(&row("p", "old", "session_state", 0, None)).await.unwrap();
    s.put_context(&row("p", "new", "session_state", 10, Some(100))).await.unwrap();
    s.put_context(&row("p", "other", "user_profile", 20, None)).await.unwrap();
    s.put_context(&row("q", "elsewhere", "session_state", 30, None)).await.unwrap();
    let mut u1 = row("p", "u1", "session_state", 40, None);
    u1.user_id = Some("u1".into());
    s.put_context(&u1).await.unwrap();
    let mut s1 = row("p", "s1", "session_state", 50, None);
    (s1.user_id, s1.session_id) = (Some("u1".into()), Some("s1".into()));
    s.put_context(&s1).await.unwrap();

    // The newest unscoped live entry; scoped ones only for their owner.
    assert_eq!(key_of(s, q("session_state", 60)).await.as_deref(), Some("new"));
    assert_eq!(key_of(s, ContextQuery { user_id: "u1", ..q("session_state", 60) }).await.as_deref(), Some("u1"));
    assert_eq!(
        key_of(s, ContextQuery { user_id: "u1", session_id: "s1", ..q("session_state", 60) }).await.as_deref(),
        Some("s1")
    );
    assert_eq!(key_of(s, ContextQuery { user_id: "u2", ..q("session_state", 60) }).await.as_deref(), Some("new"));
    // Expired at its instant: the persistent one serves.
    assert_eq!(key_of(s, q("session_state", 100)).await.as_deref(), Some("old"));
    // Too old for the asker.
    assert_eq!(key_of(s, ContextQuery { not_before: Some(t(5)), ..q("session_state", 100) }).await, None);
    assert_eq!(key_of(s, q("previous_result", 0)).await, None);
    let back = s.latest_context(&q("user_profile", 0)).await.unwrap().unwrap();
    assert_eq!(back, row("p", "other", "user_profile", 20, None));
}

async fn context_replaced_by_key_and_expired_rows_dropped(t_: &TestStore) {
    let s = &t_.store;
    s.put_context(&row("p", "k", "session_state", 0, Some(10))).await.unwrap();
    let mut again = row("p", "k", "session_state", 5, None);
    again.value = json!({"step": 2});
    s.put_context(&again).await.unwrap();
    let got = s.latest_context(&q("session_state", 1000)).await.unwrap().unwrap();
    assert_eq!((got.value, got.expires_at), (json!({"step": 2}), None));

    s.put_context(&row("p", "short", "analysis_cache", 0, Some(1))).await.unwrap();
    s.put_context(&row("p", "later", "analysis_cache", 2, Some(3))).await.unwrap();
    let n = count(t_).await;
    assert_eq!(n, 2, "the row expired at 1 was dropped when the one at 2 was written");
}

async fn count(t_: &TestStore) -> i64 {
    sqlx::any::install_default_drivers();
    let url = if t_.url.starts_with("sqlite://") { format!("{}?mode=ro", t_.url) } else { t_.url.clone() };
    let pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM context_entries").fetch_one(&pool).await.unwrap();
    pool.close().await;
    n
}

/// A store written before migration 2 gains the table when next opened.
async fn context_table_added_to_a_version_1_store(t_: &TestStore) {
    raw(&t_.url, "DROP TABLE context_entries").await;
    raw(&t_.url, "DELETE FROM _sqlx_migrations WHERE version = 2").await;
    let reopened = noesis_store::SqlStore::open(&t_.url).await.unwrap();
    reopened.put_context(&row("p", "k", "session_state", 0, None)).await.unwrap();
    assert_eq!(key_of(&reopened, q("session_state", 1)).await.as_deref(), Some("k"));
    reopened.close().await;
}
