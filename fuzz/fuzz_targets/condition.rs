//! A composition's condition: parsed, then evaluated against a fixed
//! document, never a panic.
#![no_main]

use noesis_modules::condition::Condition;

libfuzzer_sys::fuzz_target!(|text: &str| {
    if let Ok(condition) = Condition::parse(text) {
        let doc = serde_json::json!({"a": 1, "b": [1, "x", null], "meta": {"confidence": 0.5, "risk": "low"}});
        let _ = condition.eval(&doc);
    }
});
