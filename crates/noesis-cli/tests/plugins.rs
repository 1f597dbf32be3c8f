//! The frame plugins end to end: transcripts imported, session links, living
//! docs, review (SARIF, promotion), test generation, `ask`, and a plugin
//! that is a Python program — each model call counted at the fake server.

use std::path::{Path, PathBuf};

use noesis_testkit::{FakeServer, Reply, said, tool_call_completion};
use serde_json::{Value, json};

use crate::support::{Output, Work, output};

fn transcripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/transcripts")
}

fn envelope(data: Value) -> Reply {
    Reply::Chat(
        json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": "scripted"}, "data": data})
            .to_string(),
    )
}

/// The first JSON string value after `"key": ` in `text`.
fn field(text: &str, key: &str) -> Option<String> {
    let at = text.find(&format!("\"{key}\""))?;
    let rest = &text[at + key.len() + 2..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(rest[start..end].to_owned())
}

fn run(work: &Work, llm: Option<&FakeServer>, args: &[&str]) -> Output {
    let mut c = work.noesis_bare();
    c.args(args);
    if let Some(l) = llm {
        c.env("OPENAI_BASE_URL", l.base_url()).env("OPENAI_API_KEY", "sk-test");
    }
    output(&mut c)
}

fn ok(o: &Output) -> &Output {
    assert_eq!(o.code, 0, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    o
}

// ---- transcripts ----

#[test]
fn real_transcripts_import_with_their_files_roles_and_tree() {
    let work = Work::new();
    let s1 = transcripts().join("claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl");
    let o = run(&work, None, &["session", "import", s1.to_str().unwrap(), "--json"]);
    let v = ok(&o).json();
    let files = &v["session"]["files"];
    // 1.0.108 with inline sidechains: the failed Edit (line 46) changed
    // nothing; CLAUDE.md was changed by the MultiEdit that succeeded.
    assert_eq!(files["CLAUDE.md"]["role"], "modified", "{files}");
    assert_eq!(files["todo-app/package.json"]["role"], "read", "{files}");
    assert_eq!(files.as_object().unwrap().len(), 2, "{files}");
    let frames = v["frames"].as_array().unwrap();
    let root = frames.iter().find(|f| f["parent_id"].is_null()).unwrap();
    assert_eq!(v["session"]["root_frame_id"], root["frame_id"]);
    assert!(root["query"].as_str().unwrap().starts_with("transcript: "));
    // Sidechain calls hang under the Task call that started them.
    let tasks: Vec<&Value> = frames.iter().filter(|f| f["query"].as_str().unwrap().starts_with("Task ")).collect();
    assert!(!tasks.is_empty());
    let under_task = frames.iter().filter(|f| tasks.iter().any(|t| t["frame_id"] == f["parent_id"])).count();
    assert!(under_task >= 2, "subagent calls under their Task: {under_task}");
    let failed = frames
        .iter()
        .find(|f| f["conclusion"].as_str().unwrap().contains("has not been read yet"))
        .expect("the failed Edit is a frame");
    assert_eq!(failed["confidence"], 0.0);
    assert!(
        failed["evidence"].as_array().unwrap().iter().all(|e| e["kind"] != "file"),
        "a failed edit rests on no file"
    );
    assert!(o.stderr.is_empty() || !o.stderr.contains("skipped"), "{}", o.stderr);

    // The same bytes again: the same session, nothing new.
    let again = run(&work, None, &["session", "import", s1.to_str().unwrap(), "--json"]);
    assert_eq!(ok(&again).json()["session"]["session_id"], v["session"]["session_id"]);
    assert!(again.stderr.contains("imported already"), "{}", again.stderr);
    // Kept as-is by hash under NOESIS_HOME.
    let kept = std::fs::read_dir(work.path().join(".noesis/transcripts")).unwrap().count();
    assert_eq!(kept, 1);
    // The dashboard lists it, and its page says what it did.
    let (_ui, base) = crate::dashboard::ui(&work);
    let index = crate::dashboard::get(&base, "/");
    let id = v["session"]["session_id"].as_str().unwrap();
    assert!(
        index.body.contains(&format!("href=\"/sessions/{id}\"")) && index.body.contains("<td>transcript</td>"),
        "{}",
        index.body
    );
    let page = crate::dashboard::get(&base, &format!("/sessions/{id}"));
    assert!(page.body.contains("What the session did") && page.body.contains(">CLAUDE.md<"), "{}", page.body);
}

#[test]
fn a_version_2_transcript_with_its_subagent_and_a_pivot_or_backtrack() {
    let work = Work::new();
    let base = transcripts().join("spotter__ae4a77f8-aedd-4bc1-888f-c94edc91af04");
    let main = format!("{}.head257.jsonl", base.display());
    let agent = format!("{}__subagents__agent-aac57f5.jsonl", base.display());
    let without = ok(&run(&work, None, &["session", "import", &main, "--json"])).json();
    let work2 = Work::new();
    let with = ok(&run(&work2, None, &["session", "import", &main, "--agent", &agent, "--json"])).json();
    let n = |v: &Value| v["frames"].as_array().unwrap().len();
    assert!(n(&with) > n(&without), "the subagent's calls join the tree: {} vs {}", n(&with), n(&without));
    let files = &with["session"]["files"];
    assert_eq!(files["lib/spotter/telemetry/otel.ex"]["role"], "created", "{files}");
    assert_eq!(files["mix.exs"]["role"], "modified", "{files}");
    assert_eq!(files["config/config.exs"]["role"], "read", "{files}");
}

#[test]
fn a_truncated_or_corrupt_line_is_reported_by_number_and_the_rest_imported() {
    let work = Work::new();
    let text =
        std::fs::read_to_string(transcripts().join("sniffly__ba79134d-b6e9-4867-af0c-6941038c9e4b.jsonl")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let n = lines.len();
    lines[9] = "{not json".into();
    let last = lines[n - 1].clone();
    lines[n - 1] = last[..last.len() / 2].to_owned();
    // A very long line (4 MB of text in a prompt) parses.
    lines.insert(3, json!({"type": "user", "uuid": "long-1", "parentUuid": null, "sessionId": "x", "message": {"role": "user", "content": "y".repeat(4 << 20)}}).to_string());
    let f = work.write("broken.jsonl", &(lines.join("\n") + "\n"));
    let o = run(&work, None, &["session", "import", f.to_str().unwrap(), "--json"]);
    let v = ok(&o).json();
    assert!(o.stderr.contains("line 11: skipped"), "{}", o.stderr);
    assert!(o.stderr.contains(&format!("line {}: skipped", n + 1)), "{}", o.stderr);
    assert!(v["frames"].as_array().unwrap().len() > 10);
    // Not a transcript at all: refused, nothing stored.
    let junk = work.write("junk.jsonl", "hello\nworld\n");
    let o = run(&work, None, &["session", "import", junk.to_str().unwrap()]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("junk.jsonl"), "{}", o.stderr);
}

#[test]
fn odd_transcripts_import_without_panicking() {
    let work = Work::new();
    let line = |v: Value| v.to_string();
    // A prompt that is only an image, and a parent link that points forward.
    let text = [
        line(json!({"type": "user", "uuid": "u0", "parentUuid": null, "sessionId": "odd", "message": {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}})),
        line(json!({"type": "user", "uuid": "u1", "parentUuid": "u2", "sessionId": "odd", "message": {"role": "user", "content": "second"}})),
        line(json!({"type": "user", "uuid": "u2", "parentUuid": "u0", "sessionId": "odd", "message": {"role": "user", "content": "third"}})),
    ]
    .join("\n");
    let f = work.write("odd.jsonl", &text);
    let o = run(&work, None, &["session", "import", f.to_str().unwrap(), "--json"]);
    let v = ok(&o).json();
    let queries: Vec<&str> = v["frames"].as_array().unwrap().iter().map(|f| f["query"].as_str().unwrap()).collect();
    assert!(queries.contains(&"(1 image(s), no text)"), "{queries:?}");
    assert!(queries.contains(&"second") && queries.contains(&"third"), "{queries:?}");
}

#[test]
fn claude_project_folders_are_found() {
    let work = Work::new();
    let proj = work.path().join("demo");
    std::fs::create_dir_all(&proj).unwrap();
    let name: String = proj
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = work.path().join(".claude/projects").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        transcripts().join("sniffly__ba79134d-b6e9-4867-af0c-6941038c9e4b.jsonl"),
        dir.join("ba79134d.jsonl"),
    )
    .unwrap();
    let v = ok(&run(&work, None, &["session", "import", "--claude-project", proj.to_str().unwrap(), "--json"])).json();
    assert!(v["session"]["conversation_log"].as_str().unwrap().ends_with("ba79134d.jsonl"));
    let o = run(&work, None, &["session", "import", "nope", "--claude-project", proj.to_str().unwrap()]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no session nope"), "{}", o.stderr);
    // The session belongs to the current directory's project unless
    // --project says otherwise.
    assert_eq!(v["session"]["project_id"], format!("path:{}", work.path().canonicalize().unwrap().display()));
    let s1 = transcripts().join("claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl");
    let other = ok(&run(
        &work,
        None,
        &["session", "import", s1.to_str().unwrap(), "--project", proj.to_str().unwrap(), "--json"],
    ))
    .json();
    assert_eq!(other["session"]["project_id"], format!("path:{}", proj.canonicalize().unwrap().display()));
}

// ---- docs ----

const UNIT_A: &str = "def add(a: int, b: int) -> int:\n    return a + b\n";

fn docs_project(work: &Work) {
    work.write("proj/.git/HEAD", "ref: refs/heads/main\n");
    work.write("proj/calc/add.py", UNIT_A);
    work.write("proj/calc/mul.py", "import math\n\ndef mul(a, b):\n    return a * b\n");
    work.write("proj/text/fmt.py", "def shout(s: str) -> str:\n    return s.upper()\n");
    work.write("proj/lib/src/lib.rs", "pub fn half(x: u32) -> u32 {\n    x / 2\n}\n");
}

fn docs_llm() -> FakeServer {
    FakeServer::start(vec![Reply::respond(|req| {
        let unit = field(&said(req), "unit").unwrap_or_default();
        envelope(json!({"purpose": format!("The {unit} unit."), "api_notes": [{"name": "add", "note": "Adds."}], "rationale": "scripted"}))
    })])
    .unwrap()
}

fn node_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    all.sort();
    all
}

#[test]
fn docs_sync_remakes_only_stale_nodes_and_renders_the_same_bytes() {
    let work = Work::new();
    docs_project(&work);
    let llm = docs_llm();
    let proj = work.path().join("proj");
    let mut c = work.noesis_bare();
    c.current_dir(&proj).args(["docs", "sync"]).env("OPENAI_BASE_URL", llm.base_url()).env("OPENAI_API_KEY", "sk-test");
    let o = output(&mut c);
    ok(&o);
    assert!(o.stdout.contains("3 regenerated, 0 unchanged"), "{}", o.stdout);
    assert_eq!(llm.received().len(), 3, "one model call per unit");
    let dir = proj.join("docs/noesis");
    let first = node_bytes(&dir);
    assert_eq!(first.len(), 6, "a YAML node and a Markdown page per unit");
    let yaml = std::fs::read_to_string(dir.join("calc.yaml")).unwrap();
    for key in [
        "module: \"calc\"",
        "purpose: \"The calc unit.\"",
        "dependencies:\n  - \"math\"",
        "public_api:\n  - \"def add(a: int, b: int) -> int\"",
        "invalidation_condition:\n  files:\n    - path: \"calc/add.py\"",
        "last_verified: ",
        "frame_id: ",
    ] {
        assert!(yaml.contains(key), "{key} in\n{yaml}");
    }
    let md = std::fs::read_to_string(dir.join("calc.md")).unwrap();
    assert!(
        md.starts_with("# calc\n\nThe calc unit.\n\n## Public API\n\n- `def add(a: int, b: int) -> int` — Adds.\n"),
        "{md}"
    );

    // Nothing changed: no call, every byte the same.
    let again = output(
        work.noesis_bare()
            .current_dir(&proj)
            .args(["docs", "sync"])
            .env("OPENAI_BASE_URL", llm.base_url())
            .env("OPENAI_API_KEY", "sk-test"),
    );
    assert!(ok(&again).stdout.contains("0 regenerated, 3 unchanged"), "{}", again.stdout);
    assert_eq!(llm.received().len(), 3);
    assert_eq!(node_bytes(&dir), first);

    // One file of one unit changes: status names it, sync remakes it alone.
    std::fs::write(proj.join("calc/mul.py"), "import math\n\ndef mul(a, b):\n    return b * a\n").unwrap();
    let status = output(work.noesis_bare().current_dir(&proj).args(["docs", "status"]));
    assert_eq!(status.code, 1, "{}", status.stderr);
    assert!(
        status.stdout.contains("stale  calc  (frame invalidated: file calc/mul.py changed")
            && status.stdout.contains("1 of 3 nodes stale"),
        "{}",
        status.stdout
    );
    let third = output(
        work.noesis_bare()
            .current_dir(&proj)
            .args(["docs", "sync", "--json"])
            .env("OPENAI_BASE_URL", llm.base_url())
            .env("OPENAI_API_KEY", "sk-test"),
    );
    let v = ok(&third).json();
    assert_eq!(v["regenerated"].as_array().unwrap().len(), 1);
    assert_eq!(v["regenerated"][0]["unit"], "calc");
    assert_eq!(llm.received().len(), 4);
    let now = node_bytes(&dir);
    for ((name, bytes), (name2, before)) in now.iter().zip(&first) {
        assert_eq!(name, name2);
        if name.starts_with("calc.") {
            assert_ne!(bytes, before, "{name} is remade");
        } else {
            assert_eq!(bytes, before, "{name} is untouched");
        }
    }

    // A unit whose files are all gone: its node is stale, then removed.
    std::fs::remove_file(proj.join("text/fmt.py")).unwrap();
    let status = output(work.noesis_bare().current_dir(&proj).args(["docs", "status"]));
    assert!(status.stdout.contains("stale  text  (its files are gone)"), "{}", status.stdout);
    let gone = output(
        work.noesis_bare()
            .current_dir(&proj)
            .args(["docs", "sync"])
            .env("OPENAI_BASE_URL", llm.base_url())
            .env("OPENAI_API_KEY", "sk-test"),
    );
    assert!(
        ok(&gone).stdout.contains("removed text") && gone.stdout.contains("0 regenerated, 2 unchanged, 1 removed"),
        "{}",
        gone.stdout
    );
    assert!(!dir.join("text.yaml").exists() && !dir.join("text.md").exists());
    assert_eq!(llm.received().len(), 4, "removing asks nothing");
}

// ---- review ----

fn review_llm(title: &'static str) -> FakeServer {
    FakeServer::start(vec![Reply::respond(move |req| {
        let file = field(&said(req), "path").unwrap_or_default();
        envelope(json!({"findings": [{"severity": "warning", "category": "correctness", "file": file, "start_line": 1, "end_line": 2,
                        "title": title, "message": "Division by a value that may be zero.", "resolves_when": "the divisor is checked"}],
                        "summary": "one risk", "rationale": "scripted"}))
    })])
    .unwrap()
}

fn diff_of(files: &[(&str, &str)]) -> String {
    let mut d = String::new();
    for (path, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        d.push_str(&format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
            lines.len()
        ));
        for l in lines {
            d.push_str(&format!("+{l}\n"));
        }
    }
    d
}

#[test]
fn review_reuses_what_holds_promotes_at_the_third_sighting_and_writes_valid_sarif() {
    let work = Work::new();
    let llm = review_llm("Unchecked division");
    let files = [("a.py", "def f(x):\n    return 1 / x\n"), ("b.py", "def g(y):\n    return 2 / y\n")];
    for (p, t) in files {
        work.write(p, t);
    }
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    let d = work.write("change.diff", &diff_of(&files));
    let o = ok(&run(&work, Some(&llm), &["review", "--diff", d.to_str().unwrap(), "--format", "json"])).json();
    assert_eq!(llm.received().len(), 2, "one call per file");
    assert_eq!(o["findings"].as_array().unwrap().len(), 2);
    assert!(o["promotions"].as_array().unwrap().is_empty(), "two sightings are not three");

    // Paths that leave the project are never read nor sent to the model.
    let evil = work.write(
        "evil.diff",
        "--- /dev/null\n+++ b//etc/passwd\n@@ -0,0 +1 @@\n+x\n--- /dev/null\n+++ b/../outside.py\n@@ -0,0 +1 @@\n+x\n",
    );
    let v = ok(&run(&work, Some(&llm), &["review", "--diff", evil.to_str().unwrap(), "--format", "json"])).json();
    assert_eq!(llm.received().len(), 2, "no call: {v}");
    let skipped: Vec<&str> = v["skipped"].as_array().unwrap().iter().map(|s| s["why"].as_str().unwrap()).collect();
    assert_eq!(skipped, ["outside the project: not read", "outside the project: not read"], "{v}");

    // The same files, unchanged: reused, no call.
    let again = ok(&run(&work, Some(&llm), &["review", "--diff", d.to_str().unwrap(), "--format", "json"])).json();
    assert_eq!(llm.received().len(), 2);
    assert!(again["files"].as_array().unwrap().iter().all(|f| f["reused"] == true), "{again}");

    // a.py changes: it is reviewed again, told what was flagged there last
    // time and that the file changed since.
    work.write("a.py", "def f(x):\n    return 1 / (x or 1)\n");
    let calls = llm.received().len();
    ok(&run(&work, Some(&llm), &["review", "--diff", d.to_str().unwrap(), "--format", "json"]));
    assert_eq!(llm.received().len(), calls + 1, "only a.py is asked again");
    let asked = said(&llm.received().last().unwrap().json());
    assert!(asked.contains("Unchecked division") && asked.contains("the file changed since"), "{asked}");

    // The same mistake in a third file: promoted to a principle.
    work.write("c.py", "def h(z):\n    return 3 / z\n");
    let d3 = work.write("c.diff", &diff_of(&[("c.py", "def h(z):\n    return 3 / z\n")]));
    let text = ok(&run(&work, Some(&llm), &["review", "--diff", d3.to_str().unwrap()])).stdout.clone();
    assert!(text.contains("promoted: Seen 3 times (correctness): Unchecked division."), "{text}");
    let promoted = ok(&run(&work, None, &["frames", "list", "--status", "promoted", "--json"])).json();
    assert_eq!(promoted.as_array().unwrap().len(), 1, "{promoted}");

    // A later review gets the principle in its input, and SARIF carries it.
    work.write("d.py", "def k(w):\n    return 4 / w\n");
    let d4 = work.write("d.diff", &diff_of(&[("d.py", "def k(w):\n    return 4 / w\n")]));
    let sarif_path = work.path().join("out.sarif");
    ok(&run(
        &work,
        Some(&llm),
        &["review", "--diff", d4.to_str().unwrap(), "--format", "sarif", "--output", sarif_path.to_str().unwrap()],
    ));
    let last = said(&llm.received().last().unwrap().json());
    assert!(last.contains("Seen 3 times (correctness): Unchecked division"), "the principle reaches the model: {last}");
    let sarif: Value = serde_json::from_str(&std::fs::read_to_string(&sarif_path).unwrap()).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../noesis-review/tests/data/sarif-2.1.0.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&sarif).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(sarif["version"], "2.1.0");
    assert_eq!(sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "d.py");
}

