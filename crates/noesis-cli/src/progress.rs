//! Progress on long work (indicatif), on stderr and only in a terminal:
//! never in a pipe, a log or a test, never with `--quiet` or `TERM=dumb`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar or spinner that may be hidden; every method is a no-op then.
pub(crate) struct Progress(Option<ProgressBar>);

fn shown(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

impl Progress {
    /// A spinner with a count (`{pos}`) for work of unknown size.
    pub(crate) fn counter(quiet: bool, message: &str) -> Progress {
        Progress::spinning(quiet, "{spinner} {msg}: {human_pos} {elapsed}", message)
    }

    /// A spinner with a message, for steps of unknown length.
    pub(crate) fn spinner(quiet: bool, message: &str) -> Progress {
        Progress::spinning(quiet, "{spinner} {msg} {elapsed}", message)
    }

    fn spinning(quiet: bool, template: &str, message: &str) -> Progress {
        if !shown(quiet) {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner()));
        bar.set_message(message.to_owned());
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress(Some(bar))
    }

    /// Whether it is on screen.
    pub(crate) fn visible(&self) -> bool {
        self.0.is_some()
    }

    /// What it says now.
    pub(crate) fn say(&self, message: &str) {
        if let Some(b) = &self.0 {
            b.set_message(message.to_owned());
        }
    }

    /// A bar for `total` steps.
    pub(crate) fn bar(quiet: bool, total: u64, message: &str) -> Progress {
        if !shown(quiet) {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(message.to_owned());
        Progress(Some(bar))
    }

    /// Where the work is now.
    pub(crate) fn set(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.set_position(n);
        }
    }

    /// One step more.
    pub(crate) fn inc(&self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }

    /// Runs `f` with the bar out of the way (for lines printed meanwhile).
    pub(crate) fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Erases it.
    pub(crate) fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
