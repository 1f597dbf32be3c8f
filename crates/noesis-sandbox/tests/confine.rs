//! The sandbox against real processes on this machine: what an honest
//! command needs works, and what a hostile one tries does not.

use std::path::{Path, PathBuf};
use std::time::Duration;

use noesis_sandbox::{Facts, Finished, Mode, RunOptions, Sandbox, Settings};

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    home: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let outside = root.join("outside");
    let home = root.join("home");
    for d in [&ws, &outside, &home.join(".ssh"), &home.join(".cargo/bin"), &ws.join(".git"), &ws.join(".noesis")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY\n").unwrap();
    std::fs::write(home.join(".cargo/bin/tool"), "a toolchain file\n").unwrap();
    std::fs::write(home.join(".cargo/credentials.toml"), "token = \"cio-secret\"\n").unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join(".noesis/store.db"), "the store\n").unwrap();
    std::fs::write(ws.join("noesis.toml"), "# config\n").unwrap();
    std::fs::write(ws.join("tests.py"), "def test_x(): pass\n").unwrap();
    World { _dir: dir, ws, outside, home }
}

impl World {
    fn facts(&self) -> Facts {
        Facts {
            home: Some(self.home.clone()),
            path_var: std::env::var("PATH").unwrap_or_default(),
            noesis_home: Some(self.home.join(".noesis")),
            secret_files: Vec::new(),
            toolchains: Vec::new(),
        }
    }

    fn sandbox(&self, settings: &Settings) -> Sandbox {
        Sandbox::with_facts(settings, &self.ws, &[PathBuf::from("tests.py")], self.facts()).unwrap()
    }

    fn run_with(&self, sandbox: &Sandbox, script: &str, timeout: Duration) -> Finished {
        sandbox
            .run(
                &["sh".into(), "-c".into(), script.into()],
                &RunOptions { cwd: &self.ws, timeout, max_output: 1 << 20, cancelled: &|| false },
            )
            .unwrap()
    }

    fn sh(&self, script: &str) -> Finished {
        self.run_with(&self.sandbox(&Settings::default()), script, Duration::from_secs(60))
    }
}

fn python() -> Option<&'static str> {
    std::process::Command::new("python3").arg("-c").arg("pass").output().ok()?.status.success().then_some("python3")
}

#[test]
fn an_honest_command_runs_with_its_output_and_status() {
    let w = world();
    let f = w.sh("echo hello; echo warn >&2; mkdir -p build && echo data > build/out.txt && cat build/out.txt; exit 3");
    assert_eq!(f.code, Some(3), "{f:?}");
    assert_eq!(f.stdout, "hello\ndata\n");
    assert_eq!(f.stderr, "warn\n");
    assert_eq!(std::fs::read_to_string(w.ws.join("build/out.txt")).unwrap(), "data\n");
    // Temporary files and a home folder of its own work.
    let f = w.sh("t=$(mktemp) && echo x > \"$t\" && cat \"$t\" && echo home > \"$HOME/h\" && cat \"$HOME/h\"");
    assert_eq!(f.stdout, "x\nhome\n", "{f:?}");
}

#[test]
fn nothing_is_written_outside_the_workspace() {
    let w = world();
    let target = w.outside.join("escaped.txt");
    let f = w.sh(&format!("echo pwned > '{}'", target.display()));
    assert_ne!(f.code, Some(0), "{f:?}");
    assert!(!target.exists(), "a file was written outside the workspace");
    let f = w.sh("echo pwned > /tmp/noesis-sandbox-escape-test");
    assert_ne!(f.code, Some(0), "{f:?}");
    assert!(!Path::new("/tmp/noesis-sandbox-escape-test").exists());
}

#[test]
fn secrets_of_the_home_folder_and_the_system_are_unreadable() {
    let w = world();
    let f = w.sh(&format!("cat '{}'", w.home.join(".ssh/id_rsa").display()));
    assert_ne!(f.code, Some(0), "{f:?}");
    assert!(!f.stdout.contains("PRIVATE KEY"));
    let f = w.sh(&format!("cat '{}'", w.home.join(".cargo/credentials.toml").display()));
    assert!(!f.stdout.contains("cio-secret"), "{f:?}");
    // The toolchain beside it stays readable.
    let f = w.sh(&format!("cat '{}'", w.home.join(".cargo/bin/tool").display()));
    assert_eq!(f.stdout, "a toolchain file\n", "{f:?}");
    if Path::new("/etc/shadow").exists() {
        let f = w.sh("cat /etc/shadow");
        assert_ne!(f.code, Some(0), "{f:?}");
        assert!(f.stdout.is_empty());
    }
    let f = w.sh("head -c 5 /etc/passwd");
    assert_eq!(f.code, Some(0), "{f:?}");
    // noesis's own folder in the workspace is hidden.
    let f = w.sh("cat .noesis/store.db");
    assert!(!f.stdout.contains("the store"), "{f:?}");
}

