//! All terminal output goes through here: data to stdout, diagnostics to
//! stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;

/// Writes data to stdout; a closed pipe surfaces as an error the caller
/// treats as success.
pub(crate) fn data(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        stdout.write_all(b"\n")?;
    }
    stdout.flush()
}

/// A diagnostic line on stderr.
pub(crate) fn note(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Streamed model text on stderr, as it arrives (no newline added).
pub(crate) fn stream(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// An error line on stderr.
pub(crate) fn error(text: &str) {
    note(&format!("error: {text}"));
}

pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().filter_map(|e| e.downcast_ref::<std::io::Error>()).any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// An envelope, compact or pretty.
pub(crate) fn json(value: &serde_json::Value, pretty: bool) -> std::io::Result<()> {
    let text =
        if pretty { serde_json::to_string_pretty(value) } else { serde_json::to_string(value) }.unwrap_or_default();
    data(&text)
}
