//! PostgreSQL over TLS: `sslmode` in the store URL is honoured. The local
//! server has TLS on with a self-signed certificate (Debian's default), so
//! `require` encrypts, `verify-full` refuses the certificate, and
//! `disable` stays in the clear.

use noesis_store::SqlStore;
use sqlx::Row;

use crate::support::{admin, pg_base, pg_schema_url};

/// Whether the store's connection, named `app`, is encrypted, as the server sees it.
async fn encrypted(base: &str, app: &str) -> Option<bool> {
    let pool = admin(base).await.unwrap();
    let row = sqlx::query(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid WHERE a.application_name = $1 LIMIT 1",
    )
    .bind(app)
    .fetch_optional(&pool)
    .await
    .unwrap();
    pool.close().await;
    row.map(|r| r.get::<bool, _>(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_in_the_url_is_honoured() {
    let Some(base) = pg_base("sslmode_in_the_url_is_honoured").await else { return };
    let pool = admin(&base).await.unwrap();
    let ssl: String = sqlx::query("SHOW ssl").fetch_one(&pool).await.unwrap().get(0);
    pool.close().await;
    assert_eq!(ssl, "on", "the test server must have TLS on (Debian's PostgreSQL does by default)");
    let (url, schema) = pg_schema_url(&base).await;
    for (mode, tls) in [("require", true), ("prefer", true), ("disable", false)] {
        let app = format!("noesis-tls-{mode}-{}", std::process::id());
        let store = SqlStore::open(&format!("{url}&sslmode={mode}&application_name={app}")).await;
        let store = store.unwrap_or_else(|e| panic!("sslmode={mode}: {e}"));
        assert_eq!(encrypted(&base, &app).await, Some(tls), "sslmode={mode}");
        store.close().await;
    }
    // The self-signed certificate does not verify.
    let Err(e) = SqlStore::open(&format!("{url}&sslmode=verify-full")).await else {
        panic!("verify-full must refuse a self-signed certificate");
    };
    let text = e.to_string().to_lowercase();
    assert!(text.contains("certificate") || text.contains("tls"), "{e}");
    let pool = admin(&base).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&pool).await.unwrap();
    pool.close().await;
}
