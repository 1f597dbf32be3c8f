//! What the code says.
//!
//! Three pure views of source text, for `noesis testgen`, `noesis review`
//! and `noesis docs`:
//!
//! - [`units`]: the functions of a Python or Rust file (tree-sitter), each
//!   with a qualified name, a signature, and hashes of the signature and the
//!   body that ignore formatting and comments, so [`changed`] can tell an
//!   interface change from an implementation change; plus [`imports`].
//! - [`diff`]: unified diffs (`git diff`, `diff -u`) parsed into files,
//!   hunks and numbered lines.
//! - [`testspec`]: the test specs a model writes (data, never code) and the
//!   deterministic pytest and Rust test files rendered from them.
//!
//! **Architecture invariant:** no I/O. Callers read files and run `git`;
//! this crate only turns text into data and data into text. Malformed input
//! never panics: a source file with syntax errors still yields the functions
//! that parse, and a diff that cannot be read is an error naming its line.
//!
//! ```
//! use noesis_code::{Lang, functions};
//!
//! let units = functions(Lang::Python, "def add(a: int, b: int) -> int:\n    return a + b\n")?;
//! assert_eq!(units[0].qualified_name, "add");
//! assert_eq!(units[0].signature, "def add(a: int, b: int) -> int");
//! # Ok::<(), noesis_code::CodeError>(())
//! ```
#![deny(missing_docs)]

pub mod diff;
mod normalize;
pub mod testspec;
pub mod units;

pub use diff::{DiffLine, FileDiff, FileStatus, Hunk, LineKind, parse_unified};
pub use testspec::{Case, CaseKind, Expected, TestSpec, render_pytest, render_rust};
pub use units::{
    Change, ChangeKind, Function, FunctionKind, Lang, Param, changed, functions, has_syntax_errors, imports,
};

/// What can go wrong here: a grammar that cannot be loaded (a build
/// problem, never the input's fault) or a diff that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodeError {
    /// The tree-sitter parser could not be set up for the language (an ABI
    /// mismatch between the core and the grammar crate) or gave no tree.
    #[error("cannot parse {lang:?} source: {reason}")]
    Parser {
        /// The language asked for.
        lang: Lang,
        /// What tree-sitter said.
        reason: String,
    },
    /// A unified diff that does not read as one.
    #[error("diff line {line}: {reason}")]
    Diff {
        /// The 1-based line of the diff text.
        line: usize,
        /// What was wrong there.
        reason: String,
    },
}
