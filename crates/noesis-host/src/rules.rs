//! The permission rules of a run started here: `[permissions]` of the
//! config files and the run's flags (`--allow-tool`, `--ask-tool`,
//! `--deny-tool`) as the operator's layer, with each `--allow-command` and
//! `[agent] allow_commands` entry as a command rule (`run_command(CMD *)`,
//! asking or running by the run's approval policy). The rules are recorded
//! in the run's config, so a resumed run keeps them.

use noesis_agent::{AgentRun, Effect, Layer, Permissions, Workspace};
use serde_json::Value;

use noesis_config::Config;

/// The rule flags of `noesis agent` and `noesis solve`.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct RuleFlags {
    /// Let calls matching RULE run without asking (repeatable), e.g.
    /// 'run_command(cargo test *)', 'write_file(src/**)', 'mcp:fs__*'.
    #[cfg_attr(feature = "clap", arg(long = "allow-tool", value_name = "RULE"))]
    pub allow: Vec<String>,
    /// Ask before calls matching RULE run, whatever --approve says
    /// (repeatable).
    #[cfg_attr(feature = "clap", arg(long = "ask-tool", value_name = "RULE"))]
    pub ask: Vec<String>,
    /// Refuse calls matching RULE (repeatable; deny wins over ask and allow).
    #[cfg_attr(feature = "clap", arg(long = "deny-tool", value_name = "RULE"))]
    pub deny: Vec<String>,
}

/// The operator's permissions for a run over `workspace`: the config's
/// rules, the flags', and each of `commands` (with where it came from) as
/// `--allow-command` does. A rule that does not parse is an error naming
/// it and where it came from.
pub fn operator(
    config: &Config,
    flags: &RuleFlags,
    commands: &[(&str, &str)],
    workspace: &Workspace,
) -> Result<Permissions, noesis_agent::RuleError> {
    let mut layer = Layer::granting("operator");
    for (effect, rule, from) in &config.permissions.sourced {
        layer.add(*effect, rule, from)?;
    }
    for (effect, rules, flag) in [
        (Effect::Allow, &flags.allow, "--allow-tool"),
        (Effect::Ask, &flags.ask, "--ask-tool"),
        (Effect::Deny, &flags.deny, "--deny-tool"),
    ] {
        for rule in rules {
            layer.add(effect, rule, flag)?;
        }
    }
    for (command, from) in commands {
        layer.add_command(command, from)?;
    }
    Ok(Permissions::default().with_layer(layer).with_workspace(&workspace.root().to_string_lossy()))
}

/// A run stored before its rules were recorded in it: the `allow_commands`
/// its host kept become its command rules, as they were then.
pub fn restore(run: &mut AgentRun) {
    if run.config.permissions.has_rules() {
        return;
    }
    let commands: Vec<&str> =
        run.host["allow_commands"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if commands.is_empty() {
        return;
    }
    let mut layer = Layer::granting("allow_commands");
    for command in commands {
        // A command that never split into words never ran: it stays out.
        let _ = layer.add_command(command, "the run's allow_commands");
    }
    let mut permissions = std::mem::take(&mut run.config.permissions).with_layer(layer);
    if let Some(root) = run.host["workspace"].as_str() {
        permissions = permissions.with_workspace(root);
    }
    run.config.permissions = permissions;
}

#[cfg(test)]
mod tests {
    use noesis_agent::{ApprovalPolicy, RunConfig};
    use serde_json::json;

    use super::*;

    #[test]
    fn an_old_run_gets_its_allow_commands_back_and_a_new_one_keeps_its_rules() {
        let mut old = AgentRun::new("r", "t", RunConfig { approval: ApprovalPolicy::Auto, ..RunConfig::default() }, 0);
        old.host = json!({"allow_commands": ["cargo test"], "workspace": "/ws"});
        restore(&mut old);
        let argv = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert!(old.config.permissions.check_command(&argv("cargo test -p x")).is_ok());
        assert!(old.config.permissions.check_command(&argv("cargo test --config x")).is_err());
        assert!(old.config.permissions.check_command(&argv("rm x")).is_err());
        // Rules on record are the run's: the host's list adds nothing.
        let mut new = old.clone();
        new.host["allow_commands"] = json!(["rm"]);
        restore(&mut new);
        assert!(new.config.permissions.check_command(&argv("rm x")).is_err());
    }

    #[test]
    fn flags_and_config_make_one_layer_and_a_bad_rule_names_its_flag() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let mut config = Config::default();
        config.permissions.sourced.push((
            Effect::Deny,
            "run_command(cargo publish *)".into(),
            "noesis.toml: permissions.deny[0]".into(),
        ));
        let flags = RuleFlags { allow: vec!["run_command(cargo *)".into()], ..RuleFlags::default() };
        let p = operator(&config, &flags, &[("make test", "--allow-command")], &ws).unwrap();
        let argv = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert!(p.check_command(&argv("cargo build")).is_ok());
        assert!(p.check_command(&argv("make test")).is_ok());
        let why = p.check_command(&argv("cargo publish")).unwrap_err();
        assert!(why.contains("noesis.toml: permissions.deny[0]"), "{why}");
        let bad = RuleFlags { deny: vec!["run_command(".into()], ..RuleFlags::default() };
        let e = operator(&config, &bad, &[], &ws).unwrap_err().to_string();
        assert!(e.starts_with("--deny-tool: `run_command(`"), "{e}");
    }
}
