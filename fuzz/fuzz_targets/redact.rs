//! Secrets in text bound for a prompt or a trace: redacting twice changes
//! nothing more.
#![no_main]

use noesis_modules::context::redact_text;

libfuzzer_sys::fuzz_target!(|text: &str| {
    let (once, _) = redact_text(text);
    let (twice, more) = redact_text(&once);
    assert_eq!((twice.as_str(), more), (once.as_str(), 0));
});
