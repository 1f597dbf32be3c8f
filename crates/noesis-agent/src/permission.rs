//! Permission rules for agent tools: which calls run, which ask a person,
//! which are refused. Pure — no I/O, no clock: the run decides with it when
//! a call is proposed and again when a person edits one; the toolbox checks
//! again before a command or a file tool runs.
//!
//! # Rules
//!
//! A rule is `TOOL` or `TOOL(PATTERN)` under `allow`, `ask` or `deny`:
//!
//! - `TOOL` is a tool's name, or a glob over names (`*_file`). `mcp:NAME`
//!   matches only tools an MCP server offers (their declaration's
//!   [`ToolDecl::source`] is `mcp`; their names are `SERVER__TOOL`), so
//!   `mcp:fs__*` is every tool of the server `fs`. A glob never admits a
//!   command and never unlocks a protected path.
//! - `run_command(PATTERN)`: the pattern is split into words like the tool
//!   splits its command line (shlex, no shell). The first word is the
//!   program and must equal the command's `argv[0]` exactly (a program
//!   with a `/` matches only that path); each following word is a glob for
//!   one argument (`*` and `?` are its wildcards, `\\` escapes them;
//!   brackets and braces are literal); a last lone `*` matches any
//!   remaining arguments, none included. `run_command(*)` and a bare `run_command` match any command.
//! - `read_file`, `list_dir`, `write_file`, `edit_file`, `grep` take a path
//!   pattern (globset, `*` within a folder, `**` across): it matches the
//!   call's `path` relative to the workspace (`grep` without a path is
//!   `.`), after `.` and `..` are resolved by their names. `!PATTERN`
//!   matches what the pattern does not. A path outside the workspace (which
//!   the tool refuses anyway) matches no `allow` rule, and of `deny` and
//!   `ask` rules only the negated ones.
//! - Any other tool with a pattern is an error, as is a rule that does not
//!   parse; the error names the rule and where it came from.
//!
//! # Deciding
//!
//! Within a layer deny wins over ask over allow. A run's permissions are a
//! list of layers (the operator's config and flags, then a request's own):
//! the decision is the most restrictive opinion of all layers, and a
//! *narrowing* layer (an HTTP request's) counts only with its `deny` and
//! `ask` rules, so no layer can widen what the operator's allow. With no
//! opinion anywhere a read-only tool runs and any other follows the
//! [`ApprovalPolicy`]. Explicit `ask` asks even under `auto`; explicit
//! `allow` runs without asking; `deny` refuses, naming the rule. Under
//! [`ApprovalPolicy::Never`] nothing that changes the world runs and
//! nothing waits for a person, allow rules or not: `never` is the
//! operator's stop.
//!
//! `run_command` runs only a command some rule of the operator's layers
//! admits: an `allow` or `ask` rule naming `run_command` (not a glob) whose
//! words match it exactly, with every dangerous option spelled out (see
//! below). `deny` and `ask` rules match more loosely, so options put in
//! between do not slip past them: the program also by its file name
//! (`/bin/rm` is `rm`), the rule's words in order anywhere among the
//! arguments, and the command inside a wrapper (`env`, `xargs`, `timeout`,
//! `nice`, `nohup`, `setsid`, `stdbuf`, `time`) as well.
//!
//! `--allow-command CMD` (and `[agent] allow_commands`) is the rule
//! `run_command(CMD *)` with CMD's words taken literally and the run's
//! policy as its effect: `allow` under `approve auto`, `ask` under `approve
//! ask` (a named command still waits for a person, as it always did).
//!
//! # Dangerous options
//!
//! Options that make a runner execute code the rule did not name fail a
//! rule unless the rule spells them out at their place: a literal word
//! equal to the argument, or a word whose literal start names the option
//! (`--config`, `--config=*`, `-p*`). Joined forms count (`--config=x`,
//! `-cfoo`, `-Bc`). A wrapper's command must be a literal word, and the
//! wrapped program's own table applies to its arguments. See [`risk::risks`] for
//! the table; what it cannot see — code the runner executes by design
//! (tests, `build.rs`, `conftest.py`, a Makefile, `.cargo/config.toml`,
//! package scripts) — is the sandbox's to confine.
//!
//! # Protected paths
//!
//! `.git`, `.noesis`, `noesis.toml` and `cognitive.lock` (at any depth),
//! and the paths a caller adds ([`Permissions::protect`]: solve adds the
//! tests that judge its CODER) are written by no tool unless an `allow` or
//! `ask` rule of that tool names them: its pattern matches the path and
//! contains the protected name (`write_file(.git/**)` names `.git`;
//! `write_file(**)` names nothing).

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ApprovalPolicy;
use crate::tool::ToolDecl;

