//! The typed `composition:` block of a manifest, and the pure rules of
//! dataflow: where a step's value comes from, how a list of sources is
//! aggregated, how a mapping reshapes it, and what a module receives.
//!
//! Parsing returns every problem, each naming its field the way a person
//! reads the manifest (`composition.requires[1].version`).
//!
//! Values: `input` is the composition's input; `<module>.output` is that
//! module's envelope (`{ok, meta, data}`, so `$.data.x` and
//! `$.meta.confidence` reach into it), or `null` when the module did not
//! run or was optional and failed. A list of sources is aggregated by
//! `aggregate`: `merge` deep-merges the non-null values (later wins),
//! `array` lists them (nulls kept, so positions still say which source),
//! `first` takes the first non-null one. `mapping` builds an object whose
//! fields are paths into that value (a path that leads nowhere leaves its
//! field out); without a mapping the value passes as it is.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use crate::condition::Condition;
use crate::jsonpath::JsonPath;
use crate::manifest::Manifest;
use crate::version::VersionReq;

/// Default `max_depth`.
pub const DEFAULT_MAX_DEPTH: u32 = 5;
/// Default total `timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// Default `iteration.max_iterations`.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;

/// How the steps run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Dataflow steps one after another, in the order written.
    #[default]
    Sequential,
    /// Every step whose sources are ready runs at once.
    Parallel,
    /// The steps, then the first `routing` rule that holds picks what runs next.
    Conditional,
    /// The steps (or the module's own prompt) repeated under `iteration`.
    Iterative,
}

impl Pattern {
    /// The name as written in `module.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Sequential => "sequential",
            Pattern::Parallel => "parallel",
            Pattern::Conditional => "conditional",
            Pattern::Iterative => "iterative",
        }
    }
}

/// `requires[]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Requirement {
    /// The module.
    pub name: String,
    /// The versions accepted; a module outside the range is unavailable.
    pub version: Option<VersionReq>,
    /// A failure or absence yields `null` instead of aborting.
    pub optional: bool,
    /// Tried when the module is unavailable or fails.
    pub fallback: Option<String>,
    /// Per-step timeout.
    pub timeout_ms: Option<u64>,
}

/// Where a dataflow value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The composition's input.
    Input,
    /// A module's envelope (`name.output`, or the bare name).
    Output(String),
}

/// Where a dataflow value goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A module, which runs with the value as its input.
    Module(String),
    /// The composition's result.
    Output,
}

/// How a list of sources becomes one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    /// Deep merge of the non-null values, later wins.
    #[default]
    Merge,
    /// A list of the values, nulls kept.
    Array,
    /// The first non-null value.
    First,
}

/// `dataflow[]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// The sources.
    pub from: Vec<Source>,
    /// Whether `from` was written as a list (aggregated even with one item).
    pub from_list: bool,
    /// The targets.
    pub to: Vec<Target>,
    /// `field: path` pairs, in the order written.
    pub mapping: Vec<(String, JsonPath)>,
    /// The step runs only when this holds on its value.
    pub condition: Option<Condition>,
    /// For a list of sources.
    pub aggregate: Aggregate,
}

/// `routing[]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Evaluated on the scope (`$.input`, `$.<module>`).
    pub condition: Condition,
    /// What runs next; `None` keeps the current result.
    pub next: Option<String>,
}

/// `iteration`.
#[derive(Debug, Clone, PartialEq)]
pub struct Iteration {
    /// Upper bound on rounds.
    pub max_iterations: u32,
    /// Another round only while this holds.
    pub continue_condition: Option<Condition>,
    /// No more rounds once this holds.
    pub stop_condition: Option<Condition>,
}

impl Default for Iteration {
    fn default() -> Iteration {
        Iteration { max_iterations: DEFAULT_MAX_ITERATIONS, continue_condition: None, stop_condition: None }
    }
}