// ---- testgen ----

/// Specs echo the function and signature hash the input names.
fn testgen_llm() -> FakeServer {
    FakeServer::start(vec![Reply::respond(|req| {
        let text = said(req);
        let function = field(&text, "function").unwrap_or_default();
        let hash = field(&text, "signature_hash").unwrap_or_default();
        let cases = match function.as_str() {
            "half" => json!([{"name": "four", "inputs": [4], "expected": {"value": 2}, "kind": "normal"}]),
            "add" => json!([{"name": "two and three", "inputs": [2, 3], "expected": {"value": 5}, "kind": "normal"},
                            {"name": "zeros", "inputs": [0, 0], "expected": {"value": 0}, "kind": "edge"}]),
            _ => json!([{"name": "two by three", "inputs": [2, 3], "expected": {"value": 6}, "kind": "normal"}]),
        };
        envelope(json!({"function": function, "signature_hash": hash, "rationale": format!("pins {function}"), "cases": cases}))
    })])
    .unwrap()
}

#[test]
fn testgen_writes_tests_from_specs_and_asks_again_only_for_changed_signatures() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    work.write("calc.py", "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n");
    let llm = testgen_llm();
    let v = ok(&run(&work, Some(&llm), &["testgen", "calc.py", "--json"])).json();
    assert_eq!(llm.received().len(), 2, "a spec per function: {v}");
    let test = std::fs::read_to_string(work.path().join("tests/noesis/test_calc.py")).unwrap();
    assert!(test.contains("from calc import") || test.contains("import calc"), "{test}");
    assert!(test.contains("def test_add_two_and_three"), "{test}");
    let pytest = std::env::var("NOESIS_PYTEST").ok().filter(|p| Path::new(p).exists());
    if pytest.is_none() {
        noesis_testkit::skip::missing(
            noesis_testkit::skip::Dependency::Pytest,
            "testgen_writes_tests_from_specs",
            "NOESIS_PYTEST does not name an installed pytest",
        );
    }
    if let Some(pytest) = pytest {
        let o = std::process::Command::new(pytest)
            .arg("-q")
            .arg("tests/noesis/test_calc.py")
            .current_dir(work.path())
            .env("PYTHONPATH", work.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "the generated tests pass: {}", String::from_utf8_lossy(&o.stdout));
    }

    // A change inside a body: no spec goes back to the model.
    work.write("calc.py", "def add(a, b):\n    return b + a\n\n\ndef mul(a, b):\n    return a * b\n");
    let v = ok(&run(&work, Some(&llm), &["testgen", "--changed", "--json"])).json();
    assert_eq!(llm.received().len(), 2, "body-only change: {v}");
    assert_eq!(v["kept"].as_array().unwrap().len(), 2, "{v}");

    // A signature change: that spec (only) is written again, and the old
    // spec's frame is invalidated.
    let old = std::fs::read_to_string(work.path().join("tests/noesis/specs/calc.py/mul.json")).unwrap();
    let old_frame = serde_json::from_str::<Value>(&old).unwrap()["frame_id"].as_str().unwrap().to_owned();
    work.write("calc.py", "def add(a, b):\n    return b + a\n\n\ndef mul(a, b, c=1):\n    return a * b * c\n");
    let v = ok(&run(&work, Some(&llm), &["testgen", "--changed", "--json"])).json();
    assert_eq!(llm.received().len(), 3, "{v}");
    assert_eq!(v["specified"][0][1], "mul", "{v}");
    let shown = ok(&run(&work, None, &["frames", "show", &old_frame, "--json"])).json();
    assert_eq!(shown["status"], "invalidated", "{shown}");

    // The file is deleted: its specs and its test file go, nothing fails.
    std::fs::remove_file(work.path().join("calc.py")).unwrap();
    let v = ok(&run(&work, Some(&llm), &["testgen", "--changed", "--json"])).json();
    assert_eq!(v["removed"], json!(["tests/noesis/test_calc.py"]), "{v}");
    assert_eq!(v["dropped"].as_array().unwrap().len(), 2, "{v}");
    assert!(!work.path().join("tests/noesis/test_calc.py").exists());

    // Rust: a #[test] per case, calling the function by its crate path.
    work.write("src/lib.rs", "pub fn half(x: u32) -> u32 {\n    x / 2\n}\n\nfn private() {}\n");
    let v = ok(&run(&work, Some(&llm), &["testgen", "src/lib.rs", "--json"])).json();
    assert_eq!(v["specified"].as_array().unwrap().len(), 1, "public functions only: {v}");
    let rust = std::fs::read_to_string(work.path().join("tests/noesis/src__lib_noesis_tests.rs")).unwrap();
    assert!(rust.contains("#[test]") && rust.contains("crate::half(4)"), "{rust}");
}

