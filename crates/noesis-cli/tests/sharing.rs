//! Runs under sharing, on SQLite and on PostgreSQL: processes racing to
//! resume one run, and processes killed (SIGKILL) at random points while
//! they step runs whose tool has a side effect. Whatever happens, a call
//! that completed never runs again, the losers are told why, and the
//! store stays consistent.

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::time::Duration;

use noesis_testkit::{FakeServer, tool_loop};
use serde_json::json;

use crate::support::Work;

/// Where the runs are stored: the SQLite file in the work folder, or a
/// schema of its own in the test PostgreSQL.
pub(crate) struct Place {
    pub(crate) store: Option<String>,
    cleanup: Option<(String, String)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some((base, schema)) = self.cleanup.take() {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                if let Ok(pool) = admin(&base).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")))
                        .execute(&pool)
                        .await;
                    pool.close().await;
                }
            });
        }
    }
}

async fn admin(base: &str) -> Result<sqlx::AnyPool, sqlx::Error> {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(5)).connect(base).await
}

/// The store of `backend` for `test`; `None` when PostgreSQL is out of
/// reach and its opt-out is set (else the test fails, naming it).
pub(crate) fn place(backend: &str, test: &str) -> Option<Place> {
    if backend == "sqlite" {
        return Some(Place { store: None, cleanup: None });
    }
    let base = std::env::var("NOESIS_TEST_PG").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into());
    let schema = format!("noesis_cli_{}_{}", std::process::id(), test.len() ^ usize::from(test.as_bytes()[0]));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let made = rt.block_on(async {
        let pool = admin(&base).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))).execute(&pool).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&pool).await?;
        pool.close().await;
        Ok::<_, sqlx::Error>(())
    });
    if let Err(e) = made {
        let why = format!("{base} is not reachable ({e}); NOESIS_TEST_PG names the server");
        noesis_testkit::skip::missing(noesis_testkit::skip::Dependency::Postgres, test, &why);
        return None;
    }
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(Place { store: Some(format!("{base}{sep}options[search_path]={schema}")), cleanup: Some((base, schema)) })
}

impl Place {
    fn command(&self, work: &Work, server: &FakeServer) -> std::process::Command {
        let mut c = work.noesis_std();
        c.env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test");
        if let Some(url) = &self.store {
            c.env("NOESIS_STORE", url);
        }
        c.stdin(Stdio::null());
        c
    }

    fn store_url(&self, work: &Work) -> String {
        self.store.clone().unwrap_or_else(|| work.path().join(".noesis/noesis.db").to_string_lossy().into_owned())
    }
}

