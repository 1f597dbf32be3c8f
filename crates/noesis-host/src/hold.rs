//! Which driver may step a run, kept in the store: before stepping a run a
//! driver takes its lease ([`Holds::hold`]), writes every state under it
//! and renews it in the background; a driver whose lease lapsed and was
//! taken over finds its next write refused and stops, so two drivers
//! (a CLI `resume`, a server, a worker on another machine) never step one
//! run at once. Holders are named so a refusal can say who holds the run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_runtime::CancellationToken;
use noesis_store::{Lease, LeaseGrant, Store};

use crate::runs::now_ms;

/// How long a lease holds without a heartbeat.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// A name for this process as a holder: `KIND:HOST:PID:RANDOM`.
pub fn holder_name(kind: &str) -> String {
    let random = uuid::Uuid::now_v7().simple().to_string();
    format!("{kind}:{}:{}:{}", hostname(), std::process::id(), &random[random.len() - 8..])
}

/// Whether `holder` names a noesis process on this machine that is gone
/// (killed, crashed): its lease need not be waited out. A holder on
/// another machine, or not named by [`holder_name`], is never judged.
fn gone_here(holder: &str) -> bool {
    let mut parts = holder.split(':');
    let (Some(_kind), Some(host), Some(pid), Some(_random), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else { return false };
    if host != hostname() || pid == std::process::id() {
        return false;
    }
    // A pid taken again by another program is gone too.
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => !cmdline.windows(6).any(|w| w == b"noesis"),
        Err(_) => std::path::Path::new("/proc/self").exists(),
    }
}

struct Held {
    lease: Lease,
    lost: CancellationToken,
}

/// The leases one driver holds, renewed every third of their lifetime
/// while it lives.
pub struct Holds {
    store: Arc<dyn Store>,
    holder: String,
    ttl: Duration,
    held: Arc<Mutex<HashMap<String, Held>>>,
    stop: CancellationToken,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn now() -> i64 {
    i64::try_from(now_ms()).unwrap_or(i64::MAX)
}

impl Holds {
    /// Leases for `holder` (see [`holder_name`]) in `store`.
    pub fn new(store: Arc<dyn Store>, holder: String) -> Holds {
        Holds::with_ttl(store, holder, LEASE_TTL)
    }

    /// [`Holds::new`] with leases of `ttl`.
    pub fn with_ttl(store: Arc<dyn Store>, holder: String, ttl: Duration) -> Holds {
        let held: Arc<Mutex<HashMap<String, Held>>> = Arc::default();
        let stop = CancellationToken::new();
        let beat = (Arc::clone(&store), Arc::clone(&held), stop.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(heartbeat(beat.0, beat.1, beat.2, ttl));
        }
        Holds { store, holder, ttl, held, stop }
    }

    /// This driver's name.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes run `run_id`'s lease, or says who holds it. The token is
    /// cancelled when the lease is lost (taken over after a lapse): the
    /// drive should stop; its writes are refused anyway.
    pub async fn hold(&self, run_id: &str) -> crate::Result<CancellationToken> {
        if let Some(h) = self.lock().get(run_id) {
            return Ok(h.lost.clone());
        }
        let now = now();
        let mut grant = self.store.acquire_run_lease(run_id, &self.holder, ms(self.ttl), now).await?;
        if let LeaseGrant::Held(h) = &grant
            && gone_here(&h.holder)
        {
            // Its process is gone: the lease is as good as lapsed.
            grant = self.store.acquire_run_lease(run_id, &self.holder, ms(self.ttl), h.expires_at).await?;
        }
        match grant {
            LeaseGrant::Granted(lease) => {
                let lost = CancellationToken::new();
                self.lock().insert(run_id.to_owned(), Held { lease, lost: lost.clone() });
                Ok(lost)
            }
            LeaseGrant::Held(h) => Err(crate::HostError::Message(format!(
                "agent run {run_id} is {}; wait for it or stop that process",
                h.describe(now)
            ))),
        }
    }

    /// The lease this driver holds on `run_id`.
    pub fn lease(&self, run_id: &str) -> Option<Lease> {
        self.lock().get(run_id).map(|h| h.lease.clone())
    }

    /// Gives run `run_id`'s lease up.
    pub async fn release(&self, run_id: &str) {
        let held = self.lock().remove(run_id);
        if let Some(h) = held {
            // A lease not given up lapses by itself.
            let _ = self.store.release_run_lease(&h.lease).await;
        }
    }

    /// Saves `state` under this driver's lease on its run (without one when
    /// it holds none).
    pub async fn save(&self, state: &noesis_store::AgentState) -> Result<(), noesis_store::StoreError> {
        let lease = self.lease(&state.run_id);
        let saved = self.store.save_agent_state_held(state, lease.as_ref()).await;
        if let Err(e) = &saved
            && e.is_fenced()
        {
            self.lost(&state.run_id);
        }
        saved
    }