// ---- ask, links ----

fn direct_again() -> FakeServer {
    FakeServer::start(vec![Reply::Chat("{\"answer\": \"no idea\", \"confidence\": 0.1, \"cites\": []}".into())])
        .unwrap()
}

/// A session in which the user went back: the token-expiry question was
/// abandoned for the session store (a backtrack), so it is set aside.
fn backtracking_transcript() -> String {
    let line = |v: Value| v.to_string();
    [
        line(json!({"type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "bt", "timestamp": "2026-11-01T10:00:00Z", "cwd": "/w", "message": {"role": "user", "content": "analyse the auth module"}})),
        line(json!({"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "bt", "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "auth uses tokens"}]}})),
        line(json!({"type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": "bt", "message": {"role": "user", "content": "check the token expiry"}})),
        line(json!({"type": "assistant", "uuid": "a2", "parentUuid": "u2", "sessionId": "bt", "message": {"id": "m2", "role": "assistant", "content": [{"type": "text", "text": "expiry is one hour"}]}})),
        line(json!({"type": "user", "uuid": "u3", "parentUuid": "a1", "sessionId": "bt", "message": {"role": "user", "content": "look at the session store instead"}})),
        line(json!({"type": "assistant", "uuid": "a3", "parentUuid": "u3", "sessionId": "bt", "message": {"id": "m3", "role": "assistant", "content": [{"type": "text", "text": "sessions live in redis"}]}})),
    ]
    .join("\n")
        + "\n"
}