mod risk;

use risk::{MAX_DEPTH, Risk, program_name, risks, wrapped};

/// What a rule says about the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Run without asking.
    Allow,
    /// Ask a person first.
    Ask,
    /// Refuse.
    Deny,
}

impl Effect {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }
}

/// A rule that cannot be used, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{from}: `{rule}`: {reason}")]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// Where it came from (a config key, a flag, a request field).
    pub from: String,
    /// What is wrong.
    pub reason: String,
}

/// What the permissions say about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ruling {
    /// It runs.
    Run,
    /// A person decides.
    Ask {
        /// The rule that asks; `None` when the approval policy does.
        rule: Option<String>,
    },
    /// It does not run; the model sees `reason`.
    Refuse {
        /// Why, naming the rule or the protected path.
        reason: String,
    },
}

/// The built-in tools whose pattern is a path, and the argument it is in.
const PATH_TOOLS: [&str; 5] = ["read_file", "list_dir", "write_file", "edit_file", "grep"];
/// The built-in tools that write the file at their path.
const WRITERS: [&str; 2] = ["write_file", "edit_file"];
/// Paths no tool writes without a rule naming them, by name.
pub const PROTECTED: [&str; 4] = [".git", ".noesis", "noesis.toml", "cognitive.lock"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rule(Effect),
    /// `--allow-command`: admits like allow, asks or runs by the policy.
    Command,
}

#[derive(Debug, Clone)]
struct ToolPat {
    mcp: bool,
    name: String,
    glob: Option<GlobMatcher>,
}

impl ToolPat {
    fn matches(&self, tool: &str, from_mcp: bool) -> bool {
        if self.mcp && !from_mcp {
            return false;
        }
        match &self.glob {
            Some(g) => g.is_match(tool),
            None => self.name == tool,
        }
    }

    /// Names exactly this built-in tool (not through a glob or `mcp:`).
    fn is(&self, tool: &str) -> bool {
        !self.mcp && self.glob.is_none() && self.name == tool
    }
}

#[derive(Debug, Clone)]
struct Word {
    text: String,
    /// `None`: a literal word.
    glob: Option<GlobMatcher>,
}

impl Word {
    fn matches(&self, arg: &str) -> bool {
        match &self.glob {
            Some(g) => g.is_match(arg),
            None => self.text == arg,
        }
    }

    /// The word's text up to its first glob character, escapes resolved.
    fn literal_start(&self) -> String {
        if self.glob.is_none() {
            return self.text.clone();
        }
        let mut out = String::new();
        let mut chars = self.text.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(n) => out.push(n),
                    None => break,
                },
                '*' | '?' => break,
                c => out.push(c),
            }
        }
        out
    }
}

#[derive(Debug, Clone)]
struct CommandPat {
    program: String,
    words: Vec<Word>,
    /// A last lone `*`: any further arguments.
    rest: bool,
}

#[derive(Debug, Clone)]
struct PathPat {
    negated: bool,
    text: String,
    glob: GlobMatcher,
}

#[derive(Debug, Clone)]
enum ArgPat {
    Any,
    Command(CommandPat),
    Path(PathPat),
}

/// One parsed rule.
#[derive(Debug, Clone)]
struct Rule {
    /// As written (for `Command`, the command line).
    text: String,
    from: String,
    kind: Kind,
    tool: ToolPat,
    arg: ArgPat,
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// A command word: `*` and `?` are its wildcards (`\\` escapes them);
/// brackets and braces are literal, as arguments often hold them (`awk
/// '{print $1}'`, `find -exec … {}`).
fn word(text: &str) -> Result<Word, String> {
    if !text.contains(['*', '?', '\\']) {
        return Ok(Word { text: text.to_owned(), glob: None });
    }
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '[' | ']' | '{' | '}') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    let glob = GlobBuilder::new(&escaped)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("`{text}` is not a glob: {e}"))?;
    Ok(Word { text: text.to_owned(), glob: Some(glob.compile_matcher()) })
}