fn spawn(mut c: std::process::Command) -> Child {
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn finish(child: Child) -> (i32, String) {
    let o = child.wait_with_output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Every call of stored run `id` against the lines its tool appended to
/// `log`: a completed call ran exactly once, an interrupted one at most
/// once; how many calls were interrupted.
pub(crate) fn calls_ran_once(stored: &serde_json::Value, log: &str, id: &str, rounds: usize) -> usize {
    let lines: Vec<&str> = log.lines().collect();
    let mut interrupted = 0;
    let calls = stored["calls"].as_array().unwrap();
    for c in calls {
        let k = c["arguments"]["command"].as_str().unwrap().rsplit(' ').next().unwrap().to_owned();
        let times = lines.iter().filter(|l| **l == k).count();
        match c["status"].as_str().unwrap() {
            "completed" => assert_eq!(times, 1, "run {id}: completed call {k} ran {times} times\n{log}"),
            "interrupted" => {
                interrupted += 1;
                assert!(times <= 1, "run {id}: interrupted call {k} ran {times} times\n{log}");
            }
            other => panic!("run {id}: call {k} is {other}"),
        }
    }
    assert_eq!(calls.len(), rounds, "run {id}: {stored}");
    assert_eq!(stored["outcome"]["outcome"], "answer", "run {id}: {stored}");
    let distinct: BTreeSet<&&str> = lines.iter().collect();
    assert_eq!(lines.len(), distinct.len(), "run {id}: a line twice\n{log}");
    interrupted
}

fn state(rt: &tokio::runtime::Runtime, store: &dyn noesis_store::Store, id: &str) -> Option<serde_json::Value> {
    rt.block_on(store.agent_state(id, None)).unwrap().map(|s| s.state)
}

fn two_processes_racing_to_resume_one_run_run_each_call_once(backend: &str) {
    let Some(place) = place(backend, "racing_to_resume") else { return };
    let work = Work::new();
    const ROUNDS: usize = 3;
    let server = FakeServer::start(vec![tool_loop(
        "run_command",
        ROUNDS,
        |k| json!({"command": format!("sh slow.sh {k}")}),
        "done",
    )])
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut refusals = 0;
    for i in 0..8 {
        let dir = format!("ws{i}");
        // Slow enough that the second resume comes while the first steps.
        work.write(&format!("{dir}/slow.sh"), "sleep 0.2; echo \"$1\" >> log.txt\n");
        let ws = work.path().join(&dir).to_string_lossy().into_owned();
        let id = format!("race-{i}");
        // The run is killed once its first call has run, left for someone
        // to resume.
        let mut first = place.command(&work, &server);
        first.args(["agent", "Append lines", "--workspace", &ws, "--approve", "auto", "--quiet"]);
        first.args(["--allow-command", "sh slow.sh", "--run-id", &id]);
        let mut first = first.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let log_path = work.path().join(&dir).join("log.txt");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&log_path).is_ok_and(|l| l.contains('0')) {
            assert!(std::time::Instant::now() < deadline, "the first call never ran");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = first.kill();
        let _ = first.wait();
        let racers: Vec<Child> = (0..2)
            .map(|_| {
                let mut c = place.command(&work, &server);
                c.args(["agent", "resume", &id, "--quiet"]);
                spawn(c)
            })
            .collect();
        let ends: Vec<(i32, String)> = racers.into_iter().map(finish).collect();
        let store = rt.block_on(noesis_store::open(&place.store_url(&work))).unwrap();
        let stored = state(&rt, store.as_ref(), &id).unwrap();
        for (code, err) in &ends {
            if *code == 0 {
                continue;
            }
            // The loser is told why: the run is held, moved on, or finished.
            let told = err.contains(&format!("agent run {id} is held by cli:"))
                || err.contains("another driver stepped it")
                || err.contains("nothing to resume");
            assert!(told, "run {id}: {err}");
            refusals += usize::from(err.contains("is held by cli:"));
        }
        let log = std::fs::read_to_string(work.path().join(&dir).join("log.txt")).unwrap_or_default();
        calls_ran_once(&stored, &log, &id, ROUNDS);
        assert!(rt.block_on(store.check()).unwrap().is_empty());
    }
    assert!(refusals > 0, "the two resumes never met: the race was not tested");
}

#[test]
fn two_processes_racing_to_resume_one_run_run_each_call_once_sqlite() {
    two_processes_racing_to_resume_one_run_run_each_call_once("sqlite");
}

#[test]
fn two_processes_racing_to_resume_one_run_run_each_call_once_postgres() {
    two_processes_racing_to_resume_one_run_run_each_call_once("postgres");
}

/// A tiny deterministic generator for kill points; the seed is printed so
/// a failure can be repeated (`NOESIS_KILL_SEED`).
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    *seed >> 33
}

#[allow(clippy::print_stderr)] // the seed and the counts are for whoever reads a failure
fn kills_at_random_points_never_repeat_a_completed_call(backend: &str) {
    let Some(place) = place(backend, "kills_at_random_points") else { return };
    // A PostgreSQL run takes about three times a SQLite one here (a debug
    // build's client, a connection per process): fewer kills by default
    // keep the suite within its time; NOESIS_KILLS sets both.
    let default = if backend == "sqlite" { 1000 } else { 250 };
    let kills_wanted: usize = std::env::var("NOESIS_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let mut seed = std::env::var("NOESIS_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("NOESIS_KILL_SEED={seed}");
    let work = Work::new();
    const ROUNDS: usize = 6;
    let server = FakeServer::start(vec![tool_loop(
        "run_command",
        ROUNDS,
        |k| json!({"command": format!("sh step.sh {k}")}),
        "done",
    )])
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // How long a whole run takes here (a process per run, this back end's
    // commits): the kills fall within it.
    work.write("whole/step.sh", "sleep 0.01; echo \"$1\" >> log.txt; sleep 0.01\n");
    let began = std::time::Instant::now();
    let mut whole = place.command(&work, &server);
    whole.args(["agent", "Append lines", "--approve", "auto", "--quiet", "--allow-command", "sh step.sh"]);
    whole.arg("--workspace").arg(work.path().join("whole"));
    let (code, err) = finish(spawn(whole));
    assert_eq!(code, 0, "{err}");
    let span = u64::try_from(began.elapsed().as_millis()).unwrap().max(50);
    let (mut kills, mut mid_call, mut interrupted, mut runs) = (0usize, 0usize, 0usize, 0usize);
    while kills < kills_wanted {
        let dir = format!("ws{runs}");
        // The call's effect lands in the middle of its time: a kill during
        // the call may come before or after it.
        work.write(&format!("{dir}/step.sh"), "sleep 0.01; echo \"$1\" >> log.txt; sleep 0.01\n");
        let ws = work.path().join(&dir).to_string_lossy().into_owned();
        let id = format!("kill-{runs}");
        runs += 1;
        let mut done = false;
        // Started, then resumed and killed again until it ends by itself;
        // a run killed before its first state was stored is started again.
        for attempt in 0..12 {
            let store = rt.block_on(noesis_store::open(&place.store_url(&work))).unwrap();
            let exists = state(&rt, store.as_ref(), &id).is_some();
            drop(store);
            let mut c = place.command(&work, &server);
            if exists {
                c.args(["agent", "resume", &id, "--quiet"]);
            } else {
                c.args(["agent", "Append lines", "--workspace", &ws, "--approve", "auto", "--quiet"]);
                c.args(["--allow-command", "sh step.sh", "--run-id", &id]);
            }
            let mut child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
            if attempt < 11 && kills < kills_wanted {
                std::thread::sleep(Duration::from_millis(span / 10 + lcg(&mut seed) % span));
                if child.try_wait().unwrap().is_none() {
                    let _ = child.kill(); // SIGKILL
                    let _ = child.wait();
                    kills += 1;
                    let store = rt.block_on(noesis_store::open(&place.store_url(&work))).unwrap();
                    if let Some(s) = state(&rt, store.as_ref(), &id)
                        && s["calls"].as_array().unwrap().iter().any(|c| c["status"] == "running")
                    {
                        mid_call += 1;
                    }
                    continue;
                }
            }
            let o = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            if o.status.success() || err.contains("nothing to resume") {
                done = true;
                break;
            }
            panic!("run {id} (seed {seed}): exit {:?}\n{err}", o.status.code());
        }
        assert!(done, "run {id} never finished (seed {seed})");
        let store = rt.block_on(noesis_store::open(&place.store_url(&work))).unwrap();
        let stored = state(&rt, store.as_ref(), &id).unwrap();
        let log = std::fs::read_to_string(work.path().join(&dir).join("log.txt")).unwrap_or_default();
        interrupted += calls_ran_once(&stored, &log, &id, ROUNDS);
    }
    eprintln!(
        "{kills} kills over {runs} runs (a whole run: {span} ms): {mid_call} landed while a call ran; \
         {interrupted} calls interrupted"
    );
    // A fair share of the kills came while a tool was running.
    assert!(mid_call * 5 >= kills, "only {mid_call} of {kills} kills landed mid-call (seed {seed})");
    let store = rt.block_on(noesis_store::open(&place.store_url(&work))).unwrap();
    let problems = rt.block_on(store.check()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn kills_at_random_points_never_repeat_a_completed_call_sqlite() {
    kills_at_random_points_never_repeat_a_completed_call("sqlite");
}

#[test]
fn kills_at_random_points_never_repeat_a_completed_call_postgres() {
    kills_at_random_points_never_repeat_a_completed_call("postgres");
}
