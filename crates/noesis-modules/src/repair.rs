//! The repair pass: conservative fixes to the control plane (`meta`) only.
//!
//! It may fill missing meta fields with conservative defaults, clamp
//! confidence, normalise the spelling of a risk level, truncate `explain`
//! and trim whitespace. It never changes business data, invents enum values,
//! changes a value's type or adds fields outside `meta`.

use serde_json::{Map, Value, json};

use crate::envelope::{EXPLAIN_MAX_CHARS, truncate_chars};
use crate::risk::LEVELS;

/// Repairs `envelope` in place and returns a description of each change.
/// `default_risk` is the risk the module's rule gives for this data.
pub fn repair(envelope: &mut Value, default_risk: &str) -> Vec<String> {
    let mut done = Vec::new();
    let Some(env) = envelope.as_object_mut() else {
        return done;
    };
    let success = match env.get("ok") {
        Some(Value::Bool(b)) => *b,
        // Without `ok` the envelope's kind is unknown; adding it would be
        // inventing the answer.
        _ => return done,
    };
    let explain_source = if success {
        env.get("data").and_then(|d| d.get("rationale")).and_then(Value::as_str)
    } else {
        env.get("error").and_then(|e| e.get("message")).and_then(Value::as_str)
    }
    .map(|s| truncate_chars(s.trim(), EXPLAIN_MAX_CHARS));

    let meta = match env.get_mut("meta") {
        Some(Value::Object(m)) => m,
        Some(_) => return done,
        None => {
            env.insert("meta".into(), Value::Object(Map::new()));
            done.push("added missing meta".to_owned());
            match env.get_mut("meta") {
                Some(Value::Object(m)) => m,
                _ => return done,
            }
        }
    };

    match meta.get("confidence") {
        None => {
            meta.insert("confidence".into(), json!(if success { 0.5 } else { 0.0 }));
            done.push("filled meta.confidence".to_owned());
        }
        Some(Value::Number(n)) => {
            if let Some(f) = n.as_f64() {
                let clamped = f.clamp(0.0, 1.0);
                if clamped != f {
                    meta.insert("confidence".into(), json!(clamped));
                    done.push(format!("clamped meta.confidence {f} to {clamped}"));
                }
            }
        }
        Some(_) => {}
    }

    match meta.get("risk") {
        None => {
            let risk = if success { default_risk } else { "high" };
            meta.insert("risk".into(), json!(risk));
            done.push("filled meta.risk".to_owned());
        }
        Some(Value::String(s)) => {
            let norm = s.trim().to_lowercase();
            if norm != *s && LEVELS.contains(&norm.as_str()) {
                meta.insert("risk".into(), json!(norm));
                done.push("normalised meta.risk".to_owned());
            }
        }
        Some(_) => {}
    }

    match meta.get("explain") {
        None => {
            let text = explain_source.unwrap_or_default();
            meta.insert("explain".into(), json!(text));
            done.push("filled meta.explain".to_owned());
        }
        Some(Value::String(s)) => {
            let fixed = truncate_chars(s.trim(), EXPLAIN_MAX_CHARS);
            if fixed != *s {
                meta.insert("explain".into(), json!(fixed));
                done.push("trimmed meta.explain".to_owned());
            }
        }
        Some(_) => {}
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_missing_meta_from_rationale() {
        let mut e = json!({"ok": true, "data": {"rationale": "  because   "}});
        let done = repair(&mut e, "low");
        assert_eq!(e["meta"], json!({"confidence": 0.5, "risk": "low", "explain": "because"}));
        assert_eq!(done.len(), 4);
    }

    #[test]
    fn clamps_trims_and_normalises() {
        let long = "x".repeat(300);
        let mut e = json!({"ok": true, "meta": {"confidence": 1.5, "risk": " High", "explain": long}, "data": {"rationale": "r"}});
        repair(&mut e, "none");
        assert_eq!(e["meta"]["confidence"], json!(1.0));
        assert_eq!(e["meta"]["risk"], "high");
        assert_eq!(e["meta"]["explain"].as_str().unwrap().chars().count(), 280);
    }

    #[test]
    fn never_invents_or_retypes() {
        let mut e =
            json!({"ok": true, "meta": {"confidence": "high", "risk": "critical", "explain": "e"}, "data": {"x": 1}});
        let before = e.clone();
        assert!(repair(&mut e, "low").is_empty());
        assert_eq!(e, before);
        let mut no_ok = json!({"meta": {}, "data": {"rationale": "r"}});
        assert!(repair(&mut no_ok, "low").is_empty());
    }

    #[test]
    fn failure_defaults_are_conservative() {
        let mut e = json!({"ok": false, "error": {"code": "E1", "message": "boom"}});
        repair(&mut e, "low");
        assert_eq!(e["meta"], json!({"confidence": 0.0, "risk": "high", "explain": "boom"}));
    }
}
