//! Dangerous options: the arguments of a command that make its program run
//! code the rule did not name (a wrapped program, a module, a config file,
//! a script), which a rule must spell out at their place to admit the
//! command. Pure; the table is per program, wrappers are followed.

use super::Word;

/// How deep wrappers are followed (`env nice timeout …`).
pub(super) const MAX_DEPTH: usize = 8;

/// An argument a rule must spell out to admit the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Risk {
    /// Its index in argv.
    pub(super) at: usize,
    /// The index in argv of the program it belongs to.
    pub(super) owner: usize,
    need: Need,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Need {
    /// The rule's word there must be literal (a wrapped program, a module,
    /// a sed script, a subcommand that runs code).
    Literal,
    /// `--name` or `--name=…` (also single-dash long options).
    Long(String),
    /// `-x`, alone, joined (`-xvalue`) or in a cluster (`-ax`).
    Short(char),
    /// A word beginning so (`NAME=` of an assignment, `+` of a toolchain).
    Prefix(String),
}

impl Risk {
    pub(super) fn named_by(&self, w: &Word) -> bool {
        if w.glob.is_none() {
            return true;
        }
        let start = w.literal_start();
        match &self.need {
            Need::Literal => false,
            Need::Long(o) => start == *o || start.starts_with(&format!("{o}=")),
            Need::Short(c) => start.starts_with(&format!("-{c}")),
            Need::Prefix(p) => start.starts_with(p.as_str()),
        }
    }

    pub(super) fn label(&self, argv: &[String]) -> String {
        match &self.need {
            Need::Literal | Need::Prefix(_) => argv.get(self.at).cloned().unwrap_or_default(),
            Need::Long(o) => o.clone(),
            Need::Short(c) => format!("-{c}"),
        }
    }
}

