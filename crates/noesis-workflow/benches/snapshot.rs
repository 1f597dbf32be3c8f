//! What the anchor rule costs: a snapshot of a 5,000-file tree (the first,
//! which copies every file, and a later one, which reads only what changed)
//! and a restore after 1, 10 and 100 changed files — a third modified, a
//! third created, a third deleted — each restore proven by the comparison
//! it ends with. A 20,000-file tree at 10 changes shows what grows with the
//! tree (the metadata walk) and what does not.
//!
//! `cargo bench -p noesis-workflow --bench snapshot -- [ROUNDS]` (default 7);
//! `bench/snapshot.sh` runs it.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use noesis_workflow::snapshot::{Snapshot, diff, restore, take};

fn make_tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("pkg{:03}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        // 1–8 KiB of source-like text.
        let line = format!("def f{i}(x):\n    return x + {i}\n");
        let text = line.repeat(1 + (i * 7919) % 300);
        std::fs::write(dir.join(format!("m{i}.py")), text).unwrap();
    }
}

/// Changes `n` files: a third modified, a third created, a third deleted.
fn change(root: &Path, n: usize, round: usize) {
    for k in 0..n {
        match k % 3 {
            0 => std::fs::write(
                root.join(format!("pkg{:03}/m{}.py", k % 50, (k % 50) * 100 + k / 3)),
                format!("broken {round}\n"),
            )
            .unwrap(),
            1 => std::fs::write(root.join(format!("pkg{:03}/new{k}_{round}.py", k % 50)), "new\n").unwrap(),
            _ => {
                let p = root.join(format!("pkg{:03}/m{}.py", (k + 7) % 50, ((k + 7) % 50) * 100 + 50 + k / 3));
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn case(files: usize, changes: &[usize], rounds: usize) {
    let root = tempfile::tempdir().unwrap();
    let blobs = tempfile::tempdir().unwrap();
    make_tree(root.path(), files);
    let t = Instant::now();
    let first = take(root.path(), blobs.path(), None).unwrap();
    let cold = t.elapsed();
    let mut warm = Vec::new();
    let mut snap: Snapshot = first;
    for _ in 0..rounds {
        let t = Instant::now();
        snap = take(root.path(), blobs.path(), Some(&snap)).unwrap();
        warm.push(t.elapsed());
    }
    println!(
        "{files} files: first snapshot {:.1} ms (copies every file), later snapshot {:.1} ms",
        cold.as_secs_f64() * 1000.0,
        median(warm.clone())
    );
    let warm_ms = median(warm);
    for &n in changes {
        let mut times = Vec::new();
        for round in 0..rounds {
            change(root.path(), n, round);
            let t = Instant::now();
            let undone = restore(root.path(), blobs.path(), &snap).unwrap();
            times.push(t.elapsed());
            assert!(undone.count() >= n * 2 / 3, "{undone:?}");
            assert!(diff(root.path(), &snap).unwrap().is_empty());
        }
        let r = median(times);
        println!("  {n:>3} changed: restore {r:6.1} ms, snapshot + restore {:6.1} ms", warm_ms + r);
    }
}

fn main() {
    let rounds: usize =
        std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|a| a.parse().ok()).unwrap_or(7);
    println!("median of {rounds} rounds (target: snapshot + restore ≤ 100 ms at 10 files of 5,000)");
    case(5_000, &[1, 10, 100], rounds);
    case(20_000, &[10], rounds);
}