fn path_glob(text: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(text)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("`{text}` is not a glob: {e}"))
}

impl Rule {
    fn parse(kind: Kind, text: &str, from: &str) -> Result<Rule, RuleError> {
        let fail = |reason: String| RuleError { rule: text.to_owned(), from: from.to_owned(), reason };
        if kind == Kind::Command {
            let words = shlex::split(text)
                .filter(|w| !w.is_empty())
                .ok_or_else(|| fail("not a command line (unbalanced quotes, or empty)".into()))?;
            let (program, args) = words.split_first().ok_or_else(|| fail("the command is empty".into()))?;
            let pat = CommandPat {
                program: program.clone(),
                words: args.iter().map(|w| Word { text: w.clone(), glob: None }).collect(),
                rest: true,
            };
            return Ok(Rule {
                text: text.to_owned(),
                from: from.to_owned(),
                kind,
                tool: ToolPat { mcp: false, name: "run_command".into(), glob: None },
                arg: ArgPat::Command(pat),
            });
        }
        let trimmed = text.trim();
        let (tool_text, pattern) = match trimmed.find('(') {
            Some(open) => {
                let Some(inner) = trimmed[open + 1..].strip_suffix(')') else {
                    return Err(fail("a pattern is written TOOL(PATTERN), closed by `)`".into()));
                };
                (&trimmed[..open], Some(inner.trim()))
            }
            None => (trimmed, None),
        };
        let tool_text = tool_text.trim();
        let (mcp, name) = match tool_text.strip_prefix("mcp:") {
            Some(n) => (true, n),
            None => (false, tool_text),
        };
        if name.is_empty() {
            return Err(fail("no tool is named (write TOOL or TOOL(PATTERN))".into()));
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '?')) {
            return Err(fail(format!(
                "`{name}` is not a tool name (letters, digits, `_`, `-`, and `*` or `?` as wildcards)"
            )));
        }
        let glob = if has_glob(name) { Some(path_glob(name).map_err(fail)?) } else { None };
        let tool = ToolPat { mcp, name: name.to_owned(), glob };
        let arg = match pattern {
            None => ArgPat::Any,
            Some("") => {
                return Err(fail("the pattern is empty (leave out the parentheses to match every call)".into()));
            }
            Some(p) => {
                if mcp || tool.glob.is_some() {
                    return Err(fail(
                        "a pattern goes with one built-in tool named in full (run_command or a file tool)".into(),
                    ));
                }
                if name == "run_command" {
                    command_pattern(p).map_err(fail)?
                } else if PATH_TOOLS.contains(&name) {
                    ArgPat::Path(path_pattern(p).map_err(fail)?)
                } else {
                    return Err(fail(format!(
                        "`{name}` takes no pattern; only run_command and {} do",
                        PATH_TOOLS.join(", ")
                    )));
                }
            }
        };
        Ok(Rule { text: trimmed.to_owned(), from: from.to_owned(), kind, tool, arg })
    }

    /// The rule as the model and the operator read it.
    fn shown(&self) -> String {
        match self.kind {
            Kind::Command => format!("run_command({} *)", self.text),
            Kind::Rule(_) => self.text.clone(),
        }
    }

    fn effect(&self, policy: ApprovalPolicy) -> Effect {
        match self.kind {
            Kind::Rule(e) => e,
            Kind::Command if policy == ApprovalPolicy::Auto => Effect::Allow,
            Kind::Command => Effect::Ask,
        }
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Rule(e) => e.as_str(),
            Kind::Command => "command",
        }
    }

    fn admitting(&self) -> bool {
        matches!(self.kind, Kind::Rule(Effect::Allow | Effect::Ask) | Kind::Command)
    }

    /// Whether the rule applies to `call`, whether it admits it (a command
    /// matched exactly, its dangerous options spelled out), and if its words
    /// matched but an option was not spelled out, which.
    fn check(&self, call: &Call<'_>) -> Check {
        if !self.tool.matches(call.tool, call.mcp) {
            return Check::default();
        }
        let loose = matches!(self.kind, Kind::Rule(Effect::Deny | Effect::Ask));
        match &self.arg {
            ArgPat::Any => {
                Check { applies: true, admits: self.tool.is("run_command") && self.admitting(), unnamed: None }
            }
            ArgPat::Command(p) => {
                let Some(argv) = &call.argv else { return Check::default() };
                let strict = p.strict(argv, &call.risks);
                let admits = strict.is_ok() && self.admitting();
                let applies = if loose { p.loose(argv) } else { admits };
                Check { applies, admits, unnamed: strict.err().flatten() }
            }
            ArgPat::Path(p) => {
                let Some(path) = &call.path else { return Check::default() };
                let applies = match path {
                    None => loose && p.negated,
                    Some(rel) => p.glob.is_match(rel) != p.negated,
                };
                Check { applies, admits: false, unnamed: None }
            }
        }
    }

    /// Whether this rule names the protected `name` at `rel`.
    fn names_protected(&self, tool: &str, rel: &str, name: &str) -> bool {
        self.admitting()
            && self.tool.is(tool)
            && matches!(&self.arg, ArgPat::Path(p) if !p.negated && p.glob.is_match(rel) && p.text.contains(name))
    }
}

