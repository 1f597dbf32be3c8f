//! What a confined process may do: the operator's [`Settings`] (from
//! `noesis.toml`'s `[sandbox]` and flags) and the [`Policy`] the helper
//! enforces, built from them and a few facts about the machine.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::paths;

/// The version of the [`Policy`] the helper understands; a helper that
/// gets another refuses to run anything.
pub const POLICY_VERSION: u32 = 1;

/// Memory a confined process may allocate unless the operator says
/// otherwise (`RLIMIT_DATA`: reservations that touch nothing, as V8's and
/// the JVM's, are not counted).
pub const DEFAULT_MEMORY_MB: u64 = 8192;
/// Largest file a confined process may write.
pub const DEFAULT_FILE_MB: u64 = 4096;

/// Whether model-chosen processes are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Confined; where the machine cannot confine, nothing runs.
    #[default]
    On,
    /// Unconfined, by the operator's explicit choice (`--sandbox off`);
    /// the environment is still scrubbed and the process group killed.
    Off,
}

/// The operator's choices (`[sandbox]` in `noesis.toml`, run flags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// On (default) or off.
    pub mode: Mode,
    /// Network access (TCP/UDP anywhere, loopback included): off unless
    /// granted (`--allow-network`).
    pub network: bool,
    /// More paths to read (and execute from).
    pub read_extra: Vec<PathBuf>,
    /// More paths to write.
    pub write_extra: Vec<PathBuf>,
    /// More environment variables to pass, by name.
    pub env: Vec<String>,
    /// Variables set for every process (noesis's own choices, such as
    /// `PYTHONDONTWRITEBYTECODE` for test runs whose files are restored).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub set_env: std::collections::BTreeMap<String, String>,
    /// CPU seconds per process (`RLIMIT_CPU`); none by default.
    pub cpu_seconds: Option<u64>,
    /// Memory per process, in MiB (`RLIMIT_DATA`).
    pub memory_mb: Option<u64>,
    /// Largest file a process may write, in MiB (`RLIMIT_FSIZE`).
    pub file_mb: Option<u64>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            mode: Mode::On,
            network: false,
            read_extra: Vec::new(),
            write_extra: Vec::new(),
            env: Vec::new(),
            set_env: std::collections::BTreeMap::new(),
            cpu_seconds: None,
            memory_mb: Some(DEFAULT_MEMORY_MB),
            file_mb: Some(DEFAULT_FILE_MB),
        }
    }
}

