//! The changes between two JSON values, small when the new one mostly
//! grows the old (a run's state: its conversation, calls and replies are
//! appended, a few fields change). Pure: no I/O.
//!
//! A delta is itself JSON, one of
//! - `{"=": v}`: the value becomes `v`;
//! - `{"{": {key: delta, …}, "-": [key, …]}`: an object's changed and new
//!   keys (each with its own delta; a new key's delta is `{"=": v}`) and
//!   its removed keys;
//! - `{"[": n, "~": {"i": delta, …}, "+": [v, …]}`: an array cut to its
//!   first `n` items, items `i` changed, then `v…` appended.
//!
//! The one-letter keys keep a delta as small as the change it carries.

use serde_json::{Map, Value};

/// Why a delta does not fit the value it is applied to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a stored change does not fit the state before it: {0}")]
pub struct DeltaError(String);

/// The delta that turns `old` into `new`, or `None` when they are equal.
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    let replace = || Some(Value::Object(Map::from_iter([("=".to_owned(), new.clone())])));
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut changed = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = diff(ov, nv) {
                            changed.insert(k.clone(), d);
                        }
                    }
                    None => {
                        changed.insert(k.clone(), Value::Object(Map::from_iter([("=".to_owned(), nv.clone())])));
                    }
                }
            }
            let removed: Vec<Value> =
                o.keys().filter(|k| !n.contains_key(*k)).map(|k| Value::String(k.clone())).collect();
            let mut d = Map::from_iter([("{".to_owned(), Value::Object(changed))]);
            if !removed.is_empty() {
                d.insert("-".to_owned(), Value::Array(removed));
            }
            Some(Value::Object(d))
        }
        // Worth a patch only when most of the old array stays.
        (Value::Array(o), Value::Array(n)) if !o.is_empty() && n.len() * 2 >= o.len() => {
            let keep = o.len().min(n.len());
            let mut changed = Map::new();
            for (i, (ov, nv)) in o.iter().zip(n).enumerate() {
                if let Some(d) = diff(ov, nv) {
                    changed.insert(i.to_string(), d);
                }
            }
            if changed.len() * 2 > keep {
                return replace();
            }
            let mut d = Map::from_iter([("[".to_owned(), Value::from(keep))]);
            if !changed.is_empty() {
                d.insert("~".to_owned(), Value::Object(changed));
            }
            if n.len() > keep {
                d.insert("+".to_owned(), Value::Array(n[keep..].to_vec()));
            }
            Some(Value::Object(d))
        }
        _ => replace(),
    }
}

