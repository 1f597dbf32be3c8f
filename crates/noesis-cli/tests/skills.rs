//! `noesis skills list|show` over real skill folders, and an agent run
//! whose scripted model (the fake OpenAI server on 127.0.0.1) reads a skill
//! it was told about.

use noesis_testkit::{FakeServer, Reply, tool_call_completion};
use serde_json::{Value, json};

use crate::support::{Work, output, regex_escape};

const FORMS: &str = "---\nname: forms\ndescription: Fills PDF forms\n  from a data file.\ntools: [read_file, Bash]\nmodules: [summarize]\n---\n# Filling a form\n\nRead `reference.md` first.\n";

/// A project (`proj`) with two skills of its own, one of Claude's, one
/// broken, and the person's own skills under `$HOME/.noesis/skills`.
fn project() -> Work {
    let w = Work::new();
    w.write("proj/.noesis/skills/forms/SKILL.md", FORMS);
    w.write("proj/.noesis/skills/forms/reference.md", "Field names are in column A.\n");
    w.write("proj/.noesis/skills/forms/scripts/fill.py", "print('filled')\n");
    w.write(
        "proj/.claude/skills/review/SKILL.md",
        "---\nname: review\ndescription: Reviews a diff.\nallowed-tools: Read, Grep\n---\nLook at the diff.\n",
    );
    w.write("proj/.claude/skills/forms/SKILL.md", "---\nname: forms\ndescription: Claude's forms.\n---\nOlder.\n");
    w.write("proj/.noesis/skills/broken/SKILL.md", "---\nname: broken\n---\nno description\n");
    w.write(".noesis/skills/notes/SKILL.md", "---\nname: notes\ndescription: Keeps my notes tidy.\n---\nMine.\n");
    w
}

fn skills(w: &Work, args: &[&str]) -> crate::support::Output {
    output(w.noesis_bare().current_dir(w.path().join("proj")).arg("skills").args(args))
}

fn snap(w: &Work, name: &str, value: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&w.path().canonicalize().unwrap().display().to_string()), "[TMP]");
    settings.add_filter(&regex_escape(&w.path().display().to_string()), "[TMP]");
    settings.bind(|| insta::assert_snapshot!(name, value));
}

#[test]
fn skills_list_shows_each_skill_once_and_warns_of_the_broken_and_the_shadowed() {
    let w = project();
    let o = skills(&w, &["list"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    snap(&w, "skills_list_table", &o.stdout);
    assert!(
        o.stderr.contains("warning: skill left out: .noesis/skills/broken/SKILL.md: description: missing"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("note: skill `forms` in .claude/skills/forms is shadowed by the one in .noesis/skills/forms"),
        "{}",
        o.stderr
    );
    let o = skills(&w, &["list", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let rows = o.json();
    let names: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["forms", "notes", "review"]);
    assert_eq!(rows[0]["origin"], "project");
    assert_eq!(rows[0]["description"], "Fills PDF forms from a data file.");
    assert_eq!(rows[0]["tools"], json!(["read_file", "Bash"]));
    assert_eq!(rows[1]["origin"], "user");
    assert_eq!(rows[2]["tools"], json!(["Read", "Grep"]), "Claude's allowed-tools count as tools");
    assert!(o.stderr.contains("warning: skill left out"), "warnings stay on stderr with --json");
}

#[test]
fn skills_show_gives_front_matter_body_and_files() {
    let w = project();
    let o = skills(&w, &["show", "forms"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    snap(&w, "skills_show_text", &o.stdout);
    let o = skills(&w, &["show", "forms", "--json"]);
    let v = o.json();
    assert_eq!(v["body"], "# Filling a form\n\nRead `reference.md` first.\n");
    assert_eq!(v["files"], json!(["reference.md", "scripts/fill.py"]));
    assert_eq!((v["modules"].clone(), v["more_files"].clone()), (json!(["summarize"]), json!(false)));
}

#[test]
fn skills_show_of_an_unknown_or_broken_name_fails_with_a_hint() {
    let w = project();
    let o = skills(&w, &["show", "nope"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stdout.is_empty());
    assert!(o.stderr.contains("error: no skill `nope`\nhint: the skills are forms, notes, review"), "{}", o.stderr);
    let o = skills(&w, &["show", "broken"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("hint: its SKILL.md has the problems warned about above"), "{}", o.stderr);
    let empty = Work::new();
    std::fs::create_dir_all(empty.path().join("proj")).unwrap();
    let o = skills(&empty, &["show", "forms"]);
    assert!(o.stderr.contains("hint: no skills are found here"), "{}", o.stderr);
    let o = skills(&empty, &["list"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, ""), "nothing to list is not an error");
}

fn call(id: &str, tool: &str, args: Value) -> Reply {
    Reply::Status(200, tool_call_completion(id, tool, &args).to_string(), vec![])
}

#[test]
fn skills_an_agent_run_is_told_the_index_and_the_model_loads_a_skill_and_one_of_its_files() {
    let w = project();
    let server = FakeServer::start(vec![
        call("k1", "load_skill", json!({"name": "forms"})),
        call("k2", "load_skill", json!({"name": "forms", "file": "reference.md"})),
        call("k3", "load_skill", json!({"name": "forms", "file": "../../../../.noesis/skills/notes/SKILL.md"})),
        Reply::Chat("Column A holds the field names.".into()),
    ])
    .unwrap();
    let ws = w.path().join("proj").to_string_lossy().into_owned();
    let o = output(w.noesis_bare().env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test").args([
        "agent",
        "Fill the form",
        "--workspace",
        &ws,
        "--run-id",
        "r-skill",
    ]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Column A holds the field names.\n"), "{}", o.stderr);
    assert!(o.stderr.contains("skill left out"), "a broken skill is warned about at the start: {}", o.stderr);

    // Up front: names and descriptions only, and the tool.
    let first = server.received()[0].json();
    let system = first["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    assert!(
        system.contains(
            "- forms — Fills PDF forms from a data file.\n- notes — Keeps my notes tidy.\n- review — Reviews a diff.\n"
        ),
        "{system}"
    );
    assert!(!system.contains("Filling a form"), "no body before it is asked for: {system}");
    let tools: Vec<&str> =
        first["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.contains(&"load_skill"), "{tools:?}");

    let run = output(w.noesis_bare().args(["agent", "show", "r-skill", "--json"])).json();
    let calls = run["calls"].as_array().unwrap();
    let body = calls[0]["result"].as_str().unwrap();
    assert!(body.contains("# Filling a form") && body.contains("- reference.md\n- scripts/fill.py"), "{body}");
    assert!(body.contains("tools this run is not offered: Bash."), "{body}");
    let digest = blake3::hash(FORMS.as_bytes()).to_hex().to_string();
    assert_eq!(
        calls[0]["evidence"][0],
        json!({"kind": "file", "path": ".noesis/skills/forms/SKILL.md", "blake3": digest})
    );
    assert_eq!(calls[1]["result"], "Field names are in column A.\n");
    assert_eq!(calls[1]["evidence"][0]["path"], ".noesis/skills/forms/reference.md");
    // Another skill's file is not reached through this one.
    assert_eq!(calls[2]["status"], "failed", "{}", calls[2]);
    assert!(calls[2]["result"].as_str().unwrap().contains("not inside skill `forms`"), "{}", calls[2]);
}
