use crate::support::{Work, example_module, output};

#[test]
fn version_and_help() {
    let w = Work::new();
    let o = output(w.noesis().arg("--version"));
    assert_eq!(o.code, 0);
    assert!(o.stdout.starts_with("noesis "), "{}", o.stdout);
    let o = output(w.noesis().arg("--help"));
    assert_eq!(o.code, 0);
    assert!(o.stdout.starts_with("noesis — a cognitive runtime for LLM agents"), "one sentence first: {}", o.stdout);
    for cmd in ["run", "validate", "conformance", "list", "info", "init", "agent", "ui", "completions"] {
        assert!(o.stdout.contains(cmd), "help lacks {cmd}: {}", o.stdout);
    }
    // The commands come in groups, each under its heading, in this order.
    let heads =
        ["Modules:", "Agents:", "Workflow:", "Memory and frames:", "Serving:", "Distribution:", "Setup:", "Options:"];
    let at: Vec<usize> = heads.iter().map(|h| o.stdout.find(&format!("\n{h}\n")).unwrap_or(usize::MAX)).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1] && w[1] != usize::MAX), "groups in order: {}", o.stdout);
    let under = |cmd: &str| {
        let i = o.stdout.find(&format!("\n  {cmd} ")).unwrap_or_else(|| panic!("{cmd} listed: {}", o.stdout));
        heads[at.iter().rposition(|h| *h < i).unwrap()]
    };
    for (cmd, head) in [
        ("run", "Modules:"),
        ("agent", "Agents:"),
        ("sandbox", "Agents:"),
        ("skills", "Agents:"),
        ("solve", "Workflow:"),
        ("frames", "Memory and frames:"),
        ("serve", "Serving:"),
        ("install", "Distribution:"),
        ("doctor", "Setup:"),
    ] {
        assert_eq!(under(cmd), head, "{cmd}");
    }
    assert!(!o.stdout.contains("Other:"), "every command has its group: {}", o.stdout);
    let o = output(w.noesis().arg("frobnicate"));
    assert_eq!(o.code, 2, "unknown subcommand is a usage error");
    assert!(o.stdout.is_empty());
}

