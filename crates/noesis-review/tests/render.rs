//! Text and JSON output, exact.

use noesis_review::{Finding, NewFinding, Severity, render_text, report_order, to_json};
use serde_json::json;

use crate::finding;

fn sample() -> Vec<Finding> {
    vec![
        finding(Severity::Info, "docs", "README.md", (1, 1), "Readme mentions the old flag"),
        finding(Severity::Warning, "style", "src/lib.rs", (30, 31), "Long function"),
        Finding::new(&NewFinding {
            severity: Severity::Error,
            category: "security".into(),
            file: "src/auth.rs".into(),
            start_line: 12,
            end_line: 14,
            title: "Token compared with ==".into(),
            message: "The comparison stops at the first differing byte.\n\nIts timing leaks the token.".into(),
            resolves_when: "tokens are compared in constant time".into(),
        })
        .expect("valid"),
        finding(Severity::Warning, "style", "src/lib.rs", (3, 3), "Magic number"),
        finding(Severity::Info, "docs", "CHANGELOG.md", (2, 2), "Entry missing"),
    ]
}

#[test]
fn text_is_sorted_and_exact() {
    let expected = "\
error[security]: Token compared with ==
  --> src/auth.rs:12-14
  The comparison stops at the first differing byte.

  Its timing leaks the token.
  resolved when: tokens are compared in constant time

warning[style]: Magic number
  --> src/lib.rs:3
  About Magic number.
  resolved when: the code no longer does this

warning[style]: Long function
  --> src/lib.rs:30-31
  About Long function.
  resolved when: the code no longer does this

info[docs]: Entry missing
  --> CHANGELOG.md:2
  About Entry missing.
  resolved when: the code no longer does this

info[docs]: Readme mentions the old flag
  --> README.md:1
  About Readme mentions the old flag.
  resolved when: the code no longer does this

One blocking issue.
Fix before merging.

5 findings: 1 error, 2 warnings, 2 info
";
    assert_eq!(render_text(&sample(), "One blocking issue.\r\nFix before merging.\n"), expected);
}

#[test]
fn text_edge_cases() {
    let cases: Vec<(Vec<Finding>, &str, &str)> = vec![
        (vec![], "", "no findings\n"),
        (vec![], "  Looks good. ", "  Looks good.\n\nno findings\n"),
        (vec![], "\u{1b}[2J\n", "[2J\n\nno findings\n"),
        (
            vec![finding(Severity::Note, "testing", "t.rs", (5, 5), "No test")],
            "",
            "note[testing]: No test\n  --> t.rs:5\n  About No test.\n  resolved when: the code no longer does this\n\n1 finding: 1 note\n",
        ),
    ];
    for (findings, summary, expected) in cases {
        assert_eq!(render_text(&findings, summary), expected, "{summary:?}");
    }
}

#[test]
fn report_order_is_stable_for_ties() {
    let a = finding(Severity::Warning, "style", "x.rs", (1, 1), "First");
    let b = finding(Severity::Warning, "correctness", "x.rs", (1, 1), "Second");
    let titles = |v: Vec<&Finding>| v.into_iter().map(|f| f.title().to_owned()).collect::<Vec<_>>();
    assert_eq!(titles(report_order(&[a.clone(), b.clone()])), ["First", "Second"]);
    assert_eq!(titles(report_order(&[b, a])), ["Second", "First"]);
}

#[test]
fn json_document_is_exact() {
    let findings = sample();
    let doc = to_json(&findings[2..4], "Summary.");
    let fp = |i: usize| findings[i].fingerprint().to_owned();
    assert_eq!(
        doc,
        json!({
            "version": 1,
            "summary": "Summary.",
            "counts": {"error": 1, "warning": 1, "note": 0, "info": 0},
            "findings": [
                {
                    "severity": "error", "category": "security", "file": "src/auth.rs",
                    "start_line": 12, "end_line": 14, "title": "Token compared with ==",
                    "message": "The comparison stops at the first differing byte.\n\nIts timing leaks the token.",
                    "resolves_when": "tokens are compared in constant time", "fingerprint": fp(2)
                },
                {
                    "severity": "warning", "category": "style", "file": "src/lib.rs",
                    "start_line": 3, "end_line": 3, "title": "Magic number", "message": "About Magic number.",
                    "resolves_when": "the code no longer does this", "fingerprint": fp(3)
                }
            ]
        })
    );
    // Key order is part of the output.
    let text = serde_json::to_string(&doc).expect("serialises");
    assert!(text.starts_with(r#"{"version":1,"summary":"Summary.","counts":{"error":1,"warning":1,"note":0,"info":0},"findings":[{"severity":"error","category":"security","file":"src/auth.rs","start_line":12,"#), "{text}");
}
