//! Step and total deadlines on the async runtime's clock.

use super::*;

/// Cancels a token when a duration passes, unless dropped first: a task on
/// the async runtime's timer (a composition runs on a runtime with time
/// enabled, as every noesis front end builds it), aborted on drop.
pub(super) struct Timer {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Timer {
    pub(super) fn start(after: Duration, token: CancellationToken, fired: Arc<AtomicBool>) -> Option<Timer> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let task = runtime.spawn(async move {
            tokio::time::sleep(after).await;
            fired.store(true, Ordering::SeqCst);
            token.cancel();
        });
        Some(Timer { task })
    }
}
