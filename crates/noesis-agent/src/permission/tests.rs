use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::tool::Effects;

fn layer(allow: &[&str], ask: &[&str], deny: &[&str]) -> Layer {
    let mut l = Layer::granting("test");
    for (effect, rules) in [(Effect::Allow, allow), (Effect::Ask, ask), (Effect::Deny, deny)] {
        for r in rules {
            l.add(effect, r, "test").unwrap();
        }
    }
    l
}

fn perms(allow: &[&str], ask: &[&str], deny: &[&str]) -> Permissions {
    Permissions::default().with_layer(layer(allow, ask, deny)).with_workspace("/ws")
}

fn argv(line: &str) -> Vec<String> {
    shlex::split(line).unwrap()
}

/// Whether `allow = [rule]` admits `line`.
fn admits(rule: &str, line: &str) -> bool {
    perms(&[rule], &[], &[]).check_command(&argv(line)).is_ok()
}

fn command() -> ToolDecl {
    ToolDecl::read_only("run_command", "", json!({"type": "object"}))
        .with_effects(Effects { runs_commands: true, ..Effects::default() })
}

fn tool(name: &str, writes: bool) -> ToolDecl {
    let d = ToolDecl::read_only(name, "", json!({"type": "object"}));
    if writes { d.with_effects(Effects { writes_files: true, ..Effects::default() }) } else { d }
}

fn mcp(name: &str, read_only: bool) -> ToolDecl {
    let mut d = tool(name, false);
    if !read_only {
        d = d.with_effects(Effects { external: true, ..Effects::default() });
    }
    d.source = Some("mcp".into());
    d
}

fn run(line: &str) -> Value {
    json!({"command": line})
}

fn at(path: &str) -> Value {
    json!({"path": path, "content": "x"})
}

fn ask_rule(r: Ruling) -> Option<String> {
    match r {
        Ruling::Ask { rule } => rule,
        other => panic!("not asking: {other:?}"),
    }
}

