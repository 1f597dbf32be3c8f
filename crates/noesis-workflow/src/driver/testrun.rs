//! Test commands run confined, reported per case when the runner says so.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::DriveError;
use crate::episode::TestRun;
use crate::judge::{is_plain_pytest, tail};
use crate::junit::CaseStatus;

/// Runs each command with `sh -c` in `root`, confined by `sandbox` (the
/// whole tree killed at `limit`), and reports per case when the runner
/// says so: pytest is asked for a JUnit report (written in the sandbox's
/// own folder), and `junit` (a report the commands write themselves) is
/// read when a command updated it. Output is redacted before it is kept.
pub async fn run_tests(
    sandbox: &Arc<noesis_sandbox::Sandbox>,
    redactor: &noesis_sandbox::Redactor,
    root: &Path,
    commands: &[String],
    limit: Duration,
    junit: Option<&Path>,
) -> Result<Vec<TestRun>, DriveError> {
    let mut runs = Vec::new();
    for (n, command) in commands.iter().enumerate() {
        let started = std::time::Instant::now();
        let asked = (junit.is_none() && is_plain_pytest(command))
            .then(|| sandbox.scratch().join(format!("junit-{}-{n}.xml", std::process::id())));
        if let Some(p) = &asked {
            let _ = std::fs::remove_file(p);
        }
        let line = match &asked {
            Some(path) => format!("{command} --junitxml='{}'", path.display()),
            None => command.clone(),
        };
        let given = junit.map(|p| root.join(p));
        let before = given.as_ref().and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        let (sb, dir) = (Arc::clone(sandbox), root.to_path_buf());
        let done = tokio::task::spawn_blocking(move || {
            let opts =
                noesis_sandbox::RunOptions { cwd: &dir, timeout: limit, max_output: 1 << 20, cancelled: &|| false };
            sb.run(&["sh".to_owned(), "-c".to_owned(), line], &opts)
        })
        .await
        .map_err(|e| DriveError::failed(format!("test command `{command}`"), e))?;
        let (ok, exit, text) = match done {
            Err(e) => return Err(DriveError::failed(format!("test command `{command}` could not run"), e)),
            Ok(f) if f.timed_out => (false, None, format!("timed out after {} s and was killed", limit.as_secs())),
            Ok(f) => {
                let ok = f.success();
                let mut text = f.stdout;
                text.push_str(&f.stderr);
                (ok, f.code, text)
            }
        };
        let text = redactor.redact(&text).into_owned();
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let tail = tail(&text, 2000);
        let report = match (&asked, &given) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(path)) => {
                let after = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                (after.is_some() && after != before).then(|| path.clone())
            }
            _ => None,
        };
        let cases = report
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|xml| crate::junit::parse(&xml).ok())
            .filter(|c| !c.is_empty());
        let run = |name: String, status: &str, message: Option<String>| TestRun {
            name,
            command: command.clone(),
            status: status.to_owned(),
            exit,
            message: message.map(|m| redactor.redact(&m).into_owned()),
            tail: tail.clone(),
            ms,
        };
        match cases {
            Some(cases) => {
                let any_failed = cases.iter().any(|c| matches!(c.status, CaseStatus::Failed | CaseStatus::Error));
                for c in cases {
                    runs.push(run(c.id, c.status.as_str(), c.message));
                }
                // A command that failed with no failing case (a crash after
                // the report, a timeout) still fails, as itself.
                if !ok && !any_failed {
                    runs.push(run(command.clone(), "failed", None));
                }
            }
            None => runs.push(run(command.clone(), if ok { "passed" } else { "failed" }, None)),
        }
    }
    Ok(runs)
}