/// A program's file name (`/usr/bin/git` is `git`).
pub(super) fn program_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// For a wrapper program (`env`, `xargs`, `timeout`, `nice`, `nohup`,
/// `setsid`, `stdbuf`, `time`), the index in `args` of the command it runs.
pub(super) fn wrapped(program: &str, args: &[String]) -> Option<usize> {
    let (value_short, value_long, mut positional): (&[&str], &[&str], usize) = match program {
        "env" => (&["-u", "-C", "-P"], &["--unset", "--chdir"], 0),
        "xargs" => (
            &["-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s"],
            &[
                "--arg-file",
                "--delimiter",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
            0,
        ),
        "timeout" => (&["-s", "-k"], &["--signal", "--kill-after"], 1),
        "nice" => (&["-n"], &["--adjustment"], 0),
        "stdbuf" => (&["-i", "-o", "-e"], &["--input", "--output", "--error"], 0),
        "time" => (&["-f", "-o"], &["--format", "--output"], 0),
        "nohup" | "setsid" => (&[], &[], 0),
        _ => return None,
    };
    let mut options = true;
    let mut i = 0;
    while i < args.len() {
        let w = args[i].as_str();
        if options && w == "--" {
            options = false;
            i += 1;
            continue;
        }
        if options && w.starts_with('-') && w.len() > 1 {
            let takes_value = value_short.contains(&w) || (!w.contains('=') && value_long.contains(&w));
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        if program == "env" && w.contains('=') {
            i += 1;
            continue;
        }
        if positional > 0 {
            positional -= 1;
            i += 1;
            continue;
        }
        return Some(i);
    }
    None
}

/// The arguments of `argv` a rule must spell out to admit it. The table,
/// by program (file name):
///
/// | program | must be spelled out |
/// |---|---|
/// | `cargo` | `--config`, `-Z`, `--manifest-path`, `-C`, a first `+toolchain` |
/// | `git` | before the subcommand `-c`, `-C`, `--config-env`, `--exec-path`, `--git-dir`; after it `--upload-pack`, `--receive-pack`, `--exec`, `--ext-diff`, `--output`, `--template`, `--open-files-in-pager`, `--extcmd`, `--config`, `-u` and `-c` of `clone`, `-u` of `ls-remote`, `-x` of `rebase`, `-O` of `grep`; the subcommands `config`, `difftool`, `mergetool`, `filter-branch`, `bisect`, `submodule` |
/// | `pytest`, `py.test`, `python -m pytest` | `-p` (not `-p no:…`), `-c`, `--config-file`, `-o`, `--override-ini`, `--confcutdir`, `--rootdir`, `--pdbcls`, `--basetemp` |
/// | `python`, `python3`, `python3.N`, `pypy` | `-c`; `-m` and its module (then the module's own table: `pytest`) |
/// | `node`, `nodejs` | `-e`, `--eval`, `-p`, `--print`, `-r`, `--require`, `--import`, `--loader`, `--experimental-loader`, `--env-file…`, `--inspect…`, `--run`, `--openssl-config` |
/// | `npm`, `npx`, `pnpm`, `yarn` | `-c`, `--call`, `--script-shell`, `--node-options`, `--userconfig`, `--globalconfig`, `--shell`; the subcommands `exec`, `x`, `dlx`, `config`, `c`, `set` |
/// | `sh`, `bash`, `dash`, `zsh`, `ksh`, `fish` | `-c`, `--command`, `--rcfile`, `--init-file` |
/// | `env` | every `NAME=VALUE`, `-S`/`--split-string`; the command |
/// | `xargs` | `-a`/`--arg-file`; the command |
/// | `timeout`, `nice`, `nohup`, `setsid`, `stdbuf`, `time` | the command |
/// | `find` | `-exec`, `-execdir`, `-ok`, `-okdir`, `-delete`, `-fprint`, `-fprint0`, `-fprintf`, `-fls` |
/// | `make`, `gmake` | `--eval`/`-E`, `-f`/`--file`/`--makefile`, `-C`/`--directory`, `-I`/`--include-dir`, every `NAME=VALUE` |
/// | `tar`, `gtar`, `bsdtar` | `--to-command`, `--use-compress-program`/`-I`, `--checkpoint-action`, `--info-script`/`-F`, `--new-volume-script`, `--rsh-command`, `--rmt-command` |
/// | `rg`, `grep`, `egrep`, `fgrep` | `--pre` |
/// | `sed`, `gsed` | `-i`/`--in-place`, `-f`/`--file`; the script (`-e`'s or the first operand) |
/// | `awk`, `gawk`, `mawk`, `nawk` | `-f`, `-E`, `-i`, `-l` and their long forms; the program (`-e`'s, `--source`'s or the first operand) |
/// | `perl` | `-e`, `-E`, `-M`, `-m`, `-d` |
/// | `ruby` | `-e`, `-r` |
/// | `go` | `-exec`, `-toolexec`; the subcommands `generate`, `env` |
pub(super) fn risks(argv: &[String]) -> Vec<Risk> {
    let mut out = Vec::new();
    collect(argv, 0, 0, &mut out);
    out
}

fn collect(argv: &[String], base: usize, depth: usize, out: &mut Vec<Risk>) {
    let Some((program, args)) = argv.split_first() else { return };
    if depth >= MAX_DEPTH {
        return;
    }
    let name = program_name(program);
    let first = base + 1;
    if let Some(j) = wrapped(name, args) {
        for (i, w) in args[..j].iter().enumerate() {
            let at = first + i;
            match name {
                "env" if w.contains('=') && !w.starts_with('-') => {
                    let var = w.split('=').next().unwrap_or_default();
                    out.push(Risk { at, owner: base, need: Need::Prefix(format!("{var}=")) });
                }
                "env"
                    if w == "-S"
                        || w.starts_with("--split-string")
                        || (w.starts_with("-S") && !w.starts_with("--")) =>
                {
                    out.push(Risk { at, owner: base, need: Need::Short('S') });
                }
                "xargs" if w == "-a" || w.starts_with("--arg-file") => {
                    out.push(Risk { at, owner: base, need: Need::Short('a') });
                }
                _ => {}
            }
        }
        out.push(Risk { at: first + j, owner: base, need: Need::Literal });
        collect(&args[j..], first + j, depth + 1, out);
        return;
    }
    let spec = |long: &'static [&'static str], short: &'static [char], value: &'static [char]| Spec {
        long,
        short,
        value,
        stop_at_operand: false,
    };
    match name {
        "cargo" => {
            if args.first().is_some_and(|a| a.starts_with('+')) {
                out.push(Risk { at: first, owner: base, need: Need::Literal });
            }
            scan(
                args,
                first,
                base,
                &spec(&["--config", "--manifest-path"], &['Z', 'C'], &['p', 'j', 'F', 'Z', 'C']),
                out,
            );
        }
        "git" => git(args, first, base, out),
        "pytest" | "py.test" => pytest(args, first, base, out),
        "node" | "nodejs" => scan(
            args,
            first,
            base,
            &Spec {
                long: &[
                    "--eval",
                    "--print",
                    "--require",
                    "--import",
                    "--loader",
                    "--experimental-loader",
                    "--env-file*",
                    "--inspect*",
                    "--run",
                    "--openssl-config",
                ],
                short: &['e', 'p', 'r'],
                value: &['e', 'p', 'r', 'C'],
                stop_at_operand: true,
            },
            out,
        ),
        "npm" | "npx" | "pnpm" | "yarn" => {
            scan(
                args,
                first,
                base,
                &spec(
                    &["--call", "--script-shell", "--node-options", "--userconfig", "--globalconfig", "--shell"],
                    &['c'],
                    &[],
                ),
                out,
            );
            if let Some(i) = args.iter().position(|a| !a.starts_with('-'))
                && ["exec", "x", "dlx", "config", "c", "set"].contains(&args[i].as_str())
            {
                out.push(Risk { at: first + i, owner: base, need: Need::Literal });
            }
        }
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "fish" => scan(
            args,
            first,
            base,
            &Spec {
                long: &["--command", "--rcfile", "--init-file"],
                short: &['c'],
                value: &['o', 'O'],
                stop_at_operand: true,
            },
            out,
        ),
        "find" => {
            for (i, w) in args.iter().enumerate() {
                let primary =
                    ["-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"];
                if primary.contains(&w.as_str()) {
                    out.push(Risk { at: first + i, owner: base, need: Need::Long(w.clone()) });
                }
            }
        }
        "make" | "gmake" => {
            scan(
                args,
                first,
                base,
                &spec(
                    &["--eval", "--file", "--makefile", "--directory", "--include-dir"],
                    &['E', 'f', 'C', 'I'],
                    &['E', 'f', 'C', 'I', 'j', 'l', 'o', 'W'],
                ),
                out,
            );
            for (i, w) in args.iter().enumerate() {
                if let Some(var) = assignment(w) {
                    out.push(Risk { at: first + i, owner: base, need: Need::Prefix(format!("{var}=")) });
                }
            }
        }
        "tar" | "gtar" | "bsdtar" => {
            // Old style: the first word's letters are options (`tar xIf …`).
            if let Some(a) = args.first()
                && !a.starts_with('-')
                && a.contains(['I', 'F'])
            {
                out.push(Risk { at: first, owner: base, need: Need::Literal });
            }
            scan(
                args,
                first,
                base,
                &spec(
                    &[
                        "--to-command",
                        "--use-compress-program",
                        "--checkpoint-action",
                        "--info-script",
                        "--new-volume-script",
                        "--rsh-command",
                        "--rmt-command",
                    ],
                    &['I', 'F'],
                    &['f', 'C', 'I', 'F', 'T', 'X', 'b', 'H', 'K', 'N', 'V', 'g', 'L'],
                ),
                out,
            );
        }
        "rg" | "grep" | "egrep" | "fgrep" => scan(args, first, base, &spec(&["--pre"], &[], &[]), out),
        "sed" | "gsed" => script(args, first, base, Script::Sed, out),
        "awk" | "gawk" | "mawk" | "nawk" => script(args, first, base, Script::Awk, out),
        "perl" => scan(
            args,
            first,
            base,
            &Spec {
                long: &[],
                short: &['e', 'E', 'M', 'm', 'd'],
                value: &['e', 'E', 'M', 'm', 'd', 'I', 'l', 'i', 'x', '0', 'C'],
                stop_at_operand: true,
            },
            out,
        ),
        "ruby" => scan(
            args,
            first,
            base,
            &Spec {
                long: &[],
                short: &['e', 'r'],
                value: &['e', 'r', 'I', 'C', 'E', 'F', 'K', 'T', 'W', 'x', '0', 'i'],
                stop_at_operand: true,
            },
            out,
        ),
        "go" => {
            for (i, w) in args.iter().enumerate() {
                let flag = w.strip_prefix('-').map(|w| w.strip_prefix('-').unwrap_or(w));
                if let Some(flag) = flag
                    && let name @ ("exec" | "toolexec") = flag.split('=').next().unwrap_or_default()
                {
                    let shown = if w.starts_with("--") { format!("--{name}") } else { format!("-{name}") };
                    out.push(Risk { at: first + i, owner: base, need: Need::Long(shown) });
                }
            }
            if let Some(i) = args.iter().position(|a| !a.starts_with('-'))
                && ["generate", "env"].contains(&args[i].as_str())
            {
                out.push(Risk { at: first + i, owner: base, need: Need::Literal });
            }
        }
        n if is_python(n) => python(args, first, base, out),
        _ => {}
    }
}

fn is_python(name: &str) -> bool {
    let version = |rest: &str| rest.is_empty() || rest.chars().all(|c| c.is_ascii_digit() || c == '.');
    name.strip_prefix("python").is_some_and(version) || name.strip_prefix("pypy").is_some_and(version)
}

/// `NAME=VALUE` (also `NAME:=`, `NAME+=`, `NAME?=`, `NAME!=`): the name.
fn assignment(w: &str) -> Option<&str> {
    if w.starts_with('-') {
        return None;
    }
    let (name, _) = w.split_once('=')?;
    let name = name.trim_end_matches([':', '+', '?', '!']);
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    ok.then_some(name)
}

/// Which options of a program are dangerous and which short options take a
/// value (the rest of a cluster is then that value, not options).
struct Spec {
    /// Long options; a last `*` makes it a prefix (`--inspect*`).
    long: &'static [&'static str],
    short: &'static [char],
    value: &'static [char],
    /// Options end at the first operand (a script, whose own arguments
    /// follow).
    stop_at_operand: bool,
}