fn refusal(r: Ruling) -> String {
    match r {
        Ruling::Refuse { reason } => reason,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn command_rules_match_the_argv_not_a_prefix() {
    for (rule, line, admitted) in [
        // Program, then one glob per argument, a last lone `*` for the rest.
        ("run_command(cargo test *)", "cargo test", true),
        ("run_command(cargo test *)", "cargo test -p noesis-agent --locked", true),
        ("run_command(cargo test *)", "cargo testx", false),
        ("run_command(cargo test *)", "cargo build", false),
        ("run_command(cargo test)", "cargo test", true),
        ("run_command(cargo test)", "cargo test --release", false),
        ("run_command(git diff *)", "git diff --stat HEAD~1", true),
        ("run_command(git diff *)", "git log", false),
        ("run_command(git * --stat)", "git show --stat", true),
        ("run_command(git * --stat)", "git show --stat x", false),
        ("run_command(ls src/*)", "ls src/a/b", true),
        ("run_command(echo 'a b')", "echo 'a b'", true),
        ("run_command(echo 'a b')", "echo a b", false),
        ("run_command(echo '\\*')", "echo '*'", true),
        ("run_command(echo '\\*')", "echo x", false),
        ("run_command(echo a?c)", "echo abc", true),
        ("run_command(find . -exec echo {} ;)", "find . -exec echo {} ;", true),
        ("run_command(echo [ab])", "echo a", false),
        // The program exactly: a path only matches that path.
        ("run_command(cargo test *)", "/usr/bin/cargo test", false),
        ("run_command(./run.sh *)", "./run.sh", true),
        ("run_command(./run.sh *)", "run.sh", false),
        ("run_command(python -m pytest *)", "python3 -m pytest", false),
        // Any command.
        ("run_command", "rm -rf /", true),
        ("run_command(*)", "sh -c anything", true),
        // A glob over tool names never admits a command.
        ("*", "ls", false),
        ("run_*", "ls", false),
        ("mcp:run_command", "ls", false),
    ] {
        assert_eq!(admits(rule, line), admitted, "{rule} on `{line}`");
    }
}

#[test]
fn the_prefix_bypasses_of_the_issue_are_refused_and_honest_commands_run() {
    for (rule, line, admitted) in [
        // cargo: a config value can name a runner.
        ("run_command(cargo test *)", "cargo test --config target.x86_64-unknown-linux-gnu.runner='sh -c evil'", false),
        ("run_command(cargo test *)", "cargo test --config=build.rustc-wrapper=/tmp/x", false),
        ("run_command(cargo test *)", "cargo test -p x -Zunstable-options", false),
        ("run_command(cargo test *)", "cargo test --manifest-path /tmp/evil/Cargo.toml", false),
        ("run_command(cargo *)", "cargo +evil test", false),
        ("run_command(cargo test *)", "cargo test -- --config x", false),
        ("run_command(cargo test --config *)", "cargo test --config x=1", true),
        ("run_command(cargo test --config=* *)", "cargo test --config=x=1 -p a", true),
        ("run_command(cargo test --config *)", "cargo test --config x=1 --config y=2", false),
        ("run_command(cargo +nightly test *)", "cargo +nightly test", true),
        ("run_command(cargo test *)", "cargo test --release -j 2 --no-fail-fast", true),
        // git: aliases and config from the command line.
        ("run_command(git diff *)", "git -c alias.x='!sh -c evil' diff", false),
        ("run_command(git *)", "git -c alias.x='!sh -c evil' x", false),
        ("run_command(git *)", "git -calias.x=!sh x", false),
        ("run_command(git *)", "git --config-env=core.pager=EVIL log", false),
        ("run_command(git *)", "git -C /tmp/evil status", false),
        ("run_command(git *)", "git --git-dir=/tmp/evil/.git status", false),
        ("run_command(git *)", "git --exec-path=/tmp/evil status", false),
        ("run_command(git *)", "git config core.fsmonitor 'sh -c evil'", false),
        ("run_command(git *)", "git submodule foreach evil", false),
        ("run_command(git *)", "git fetch --upload-pack='sh -c evil' origin", false),
        ("run_command(git *)", "git push --receive-pack=evil origin", false),
        ("run_command(git *)", "git clone -u evil x y", false),
        ("run_command(git *)", "git clone --template=/tmp/hooks x y", false),
        ("run_command(git *)", "git rebase -x 'sh evil' main", false),
        ("run_command(git *)", "git rebase --exec=evil main", false),
        ("run_command(git *)", "git diff --ext-diff", false),
        ("run_command(git *)", "git diff --output=/tmp/x", false),
        ("run_command(git *)", "git grep -Oevil x", false),
        ("run_command(git *)", "git status --short", true),
        ("run_command(git *)", "git add -u", true),
        ("run_command(git *)", "git commit -c HEAD -m msg", true),
        ("run_command(git *)", "git grep -C 3 needle", true),
        ("run_command(git *)", "git log -c --oneline", true),
        ("run_command(git diff *)", "git diff --stat", true),
        ("run_command(git -C sub status *)", "git -C sub status --short", true),
        ("run_command(git config --get *)", "git config --get user.name", true),
        // pytest: plugins, config files, ini overrides.
        ("run_command(pytest *)", "pytest -p evil_plugin", false),
        ("run_command(pytest *)", "pytest -pevil_plugin", false),
        ("run_command(pytest *)", "pytest -vp evil", false),
        ("run_command(pytest *)", "pytest -c /tmp/evil.ini", false),
        ("run_command(pytest *)", "pytest --config-file=/tmp/evil.ini", false),
        ("run_command(pytest *)", "pytest -o addopts='-p evil'", false),
        ("run_command(pytest *)", "pytest --override-ini=addopts=-pevil", false),
        ("run_command(pytest *)", "pytest --confcutdir=/", false),
        ("run_command(pytest *)", "pytest --rootdir=/tmp/evil", false),
        ("run_command(pytest *)", "pytest --pdbcls=evil:Debugger", false),
        ("run_command(pytest *)", "pytest --basetemp=/home", false),
        ("run_command(pytest *)", "pytest -q tests/test_calc.py -k 'add and not slow'", true),
        ("run_command(pytest *)", "pytest -x -vv --tb=short -rA", true),
        ("run_command(pytest *)", "pytest -kconfig", true),
        ("run_command(pytest *)", "pytest -p no:cacheprovider", true),
        ("run_command(pytest *)", "pytest -pno:cacheprovider", true),
        ("run_command(pytest -p xdist *)", "pytest -p xdist -n 2", true),
        // python: code on the command line, another module.
        ("run_command(python -m pytest *)", "python -c 'import os'", false),
        ("run_command(python -m pytest *)", "python -m pip install evil", false),
        ("run_command(python -m pytest *)", "python -m pytest -p evil", false),
        ("run_command(python -m pytest *)", "python -m pytest -q tests/", true),
        ("run_command(python -m *)", "python -m pytest", false),
        ("run_command(python *)", "python -c 'print(1)'", false),
        ("run_command(python *)", "python -Bc 'print(1)'", false),
        ("run_command(python *)", "python -mpip", false),
        ("run_command(python *)", "python -W ignore -c x", false),
        ("run_command(python *)", "python -Wignore::DeprecationWarning script.py", true),
        ("run_command(python *)", "python script.py -c x", true),
        ("run_command(python3 -c *)", "python3 -c 'print(1)'", true),
        ("run_command(python3 *)", "python3 -I check.py", true),
        // node and npm.
        ("run_command(node *)", "node -e 'evil()'", false),
        ("run_command(node *)", "node --eval=evil", false),
        ("run_command(node *)", "node -p 1", false),
        ("run_command(node *)", "node --require ./evil.js app.js", false),
        ("run_command(node *)", "node --import=./evil.mjs app.js", false),
        ("run_command(node *)", "node --loader ./evil.mjs app.js", false),
        ("run_command(node *)", "node --experimental-loader=x app.js", false),
        ("run_command(node *)", "node --inspect=0.0.0.0:9229 app.js", false),
        ("run_command(node *)", "node --env-file=.env app.js", false),
        ("run_command(node *)", "node app.js -e x", true),
        ("run_command(node *)", "node --test", true),
        ("run_command(npm *)", "npm test --script-shell=/tmp/evil", false),
        ("run_command(npm *)", "npm exec evil", false),
        ("run_command(npm *)", "npm config set script-shell /tmp/evil", false),
        ("run_command(npx *)", "npx -c 'evil'", false),
        ("run_command(npx *)", "npx --call=evil", false),
        ("run_command(npm *)", "npm test", true),
        ("run_command(npm run *)", "npm run lint -- --fix", true),
        // Shells.
        ("run_command(sh *)", "sh -c 'rm -rf /'", false),
        ("run_command(bash *)", "bash -ec evil", false),
        ("run_command(bash *)", "bash -o errexit -c evil", false),
        ("run_command(bash *)", "bash --rcfile /tmp/x", false),
        ("run_command(sh *)", "sh check.sh -c x", true),
        ("run_command(sh -c *)", "sh -c 'echo hi'", true),
        // Wrappers: the wrapped command must be named, and its own table applies.
        ("run_command(env *)", "env sh -c evil", false),
        ("run_command(env *)", "env LD_PRELOAD=/tmp/x.so ls", false),
        ("run_command(env *)", "env -S 'sh -c evil'", false),
        ("run_command(env FOO=1 cargo test *)", "env FOO=1 cargo test", true),
        ("run_command(env FOO=1 cargo test *)", "env FOO=1 cargo test --config x", false),
        ("run_command(env FOO=* cargo test *)", "env FOO=2 cargo test", true),
        ("run_command(xargs *)", "xargs rm", false),
        ("run_command(xargs rm *)", "xargs rm", true),
        ("run_command(xargs rm *)", "xargs -a /tmp/list rm", false),
        ("run_command(timeout *)", "timeout 5 sh -c evil", false),
        ("run_command(timeout 5 cargo test *)", "timeout 5 cargo test", true),
        ("run_command(timeout 5 cargo test *)", "timeout 5 cargo test --config x", false),
        ("run_command(nice *)", "nice -n 5 evil", false),
        ("run_command(nohup *)", "nohup evil", false),
        // find, make, tar, rg, sed, awk, perl, ruby, go.
        ("run_command(find *)", "find . -exec rm {} ;", false),
        ("run_command(find *)", "find . -execdir sh -c x ;", false),
        ("run_command(find *)", "find . -delete", false),
        ("run_command(find *)", "find . -fprint /tmp/x", false),
        ("run_command(find *)", "find . -name '*.rs' -type f", true),
        ("run_command(make *)", "make --eval='x: ; evil'", false),
        ("run_command(make *)", "make SHELL=/tmp/evil", false),
        ("run_command(make *)", "make CC=evil all", false),
        ("run_command(make *)", "make -f /tmp/Evil", false),
        ("run_command(make *)", "make -C /tmp/evil", false),
        ("run_command(make *)", "make -j4 test", true),
        ("run_command(make CC=gcc *)", "make CC=gcc all", true),
        ("run_command(tar *)", "tar -xf a.tar --to-command='sh -c evil'", false),
        ("run_command(tar *)", "tar --use-compress-program=evil -xf a", false),
        ("run_command(tar *)", "tar -I evil -xf a", false),
        ("run_command(tar *)", "tar --checkpoint=1 --checkpoint-action=exec=evil -cf a .", false),
        ("run_command(tar *)", "tar -F evil -cf a .", false),
        ("run_command(tar *)", "tar xIf evil a.tar", false),
        ("run_command(tar *)", "tar -czf out.tgz src", true),
        ("run_command(tar *)", "tar xzf a.tgz", true),
        ("run_command(rg *)", "rg --pre evil needle", false),
        ("run_command(rg *)", "rg --pre=evil needle", false),
        ("run_command(rg *)", "rg -n needle src", true),
        ("run_command(grep *)", "grep -rn needle src", true),
        ("run_command(sed *)", "sed -n '1e evil' a.txt", false),
        ("run_command(sed *)", "sed 's/x/id/e' a.txt", false),
        ("run_command(sed *)", "sed -i s/a/b/ a.txt", false),
        ("run_command(sed *)", "sed -f /tmp/evil.sed a.txt", false),
        ("run_command(sed -n 1,5p *)", "sed -n 1,5p a.txt", true),
        ("run_command(sed -n 1,5p *)", "sed -n 1,5p -i a.txt", false),
        ("run_command(sed -e s/a/b/ *)", "sed -e s/a/b/ a.txt", true),
        ("run_command(sed -e s/a/b/ *)", "sed -e s/a/b/ -e 1eevil a.txt", false),
        ("run_command(awk *)", "awk 'BEGIN{system(\"evil\")}'", false),
        ("run_command(awk *)", "awk -f /tmp/evil.awk", false),
        ("run_command(awk '{print $1}' *)", "awk '{print $1}' a.txt", true),
        ("run_command(perl *)", "perl -e 'system(1)'", false),
        ("run_command(perl *)", "perl -ne print a", false),
        ("run_command(perl *)", "perl -MEvil script.pl", false),
        ("run_command(perl *)", "perl script.pl -e x", true),
        ("run_command(ruby *)", "ruby -e evil", false),
        ("run_command(ruby *)", "ruby -revil app.rb", false),
        ("run_command(go test *)", "go test -exec evil ./...", false),
        ("run_command(go test *)", "go test -toolexec=evil ./...", false),
        ("run_command(go test *)", "go test --exec=evil ./...", false),
        ("run_command(go *)", "go generate ./...", false),
        ("run_command(go test *)", "go test -run TestX ./...", true),
    ] {
        assert_eq!(admits(rule, line), admitted, "{rule} on `{line}`");
    }
}

#[test]
fn a_refused_command_is_explained_naming_the_option_and_the_rule() {
    let p = perms(&["run_command(cargo test *)", "run_command(git diff *)"], &[], &[]);
    let why = p.check_command(&argv("cargo test --config x")).unwrap_err();
    assert!(why.contains("`--config`") && why.contains("`run_command(cargo test *)` (test)"), "{why}");
    let why = p.check_command(&argv("rm -rf src")).unwrap_err();
    assert!(
        why.contains("no rule admits the command `rm -rf src`")
            && why.contains("run_command(cargo test *), run_command(git diff *)"),
        "{why}"
    );
    let none = Permissions::default().check_command(&argv("ls")).unwrap_err();
    assert!(none.contains("admits no commands"), "{none}");
}

#[test]
fn deny_and_ask_rules_match_loosely_so_options_in_between_do_not_slip_past() {
    let p = perms(
        &["run_command(git *)", "run_command(rm *)", "run_command(env *)"],
        &[],
        &["run_command(git push *)", "run_command(rm)"],
    );
    for (line, denied) in [
        ("git push origin main", true),
        ("git --no-pager push", true),
        ("git push", true),
        ("git log --oneline", false),
        ("git log --grep push", true),
        ("rm -rf src", true),
        ("/bin/rm x", true),
        ("env rm x", true),
        ("timeout 5 rm x", true),
        ("git status", false),
    ] {
        let out = p.check_command(&argv(line));
        assert_eq!(out.as_ref().is_err_and(|e| e.starts_with("denied by the rule")), denied, "{line}: {out:?}");
    }
}

#[test]
fn deny_wins_over_ask_over_allow_and_the_decision_names_the_rule() {
    let p = perms(&["write_file", "run_command(cargo *)"], &["write_file(src/**)"], &["write_file(src/secret.rs)"]);
    let auto = ApprovalPolicy::Auto;
    assert_eq!(p.decide(&tool("write_file", true), &at("docs/a.md"), ApprovalPolicy::Ask), Ruling::Run);
    assert_eq!(
        ask_rule(p.decide(&tool("write_file", true), &at("src/a.rs"), auto)).as_deref(),
        Some("write_file(src/**)")
    );
    let why = refusal(p.decide(&tool("write_file", true), &at("src/secret.rs"), auto));
    assert_eq!(why, "denied by the rule `write_file(src/secret.rs)` (deny, test)");
    // The same through a path that only looks different.
    let why = refusal(p.decide(&tool("write_file", true), &at("src/../src/./secret.rs"), auto));
    assert!(why.contains("src/secret.rs"), "{why}");
    let why = refusal(p.decide(&tool("write_file", true), &at("/ws/src/secret.rs"), auto));
    assert!(why.contains("src/secret.rs"), "{why}");
}

#[test]
fn with_no_opinion_the_policy_decides_and_commands_must_be_named() {
    let p = perms(&["run_command(cargo test *)"], &[], &[]);
    let (read, write) = (tool("read_file", false), tool("write_file", true));
    for policy in [ApprovalPolicy::Ask, ApprovalPolicy::Auto, ApprovalPolicy::Never] {
        assert_eq!(p.decide(&read, &at("a"), policy), Ruling::Run, "{policy:?}");
        let refused = refusal(p.decide(&command(), &run("cargo build"), policy));
        assert!(refused.contains("no rule admits"), "{refused}");
    }
    assert_eq!(p.decide(&write, &at("a"), ApprovalPolicy::Ask), Ruling::Ask { rule: None });
    assert_eq!(p.decide(&write, &at("a"), ApprovalPolicy::Auto), Ruling::Run);
    let never = refusal(p.decide(&write, &at("a"), ApprovalPolicy::Never));
    assert_eq!(never, "denied: `write_file` changes the world and this run allows no such tool");
    // An explicit allow runs without asking; under never nothing that changes the world runs.
    assert_eq!(p.decide(&command(), &run("cargo test -q"), ApprovalPolicy::Ask), Ruling::Run);
    assert!(refusal(p.decide(&command(), &run("cargo test"), ApprovalPolicy::Never)).contains("changes the world"));
}

#[test]
fn an_explicit_ask_asks_even_under_auto_and_is_refused_under_never() {
    let p = perms(&[], &["read_file(.env)", "run_command(cargo test *)"], &[]);
    assert_eq!(
        ask_rule(p.decide(&tool("read_file", false), &at(".env"), ApprovalPolicy::Auto)).as_deref(),
        Some("read_file(.env)")
    );
    assert_eq!(p.decide(&tool("read_file", false), &at("a.txt"), ApprovalPolicy::Auto), Ruling::Run);
    assert!(matches!(p.decide(&command(), &run("cargo test"), ApprovalPolicy::Auto), Ruling::Ask { .. }));
    let why = refusal(p.decide(&tool("read_file", false), &at(".env"), ApprovalPolicy::Never));
    assert!(why.contains("asks no one") && why.contains("read_file(.env)"), "{why}");
}

#[test]
fn allow_command_sugar_asks_or_runs_by_the_policy() {
    let p = Permissions::from_commands(&["cargo test".into(), "sh check.sh".into()]);
    assert_eq!(p.decide(&command(), &run("cargo test -p x"), ApprovalPolicy::Auto), Ruling::Run);
    assert_eq!(
        p.decide(&command(), &run("cargo test -p x"), ApprovalPolicy::Ask),
        Ruling::Ask { rule: Some("run_command(cargo test *)".into()) }
    );
    assert!(refusal(p.decide(&command(), &run("cargo test --config x"), ApprovalPolicy::Auto)).contains("--config"));
    assert!(refusal(p.decide(&command(), &run("cargo publish"), ApprovalPolicy::Auto)).contains("no rule admits"));
    assert_eq!(p.decide(&command(), &run("sh check.sh"), ApprovalPolicy::Auto), Ruling::Run);
    // Its words are literal: a `*` in an allowed command is no wildcard.
    let p = Permissions::from_commands(&["ls *.rs".into()]);
    assert!(p.check_command(&argv("ls '*.rs'")).is_ok());
    assert!(p.check_command(&argv("ls a.rs")).is_err());
}

#[test]
fn path_rules_match_relative_to_the_workspace_and_negate() {
    let p = perms(&[], &[], &["write_file(!src/**)", "read_file(.env)", "grep(secrets/**)"]);
    let w = tool("write_file", true);
    for (path, denied) in [
        ("src/a.rs", false),
        ("src/deep/b.rs", false),
        ("./src/a.rs", false),
        ("/ws/src/a.rs", false),
        ("README.md", true),
        ("src/../README.md", true),
        // Outside the workspace: a negated pattern matches it.
        ("../elsewhere/x", true),
        ("/etc/passwd", true),
    ] {
        let r = p.decide(&w, &at(path), ApprovalPolicy::Auto);
        assert_eq!(matches!(r, Ruling::Refuse { .. }), denied, "{path}: {r:?}");
    }
    let r = tool("read_file", false);
    assert!(matches!(p.decide(&r, &at(".env"), ApprovalPolicy::Auto), Ruling::Refuse { .. }));
    assert!(matches!(p.decide(&r, &at("sub/.env"), ApprovalPolicy::Auto), Ruling::Run));
    assert!(matches!(
        p.decide(&tool("grep", false), &json!({"pattern": "x", "path": "secrets/a"}), ApprovalPolicy::Auto),
        Ruling::Refuse { .. }
    ));
    assert!(matches!(p.decide(&tool("grep", false), &json!({"pattern": "x"}), ApprovalPolicy::Auto), Ruling::Run));
    // An allow rule never admits a path outside the workspace.
    let p = perms(&["write_file(!secret/**)"], &[], &[]);
    assert_eq!(p.decide(&w, &at("a.txt"), ApprovalPolicy::Ask), Ruling::Run);
    assert_eq!(p.decide(&w, &at("../a.txt"), ApprovalPolicy::Ask), Ruling::Ask { rule: None });
}

#[test]
fn protected_paths_need_a_rule_that_names_them() {
    let w = tool("write_file", true);
    let e = tool("edit_file", true);
    let open = perms(&["write_file", "edit_file(**)", "write_file(**/*.toml)"], &[], &[]);
    for path in [
        ".git/config",
        ".git",
        "sub/.git/hooks/pre-commit",
        ".noesis/x",
        "noesis.toml",
        "a/noesis.toml",
        "cognitive.lock",
    ] {
        for decl in [&w, &e] {
            let why = refusal(open.decide(decl, &at(path), ApprovalPolicy::Auto));
            assert!(why.contains("protected path"), "{path}: {why}");
            assert_eq!(open.protected_write(&decl.name, &at(path)).as_deref(), Some(path.trim_start_matches("./")));
        }
    }
    for path in [".gitignore", "src/git.rs", "noesis.toml.bak", "docs/.github/x"] {
        assert_eq!(open.decide(&w, &at(path), ApprovalPolicy::Auto), Ruling::Run, "{path}");
    }
    // Reading is not writing.
    assert_eq!(open.decide(&tool("read_file", false), &at(".git/config"), ApprovalPolicy::Auto), Ruling::Run);
    // A rule whose pattern names the protected path unlocks it, for its tool.
    let named = perms(&["write_file(.git/**)"], &["write_file(noesis.toml)"], &[]);
    assert_eq!(named.decide(&w, &at(".git/info/exclude"), ApprovalPolicy::Auto), Ruling::Run);
    assert!(matches!(named.decide(&w, &at("noesis.toml"), ApprovalPolicy::Auto), Ruling::Ask { .. }));
    assert!(refusal(named.decide(&e, &at(".git/info/exclude"), ApprovalPolicy::Auto)).contains("protected"));
    // Paths a caller protects: a file, a folder, a glob.
    let mut p = perms(&["write_file", "write_file(tests/**)"], &[], &[]);
    p.protect("tests/test_calc.py").unwrap();
    p.protect("spec/").unwrap();
    p.protect("**/conftest.py").unwrap();
    p.protect("web/[id].test.ts").unwrap();
    for (path, refused) in [
        ("tests/test_calc.py", true),
        ("tests/test_new.py", false),
        ("spec/a/b.py", true),
        ("x/conftest.py", true),
        ("web/[id].test.ts", true),
        ("web/i.test.ts", false),
        ("calc.py", false),
    ] {
        assert_eq!(matches!(p.decide(&w, &at(path), ApprovalPolicy::Auto), Ruling::Refuse { .. }), refused, "{path}");
    }
    assert_eq!(p.extra_protected(), ["tests/test_calc.py", "spec", "**/conftest.py", "web/[id].test.ts"]);
    // The toolbox's check of a real path (a symlink resolved) refuses the same.
    assert!(p.check_path("write_file", "tests/test_calc.py").is_err());
    assert!(p.check_path("edit_file", ".git/config").is_err());
    assert!(p.check_path("read_file", ".git/config").is_ok());
    assert!(p.protect("/abs").is_err());
}

#[test]
fn mcp_rules_match_only_mcp_tools_by_name_glob() {
    let p = perms(&["mcp:fs__*"], &["mcp:git__*"], &["mcp:fs__delete*"]);
    let ask = ApprovalPolicy::Ask;
    assert_eq!(p.decide(&mcp("fs__write_file", false), &json!({}), ask), Ruling::Run);
    assert_eq!(ask_rule(p.decide(&mcp("git__git_status", true), &json!({}), ask)).as_deref(), Some("mcp:git__*"));
    assert!(refusal(p.decide(&mcp("fs__delete_file", false), &json!({}), ask)).contains("mcp:fs__delete*"));
    assert_eq!(p.decide(&mcp("time__now", false), &json!({}), ask), Ruling::Ask { rule: None });
    // A built-in or host tool with such a name is no MCP tool.
    assert_eq!(p.decide(&tool("fs__write_file", true), &json!({}), ask), Ruling::Ask { rule: None });
    // Without the prefix a name matches wherever the tool comes from.
    let q = perms(&["fs__write_file", "*_frames"], &[], &[]);
    assert_eq!(q.decide(&mcp("fs__write_file", false), &json!({}), ask), Ruling::Run);
    assert_eq!(q.decide(&tool("search_frames", false), &json!({}), ask), Ruling::Run);
}

#[test]
fn rules_that_do_not_parse_are_errors_naming_the_rule_and_its_origin() {
    for (rule, says) in [
        ("", "no tool is named"),
        ("run_command(cargo test", "closed by `)`"),
        ("run_command()", "pattern is empty"),
        ("run_command('open)", "quotes do not close"),
        ("run_command(car* test)", "must be named in full"),
        ("run_command(cargo 'a\\')", "not a glob"),
        ("write_file(src/[a)", "not a glob"),
        ("write_file(/etc/**)", "relative to the workspace"),
        ("write_file(!)", "empty"),
        ("glob(src/**)", "takes no pattern"),
        ("mcp:fs__read(x)", "one built-in tool named in full"),
        ("*(src/**)", "one built-in tool named in full"),
        ("mcp:", "no tool is named"),
        ("write file", "not a tool name"),
        ("read_file.x", "not a tool name"),
    ] {
        let e = Layer::granting("t").add(Effect::Allow, rule, "noesis.toml: permissions.allow[3]").unwrap_err();
        assert!(e.reason.contains(says), "{rule}: {e}");
        assert_eq!(e.to_string(), format!("noesis.toml: permissions.allow[3]: `{rule}`: {}", e.reason));
    }
    assert!(Layer::granting("t").add_command("echo 'open", "--allow-command").is_err());
}

#[test]
fn a_narrowing_layer_can_only_narrow() {
    let operator =
        layer(&["write_file(src/**)", "run_command(cargo test *)"], &["edit_file"], &["run_command(git push *)"]);
    let mut request = Layer::narrowing("request");
    for r in ["edit_file", "run_command(git push *)", "run_command(rm *)", "write_file", "read_file(.env)"] {
        request.add(Effect::Allow, r, "request").unwrap();
    }
    request.add(Effect::Ask, "write_file(src/main.rs)", "request").unwrap();
    request.add(Effect::Deny, "run_command(cargo test --release *)", "request").unwrap();
    let p = Permissions::default().with_layer(operator).with_layer(request);
    let auto = ApprovalPolicy::Auto;
    // Its allow rules widen nothing: the operator's ask and deny stand, an
    // unnamed command stays refused, a write without opinion follows the policy.
    assert!(matches!(p.decide(&tool("edit_file", true), &at("a"), auto), Ruling::Ask { .. }));
    assert!(refusal(p.decide(&command(), &run("git push"), auto)).contains("denied by the rule"));
    assert!(refusal(p.decide(&command(), &run("rm x"), auto)).contains("no rule admits"));
    assert!(p.check_command(&argv("rm x")).unwrap_err().contains("no rule admits"));
    assert_eq!(p.decide(&tool("write_file", true), &at("docs/x"), ApprovalPolicy::Ask), Ruling::Ask { rule: None });
    // Its ask and deny rules narrow.
    assert_eq!(
        ask_rule(p.decide(&tool("write_file", true), &at("src/main.rs"), auto)).as_deref(),
        Some("write_file(src/main.rs)")
    );
    assert_eq!(p.decide(&tool("write_file", true), &at("src/lib.rs"), auto), Ruling::Run);
    assert!(refusal(p.decide(&command(), &run("cargo test --release"), auto)).contains("(deny, request)"));
    assert!(p.check_command(&argv("cargo test --release")).is_err(), "the toolbox sees the request's deny too");
    assert_eq!(p.decide(&command(), &run("cargo test"), auto), Ruling::Run);
}

#[test]
fn permissions_round_trip_through_json_and_old_runs_have_none() {
    let mut p = perms(&["run_command(cargo test *)"], &["mcp:fs__*"], &["write_file(!src/**)"]);
    let mut l = Layer::granting("flags");
    l.add_command("sh check.sh", "--allow-command").unwrap();
    p.push(l);
    let mut r = Layer::narrowing("request");
    r.add(Effect::Deny, "run_command(rm *)", "request permissions.deny[0]").unwrap();
    p.push(r);
    p.protect("tests/test_a.py").unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(
        v["layers"][1]["rules"][0],
        json!({"kind": "command", "rule": "sh check.sh", "from": "--allow-command"})
    );
    assert_eq!(v["layers"][2]["narrows"], true);
    assert_eq!(v["protected"], json!(["tests/test_a.py"]));
    let back: Permissions = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(back, p);
    assert_eq!(serde_json::to_value(&back).unwrap(), v);
    assert!(back.check_command(&argv("sh check.sh")).is_ok());
    assert!(back.check_command(&argv("rm x")).is_err());
    // Nothing set: nothing written, and reading nothing gives nothing.
    assert_eq!(serde_json::to_value(Permissions::default()).unwrap(), json!({}));
    let none: Permissions = serde_json::from_value(json!({})).unwrap();
    assert!(none.is_empty() && !none.has_rules());
    // A stored rule that no longer parses is an error, not a silent drop.
    let bad = json!({"layers": [{"name": "x", "rules": [{"kind": "allow", "rule": "run_command(", "from": "x"}]}]});
    assert!(serde_json::from_value::<Permissions>(bad).is_err());
}

#[test]
fn paths_are_resolved_by_name() {
    for (path, root, rel) in [
        ("a/b", None, Some("a/b")),
        ("./a//b/", None, Some("a/b")),
        ("a/../b", None, Some("b")),
        ("a/../../b", None, None),
        ("..", None, None),
        ("", None, Some(".")),
        (".", None, Some(".")),
        ("/ws/a", Some("/ws"), Some("a")),
        ("/ws", Some("/ws/"), Some(".")),
        ("/wsx/a", Some("/ws"), None),
        ("/ws/../etc", Some("/ws"), None),
        ("/ws/a", None, None),
    ] {
        assert_eq!(relative(path, root).as_deref(), rel, "{path} in {root:?}");
    }
}

fn arg_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}".prop_map(|s| s),
        "-[a-zA-Z]{1,3}".prop_map(|s| s),
        "--[a-z-]{2,10}(=[a-z]{0,4})?".prop_map(|s| s),
        Just("--config".to_owned()),
        Just("-c".to_owned()),
        Just("-p".to_owned()),
        Just("test".to_owned()),
        Just("diff".to_owned()),
        Just("x=1".to_owned()),
        Just("--".to_owned()),
    ]
}

