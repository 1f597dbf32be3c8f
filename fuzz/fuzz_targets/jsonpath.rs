//! A JSONPath from a module file: parsed, then selected on a fixed
//! document.
#![no_main]

use noesis_modules::jsonpath::JsonPath;

libfuzzer_sys::fuzz_target!(|text: &str| {
    if let Ok(path) = JsonPath::parse(text) {
        let doc = serde_json::json!({"a": {"b": [1, {"c": true}]}, "d": [[], {}], "e.f": 2});
        let _ = path.select(&doc);
    }
});