fn long_hit(spec_long: &[&str], w: &str) -> Option<String> {
    let name = w.split('=').next().unwrap_or(w);
    spec_long.iter().find_map(|o| match o.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix).then(|| name.to_owned()),
        None => (*o == name).then(|| (*o).to_owned()),
    })
}

/// The short options of a cluster (`-abc`), up to and including the first
/// that takes a value.
fn cluster(w: &str, value: &[char]) -> Vec<char> {
    let mut out = Vec::new();
    for c in w.chars().skip(1) {
        out.push(c);
        if value.contains(&c) {
            break;
        }
    }
    out
}

fn scan(args: &[String], first: usize, owner: usize, spec: &Spec, out: &mut Vec<Risk>) {
    // Set after a short option whose value is the next word: that word is
    // no operand (it is still looked at: a value that reads as an option
    // is flagged too, which errs on the refusing side).
    let mut value_next = false;
    for (i, w) in args.iter().enumerate() {
        let at = first + i;
        let is_value = std::mem::take(&mut value_next);
        if w == "--" {
            if spec.stop_at_operand && !is_value {
                return;
            }
            continue;
        }
        if w.starts_with("--") {
            if let Some(long) = long_hit(spec.long, w) {
                out.push(Risk { at, owner, need: Need::Long(long) });
            }
            continue;
        }
        if w.starts_with('-') && w.len() > 1 {
            let letters = cluster(w, spec.value);
            if let Some(&c) = letters.iter().find(|c| spec.short.contains(c)) {
                out.push(Risk { at, owner, need: Need::Short(c) });
            }
            value_next =
                letters.last().is_some_and(|c| spec.value.contains(c)) && w.chars().count() == letters.len() + 1;
            continue;
        }
        if spec.stop_at_operand && !is_value {
            // The script or program: what follows is its own.
            return;
        }
    }
}