fn command_pattern(p: &str) -> Result<ArgPat, String> {
    let mut words = shlex::split(p).ok_or("the pattern's quotes do not close")?;
    if words.is_empty() {
        return Err("the pattern is empty".into());
    }
    if words == ["*"] {
        return Ok(ArgPat::Any);
    }
    let program = words.remove(0);
    if has_glob(&program) || program.is_empty() {
        return Err(format!(
            "the program `{program}` must be named in full (`run_command(*)` alone matches any command)"
        ));
    }
    let rest = words.last().is_some_and(|w| w == "*");
    if rest {
        words.pop();
    }
    let words = words.iter().map(|w| word(w)).collect::<Result<Vec<_>, _>>()?;
    Ok(ArgPat::Command(CommandPat { program, words, rest }))
}

fn path_pattern(p: &str) -> Result<PathPat, String> {
    let (negated, text) = match p.strip_prefix('!') {
        Some(rest) => (true, rest.trim()),
        None => (false, p),
    };
    let text = text.strip_prefix("./").unwrap_or(text);
    if text.is_empty() {
        return Err("the path pattern is empty".into());
    }
    if text.starts_with('/') {
        return Err("a path pattern is relative to the workspace (no leading `/`)".into());
    }
    Ok(PathPat { negated, text: text.to_owned(), glob: path_glob(text)? })
}

#[derive(Debug, Default)]
struct Check {
    applies: bool,
    admits: bool,
    unnamed: Option<String>,
}

impl CommandPat {
    /// Exact match: program, one word per argument, the dangerous options
    /// spelled out at their place. `Err(Some(why))`: the words matched but
    /// an option was not spelled out.
    fn strict(&self, argv: &[String], risks: &[Risk]) -> Result<(), Option<String>> {
        let Some((program, args)) = argv.split_first() else { return Err(None) };
        if *program != self.program || args.len() < self.words.len() || (!self.rest && args.len() > self.words.len()) {
            return Err(None);
        }
        if !self.words.iter().zip(args).all(|(w, a)| w.matches(a)) {
            return Err(None);
        }
        for r in risks {
            let named = r.at.checked_sub(1).and_then(|i| self.words.get(i)).is_some_and(|w| r.named_by(w));
            if !named {
                return Err(Some(format!(
                    "`{}` can make `{}` run code the rule did not name",
                    r.label(argv),
                    program_name(&argv[r.owner])
                )));
            }
        }
        Ok(())
    }

