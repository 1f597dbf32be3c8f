//! How a process chosen by a model runs: the trust boundary's one way in.
//!
//! A model is an untrusted author. Every process started on its behalf —
//! a `run_command`, the tests `solve` runs, `testgen`'s pytest, an MCP
//! server not marked trusted — is started through a [`Sandbox`]:
//! - **files**: read the system (`/etc` without its secrets), the
//!   toolchains and the workspace; write only the workspace and the run's
//!   own folder; never the home folder's secrets (`~/.ssh`, `~/.aws`, …),
//!   noesis's own folder or the store; `.git`, `noesis.toml` and
//!   `cognitive.lock` read-only (Landlock, and mounts in a private mount
//!   namespace);
//! - **network**: none (no TCP or UDP socket, loopback included — seccomp
//!   and Landlock) unless the operator grants it;
//! - **environment**: cleared to `PATH`, the locale, the terminal,
//!   toolchain locations and a private `HOME`/`TMPDIR` (no provider key
//!   passes);
//! - **processes**: the command is started by pid 1 of a new pid
//!   namespace, so the whole tree dies when the command ends, at a timeout,
//!   on cancel, and when noesis dies (`kill -9` included); no capability,
//!   `no_new_privs`, resource limits.
//!
//! Where the machine cannot do this, [`Sandbox::new`] fails and nothing
//! runs, unless the operator chose [`Mode::Off`]. [`Redactor`] replaces
//! secret values in anything a process printed.
//!
//! ```no_run
//! use noesis_sandbox::{RunOptions, Sandbox, Settings};
//! use std::time::Duration;
//!
//! let workspace = std::env::current_dir().unwrap();
//! let sandbox = Sandbox::new(&Settings::default(), &workspace, &[]).unwrap();
//! let done = sandbox
//!     .run(
//!         &["python3".into(), "-c".into(), "print(1)".into()],
//!         &RunOptions { cwd: &workspace, timeout: Duration::from_secs(60), max_output: 65536, cancelled: &|| false },
//!     )
//!     .unwrap();
//! assert!(done.success());
//! ```
#![deny(missing_docs)]

pub mod check;
pub mod helper;
pub mod paths;
mod policy;
mod secrets;
mod spawn;

pub use policy::{
    DEFAULT_FILE_MB, DEFAULT_MEMORY_MB, Facts, HIDDEN_IN_WORKSPACE, Limits, Mode, POLICY_VERSION,
    PROTECTED_IN_WORKSPACE, Places, Policy, Settings,
};
pub use secrets::{MIN_NAMED_LEN, MIN_SECRET_LEN, Redactor, child_env, is_secret_name, toolchain_homes};
pub use spawn::{Finished, HELPER, RunOptions, Sandbox, SandboxError, Support, locate_helper, probe};
