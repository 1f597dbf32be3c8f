//! Tests that need something outside the workspace (PostgreSQL, the local
//! model, the MCP Python SDK, a browser) are required by default: a missing
//! dependency fails the test with what to install. Each dependency has one
//! opt-out variable; with it set the test is skipped *loudly*: a line on
//! stderr (past the harness's capture) and, when `NOESIS_SKIP_LOG` names a
//! file, a line appended there, which `scripts/test.sh` summarises at the end.

use std::io::Write;

/// Something a test needs that the workspace does not build itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dependency {
    /// The PostgreSQL server in `NOESIS_TEST_PG`.
    Postgres,
    /// The GGUF model installed by `noesis model install`.
    LocalModel,
    /// The official MCP Python SDK (`scripts/python-deps.sh`).
    McpSdk,
    /// Chromium driven by Playwright.
    Browser,
    /// Third-party MCP servers (`scripts/mcp-servers.sh`).
    McpServers,
    /// pytest, for `noesis solve` on a Python project (`scripts/python-deps.sh`).
    Pytest,
    /// The Temporal dev server (`scripts/temporal.sh`), for runs on workers.
    Temporal,
}

impl Dependency {
    /// Every dependency, in the order the summary names them.
    pub const ALL: [Dependency; 7] = [
        Dependency::Postgres,
        Dependency::LocalModel,
        Dependency::McpSdk,
        Dependency::Browser,
        Dependency::McpServers,
        Dependency::Pytest,
        Dependency::Temporal,
    ];

    /// The variable that, set to anything but empty, `0` or `false`, skips
    /// the tests that need this dependency.
    pub fn opt_out_var(self) -> &'static str {
        match self {
            Dependency::Postgres => "NOESIS_SKIP_PG",
            Dependency::LocalModel => "NOESIS_SKIP_LOCAL_MODEL",
            Dependency::McpSdk => "NOESIS_SKIP_MCP_SDK",
            Dependency::Browser => "NOESIS_SKIP_BROWSER",
            Dependency::McpServers => "NOESIS_SKIP_MCP_SERVERS",
            Dependency::Pytest => "NOESIS_SKIP_PYTEST",
            Dependency::Temporal => "NOESIS_SKIP_TEMPORAL",
        }
    }

    /// A short name for messages and the skip log.
    pub fn name(self) -> &'static str {
        match self {
            Dependency::Postgres => "postgres",
            Dependency::LocalModel => "local-model",
            Dependency::McpSdk => "mcp-sdk",
            Dependency::Browser => "browser",
            Dependency::McpServers => "mcp-servers",
            Dependency::Pytest => "pytest",
            Dependency::Temporal => "temporal",
        }
    }

    /// Whether the opt-out variable is set.
    pub fn opted_out(self) -> bool {
        opted_out_by(std::env::var(self.opt_out_var()).ok().as_deref())
    }
}

fn opted_out_by(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// What a test does when `dependency` is missing (`why` says what was
/// tried): with the opt-out set it records the skip and returns, so the
/// caller returns early; otherwise it panics, naming the opt-out.
#[track_caller]
pub fn missing(dependency: Dependency, test: &str, why: &str) {
    let log = std::env::var_os("NOESIS_SKIP_LOG").filter(|p| !p.is_empty()).map(std::path::PathBuf::from);
    decide(dependency, dependency.opted_out(), log.as_deref(), test, why);
}

/// [`missing`] with the environment read by the caller, so both outcomes
/// are tested whatever the suite's own variables say.
#[track_caller]
fn decide(dependency: Dependency, opted_out: bool, log: Option<&std::path::Path>, test: &str, why: &str) {
    if !opted_out {
        panic!(
            "{test} needs {}: {why}\n(scripts/test.sh installs it; set {}=1 to skip these tests instead)",
            dependency.name(),
            dependency.opt_out_var()
        );
    }
    let line = skip_line(dependency, test, why);
    let _ = writeln!(std::io::stderr(), "SKIPPED {line}");
    if let Some(path) = log {
        // One `write` of one short line in append mode: lines written by
        // concurrent test processes do not interleave.
        if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

fn skip_line(dependency: Dependency, test: &str, why: &str) -> String {
    let flat = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    format!("{}\t{}\t{}\t{}", dependency.name(), dependency.opt_out_var(), flat(test), flat(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opt_out_values() {
        assert!(!opted_out_by(None));
        assert!(!opted_out_by(Some("")));
        assert!(!opted_out_by(Some("0")));
        assert!(!opted_out_by(Some("FALSE")));
        assert!(opted_out_by(Some("1")));
        assert!(opted_out_by(Some("yes")));
    }

    #[test]
    fn the_skip_line_is_one_line_of_four_fields() {
        let line = skip_line(Dependency::Postgres, "a\ttest", "down:\nrefused");
        assert_eq!(line, "postgres\tNOESIS_SKIP_PG\ta test\tdown: refused");
    }

    /// Issue 31: this test returned early, silently, whenever the suite
    /// had the browser opted out. Both outcomes are checked whatever the
    /// environment says.
    #[test]
    fn a_missing_dependency_fails_naming_its_opt_out_unless_opted_out() {
        let panic =
            std::panic::catch_unwind(|| decide(Dependency::Browser, false, None, "t", "not found")).unwrap_err();
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("t needs browser: not found") && message.contains("NOESIS_SKIP_BROWSER=1"),
            "{message}"
        );
    }

    #[test]
    fn an_opted_out_skip_is_logged_one_line_each() {
        let dir = std::env::temp_dir().join(format!("noesis-skip-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        let _ = std::fs::remove_file(&log);
        decide(Dependency::Postgres, true, Some(&log), "a", "down");
        decide(Dependency::Pytest, true, Some(&log), "b", "no\npytest");
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(text, "postgres\tNOESIS_SKIP_PG\ta\tdown\npytest\tNOESIS_SKIP_PYTEST\tb\tno pytest\n");
    }
}
