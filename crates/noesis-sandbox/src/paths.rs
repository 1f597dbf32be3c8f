//! Which paths a confined process may read: the system and toolchain
//! roots, minus the secrets that live beneath them.
//!
//! Landlock only grants (a rule opens a whole hierarchy), so "`/etc` but
//! not `/etc/shadow`" becomes the children of `/etc` except `shadow`,
//! descending only along the way to each excluded path. [`expand`] does
//! that over a directory lister, so it is tested without a file system.

use std::path::{Path, PathBuf};

/// Roots every confined process may read and execute from (those that
/// exist; `/etc` is expanded around [`etc_secrets`]).
pub const SYSTEM_READ: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/nix/store"];

/// Device files a process may read; `/dev/null` may also be written.
pub const DEVICES_READ: &[&str] = &["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// What the kernel tells about CPUs and cgroup limits: runtimes size
/// their thread pools from it (`nproc`, `available_parallelism`).
pub const SYS_READ: &[&str] = &["/sys/devices/system/cpu", "/sys/fs/cgroup"];

/// Toolchains kept in the home folder, readable so `cargo`, `python` and
/// `node` work inside the sandbox (their secret files are still left out).
pub const HOME_TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".local/share/uv",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".sdkman",
    "go",
    ".elan",
    ".ghcup",
    ".opam",
];

/// Files and folders of a home folder that hold credentials or private
/// history: never readable, even beneath a granted toolchain or an
/// operator's `read_extra` that does not name them.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config",
    ".docker",
    ".gnupg",
    ".kube",
    ".netrc",
    ".noesis",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".my.cnf",
    ".git-credentials",
    ".password-store",
    ".vault-token",
    ".terraform.d",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gradle/gradle.properties",
    ".m2/settings.xml",
    ".local/share/keyrings",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".node_repl_history",
    ".sqlite_history",
    ".lesshst",
    ".viminfo",
    ".wget-hsts",
];

/// Files of `/etc` that hold secrets (password hashes, private keys,
/// service passwords); `/etc/ssh`'s host keys are added by the caller,
/// which lists that folder.
pub const ETC_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/mysql/debian.cnf",
    "/etc/krb5.keytab",
    "/etc/security/opasswd",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/ipsec.secrets",
    "/etc/openvpn",
    "/etc/letsencrypt",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/.pwd.lock",
];

/// `/etc`'s secrets with the SSH host keys found in `ssh_dir` (usually
/// `/etc/ssh`): the private keys and their public halves are left out,
/// the client configuration stays readable.
pub fn etc_secrets(ssh_entries: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ETC_SECRETS.iter().map(PathBuf::from).collect();
    out.extend(
        ssh_entries
            .iter()
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("ssh_host_")))
            .cloned(),
    );
    out
}

/// The paths that grant `root` without anything in `denied`: `root`
/// itself when no denied path lies beneath it, nothing when `root` is
/// denied or beneath a denied path, else (via `list`, which gives a
/// folder's entries as full paths) the same for each entry, descending
/// only towards denied paths. Paths are compared as given: pass them
/// canonical.
pub fn expand(root: &Path, denied: &[PathBuf], list: &dyn Fn(&Path) -> Vec<PathBuf>) -> Vec<PathBuf> {
    if denied.iter().any(|d| root.starts_with(d)) {
        return Vec::new();
    }
    if !denied.iter().any(|d| d.starts_with(root)) {
        return vec![root.to_path_buf()];
    }
    let mut children = list(root);
    children.sort();
    children.iter().flat_map(|c| expand(c, denied, list)).collect()
}

/// The read roots a `PATH` implies: each absolute entry, or the prefix
/// it belongs to when it is a `bin`/`sbin` folder (a virtualenv's or an
/// installation's `lib` sits beside it). Relative entries are dropped (a
/// confined `PATH` never searches the working folder), and so is a prefix
/// that would be the whole home folder or `/`.
pub fn path_roots(path_var: &str, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for entry in path_var.split(':').filter(|e| e.starts_with('/')) {
        let entry = Path::new(entry);
        let root = match entry.file_name().and_then(|n| n.to_str()) {
            Some("bin" | "sbin" | "shims") => entry.parent().unwrap_or(entry),
            _ => entry,
        };
        let too_wide = root == Path::new("/") || home.is_some_and(|h| root == h || h.starts_with(root));
        let root = if too_wide { entry } else { root };
        if root != Path::new("/") && home.is_none_or(|h| root != h) && !out.iter().any(|o| o == root) {
            out.push(root.to_path_buf());
        }
    }
    out
}

/// What must be readable for a program named by an absolute path to run:
/// its installation (the folder above `bin`, where a virtualenv keeps
/// `pyvenv.cfg` and `lib`), or its own folder. `None` for a bare name
/// (found on `PATH`, whose roots are readable already).
pub fn program_root(program: &str) -> Option<PathBuf> {
    let p = Path::new(program);
    if !p.is_absolute() {
        return None;
    }
    let dir = p.parent()?;
    let root = match dir.file_name().and_then(|n| n.to_str()) {
        Some("bin" | "sbin") => dir.parent().filter(|p| *p != Path::new("/")).unwrap_or(dir),
        _ => dir,
    };
    (root != Path::new("/")).then(|| root.to_path_buf())
}