fn program_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("cargo".to_owned()),
        Just("git".to_owned()),
        Just("pytest".to_owned()),
        Just("python".to_owned()),
        Just("sh".to_owned()),
        Just("env".to_owned()),
        Just("make".to_owned()),
        Just("sed".to_owned()),
        "[a-z]{1,5}".prop_map(|s| s),
    ]
}

proptest! {
    /// A command never passes a rule whose fixed words it does not contain
    /// at their places (program first).
    #[test]
    fn prop_argv_without_the_rules_fixed_words_never_matches(
        program in program_strategy(),
        args in proptest::collection::vec(arg_strategy(), 0..6),
        rule_program in program_strategy(),
        fixed in proptest::collection::vec("[a-z-]{1,6}", 0..3),
    ) {
        let rule = format!("run_command({rule_program} {} *)", fixed.join(" "));
        let mut argv = vec![program.clone()];
        argv.extend(args.iter().cloned());
        let ok = perms(&[&rule], &[], &[]).check_command(&argv).is_ok();
        let contains = program == rule_program
            && argv.len() > fixed.len()
            && fixed.iter().zip(&argv[1..]).all(|(f, a)| f == a);
        prop_assert!(!ok || contains, "{rule} admitted {argv:?}");
    }

    /// A rule that names a program with a trailing `*` never admits a
    /// dangerous option the rule does not spell out: adding `--config x`
    /// to an admitted cargo command, `-c x` to a python or sh one, `-p x`
    /// to a pytest one, is refused.
    #[test]
    fn prop_a_dangerous_option_after_the_rules_words_is_refused(
        args in proptest::collection::vec("[a-z]{1,6}", 0..4),
        which in 0usize..4,
    ) {
        let (program, option) = [("cargo", "--config"), ("python", "-c"), ("sh", "-c"), ("pytest", "-p")][which];
        let rule = format!("run_command({program} *)");
        let p = perms(&[&rule], &[], &[]);
        let mut argv = vec![program.to_owned()];
        argv.extend(args.iter().cloned());
        // (python and sh stop reading options at their script.)
        if !matches!(program, "python" | "sh") {
            prop_assert!(p.check_command(&argv).is_ok());
        }
        argv.insert(1, option.to_owned());
        argv.insert(2, "evil".to_owned());
        prop_assert!(p.check_command(&argv).is_err(), "{argv:?}");
    }

    /// Adding a layer (granting or narrowing, any rules) never turns a
    /// refusal into anything else, nor an ask into a run — unless the
    /// added layer is granting and the base had no opinion (a granting
    /// layer is the operator's); a narrowing layer never widens at all.
    #[test]
    fn prop_a_narrowing_layer_never_widens(
        base in proptest::collection::vec((0usize..3, 0usize..RULES.len()), 0..5),
        extra in proptest::collection::vec((0usize..3, 0usize..RULES.len()), 0..5),
        call in 0usize..CALLS.len(),
        policy in prop_oneof![Just(ApprovalPolicy::Ask), Just(ApprovalPolicy::Auto), Just(ApprovalPolicy::Never)],
    ) {
        let build = |rules: &[(usize, usize)], mut l: Layer| {
            for (e, r) in rules {
                l.add([Effect::Allow, Effect::Ask, Effect::Deny][*e], RULES[*r], "p").unwrap();
            }
            l
        };
        let before = Permissions::default().with_layer(build(&base, Layer::granting("op")));
        let after = before.clone().with_layer(build(&extra, Layer::narrowing("req")));
        let (decl, args) = CALLS[call]();
        let rank = |r: &Ruling| match r { Ruling::Run => 0, Ruling::Ask { .. } => 1, Ruling::Refuse { .. } => 2 };
        let (b, a) = (before.decide(&decl, &args, policy), after.decide(&decl, &args, policy));
        prop_assert!(rank(&a) >= rank(&b), "{b:?} became {a:?}");
        if decl.name == "run_command" {
            let argv = argv(args["command"].as_str().unwrap());
            prop_assert!(before.check_command(&argv).is_ok() || after.check_command(&argv).is_err());
        }
    }

    /// Parsing never panics, whatever the text.
    #[test]
    fn prop_any_rule_text_parses_or_errs(text in "\\PC{0,40}") {
        let _ = Layer::granting("x").add(Effect::Deny, &text, "p");
        let _ = Layer::granting("x").add_command(&text, "p");
    }

    /// Matching never panics, whatever the command.
    #[test]
    fn prop_any_command_is_checked_without_panic(
        program in program_strategy(),
        args in proptest::collection::vec("\\PC{0,8}", 0..8),
    ) {
        let mut argv = vec![program];
        argv.extend(args);
        let p = perms(&["run_command(cargo test *)", "run_command(git *)", "run_command(env *)"], &["run_command(sed *)"], &["run_command(rm *)"]);
        let _ = p.check_command(&argv);
    }
}

const RULES: [&str; 10] = [
    "write_file",
    "write_file(src/**)",
    "write_file(!src/**)",
    "read_file(.env)",
    "run_command",
    "run_command(cargo test *)",
    "run_command(cargo *)",
    "run_command(git diff *)",
    "*",
    "edit_file(.git/**)",
];

type MakeCall = fn() -> (ToolDecl, Value);

const CALLS: [MakeCall; 8] = [
    || (tool("write_file", true), at("src/a.rs")),
    || (tool("write_file", true), at("README.md")),
    || (tool("edit_file", true), at(".git/config")),
    || (tool("read_file", false), at(".env")),
    || (command(), run("cargo test -q")),
    || (command(), run("cargo test --config x")),
    || (command(), run("git diff --stat")),
    || (command(), run("rm -rf src")),
];
