//! Reading a step's inputs from what ran before, and shaping the
//! composition's output envelope.

use super::*;

pub(super) fn lookup(scope: &Map<String, Value>, source: &Source) -> Value {
    match source {
        Source::Input => scope.get("input").cloned().unwrap_or(Value::Null),
        Source::Output(m) => scope.get(m).cloned().unwrap_or(Value::Null),
    }
}

/// The input a dataflow value gives a module: its payload, which must be an
/// object.
pub(super) fn module_input(value: &Value) -> Result<Value, Box<Failure>> {
    match payload(value) {
        v @ Value::Object(_) => Ok(v),
        other => Err(Box::new(Failure::new(
            ErrorCode::E1001,
            format!(
                "the dataflow gives this module {} as its input; a module's input is a JSON object",
                noesis_modules::composition::describe(&other)
            ),
        ))),
    }
}

pub(super) fn with_partial(mut envelope: Value, scope: &Map<String, Value>) -> Value {
    if envelope.get("partial_data").is_some() {
        return envelope;
    }
    let done: Map<String, Value> = scope
        .iter()
        .filter(|(k, v)| *k != "input" && is_ok(v))
        .map(|(k, v)| (k.clone(), v.get("data").cloned().unwrap_or(Value::Null)))
        .collect();
    if !done.is_empty()
        && let Some(obj) = envelope.as_object_mut()
    {
        obj.insert("partial_data".into(), Value::Object(done));
    }
    envelope
}

pub(super) fn dataflow_cycle(c: &Composition, waiting: &[usize], scope: &Map<String, Value>) -> Value {
    // Follow "waits for" edges from the first waiting step until a module repeats.
    let unsettled = |i: usize| -> Option<String> {
        c.dataflow[i].from.iter().find_map(|s| match s {
            Source::Output(m) if !scope.contains_key(m) => Some(m.clone()),
            _ => None,
        })
    };
    let mut chain: Vec<String> = Vec::new();
    let mut current = waiting.first().and_then(|&i| {
        c.dataflow[i].to.iter().find_map(|t| match t {
            Target::Module(m) => Some(m.clone()),
            Target::Output => None,
        })
    });
    while let Some(m) = current {
        if chain.contains(&m) {
            chain.push(m);
            break;
        }
        chain.push(m.clone());
        current = waiting.iter().find(|&&i| c.dataflow[i].targets(&m)).and_then(|&i| unsettled(i));
    }
    Failure::new(ErrorCode::E4004, format!("circular dataflow: {} (each waits for the next)", chain.join(" → ")))
        .details(json!({"chain": chain}))
        .into_envelope()
}

pub(super) const RISKS: [&str; 4] = ["none", "low", "medium", "high"];

/// The envelope made from a `to: output` value.
pub(super) fn output_envelope(root: &str, pattern: Pattern, value: &Value, contributors: &[(String, Value)]) -> Value {
    let mut data = match payload(value) {
        Value::Object(m) => m,
        Value::Array(items) => {
            let mut m = Map::new();
            m.insert("results".into(), Value::Array(items));
            m
        }
        Value::Null => Map::new(),
        other => {
            let mut m = Map::new();
            m.insert("result".into(), other);
            m
        }
    };
    let names: Vec<&str> = contributors.iter().map(|(m, _)| m.as_str()).collect();
    if data.get("rationale").and_then(Value::as_str).is_none_or(|r| r.trim().is_empty()) {
        let parts: Vec<String> = contributors
            .iter()
            .filter_map(|(m, e)| e.pointer("/data/rationale").and_then(Value::as_str).map(|r| format!("{m}: {r}")))
            .collect();
        let rationale = if parts.is_empty() {
            format!("Composed by {root} ({}) without a model's reasoning.", pattern.as_str())
        } else {
            parts.join("\n")
        };
        data.insert("rationale".into(), json!(rationale));
    }
    let confidence = contributors
        .iter()
        .filter_map(|(_, e)| e.pointer("/meta/confidence").and_then(Value::as_f64))
        .fold(None, |acc: Option<f64>, c| Some(acc.map_or(c, |a| a.min(c))))
        .unwrap_or(1.0);
    let risk = contributors
        .iter()
        .filter_map(|(_, e)| e.pointer("/meta/risk").and_then(Value::as_str))
        .filter_map(|r| RISKS.iter().position(|k| *k == r))
        .max()
        .map_or("none", |i| RISKS[i]);
    let explain = if names.is_empty() {
        format!("{root}: {} composition", pattern.as_str())
    } else {
        format!("{root}: {} composition of {}", pattern.as_str(), names.join(", "))
    };
    json!({
        "ok": true,
        "meta": {"confidence": confidence, "risk": risk, "explain": truncate_chars(&explain, noesis_modules::EXPLAIN_MAX_CHARS)},
        "data": Value::Object(data),
    })
}
