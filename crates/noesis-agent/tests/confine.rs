//! Property tests of path confinement: whatever path a model gives a tool
//! — `..` anywhere, absolute paths, links inside the workspace that lead
//! out — it resolves inside the workspace or is refused.

use std::path::Path;

use noesis_agent::Workspace;
use proptest::prelude::*;

struct Tree {
    _dir: tempfile::TempDir,
    ws: Workspace,
    outside: std::path::PathBuf,
}

/// A workspace with files, a folder, a link to inside and links to
/// outside (a folder and a file), beside a folder that is not its own.
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let outside = root.join("outside");
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(ws.join("src/a.rs"), "a").unwrap();
    std::fs::write(outside.join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), ws.join("secret-link")).unwrap();
    std::os::unix::fs::symlink(ws.join("src"), ws.join("in")).unwrap();
    std::os::unix::fs::symlink("../outside", ws.join("rel-out")).unwrap();
    Tree { ws: Workspace::new(&ws).unwrap(), outside, _dir: dir }
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just("src".to_owned()),
        Just("deep".to_owned()),
        Just("out".to_owned()),
        Just("in".to_owned()),
        Just("rel-out".to_owned()),
        Just("secret-link".to_owned()),
        Just("new".to_owned()),
        Just(String::new()),
        "[a-z]{1,4}",
    ]
}

proptest! {
    #[test]
    fn prop_a_confined_path_is_inside_the_workspace_or_refused(
        absolute in any::<bool>(),
        from_outside in any::<bool>(),
        segs in proptest::collection::vec(segment(), 0..6),
    ) {
        let t = tree();
        let rel = segs.join("/");
        let given = match (absolute, from_outside) {
            (true, true) => format!("{}/{rel}", t.outside.display()),
            (true, false) => format!("{}/{rel}", t.ws.root().display()),
            _ => rel.clone(),
        };
        if let Ok(real) = t.ws.confine(&given) {
            prop_assert!(real.starts_with(t.ws.root()), "`{given}` resolved to {} outside {}", real.display(), t.ws.root().display());
            // What exists of it resolves inside too (no link leads out).
            let existing = real.ancestors().find(|a| a.exists()).unwrap_or(Path::new("/"));
            let canon = existing.canonicalize().unwrap();
            prop_assert!(canon.starts_with(t.ws.root()), "`{given}` reaches {} through a link", canon.display());
        }
    }
}
