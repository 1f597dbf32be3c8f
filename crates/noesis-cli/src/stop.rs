//! Named points where a crash test stops this process to kill it:
//! `NOESIS_TEST_STOP_AT=POINT` makes the process say `stopped at POINT` on
//! stderr when it gets there and then wait, doing nothing more, until it is
//! killed. So a kill -9 lands exactly between two steps, every time, instead
//! of wherever a timer happened to fire. Unset (always, outside tests), a
//! point costs one variable lookup, done once.

use std::sync::OnceLock;

/// Stops here for good if the test asked for `name`.
pub(crate) fn point(name: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("NOESIS_TEST_STOP_AT").ok().filter(|v| !v.is_empty()));
    if at.as_deref() == Some(name) {
        crate::out::note(&format!("stopped at {name}"));
        loop {
            std::thread::park();
        }
    }
}

/// The observer of module installs and migrations: a note while another
/// process holds the modules folder, and the stop points.
pub(crate) fn observe_swap(point: &str) {
    if point == "waiting" {
        crate::out::note("note: waiting for another noesis process to finish changing this modules folder");
    }
    self::point(point);
}
