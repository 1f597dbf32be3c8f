//! Secret values in what a command printed: whatever the text and the
//! secret, none of the secret is left after redaction.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: (&str, &str)| {
    let (secret, text) = input;
    // A secret with brackets could be spelt by the marker and its neighbours.
    if secret.len() < noesis_sandbox::MIN_SECRET_LEN || secret.contains(['[', ']']) {
        return;
    }
    let r = noesis_sandbox::Redactor::new(&[("FUZZ_TOKEN".to_owned(), secret.to_owned())], &[], &[]);
    let printed = format!("{text}{secret}{text}");
    let out = r.redact(&printed);
    assert!(!out.contains(secret), "{out:?}");
});
