//! Real processes against one store: eight writers at once lose nothing;
//! a writer killed with SIGKILL mid-write, again and again, leaves a store
//! that opens, passes its consistency check and holds no partial batch.
//!
//! The child processes are this test binary run again with
//! `--exact processes::child_writer` and the job in the environment.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use noesis_frames::{CausalFrame, Draft, Evidence, FrameId, Timestamp};
use noesis_store::{FrameFilter, SqlStore, Store};

use crate::support::TestStore;

const P: &str = "git:processes";
/// Frames per transaction in crash mode: a root and its children.
const BATCH: usize = 10;

fn spawn_child(url: &str, mode: &str, count: usize) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "processes::child_writer", "--nocapture", "--test-threads=1"])
        .env("NOESIS_CHILD_URL", url)
        .env("NOESIS_CHILD_MODE", mode)
        .env("NOESIS_CHILD_COUNT", count.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn committed(stdout: &str) -> Vec<FrameId> {
    // The first line follows libtest's "test … " without a newline.
    stdout.lines().filter_map(|l| l.split("committed ").nth(1)).map(|id| FrameId::parse(id.trim()).unwrap()).collect()
}

fn batch(root_query: &str, now: Timestamp) -> Vec<CausalFrame> {
    let root = Draft { confidence: 0.5, ..Draft::new(root_query) }.into_frame(P, None, None, now).unwrap();
    let mut frames = vec![root.clone()];
    for i in 1..BATCH {
        let mut evidence = vec![Evidence::File { path: format!("src/f{i}.rs"), hash: format!("{i:064x}") }];
        if i > 1 {
            evidence.push(Evidence::Frame { frame_id: frames[i - 1].frame_id.clone() });
        }
        let parent = frames[(i - 1) / 2].clone();
        let f = Draft { evidence, confidence: 0.5, conclusion: "x".repeat(200), ..Draft::new(format!("step {i}")) }
            .into_frame(P, None, Some(&parent), now)
            .unwrap();
        frames.push(f);
    }
    frames
}

/// Not a test on its own: does the work of a child process when the
/// environment says so, and nothing otherwise.
#[test]
fn child_writer() {
    let Ok(url) = std::env::var("NOESIS_CHILD_URL") else { return };
    let mode = std::env::var("NOESIS_CHILD_MODE").unwrap();
    let count: usize = std::env::var("NOESIS_CHILD_COUNT").unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = SqlStore::open(&url).await.unwrap();
        store.ensure_project(P, "/tmp/processes").await.unwrap();
        match mode.as_str() {
            // One frame per transaction, each a child of this process's
            // previous frame or of its root.
            "append" => {
                let mut mine: Vec<CausalFrame> = Vec::new();
                for i in 0..count {
                    let parent = if i == 0 { None } else { Some(&mine[i / 2]) };
                    let d = Draft {
                        evidence: vec![Evidence::File { path: format!("f{}", i % 7), hash: "h".into() }],
                        confidence: 0.5,
                        ..Draft::new(format!("pid {} frame {i}", std::process::id()))
                    };
                    let f = d.into_frame(P, None, parent, Timestamp::now()).unwrap();
                    store.insert_frames(std::slice::from_ref(&f)).await.unwrap();
                    println!("committed {}", f.frame_id);
                    mine.push(f);
                }
            }
            // Batches of BATCH frames, one transaction each, until killed.
            "crash" => {
                for i in 0..count {
                    let frames = batch(&format!("batch {i}"), Timestamp::now());
                    store.insert_frames(&frames).await.unwrap();
                    println!("committed {}", frames[0].frame_id);
                }
            }
            other => panic!("unknown mode {other}"),
        }
        store.close().await;
    });
}

async fn eight_writers(t_: &TestStore) {
    const PER: usize = 60;
    let children: Vec<_> = (0..8).map(|_| spawn_child(&t_.url, "append", PER)).collect();
    let mut ids = BTreeSet::new();
    for mut c in children {
        let mut out = String::new();
        let mut err = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = c.wait().unwrap();
        assert!(status.success(), "a writer failed: {status}\n{err}");
        let mine = committed(&out);
        assert_eq!(mine.len(), PER, "{out}\n{err}");
        ids.extend(mine);
    }
    assert_eq!(ids.len(), 8 * PER);
    let s = &t_.store;
    let stored: BTreeSet<FrameId> =
        s.frames(&FrameFilter::project(P)).await.unwrap().into_iter().map(|f| f.frame_id).collect();
    assert_eq!(stored, ids, "every committed frame is there, and nothing else");
    assert!(s.check().await.unwrap().is_empty());
}

async fn killed_writers(t_: &TestStore) {
    use std::io::BufRead;
    let mut acknowledged = BTreeSet::new();
    for round in 0..12u64 {
        let mut child = spawn_child(&t_.url, "crash", 1_000_000);
        // Wait until the child is writing (its first commit), then let it
        // run 0–60 ms more, so each kill lands in the middle of the write
        // loop, at a different point each round.
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut out = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            out.push_str(&line);
            out.push('\n');
            if line.contains("committed ") {
                break;
            }
        }
        assert!(out.contains("committed "), "round {round}: the writer never committed:\n{out}");
        std::thread::sleep(Duration::from_millis((round * 13) % 61));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "round {round}: the writer finished before it was killed");
        for line in lines {
            let Ok(line) = line else { break };
            out.push_str(&line);
            out.push('\n');
        }
        acknowledged.extend(committed(&out));

        // The store opens, is consistent, and every frame belongs to a whole batch.
        let s = SqlStore::open(&t_.url).await.unwrap();
        let problems = s.check().await.unwrap();
        assert!(problems.is_empty(), "round {round}: {problems:?}");
        let n = s.count(&FrameFilter::project(P)).await.unwrap();
        assert_eq!(n % BATCH as u64, 0, "round {round}: {n} frames is not whole batches");
        for id in &acknowledged {
            let f = s.frame(id).await.unwrap();
            assert!(
                f.is_some_and(|f| f.children.len() == 2),
                "round {round}: acknowledged batch {id} is missing or partial"
            );
        }
        s.close().await;
    }
    assert!(acknowledged.len() >= 12);
}

both!(eight_writers, killed_writers);