/// The whole `composition:` block.
#[derive(Debug, Clone, PartialEq)]
pub struct Composition {
    /// Dependencies.
    pub requires: Vec<Requirement>,
    /// How the steps run.
    pub pattern: Pattern,
    /// Deepest nesting of `@call` and steps, from the root.
    pub max_depth: u32,
    /// Total time allowed.
    pub timeout_ms: u64,
    /// The steps.
    pub dataflow: Vec<Flow>,
    /// Rules for `conditional`.
    pub routing: Vec<Route>,
    /// Rules for `iterative`.
    pub iteration: Iteration,
}

impl Default for Composition {
    fn default() -> Composition {
        Composition {
            requires: Vec::new(),
            pattern: Pattern::Sequential,
            max_depth: DEFAULT_MAX_DEPTH,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            dataflow: Vec::new(),
            routing: Vec::new(),
            iteration: Iteration::default(),
        }
    }
}

/// One problem in a `composition:` block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CompositionError {
    /// The field, e.g. `composition.requires[1].version`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl CompositionError {
    /// The field as a JSON pointer into the manifest
    /// (`/composition/requires/1/version`).
    pub fn pointer(&self) -> String {
        let mut out = String::new();
        for part in self.field.split('.') {
            let (key, indices) = part.split_once('[').unwrap_or((part, ""));
            out.push('/');
            out.push_str(key);
            for idx in indices.split('[') {
                let idx = idx.trim_end_matches(']');
                if !idx.is_empty() {
                    out.push('/');
                    out.push_str(idx);
                }
            }
        }
        out
    }
}

struct Errors(Vec<CompositionError>);

impl Errors {
    fn push(&mut self, field: impl fmt::Display, message: impl Into<String>) {
        self.0.push(CompositionError { field: field.to_string(), message: message.into() });
    }
}