#[test]
fn a_backtrack_in_a_transcript_sets_the_abandoned_branch_aside() {
    let work = Work::new();
    let f = work.write("bt.jsonl", &backtracking_transcript());
    let v = ok(&run(&work, None, &["session", "import", f.to_str().unwrap(), "--json"])).json();
    let frames = v["frames"].as_array().unwrap();
    let by = |q: &str| frames.iter().find(|f| f["query"] == q).unwrap_or_else(|| panic!("{q} in {frames:?}"));
    let (root, expiry, store) =
        (by("analyse the auth module"), by("check the token expiry"), by("look at the session store instead"));
    assert_eq!(expiry["status"], "suspended");
    assert_eq!(store["status"], "completed");
    assert_eq!(store["branched_from"], expiry["frame_id"]);
    assert_eq!(expiry["parent_id"], root["frame_id"], "a refine is a child of its prompt");
    assert_eq!(store["parent_id"], root["frame_id"], "the backtrack forks where the user went back to");
    assert_eq!(root["conclusion"], "auth uses tokens");
}

#[test]
fn ask_opens_frames_through_tools_offers_set_aside_branches_and_sees_only_linked_sessions() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    let id = |v: &Value| v["session"]["session_id"].as_str().unwrap().to_owned();
    let bt = work.write("bt.jsonl", &backtracking_transcript());
    let auth = id(&ok(&run(&work, None, &["session", "import", bt.to_str().unwrap(), "--json"])).json());
    let s2 = transcripts().join("sniffly__ba79134d-b6e9-4867-af0c-6941038c9e4b.jsonl");
    let music = id(&ok(&run(&work, None, &["session", "import", s2.to_str().unwrap(), "--json"])).json());

    // A first question, answered directly (this starts the working session).
    let direct = FakeServer::start(vec![Reply::Chat(
        "{\"answer\": \"the parser splits on commas\", \"confidence\": 0.5, \"cites\": []}".into(),
    )])
    .unwrap();
    let first = ok(&run(&work, Some(&direct), &["ask", "how does the parser split fields", "--json", "-q"])).json();
    assert_eq!(first["promoted"], false, "0.5 is below the threshold");
    let parser_frame = first["frame"]["frame_id"].as_str().unwrap().to_owned();
    let ours =
        ok(&run(&work, None, &["session", "diff", "--json"])).json()["diff"]["session_id"].as_str().unwrap().to_owned();
    ok(&run(&work, None, &["session", "link", &ours, &auth, "--reason", "the auth work"]));

    // Ask: the model searches, opens the parser frame, answers.
    let searches = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&searches);
    let pf = parser_frame.clone();
    let llm = FakeServer::start(vec![Reply::respond(move |req| {
        let tools: Vec<&Value> = req["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
        if tools.len() == 1 {
            seen.lock().unwrap().push(tools[0]["content"].as_str().unwrap_or_default().to_owned());
        }
        match tools.len() {
            0 => Reply::Status(
                200,
                tool_call_completion("c0", "search_frames", &json!({"text": "music"})).to_string(),
                vec![],
            ),
            1 => Reply::Status(
                200,
                tool_call_completion("c1", "open_frame", &json!({"frame_id": pf})).to_string(),
                vec![],
            ),
            _ => Reply::Chat(format!(
                "{{\"answer\": \"it splits on commas\", \"confidence\": 0.9, \"cites\": [\"{pf}\"]}}"
            )),
        }
    })])
    .unwrap();
    let v = ok(&run(&work, Some(&llm), &["ask", "what did we find about the parser", "--json", "-q"])).json();
    let children = v["children"].as_array().unwrap();
    assert_eq!(children.len(), 2, "each tool call is a child frame: {children:?}");
    assert!(children[1]["query"].as_str().unwrap().starts_with("open_frame"));
    assert!(
        children[1]["evidence"].as_array().unwrap().iter().any(|e| e["frame_id"] == parser_frame.as_str()),
        "{children:?}"
    );
    assert_eq!(v["frame"]["conclusion"], "it splits on commas");
    assert!(v["frame"]["invalidation_condition"]["frames"].as_array().unwrap().contains(&json!(parser_frame)));
    let offered: Vec<&str> = v["suspended"].as_array().unwrap().iter().map(|s| s["query"].as_str().unwrap()).collect();
    assert_eq!(offered, ["check the token expiry"], "the linked session's set-aside branch is offered");
    assert_eq!(v["promoted"], true, "confident and verified: promoted to memory");
    // The music transcript is not linked: none of its frames are found, but
    // a question like its prompt points at it.
    let hint = ok(&run(
        &work,
        Some(&direct_again()),
        &["ask", "now write the program using the README instruction", "--json", "-q"],
    ))
    .json();
    assert_eq!(hint["similar_sessions"][0]["session_id"], music.as_str(), "{hint}");
    let found = searches.lock().unwrap()[0].clone();
    assert_eq!(found, "no frames match", "an unlinked session stays invisible");
    let text = ok(&run(&work, Some(&llm), &["ask", "what did we find about the parser again", "-q"])).stdout.clone();
    assert!(text.contains("set aside earlier: check the token expiry"), "{text}");

    // Linked on purpose, they are found; and memory comes first.
    ok(&run(&work, None, &["session", "link", &ours, &music]));
    searches.lock().unwrap().clear();
    let v = ok(&run(&work, Some(&llm), &["ask", "what did we find about the parser and music", "--json", "-q"])).json();
    let found = searches.lock().unwrap()[0].clone();
    assert!(found.contains("music"), "{found}");
    assert!(
        v["memory"].as_array().unwrap().iter().any(|m| m["text"].as_str().unwrap().contains("it splits on commas")),
        "{v}"
    );
    let links = ok(&run(&work, None, &["session", "links", "--json"])).json();
    assert_eq!(links.as_array().unwrap().len(), 2);
    ok(&run(&work, None, &["session", "unlink", &music, &ours]));
    assert_eq!(ok(&run(&work, None, &["session", "links", "--json"])).json().as_array().unwrap().len(), 1);
    let o = run(&work, None, &["session", "unlink", &music, &ours]);
    assert!(o.stderr.contains("are not linked"), "{}", o.stderr);
}

