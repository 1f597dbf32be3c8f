//! Reading, checking and merging config files.

use super::*;

fn p(text: &str) -> Result<Config> {
    parse(Path::new("noesis.toml"), text)
}

#[test]
fn a_project_file_cannot_widen_the_sandbox_and_the_user_config_can() {
    let dir = tempfile::tempdir().unwrap();
    let (user, project) = (dir.path().join("user.toml"), dir.path().join("proj"));
    std::fs::create_dir(&project).unwrap();
    let env_user = user.to_string_lossy().into_owned();
    let env = move |k: &str| (k == "NOESIS_CONFIG").then(|| env_user.clone());
    for (text, says) in [
        ("[sandbox]\nmode = \"off\"\n", "cannot turn the sandbox off"),
        ("[sandbox]\nnetwork = true\n", "cannot grant commands the network"),
        ("[sandbox]\nread_extra = [\"/home\"]\n", "outside the project"),
        ("[sandbox]\nwrite_extra = [\"../x\"]\n", "outside the project"),
        ("[sandbox]\nread_extra = [\"~/.aws\"]\n", "outside the project"),
        ("[mcp.servers.fs]\ncommand = \"x\"\ntrusted = true\n", "cannot mark an MCP server trusted"),
        ("[mcp.servers.fs]\ncommand = \"x\"\nnetwork = true\n", "give it the network"),
    ] {
        std::fs::write(project.join("noesis.toml"), text).unwrap();
        let e = format!("{:#}", load(&env, &project).unwrap_err());
        assert!(e.contains(says) && e.contains("noesis.toml"), "{text}: {e}");
    }
    // The same from the user config is the user's choice.
    std::fs::write(&user, "[sandbox]\nmode = \"off\"\nnetwork = true\nread_extra = [\"~/.aws\"]\n").unwrap();
    std::fs::write(project.join("noesis.toml"), "[sandbox]\nwrite_extra = [\"build\"]\nenv = [\"CI\"]\n").unwrap();
    let c = load(&env, &project).unwrap().config;
    let s = c.sandbox_settings(None, false, Some(Path::new("/home/u")));
    assert_eq!(s.mode, noesis_sandbox::Mode::Off);
    assert!(s.network);
    assert_eq!(s.read_extra, [PathBuf::from("/home/u/.aws")]);
    assert_eq!(s.write_extra, [project.join("build")], "a project's relative path is the project's");
    assert_eq!(s.env, ["CI"]);
    // Flags win.
    let s = c.sandbox_settings(Some(noesis_sandbox::Mode::On), false, None);
    assert_eq!(s.mode, noesis_sandbox::Mode::On);
    let bad = format!("{:#}", p("[redact]\nvalues = [\"ab\"]\n").unwrap_err());
    assert!(bad.contains("redact.values[0]"), "{bad}");
}

#[test]
fn plugins_are_checked() {
    let c =
        p("[plugins.mine]\ncommand = [\"python3\", \"mine.py\"]\ntimeout_seconds = 5\n[frames]\npromote_at = 0.9\n")
            .unwrap();
    assert_eq!(c.plugins["mine"].command, ["python3", "mine.py"]);
    assert_eq!(c.frames.promote_at, Some(0.9));
    for (text, says) in [
        ("[plugins.mine]\ncommand = []\n", "plugins.mine.command"),
        ("[plugins.mine]\ncommand = [\"x\"]\ntimeout_seconds = 0\n", "plugins.mine.timeout_seconds"),
        ("[plugins.docs]\ncommand = [\"x\"]\n", "built-in plugin"),
        ("[plugins.mine]\ncommand = [\"x\"]\nshell = true\n", "shell"),
        ("[frames]\npromote_at = 2.0\n", "frames.promote_at"),
        ("[frames]\ndocs_dir = \"../elsewhere\"\n", "frames.docs_dir"),
        ("[frames]\ndocs_dir = \"/tmp/x\"\n", "frames.docs_dir"),
    ] {
        let e = format!("{:#}", p(text).unwrap_err());
        assert!(e.contains(says), "{text}: {e}");
    }
}