fn pytest(args: &[String], first: usize, owner: usize, out: &mut Vec<Risk>) {
    const LONG: [&str; 7] =
        ["--config-file", "--override-ini", "--confcutdir", "--rootdir", "--pdbcls", "--basetemp", "--plugins"];
    const VALUE: [char; 8] = ['k', 'm', 'p', 'c', 'o', 'r', 'W', 'n'];
    for (i, w) in args.iter().enumerate() {
        let at = first + i;
        if w.starts_with("--") {
            if let Some(long) = long_hit(&LONG, w) {
                out.push(Risk { at, owner, need: Need::Long(long) });
            }
            continue;
        }
        if !w.starts_with('-') || w.len() < 2 {
            continue;
        }
        let letters = cluster(w, &VALUE);
        let Some(&c) = letters.iter().find(|c| matches!(c, 'p' | 'c' | 'o')) else { continue };
        if c == 'p' {
            // `-p no:NAME` only turns a plugin off.
            let joined = &w[w.find('p').map_or(w.len(), |p| p + 1)..];
            let value = if joined.is_empty() { args.get(i + 1).map_or("", String::as_str) } else { joined };
            if value.starts_with("no:") {
                continue;
            }
        }
        out.push(Risk { at, owner, need: Need::Short(c) });
    }
}