// ---- progress ----

#[test]
fn docs_review_and_testgen_show_progress_in_a_terminal_only() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    work.write("calc/add.py", UNIT_A);
    let slow = |r: Reply| Reply::Delay(std::time::Duration::from_millis(400), Box::new(r));
    let docs = FakeServer::start(vec![slow(envelope(json!({"purpose": "Adds.", "rationale": "r"})))]).unwrap();
    let envs = |s: &FakeServer| vec![("OPENAI_BASE_URL", s.base_url()), ("OPENAI_API_KEY", "sk-test".to_owned())];
    let shown = crate::support::in_terminal(&work, &envs(&docs), "docs sync", "");
    assert_eq!(shown.code, 0, "{}", shown.stdout);
    assert!(shown.stdout.contains("docs: writing calc"), "{}", shown.stdout);
    let d = work.write("c.diff", &diff_of(&[("calc/add.py", UNIT_A)]));
    let review =
        FakeServer::start(vec![slow(envelope(json!({"findings": [], "summary": "fine", "rationale": "r"})))]).unwrap();
    let shown = crate::support::in_terminal(&work, &envs(&review), &format!("review --diff {}", d.display()), "");
    assert!(shown.stdout.contains("review: calc/add.py"), "{}", shown.stdout);
    let spec = envelope(json!({"function": "add", "signature_hash": "x", "rationale": "r", "cases": []}));
    let tg = FakeServer::start(vec![slow(spec)]).unwrap();
    let shown = crate::support::in_terminal(&work, &envs(&tg), "testgen calc/add.py", "");
    assert!(shown.stdout.contains("testgen: calc/add.py add"), "{}", shown.stdout);
    assert_eq!(shown.code, 1, "the spec is refused (no cases, wrong hash): {}", shown.stdout);
    // Quiet, or in a pipe: none (the file changes each time, so each run
    // asks the model again).
    work.write("calc/add.py", &format!("{UNIT_A}# quiet\n"));
    let quiet =
        crate::support::in_terminal(&work, &envs(&review), &format!("review --diff {} --quiet", d.display()), "");
    assert!(!quiet.stdout.contains("review: calc"), "{}", quiet.stdout);
    work.write("calc/add.py", &format!("{UNIT_A}# piped\n"));
    let calls = review.received().len();
    let piped = run(&work, Some(&review), &["review", "--diff", d.to_str().unwrap()]);
    assert_eq!(review.received().len(), calls + 1, "the model was asked: {}", piped.stderr);
    assert!(!piped.stderr.contains("review: ") && !piped.stderr.contains('\r'), "{}", piped.stderr);
}

