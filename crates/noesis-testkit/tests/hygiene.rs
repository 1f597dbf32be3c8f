//! Checks over the workspace's own tests (issue 31: tests that could
//! hide). Each reads the source files and names every offending line.

use std::path::{Path, PathBuf};

use noesis_testkit::skip::Dependency;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `crates/` but benchmarks (speed is theirs, and
/// they are not tests) and this file, as (path shown, text).
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                if !path.ends_with("benches") {
                    walk(&path, root, out);
                }
            } else if path.extension().is_some_and(|x| x == "rs") {
                let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
                if shown == "crates/noesis-testkit/tests/hygiene.rs" {
                    continue;
                }
                out.push((shown, std::fs::read_to_string(&path).unwrap_or_default()));
            }
        }
    }
    let root = workspace();
    let mut out = Vec::new();
    walk(&root.join("crates"), &root, &mut out);
    assert!(out.len() > 100, "the workspace's sources were not found from {}", root.display());
    out
}

/// Lines of `text` for which `bad` holds, as `path:line: text`.
fn offending(bad: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in sources() {
        for (i, line) in text.lines().enumerate() {
            if bad(line) {
                found.push(format!("{path}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

/// Speed lives in bench/: an assertion that something took less than some
/// time fails on a loaded machine and proves nothing about behaviour.
#[test]
fn no_test_asserts_how_long_something_took() {
    let timed = |line: &str| {
        let l = line.replace(' ', "");
        l.contains("assert") && (l.contains("elapsed()<") || l.contains(".duration_since(") && l.contains(")<"))
    };
    assert_eq!(offending(&timed), Vec::<String>::new(), "assert an ordering or an outcome instead");
}

/// A test that cannot run says so through `noesis_testkit::skip::missing`,
/// which fails it unless its dependency is opted out and logs the skip for
/// the summary; a skip printed on its own is invisible in a green run.
#[test]
fn every_skip_goes_through_the_skip_helper() {
    let own = |line: &str| {
        (line.contains("eprintln!") || line.contains("println!")) && line.to_ascii_lowercase().contains("skip")
    };
    assert_eq!(offending(&own), Vec::<String>::new(), "call noesis_testkit::skip::missing instead");
}

/// scripts/test.sh names every opt-out (its comment is the list a person
/// reads) and summarises the skip log the helper writes.
#[test]
fn the_test_script_names_every_opt_out_and_summarises_the_skips() {
    let script = std::fs::read_to_string(workspace().join("scripts/test.sh")).unwrap();
    for d in Dependency::ALL {
        assert!(
            script.contains(&format!("#   {}=1", d.opt_out_var())),
            "scripts/test.sh does not list {}",
            d.opt_out_var()
        );
    }
    assert!(script.contains("NOESIS_SKIP_LOG") && script.contains("trap skip_summary EXIT"));
}

/// `rust-version` in the workspace's Cargo.toml is the oldest Rust that
/// builds it, so it can be no older than what any dependency declares
/// (issue 31: it said 1.88 while sqlx 0.9 needs 1.94). Read from
/// `cargo metadata` over the locked dependency graph, every platform's.
#[test]
fn the_declared_rust_version_covers_every_dependency() {
    // `1.94` and `1.94.0` are the same version.
    let parse = |v: &str| -> [u64; 3] {
        let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
        [(); 3].map(|()| parts.next().unwrap_or(0))
    };
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(workspace())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours: Vec<&serde_json::Value> = packages.iter().filter(|p| p["source"].is_null()).collect();
    // Each crate inherits the workspace's value, so cargo itself refuses an
    // older compiler with a clear message.
    let undeclared: Vec<&str> =
        ours.iter().filter(|p| p["rust_version"].is_null()).filter_map(|p| p["name"].as_str()).collect();
    assert!(undeclared.is_empty(), "without `rust-version.workspace = true`: {undeclared:?}");
    let declared = ours.iter().filter_map(|p| p["rust_version"].as_str()).map(parse).min().unwrap();
    let needs: Vec<String> = packages
        .iter()
        .filter(|p| !p["source"].is_null())
        .filter_map(|p| Some((p["name"].as_str()?, p["version"].as_str()?, p["rust_version"].as_str()?)))
        .filter(|(_, _, rv)| parse(rv) > declared)
        .map(|(n, v, rv)| format!("{n} {v} needs {rv}"))
        .collect();
    assert!(needs.is_empty(), "rust-version = {declared:?} in Cargo.toml is older than: {}", needs.join(", "));
}