    /// Notes that run `run_id` was taken over (a write was refused): its
    /// lease is dropped and its token cancelled.
    pub fn lost(&self, run_id: &str) {
        if let Some(h) = self.lock().remove(run_id) {
            h.lost.cancel();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Holds {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn heartbeat(
    store: Arc<dyn Store>,
    held: Arc<Mutex<HashMap<String, Held>>>,
    stop: CancellationToken,
    ttl: Duration,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(ttl / 3) => {}
        }
        let leases: Vec<Lease> =
            held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().map(|h| h.lease.clone()).collect();
        for lease in leases {
            match store.renew_run_lease(&lease, ms(ttl), now()).await {
                Ok(renewed) => {
                    if let Some(h) =
                        held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_mut(&lease.run_id)
                    {
                        h.lease.expires_at = renewed.expires_at;
                    }
                }
                Err(e) if e.is_fenced() => {
                    let gone = held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&lease.run_id);
                    if let Some(h) = gone {
                        h.lost.cancel();
                    }
                }
                // A busy or unreachable store: try again at the next beat.
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::from(noesis_store::open(dir.path().join("s.db").to_str().unwrap()).await.unwrap())
    }

    fn state(step: i64) -> noesis_store::AgentState {
        noesis_store::AgentState {
            run_id: "r1".into(),
            project_id: "p".into(),
            task: "t".into(),
            status: "running".into(),
            step,
            forked_from: None,
            state: serde_json::json!({"step": step}),
            at: now(),
        }
    }

    #[tokio::test]
    async fn a_held_run_is_refused_with_its_holder_and_a_lapsed_one_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        let a = Holds::with_ttl(Arc::clone(&s), "cli:a".into(), Duration::from_millis(300));
        let lost = a.hold("r1").await.unwrap();
        a.save(&state(1)).await.unwrap();
        let b = Holds::new(Arc::clone(&s), "serve:b".into());
        let e = b.hold("r1").await.unwrap_err().to_string();
        assert!(e.starts_with("agent run r1 is held by cli:a (last heard from"), "{e}");
        // Without a lease nobody writes a held run.
        let e = s.save_agent_state(&state(2)).await.unwrap_err();
        assert!(e.is_fenced(), "{e}");
        // a stops beating (it is dropped without releasing): its lease lapses.
        drop(a);
        tokio::time::sleep(Duration::from_millis(400)).await;
        b.hold("r1").await.unwrap();
        b.save(&state(2)).await.unwrap();
        assert!(!lost.is_cancelled(), "a learns at its next write");
        assert_eq!(s.run_lease("r1").await.unwrap().unwrap().epoch, 2);
        b.release("r1").await;
        assert_eq!(s.run_lease("r1").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_stale_holder_is_refused_and_told_who_took_over() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        let a = Holds::with_ttl(Arc::clone(&s), "cli:a".into(), Duration::from_secs(3600));
        let lost = a.hold("r1").await.unwrap();
        a.save(&state(1)).await.unwrap();
        // b takes the run over as if a's lease had lapsed.
        let grant = s.acquire_run_lease("r1", "serve:b", 60_000, now() + 3_700_000).await.unwrap();
        let LeaseGrant::Granted(b) = grant else { panic!("{grant:?}") };
        let e = a.save(&state(2)).await.unwrap_err().to_string();
        assert!(e.contains("was taken over; the run is now held by serve:b"), "{e}");
        assert!(lost.is_cancelled());
        s.save_agent_state_held(&state(2), Some(&b)).await.unwrap();
        assert_eq!(s.agent_state("r1", None).await.unwrap().unwrap().step, 2);
    }

    #[test]
    fn only_a_gone_process_on_this_machine_is_judged_gone() {
        assert!(!gone_here(&holder_name("cli")), "this process");
        assert!(!gone_here("cli:a"), "not a holder name");
        assert!(!gone_here("cli:another-machine:1:abcd"), "another machine");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(gone_here(&format!("cli:{}:{pid}:abcd", hostname())), "an ended process");
        // A live process that is not noesis holds no lease either.
        let mut sleeper = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(gone_here(&format!("cli:{}:{}:abcd", hostname(), sleeper.id())));
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    #[tokio::test]
    async fn heartbeats_keep_a_lease_past_its_lifetime() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        let a = Holds::with_ttl(Arc::clone(&s), "cli:a".into(), Duration::from_millis(300));
        a.hold("r1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(900)).await;
        let b = Holds::new(Arc::clone(&s), "serve:b".into());
        assert!(b.hold("r1").await.is_err(), "a's heartbeats keep it");
    }
}
