//! What the run knows of a tool: its name, description, argument schema
//! and what it may do. Executing tools is the driver's business.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool may do to the world; decides approval and concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Effects {
    /// It writes files.
    #[serde(default)]
    pub writes_files: bool,
    /// It runs commands.
    #[serde(default)]
    pub runs_commands: bool,
    /// It talks to the network.
    #[serde(default)]
    pub network: bool,
    /// It changes something outside the workspace that the run cannot see
    /// (an MCP server's tool not marked read-only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
}

impl Effects {
    /// Only reads: no approval needed, may run beside other read-only calls.
    pub const READ_ONLY: Effects =
        Effects { writes_files: false, runs_commands: false, network: false, external: false };

    /// Whether the tool only reads.
    pub fn read_only(self) -> bool {
        self == Effects::READ_ONLY
    }
}

/// A tool as the run declares it to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDecl {
    /// Its name, as the model calls it.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments (an object schema).
    pub parameters: Value,
    /// What it may do.
    #[serde(default)]
    pub effects: Effects,
    /// Running it twice has the effect of running it once, so a call that
    /// was interrupted may simply be run again on resume.
    #[serde(default)]
    pub idempotent: bool,
    /// Failed calls of this tool the model may retry in one run before the
    /// tool is withdrawn from it.
    #[serde(default = "default_retries")]
    pub max_failures: u32,
    /// Where the tool comes from when it is neither built in nor the
    /// host's: `mcp` for an MCP server's tool. Permission rules written
    /// `mcp:NAME` match only tools from `mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Its calls of one turn may run at the same time as each other even
    /// though it is not read-only (a sub-agent, whose changes the host
    /// keeps apart until they are compared). Unset in runs stored before
    /// the flag existed: their calls go on one at a time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub concurrent: bool,
}

fn default_retries() -> u32 {
    3
}

impl ToolDecl {
    /// A read-only tool.
    pub fn read_only(name: &str, description: &str, parameters: Value) -> ToolDecl {
        ToolDecl {
            name: name.into(),
            description: description.into(),
            parameters,
            effects: Effects::READ_ONLY,
            idempotent: true,
            max_failures: default_retries(),
            source: None,
            concurrent: false,
        }
    }

    /// The same tool with these effects (not idempotent unless read-only).
    #[must_use]
    pub fn with_effects(mut self, effects: Effects) -> ToolDecl {
        self.effects = effects;
        self.idempotent = effects.read_only();
        self
    }

    /// The same tool, its calls of one turn run side by side (see
    /// [`ToolDecl::concurrent`]).
    #[must_use]
    pub fn concurrent(mut self) -> ToolDecl {
        self.concurrent = true;
        self
    }

    /// The provider layer's description of it.
    pub fn spec(&self) -> noesis_llm::ToolSpec {
        noesis_llm::ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
        }
    }
}

/// Why arguments were refused, each problem with its JSON pointer; shown
/// to the model as the call's result.
pub(crate) fn argument_errors(decl: &ToolDecl, arguments: &Value) -> Vec<String> {
    if !arguments.is_object() {
        return vec![match arguments {
            Value::String(s) => format!("the arguments are not a JSON object: {}", clip(s, 200)),
            other => format!("the arguments must be a JSON object, not {}", noesis_json::type_name(other)),
        }];
    }
    // The tool's own schema is broken: the model cannot fix that.
    schema_errors(&decl.parameters, arguments)
        .unwrap_or_else(|e| vec![format!("the tool `{}` has an invalid argument schema: {e}", decl.name)])
}

/// Where `value` breaks `schema`, each problem with its JSON pointer; an
/// error when the schema itself does not compile.
pub(crate) fn schema_errors(schema: &Value, value: &Value) -> Result<Vec<String>, String> {
    match validator(schema).as_ref() {
        Ok(v) => Ok(v
            .iter_errors(value)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
            })
            .collect()),
        Err(e) => Err(e.clone()),
    }
}

/// Why `schema` cannot be a run's output schema (it does not compile), or
/// `None`: checked where a run is made, so the model never meets it.
pub fn output_schema_problem(schema: &Value) -> Option<String> {
    validator(schema).as_ref().as_ref().err().cloned()
}

/// A compiled schema, or why it does not compile.
type Compiled = Arc<Result<jsonschema::Validator, String>>;

/// Most schemas kept compiled; past it the cache starts again (tool lists
/// that change all the time, as an MCP server's may, cannot grow it for ever).
const MAX_COMPILED: usize = 512;

/// The validator of `schema`, compiled on its first use and kept, keyed by
/// the schema's canonical digest: the same tool list comes back on every
/// turn, after a JSON round trip, and from every run of a process, while
/// compiling costs far more than hashing.
fn validator(schema: &Value) -> Compiled {
    static CACHE: LazyLock<Mutex<HashMap<String, Compiled>>> = LazyLock::new(Mutex::default);
    let key = noesis_frames::scan::json_digest(schema);
    // A panic while the lock was held leaves a map that is still whole.
    let cache = || CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(hit) = cache().get(&key) {
        return hit.clone();
    }
    // Compiled outside the lock: other threads' lookups need not wait.
    let compiled = Arc::new(jsonschema::validator_for(schema).map_err(|e| e.to_string()));
    let mut cache = cache();
    if cache.len() >= MAX_COMPILED {
        cache.clear();
    }
    cache.entry(key).or_insert(compiled).clone()
}

pub(crate) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn arguments_are_checked_against_the_schema_with_pointers() {
        let decl = ToolDecl::read_only(
            "read_file",
            "reads",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        );
        assert!(argument_errors(&decl, &json!({"path": "a"})).is_empty());
        let e = argument_errors(&decl, &json!({"path": 3}));
        assert!(e.len() == 1 && e[0].starts_with("/path: "), "{e:?}");
        let e = argument_errors(&decl, &json!({}));
        assert!(e[0].contains("path"), "{e:?}");
        let e = argument_errors(&decl, &json!("{not json"));
        assert!(e[0].contains("not a JSON object: {not json"), "{e:?}");
        assert!(argument_errors(&decl, &json!([1]))[0].contains("not an array"));
    }

    /// Issue 31: the validator was compiled again for every call. Two
    /// declarations with the same schema (a tool list handed out again, as
    /// a run resumed from JSON does) share one compiled validator; a
    /// schema that does not compile is remembered as such.
    #[test]
    fn a_schema_is_compiled_once() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string", "title": "compiled-once"}}});
        let a = ToolDecl::read_only("a", "", schema.clone());
        let b: ToolDecl = serde_json::from_value(serde_json::to_value(&a).unwrap()).unwrap();
        assert!(std::sync::Arc::ptr_eq(&validator(&a.parameters), &validator(&b.parameters)));
        assert!(argument_errors(&b, &json!({"q": 1}))[0].starts_with("/q: "));
        let broken = json!({"type": "object", "properties": {"q": {"type": "no-such-type"}}});
        assert!(std::sync::Arc::ptr_eq(&validator(&broken), &validator(&broken.clone())));
        let d = ToolDecl::read_only("d", "", broken);
        assert!(argument_errors(&d, &json!({}))[0].contains("the tool `d` has an invalid argument schema"));
    }

    #[test]
    fn effects_decide_read_only_and_idempotence() {
        let decl = ToolDecl::read_only("x", "", json!({"type": "object"}));
        assert!(decl.effects.read_only() && decl.idempotent);
        let w = decl.with_effects(Effects { writes_files: true, ..Effects::default() });
        assert!(!w.effects.read_only() && !w.idempotent);
    }
}
