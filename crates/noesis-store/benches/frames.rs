//! Frame store benchmark (`cargo bench -p noesis-store --bench frames`, or
//! `bench/frames.sh`, which installs `b3sum` first). Prints:
//! - the insert rate for 100k frames (1000 per transaction) and for frames
//!   written one transaction each;
//! - a cascade over a 100k-frame subtree (target ≤ 1 s on SQLite);
//! - hashing a 50k-file tree as a session does, as a ratio of `b3sum` over
//!   the same files (target ≥ 0.8; higher is better).
//!
//! PostgreSQL figures are added when `NOESIS_TEST_PG` (or the default
//! postgres://root@127.0.0.1:5432/test) answers; a schema of its own is
//! created and dropped. Sizes shrink with `NOESIS_BENCH_FRAMES` and
//! `NOESIS_BENCH_FILES`; `NOESIS_BENCH_DB=PATH` keeps the SQLite file and
//! `NOESIS_BENCH_NO_CASCADE=1` stops before the cascade (and keeps the
//! PostgreSQL schema), to study the data with `sqlite3` or `psql`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use noesis_frames::{CausalFrame, Cause, Draft, Evidence, Invalidation, Timestamp};
use noesis_store::{FrameFilter, SqlStore, Store};
use sqlx::Executor;

const P: &str = "git:bench";

/// CPU time of this process so far (user + system), from /proc on Linux:
/// a steadier figure than wall time on a busy machine.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).unwrap()
    }
}

/// One root and `n - 1` descendants: each frame's parent is one of the 64
/// frames before it (a deep, bushy tree), two file conditions each, and one
/// in ten also cites an earlier frame.
fn tree(n: usize) -> Vec<CausalFrame> {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let now = Timestamp::now();
    let mut frames: Vec<CausalFrame> = Vec::with_capacity(n);
    for i in 0..n {
        let mut evidence = vec![
            Evidence::File { path: format!("src/m{}/f{}.rs", i % 97, i % 1009), hash: format!("{:064x}", i) },
            Evidence::File { path: format!("docs/d{}.md", i % 311), hash: format!("{:064x}", i + 1) },
        ];
        if i > 1 && rng.below(10) == 0 {
            evidence.push(Evidence::Frame { frame_id: frames[rng.below(i)].frame_id.clone() });
        }
        let parent = (i > 0).then(|| &frames[i - 1 - rng.below(i.min(64))]);
        let d = Draft {
            evidence,
            conclusion: "a conclusion of ordinary length for a module run".into(),
            confidence: 0.8,
            ..Draft::new(format!("frame {i}"))
        };
        let f = d.into_frame(P, None, parent, now).unwrap();
        frames.push(f);
    }
    frames
}

async fn bench_store(label: &str, store: &SqlStore, n: usize) {
    store.ensure_project(P, "/bench").await.unwrap();
    let frames = tree(n);
    let t = Instant::now();
    for chunk in frames.chunks(1000) {
        store.insert_frames(chunk).await.unwrap();
    }
    let took = t.elapsed();
    println!(
        "{label}: insert {n} frames, 1000 per transaction: {:.2} s ({:.0} frames/s)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );

    let singles = tree(2000).into_iter().skip(1).collect::<Vec<_>>();
    // Re-root the singles under the big tree's root so they are valid.
    let root = frames[0].clone();
    let singles: Vec<CausalFrame> = singles
        .into_iter()
        .map(|mut f| {
            f.parent_id = Some(root.frame_id.clone());
            f.depth = 1;
            f.invalidation_condition.frames.clear();
            f.evidence.retain(|e| !matches!(e, Evidence::Frame { .. }));
            f
        })
        .collect();
    let t = Instant::now();
    for f in &singles {
        store.insert_frames(std::slice::from_ref(f)).await.unwrap();
    }
    let took = t.elapsed();
    println!(
        "{label}: insert {} frames, one transaction each: {:.2} s ({:.0} frames/s)",
        singles.len(),
        took.as_secs_f64(),
        singles.len() as f64 / took.as_secs_f64()
    );

    if std::env::var_os("NOESIS_BENCH_NO_CASCADE").is_some() {
        return;
    }
    let total = store.count(&FrameFilter::project(P)).await.unwrap();
    let (t, cpu) = (Instant::now(), cpu_time());
    let hit = store
        .invalidate(&[Invalidation::new(root.frame_id.clone(), &Cause::Manual("bench".into()))], None, Timestamp::now())
        .await
        .unwrap();
    let took = t.elapsed();
    let cpu = cpu.zip(cpu_time()).map(|(a, b)| format!(", {:.2} s CPU in this process", (b - a).as_secs_f64()));
    assert_eq!(hit.len() as u64, total, "the whole subtree");
    println!(
        "{label}: cascade over a {}-frame subtree: {:.3} s{}{}",
        hit.len(),
        took.as_secs_f64(),
        cpu.unwrap_or_default(),
        if label == "sqlite" { " (target ≤ 1 s)" } else { "" }
    );
}

fn write_tree(root: &Path, files: usize) -> u64 {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 16 * 1024];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = u8::try_from((i * 31 + 7) % 251).unwrap();
    }
    for i in 0..files {
        let dir = root.join(format!("d{:03}/e{:02}", i % 500, (i / 500) % 20));
        if i < 500 * 20 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        // 256 B – 16 KiB, like source files.
        let len = 256 + rng.below(16 * 1024 - 256);
        buf[0..8].copy_from_slice(&(i as u64).to_le_bytes());
        std::fs::write(dir.join(format!("f{i}.rs")), &buf[..len]).unwrap();
        bytes += len as u64;
    }
    std::fs::write(root.join(".gitignore"), "*.o\n").unwrap();
    bytes
}

