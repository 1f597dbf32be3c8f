//! `noesis migrate`: legacy modules rewritten as v2.2 in place, with a backup
//! outside the search path, never a half-written module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::{Work, output, regex_escape};

const V1_BODY: &str = "# Review\n\nReview this code: $ARGUMENTS\n\nReturn issues and a rationale.\n";
const SCHEMA_OUTPUT: &str = r#"{
  "input": {"type": "object", "properties": {"code": {"type": "string"}}},
  "output": {
    "type": "object",
    "required": ["issues", "rationale"],
    "properties": {"issues": {"type": "array", "items": {"type": "string"}}, "rationale": {"type": "string"}}
  }
}
"#;
const V21_YAML: &str = "# A v2.1 module, comments and all\nname: greeter\nversion: 1.2.0\nresponsibility: Greets people by name\n\npolicies:\n  network: deny\nfailure:\n  contract: error_union\n  partial_allowed: true\ntests:\n  - tests/a.input.json -> tests/a.expected.json\n";
const V21_PROMPT: &str = "Greet $ARGUMENTS warmly.\r\nTrailing spaces stay:   \n\n";

fn v1(w: &Work, dir: &str) -> PathBuf {
    w.write(
        &format!("{dir}/MODULE.md"),
        &format!("---\nname: reviewer\nversion: 1.0.0\nresponsibility: Reviews code\nexcludes:\n  - rewriting the code\n---\n\n{V1_BODY}"),
    );
    w.write(&format!("{dir}/schema.json"), SCHEMA_OUTPUT);
    w.write(&format!("{dir}/examples/input.json"), "{\"code\": \"x = 1\"}\n");
    w.path().join(dir)
}

fn v21(w: &Work, dir: &str) -> PathBuf {
    w.write(&format!("{dir}/module.yaml"), V21_YAML);
    w.write(&format!("{dir}/prompt.md"), V21_PROMPT);
    w.write(&format!("{dir}/schema.json"), SCHEMA_OUTPUT);
    w.write(&format!("{dir}/tests/a.input.json"), "{\"code\": \"Ada\"}\n");
    w.write(&format!("{dir}/tests/a.expected.json"), "{\"$validate\": {\"ok\": {\"const\": true}}}\n");
    w.path().join(dir)
}

