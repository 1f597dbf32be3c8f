//! The helper program (`noesis-sandbox`): confines itself, then runs the
//! command. noesis is multi-threaded and Landlock, seccomp and namespaces
//! apply to the calling thread and its children, so the confinement is
//! done here, in a single-threaded process of its own, never in noesis.
//!
//! ```text
//! noesis ──spawn──▶ outer ──unshare(mount, pid[, user]) + fork──▶ init (pid 1) ──spawn──▶ command
//! ```
//! - **outer** waits for either noesis or init to end (two pidfds): when
//!   noesis is gone — killed with -9 included — it kills init.
//! - **init** is pid 1 of a new pid namespace, so when it ends the kernel
//!   kills everything left in the namespace: a detached or double-forked
//!   grandchild cannot outlive the command. It mounts a fresh `/proc` (only
//!   the namespace's processes are visible), hides the paths to mask,
//!   remounts protected paths read-only, sets resource limits, drops every
//!   capability, restricts itself with Landlock and a seccomp filter, then
//!   starts the command, reaps orphans, and exits with the command's status.
//!
//! Exit statuses: the command's own; 128 + N when it died of signal N;
//! [`SETUP_FAILED`] with a line `noesis-sandbox: …` on stderr when the
//! confinement could not be set up (nothing ran).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;

use crate::policy::{POLICY_VERSION, Policy};

/// The helper's status when the confinement could not be set up.
pub const SETUP_FAILED: i32 = 125;
/// What a setup error line on stderr starts with.
pub const ERROR_PREFIX: &str = "noesis-sandbox: ";

/// The helper's protocol version, printed by `noesis-sandbox --version`;
/// noesis refuses a helper with another one.
pub const PROTOCOL: &str = "noesis-sandbox protocol 1";

/// The helper's entry point.
pub fn main() -> ! {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let code = match dispatch(&args) {
        Ok(code) => code,
        Err(e) => {
            say(&e);
            SETUP_FAILED
        }
    };
    std::process::exit(code)
}

#[allow(clippy::print_stderr)]
fn say(message: &str) {
    eprintln!("{ERROR_PREFIX}{message}");
}

#[allow(clippy::print_stdout)]
fn print(text: &str) {
    println!("{text}");
}

fn dispatch(args: &[OsString]) -> Result<i32, String> {
    let first = args.first().and_then(|a| a.to_str()).unwrap_or_default();
    match first {
        "--version" => {
            print(PROTOCOL);
            Ok(0)
        }
        "exec" => {
            let (parent, policy, argv) = parse_exec(&args[1..])?;
            imp::exec(parent, &policy, Some(&argv))
        }
        "probe" => {
            let (parent, policy, _) = parse_exec(&args[1..])?;
            imp::exec(parent, &policy, None)
        }
        _ => Err("usage: noesis-sandbox exec|probe --parent PID --policy JSON -- PROGRAM [ARGS…]".into()),
    }
}

fn parse_exec(args: &[OsString]) -> Result<(i32, Policy, Vec<OsString>), String> {
    let mut parent = None;
    let mut policy = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].to_str() {
            Some("--parent") => {
                let v = args.get(i + 1).and_then(|a| a.to_str()).ok_or("--parent needs a process id")?;
                parent = Some(v.parse::<i32>().map_err(|_| format!("--parent: `{v}` is not a process id"))?);
                i += 2;
            }
            Some("--policy") => {
                let v = args.get(i + 1).and_then(|a| a.to_str()).ok_or("--policy needs JSON")?;
                let p: Policy = serde_json::from_str(v).map_err(|e| format!("--policy: {e}"))?;
                if p.version != POLICY_VERSION {
                    return Err(format!(
                        "--policy: version {} is not the {POLICY_VERSION} this helper knows (noesis and noesis-sandbox come from different builds)",
                        p.version
                    ));
                }
                policy = Some(p);
                i += 2;
            }
            Some("--") => {
                i += 1;
                break;
            }
            _ => return Err(format!("unexpected argument `{}`", args[i].to_string_lossy())),
        }
    }
    let parent = parent.ok_or("--parent is required")?;
    let policy = policy.ok_or("--policy is required")?;
    Ok((parent, policy, args[i..].to_vec()))
}

