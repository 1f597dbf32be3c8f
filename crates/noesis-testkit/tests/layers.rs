//! The workspace's layers point one way (issue 26; DESIGN.md "Workspace"):
//! a crate's normal and build dependencies may only point to a lower layer,
//! or within its layer to a crate the layer's order puts below it.
//! Dev-dependencies are free (a test may drive the whole stack). Read from
//! `cargo metadata --no-deps`, so a new `[dependencies]` line that points up
//! fails here with the arrow named.

use std::collections::BTreeSet;
use std::path::Path;

/// The layers, top first. Each layer is a list of tiers, top first: a crate
/// may depend on any crate of a lower layer and, within its own layer, on
/// crates of a lower tier only (never on one of its own tier).
const LAYERS: &[(&str, &[&[&str]])] = &[
    (
        "front end",
        &[
            // The binary glues the other front ends together.
            &["noesis-cli"],
            // Peers: the dashboard does not depend on the HTTP server.
            &["noesis-serve", "noesis-dashboard"],
        ],
    ),
    ("façade", &[&["noesis"]]),
    (
        "engine",
        &[
            // Runs on many workers: drives stored runs and batches through
            // the host, above everything a run is made of.
            &["noesis-temporal"],
            // The episode drives agents, plugins and module runs.
            &["noesis-workflow"],
            // The plugins that implement the boundary, over agents and runs.
            &["noesis-plugins"],
            // The agent host: tools, MCP servers, router and budgets of a run.
            &["noesis-host"],
            // Settings and trust rules, read by the host (they name agent
            // permissions and MCP servers).
            &["noesis-config"],
            &["noesis-mcp"],
            &["noesis-agent"],
            // The plugin boundary knows no plugin; module runs know no agent.
            &["noesis-plugin", "noesis-runtime"],
        ],
    ),
    ("boundary", &[&["noesis-sandbox"]]),
    (
        "base",
        &[
            &[
                "noesis-local",
                "noesis-store",
                "noesis-dist",
                "noesis-code",
                "noesis-review",
                "noesis-transcript",
                "noesis-skills",
            ],
            &["noesis-llm", "noesis-frames", "noesis-modules"],
            // Tracing sits below the LLM client, which emits its own spans.
            &["noesis-trace"],
            // Leaves every layer may use: files written atomically, tree
            // walks and path confinement; a JSON value's type in words.
            &["noesis-fs", "noesis-json"],
        ],
    ),
];

/// Crates that may only be dev-dependencies.
const TEST_ONLY: &[&str] = &["noesis-testkit"];

/// Arrows that point up today and are being removed on another branch;
/// each is allowed until then and should be deleted from here when it is.
const EXCEPTIONS: &[(&str, &str)] = &[];

/// Where `name` sits: (layer index, tier index), lower numbers higher up.
fn place(name: &str) -> Option<(usize, usize)> {
    LAYERS.iter().enumerate().find_map(|(l, (_, tiers))| {
        tiers.iter().enumerate().find_map(|(t, crates)| crates.contains(&name).then_some((l, t)))
    })
}

/// An arrow: a crate, one of its dependencies, and whether it is a
/// dev-dependency.
#[derive(Debug, Clone)]
struct Arrow {
    from: String,
    to: String,
    dev: bool,
}

/// Every arrow that breaks the rules, one message each.
fn violations(crates: &BTreeSet<String>, arrows: &[Arrow]) -> Vec<String> {
    let mut bad = Vec::new();
    for c in crates {
        if place(c).is_none() && !TEST_ONLY.contains(&c.as_str()) {
            bad.push(format!(
                "{c}: a crate the layer table does not know; put it in LAYERS in crates/noesis-testkit/tests/layers.rs \
                 (and in DESIGN.md's \"Workspace\")"
            ));
        }
    }
    for a in arrows.iter().filter(|a| !a.dev && crates.contains(&a.to)) {
        if TEST_ONLY.contains(&a.to.as_str()) {
            bad.push(format!("{} → {}: a test-only crate, allowed as a dev-dependency only", a.from, a.to));
            continue;
        }
        if EXCEPTIONS.contains(&(a.from.as_str(), a.to.as_str())) {
            continue;
        }
        let (Some((fl, ft)), Some((tl, tt))) = (place(&a.from), place(&a.to)) else { continue };
        let down = tl > fl || (tl == fl && tt > ft);
        if !down {
            let how = if tl < fl {
                format!("from the {} layer up to the {} layer", LAYERS[fl].0, LAYERS[tl].0)
            } else if tt == ft {
                format!("sideways within one tier of the {} layer", LAYERS[fl].0)
            } else {
                format!("up within the {} layer", LAYERS[fl].0)
            };
            bad.push(format!("{} → {}: points {how}", a.from, a.to));
        }
    }
    bad
}

