//! Installing Cognitive Modules the way cargo and npm users expect:
//! reproducible, verified, atomic.
//!
//! [`source`] reads what a person types (`github:owner/repo/path@^1.2`, a
//! git URL, a folder) — pure; [`version`] picks a tag for a range — pure;
//! [`lock`] is `cognitive.lock` — pure; [`install`] fetches (git through
//! the `git` program), validates by loading the module, and swaps it in by
//! rename, so an interrupted install leaves the old module or the new one,
//! never half of either.

pub mod install;
pub mod lock;
pub mod registry;
pub mod source;
pub mod tarball;
pub mod version;

pub use install::{DistError, Installed, Installer};
pub use lock::{LockEntry, Lockfile};
pub use source::{Reference, Source};
