//! `noesis serve` under load: `POST /run` against a zero-latency fake
//! provider at several concurrencies, with the server's resident memory
//! before and after each batch, which must stay flat.
//!
//! The server is the release `noesis` binary in its own process, so its
//! VmRSS is its own. The fake provider and the load generator share this
//! process: plain keep-alive HTTP/1.1 over tokio sockets, one connection
//! per client, nothing stored per request (the testkit's `FakeServer` keeps
//! every request for assertions, which would grow by gigabytes here).
//!
//! `NOESIS_BIN=target/release/noesis cargo bench -p noesis-serve --bench serve -- [REQUESTS] [C,C…]`
//! (defaults: 100000 requests, concurrency 8,64); `bench/serve.sh` builds
//! the binary and runs this.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The Node reference server on this kind of machine, for comparison.
const NODE_REFERENCE: &str = "Node reference server: 90-100 req/s at concurrency 8, RSS grows ~100 KB per request";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let requests: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let levels: Vec<usize> =
        args.get(1).map_or_else(|| vec![8, 64], |a| a.split(',').filter_map(|c| c.parse().ok()).collect());
    let Some(bin) = std::env::var_os("NOESIS_BIN") else {
        eprintln!("set NOESIS_BIN to the release noesis binary (bench/serve.sh does)");
        std::process::exit(2);
    };

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let fake = rt.block_on(fake_provider());
    let home = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start(&bin, &fake, home.path());
    let addr = server.addr.clone();
    println!("noesis serve at {addr} (pid {}), provider: zero-latency fake at {fake}", server.child.id());

    // Warm-up: connection pools, allocator arenas, the module cache.
    let warm = rt.block_on(load(&addr, 2_000, 64));
    assert_eq!(warm.failed, 0, "warm-up requests failed");
    println!("after warm-up ({} requests at 64): VmRSS {} KB", warm.latencies.len(), server.rss_kb());
    println!();
    println!(
        "{:>11}  {:>8}  {:>9}  {:>8}  {:>8}  {:>11}  {:>11}  {:>11}",
        "concurrency", "requests", "req/s", "p50 ms", "p99 ms", "RSS before", "RSS after", "KB/request"
    );
    for &c in &levels {
        let before = server.rss_kb();
        let started = Instant::now();
        let mut r = rt.block_on(load(&addr, requests, c));
        let secs = started.elapsed().as_secs_f64();
        let after = server.rss_kb();
        assert_eq!(r.failed, 0, "{} of {requests} requests failed at concurrency {c}", r.failed);
        r.latencies.sort_unstable();
        let pct = |p: f64| {
            let i = ((r.latencies.len() as f64 * p).ceil() as usize).clamp(1, r.latencies.len()) - 1;
            f64::from(r.latencies[i]) / 1000.0
        };
        let growth = (after as f64 - before as f64) / requests as f64;
        println!(
            "{c:>11}  {requests:>8}  {:>9.0}  {:>8.2}  {:>8.2}  {:>8} KB  {:>8} KB  {growth:>11.4}",
            requests as f64 / secs,
            pct(0.50),
            pct(0.99),
            before,
            after,
        );
    }
    println!();
    println!("reference: {NODE_REFERENCE}");
    server.stop();
}

/// The bearer token the benchmarked server is started with.
const TOKEN: &str = "bench-token";

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(bin: &std::ffi::OsStr, fake: &str, home: &std::path::Path) -> Server {
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--port", "0", "--provider", "openai", "--model", "gpt-4o-mini", "--retries", "0"])
            .env("OPENAI_BASE_URL", fake)
            .env("OPENAI_API_KEY", "bench")
            .env("HOME", home)
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for v in ["LLM_PROVIDER", "LLM_MODEL", "COGNITIVE_MODULES_PATH", "NOESIS_CONFIG"] {
            cmd.env_remove(v);
        }
        // Every request that changes anything needs a credential.
        cmd.env("NOESIS_SERVE_TOKEN", TOKEN);
        let mut child = cmd.spawn().expect("start noesis serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr"));
        let addr = loop {
            let mut line = String::new();
            if lines.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("noesis serve ended before listening");
            }
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split_whitespace().next().unwrap_or_default().to_owned();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.lines() {});
        Server { child, addr }
    }

    fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn stop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn good_reply() -> String {
    json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
           "data": {"simplified_code": "x = 1", "changes": [{"type": "remove_redundancy", "description": "+ 0", "scope": "local", "risk": "none"}],
                    "behavior_equivalence": true, "summary": "one change", "rationale": "adding zero does nothing"}})
    .to_string()
}

/// A chat-completions endpoint that answers every request at once with the
/// same completion; returns its base URL.
async fn fake_provider() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
    let addr = listener.local_addr().expect("addr");
    let body = noesis_testkit::chat_completion(&good_reply(), "stop").to_string();
    let response: Arc<[u8]> =
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
            .into_bytes()
            .into();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else { continue };
            let _ = conn.set_nodelay(true);
            let response = Arc::clone(&response);
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(16 * 1024);
                while read_message(&mut conn, &mut buf).await.is_some() {
                    if conn.write_all(&response).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/v1")
}

/// Reads one HTTP/1.1 message (head + `content-length` body) from `conn`,
/// reusing `buf`; returns the status code for responses (0 for requests)
/// and the body range, or `None` at EOF.
async fn read_message(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u16, std::ops::Range<usize>)> {
    buf.clear();
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let mut chunk = [0u8; 8192];
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((status, head_end..head_end + len))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

struct Outcome {
    /// Microseconds per request.
    latencies: Vec<u32>,
    failed: usize,
}

/// `total` requests over `clients` keep-alive connections.
async fn load(addr: &str, total: usize, clients: usize) -> Outcome {
    let body = json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}}).to_string();
    let request: Arc<[u8]> = format!(
        "POST /run HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .into();
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (addr, request, next) = (addr.to_owned(), Arc::clone(&request), Arc::clone(&next));
            tokio::spawn(async move {
                let mut out = Outcome { latencies: Vec::new(), failed: 0 };
                let mut conn = TcpStream::connect(&addr).await.expect("connect to noesis serve");
                let _ = conn.set_nodelay(true);
                let mut buf = Vec::with_capacity(16 * 1024);
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let started = Instant::now();
                    let ok = match conn.write_all(&request).await {
                        Err(_) => false,
                        Ok(()) => match read_message(&mut conn, &mut buf).await {
                            // A success envelope, not merely a 200.
                            Some((200, body)) => find(&buf[body], b"\"ok\":true").is_some(),
                            _ => false,
                        },
                    };
                    out.latencies.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
                    if !ok {
                        out.failed += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        if let Ok(c) = TcpStream::connect(&addr).await {
                            conn = c;
                        }
                    }
                }
                out
            })
        })
        .collect();
    let mut all = Outcome { latencies: Vec::with_capacity(total), failed: 0 };
    for t in tasks {
        if let Ok(o) = t.await {
            all.latencies.extend(o.latencies);
            all.failed += o.failed;
        }
    }
    all
}