    /// Loose match (deny and ask): the program by path or file name, the
    /// words in order anywhere among the arguments, also inside wrappers.
    fn loose(&self, argv: &[String]) -> bool {
        let mut current = argv;
        for _ in 0..MAX_DEPTH {
            let Some((program, args)) = current.split_first() else { return false };
            let same =
                *program == self.program || (!self.program.contains('/') && program_name(program) == self.program);
            if same {
                let mut want = self.words.iter().peekable();
                for a in args {
                    if want.peek().is_some_and(|w| w.matches(a)) {
                        want.next();
                    }
                }
                if want.peek().is_none() {
                    return true;
                }
            }
            match wrapped(program_name(program), args) {
                Some(i) => current = &args[i..],
                None => return false,
            }
        }
        false
    }
}

/// What a call looks like to the rules.
struct Call<'a> {
    tool: &'a str,
    mcp: bool,
    argv: Option<Vec<String>>,
    risks: Vec<Risk>,
    /// For a path tool: the path relative to the workspace, `None` when it
    /// leaves it.
    path: Option<Option<String>>,
}

impl<'a> Call<'a> {
    fn new(tool: &'a str, mcp: bool, args: &Value, workspace: Option<&str>) -> Call<'a> {
        let argv = (tool == "run_command" && !mcp)
            .then(|| args.get("command").and_then(Value::as_str).and_then(shlex::split))
            .flatten()
            .filter(|a| !a.is_empty());
        let path = (PATH_TOOLS.contains(&tool) && !mcp).then(|| {
            let given = args.get("path").and_then(Value::as_str).unwrap_or(".");
            relative(given, workspace)
        });
        Call::with(tool, mcp, argv, path)
    }

    fn with(tool: &'a str, mcp: bool, argv: Option<Vec<String>>, path: Option<Option<String>>) -> Call<'a> {
        let risks = argv.as_deref().map(risks).unwrap_or_default();
        Call { tool, mcp, argv, risks, path }
    }
}

/// `path` relative to the workspace root, `.` and `..` resolved by name;
/// `None` when it leaves the workspace (or is absolute and the root is not
/// known).
fn relative(path: &str, root: Option<&str>) -> Option<String> {
    let rest = if path.starts_with('/') {
        let root = root?.trim_end_matches('/');
        if path.trim_end_matches('/') == root { "" } else { path.strip_prefix(root)?.strip_prefix('/')? }
    } else {
        path
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(if parts.is_empty() { ".".into() } else { parts.join("/") })
}

/// A set of rules from one place: the operator's (granting) or a client's
/// (narrowing: only its `deny` and `ask` rules count).
#[derive(Debug, Clone)]
pub struct Layer {
    name: String,
    narrows: bool,
    rules: Vec<Rule>,
}

impl Layer {
    /// A layer that may allow (the operator's config and flags).
    pub fn granting(name: impl Into<String>) -> Layer {
        Layer { name: name.into(), narrows: false, rules: Vec::new() }
    }

    /// A layer that may only narrow (an HTTP request's rules).
    pub fn narrowing(name: impl Into<String>) -> Layer {
        Layer { name: name.into(), narrows: true, rules: Vec::new() }
    }

    /// Adds a rule written `text`; `from` says where it came from, for
    /// errors and denials.
    pub fn add(&mut self, effect: Effect, text: &str, from: &str) -> Result<(), RuleError> {
        self.rules.push(Rule::parse(Kind::Rule(effect), text, from)?);
        Ok(())
    }

    /// Adds `--allow-command CMD`: `run_command(CMD *)`, CMD's words
    /// literal, asking or running by the run's approval policy.
    pub fn add_command(&mut self, command: &str, from: &str) -> Result<(), RuleError> {
        self.rules.push(Rule::parse(Kind::Command, command, from)?);
        Ok(())
    }

    /// Whether it has no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[derive(Debug, Clone)]
struct Protected {
    name: String,
    globs: Vec<GlobMatcher>,
}

impl Protected {
    fn new(name: &str) -> Result<Protected, String> {
        let name = name.strip_prefix("./").unwrap_or(name).trim_end_matches('/');
        if name.is_empty() || name.starts_with('/') {
            return Err(format!("`{name}`: a protected path is relative to the workspace"));
        }
        let anywhere = PROTECTED.contains(&name);
        // `*` and `?` are wildcards; brackets and braces are the file's own
        // (`[id].test.ts`).
        let mut pattern = String::with_capacity(name.len());
        for c in name.chars() {
            if matches!(c, '[' | ']' | '{' | '}') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        let globs = if anywhere {
            vec![path_glob(&format!("**/{pattern}"))?, path_glob(&format!("**/{pattern}/**"))?]
        } else {
            vec![path_glob(&pattern)?, path_glob(&format!("{pattern}/**"))?]
        };
        Ok(Protected { name: name.to_owned(), globs })
    }

    fn covers(&self, rel: &str) -> bool {
        self.globs.iter().any(|g| g.is_match(rel))
    }
}

/// The rules in force for a run: its layers, the protected paths, and the
/// workspace root paths are taken relative to.
#[derive(Debug, Clone)]
pub struct Permissions {
    layers: Vec<Layer>,
    protected: Vec<Protected>,
    extra_protected: Vec<String>,
    workspace: Option<String>,
}

impl Default for Permissions {
    fn default() -> Permissions {
        Permissions {
            layers: Vec::new(),
            protected: PROTECTED.iter().filter_map(|p| Protected::new(p).ok()).collect(),
            extra_protected: Vec::new(),
            workspace: None,
        }
    }
}

impl PartialEq for Permissions {
    fn eq(&self, other: &Permissions) -> bool {
        Repr::from(self.clone()) == Repr::from(other.clone())
    }
}

impl Permissions {
    /// One granting layer admitting each of `commands` as
    /// `--allow-command` does (see [`Layer::add_command`]); a command that
    /// does not split into words is left out.
    pub fn from_commands(commands: &[String]) -> Permissions {
        let mut layer = Layer::granting("allow_commands");
        for c in commands {
            let _ = layer.add_command(c, "allow_commands");
        }
        Permissions::default().with_layer(layer)
    }

    /// These permissions with `layer` after the others (an empty layer
    /// is left out).
    #[must_use]
    pub fn with_layer(mut self, layer: Layer) -> Permissions {
        self.push(layer);
        self
    }

    /// Adds `layer` after the others (an empty layer is left out).
    pub fn push(&mut self, layer: Layer) {
        if !layer.is_empty() {
            self.layers.push(layer);
        }
    }

    /// Protects `path` (relative to the workspace; a folder protects what
    /// is in it; `*` and `?` are wildcards, brackets and braces literal)
    /// besides the built-in ones.
    pub fn protect(&mut self, path: &str) -> Result<(), RuleError> {
        let p = Protected::new(path).map_err(|reason| RuleError {
            rule: path.to_owned(),
            from: "protected paths".into(),
            reason,
        })?;
        if !self.extra_protected.contains(&p.name) {
            self.extra_protected.push(p.name.clone());
            self.protected.push(p);
        }
        Ok(())
    }

    /// These permissions with absolute paths taken relative to `root`.
    #[must_use]
    pub fn with_workspace(mut self, root: &str) -> Permissions {
        self.workspace = Some(root.to_owned());
        self
    }

    /// Whether no rule and no extra protected path is set.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty() && self.extra_protected.is_empty() && self.workspace.is_none()
    }

    /// Whether any rule is set.
    pub fn has_rules(&self) -> bool {
        !self.layers.is_empty()
    }

    /// The programs the operator's rules let `run_command` start (their
    /// first words): a sandbox must let each of them run.
    pub fn command_programs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for rule in self.layers.iter().filter(|l| !l.narrows).flat_map(|l| &l.rules) {
            if matches!(rule.kind, Kind::Rule(Effect::Deny)) {
                continue;
            }
            if let ArgPat::Command(c) = &rule.arg
                && !out.contains(&c.program)
            {
                out.push(c.program.clone());
            }
        }
        out
    }

    /// The paths added with [`Permissions::protect`].
    pub fn extra_protected(&self) -> &[String] {
        &self.extra_protected
    }

    /// What happens to a call of `decl` with `args` under `policy`.
    pub fn decide(&self, decl: &ToolDecl, args: &Value, policy: ApprovalPolicy) -> Ruling {
        let mcp = decl.source.as_deref() == Some("mcp");
        let call = Call::new(&decl.name, mcp, args, self.workspace.as_deref());
        let read_only = decl.effects.read_only();
        let mut base: Option<(Effect, &Rule)> = None;
        let mut narrow: Option<(Effect, &Rule)> = None;
        for layer in &self.layers {
            for rule in &layer.rules {
                let check = rule.check(&call);
                if !check.applies {
                    continue;
                }
                let effect = rule.effect(policy);
                let slot = if layer.narrows {
                    if effect == Effect::Allow {
                        continue;
                    }
                    &mut narrow
                } else {
                    &mut base
                };
                if slot.is_none_or(|(e, _)| effect > e) {
                    *slot = Some((effect, rule));
                }
            }
        }
        if let Some((_, rule)) = [base, narrow].into_iter().flatten().find(|(e, _)| *e == Effect::Deny) {
            return Ruling::Refuse { reason: denied(rule) };
        }
        if let Err(reason) = self.gate(&call) {
            return Ruling::Refuse { reason };
        }
        // Run < Ask: the most restrictive of the operator's opinion (or the
        // policy's default) and the narrowing layers'.
        let (mut level, mut by) = match base {
            Some((e, rule)) => (e, Some(rule)),
            None if read_only || policy == ApprovalPolicy::Auto => (Effect::Allow, None),
            None => (Effect::Ask, None),
        };
        if let Some((e, rule)) = narrow
            && e > level
        {
            (level, by) = (e, Some(rule));
        }
        if policy == ApprovalPolicy::Never {
            if !read_only {
                return Ruling::Refuse {
                    reason: format!("denied: `{}` changes the world and this run allows no such tool", decl.name),
                };
            }
            if level == Effect::Ask {
                let rule = by.map_or_else(String::new, |r| format!(" (the rule `{}`)", r.shown()));
                return Ruling::Refuse {
                    reason: format!("denied: this call needs a person's approval{rule} and this run asks no one"),
                };
            }
        }
        match level {
            Effect::Allow => Ruling::Run,
            _ => Ruling::Ask { rule: by.map(Rule::shown) },
        }
    }

    /// What no decision can override: a command no operator rule admits, a
    /// protected path no rule names.
    fn gate(&self, call: &Call<'_>) -> Result<(), String> {
        if call.tool == "run_command" && !call.mcp {
            self.admitted(call)?;
        }
        if let Some(Some(rel)) = &call.path
            && WRITERS.contains(&call.tool)
            && let Some(name) = self.unnamed_protected(call.tool, rel)
        {
            return Err(format!(
                "refused: `{rel}` is a protected path (`{name}`): no tool writes it unless a rule names it"
            ));
        }
        Ok(())
    }

    fn admitted(&self, call: &Call<'_>) -> Result<(), String> {
        let line = call.argv.as_ref().map(|a| shlex::try_join(a.iter().map(String::as_str)).unwrap_or_default());
        let Some(line) = line else {
            return Err("refused: the command is not a command line (unbalanced quotes, or empty)".into());
        };
        let mut unnamed: Option<(String, &Rule)> = None;
        let mut admitting = Vec::new();
        for layer in self.layers.iter().filter(|l| !l.narrows) {
            for rule in layer.rules.iter().filter(|r| r.tool.is("run_command") && r.admitting()) {
                let check = rule.check(call);
                if check.admits {
                    return Ok(());
                }
                if let Some(why) = check.unnamed {
                    unnamed.get_or_insert((why, rule));
                }
                admitting.push(rule.shown());
            }
        }
        if let Some((why, rule)) = unnamed {
            return Err(format!(
                "refused: {why}, and the rule `{}` ({}) does not spell it out",
                rule.shown(),
                rule.from
            ));
        }
        admitting.dedup();
        Err(if admitting.is_empty() {
            format!("refused: no rule admits the command `{line}`; this run admits no commands")
        } else {
            let shown: Vec<&str> = admitting.iter().take(12).map(String::as_str).collect();
            format!("refused: no rule admits the command `{line}`; the commands admitted are {}", shown.join(", "))
        })
    }

    /// The protected name covering `rel` that no rule of `tool` names.
    fn unnamed_protected(&self, tool: &str, rel: &str) -> Option<&str> {
        let p = self.protected.iter().find(|p| p.covers(rel))?;
        let named = self
            .layers
            .iter()
            .filter(|l| !l.narrows)
            .flat_map(|l| &l.rules)
            .any(|r| r.names_protected(tool, rel, &p.name));
        (!named).then_some(p.name.as_str())
    }

    /// At execution (defense in depth): whether the built-in `run_command`
    /// may run `argv` — no rule of any layer denies it and an operator's
    /// rule admits it.
    pub fn check_command(&self, argv: &[String]) -> Result<(), String> {
        let call = Call::with("run_command", false, Some(argv.to_vec()), None);
        self.check_denied(&call)?;
        self.gate(&call)
    }

    /// At execution: whether the built-in path tool `tool` may touch `rel`
    /// (the real path relative to the workspace, symlinks followed) — no
    /// rule denies it and, for a write, it is not a protected path no rule
    /// names.
    pub fn check_path(&self, tool: &str, rel: &str) -> Result<(), String> {
        let call = Call::with(tool, false, None, Some(relative(rel, None)));
        self.check_denied(&call)?;
        self.gate(&call)
    }

    fn check_denied(&self, call: &Call<'_>) -> Result<(), String> {
        for rule in self.layers.iter().flat_map(|l| &l.rules) {
            if rule.kind == Kind::Rule(Effect::Deny) && rule.check(call).applies {
                return Err(denied(rule));
            }
        }
        Ok(())
    }

    /// The protected path a call of `tool` with `args` would write without
    /// a rule naming it, if any (to report refused writes).
    pub fn protected_write(&self, tool: &str, args: &Value) -> Option<String> {
        if !WRITERS.contains(&tool) {
            return None;
        }
        let given = args.get("path").and_then(Value::as_str)?;
        let rel = relative(given, self.workspace.as_deref())?;
        self.unnamed_protected(tool, &rel).map(|_| rel)
    }
}

fn denied(rule: &Rule) -> String {
    format!("denied by the rule `{}` ({}, {})", rule.shown(), rule.kind_name(), rule.from)
}

// ---------------------------------------------------------------------------
// Serialised form: the rules as written, with where each came from.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Repr {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    layers: Vec<LayerRepr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    protected: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workspace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct LayerRepr {
    name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    narrows: bool,
    rules: Vec<RuleRepr>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RuleRepr {
    /// `allow`, `ask`, `deny` or `command` (`--allow-command`).
    kind: String,
    rule: String,
    from: String,
}

impl From<Permissions> for Repr {
    fn from(p: Permissions) -> Repr {
        Repr {
            layers: p
                .layers
                .iter()
                .map(|l| LayerRepr {
                    name: l.name.clone(),
                    narrows: l.narrows,
                    rules: l
                        .rules
                        .iter()
                        .map(|r| RuleRepr { kind: r.kind_name().into(), rule: r.text.clone(), from: r.from.clone() })
                        .collect(),
                })
                .collect(),
            protected: p.extra_protected,
            workspace: p.workspace,
        }
    }
}

impl TryFrom<Repr> for Permissions {
    type Error = RuleError;

    fn try_from(r: Repr) -> Result<Permissions, RuleError> {
        let mut p = Permissions { workspace: r.workspace, ..Permissions::default() };
        for l in r.layers {
            let mut layer = if l.narrows { Layer::narrowing(l.name) } else { Layer::granting(l.name) };
            for rule in l.rules {
                let kind = match rule.kind.as_str() {
                    "allow" => Kind::Rule(Effect::Allow),
                    "ask" => Kind::Rule(Effect::Ask),
                    "deny" => Kind::Rule(Effect::Deny),
                    "command" => Kind::Command,
                    other => {
                        return Err(RuleError {
                            rule: rule.rule,
                            from: rule.from,
                            reason: format!("`{other}` is not allow, ask, deny or command"),
                        });
                    }
                };
                layer.rules.push(Rule::parse(kind, &rule.rule, &rule.from)?);
            }
            p.layers.push(layer);
        }
        for path in r.protected {
            p.protect(&path)?;
        }
        Ok(p)
    }
}

impl Serialize for Permissions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Repr::from(self.clone()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Permissions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Permissions, D::Error> {
        let repr = Repr::deserialize(d)?;
        Permissions::try_from(repr).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
