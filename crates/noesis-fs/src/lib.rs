//! The file-system policies every layer of noesis shares, each in one place:
//!
//! - [`write_atomic`]: a file is replaced whole or not at all;
//! - [`walk`]: which files of a project tree are looked at (`.gitignore` and
//!   `.ignore` honoured even outside a git repository, links not followed,
//!   `.git` skipped);
//! - [`Workspace::confine`]: a path a model, a diff or a transcript names is
//!   resolved inside a root, or refused (`..`, an absolute path elsewhere, a
//!   symlink that leads out).
//!
//! No other logic: no formats, no I/O beyond what these three need.
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let ws = noesis_fs::Workspace::new(dir.path())?;
//! let file = ws.confine("notes/today.md")?;
//! noesis_fs::write_atomic(&file, b"hello")?;
//! assert_eq!(std::fs::read_to_string(&file)?, "hello");
//! assert!(ws.confine("../elsewhere").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod atomic;
pub mod snapshot;
mod walk;
mod workspace;

pub use atomic::{WriteError, write_atomic, write_atomic_with};
pub use walk::{walk, walk_skipping};
pub use workspace::{ConfineError, Workspace};
