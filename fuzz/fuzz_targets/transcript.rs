//! A transcript file is whatever is on disk: reading it never panics, and
//! every line is either a record or a problem reported by number.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let t = noesis_transcript::parse(bytes);
    assert!(t.records() + t.problems().len() <= bytes.len() + 1);
});