#[test]
fn git_metadata_config_and_protected_files_are_read_only() {
    let w = world();
    for path in [".git/config", "noesis.toml", "tests.py"] {
        let f = w.sh(&format!("echo changed >> {path}"));
        assert_ne!(f.code, Some(0), "{path}: {f:?}");
        assert!(!std::fs::read_to_string(w.ws.join(path)).unwrap().contains("changed"), "{path}");
    }
    let f = w.sh("cat .git/config && echo ok > src.txt");
    assert_eq!((f.code, f.stdout.as_str()), (Some(0), "[core]\n"), "{f:?}");
    assert!(w.ws.join("src.txt").exists());
}

#[test]
fn the_network_is_off_unless_granted() {
    let Some(py) = python() else { panic!("python3 is needed for the network test") };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "{py} -c \"import socket\ntry:\n  socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\nexcept OSError as e:\n  print('refused', e.errno)\ntry:\n  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port})); print('udp sent')\nexcept OSError as e:\n  print('udp refused', e.errno)\""
    );
    let w = world();
    let f = w.sh(&script);
    assert!(f.stdout.contains("refused") && !f.stdout.contains("connected"), "{f:?}");
    assert!(f.stdout.contains("udp refused"), "{f:?}");
    let open = w.sandbox(&Settings { network: true, ..Settings::default() });
    let f = w.run_with(&open, &script, Duration::from_secs(60));
    assert!(f.stdout.contains("connected"), "granted network: {f:?}");
}

#[test]
fn the_environment_is_cleared_to_the_allowed_names() {
    let w = world();
    let f = w.sh("env");
    let names: Vec<&str> = f.stdout.lines().filter_map(|l| l.split_once('=').map(|(n, _)| n)).collect();
    let allowed = |n: &str| {
        matches!(
            n,
            "PATH"
                | "HOME"
                | "TMPDIR"
                | "LANG"
                | "LANGUAGE"
                | "TERM"
                | "TZ"
                | "COLORTERM"
                | "NO_COLOR"
                | "PWD"
                | "SHLVL"
                | "_"
                | "OLDPWD"
        ) || n.starts_with("LC_")
            || matches!(
                n,
                "CARGO_HOME"
                    | "RUSTUP_HOME"
                    | "RUSTUP_TOOLCHAIN"
                    | "PYENV_ROOT"
                    | "PYENV_VERSION"
                    | "SSL_CERT_FILE"
                    | "SSL_CERT_DIR"
            )
    };
    assert!(!names.is_empty(), "{f:?}");
    let leaked: Vec<&&str> = names.iter().filter(|n| !allowed(n)).collect();
    assert!(leaked.is_empty(), "variables passed that should not: {leaked:?}");
    let home = f.stdout.lines().find_map(|l| l.strip_prefix("HOME=")).unwrap_or_default();
    assert!(home.contains("noesis-run-") && home.ends_with("/home"), "a home folder of the run's own: {home}");
}

#[test]
fn only_the_sandboxs_own_processes_are_visible() {
    let w = world();
    let f = w.sh("ls /proc | grep -E '^[0-9]+$'");
    let pids: Vec<u32> = f.stdout.lines().filter_map(|l| l.parse().ok()).collect();
    assert!(!pids.is_empty() && pids.iter().all(|p| *p < 50), "a fresh pid namespace: {pids:?}");
    assert!(pids.contains(&1));
}

#[test]
fn a_detached_grandchild_dies_with_the_command() {
    let w = world();
    let mark = w.ws.join("late.txt");
    let f = w.sh(&format!("setsid sh -c 'sleep 1; echo late > {}' > /dev/null 2>&1 & exit 0", mark.display()));
    assert_eq!(f.code, Some(0), "{f:?}");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!mark.exists(), "a detached process outlived its command");
}