fn is_module_name(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A JSON value's kind, for messages: "a list", "an object", …
///
/// Not `noesis_json::type_name`, on purpose: a composition is written in
/// YAML, whose authors write lists, so an array is "a list" here.
pub fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl Composition {
    /// The manifest's composition, `None` when it has none.
    pub fn of(manifest: &Manifest) -> Result<Option<Composition>, Vec<CompositionError>> {
        manifest.composition.as_ref().map(Composition::parse).transpose()
    }

    /// Parses a `composition:` value.
    pub fn parse(raw: &Value) -> Result<Composition, Vec<CompositionError>> {
        let mut errs = Errors(Vec::new());
        let mut c = Composition::default();
        let Some(obj) = raw.as_object() else {
            errs.push("composition", format!("must be an object, not {}", describe(raw)));
            return Err(errs.0);
        };
        let uint = |errs: &mut Errors, field: &str, v: &Value| -> Option<u64> {
            let n = v.as_u64();
            if n.is_none() {
                errs.push(field, format!("must be a whole number ≥ 0, not {v}"));
            }
            n
        };
        if let Some(v) = obj.get("pattern") {
            c.pattern = match v.as_str() {
                Some("sequential") => Pattern::Sequential,
                Some("parallel") => Pattern::Parallel,
                Some("conditional") => Pattern::Conditional,
                Some("iterative") => Pattern::Iterative,
                _ => {
                    errs.push(
                        "composition.pattern",
                        format!("{v} is not sequential, parallel, conditional or iterative"),
                    );
                    Pattern::Sequential
                }
            };
        }
        if let Some(v) = obj.get("max_depth")
            && let Some(n) = uint(&mut errs, "composition.max_depth", v)
        {
            match u32::try_from(n) {
                Ok(n) if n >= 1 => c.max_depth = n,
                _ => errs.push("composition.max_depth", format!("must be at least 1 (and fit in 32 bits), not {n}")),
            }
        }
        if let Some(v) = obj.get("timeout_ms")
            && let Some(n) = uint(&mut errs, "composition.timeout_ms", v)
        {
            c.timeout_ms = n;
        }
        if let Some(v) = obj.get("requires") {
            match v.as_array() {
                None => errs.push("composition.requires", format!("must be a list, not {}", describe(v))),
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Some(r) = requirement(&mut errs, &format!("composition.requires[{i}]"), item, &uint) {
                            c.requires.push(r);
                        }
                    }
                }
            }
        }
        if let Some(v) = obj.get("dataflow") {
            match v.as_array() {
                None => errs.push("composition.dataflow", format!("must be a list, not {}", describe(v))),
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Some(f) = flow(&mut errs, &format!("composition.dataflow[{i}]"), item) {
                            c.dataflow.push(f);
                        }
                    }
                }
            }
        }
        if let Some(v) = obj.get("routing") {
            match v.as_array() {
                None => errs.push("composition.routing", format!("must be a list, not {}", describe(v))),
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Some(r) = route(&mut errs, &format!("composition.routing[{i}]"), item) {
                            c.routing.push(r);
                        }
                    }
                }
            }
        }
        if let Some(v) = obj.get("iteration") {
            match v.as_object() {
                None => errs.push("composition.iteration", format!("must be an object, not {}", describe(v))),
                Some(it) => {
                    if let Some(m) = it.get("max_iterations")
                        && let Some(n) = uint(&mut errs, "composition.iteration.max_iterations", m)
                    {
                        match u32::try_from(n) {
                            Ok(n) if n >= 1 => c.iteration.max_iterations = n,
                            _ => errs
                                .push("composition.iteration.max_iterations", format!("must be at least 1, not {n}")),
                        }
                    }
                    for key in ["continue_condition", "stop_condition"] {
                        let field = format!("composition.iteration.{key}");
                        let parsed = it.get(key).and_then(|v| condition(&mut errs, &field, v));
                        if key == "continue_condition" {
                            c.iteration.continue_condition = parsed;
                        } else {
                            c.iteration.stop_condition = parsed;
                        }
                    }
                }
            }
        }
        if c.pattern == Pattern::Conditional && c.routing.is_empty() && errs.0.is_empty() {
            errs.push("composition.routing", "the conditional pattern needs at least one routing rule");
        }
        if errs.0.is_empty() { Ok(c) } else { Err(errs.0) }
    }

    /// The `requires` entry for a module.
    pub fn requirement(&self, name: &str) -> Option<&Requirement> {
        self.requires.iter().find(|r| r.name == name)
    }

    /// Whether the block describes steps (dataflow or routing) rather than
    /// only configuring the module's `@call`s.
    pub fn has_steps(&self) -> bool {
        !self.dataflow.is_empty() || !self.routing.is_empty()
    }

    /// Every module the block names (targets, sources, routes, fallbacks,
    /// requirements), sorted.
    pub fn modules(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for r in &self.requires {
            out.insert(r.name.clone());
            out.extend(r.fallback.clone());
        }
        for f in &self.dataflow {
            for s in &f.from {
                if let Source::Output(m) = s {
                    out.insert(m.clone());
                }
            }
            for t in &f.to {
                if let Target::Module(m) = t {
                    out.insert(m.clone());
                }
            }
        }
        out.extend(self.routing.iter().filter_map(|r| r.next.clone()));
        out
    }
}

fn condition(errs: &mut Errors, field: &str, v: &Value) -> Option<Condition> {
    let Some(text) = v.as_str() else {
        errs.push(field, format!("must be a string, not {}", describe(v)));
        return None;
    };
    match Condition::parse(text) {
        Ok(c) => Some(c),
        Err(e) => {
            errs.push(field, format!("`{text}`: {e}"));
            None
        }
    }
}

fn module_name(errs: &mut Errors, field: &str, v: &Value) -> Option<String> {
    match v.as_str() {
        Some(s) if is_module_name(s) => Some(s.to_owned()),
        Some(s) => {
            errs.push(field, format!("`{s}` is not a module name (lower-case letters, digits and `-`)"));
            None
        }
        None => {
            errs.push(field, format!("must be a module name, not {}", describe(v)));
            None
        }
    }
}