fn python(args: &[String], first: usize, owner: usize, out: &mut Vec<Risk>) {
    const VALUE: [char; 5] = ['c', 'm', 'W', 'X', 'Q'];
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        if w == "--" || !w.starts_with('-') || w == "-" {
            return;
        }
        if w.starts_with("--") {
            i += if w == "--check-hash-based-pycs" { 2 } else { 1 };
            continue;
        }
        let letters = cluster(w, &VALUE);
        match letters.last() {
            Some('c') => {
                out.push(Risk { at: first + i, owner, need: Need::Short('c') });
                return;
            }
            Some('m') => {
                out.push(Risk { at: first + i, owner, need: Need::Short('m') });
                let joined = &w[w.find('m').map_or(w.len(), |p| p + 1)..];
                let (module, module_at) =
                    if joined.is_empty() { (args.get(i + 1).map_or("", String::as_str), i + 1) } else { (joined, i) };
                if module_at < args.len() {
                    out.push(Risk { at: first + module_at, owner, need: Need::Literal });
                }
                if matches!(module, "pytest" | "py.test") {
                    pytest(&args[module_at + 1..], first + module_at + 1, owner, out);
                }
                return;
            }
            Some(c) if VALUE.contains(c) && w.len() == 2 => i += 2,
            _ => i += 1,
        }
    }
}

