//! Plugins that are programs (`[plugins.NAME]` in the settings) beside the
//! built-in ones: which there are, one found by name, and one step through
//! it on a project with a module (or, without one, the slice's input
//! itself) as the model.

use std::collections::BTreeMap;
use std::time::Duration;

use noesis_config::PluginEntry;
use noesis_frames::Timestamp;
use noesis_plugin::{ExternalPlugin, ExternalSpec, Outcome, Step, Think};
use serde_json::{Value, json};

use crate::{Echo, Error, Setting};

/// Every plugin: the built-in ones (with the command that runs each) and
/// the configured programs, as `noesis plugin list --json` lists them.
pub fn listing(plugins: &BTreeMap<String, PluginEntry>) -> Vec<Value> {
    let mut rows = vec![
        json!({"name": "docs", "kind": "built-in", "command": "noesis docs sync|status"}),
        json!({"name": "recall", "kind": "built-in", "command": "noesis ask"}),
        json!({"name": "review", "kind": "built-in", "command": "noesis review"}),
        json!({"name": "testgen", "kind": "built-in", "command": "noesis testgen"}),
    ];
    for (name, e) in plugins {
        rows.push(json!({"name": name, "kind": "program", "command": e.command.join(" "), "module": e.module}));
    }
    rows
}

/// The configured plugin `name`; one not configured is refused with the
/// names that are, and how to add it.
///
/// # Errors
/// No plugin of that name.
pub fn external(name: &str, plugins: &BTreeMap<String, PluginEntry>) -> Result<ExternalPlugin, Error> {
    let Some(entry) = plugins.get(name) else {
        let known: Vec<&str> = plugins.keys().map(String::as_str).collect();
        return Err(Error::Invalid(format!(
            "no plugin `{name}` in the config{}\nhint: add [plugins.{name}] with `command = [\"python3\", \"plugin.py\"]` to noesis.toml",
            if known.is_empty() { String::new() } else { format!(" (configured: {})", known.join(", ")) }
        )));
    };
    Ok(ExternalPlugin::new(ExternalSpec {
        name: name.to_owned(),
        command: entry.command.clone(),
        cwd: None,
        timeout: Duration::from_secs(entry.timeout_seconds.unwrap_or(30)),
    }))
}

/// The request a step of a program gets: `input` as JSON when given,
/// else `{"query": QUERY}`.
///
/// # Errors
/// `input` is not JSON.
pub fn request(query: &str, input: Option<&str>) -> Result<Value, Error> {
    match input {
        Some(t) => serde_json::from_str(t).map_err(|e| Error::Invalid(format!("--input must be JSON: {e}"))),
        None => Ok(json!({"query": query})),
    }
}

/// One step through `plugin` on the project of `setting`, `think` its
/// model (none: [`Echo`], the slice's input is the answer).
///
/// # Errors
/// The core (the plugin, the model, the store).
pub async fn step(
    setting: &Setting<'_>,
    plugin: &ExternalPlugin,
    query: &str,
    raw: &Value,
    think: Option<&dyn Think>,
) -> Result<Outcome, Error> {
    let mut core = setting.core(None).await?;
    let step = Step { query: query.to_owned(), raw, parent: None };
    Ok(core.step(plugin, step, think.unwrap_or(&Echo), Timestamp::now()).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(command: &[&str], module: Option<&str>) -> PluginEntry {
        PluginEntry {
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            timeout_seconds: None,
            module: module.map(str::to_owned),
        }
    }

    #[test]
    fn the_listing_is_the_built_in_plugins_then_the_programs() {
        let plugins = BTreeMap::from([("mine".to_owned(), entry(&["python3", "p.py"], Some("m")))]);
        let rows = listing(&plugins);
        let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
        assert_eq!(names, ["docs", "recall", "review", "testgen", "mine"]);
        assert_eq!(rows[4], json!({"name": "mine", "kind": "program", "command": "python3 p.py", "module": "m"}));
    }

    #[test]
    fn an_unknown_plugin_names_the_configured_ones_and_how_to_add_it() {
        let plugins = BTreeMap::from([("a".to_owned(), entry(&["x"], None))]);
        assert!(external("a", &plugins).is_ok());
        let e = external("b", &plugins).err().unwrap().to_string();
        assert!(e.starts_with("no plugin `b` in the config (configured: a)\nhint: add [plugins.b]"), "{e}");
        let e = external("b", &BTreeMap::new()).err().unwrap().to_string();
        assert!(e.starts_with("no plugin `b` in the config\n"), "{e}");
    }

    #[test]
    fn a_request_is_the_input_given_or_the_query() {
        assert_eq!(request("q", None).unwrap(), json!({"query": "q"}));
        assert_eq!(request("q", Some("[1]")).unwrap(), json!([1]));
        assert!(request("q", Some("{")).err().unwrap().to_string().starts_with("--input must be JSON: "));
    }
}