/// Resource limits set on the confined process (each inherited by what it
/// starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Limits {
    /// `RLIMIT_CPU`, seconds.
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_DATA`, bytes.
    pub data_bytes: Option<u64>,
    /// `RLIMIT_FSIZE`, bytes.
    pub file_bytes: Option<u64>,
}

/// What the helper enforces, as plain data (it travels to the helper as
/// JSON on its command line: no secrets in it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// [`POLICY_VERSION`].
    pub version: u32,
    /// Hierarchies that may be read and executed.
    pub read: Vec<PathBuf>,
    /// Hierarchies that may be read, written and executed.
    pub write: Vec<PathBuf>,
    /// Paths inside `write` mounted read-only over themselves (`.git`,
    /// `noesis.toml`, protected test files).
    pub read_only: Vec<PathBuf>,
    /// Paths hidden behind an empty read-only mount (secrets inside a
    /// writable tree; `/run`'s sockets when the network is off).
    pub mask: Vec<PathBuf>,
    /// Files that may be written besides `write` (`/dev/null`).
    pub write_files: Vec<PathBuf>,
    /// What a masked file shows: an empty file nobody may read (reading a
    /// hidden secret then fails as a refusal would); `/dev/null` if none.
    #[serde(default)]
    pub mask_file: Option<PathBuf>,
    /// TCP/UDP allowed.
    pub network: bool,
    /// Resource limits.
    pub limits: Limits,
}

/// What the policy is built from, besides the operator's settings.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The real home folder.
    pub home: Option<PathBuf>,
    /// noesis's `PATH`.
    pub path_var: String,
    /// noesis's own home (`$NOESIS_HOME`, default `~/.noesis`): the store
    /// and transcripts, never readable.
    pub noesis_home: Option<PathBuf>,
    /// Other files that must stay unreadable (the store file when it lies
    /// elsewhere).
    pub secret_files: Vec<PathBuf>,
    /// Toolchain homes named to the process by variable (and readable):
    /// see [`crate::secrets::toolchain_homes`].
    pub toolchains: Vec<(String, PathBuf)>,
}

impl Facts {
    /// This process's facts.
    pub fn from_env() -> Facts {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let noesis_home = std::env::var_os("NOESIS_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".noesis")));
        let host: Vec<(String, String)> =
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
        let toolchains = crate::secrets::toolchain_homes(&host, home.as_deref(), &|p| p.is_dir());
        Facts {
            home,
            path_var: std::env::var("PATH").unwrap_or_default(),
            noesis_home,
            secret_files: Vec::new(),
            toolchains,
        }
    }
}

/// The places a run writes: its workspace, and its own folder (home and
/// temporary files of the process).
#[derive(Debug, Clone)]
pub struct Places<'a> {
    /// The workspace (canonical).
    pub workspace: &'a Path,
    /// The run's own folder (canonical).
    pub run_dir: &'a Path,
    /// Files and folders in the workspace no command may change.
    pub protected: &'a [PathBuf],
}

/// Entries of the workspace no confined process may write (they steer
/// noesis or git, and would outlive the run): read-only when present.
pub const PROTECTED_IN_WORKSPACE: &[&str] = &[".git", "noesis.toml", "cognitive.lock"];
/// Entries of the workspace no confined process may read or write.
pub const HIDDEN_IN_WORKSPACE: &[&str] = &[".noesis"];

impl Policy {
    /// The policy for `settings` in `places`: read the system (`/etc`
    /// without its secrets), the toolchains in `PATH` and the home folder,
    /// `read_extra`; write the workspace, the run's folder and
    /// `write_extra`; never the home folder's secrets nor noesis's own. `list` gives a folder's entries and `exists` says whether a
    /// path exists (the file system, or a table in tests).
    pub fn build(
        settings: &Settings,
        facts: &Facts,
        places: &Places<'_>,
        list: &dyn Fn(&Path) -> Vec<PathBuf>,
        exists: &dyn Fn(&Path) -> bool,
    ) -> Policy {
        let mut denied: Vec<PathBuf> = Vec::new();
        if let Some(home) = &facts.home {
            denied.extend(paths::HOME_SECRETS.iter().map(|s| home.join(s)));
        }
        denied.extend(facts.noesis_home.iter().cloned());
        denied.extend(facts.secret_files.iter().cloned());
        // `/etc` is granted whole and its secrets hidden by mounts: a few
        // mounts cost less than the ~150 rules of `/etc` without them.
        let etc_hidden: Vec<PathBuf> =
            paths::etc_secrets(&list(Path::new("/etc/ssh"))).into_iter().filter(|p| exists(p)).collect();
        // What the operator names explicitly is granted even when it is a
        // secret: `read_extra = ["~/.aws"]` means it.
        let named = |p: &Path| settings.read_extra.iter().chain(&settings.write_extra).any(|e| e == p);
        denied.retain(|d| !named(d));

        let mut read_roots: Vec<PathBuf> = Vec::new();
        read_roots.extend(paths::SYSTEM_READ.iter().map(PathBuf::from));
        read_roots.push(PathBuf::from("/etc"));
        read_roots.extend(paths::SYS_READ.iter().map(PathBuf::from));
        read_roots.extend(paths::DEVICES_READ.iter().map(PathBuf::from));
        read_roots.push(PathBuf::from("/proc"));
        if let Some(home) = &facts.home {
            read_roots.extend(paths::HOME_TOOLCHAINS.iter().map(|t| home.join(t)));
        }
        read_roots.extend(paths::path_roots(&facts.path_var, facts.home.as_deref()));
        read_roots.extend(facts.toolchains.iter().map(|(_, p)| p.clone()));
        read_roots.extend(settings.read_extra.iter().cloned());
        let mut read: Vec<PathBuf> = Vec::new();
        for root in read_roots.iter().filter(|r| exists(r)) {
            for p in paths::expand(root, &denied, list) {
                if !read.contains(&p) {
                    read.push(p);
                }
            }
        }

        let mut write: Vec<PathBuf> = vec![places.workspace.to_path_buf(), places.run_dir.to_path_buf()];
        write.extend(settings.write_extra.iter().filter(|p| exists(p)).cloned());
        // Inside a writable tree a secret cannot be left out of a grant
        // (that would stop files being made at the tree's top): it is
        // hidden behind an empty mount instead.
        let mut mask: Vec<PathBuf> = etc_hidden.iter().filter(|p| !named(p)).cloned().collect();
        for w in &write {
            for d in denied.iter().filter(|d| d.starts_with(w) && exists(d)) {
                if !mask.contains(d) {
                    mask.push(d.clone());
                }
            }
        }
        for name in HIDDEN_IN_WORKSPACE {
            let p = places.workspace.join(name);
            if exists(&p) && !mask.contains(&p) {
                mask.push(p);
            }
        }
        if !settings.network && exists(Path::new("/run")) {
            // Services listen on UNIX sockets there (databases, Docker):
            // with the network off they are out of reach too.
            mask.push(PathBuf::from("/run"));
        }

        let mut read_only: Vec<PathBuf> = PROTECTED_IN_WORKSPACE
            .iter()
            .map(|n| places.workspace.join(n))
            .chain(places.protected.iter().map(|p| places.workspace.join(p)))
            .filter(|p| exists(p))
            .collect();
        read_only.dedup();

        Policy {
            version: POLICY_VERSION,
            read,
            write,
            read_only,
            mask,
            write_files: vec![PathBuf::from("/dev/null")],
            mask_file: None,
            network: settings.network,
            limits: Limits {
                cpu_seconds: settings.cpu_seconds,
                data_bytes: settings.memory_mb.map(|m| m.saturating_mul(1 << 20)),
                file_bytes: settings.file_mb.map(|m| m.saturating_mul(1 << 20)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(paths: &[&str]) -> (impl Fn(&Path) -> Vec<PathBuf>, impl Fn(&Path) -> bool) {
        let all: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
        let all2 = all.clone();
        let list = move |d: &Path| {
            let mut out: Vec<PathBuf> = all
                .iter()
                .filter_map(|p| {
                    let rest = p.strip_prefix(d).ok()?;
                    let first = rest.components().next()?;
                    Some(d.join(first))
                })
                .collect();
            out.sort();
            out.dedup();
            out
        };
        let exists = move |p: &Path| all2.iter().any(|a| a.starts_with(p));
        (list, exists)
    }

    #[test]
    fn the_policy_reads_the_system_and_toolchains_and_writes_only_the_workspace_and_run_folder() {
        let (list, exists) = fs(&[
            "/usr/bin/python3",
            "/etc/passwd",
            "/etc/shadow",
            "/etc/ssh/ssh_config",
            "/etc/ssh/ssh_host_rsa_key",
            "/home/u/.ssh/id_rsa",
            "/home/u/.cargo/bin/cargo",
            "/home/u/.cargo/credentials.toml",
            "/home/u/.noesis/store.db",
            "/home/u/venv/bin/python",
            "/home/u/proj/.git/HEAD",
            "/home/u/proj/.noesis/state.json",
            "/home/u/proj/src/a.py",
            "/tmp/run-1/home",
            "/run/postgresql/.s.PGSQL.5432",
            "/proc/self",
            "/dev/urandom",
        ]);
        let facts = Facts {
            home: Some("/home/u".into()),
            path_var: "/home/u/venv/bin:/usr/bin:.".into(),
            noesis_home: Some("/home/u/.noesis".into()),
            secret_files: Vec::new(),
            toolchains: Vec::new(),
        };
        let places = Places { workspace: Path::new("/home/u/proj"), run_dir: Path::new("/tmp/run-1"), protected: &[] };
        let p = Policy::build(&Settings::default(), &facts, &places, &list, &exists);
        let read: Vec<&str> = p.read.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(read, ["/usr", "/etc", "/dev/urandom", "/proc", "/home/u/.cargo/bin", "/home/u/venv"]);
        assert_eq!(p.write, [PathBuf::from("/home/u/proj"), PathBuf::from("/tmp/run-1")]);
        assert_eq!(p.read_only, [PathBuf::from("/home/u/proj/.git")]);
        let mask: Vec<&str> = p.mask.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(mask, ["/etc/shadow", "/etc/ssh/ssh_host_rsa_key", "/home/u/proj/.noesis", "/run"]);
        assert!(!p.network);
        assert_eq!(p.limits.data_bytes, Some(DEFAULT_MEMORY_MB << 20));
    }

    #[test]
    fn a_workspace_that_is_the_home_folder_hides_its_secrets_and_named_extras_win() {
        let (list, exists) = fs(&["/home/u/.ssh/id_rsa", "/home/u/.aws/credentials", "/home/u/x.txt", "/run/s"]);
        let facts = Facts { home: Some("/home/u".into()), ..Facts::default() };
        let places = Places { workspace: Path::new("/home/u"), run_dir: Path::new("/r"), protected: &[] };
        let settings =
            Settings { network: true, read_extra: vec![PathBuf::from("/home/u/.aws")], ..Settings::default() };
        let p = Policy::build(&settings, &facts, &places, &list, &exists);
        assert_eq!(
            p.mask,
            [PathBuf::from("/home/u/.ssh")],
            "the named ~/.aws is granted, /run stays with the network on"
        );
        assert!(p.read.contains(&PathBuf::from("/home/u/.aws")));
        assert!(p.network);
    }

    #[test]
    fn settings_refuse_unknown_keys() {
        let e = serde_json::from_str::<Settings>(r#"{"netwrk": true}"#).unwrap_err().to_string();
        assert!(e.contains("netwrk"), "{e}");
        let s: Settings = serde_json::from_str(r#"{"network": true}"#).unwrap();
        assert!(s.network && s.mode == Mode::On);
    }
}