#[test]
fn permission_rules_are_checked_named_by_file_and_key_and_add_up() {
    let c = p("[permissions]\nallow = [\"run_command(cargo test *)\"]\ndeny = [\"write_file(.env)\", \"mcp:fs__*\"]\n\
               [mcp.servers.fs]\ncommand = \"x\"\ntrusted = true\n")
    .unwrap();
    assert_eq!(c.permissions.deny, ["write_file(.env)", "mcp:fs__*"]);
    assert_eq!(c.permissions.sourced[2].2, "noesis.toml: permissions.deny[1]");
    assert!(c.mcp.servers["fs"].spec("fs", "noesis.toml").unwrap().trusted);
    for (text, says) in [
        (
            "[permissions]\nallow = [\"run_command(cargo test\"]\n",
            "noesis.toml: permissions.allow[0]: `run_command(cargo test`",
        ),
        ("[permissions]\nask = [\"ok\", \"glob(src/**)\"]\n", "permissions.ask[1]"),
        ("[permissions]\nallowed = []\n", "allowed"),
    ] {
        let e = format!("{:#}", p(text).unwrap_err());
        assert!(e.contains(says), "{text}: {e}");
    }
    let user = p("[permissions]\ndeny = [\"run_command(rm *)\"]").unwrap();
    let project = p("[permissions]\nallow = [\"run_command\"]").unwrap();
    let both = user.overlay(project);
    assert_eq!((both.permissions.deny.len(), both.permissions.allow.len(), both.permissions.sourced.len()), (1, 1, 2));
}

#[test]
fn a_full_file_parses() {
    let c = p(r#"
        provider = "anthropic"
        model = "claude-haiku-4-5"
        timeout = 30
        retries = 3
        max_concurrency = 8
        fallback = ["openai", "ollama"]

        [providers.openai]
        model = "gpt-4o-mini"
        api_key_env = "WORK_OPENAI_KEY"

        [providers.corp]
        wire = "openai"
        base_url = "http://127.0.0.1:9000/v1"

        [[routes]]
        tier = "exec"
        provider = "deepseek"
        model = "deepseek-chat"

        [prices]
        "gpt-4o-mini" = { input = 0.1, output = 0.2 }

        [budget]
        max_tokens = 50000
        max_cost_usd = 0.25
    "#)
    .unwrap();
    assert_eq!(c.provider.as_deref(), Some("anthropic"));
    assert_eq!(c.fallback, ["openai", "ollama"]);
    assert_eq!(c.providers["corp"].wire, Some(Wire::OpenAi));
    assert_eq!(c.routes[0].provider, "deepseek");
    assert_eq!(c.prices["gpt-4o-mini"], Price { input: 0.1, output: 0.2 });
    assert_eq!(c.budget.max_tokens, Some(50000));
    let c = p("[policies]\nallow = [\"network\", \"side_effects\"]").unwrap();
    assert_eq!(c.policies.allow, ["network", "side_effects"]);
}

#[test]
fn policy_grants_are_checked_and_the_project_list_wins() {
    let e = p("[policies]\nallow = [\"Network!\"]").unwrap_err().to_string();
    assert!(e.contains("policies.allow[0]") && e.contains("Network!"), "{e}");
    let e = p("[policies]\ndeny = [\"network\"]").unwrap_err().to_string();
    assert!(e.contains("deny"), "{e}");
    let user = p("[policies]\nallow = [\"network\"]").unwrap();
    assert_eq!(user.clone().overlay(p("").unwrap()).policies.allow, ["network"]);
    let project = p("[policies]\nallow = [\"side_effects\"]").unwrap();
    assert_eq!(user.overlay(project).policies.allow, ["side_effects"]);
}

#[test]
fn mistakes_name_the_file_and_the_field() {
    let e = p("provder = \"x\"").unwrap_err().to_string();
    assert!(e.starts_with("noesis.toml:") && e.contains("provder"), "{e}");
    let e = p("timeout = \"soon\"").unwrap_err().to_string();
    assert!(e.contains("timeout"), "{e}");
    let e = p("[prices]\nx = { input = -1.0, output = 1.0 }").unwrap_err().to_string();
    assert!(e.contains("prices.\"x\""), "{e}");
    let e = p("[[routes]]\ntier = \"fast\"\nprovider = \"x\"").unwrap_err().to_string();
    assert!(e.contains("routes[0].tier"), "{e}");
    let e = p("[providers.x]\nwire = \"grpc\"").unwrap_err().to_string();
    assert!(e.contains("grpc"), "{e}");
}

#[test]
fn project_overrides_user_key_by_key() {
    let user = p("provider = \"openai\"\ntimeout = 5\n[providers.openai]\nmodel = \"a\"\napi_key_env = \"K\"\n[prices]\nm1 = { input = 1.0, output = 1.0 }").unwrap();
    let project =
        p("timeout = 9\n[providers.openai]\nmodel = \"b\"\n[prices]\nm2 = { input = 2.0, output = 2.0 }").unwrap();
    let c = user.overlay(project);
    assert_eq!(c.provider.as_deref(), Some("openai"));
    assert_eq!(c.timeout, Some(9));
    assert_eq!(c.providers["openai"].model.as_deref(), Some("b"));
    assert_eq!(c.providers["openai"].api_key_env.as_deref(), Some("K"));
    assert_eq!(c.prices.len(), 2);
}

#[test]
fn user_path_follows_the_platform_variables() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    };
    assert_eq!(user_path(&env(&[("NOESIS_CONFIG", "/x/c.toml"), ("HOME", "/h")])), Some("/x/c.toml".into()));
    assert_eq!(user_path(&env(&[("XDG_CONFIG_HOME", "/xdg")])), Some("/xdg/noesis/config.toml".into()));
    if !cfg!(target_os = "macos") {
        assert_eq!(user_path(&env(&[("HOME", "/h")])), Some("/h/.config/noesis/config.toml".into()));
    }
    assert_eq!(user_path(&env(&[])), None);
}