fn best_of<F: FnMut() -> Duration>(n: usize, mut f: F) -> Duration {
    (0..n).map(|_| f()).min().unwrap()
}

fn b3sum_time(files: &[String]) -> Option<Duration> {
    Command::new("b3sum").arg("--version").output().ok()?;
    Some(best_of(3, || {
        let t = Instant::now();
        let mut child = Command::new("xargs")
            .args(["-0", "b3sum"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("xargs");
        let mut stdin = child.stdin.take().unwrap();
        for f in files {
            stdin.write_all(f.as_bytes()).unwrap();
            stdin.write_all(b"\0").unwrap();
        }
        drop(stdin);
        assert!(child.wait().unwrap().success());
        t.elapsed()
    }))
}

fn bench_hashing(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let bytes = write_tree(&root, n);
    let scope = vec![root.clone()];
    // Warm the page cache for both.
    let scan = noesis_frames::scan::scan(&root, &scope).unwrap();
    assert_eq!(scan.files.len(), n + 1);
    let ours = best_of(3, || {
        let t = Instant::now();
        let s = noesis_frames::scan::scan(&root, &scope).unwrap();
        assert_eq!(s.files.len(), n + 1);
        t.elapsed()
    });
    let list: Vec<String> = scan.files.keys().map(|p| root.join(p).to_string_lossy().into_owned()).collect();
    let mib = bytes as f64 / (1024.0 * 1024.0);
    match b3sum_time(&list) {
        Some(theirs) => println!(
            "hash: {} files ({mib:.0} MiB), session scan {:.3} s, b3sum {:.3} s: ratio {:.2} (b3sum time / ours; target ≥ 0.8)",
            n + 1,
            ours.as_secs_f64(),
            theirs.as_secs_f64(),
            theirs.as_secs_f64() / ours.as_secs_f64()
        ),
        None => println!(
            "hash: {} files ({mib:.0} MiB), session scan {:.3} s; b3sum not installed (bench/frames.sh installs it)",
            n + 1,
            ours.as_secs_f64()
        ),
    }
}

async fn postgres(n: usize) {
    sqlx::any::install_default_drivers();
    let base = std::env::var("NOESIS_TEST_PG").unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into());
    let Ok(admin) = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .connect(&base)
        .await
    else {
        eprintln!("postgres: {base} not reachable, skipped");
        return;
    };
    let schema = format!("noesis_bench_{}", std::process::id());
    admin.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).await.unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let store = SqlStore::open(&format!("{base}{sep}options[search_path]={schema}")).await.unwrap();
    bench_store("postgres", &store, n).await;
    store.close().await;
    if std::env::var_os("NOESIS_BENCH_NO_CASCADE").is_some() {
        eprintln!("postgres: kept schema {schema} for inspection");
        return;
    }
    admin.execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).await.unwrap();
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let frames = env_usize("NOESIS_BENCH_FRAMES", 100_000);
    let files = env_usize("NOESIS_BENCH_FILES", 50_000);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path =
            std::env::var("NOESIS_BENCH_DB").map(std::path::PathBuf::from).unwrap_or(dir.path().join("bench.db"));
        let store = SqlStore::open(path.to_str().unwrap()).await.unwrap();
        bench_store("sqlite", &store, frames).await;
        store.close().await;
        postgres(frames).await;
    });
    bench_hashing(files);
}