#[test]
fn a_timeout_kills_the_whole_tree_before_returning() {
    let w = world();
    let mark = w.ws.join("after-timeout.txt");
    let sandbox = w.sandbox(&Settings::default());
    let f = w.run_with(
        &sandbox,
        &format!("(sleep 1; echo late > {}) & sleep 100", mark.display()),
        Duration::from_millis(300),
    );
    assert!(f.timed_out && f.code.is_none(), "{f:?}");
    std::thread::sleep(Duration::from_millis(2000));
    assert!(!mark.exists(), "a process of the tree outlived the timeout");
}

#[test]
fn cancelling_kills_the_tree() {
    let w = world();
    let sandbox = w.sandbox(&Settings::default());
    let began = std::time::Instant::now();
    let mark = w.ws.join("after-cancel.txt");
    let cancelled = || began.elapsed() > Duration::from_millis(200);
    let f = sandbox
        .run(
            &["sh".into(), "-c".into(), format!("(sleep 1; touch {}) & sleep 100", mark.display())],
            &RunOptions { cwd: &w.ws, timeout: Duration::from_secs(100), max_output: 1024, cancelled: &cancelled },
        )
        .unwrap();
    assert!(f.cancelled && !f.timed_out, "{f:?}");
    std::thread::sleep(Duration::from_millis(2000));
    assert!(!mark.exists());
}

#[test]
fn the_tree_dies_when_its_parent_is_killed() {
    // The helper's parent stands in for noesis: a shell that starts it and
    // is then killed with SIGKILL.
    let w = world();
    let sandbox = w.sandbox(&Settings::default());
    let mark = w.ws.join("after-parent-death.txt");
    let inner =
        sandbox.command("sh".as_ref(), &["-c".into(), format!("sleep 1.5; touch {}", mark.display()).into()], &w.ws);
    let helper = inner.get_program().to_owned();
    let mut args: Vec<String> = inner.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    // The shell's pid replaces the test's as the parent to watch.
    let at = args.iter().position(|a| a == "--parent").unwrap() + 1;
    args[at] = "$$".into();
    let quoted: Vec<String> =
        args.iter().map(|a| if a == "$$" { a.clone() } else { format!("'{}'", a.replace('\'', "'\\''")) }).collect();
    let mut parent = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' {} & wait", helper.to_string_lossy(), quoted.join(" ")))
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    parent.kill().unwrap();
    parent.wait().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!mark.exists(), "the tree outlived the process that started it");
}

#[test]
fn output_is_capped_and_the_rest_counted() {
    let w = world();
    let sandbox = w.sandbox(&Settings::default());
    let f = sandbox
        .run(
            &["sh".into(), "-c".into(), "head -c 1000000 /dev/zero | tr '\\0' a".into()],
            &RunOptions { cwd: &w.ws, timeout: Duration::from_secs(60), max_output: 1000, cancelled: &|| false },
        )
        .unwrap();
    assert_eq!((f.code, f.stdout.len(), f.dropped.0), (Some(0), 1000, 999_000), "{:?}", f.code);
}

#[test]
fn memory_is_limited() {
    let Some(py) = python() else { panic!("python3 is needed for the memory test") };
    let w = world();
    let sandbox = w.sandbox(&Settings { memory_mb: Some(300), ..Settings::default() });
    let f = w.run_with(
        &sandbox,
        &format!("{py} -c \"b = bytearray(1024 * 1024 * 1024); print('allocated')\""),
        Duration::from_secs(60),
    );
    assert!(!f.stdout.contains("allocated") && f.code != Some(0), "{f:?}");
    assert!(f.stderr.contains("MemoryError"), "{f:?}");
}

#[test]
fn a_missing_program_is_reported() {
    let w = world();
    let f = w
        .sandbox(&Settings::default())
        .run(
            &["no-such-program-here".into()],
            &RunOptions { cwd: &w.ws, timeout: Duration::from_secs(60), max_output: 1024, cancelled: &|| false },
        )
        .unwrap();
    assert_eq!(f.code, Some(127), "{f:?}");
    assert!(f.stderr.contains("no-such-program-here"), "{f:?}");
}

#[test]
fn off_means_unconfined_but_still_a_scrubbed_environment() {
    let w = world();
    let off = w.sandbox(&Settings { mode: Mode::Off, ..Settings::default() });
    assert!(!off.is_confined() && off.policy().is_none());
    let target = w.outside.join("written.txt");
    let f = w.run_with(&off, &format!("echo x > '{}'; env", target.display()), Duration::from_secs(60));
    assert!(target.exists(), "off is off: {f:?}");
    assert!(!f.stdout.contains("CARGO_PKG_NAME"), "the environment is still scrubbed");
}
