//! Text and JSON output.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::finding::{Finding, Severity, clean_text};

/// The version of [`to_json`]'s document; a change of shape gets a new one.
pub const JSON_VERSION: u64 = 1;

/// The findings in report order: by severity (errors first), then file, then
/// start and end line; findings equal in all four keep their input order.
#[must_use]
pub fn report_order(findings: &[Finding]) -> Vec<&Finding> {
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by(|a, b| {
        (a.severity(), a.file(), a.start_line(), a.end_line()).cmp(&(
            b.severity(),
            b.file(),
            b.start_line(),
            b.end_line(),
        ))
    });
    sorted
}

/// The findings for a terminal or a log, in [report order](report_order),
/// then the summary (if any) and a count line:
///
/// ```text
/// error[security]: Token compared with ==
///   --> src/auth.rs:12-14
///   The comparison stops at the first differing byte.
///   resolved when: tokens are compared in constant time
///
/// Mostly fine.
///
/// 1 finding: 1 error
/// ```
///
/// No colour; the summary is cleaned of control characters like a message.
#[must_use]
pub fn render_text(findings: &[Finding], summary: &str) -> String {
    let mut blocks: Vec<String> = report_order(findings).into_iter().map(finding_block).collect();
    let summary = clean_text(summary);
    if !summary.is_empty() {
        blocks.push(summary);
    }
    blocks.push(count_line(findings));
    let mut out = blocks.join("\n\n");
    out.push('\n');
    out
}

fn finding_block(f: &Finding) -> String {
    let mut out = format!("{}[{}]: {}\n  --> {}:{}", f.severity(), f.category(), f.title(), f.file(), f.start_line());
    if f.end_line() != f.start_line() {
        let _ = write!(out, "-{}", f.end_line());
    }
    for line in f.message().lines() {
        out.push('\n');
        if !line.is_empty() {
            out.push_str("  ");
            out.push_str(line);
        }
    }
    let _ = write!(out, "\n  resolved when: {}", f.resolves_when());
    out
}

/// `no findings`, or `3 findings: 1 error, 2 warnings` (severities with none left out).
fn count_line(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "no findings".to_owned();
    }
    let parts: Vec<String> = Severity::ALL
        .into_iter()
        .filter_map(|s| {
            let n = findings.iter().filter(|f| f.severity() == s).count();
            let plural = if n == 1 || s == Severity::Info { "" } else { "s" };
            (n > 0).then(|| format!("{n} {s}{plural}"))
        })
        .collect();
    let noun = if findings.len() == 1 { "finding" } else { "findings" };
    format!("{} {noun}: {}", findings.len(), parts.join(", "))
}

/// The findings as one JSON document, in [report order](report_order):
///
/// ```json
/// { "version": 1, "summary": "…",
///   "counts": { "error": 1, "warning": 0, "note": 0, "info": 0 },
///   "findings": [ { "severity": "error", "category": "security", "file": "src/auth.rs",
///                   "start_line": 12, "end_line": 14, "title": "…", "message": "…",
///                   "resolves_when": "…", "fingerprint": "…" } ] }
/// ```
///
/// Each finding deserialises back into a [`Finding`] (its fingerprint recomputed).
#[must_use]
pub fn to_json(findings: &[Finding], summary: &str) -> Value {
    let mut counts = serde_json::Map::new();
    for s in Severity::ALL {
        counts.insert(s.as_str().to_owned(), json!(findings.iter().filter(|f| f.severity() == s).count()));
    }
    json!({
        "version": JSON_VERSION,
        "summary": clean_text(summary),
        "counts": counts,
        "findings": report_order(findings),
    })
}
