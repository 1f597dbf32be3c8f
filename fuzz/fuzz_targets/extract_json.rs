//! A model's reply: any text gives a JSON value found in it, or none.
#![no_main]

libfuzzer_sys::fuzz_target!(|reply: &str| {
    if let Some((value, _)) = noesis_modules::extract_json(reply) {
        // What was found is a value that prints and parses back.
        let text = value.to_string();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).ok(), Some(value));
    }
});