fn v0(w: &Work, dir: &str) -> PathBuf {
    w.write(&format!("{dir}/module.md"), "# Summarise a text\n\nAn old-style module.\n");
    w.write(&format!("{dir}/prompt.txt"), "Summarise:\n$ARGUMENTS\n");
    w.write(&format!("{dir}/input.schema.json"), r#"{"type": "object", "properties": {"text": {"type": "string"}}}"#);
    w.write(
        &format!("{dir}/output.schema.json"),
        r#"{"type": "object", "required": ["summary", "rationale"], "properties": {"summary": {"type": "string"}, "rationale": {"type": "string"}}}"#,
    );
    w.write(&format!("{dir}/constraints.yaml"), "max_words: 40\n");
    w.path().join(dir)
}

fn v20(w: &Work, dir: &str) -> PathBuf {
    w.write(&format!("{dir}/module.yaml"), "name: plain\nversion: 0.3.0\nresponsibility: Says hello\n");
    w.write(&format!("{dir}/prompt.md"), "Say hello to $ARGUMENTS.");
    w.path().join(dir)
}

/// Every file under `dir`, relative path → bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(d) else { return };
        for e in entries.map(Result::unwrap) {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn backups(w: &Work) -> Vec<PathBuf> {
    let dir = w.path().join(".noesis/backups");
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// The line `backup: PATH` of a migration's output.
fn backup_of(stdout: &str) -> PathBuf {
    let line =
        stdout.lines().find_map(|l| l.strip_prefix("backup: ")).unwrap_or_else(|| panic!("no backup line: {stdout}"));
    PathBuf::from(line)
}

fn assert_v22(w: &Work, module: &str) {
    let o = output(w.noesis().args(["validate", module]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("(v2.2, tier decision)"), "{}", o.stdout);
}

#[test]
fn migrate_v1_module() {
    let w = Work::new();
    let dir = v1(&w, "cognitive/modules/reviewer");
    let before = tree(&dir);
    let o = output(w.noesis().args(["migrate", "reviewer"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("migrating reviewer (v1 → v2.2)"), "{}", o.stdout);
    assert_v22(&w, "reviewer");
    let after = tree(&dir);
    assert_eq!(after["prompt.md"], V1_BODY.as_bytes(), "the prompt is the MODULE.md body");
    assert!(!after.contains_key("MODULE.md"));
    assert_eq!(after["examples/input.json"], before["examples/input.json"], "other files are carried over");
    let schema: serde_json::Value = serde_json::from_slice(&after["schema.json"]).unwrap();
    assert!(schema.get("output").is_none() && schema["data"]["required"][0] == "issues", "{schema:#}");
    for s in ["meta", "error", "input"] {
        assert!(schema.get(s).is_some(), "no {s}: {schema:#}");
    }
    // The backup is the original, outside every search folder.
    let backup = backup_of(&o.stdout);
    assert!(backup.starts_with(w.path().join(".noesis/backups").canonicalize().unwrap()), "{}", backup.display());
    assert!(backup.file_name().unwrap().to_string_lossy().starts_with("reviewer-"));
    for search in ["cognitive/modules", ".cognitive/modules"] {
        assert!(!backup.starts_with(w.path().join(search)), "{}", backup.display());
    }
    assert_eq!(tree(&backup), before);
    // Nothing is left in the work area but its lock.
    assert_eq!(work_left(&w), ["lock"]);
    // Migrating again is a no-op with a note.
    let o = output(w.noesis().args(["migrate", "reviewer"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("already v2.2; left alone"), "{}", o.stderr);
    assert_eq!(tree(&dir), after);
    assert_eq!(backups(&w).len(), 1);
}

#[test]
fn migrate_v21_module_keeps_text_prompt_and_tests() {
    let w = Work::new();
    let dir = v21(&w, "cognitive/modules/greeter");
    let before = tree(&dir);
    let o = output(w.noesis().args(["migrate", "greeter"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_v22(&w, "greeter");
    let after = tree(&dir);
    assert_eq!(after["prompt.md"], V21_PROMPT.as_bytes(), "prompt byte for byte");
    let yaml = String::from_utf8(after["module.yaml"].clone()).unwrap();
    assert!(yaml.starts_with(V21_YAML), "the original manifest text, comments included, is kept:\n{yaml}");
    for key in [
        "tier: decision",
        "schema_strictness: medium",
        "max_items: 5",
        "strategy: extensible",
        "runtime_auto_wrap: true",
    ] {
        assert!(yaml.contains(key), "{key} missing:\n{yaml}");
    }
    assert_eq!(after["tests/a.input.json"], before["tests/a.input.json"]);
    assert_eq!(tree(&backup_of(&o.stdout)), before);
    // The kept `tests:` still runs.
    let t = output(w.noesis().args(["test", "greeter", "--provider", "test"]));
    assert_eq!(t.code, 0, "{}{}", t.stdout, t.stderr);
    assert_eq!(t.stdout.lines().last(), Some("1 passed, 0 failed"));
}

#[test]
fn migrate_v0_and_v20_modules() {
    let w = Work::new();
    let old = v0(&w, "cognitive/modules/summary");
    let plain = v20(&w, "cognitive/modules/plain");
    let old_before = tree(&old);
    for name in ["summary", "plain"] {
        let o = output(w.noesis().args(["migrate", name]));
        assert_eq!(o.code, 0, "{name}: {}{}", o.stdout, o.stderr);
        assert_v22(&w, name);
    }
    let after = tree(&old);
    assert_eq!(
        after.keys().map(String::as_str).collect::<Vec<_>>(),
        ["module.yaml", "prompt.md", "schema.json"],
        "the v0 files are folded in"
    );
    assert_eq!(after["prompt.md"], old_before["prompt.txt"]);
    let yaml = String::from_utf8(after["module.yaml"].clone()).unwrap();
    assert!(yaml.contains("responsibility: Summarise a text"), "{yaml}");
    assert!(yaml.contains("max_words: 40"), "{yaml}");
    assert_eq!(tree(&plain)["prompt.md"], b"Say hello to $ARGUMENTS.");
    assert_eq!(backups(&w).len(), 2);
}

#[test]
fn migrate_dry_run_writes_nothing() {
    let w = Work::new();
    let dir = v1(&w, "cognitive/modules/reviewer");
    let before = tree(&dir);
    let o = output(w.noesis().args(["migrate", "reviewer", "--dry-run"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("would migrate reviewer (v1 → v2.2)"), "{}", o.stdout);
    assert!(o.stdout.contains("schema.json: `output` renamed to `data`"), "{}", o.stdout);
    assert!(o.stderr.contains("dry run: nothing was written"), "{}", o.stderr);
    assert_eq!(tree(&dir), before);
    assert!(!w.path().join(".noesis").exists(), "no backup folder for a dry run");
    assert!(!w.path().join("cognitive/modules/.noesis-swap").exists(), "a dry run locks nothing");
}

#[test]
fn migrate_all_skips_current_and_builtin_modules() {
    let w = Work::new();
    let a = v1(&w, "cognitive/modules/reviewer");
    let b = v0(&w, ".cognitive/modules/summary");
    w.write("cognitive/modules/fresh/module.yaml", "name: fresh\nversion: 1.0.0\nresponsibility: r\ntier: exec\n");
    w.write("cognitive/modules/fresh/prompt.md", "p");
    let fresh = tree(&w.path().join("cognitive/modules/fresh"));
    let o = output(w.noesis().args(["migrate", "--all"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("migrated reviewer"), "{}", o.stdout);
    assert!(o.stdout.contains("migrated summary"), "{}", o.stdout);
    assert!(o.stderr.contains("fresh"), "{}", o.stderr);
    assert!(o.stderr.contains("2 migrated, 0 failed, 1 already v2.2"), "{}", o.stderr);
    assert!(
        !o.stdout.contains("code-simplifier") && !o.stderr.contains("code-simplifier"),
        "built-ins are not touched"
    );
    assert_eq!(tree(&w.path().join("cognitive/modules/fresh")), fresh);
    for d in [&a, &b] {
        assert!(d.join("module.yaml").is_file());
    }
    assert_eq!(backups(&w).len(), 2);
    // A built-in named directly is left alone.
    let o = output(w.noesis().args(["migrate", "code-simplifier"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("built-in"), "{}", o.stderr);
}

#[test]
fn migrate_broken_module_changes_nothing() {
    let w = Work::new();
    // The v1 loader reads it, but v2.2 names are lowercase: only a person can rename it.
    w.write("cognitive/modules/bad/MODULE.md", "---\nname: Bad_Name\nversion: 1.0.0\nresponsibility: r\n---\nDo it.\n");
    // Not even loadable: schema.json is not JSON.
    w.write("cognitive/modules/worse/MODULE.md", "---\nname: worse\nversion: 1.0.0\nresponsibility: r\n---\nDo it.\n");
    w.write("cognitive/modules/worse/schema.json", "{ nope");
    let modules = w.path().join("cognitive/modules");
    let before = tree(&modules);
    let o = output(w.noesis().args(["migrate", "bad"]));
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("MODULE.md: cannot be migrated"), "{}", o.stderr);
    assert!(o.stderr.contains("field /name"), "{}", o.stderr);
    let o = output(w.noesis().args(["migrate", "worse"]));
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("worse/schema.json: invalid JSON"), "{}", o.stderr);
    let o = output(w.noesis().args(["migrate", "--all"]));
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("0 migrated, 2 failed"), "{}", o.stderr);
    assert_eq!(tree(&modules), before, "nothing changed");
    assert!(backups(&w).is_empty());
    // Usage errors.
    assert_eq!(output(w.noesis().args(["migrate", "nowhere"])).code, 2);
    assert_eq!(output(w.noesis().arg("migrate")).code, 2);
}

#[test]
fn migrate_restores_a_module_an_interrupted_swap_left_aside() {
    let w = Work::new();
    // What a kill between the two renames leaves: the original moved aside,
    // the staged copy not yet in place.
    let aside = v1(&w, "cognitive/modules/.noesis-migrate/20260101T000000Z/old/reviewer");
    let before = tree(&aside);
    let o = output(w.noesis().args(["migrate", "--all", "--dry-run"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(!w.path().join("cognitive/modules/reviewer").exists(), "a dry run does not restore");
    let o = output(w.noesis().args(["migrate", "--all"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("restored from an interrupted migration"), "{}", o.stderr);
    assert!(o.stdout.contains("migrated reviewer"), "{}", o.stdout);
    assert_eq!(tree(&backup_of(&o.stdout)), before);
}

#[test]
fn migrate_dry_run_report() {
    let w = Work::new();
    v1(&w, "cognitive/modules/reviewer");
    let o = output(w.noesis().args(["migrate", "reviewer", "--dry-run"]));
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&w.path().display().to_string()), "[TMP]");
    settings.bind(|| insta::assert_snapshot!("migrate_dry_run_report", o.stdout));
}

fn work_left(w: &Work) -> Vec<String> {
    let mut left: Vec<String> = std::fs::read_dir(w.path().join("cognitive/modules/.noesis-swap"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    left
}

/// Issue 31: `noesis migrate` had a stage + swap + recover of its own; it
/// now shares the installs' (noesis_dist::swap). Killed at each point, the
/// folder is the whole original or the whole migrated module, and the next
/// `noesis migrate` finishes what was committed or starts again.
#[test]
fn migrate_killed_at_each_point_is_finished_or_done_again() {
    for (point, committed) in [("staged", false), ("committed", true), ("swapped", true)] {
        let w = Work::new();
        let dir = v1(&w, "cognitive/modules/reviewer");
        let before = tree(&dir);
        let mut c = w.noesis_std();
        c.args(["migrate", "reviewer"]);
        crate::support::kill_at(c, point);
        let seen = tree(&dir);
        let migrated = |t: &std::collections::BTreeMap<String, Vec<u8>>| {
            t.contains_key("prompt.md") && t.contains_key("schema.json") && !t.contains_key("MODULE.md")
        };
        assert!(seen == before || migrated(&seen), "{point}: neither the original nor the migrated module");
        let o = output(w.noesis().args(["migrate", "reviewer"]));
        assert_eq!(o.code, 0, "{point}: {}{}", o.stdout, o.stderr);
        if committed {
            assert!(o.stderr.contains("finished putting `reviewer` in place"), "{point}: {}", o.stderr);
            assert!(o.stderr.contains("already v2.2"), "{point}: {}", o.stderr);
        } else {
            assert!(o.stdout.contains("migrating reviewer (v1 → v2.2)"), "{point}: {}", o.stdout);
        }
        assert_v22(&w, "reviewer");
        assert_eq!(work_left(&w), ["lock"], "{point}");
    }
}
