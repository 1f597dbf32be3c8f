//! `@call` directives in a prompt: found, then replaced; the text outside
//! them is kept.
#![no_main]

use noesis_modules::calls::{find_calls, replace_calls};

libfuzzer_sys::fuzz_target!(|prompt: &str| {
    let calls = find_calls(prompt);
    let replacements: Vec<String> = calls.iter().map(|_| String::new()).collect();
    let out = replace_calls(prompt, &calls, &replacements);
    assert!(out.len() <= prompt.len());
});