/// The workspace's crates and their arrows to each other.
fn workspace() -> (BTreeSet<String>, Vec<Arrow>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let crates: BTreeSet<String> = packages.iter().filter_map(|p| p["name"].as_str()).map(str::to_owned).collect();
    let mut arrows = Vec::new();
    for p in packages {
        let from = p["name"].as_str().unwrap().to_owned();
        for d in p["dependencies"].as_array().unwrap() {
            arrows.push(Arrow {
                from: from.clone(),
                to: d["name"].as_str().unwrap().to_owned(),
                dev: d["kind"].as_str() == Some("dev"),
            });
        }
    }
    (crates, arrows)
}

#[test]
fn every_dependency_points_down_the_layers() {
    let (crates, arrows) = workspace();
    assert!(crates.len() > 15 && crates.contains("noesis-cli"), "the workspace's crates were not found: {crates:?}");
    let bad = violations(&crates, &arrows);
    assert!(bad.is_empty(), "arrows that break the layers (DESIGN.md \"Workspace\"):\n{}", bad.join("\n"));
}

#[test]
fn every_exception_is_still_an_arrow_of_the_tree() {
    // An exception whose arrow is gone must be deleted, not left to excuse
    // the next one.
    let (_, arrows) = workspace();
    for (from, to) in EXCEPTIONS {
        assert!(
            arrows.iter().any(|a| !a.dev && a.from == *from && a.to == *to),
            "{from} → {to} no longer exists: delete it from EXCEPTIONS"
        );
    }
}

#[test]
fn the_rules_catch_arrows_up_sideways_unknown_crates_and_test_only_ones() {
    let crates: BTreeSet<String> = [
        "noesis-llm",
        "noesis-trace",
        "noesis-agent",
        "noesis-mcp",
        "noesis-plugin",
        "noesis-runtime",
        "noesis-testkit",
        "noesis-new",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let arrow = |from: &str, to: &str, dev: bool| Arrow { from: from.into(), to: to.into(), dev };
    let check =
        |a: Arrow| violations(&crates, &[a]).into_iter().filter(|m| !m.starts_with("noesis-new:")).collect::<Vec<_>>();
    // Down, and dev-dependencies anywhere: fine.
    assert!(check(arrow("noesis-llm", "noesis-trace", false)).is_empty());
    assert!(check(arrow("noesis-mcp", "noesis-agent", false)).is_empty());
    assert!(check(arrow("noesis-trace", "noesis-agent", true)).is_empty());
    assert!(check(arrow("noesis-agent", "noesis-testkit", true)).is_empty());
    // Up within a layer, up across layers, sideways in a tier, test-only.
    assert_eq!(
        check(arrow("noesis-trace", "noesis-llm", false)),
        ["noesis-trace → noesis-llm: points up within the base layer"]
    );
    assert_eq!(
        check(arrow("noesis-llm", "noesis-agent", false)),
        ["noesis-llm → noesis-agent: points from the base layer up to the engine layer"]
    );
    assert_eq!(
        check(arrow("noesis-plugin", "noesis-runtime", false)),
        ["noesis-plugin → noesis-runtime: points sideways within one tier of the engine layer"]
    );
    assert_eq!(
        check(arrow("noesis-agent", "noesis-testkit", false)),
        ["noesis-agent → noesis-testkit: a test-only crate, allowed as a dev-dependency only"]
    );
    // A crate nobody placed.
    let unknown = violations(&crates, &[]);
    assert_eq!(unknown.len(), 1);
    assert!(
        unknown[0].starts_with("noesis-new: a crate the layer table does not know; put it in LAYERS"),
        "{unknown:?}"
    );
}

#[test]
fn every_crate_has_its_sentence_in_crates_readme_under_its_layer() {
    // crates/README.md lists the crates by layer, one sentence each; a new
    // crate, or one moved to another layer, must be written there too.
    let (crates, _) = workspace();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("crates/README.md");
    let mut missing = Vec::new();
    for name in &crates {
        let line = format!("- `{name}` — ");
        let Some(at) = readme.find(&line) else {
            missing.push(format!("{name}: no line `- `{name}` — …`"));
            continue;
        };
        let heading = readme[..at].rfind("\n## ").map(|h| readme[h + 4..].lines().next().unwrap_or_default());
        let want = match place(name) {
            Some((l, _)) => match LAYERS[l].0 {
                "front end" => "Front ends",
                "façade" => "Façade",
                "engine" => "Engine",
                "boundary" => "Trust boundary",
                _ => "Base",
            },
            None if TEST_ONLY.contains(&name.as_str()) => "Tests only",
            None => continue, // every_dependency_points_down_the_layers names it
        };
        if heading != Some(want) {
            missing.push(format!("{name}: listed under {heading:?}, belongs under \"{want}\""));
        }
    }
    assert!(missing.is_empty(), "crates/README.md:\n{}", missing.join("\n"));
}