/// Whether `p` is a folder (a mask over it is an empty file system; over
/// a file, `/dev/null`).
fn is_dir(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_dir())
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;

    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope,
    };
    use rustix::event::{PollFd, PollFlags, poll};
    use rustix::mount::{MountFlags, MountPropagationFlags};
    use rustix::process::{Pid, PidfdFlags, Resource, Rlimit, Signal, WaitOptions, WaitStatus};
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };

    /// The highest Landlock ABI whose rights are asked for; a kernel that
    /// knows fewer enforces what it knows (best effort), and the probe
    /// says which.
    const TARGET_ABI: ABI = ABI::V9;

    pub(super) fn exec(parent: i32, policy: &Policy, argv: Option<&[OsString]>) -> Result<i32, String> {
        if argv.is_some_and(<[OsString]>::is_empty) {
            return Err("no command given after --".into());
        }
        let parent_pid = Pid::from_raw(parent).ok_or("--parent: not a process id")?;
        if rustix::process::getppid() != Some(parent_pid) {
            return Err("the process that started the sandbox is gone".into());
        }
        // Watching noesis by pidfd (not PR_SET_PDEATHSIG, which follows the
        // thread that spawned us, and threads of a pool come and go).
        let parent_fd = rustix::process::pidfd_open(parent_pid, PidfdFlags::empty())
            .map_err(|e| format!("watching the parent process: {e}"))?;
        if rustix::process::getppid() != Some(parent_pid) {
            return Err("the process that started the sandbox is gone".into());
        }
        let root = rustix::process::geteuid().is_root();
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        unshare(root).map_err(|e| {
            format!(
                "cannot create the sandbox's namespaces ({e}); {}",
                if root {
                    "the kernel refused mount and pid namespaces"
                } else {
                    "unprivileged user namespaces are disabled here (kernel.unprivileged_userns_clone=0, or an AppArmor restriction)"
                }
            )
        })?;
        if !root {
            map_ids(uid, gid)?;
        }
        // Init learns that this process is gone from the pipe's other end
        // (it closes when we exit), closing the window before its
        // PR_SET_PDEATHSIG is set.
        let (alive_r, alive_w) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
        match fork()? {
            None => {
                drop(alive_w);
                let code = match init(policy, argv, &alive_r) {
                    Ok(code) => code,
                    Err(e) => {
                        say(&e);
                        SETUP_FAILED
                    }
                };
                std::process::exit(code)
            }
            Some(child) => {
                drop(alive_r);
                let status = supervise(child, &parent_fd);
                drop(alive_w);
                Ok(status)
            }
        }
    }

    /// Waits for init, or kills it when noesis is gone.
    fn supervise(child: Pid, parent_fd: &OwnedFd) -> i32 {
        let child_fd = rustix::process::pidfd_open(child, PidfdFlags::empty()).ok();
        loop {
            if let Some(child_fd) = &child_fd {
                let mut fds = [PollFd::new(parent_fd, PollFlags::IN), PollFd::new(child_fd, PollFlags::IN)];
                match poll(&mut fds, None) {
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => {}
                    Ok(_) => {
                        if !fds[0].revents().is_empty() {
                            let _ = rustix::process::kill_process(child, Signal::KILL);
                        }
                    }
                }
            }
            match rustix::process::waitpid(Some(child), WaitOptions::empty()) {
                Ok(Some((_, status))) => return code_of(status),
                Err(rustix::io::Errno::INTR) => {}
                _ => return SETUP_FAILED,
            }
        }
    }

    fn code_of(status: WaitStatus) -> i32 {
        if let Some(code) = status.exit_status() {
            code
        } else if let Some(sig) = status.terminating_signal() {
            128 + sig
        } else {
            SETUP_FAILED
        }
    }

    #[allow(unsafe_code)]
    fn unshare(root: bool) -> rustix::io::Result<()> {
        use rustix::thread::UnshareFlags;
        let mut flags = UnshareFlags::NEWNS | UnshareFlags::NEWPID;
        if !root {
            flags |= UnshareFlags::NEWUSER;
        }
        // SAFETY: the flags do not include CLONE_FILES (the one that can
        // leave threads with different descriptor tables), and this
        // process has a single thread.
        unsafe { rustix::thread::unshare_unsafe(flags) }
    }

    /// Maps the caller's ids into its new user namespace (itself to
    /// itself: files keep their owners, and the command runs as the user).
    fn map_ids(uid: u32, gid: u32) -> Result<(), String> {
        let write = |file: &str, text: String| {
            std::fs::write(file, text).map_err(|e| format!("writing {file} for the user namespace: {e}"))
        };
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))
    }

    /// Forks this single-threaded process; `None` in the child.
    #[allow(unsafe_code)]
    fn fork() -> Result<Option<Pid>, String> {
        // SAFETY: the helper never starts a thread, so the child is a whole
        // copy of a consistent process and may allocate and run anything.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
            0 => Ok(None),
            n => Ok(Pid::from_raw(n)),
        }
    }

    fn init(policy: &Policy, argv: Option<&[OsString]>, alive: &OwnedFd) -> Result<i32, String> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
        let mut fds = [PollFd::new(alive, PollFlags::IN)];
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        if poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0) {
            return Err("the sandbox's supervisor is gone".into());
        }
        mounts(policy)?;
        limits(policy)?;
        drop_capabilities();
        rustix::thread::set_no_new_privs(true).map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
        let status = landlock(policy)?;
        seccomp(policy)?;
        let Some(argv) = argv else {
            print(&serde_json::json!({"landlock": status, "seccomp": true, "namespaces": true}).to_string());
            return Ok(0);
        };
        let child = match std::process::Command::new(&argv[0]).args(&argv[1..]).spawn() {
            Ok(c) => c,
            Err(e) => {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("{}: {e}", argv[0].to_string_lossy());
                }
                return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
            }
        };
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX)).ok_or("no child")?;
        // As pid 1, every orphan of the namespace is ours to reap; the
        // command's own end decides ours.
        loop {
            match rustix::process::wait(WaitOptions::empty()) {
                Ok(Some((p, status))) if p == pid => return Ok(code_of(status)),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(format!("waiting for the command: {e}")),
            }
        }
    }

    fn mounts(policy: &Policy) -> Result<(), String> {
        let err = |what: &str, p: &Path, e: rustix::io::Errno| format!("{what} {}: {e}", p.display());
        rustix::mount::mount_change("/", MountPropagationFlags::REC | MountPropagationFlags::PRIVATE)
            .map_err(|e| err("making mounts private under", Path::new("/"), e))?;
        let quiet = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
        rustix::mount::mount("proc", "/proc", "proc", quiet, None)
            .map_err(|e| err("mounting a new", Path::new("/proc"), e))?;
        if is_dir(Path::new("/dev/shm")) {
            rustix::mount::mount("tmpfs", "/dev/shm", "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, c"mode=1777")
                .map_err(|e| err("mounting a private", Path::new("/dev/shm"), e))?;
        }
        for p in &policy.read_only {
            rustix::mount::mount_bind(p, p).map_err(|e| err("binding", p, e))?;
            rustix::mount::mount_remount(p, MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID, c"")
                .map_err(|e| err("making read-only", p, e))?;
        }
        for p in &policy.mask {
            if is_dir(p) {
                rustix::mount::mount("tmpfs", p, "tmpfs", MountFlags::RDONLY | quiet, c"size=4k,mode=0555")
                    .map_err(|e| err("hiding", p, e))?;
            } else if p.exists() {
                let empty = policy.mask_file.as_deref().unwrap_or(Path::new("/dev/null"));
                rustix::mount::mount_bind(empty, p).map_err(|e| err("hiding", p, e))?;
                rustix::mount::mount_remount(p, MountFlags::BIND | MountFlags::RDONLY, c"")
                    .map_err(|e| err("hiding", p, e))?;
            }
        }
        Ok(())
    }

    fn limits(policy: &Policy) -> Result<(), String> {
        let set = |r: Resource, v: Option<u64>, what: &str| -> Result<(), String> {
            match v {
                Some(v) => rustix::process::setrlimit(r, Rlimit { current: Some(v), maximum: Some(v) })
                    .map_err(|e| format!("setting the {what} limit: {e}")),
                None => Ok(()),
            }
        };
        set(Resource::Cpu, policy.limits.cpu_seconds, "CPU")?;
        set(Resource::Data, policy.limits.data_bytes, "memory")?;
        set(Resource::Fsize, policy.limits.file_bytes, "file size")?;
        // A core file of a confined process is a file nobody asked for.
        set(Resource::Core, Some(0), "core file")
    }

    /// Root keeps no capability (a confined root could otherwise unmount,
    /// trace or read raw devices); others have none to lose after exec.
    fn drop_capabilities() {
        use rustix::thread::{CapabilitySet, CapabilitySets};
        // Up to the kernel's last capability: the first it does not know ends it.
        for n in 0..64 {
            if rustix::thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << n)).is_err() {
                break;
            }
        }
        let _ = rustix::thread::clear_ambient_capability_set();
        let none = CapabilitySet::empty();
        let _ = rustix::thread::set_capabilities(
            None,
            CapabilitySets { effective: none, permitted: none, inheritable: none },
        );
    }

    fn landlock(policy: &Policy) -> Result<String, String> {
        let err = |e: landlock::RulesetError| format!("Landlock: {e}");
        let all = AccessFs::from_all(TARGET_ABI);
        let read = AccessFs::from_read(TARGET_ABI);
        let file = AccessFs::from_file(TARGET_ABI);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)
            .map_err(err)?
            .scope(Scope::from_all(TARGET_ABI))
            .map_err(err)?;
        if !policy.network {
            ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI)).map_err(err)?;
        }
        let mut rules: Vec<PathBeneath<PathFd>> = Vec::new();
        let mut grant = |p: &Path, access: landlock::BitFlags<AccessFs>| {
            // A path that does not exist cannot be a rule (and grants nothing).
            if let Ok(fd) = PathFd::new(p) {
                use std::os::fd::AsFd;
                let dir = rustix::fs::fstat(fd.as_fd())
                    .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory);
                rules.push(PathBeneath::new(fd, if dir { access } else { access & file }));
            }
        };
        for p in &policy.read {
            grant(p, read);
        }
        for p in &policy.write {
            grant(p, all);
        }
        if is_dir(Path::new("/dev/shm")) {
            grant(Path::new("/dev/shm"), all);
        }
        for p in &policy.write_files {
            grant(p, AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate);
        }
        let created = ruleset.create().map_err(err)?.add_rules(rules.into_iter().map(Ok)).map_err(err)?;
        let status = created.restrict_self().map_err(err)?;
        match status.ruleset {
            RulesetStatus::NotEnforced => Err("Landlock is not enforced by this kernel".into()),
            RulesetStatus::FullyEnforced => Ok(format!("fully enforced ({:?})", status.landlock)),
            RulesetStatus::PartiallyEnforced => Ok(format!("partially enforced ({:?})", status.landlock)),
        }
    }

    fn seccomp(policy: &Policy) -> Result<(), String> {
        let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("seccomp: {e:?}"))?;
        let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = std::collections::BTreeMap::new();
        // Syscalls a command has no business making: tracing and reading
        // other processes, kernel keyrings and modules, BPF, io_uring (its
        // operations bypass this filter), new namespaces, mounts.
        for sys in [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_kexec_load,
            libc::SYS_kexec_file_load,
            libc::SYS_init_module,
            libc::SYS_finit_module,
            libc::SYS_delete_module,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_keyctl,
            libc::SYS_add_key,
            libc::SYS_request_key,
            libc::SYS_userfaultfd,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_open_by_handle_at,
            libc::SYS_name_to_handle_at,
            libc::SYS_swapon,
            libc::SYS_swapoff,
            libc::SYS_reboot,
            libc::SYS_acct,
            libc::SYS_quotactl,
            libc::SYS_syslog,
        ] {
            rules.insert(sys, Vec::new());
        }
        if !policy.network {
            // Sockets of any family but UNIX (which `socketpair`, pipes
            // between a test runner and its workers, need).
            let not_unix = |sys: i64| -> Result<(i64, Vec<SeccompRule>), String> {
                let c = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, libc::AF_UNIX as u64)
                    .map_err(|e| format!("seccomp: {e}"))?;
                Ok((sys, vec![SeccompRule::new(vec![c]).map_err(|e| format!("seccomp: {e}"))?]))
            };
            for sys in [libc::SYS_socket, libc::SYS_socketpair] {
                let (s, r) = not_unix(sys)?;
                rules.insert(s, r);
            }
        }
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
            .map_err(|e| format!("seccomp: {e}"))?;
        let program: BpfProgram = filter.try_into().map_err(|e| format!("seccomp: {e}"))?;
        seccompiler::apply_filter(&program).map_err(|e| format!("seccomp: {e}"))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    pub(super) fn exec(_parent: i32, _policy: &Policy, _argv: Option<&[OsString]>) -> Result<i32, String> {
        Err("the sandbox needs Linux (Landlock, seccomp, namespaces)".into())
    }
}