// ---- a plugin that is a program ----

const ECHO_PLUGIN: &str = r#"import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    req = json.loads(line)
    m, p = req["method"], req.get("params", {})
    if m == "hello":
        out = {"protocol": 1}
    elif m == "transform_input":
        out = {"text": "echo " + p["raw"]["query"], "input": {"answer": p["raw"]["query"].upper()}, "files": ["notes.txt"]}
    elif m == "parse_output":
        if mode == "crash":
            sys.exit(5)
        out = {"conclusion": p["raw"]["answer"], "confidence": 0.6, "also": {"files": []}}
    else:
        out = {}
    print(json.dumps({"id": req["id"], "result": out}), flush=True)
"#;

#[test]
fn a_python_plugin_from_the_config_runs_and_a_crashing_one_leaves_the_store_consistent() {
    let work = Work::new();
    work.write(".git/HEAD", "ref: refs/heads/main\n");
    work.write("notes.txt", "hello\n");
    let script = work.write("echo.py", ECHO_PLUGIN);
    let py = if std::process::Command::new("python3").arg("--version").output().is_ok() { "python3" } else { "python" };
    work.write(
        "noesis.toml",
        &format!(
            "[plugins.echo]\ncommand = [\"{py}\", \"{s}\", \"ok\"]\n[plugins.broken]\ncommand = [\"{py}\", \"{s}\", \"crash\"]\ntimeout_seconds = 5\n",
            s = script.display()
        ),
    );
    let listed = ok(&run(&work, None, &["plugin", "list"])).stdout.clone();
    assert!(listed.contains("echo") && listed.contains("program") && listed.contains("docs"), "{listed}");
    let v = ok(&run(&work, None, &["plugin", "run", "echo", "hello there", "--json"])).json();
    assert_eq!(v["conclusion"], "HELLO THERE");
    assert_eq!(v["invalidation_condition"]["files"][0]["path"], "notes.txt", "the slice's file is evidence: {v}");
    let before = ok(&run(&work, None, &["frames", "list", "--json"])).json().as_array().unwrap().len();
    let o = run(&work, None, &["plugin", "run", "broken", "hello"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("plugin broken: parse_output: the plugin crashed"), "{}", o.stderr);
    let after = ok(&run(&work, None, &["frames", "list", "--json"])).json().as_array().unwrap().len();
    assert_eq!(before, after, "nothing half-written");
    let o = run(&work, None, &["plugin", "run", "missing", "x"]);
    assert!(o.stderr.contains("no plugin `missing`") && o.stderr.contains("configured: broken, echo"), "{}", o.stderr);
}