fn requirement(
    errs: &mut Errors,
    at: &str,
    v: &Value,
    uint: &dyn Fn(&mut Errors, &str, &Value) -> Option<u64>,
) -> Option<Requirement> {
    let Some(o) = v.as_object() else {
        errs.push(at, format!("must be an object with a `name`, not {}", describe(v)));
        return None;
    };
    let before = errs.0.len();
    let name = match o.get("name") {
        Some(n) => module_name(errs, &format!("{at}.name"), n),
        None => {
            errs.push(format!("{at}.name"), "is required");
            None
        }
    };
    let version = match o.get("version") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match VersionReq::parse(s) {
            Ok(r) => Some(r),
            Err(e) => {
                errs.push(format!("{at}.version"), e.to_string());
                None
            }
        },
        Some(other) => {
            errs.push(format!("{at}.version"), format!("must be a version range string, not {}", describe(other)));
            None
        }
    };
    let optional = match o.get("optional") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errs.push(format!("{at}.optional"), format!("must be true or false, not {other}"));
            false
        }
    };
    let fallback = match o.get("fallback") {
        None | Some(Value::Null) => None,
        Some(f) => module_name(errs, &format!("{at}.fallback"), f),
    };
    let timeout_ms = o.get("timeout_ms").and_then(|t| uint(errs, &format!("{at}.timeout_ms"), t));
    if errs.0.len() > before {
        return None;
    }
    Some(Requirement { name: name?, version, optional, fallback, timeout_ms })
}

fn names(errs: &mut Errors, field: &str, v: &Value) -> Option<(Vec<String>, bool)> {
    match v {
        Value::String(s) => Some((vec![s.clone()], false)),
        Value::Array(items) if !items.is_empty() => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) => out.push(s.to_owned()),
                    None => {
                        errs.push(format!("{field}[{i}]"), format!("must be a string, not {}", describe(item)));
                        return None;
                    }
                }
            }
            Some((out, true))
        }
        Value::Array(_) => {
            errs.push(field, "the list is empty");
            None
        }
        other => {
            errs.push(field, format!("must be a string or a list of strings, not {}", describe(other)));
            None
        }
    }
}

