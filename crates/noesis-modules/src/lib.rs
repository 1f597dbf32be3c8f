//! Cognitive Modules v2.2: everything about a module that is not a network
//! call — the manifest and its tier rules, loading any layout, compiling the
//! schemas once, building the prompt, extracting JSON from a reply,
//! validating and repairing the envelope, aggregating risk, and the E-codes.
//!
//! Architecture invariant: this crate does no network I/O and keeps no
//! clock; the only I/O is reading a module's files in [`loader`] and the
//! search path in [`search`].
//!
//! ```
//! use noesis_modules::{check_reply, load, Source, BUILTIN};
//! let (name, files) = BUILTIN[0];
//! let module = load(Source::Embedded { name, files }).unwrap();
//! let checked = check_reply(&module, "no JSON here");
//! assert_eq!(checked.envelope["error"]["code"], "E1000");
//! ```
#![deny(missing_docs)]

mod builtin;
pub mod calls;
mod check;
mod code;
pub mod composition;
pub mod condition;
pub mod context;
pub mod enforce;
mod envelope;
pub mod jsonpath;
mod loader;
mod manifest;
pub mod migrate;
mod parse;
mod prompt;
mod repair;
mod risk;
mod schema;
pub mod search;
pub mod version;

pub use builtin::BUILTIN;
pub use check::{Checked, check_input, check_reply};
pub use code::{ErrorCode, Recoverable};
pub use envelope::{
    EXPLAIN_MAX_CHARS, Failure, envelope_file_problems, judge_vector, truncate_chars, validate_envelope,
};
pub use loader::{ADVISORY_FIELDS, Format, LoadError, Module, Section, Source, load, load_dir, load_remembering};
pub use manifest::{
    ContextMode, EnumStrategy, Manifest, Policy, RiskRule, Strictness, Tier, validate_manifest, validate_manifest_in,
};
pub use parse::{Found, extract_json};
pub use prompt::{ENVELOPE_INSTRUCTION, PromptParts, build_prompt};
pub use repair::repair;
pub use risk::aggregate as aggregate_risk;
pub use schema::{CompiledSchema, SchemaCompileError, Violation};