fn git(args: &[String], first: usize, owner: usize, out: &mut Vec<Risk>) {
    const VALUE_GLOBAL: [&str; 7] =
        ["-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"];
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        let w = args[i].as_str();
        let at = first + i;
        if w.starts_with("-c") && !w.starts_with("--") {
            out.push(Risk { at, owner, need: Need::Short('c') });
        } else if w.starts_with("-C") {
            out.push(Risk { at, owner, need: Need::Short('C') });
        } else if let Some(long) = long_hit(&["--config-env", "--exec-path", "--git-dir"], w) {
            out.push(Risk { at, owner, need: Need::Long(long) });
        }
        i += if VALUE_GLOBAL.contains(&w) { 2 } else { 1 };
    }
    let Some(sub) = args.get(i) else { return };
    if ["config", "difftool", "mergetool", "filter-branch", "bisect", "submodule"].contains(&sub.as_str()) {
        out.push(Risk { at: first + i, owner, need: Need::Literal });
    }
    let short: &'static [char] = match sub.as_str() {
        "clone" => &['u', 'c'],
        "ls-remote" => &['u'],
        "rebase" => &['x'],
        "grep" => &['O'],
        _ => &[],
    };
    let spec = Spec {
        long: &[
            "--upload-pack",
            "--receive-pack",
            "--exec",
            "--ext-diff",
            "--output",
            "--template",
            "--open-files-in-pager",
            "--extcmd",
            "--config",
        ],
        short,
        value: &['u', 'c', 'x', 'O', 'm', 'b', 'o', 'n', 'A', 'B', 'C', 'e', 'f', 'j', 'S', 'U', 'l', 'L', 'G', 'F'],
        stop_at_operand: false,
    };
    scan(&args[i + 1..], first + i + 1, owner, &spec, out);
}

#[derive(Clone, Copy, PartialEq)]
enum Script {
    Sed,
    Awk,
}

/// sed and awk: the script is a program, so it must be spelled out; a
/// script from a file, an in-place edit (sed) or a loaded extension (awk)
/// is an option to spell out.
fn script(args: &[String], first: usize, owner: usize, kind: Script, out: &mut Vec<Risk>) {
    let (script_short, file_short, risky_short, value): (char, char, &[char], &[char]) = match kind {
        Script::Sed => ('e', 'f', &['i'], &['e', 'f', 'l', 'i']),
        Script::Awk => ('e', 'f', &['i', 'l', 'E'], &['e', 'f', 'i', 'l', 'E', 'v', 'F']),
    };
    let (script_long, file_long, risky_long): (&[&str], &[&str], &[&str]) = match kind {
        Script::Sed => (&["--expression"], &["--file"], &["--in-place"]),
        Script::Awk => (&["--source"], &["--file"], &["--include", "--load", "--exec"]),
    };
    let mut has_script = false;
    let mut options = true;
    let mut i = 0;
    while i < args.len() {
        let w = args[i].as_str();
        let at = first + i;
        if options && w == "--" {
            options = false;
            i += 1;
            continue;
        }
        if options && w.starts_with("--") {
            let name = w.split('=').next().unwrap_or(w);
            let joined = w.contains('=');
            if script_long.contains(&name) {
                has_script = true;
                out.push(Risk { at: if joined { at } else { at + 1 }, owner, need: Need::Literal });
                i += if joined { 1 } else { 2 };
                continue;
            }
            if file_long.contains(&name) || risky_long.contains(&name) {
                has_script |= file_long.contains(&name);
                out.push(Risk { at, owner, need: Need::Long(name.to_owned()) });
                let takes = file_long.contains(&name) || (kind == Script::Awk && !joined);
                i += if takes && !joined { 2 } else { 1 };
                continue;
            }
            i += 1;
            continue;
        }
        if options && w.starts_with('-') && w.len() > 1 {
            let letters = cluster(w, value);
            let last = letters.last().copied().unwrap_or_default();
            let joined = w.len() > letters.len() + 1;
            if let Some(&c) = letters.iter().find(|c| risky_short.contains(c) || **c == file_short) {
                out.push(Risk { at, owner, need: Need::Short(c) });
                has_script |= c == file_short;
            }
            if last == script_short {
                has_script = true;
                out.push(Risk { at: if joined { at } else { at + 1 }, owner, need: Need::Literal });
            }
            let separate_value = value.contains(&last) && !joined && !(kind == Script::Sed && last == 'i');
            i += if separate_value { 2 } else { 1 };
            continue;
        }
        let awk_assignment = kind == Script::Awk && assignment(w).is_some();
        if !has_script && !awk_assignment {
            has_script = true;
            out.push(Risk { at, owner, need: Need::Literal });
        }
        i += 1;
    }
}