fn flow(errs: &mut Errors, at: &str, v: &Value) -> Option<Flow> {
    let Some(o) = v.as_object() else {
        errs.push(at, format!("must be an object with `from` and `to`, not {}", describe(v)));
        return None;
    };
    let before = errs.0.len();
    let mut from = Vec::new();
    let mut from_list = false;
    match o.get("from") {
        None => errs.push(format!("{at}.from"), "is required"),
        Some(f) => {
            if let Some((list, is_list)) = names(errs, &format!("{at}.from"), f) {
                from_list = is_list;
                for (i, s) in list.iter().enumerate() {
                    let field = if is_list { format!("{at}.from[{i}]") } else { format!("{at}.from") };
                    let module = s.strip_suffix(".output").unwrap_or(s);
                    if s == "input" {
                        from.push(Source::Input);
                    } else if is_module_name(module) {
                        from.push(Source::Output(module.to_owned()));
                    } else {
                        errs.push(field, format!("`{s}` is neither `input` nor `<module>.output`"));
                    }
                }
            }
        }
    }
    let mut to = Vec::new();
    match o.get("to") {
        None => errs.push(format!("{at}.to"), "is required"),
        Some(t) => {
            if let Some((list, is_list)) = names(errs, &format!("{at}.to"), t) {
                for (i, s) in list.iter().enumerate() {
                    let field = if is_list { format!("{at}.to[{i}]") } else { format!("{at}.to") };
                    if s == "output" {
                        to.push(Target::Output);
                    } else if is_module_name(s) {
                        to.push(Target::Module(s.clone()));
                    } else {
                        errs.push(field, format!("`{s}` is neither `output` nor a module name"));
                    }
                }
            }
        }
    }
    let mut mapping = Vec::new();
    match o.get("mapping") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (field, path) in m {
                let at = format!("{at}.mapping.{field}");
                match path.as_str().map(JsonPath::parse) {
                    Some(Ok(p)) => mapping.push((field.clone(), p)),
                    Some(Err(e)) => errs.push(at, format!("`{}`: {e}", path.as_str().unwrap_or_default())),
                    None => {
                        errs.push(at, format!("must be a JSONPath string such as \"$.data.x\", not {}", describe(path)))
                    }
                }
            }
        }
        Some(other) => errs.push(format!("{at}.mapping"), format!("must be an object, not {}", describe(other))),
    }
    let condition = o.get("condition").and_then(|c| condition(errs, &format!("{at}.condition"), c));
    let aggregate = match o.get("aggregate") {
        None | Some(Value::Null) => Aggregate::Merge,
        Some(v) => match v.as_str() {
            Some("merge") => Aggregate::Merge,
            Some("array") => Aggregate::Array,
            Some("first") => Aggregate::First,
            Some("custom") => {
                errs.push(
                    format!("{at}.aggregate"),
                    "`custom` aggregation is not supported: use merge, array or first",
                );
                Aggregate::Merge
            }
            _ => {
                errs.push(format!("{at}.aggregate"), format!("{v} is not merge, array or first"));
                Aggregate::Merge
            }
        },
    };
    if errs.0.len() > before {
        return None;
    }
    Some(Flow { from, from_list, to, mapping, condition, aggregate })
}

fn route(errs: &mut Errors, at: &str, v: &Value) -> Option<Route> {
    let Some(o) = v.as_object() else {
        errs.push(at, format!("must be an object with a `condition`, not {}", describe(v)));
        return None;
    };
    let condition = match o.get("condition") {
        Some(c) => condition(errs, &format!("{at}.condition"), c),
        None => {
            errs.push(format!("{at}.condition"), "is required");
            None
        }
    };
    let next = match o.get("next") {
        None | Some(Value::Null) => Some(None),
        Some(n) => module_name(errs, &format!("{at}.next"), n).map(Some),
    };
    Some(Route { condition: condition?, next: next? })
}

/// Deep merge: objects merge key by key, anything else in `b` replaces `a`;
/// a `null` in `b` leaves `a` as it is.
pub fn deep_merge(a: Value, b: Value) -> Value {
    match (a, b) {
        (a, Value::Null) => a,
        (Value::Object(mut x), Value::Object(y)) => {
            for (k, v) in y {
                let merged = match x.remove(&k) {
                    Some(old) => deep_merge(old, v),
                    None => v,
                };
                x.insert(k, merged);
            }
            Value::Object(x)
        }
        (_, b) => b,
    }
}

impl Aggregate {
    /// Combines the values of a list of sources.
    pub fn apply(self, values: Vec<Value>) -> Value {
        match self {
            Aggregate::Merge => values.into_iter().fold(Value::Null, deep_merge),
            Aggregate::Array => Value::Array(values),
            Aggregate::First => values.into_iter().find(|v| !v.is_null()).unwrap_or(Value::Null),
        }
    }
}

impl Flow {
    /// The step's value: the one source's value, or the aggregate of a list.
    pub fn value(&self, lookup: impl Fn(&Source) -> Value) -> Value {
        if self.from_list || self.from.len() > 1 {
            self.aggregate.apply(self.from.iter().map(lookup).collect())
        } else {
            self.from.first().map_or(Value::Null, lookup)
        }
    }

