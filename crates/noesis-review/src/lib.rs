//! Code-review findings: what a review says, how a repeat is recognised, and
//! how findings are written out.
//!
//! A review model answers in the shape of [`findings_schema`]
//! (`{ "findings": [...], "summary": "..." }`); [`parse_reply`] validates
//! that into [`Finding`]s and reports every problem with the finding's index
//! and the field. Each finding says when it is resolved
//! ([`Finding::resolves_when`]) and carries a [`fingerprint()`] of its
//! category and normalised title that survives moved lines, renamed
//! identifiers and rewording of quotes, case and spacing, and that leaves the
//! file out, so the same mistake in another file matches. [`repeats`] counts
//! fingerprints across reviews and proposes a [`Promotion`] to a project
//! [`Principle`] at [`PROMOTE_AT`] sightings. Findings are written as text
//! ([`render_text`]), JSON ([`to_json`]) and SARIF 2.1.0 ([`to_sarif`]).
//!
//! Architecture invariant: pure. No I/O, no clock, no randomness; the caller
//! calls the model, stores history and principles, and prints. Nothing here
//! panics on input.
//!
//! ```
//! use noesis_review::{parse_reply, render_text};
//! use serde_json::json;
//!
//! let reply = json!({
//!     "findings": [{
//!         "severity": "warning", "category": "Correctness", "file": "./src/config.rs",
//!         "start_line": 12, "end_line": 12,
//!         "title": "`read_config` unwraps a parse result",
//!         "message": "A malformed file panics instead of reporting the error.",
//!         "resolves_when": "the parse error is returned to the caller"
//!     }],
//!     "summary": "One panic path."
//! });
//! let (reply, errors) = parse_reply(&reply);
//! assert!(errors.is_empty());
//! assert_eq!(reply.findings[0].file(), "src/config.rs");
//! assert_eq!(
//!     render_text(&reply.findings, &reply.summary),
//!     "warning[correctness]: `read_config` unwraps a parse result
//!   --> src/config.rs:12
//!   A malformed file panics instead of reporting the error.
//!   resolved when: the parse error is returned to the caller
//!
//! One panic path.
//!
//! 1 finding: 1 warning
//! "
//! );
//! ```
#![deny(missing_docs)]

mod finding;
pub mod fingerprint;
mod promote;
mod render;
mod sarif;

pub use finding::{Category, Finding, NewFinding, Problem, Reply, ReviewError, Severity, findings_schema, parse_reply};
pub use fingerprint::{FINGERPRINT_VERSION, fingerprint, location_key, normalise};
pub use promote::{PROMOTE_AT, PastFinding, Principle, Promotion, principle_text, repeats};
pub use render::{JSON_VERSION, render_text, report_order, to_json};
pub use sarif::{LOCATION_KEY_VERSION, SARIF_SCHEMA, SARIF_VERSION, SRCROOT, SarifTool, to_sarif};