#[test]
fn completions_for_every_shell_name_the_commands() {
    let w = Work::new();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let o = output(w.noesis_bare().args(["completions", shell]));
        assert_eq!(o.code, 0, "{shell}: {}", o.stderr);
        assert!(o.stdout.contains("noesis") && o.stdout.contains("agent") && o.stdout.contains("frames"), "{shell}");
    }
    let bash = output(w.noesis_bare().args(["completions", "bash"])).stdout;
    assert!(bash.contains("complete -F") && bash.contains("--allow-command"), "flags of subcommands too");
    let o = output(w.noesis_bare().args(["completions", "tcsh"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("bash") && o.stderr.contains("zsh"), "{}", o.stderr);
}

#[test]
fn progress_shows_in_a_terminal_only() {
    let w = Work::new();
    for i in 0..3000 {
        w.write(&format!("src/d{}/f{i}.txt", i % 30), "x\n");
    }
    let shown = crate::support::in_terminal(&w, &[], "session start --prompt scan", "");
    assert_eq!(shown.code, 0, "{}", shown.stdout);
    assert!(shown.stdout.contains("hashing files"), "{}", shown.stdout);
    assert!(shown.stdout.contains("files: 3000 in scope"), "{}", shown.stdout);
    let quiet = crate::support::in_terminal(&w, &[], "session start --prompt scan --quiet", "");
    assert!(!quiet.stdout.contains("hashing files"), "{}", quiet.stdout);
    let piped = output(w.noesis_bare().args(["session", "start", "--prompt", "scan"]));
    assert_eq!(piped.code, 0);
    assert!(
        !piped.stderr.contains("hashing") && !piped.stderr.contains('\r'),
        "no progress in a pipe: {}",
        piped.stderr
    );
    let tested =
        crate::support::in_terminal(&w, &[], &format!("test {}", example_module("code-simplifier").display()), "");
    assert!(tested.stdout.contains("passed, 0 failed"), "{}", tested.stdout);
}

#[test]
fn every_listing_command_has_json() {
    let w = Work::new();
    for args in [
        &["list", "--json"][..],
        &["frames", "list", "--json"],
        &["agent", "list", "--json"],
        &["model", "list", "--json"],
        &["plugin", "list", "--json"],
        &["session", "links", "--json"],
    ] {
        let o = output(w.noesis_bare().args(args));
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        assert!(o.json().is_array(), "{args:?}: {}", o.stdout);
    }
}

#[test]
fn list_shows_search_path_then_builtins() {
    let w = Work::new();
    w.write(
        "cognitive/modules/local-one/module.yaml",
        "name: local-one\nversion: 1.0.0\nresponsibility: r\ntier: exec\n",
    );
    w.write("cognitive/modules/local-one/prompt.md", "p");
    w.write("cognitive/modules/broken/module.yaml", "name: [unclosed");
    let o = output(w.noesis().args(["list", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let rows = o.json();
    let names: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "broken",
            "local-one",
            "code-reviewer",
            "code-simplifier",
            "docs-node",
            "meeting-details",
            "review-diff",
            "task-prioritizer",
            "testgen-spec",
            "workflow-planner",
            "workflow-reasoner",
            "workflow-reflector"
        ]
    );
    assert_eq!(rows[0]["valid"], false);
    assert!(rows[0]["error"].as_str().unwrap().contains("module.yaml"));
    assert_eq!(rows[1]["tier"], "exec");
    assert_eq!(rows[2]["location"], "builtin:code-reviewer");
    let o = output(w.noesis().arg("list"));
    assert!(o.stdout.lines().next().unwrap().starts_with("NAME"));
    assert!(o.stdout.contains("(invalid:"));
}

#[test]
fn info_describes_a_module() {
    let w = Work::new();
    let o = output(w.noesis().args(["info", "--json"]).arg(example_module("code-simplifier")));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = o.json();
    assert_eq!(v["name"], "code-simplifier");
    assert_eq!(v["format"], "v2.2");
    assert_eq!(v["policy"]["tier"], "decision");
    assert_eq!(v["policy"]["max_items"], 5);
    assert_eq!(v["schema_sections"], serde_json::json!(["input", "data", "meta", "error"]));
    let o = output(w.noesis().args(["info", "code-reviewer"]));
    assert!(o.stdout.contains("code-reviewer 2.2.0 (v2.2)"), "{}", o.stdout);
    let o = output(w.noesis().args(["info", "nope"]));
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("module `nope` not found"), "{}", o.stderr);
}

#[test]
fn init_scaffolds_a_module_that_validates_and_runs() {
    let w = Work::new();
    let o = output(w.noesis().args(["init", "my-mod", "--tier", "exec"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(w.path().join("my-mod/tests/case1.input.json").is_file());
    let o = output(w.noesis().args(["validate", "./my-mod"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("valid: my-mod 0.1.0 (v2.2, tier exec)"), "{}", o.stdout);
    let o = output(w.noesis().args(["run", "./my-mod", "--provider", "test", "--args", "hello"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // existing folder is never overwritten; bad names are refused
    let o = output(w.noesis().args(["init", "my-mod"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("already exists"));
    let o = output(w.noesis().args(["init", "Bad_Name"]));
    assert_eq!(o.code, 2);
    assert!(!w.path().join("Bad_Name").exists());
}

#[test]
fn validate_reports_each_example_module() {
    let w = Work::new();
    for m in ["code-simplifier", "code-reviewer", "task-prioritizer"] {
        let o = output(w.noesis().arg("validate").arg(example_module(m)));
        assert_eq!(o.code, 0, "{m}: {}", o.stderr);
        assert!(o.stdout.starts_with(&format!("valid: {m} 2.2.0 (v2.2, tier decision)")), "{}", o.stdout);
    }
}

#[test]
fn legacy_layouts_load_and_run() {
    let w = Work::new();
    w.write(
        "v1mod/MODULE.md",
        "---\nname: v1mod\nversion: 1.0.0\nresponsibility: legacy\n---\n# Legacy\nDo it: $ARGUMENTS\n",
    );
    w.write(
        "v1mod/schema.json",
        r#"{"input": {"type": "object"}, "output": {"type": "object", "required": ["answer", "rationale"], "properties": {"answer": {"type": "string"}, "rationale": {"type": "string"}}}}"#,
    );
    w.write("v0mod/module.md", "# Old module\nSays things.\n");
    w.write("v0mod/prompt.txt", "Say: $ARGUMENTS");
    w.write("v0mod/input.schema.json", r#"{"type": "object"}"#);
    w.write(
        "v0mod/output.schema.json",
        r#"{"type": "object", "required": ["said"], "properties": {"said": {"type": "string"}}}"#,
    );
    w.write("v0mod/constraints.yaml", "no_network: true\n");
    let o = output(w.noesis().args(["info", "--json", "./v1mod"]));
    assert_eq!(o.json()["format"], "v1");
    let o = output(w.noesis().args(["info", "--json", "./v0mod"]));
    assert_eq!(o.json()["format"], "v0");
    assert_eq!(o.json()["name"], "v0mod");
    // a v1 module answering with a flat v2.1-style payload is auto-wrapped
    let script = w.write("flat.json", r#"[{"answer": "42", "rationale": "counted", "confidence": 0.8}]"#);
    let o =
        output(w.noesis().args(["run", "./v1mod", "--provider", "scripted", "--args", "x", "--script"]).arg(&script));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let env = o.json();
    assert_eq!(env["data"]["answer"], "42");
    assert_eq!(env["meta"]["confidence"], 0.8);
    crate::support::assert_valid_envelope(&env);
}

#[test]
fn advisory_manifest_fields_take_unknown_values_with_a_warning() {
    let w = Work::new();
    // As the reference repository's ui-component-generator has it.
    w.write(
        "gen/module.yaml",
        "name: gen\nversion: 1.0.0\nresponsibility: Generates\ntier: decision\nruntime_requirements:\n  preferred_capabilities:\n    - code_generation\n",
    );
    w.write("gen/prompt.md", "Generate.");
    let o = output(w.noesis().args(["validate", "./gen"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.starts_with("valid: gen 1.0.0"), "{}", o.stdout);
    assert!(
        o.stderr.contains("warning:") && o.stderr.contains("/runtime_requirements/preferred_capabilities/0"),
        "{}",
        o.stderr
    );
    // It runs, too.
    let o = output(w.noesis().args(["run", "./gen", "--provider", "test"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // A field the runtime acts on stays strict.
    w.write(
        "gen/module.yaml",
        "name: gen\nversion: 1.0.0\nresponsibility: Generates\ntier: decision\nruntime_requirements:\n  max_input_tokens: lots\n",
    );
    let o = output(w.noesis().args(["validate", "./gen"]));
    assert_ne!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("max_input_tokens"), "{}", o.stderr);
}