    /// The value reshaped by `mapping` (unchanged without one).
    pub fn map(&self, value: &Value) -> Value {
        if self.mapping.is_empty() {
            return value.clone();
        }
        let mut out = Map::new();
        for (field, path) in &self.mapping {
            if let Some(v) = path.select(value) {
                out.insert(field.clone(), v);
            }
        }
        Value::Object(out)
    }

    /// Whether this step sends its value to `name`.
    pub fn targets(&self, name: &str) -> bool {
        self.to.iter().any(|t| matches!(t, Target::Module(m) if m == name))
    }

    /// Whether this step sends its value to the composition's result.
    pub fn to_output(&self) -> bool {
        self.to.contains(&Target::Output)
    }
}

/// Whether a value is shaped like an envelope.
pub fn is_envelope(v: &Value) -> bool {
    v.get("ok").is_some_and(Value::is_boolean) && v.get("meta").is_some_and(Value::is_object)
}

/// What a value carries as data: an envelope's `data` (`null` for a
/// failure), a list's items each reduced the same way, anything else as it is.
pub fn payload(v: &Value) -> Value {
    if is_envelope(v) {
        return v.get("data").cloned().unwrap_or(Value::Null);
    }
    match v {
        Value::Array(items) => Value::Array(items.iter().map(payload).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(v: Value) -> Vec<String> {
        Composition::parse(&v).unwrap_err().into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn parses_the_spec_example() {
        let c = Composition::parse(&json!({
            "pattern": "sequential",
            "requires": [
                {"name": "code-analyzer", "version": ">=2.0.0"},
                {"name": "style-checker", "version": ">=1.0.0", "optional": true, "fallback": "default-style", "timeout_ms": 30000}
            ],
            "dataflow": [
                {"from": "input", "to": "code-analyzer", "mapping": {"code": "$.code"}},
                {"from": "code-analyzer.output", "to": "style-checker", "condition": "$.meta.confidence > 0.5"},
                {"from": ["code-analyzer.output", "style-checker.output"], "to": "output", "aggregate": "array"}
            ],
            "iteration": {"max_iterations": 3, "stop_condition": "$.meta.confidence > 0.9"}
        }))
        .unwrap();
        assert_eq!(c.max_depth, DEFAULT_MAX_DEPTH);
        assert_eq!(c.timeout_ms, DEFAULT_TIMEOUT_MS);
        let style = c.requirement("style-checker").unwrap();
        assert!(style.optional);
        assert_eq!(style.fallback.as_deref(), Some("default-style"));
        assert_eq!(style.timeout_ms, Some(30000));
        assert_eq!(c.dataflow[1].from, vec![Source::Output("code-analyzer".into())]);
        assert!(c.dataflow[2].to_output() && c.dataflow[2].from_list);
        assert_eq!(c.dataflow[2].aggregate, Aggregate::Array);
        assert_eq!(c.iteration.max_iterations, 3);
        assert!(c.has_steps());
        assert_eq!(
            c.modules().into_iter().collect::<Vec<_>>(),
            vec!["code-analyzer", "default-style", "style-checker"]
        );
    }

    #[test]
    fn errors_name_every_field() {
        let got = errors(json!({
            "pattern": "loop",
            "max_depth": 0,
            "timeout_ms": -1,
            "requires": [{"name": "ok"}, {"name": "b", "version": ">=1.a"}, {"version": "1.0.0"}, "c"],
            "dataflow": [
                {"from": "input"},
                {"from": ["input", 3], "to": "Bad"},
                {"from": "a.output", "to": "output", "mapping": {"x": "data.x", "y": 1}, "condition": "$.a = 1", "aggregate": "custom"}
            ],
            "routing": [{"next": "x"}],
            "iteration": {"max_iterations": 0, "stop_condition": "(("}
        }));
        let fields: Vec<&str> = got.iter().map(|e| e.split(": ").next().unwrap()).collect();
        for want in [
            "composition.pattern",
            "composition.max_depth",
            "composition.timeout_ms",
            "composition.requires[1].version",
            "composition.requires[2].name",
            "composition.requires[3]",
            "composition.dataflow[0].to",
            "composition.dataflow[1].from[1]",
            "composition.dataflow[1].to",
            "composition.dataflow[2].mapping.x",
            "composition.dataflow[2].mapping.y",
            "composition.dataflow[2].condition",
            "composition.dataflow[2].aggregate",
            "composition.routing[0].condition",
            "composition.iteration.max_iterations",
            "composition.iteration.stop_condition",
        ] {
            assert!(fields.contains(&want), "{want} missing from {got:#?}");
        }
        assert!(!fields.contains(&"composition.requires[0].name"), "{got:#?}");
        let e = &Composition::parse(&json!({"requires": [{"name": "a"}, {"name": "b", "version": "^one"}]}))
            .unwrap_err()[0];
        assert_eq!(e.pointer(), "/composition/requires/1/version");
        assert!(errors(json!({"pattern": "conditional"}))[0].starts_with("composition.routing"));
        assert!(errors(json!([1]))[0].starts_with("composition: must be an object"));
    }

    #[test]
    fn dataflow_values() {
        let a = json!({"ok": true, "meta": {"confidence": 0.9}, "data": {"x": 1, "n": {"p": 1}, "rationale": "a"}});
        let b = json!({"ok": true, "meta": {"confidence": 0.7}, "data": {"y": 2, "n": {"q": 2}, "rationale": "b"}});
        let lookup = |s: &Source| match s {
            Source::Input => json!({"code": "c"}),
            Source::Output(m) if m == "a" => a.clone(),
            Source::Output(m) if m == "b" => b.clone(),
            Source::Output(_) => Value::Null,
        };
        let flow = |v: Value| Composition::parse(&json!({"dataflow": [v]})).unwrap().dataflow.remove(0);

        let merged = flow(json!({"from": ["a.output", "gone.output", "b.output"], "to": "output"})).value(lookup);
        assert_eq!(merged["data"], json!({"x": 1, "y": 2, "n": {"p": 1, "q": 2}, "rationale": "b"}));
        assert_eq!(payload(&merged)["n"], json!({"p": 1, "q": 2}));

        let array = flow(json!({"from": ["a.output", "gone.output", "b"], "to": "output", "aggregate": "array"}));
        let v = array.value(lookup);
        assert_eq!(v.as_array().unwrap().len(), 3);
        assert_eq!(payload(&v)[1], Value::Null);
        assert_eq!(payload(&v)[2]["y"], 2);

        let first =
            flow(json!({"from": ["gone.output", "b.output", "a.output"], "to": "output", "aggregate": "first"}));
        assert_eq!(first.value(lookup)["data"]["y"], 2);

        let mapped = flow(
            json!({"from": "a.output", "to": "b", "mapping": {"value": "$.data.x", "conf": "$.meta.confidence", "no": "$.data.none"}}),
        );
        assert_eq!(mapped.map(&mapped.value(lookup)), json!({"value": 1, "conf": 0.9}));
        assert!(mapped.targets("b") && !mapped.to_output());

        let input = flow(json!({"from": "input", "to": "a"}));
        assert_eq!(input.map(&input.value(lookup)), json!({"code": "c"}));
        assert_eq!(payload(&json!({"ok": false, "meta": {}, "error": {}})), Value::Null);
    }

    #[test]
    fn merge_rules() {
        assert_eq!(deep_merge(json!({"a": {"b": 1, "c": 2}}), json!({"a": {"c": 3}})), json!({"a": {"b": 1, "c": 3}}));
        assert_eq!(deep_merge(json!({"a": [1]}), json!({"a": [2]})), json!({"a": [2]}));
        assert_eq!(deep_merge(json!({"a": 1}), Value::Null), json!({"a": 1}));
        assert_eq!(Aggregate::Merge.apply(vec![]), Value::Null);
    }
}
