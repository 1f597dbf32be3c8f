//! One test binary for noesis-review, one module per boundary.

mod fingerprint;
mod model;
mod promote;
mod render;
mod sarif;

use noesis_review::{Finding, NewFinding, Severity};

/// A finding with a fixed message and resolve condition.
fn finding(severity: Severity, category: &str, file: &str, lines: (u32, u32), title: &str) -> Finding {
    Finding::new(&NewFinding {
        severity,
        category: category.to_owned(),
        file: file.to_owned(),
        start_line: lines.0,
        end_line: lines.1,
        title: title.to_owned(),
        message: format!("About {title}."),
        resolves_when: "the code no longer does this".to_owned(),
    })
    .expect("test finding is valid")
}
