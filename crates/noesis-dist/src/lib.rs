//! Installing Cognitive Modules the way cargo and npm users expect:
//! reproducible, verified, atomic.
//!
//! [`source`] reads what a person types (`github:owner/repo/path@^1.2`, a
//! git URL, a folder) — pure; [`version`] picks a tag for a range — pure;
//! [`lock`] is `cognitive.lock` — pure; [`install`] fetches (git through
//! the `git` program), validates by loading the module, and swaps it in
//! through [`swap`] — staged, committed by a journal, exchanged in one
//! rename, recovered — so an interrupted install leaves the old module and
//! lockfile or the new ones, never half of either or a mix. [`migrate`]
//! rewrites a module folder as v2.2 in place by the same swap, with a backup
//! of the original.

pub mod install;
pub mod lock;
pub mod migrate;
pub mod registry;
pub mod scaffold;
pub mod source;
pub mod swap;
pub mod tarball;
pub mod version;

pub use install::{DistError, Installed, Installer};
pub use lock::{LockEntry, Lockfile};
pub use source::{Reference, Source};