#[test]
fn home_is_noesis_home_else_dot_noesis_in_home() {
    let env =
        |vars: &'static [(&str, &str)]| move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
    assert_eq!(home_from(&env(&[("NOESIS_HOME", "/n"), ("HOME", "/h")])), Some(PathBuf::from("/n")));
    assert_eq!(home_from(&env(&[("NOESIS_HOME", " "), ("HOME", "/h")])), Some(PathBuf::from("/h/.noesis")));
    assert_eq!(home_from(&env(&[("HOME", "")])), None);
}

#[test]
fn an_http_mcp_server_takes_headers_and_a_bearer_token_variable_and_a_program_does_not() {
    let c = p("[mcp.servers.web]\nurl = \"https://mcp.example/mcp\"\nbearer_token_env = \"WEB_TOKEN\"\n\
               [mcp.servers.web.headers]\nX-Team = \"noesis\"\n")
    .unwrap();
    let spec = c.mcp.servers["web"].spec("web", "noesis.toml").unwrap();
    let noesis_mcp::Transport::Http { headers, bearer_env, .. } = spec.transport else { panic!("{spec:?}") };
    assert_eq!((headers["X-Team"].as_str(), bearer_env.as_deref()), ("noesis", Some("WEB_TOKEN")));
    let e = p("[mcp.servers.fs]\ncommand = \"x\"\nbearer_token_env = \"T\"\n").unwrap_err().to_string();
    assert!(e.contains("mcp.servers.fs") && e.contains("go with `url`"), "{e}");
}

#[test]
fn sub_agent_isolation_and_anchors_are_checked_and_a_closer_file_wins() {
    let user = p("[agent]\nisolation = \"worktree\"\nanchors = [\"cargo test -q\"]\n").unwrap();
    assert_eq!(user.agent.isolation.as_deref(), Some("worktree"));
    let kept = user.clone().overlay(p("[agent]\napprove = \"auto\"\n").unwrap());
    assert_eq!(
        (kept.agent.isolation.as_deref(), kept.agent.anchors.clone()),
        (Some("worktree"), vec!["cargo test -q".to_owned()])
    );
    let project = p("[agent]\nisolation = \"none\"\nanchors = [\"make check\"]\n").unwrap();
    let c = user.overlay(project);
    assert_eq!((c.agent.isolation.as_deref(), c.agent.anchors), (Some("none"), vec!["make check".to_owned()]));
    for (text, says) in [
        ("[agent]\nisolation = \"container\"\n", "agent.isolation: `container` is not none or worktree"),
        ("[agent]\nanchors = [\"ok\", \"  \"]\n", "agent.anchors[1]: an empty command"),
    ] {
        let e = format!("{:#}", p(text).unwrap_err());
        assert!(e.contains(says) && e.contains("noesis.toml"), "{text}: {e}");
    }
}

/// An MCP server's completion requests are routed as `mcp_sampling`, a
/// role a config may give a policy; a name that is no role is refused.
#[test]
fn mcp_sampling_is_a_role() {
    let c = p("[agent.roles.mcp_sampling]\nprovider = \"local\"\nlocal_only = true\n").unwrap();
    assert!(c.agent.roles.contains_key("mcp_sampling"));
    let e = format!("{:#}", p("[agent.roles.sampling]\nprovider = \"local\"\n").unwrap_err());
    assert!(e.contains("`sampling` is not a role") && e.contains("mcp_sampling"), "{e}");
}
