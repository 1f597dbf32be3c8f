//! Runs across worker processes on a Temporal dev server (each test starts
//! its own on 127.0.0.1, from `scripts/temporal.sh`), the store a SQLite
//! file every process shares. Workers are SIGKILLed and the server is
//! killed and restarted on its database file while runs go on: every run
//! finishes, a call that completed never runs again, a call that was
//! running when its worker died comes back interrupted, and a run waiting
//! for approval holds no worker and survives both.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use noesis_testkit::{FakeServer, tool_loop};
use serde_json::{Value, json};

use crate::sharing::calls_ran_once;
use crate::support::Work;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A Temporal dev server of one test, on its own ports and database file.
struct Temporal {
    bin: PathBuf,
    db: PathBuf,
    port: u16,
    http_port: u16,
    child: Option<Child>,
}

impl Temporal {
    /// Started and answering; `None` when the server is not installed and
    /// its opt-out is set (else the test fails, naming it).
    fn start(work: &Work, test: &str) -> Option<Temporal> {
        let Some(bin) = std::env::var_os("NOESIS_TEMPORAL_BIN").map(PathBuf::from).filter(|p| p.exists()) else {
            let why = "NOESIS_TEMPORAL_BIN names no `temporal` program (scripts/temporal.sh installs it)";
            noesis_testkit::skip::missing(noesis_testkit::skip::Dependency::Temporal, test, why);
            return None;
        };
        let mut t = Temporal {
            bin,
            db: work.path().join("temporal.db"),
            port: free_port(),
            http_port: free_port(),
            child: None,
        };
        t.up();
        Some(t)
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn up(&mut self) {
        let child = std::process::Command::new(&self.bin)
            .args(["server", "start-dev", "--ip", "127.0.0.1", "--headless", "--log-level", "error"])
            .args(["--port", &self.port.to_string(), "--http-port", &self.http_port.to_string()])
            .arg("--db-filename")
            .arg(&self.db)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = std::process::Command::new(&self.bin)
                .args(["operator", "namespace", "describe", "--namespace", "default", "--address", &self.address()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the Temporal dev server did not answer on {}", self.address());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILL, as a crash.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Temporal {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Worker processes; killed when dropped.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Where the runs are stored: none is the SQLite file under the work
/// folder's NOESIS_HOME; else a URL every process is given.
type StoreUrl<'a> = Option<&'a str>;

fn noesis(work: &Work, server: &FakeServer, store: StoreUrl<'_>) -> std::process::Command {
    let mut c = work.noesis_std();
    c.env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test").stdin(Stdio::null());
    if let Some(url) = store {
        c.env("NOESIS_STORE", url);
    }
    c
}

fn worker(work: &Work, server: &FakeServer, temporal: &Temporal, name: &str, store: StoreUrl<'_>) -> Child {
    let log = std::fs::File::create(work.path().join(format!("{name}.log"))).unwrap();
    noesis(work, server, store)
        .args(["worker", "--temporal", &temporal.address(), "--concurrency", "8", "--grace", "1"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Submits a run to the cluster and returns once it is submitted.
fn submit(
    work: &Work,
    server: &FakeServer,
    temporal: &Temporal,
    id: &str,
    ws: &str,
    approve: &str,
    store: StoreUrl<'_>,
) {
    let out = noesis(work, server, store)
        .args(["agent", "Append lines", "--workspace", ws, "--approve", approve, "--quiet"])
        .args(["--allow-command", "sh step.sh", "--run-id", id, "--on", &temporal.address(), "--detach"])
        .output()
        .unwrap();
    assert!(out.status.success(), "submitting {id}: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), id);
}

fn store(rt: &tokio::runtime::Runtime, work: &Work) -> Box<dyn noesis_store::Store> {
    store_at(rt, work, None)
}

fn store_at(rt: &tokio::runtime::Runtime, work: &Work, url: StoreUrl<'_>) -> Box<dyn noesis_store::Store> {
    let file = work.path().join(".noesis/noesis.db").to_string_lossy().into_owned();
    rt.block_on(noesis_store::open(url.unwrap_or(&file))).unwrap()
}

fn state(rt: &tokio::runtime::Runtime, store: &dyn noesis_store::Store, id: &str) -> Option<Value> {
    rt.block_on(store.agent_state(id, None)).unwrap().map(|s| s.state)
}

/// Waits until `done` holds for every run, reading the store; panics with
/// the worker logs after `limit`.
fn wait_for(
    rt: &tokio::runtime::Runtime,
    work: &Work,
    url: StoreUrl<'_>,
    ids: &[String],
    limit: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let s = store_at(rt, work, url);
        let left: Vec<&String> = ids.iter().filter(|id| !state(rt, s.as_ref(), id).is_some_and(|v| done(&v))).collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            let logs: String = std::fs::read_dir(work.path())
                .unwrap()
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .map(|e| format!("--- {:?}\n{}", e.file_name(), std::fs::read_to_string(e.path()).unwrap_or_default()))
                .collect();
            panic!("{} runs never {what}: {left:?}\n{logs}", left.len());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ended(v: &Value) -> bool {
    !v["outcome"].is_null()
}

const ROUNDS: usize = 4;

fn append_loop() -> FakeServer {
    FakeServer::start(vec![tool_loop("run_command", ROUNDS, |k| json!({"command": format!("sh step.sh {k}")}), "done")])
        .unwrap()
}

/// The call's effect lands in the middle of its time, so a kill during a
/// call may come before or after it.
const STEP: &str = "sleep 0.3; echo \"$1\" >> log.txt; sleep 0.3\n";

#[allow(clippy::print_stderr)] // the figures are for whoever reads the run
fn a_killed_workers_runs_finish_on_the_others_and_no_completed_call_runs_twice(backend: &str) {
    let Some(place) = crate::sharing::place(backend, "a_killed_workers_runs_finish") else { return };
    let url = place.store.as_deref();
    let work = Work::new();
    let Some(temporal) = Temporal::start(&work, "a_killed_workers_runs_finish_on_the_others") else { return };
    let server = append_loop();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut workers = Workers((0..3).map(|i| worker(&work, &server, &temporal, &format!("worker{i}"), url)).collect());
    let ids: Vec<String> = (0..20).map(|i| format!("run-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let ws = work.write(&format!("ws{i}/step.sh"), STEP).parent().unwrap().to_string_lossy().into_owned();
        submit(&work, &server, &temporal, id, &ws, "auto", url);
    }
    // Worker 0 dies while it holds runs with a call running.
    let victim = workers.0[0].id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let held = loop {
        let s = store_at(&rt, &work, url);
        let held: Vec<String> = ids
            .iter()
            .filter(|id| {
                let lease = rt.block_on(s.run_lease(id)).unwrap();
                let running = state(&rt, s.as_ref(), id)
                    .is_some_and(|v| v["calls"].as_array().is_some_and(|c| c.iter().any(|c| c["status"] == "running")));
                lease.is_some_and(|l| l.holder.contains(&format!(":{victim}:"))) && running
            })
            .cloned()
            .collect();
        if !held.is_empty() {
            break held;
        }
        assert!(Instant::now() < deadline, "worker 0 never held a run with a call running");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = workers.0[0].kill(); // SIGKILL
    let _ = workers.0[0].wait();
    let killed = Instant::now();
    // What the dead worker last wrote of each run it held (nobody takes
    // them over before the engine misses its heartbeats, seconds later):
    // a call running there must come back interrupted.
    let last: Vec<Value> = {
        let s = store_at(&rt, &work, url);
        held.iter().map(|id| state(&rt, s.as_ref(), id).unwrap()).collect()
    };
    let steps: Vec<Value> = last.iter().map(|v| v["step"].clone()).collect();
    let mid_call = last
        .iter()
        .filter(|v| v["calls"].as_array().is_some_and(|c| c.iter().any(|c| c["status"] == "running")))
        .count();
    // The runs it held unfinished move on elsewhere (one it finished
    // between the look and the kill has nowhere to go).
    for ((id, at), v) in held.iter().zip(&steps).zip(&last) {
        if ended(v) {
            continue;
        }
        wait_for(&rt, &work, url, std::slice::from_ref(id), Duration::from_secs(60), "moved on", |v| v["step"] != *at);
    }
    let takeover = killed.elapsed();
    wait_for(&rt, &work, url, &ids, Duration::from_secs(180), "finished", ended);
    let s = store_at(&rt, &work, url);
    let mut interrupted = 0;
    for (i, id) in ids.iter().enumerate() {
        let stored = state(&rt, s.as_ref(), id).unwrap();
        let log = std::fs::read_to_string(work.path().join(format!("ws{i}/log.txt"))).unwrap_or_default();
        interrupted += calls_ran_once(&stored, &log, id, ROUNDS);
    }
    // Each run worker 0 held mid-call came back with that call interrupted.
    assert!(mid_call > 0, "worker 0 died between calls of all {} runs it held: the kill tested nothing", held.len());
    assert!(interrupted >= mid_call, "{interrupted} calls interrupted, {mid_call} runs were mid-call");
    eprintln!(
        "worker 0 held {} runs ({mid_call} mid-call); all moved on {} ms after its death; {interrupted} calls interrupted",
        held.len(),
        takeover.as_millis()
    );
    let problems = rt.block_on(s.check()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    drop(temporal);
}

#[test]
fn a_killed_workers_runs_finish_on_the_others_and_no_completed_call_runs_twice_sqlite() {
    a_killed_workers_runs_finish_on_the_others_and_no_completed_call_runs_twice("sqlite");
}

#[test]
fn a_killed_workers_runs_finish_on_the_others_and_no_completed_call_runs_twice_postgres() {
    a_killed_workers_runs_finish_on_the_others_and_no_completed_call_runs_twice("postgres");
}

#[test]
fn a_run_waiting_for_approval_survives_worker_and_server_restarts_and_finishes_once_approved() {
    let work = Work::new();
    let Some(mut temporal) = Temporal::start(&work, "a_run_waiting_for_approval_survives_restarts") else { return };
    let server = append_loop();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let workers = Workers(vec![worker(&work, &server, &temporal, "worker0", None)]);
    let ws = work.write("ws/step.sh", STEP).parent().unwrap().to_string_lossy().into_owned();
    let id = "wait-1".to_owned();
    submit(&work, &server, &temporal, &id, &ws, "ask", None);
    let ids = [id.clone()];
    let awaiting =
        |v: &Value| v["calls"].as_array().is_some_and(|c| c.iter().any(|c| c["status"] == "awaiting_approval"));
    wait_for(&rt, &work, None, &ids, Duration::from_secs(60), "paused", awaiting);
    // Nothing holds the paused run: no worker, no lease.
    let s = store(&rt, &work);
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Some(l) = rt.block_on(s.run_lease(&id)).unwrap() {
        assert!(Instant::now() < deadline, "the paused run is still held by {}", l.holder);
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(s);
    drop(workers);
    temporal.kill();
    temporal.up();
    let _workers = Workers(vec![
        worker(&work, &server, &temporal, "worker1", None),
        worker(&work, &server, &temporal, "worker2", None),
    ]);
    // Every call asks (`--approve ask`): approve each as it comes.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = store(&rt, &work);
        let v = state(&rt, s.as_ref(), &id).unwrap();
        drop(s);
        if ended(&v) {
            break;
        }
        if awaiting(&v) {
            let out = noesis(&work, &server, None).args(["agent", "approve", &id]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{err}");
            assert!(err.contains("the cluster's workers go on with run wait-1"), "{err}");
        }
        assert!(Instant::now() < deadline, "the run never finished: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = store(&rt, &work);
    let stored = state(&rt, s.as_ref(), &id).unwrap();
    let log = std::fs::read_to_string(work.path().join("ws/log.txt")).unwrap_or_default();
    assert_eq!(calls_ran_once(&stored, &log, &id, ROUNDS), 0, "no call was running when anything died");
}

#[test]
fn the_server_killed_and_restarted_on_its_file_loses_nothing() {
    let work = Work::new();
    let Some(mut temporal) = Temporal::start(&work, "the_server_killed_and_restarted_loses_nothing") else { return };
    let server = append_loop();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _workers = Workers((0..2).map(|i| worker(&work, &server, &temporal, &format!("worker{i}"), None)).collect());
    let ids: Vec<String> = (0..6).map(|i| format!("srv-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let ws = work.write(&format!("ws{i}/step.sh"), STEP).parent().unwrap().to_string_lossy().into_owned();
        submit(&work, &server, &temporal, id, &ws, "auto", None);
    }
    // Mid-run: some call has completed somewhere.
    let some_call_done =
        |v: &Value| v["calls"].as_array().is_some_and(|c| c.iter().any(|c| c["status"] == "completed"));
    wait_for(&rt, &work, None, &ids[..1], Duration::from_secs(60), "made a call", some_call_done);
    temporal.kill();
    std::thread::sleep(Duration::from_secs(1));
    temporal.up();
    wait_for(&rt, &work, None, &ids, Duration::from_secs(180), "finished", ended);
    let s = store(&rt, &work);
    for (i, id) in ids.iter().enumerate() {
        let stored = state(&rt, s.as_ref(), id).unwrap();
        let log = std::fs::read_to_string(work.path().join(format!("ws{i}/log.txt"))).unwrap_or_default();
        calls_ran_once(&stored, &log, id, ROUNDS);
    }
    assert!(rt.block_on(s.check()).unwrap().is_empty());
}

/// The code-simplifier example module, and a reply its schema accepts.
fn simplifier() -> (PathBuf, noesis_testkit::Reply) {
    let module = crate::support::example_module("code-simplifier");
    let case1: Value =
        serde_json::from_str(&std::fs::read_to_string(module.join("tests/case1.expected.json")).unwrap()).unwrap();
    (module, noesis_testkit::Reply::Chat(case1["$example"].to_string()))
}

#[test]
fn a_batch_of_a_thousand_inputs_across_three_workers_answers_every_input_once() {
    let work = Work::new();
    let Some(temporal) = Temporal::start(&work, "a_batch_of_a_thousand_inputs") else { return };
    let (module, ok) = simplifier();
    let server = FakeServer::start(vec![ok]).unwrap();
    let _workers = Workers((0..3).map(|i| worker(&work, &server, &temporal, &format!("worker{i}"), None)).collect());
    const N: usize = 1000;
    let lines: Vec<String> =
        (0..N).map(|i| json!({"code": format!("marker_{i:04} = {i}"), "language": "python"}).to_string()).collect();
    work.write("inputs.jsonl", &(lines.join("\n") + "\n"));
    let out = noesis(&work, &server, None)
        .args(["run", &module.to_string_lossy(), "--batch", "inputs.jsonl", "--on", &temporal.address()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // One envelope per input, in the input file's order.
    let envelopes: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(envelopes.len(), N, "{stderr}");
    assert!(envelopes.iter().all(|e| e["ok"] == json!(true)), "{stderr}");
    // Each input reached the model once: its marker is in exactly one request.
    let received = server.received();
    assert_eq!(received.len(), N, "model calls");
    let mut seen = vec![0usize; N];
    for r in &received {
        let said = noesis_testkit::said(&r.json());
        let at = said.find("marker_").expect("a request without an input's marker");
        let i: usize = said[at + 7..at + 11].parse().unwrap();
        seen[i] += 1;
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "inputs asked more or less than once: {:?}",
        seen.iter().enumerate().filter(|(_, n)| **n != 1).collect::<Vec<_>>()
    );
    // The work was shared: more than one worker answered.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let s = store(&rt, &work);
    let batch_id = stderr.split("batch ").nth(1).and_then(|t| t.split_whitespace().next()).unwrap().to_owned();
    let items = rt.block_on(s.batch_items(&batch_id, 0, N as i64)).unwrap();
    assert_eq!(items.len(), N);
    let workers: std::collections::BTreeSet<&str> = items.iter().filter_map(|i| i.answered_by.as_deref()).collect();
    assert!(workers.len() > 1, "one worker answered everything: {workers:?}");
}

#[test]
fn a_run_submitted_without_detach_is_followed_to_its_answer() {
    let work = Work::new();
    let Some(temporal) = Temporal::start(&work, "a_run_submitted_without_detach_is_followed") else { return };
    let server = append_loop();
    let _workers = Workers(vec![worker(&work, &server, &temporal, "worker0", None)]);
    let ws = work.write("ws/step.sh", "echo \"$1\" >> log.txt\n").parent().unwrap().to_string_lossy().into_owned();
    let out = noesis(&work, &server, None)
        .args(["agent", "Append lines", "--workspace", &ws, "--approve", "auto", "--allow-command", "sh step.sh"])
        .args(["--run-id", "followed", "--on", &temporal.address()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    assert!(stderr.contains(&format!("run followed submitted to {}", temporal.address())), "{stderr}");
    // Each call the worker made is shown as it is stored.
    for k in 0..ROUNDS {
        assert!(stderr.contains(&format!("run_command command=sh step.sh {k}")), "{stderr}");
    }
    // A second submission of the same run is refused by name.
    let again = noesis(&work, &server, None)
        .args(["agent", "Append lines", "--workspace", &ws, "--run-id", "followed", "--on", &temporal.address()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{err}");
    assert!(err.contains("--run-id followed: a run with this id exists"), "{err}");
}

#[test]
fn a_cluster_run_is_cancelled_through_its_workflow_and_stays_resumable() {
    let work = Work::new();
    let Some(temporal) = Temporal::start(&work, "a_cluster_run_is_cancelled") else { return };
    let server = append_loop();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _workers = Workers(vec![worker(&work, &server, &temporal, "worker0", None)]);
    // Long enough calls that the cancellation comes while the run goes on.
    let slow = "sleep 1; echo \"$1\" >> log.txt; sleep 1\n";
    let ws = work.write("ws/step.sh", slow).parent().unwrap().to_string_lossy().into_owned();
    submit(&work, &server, &temporal, "long", &ws, "auto", None);
    let ids = ["long".to_owned()];
    let some_call_done =
        |v: &Value| v["calls"].as_array().is_some_and(|c| c.iter().any(|c| c["status"] == "completed"));
    wait_for(&rt, &work, None, &ids, Duration::from_secs(60), "made a call", some_call_done);
    let out = noesis(&work, &server, None).args(["agent", "cancel", "long"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("run long is cancelled at step"), "{err}");
    let s = store(&rt, &work);
    let stored = state(&rt, s.as_ref(), "long").unwrap();
    assert_eq!(stored["outcome"]["outcome"], "cancelled", "{stored}");
    let calls = stored["calls"].as_array().unwrap().len();
    assert!(calls < ROUNDS, "the run went on to its end: {stored}");
    // Nothing steps it any more: its workflow is gone.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(state(&rt, s.as_ref(), "long").unwrap()["step"], stored["step"]);
    // Resumed here, it goes on from where the worker stopped it.
    let resumed = noesis(&work, &server, None).args(["agent", "resume", "long", "--quiet"]).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_eq!(String::from_utf8_lossy(&resumed.stdout).trim(), "done");
    // A completed call ran once; the one the cancellation cut (its command
    // killed, the call failed as cancelled) at most once.
    let log = std::fs::read_to_string(work.path().join("ws/log.txt")).unwrap_or_default();
    let after = state(&rt, s.as_ref(), "long").unwrap();
    assert_eq!(after["outcome"]["outcome"], "answer", "{after}");
    for c in after["calls"].as_array().unwrap() {
        let k = c["arguments"]["command"].as_str().unwrap().rsplit(' ').next().unwrap();
        let times = log.lines().filter(|l| *l == k).count();
        if c["status"] == "completed" {
            assert_eq!(times, 1, "call {k}: {after}\n{log}");
        } else {
            assert!(times <= 1, "call {k} ran {times} times: {after}\n{log}");
        }
    }
    // A local run is not the cluster's to cancel.
    let local = noesis(&work, &server, None)
        .args(["agent", "Append lines", "--workspace", &ws, "--approve", "never", "--quiet", "--run-id", "here"])
        .output()
        .unwrap();
    assert!(local.status.success(), "{}", String::from_utf8_lossy(&local.stderr));
    let o = noesis(&work, &server, None).args(["agent", "cancel", "here"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("run here is done; there is nothing to cancel"), "{err}");
}

#[test]
fn calls_nobody_decides_on_in_time_are_denied_by_the_workflows_timer() {
    let work = Work::new();
    let Some(temporal) = Temporal::start(&work, "calls_nobody_decides_on_in_time_are_denied") else { return };
    let server = append_loop();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _workers = Workers(vec![worker(&work, &server, &temporal, "worker0", None)]);
    let ws = work.write("ws/step.sh", STEP).parent().unwrap().to_string_lossy().into_owned();
    let out = noesis(&work, &server, None)
        .args(["agent", "Append lines", "--workspace", &ws, "--approve", "ask", "--quiet"])
        .args(["--allow-command", "sh step.sh", "--run-id", "unattended", "--on", &temporal.address()])
        .args(["--detach", "--approval-timeout", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ids = ["unattended".to_owned()];
    wait_for(&rt, &work, None, &ids, Duration::from_secs(60), "finished", ended);
    let s = store(&rt, &work);
    let stored = state(&rt, s.as_ref(), "unattended").unwrap();
    assert_eq!(stored["outcome"]["outcome"], "answer", "{stored}");
    let calls = stored["calls"].as_array().unwrap();
    assert_eq!(calls.len(), ROUNDS, "{stored}");
    for c in calls {
        assert_eq!(c["status"], "denied", "{stored}");
        assert!(c["result"].as_str().unwrap().contains("nobody decided on this call within 1 s"), "{stored}");
    }
    assert!(!work.path().join("ws/log.txt").exists(), "a denied call ran");
}

#[test]
fn a_provider_that_is_down_leaves_the_input_unanswered_and_its_slice_is_tried_again() {
    let work = Work::new();
    let Some(temporal) = Temporal::start(&work, "a_provider_that_is_down_leaves_the_input_unanswered") else { return };
    let (module, ok) = simplifier();
    // The first call's every attempt (the provider's own retries too) is
    // refused; then the provider answers.
    let down = noesis_testkit::Reply::Status(503, r#"{"error": {"message": "overloaded"}}"#.into(), vec![]);
    let server = FakeServer::start(vec![down.clone(), down.clone(), down, ok]).unwrap();
    let _workers = Workers(vec![worker(&work, &server, &temporal, "worker0", None)]);
    const N: usize = 10;
    let lines: Vec<String> =
        (0..N).map(|i| json!({"code": format!("x_{i} = {i}"), "language": "python"}).to_string()).collect();
    work.write("inputs.jsonl", &(lines.join("\n") + "\n"));
    let out = noesis(&work, &server, None)
        .args([
            "run",
            &module.to_string_lossy(),
            "--batch",
            "inputs.jsonl",
            "--slice",
            "5",
            "--on",
            &temporal.address(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let envelopes: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(envelopes.len(), N, "{stderr}");
    assert!(
        envelopes.iter().all(|e| e["ok"] == json!(true)),
        "an unavailable provider's envelope was kept as an answer"
    );
    let refused = server.received().len() - N;
    assert!(refused >= 3, "the provider was asked {} times for {N} inputs", server.received().len());
}
