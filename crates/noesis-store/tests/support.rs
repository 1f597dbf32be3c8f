//! Test stores: a fresh SQLite file, or a fresh schema in PostgreSQL.

use std::sync::atomic::{AtomicU64, Ordering};

use noesis_store::SqlStore;
use sqlx::Executor;

/// Used when `NOESIS_TEST_PG` is not set.
pub(crate) const DEFAULT_PG: &str = "postgres://root@127.0.0.1:5432/test";

pub(crate) struct TestStore {
    pub store: SqlStore,
    /// The URL another process can open the same store with.
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    schema: Option<(String, String)>,
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Some((base, schema)) = self.schema.take() {
            // Best effort: a thread of its own, since Drop cannot await.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async {
                    if let Ok(pool) = admin(&base).await {
                        let _ =
                            pool.execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))).await;
                        pool.close().await;
                    }
                });
            })
            .join();
        }
    }
}

pub(crate) async fn sqlite() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let store = SqlStore::open(&url).await.unwrap();
    TestStore { store, url, _dir: Some(dir), schema: None }
}

pub(crate) async fn admin(base: &str) -> Result<sqlx::AnyPool, sqlx::Error> {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(base)
        .await
}

/// The PostgreSQL URL to test against. An unreachable server fails `test`,
/// or skips it (`None`) with `NOESIS_SKIP_PG` set.
pub(crate) async fn pg_base(test: &str) -> Option<String> {
    let base = std::env::var("NOESIS_TEST_PG").unwrap_or_else(|_| DEFAULT_PG.to_owned());
    match admin(&base).await {
        Ok(pool) => {
            pool.close().await;
            Some(base)
        }
        Err(e) => {
            let why = format!("{base} is not reachable ({e}); NOESIS_TEST_PG names the server");
            noesis_testkit::skip::missing(noesis_testkit::skip::Dependency::Postgres, test, &why);
            None
        }
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A URL for a fresh schema of its own, so parallel tests never meet.
pub(crate) async fn pg_schema_url(base: &str) -> (String, String) {
    let schema = format!(
        "noesis_t_{}_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        uuid::Uuid::now_v7().simple().to_string().get(20..).unwrap_or("x")
    );
    let pool = admin(base).await.unwrap();
    pool.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).await.unwrap();
    pool.close().await;
    let sep = if base.contains('?') { '&' } else { '?' };
    (format!("{base}{sep}options[search_path]={schema}"), schema)
}

pub(crate) async fn postgres(test: &str) -> Option<TestStore> {
    let base = pg_base(test).await?;
    let (url, schema) = pg_schema_url(&base).await;
    let store = SqlStore::open(&url).await.unwrap();
    Some(TestStore { store, url, _dir: None, schema: Some((base, schema)) })
}

/// Runs raw SQL against a store (to break it on purpose).
pub(crate) async fn raw(url: &str, sql: &str) {
    sqlx::any::install_default_drivers();
    let url = if url.starts_with("sqlite://") { format!("{url}?mode=rw") } else { url.to_owned() };
    let pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
    pool.execute(sqlx::AssertSqlSafe(sql.to_owned())).await.unwrap();
    pool.close().await;
}

/// Runs `body` against a fresh store of each back end; see `both!`.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let t = crate::support::sqlite().await;
                    super::$name(&t).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(t) = crate::support::postgres(stringify!($name)).await else { return };
                    super::$name(&t).await;
                }
            )*
        }
    };
}

/// A small deterministic generator, so failures reproduce.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n as u64)).unwrap()
    }
}