/// `PATH` as a confined process sees it: absolute entries only.
pub fn confined_path(path_var: &str) -> String {
    path_var.split(':').filter(|e| e.starts_with('/')).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn tree(paths: &[&str]) -> impl Fn(&Path) -> Vec<PathBuf> {
        let mut dirs: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for p in paths {
            let p = PathBuf::from(p);
            let mut cur = p.as_path();
            while let Some(parent) = cur.parent() {
                let e = dirs.entry(parent.to_path_buf()).or_default();
                if !e.iter().any(|x| x == cur) {
                    e.push(cur.to_path_buf());
                }
                cur = parent;
            }
        }
        move |d: &Path| dirs.get(d).cloned().unwrap_or_default()
    }

    fn check(root: &str, denied: &[&str], files: &[&str], want: &[&str]) {
        let denied: Vec<PathBuf> = denied.iter().map(PathBuf::from).collect();
        let got = expand(Path::new(root), &denied, &tree(files));
        let want: Vec<PathBuf> = want.iter().map(PathBuf::from).collect();
        assert_eq!(got, want, "root {root}");
    }

    #[test]
    fn expansion_leaves_out_exactly_the_denied_paths() {
        let files = ["/etc/passwd", "/etc/shadow", "/etc/ssl/certs/a.pem", "/etc/ssl/private/k.pem", "/etc/hosts"];
        check("/etc", &[], &files, &["/etc"]);
        check("/etc", &["/etc/shadow"], &files, &["/etc/hosts", "/etc/passwd", "/etc/ssl"]);
        check("/etc", &["/etc/shadow", "/etc/ssl/private"], &files, &["/etc/hosts", "/etc/passwd", "/etc/ssl/certs"]);
        check("/etc", &["/etc"], &files, &[]);
        check("/etc/ssl", &["/etc"], &files, &[]);
        check("/usr", &["/etc/shadow"], &files, &["/usr"]);
        // A denied path that does not exist changes nothing but the descent.
        check("/etc", &["/etc/gone"], &files, &["/etc/hosts", "/etc/passwd", "/etc/shadow", "/etc/ssl"]);
    }

    proptest::proptest! {
        /// Whatever the tree and the denied paths, a granted path is never
        /// a denied one nor inside it nor above it, and every path of the
        /// tree that is neither denied nor a folder on the way to one stays
        /// covered by some grant.
        #[test]
        fn prop_expansion_grants_everything_but_the_denied(
            files in proptest::collection::vec("[ab]{1,2}(/[ab]{1,2}){0,3}", 1..12),
            denied in proptest::collection::vec("[ab]{1,2}(/[ab]{1,2}){0,2}", 0..4),
        ) {
            let files: Vec<String> = files.iter().map(|f| format!("/r/{f}")).collect();
            let denied: Vec<PathBuf> = denied.iter().map(|d| PathBuf::from(format!("/r/{d}"))).collect();
            let refs: Vec<&str> = files.iter().map(String::as_str).collect();
            let got = expand(Path::new("/r"), &denied, &tree(&refs));
            for g in &got {
                proptest::prop_assert!(!denied.iter().any(|d| g.starts_with(d) || d.starts_with(g)), "{} grants {:?}", g.display(), denied);
            }
            for f in &files {
                let f = Path::new(f);
                let is_denied = denied.iter().any(|d| f.starts_with(d));
                // A folder on the way to a denied path is granted by its
                // entries, not whole.
                let on_the_way = denied.iter().any(|d| d.starts_with(f));
                let covered = got.iter().any(|g| f.starts_with(g));
                proptest::prop_assert!(is_denied || on_the_way || covered, "{} is neither denied nor granted", f.display());
            }
        }
    }

    #[test]
    fn a_home_toolchain_keeps_its_credentials_out() {
        let files = ["/h/.cargo/bin/cargo", "/h/.cargo/credentials.toml", "/h/.cargo/registry/x"];
        check("/h/.cargo", &["/h/.cargo/credentials.toml"], &files, &["/h/.cargo/bin", "/h/.cargo/registry"]);
    }

    #[test]
    fn ssh_host_keys_are_secrets_and_the_client_config_is_not() {
        let entries: Vec<PathBuf> =
            ["/etc/ssh/ssh_config", "/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_ed25519_key.pub"]
                .iter()
                .map(PathBuf::from)
                .collect();
        let secrets = etc_secrets(&entries);
        assert!(secrets.contains(&PathBuf::from("/etc/ssh/ssh_host_ed25519_key")));
        assert!(!secrets.contains(&PathBuf::from("/etc/ssh/ssh_config")));
        assert!(secrets.contains(&PathBuf::from("/etc/shadow")));
    }

    #[test]
    fn path_roots_take_prefixes_of_bin_folders_and_never_the_home_folder() {
        let home = Path::new("/root");
        let got = path_roots(
            "/root/.cargo/bin:.:bin:/root/.pyenv/shims:/venv/bin:/usr/local/bin:/usr/bin:/bin:/root/bin:/opt/tool",
            Some(home),
        );
        let want: Vec<PathBuf> =
            ["/root/.cargo", "/root/.pyenv", "/venv", "/usr/local", "/usr", "/bin", "/root/bin", "/opt/tool"]
                .iter()
                .map(PathBuf::from)
                .collect();
        assert_eq!(got, want);
        assert_eq!(confined_path("/a/bin:.:rel:/b"), "/a/bin:/b");
        assert_eq!(program_root("/venv/bin/python"), Some(PathBuf::from("/venv")));
        assert_eq!(program_root("/opt/tool/run"), Some(PathBuf::from("/opt/tool")));
        assert_eq!(program_root("/bin/sh"), Some(PathBuf::from("/bin")));
        assert_eq!(program_root("python3"), None);
    }
}