/// Applies `delta` (from [`diff`]) to `value` in place.
///
/// # Errors
/// When the delta is not one [`diff`] makes or does not fit `value`; then
/// `value` may be half changed, so callers apply to a value they can drop.
pub fn apply(value: &mut Value, delta: &Value) -> Result<(), DeltaError> {
    let bad = |what: &str| DeltaError(what.to_owned());
    let d = delta.as_object().ok_or_else(|| bad("a change is not an object"))?;
    if let Some(v) = d.get("=") {
        *value = v.clone();
        return Ok(());
    }
    if let Some(changed) = d.get("{") {
        let target = value.as_object_mut().ok_or_else(|| bad("an object change meets a non-object"))?;
        let changed = changed.as_object().ok_or_else(|| bad("an object change's keys are not an object"))?;
        for (k, kd) in changed {
            match target.get_mut(k) {
                Some(v) => apply(v, kd)?,
                None => {
                    let mut v = Value::Null;
                    apply(&mut v, kd)?;
                    target.insert(k.clone(), v);
                }
            }
        }
        for k in d.get("-").and_then(Value::as_array).into_iter().flatten() {
            target.remove(k.as_str().ok_or_else(|| bad("a removed key is not a string"))?);
        }
        return Ok(());
    }
    if let Some(keep) = d.get("[") {
        let target = value.as_array_mut().ok_or_else(|| bad("an array change meets a non-array"))?;
        let keep = keep.as_u64().and_then(|k| usize::try_from(k).ok()).ok_or_else(|| bad("an array length"))?;
        if keep > target.len() {
            return Err(bad("an array change keeps more items than there are"));
        }
        target.truncate(keep);
        for (i, id) in d.get("~").and_then(Value::as_object).into_iter().flatten() {
            let i: usize = i.parse().map_err(|_| bad("an array index"))?;
            apply(target.get_mut(i).ok_or_else(|| bad("an array index past the end"))?, id)?;
        }
        if let Some(add) = d.get("+") {
            target.extend(add.as_array().ok_or_else(|| bad("appended items are not an array"))?.iter().cloned());
        }
        return Ok(());
    }
    Err(bad("an unknown kind of change"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn round_trip(old: Value, new: Value) -> Option<Value> {
        let d = diff(&old, &new);
        let mut v = old;
        if let Some(d) = &d {
            apply(&mut v, d).unwrap();
        }
        assert_eq!(v, new);
        d
    }

    #[test]
    fn equal_values_have_no_delta_and_scalars_are_replaced() {
        assert_eq!(round_trip(json!({"a": [1, 2]}), json!({"a": [1, 2]})), None);
        assert_eq!(round_trip(json!(1), json!("x")), Some(json!({"=": "x"})));
        assert_eq!(round_trip(json!([1]), json!({"a": 1})), Some(json!({"=": {"a": 1}})));
    }

    #[test]
    fn a_growing_state_is_carried_by_what_grew() {
        let old =
            json!({"step": 3, "calls": [{"id": "x"}, {"id": "a", "status": "running"}], "config": {"tools": ["t"]}});
        let new = json!({"step": 4, "calls": [{"id": "x"}, {"id": "a", "status": "completed", "result": "5"}, {"id": "b"}],
                         "config": {"tools": ["t"]}, "outcome": null});
        let d = round_trip(old, new).unwrap();
        assert_eq!(
            d,
            json!({"{": {"step": {"=": 4}, "outcome": {"=": null}, "calls": {"[": 2,
                "~": {"1": {"{": {"status": {"=": "completed"}, "result": {"=": "5"}}}}, "+": [{"id": "b"}]}}})
        );
    }

    #[test]
    fn removals_and_shrinking_arrays_round_trip() {
        round_trip(json!({"a": 1, "b": 2}), json!({"b": 2}));
        round_trip(json!([1, 2, 3, 4]), json!([1, 2, 9]));
        round_trip(json!([1, 2, 3, 4]), json!([1]));
        round_trip(json!([]), json!([1]));
        round_trip(json!([1, 2]), json!([3, 4]));
        round_trip(json!({"x": [{"y": [1, {"z": 1}]}]}), json!({"x": [{"y": [1, {"z": 2}, 3]}]}));
    }

    #[test]
    fn a_delta_that_does_not_fit_is_refused() {
        let mut v = json!({"a": 1});
        assert!(apply(&mut v, &json!({"[": 0})).is_err());
        assert!(apply(&mut json!([1]), &json!({"[": 5})).is_err());
        assert!(apply(&mut json!([1]), &json!({"[": 1, "~": {"3": {"=": 1}}})).is_err());
        assert!(apply(&mut json!([1]), &json!("x")).is_err());
        assert!(apply(&mut json!([1]), &json!({"?": 1})).is_err());
    }

    #[test]
    fn many_random_edits_round_trip() {
        // A small deterministic generator: no dependency, same cases every run.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut state = json!({"entries": [], "calls": [], "step": 0});
        for _ in 0..300 {
            let old = state.clone();
            state["step"] = json!(next(1000));
            let calls = state["calls"].as_array_mut().unwrap();
            match next(4) {
                0 => calls.push(json!({"id": next(100), "status": "proposed"})),
                1 if !calls.is_empty() => {
                    let i = usize::try_from(next(calls.len() as u64)).unwrap();
                    calls[i]["status"] = json!("completed");
                }
                2 if !calls.is_empty() => {
                    calls.pop();
                }
                _ => state["entries"].as_array_mut().unwrap().push(json!({"kind": "note", "n": next(9)})),
            }
            if next(10) == 0 {
                state.as_object_mut().unwrap().remove("outcome");
            } else if next(10) == 0 {
                state["outcome"] = json!({"text": "done"});
            }
            round_trip(old, state.clone());
        }
    }
}
