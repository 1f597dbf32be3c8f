//! A run driven until it stops: the driver with the run's equipment, every
//! state kept in the store before the next step, each step published as
//! an event the front end shows, the front end asked for decisions when
//! calls wait for approval, the finished run written as frames and the
//! MCP servers started for it stopped. The front end supplies only how a
//! person sees events and answers questions.

use std::sync::Arc;
use std::time::Duration;

use noesis_agent::events::{Event, EventBus};
use noesis_agent::{Action, AgentRun, Decision, Driver, Outcome, Pending};
use noesis_llm::ChatResponse;
use noesis_runtime::CancellationToken;

use crate::hold::{Holds, holder_name};
use crate::host::{Equipped, Host};
use crate::runs::{Keep, now_ms, record_frames};
use crate::{HostError, Result};

/// What a person driving a run sees and decides.
pub trait Front: Sync {
    /// A step as it happens (the same event `noesis serve` streams).
    fn event(&self, event: &Event);

    /// Decisions on the calls that wait for approval; `None` leaves the
    /// run paused (nobody to ask). The drive is paused meanwhile, so
    /// blocking here stalls nothing.
    fn decide(&self, pending: &[Pending]) -> Result<Option<Vec<Decision>>, String>;

    /// A warning (the run was not recorded as frames).
    fn warn(&self, message: &str);

    /// The answer to a question an MCP server asks mid-call
    /// (`elicitation/create`); the call waits meanwhile. A front end with
    /// nobody to ask declines (the default), as the server expects when a
    /// person says no.
    fn elicit(&self, server: &str, question: &noesis_mcp::Elicitation) -> noesis_mcp::Elicited {
        let _ = (server, question);
        noesis_mcp::Elicited::Decline
    }
}

/// How a run is driven besides its equipment.
pub struct Drive<'a> {
    /// The host the run was equipped on.
    pub host: &'a Host,
    /// The run's equipment ([`Host::start`], [`Host::equip`]).
    pub equipped: &'a Equipped,
    /// The project its states are kept under.
    pub project_id: String,
    /// How long one tool call may take.
    pub tool_timeout: Duration,
    /// Stops the run after the current step (resumable).
    pub cancel: CancellationToken,
    /// The stored step the run was read at, for a stored run: the drive is
    /// refused when the store moved on before this driver took the run's
    /// lease (another driver stepped it meanwhile).
    pub from_step: Option<i64>,
    /// What kind of driver this is, in its lease's holder name (`cli`,
    /// `worker`; see [`holder_name`]): a refusal names it.
    pub holder: &'a str,
    /// How long its lease holds without a heartbeat: how long a driver on
    /// another machine that died keeps the run from the next one
    /// ([`crate::hold::LEASE_TTL`] unless a worker pool wants less).
    pub lease_ttl: Duration,
    /// Stream the model's replies: their text reaches the front end as
    /// `text_delta` events while it is written.
    pub stream: bool,
}

/// Drives `run` until it ends, is cancelled, or waits for decisions the
/// front end does not give; then writes a run that ended (not cancelled)
/// as frames and stops the MCP servers started for it. The run is stepped
/// under its lease (see [`crate::hold`]): refused when another driver
/// holds it, stopped when another driver took it over.
pub async fn to_end(d: Drive<'_>, run: &mut AgentRun, front: &dyn Front) -> Result<()> {
    let holds = Holds::with_ttl(Arc::clone(&d.host.store), holder_name(d.holder), d.lease_ttl);
    let lost = holds.hold(&run.id).await?;
    if let Some(from) = d.from_step {
        let now_at = d.host.store.agent_state(&run.id, None).await?.map(|s| s.step);
        if now_at.is_some_and(|at| at != from) {
            holds.release(&run.id).await;
            return Err(HostError::Message(format!(
                "agent run {}: another driver stepped it (from step {from} to {}) while this one was starting; \
                 run the command again to go on from there",
                run.id,
                now_at.unwrap_or_default()
            )));
        }
    }
    let cancel = d.cancel.clone();
    let watch = tokio::spawn(async move {
        lost.cancelled().await;
        cancel.cancel();
    });
    let driven = drive(&d, run, front, &holds).await;
    watch.abort();
    holds.release(&run.id).await;
    driven?;
    if run.outcome.as_ref().is_some_and(|o| *o != Outcome::Cancelled)
        && let Err(e) = record_frames(d.host.store.as_ref(), &d.host.project, run).await
    {
        front.warn(&format!("warning: the run was not recorded as frames: {e}"));
    }
    if let Some(mcp) = &d.equipped.started {
        mcp.shutdown().await;
    }
    Ok(())
}

async fn drive(d: &Drive<'_>, run: &mut AgentRun, front: &dyn Front, holds: &Holds) -> Result<()> {
    let prices = Arc::clone(&d.equipped.prices);
    let price = move |r: &ChatResponse| r.usage.and_then(|u| prices.cost(&r.model, u)).unwrap_or(0.0);
    // The front end is a subscriber of the run's events, as the server's
    // stream is: the driver publishes, the front end shows.
    let bus = EventBus::new(256);
    let mut events = bus.subscribe(&noesis_agent::events::run_topic(&run.id));
    let driver = Driver {
        now: &now_ms,
        price: &price,
        cancel: Some(d.cancel.clone()),
        events: Some(bus.clone()),
        tool_timeout: d.tool_timeout,
        router: Some(Arc::clone(&d.equipped.router)),
        prices: Some(Arc::clone(&d.equipped.prices)),
        stream: d.stream,
        ..Driver::new(d.equipped.provider.as_ref(), Arc::clone(&d.equipped.tools))
    };
    let keep = Keep { holds: Some(holds), ..Keep::new(d.host.store.as_ref(), d.project_id.clone()) };
    // Files are snapshotted before a batch that may change them, so the run
    // can be rewound with them (see `crate::rewind`).
    let mut keep = crate::rewind::Snapshotting {
        inner: keep,
        rewinds: d.host.home.as_deref().map(crate::rewind::Rewinds::new),
        workspace: d.equipped.tools.workspace().root().to_path_buf(),
        warn: d.host.note.clone(),
    };
    // A question a server asks mid-call reaches the front end here, while
    // the call waits for its answer.
    let mut questions = d.equipped.questions.listen();
    let driven = steps(&driver, run, &mut keep, front, &mut events, &mut questions).await;
    d.equipped.questions.stop();
    driven
}

async fn steps(
    driver: &Driver<'_>,
    run: &mut AgentRun,
    keep: &mut dyn noesis_agent::Checkpoint,
    front: &dyn Front,
    events: &mut noesis_agent::events::Subscription,
    questions: &mut tokio::sync::mpsc::UnboundedReceiver<crate::questions::Asked>,
) -> Result<()> {
    loop {
        let action = {
            let drive = driver.drive(run, keep);
            tokio::pin!(drive);
            loop {
                tokio::select! {
                    biased;
                    Some(e) = events.recv() => front.event(&e),
                    Some(asked) = questions.recv() => {
                        let answer = front.elicit(&asked.server, &asked.question);
                        let _ = asked.answer.send(answer);
                    }
                    action = &mut drive => break action.map_err(|e| HostError::Message(e.to_string()))?,
                }
            }
        };
        // Every step is shown before the run's end or a question.
        while let Some(e) = events.try_recv() {
            front.event(&e);
        }
        let Action::AwaitApproval(pending) = action else { break };
        let Some(decisions) = front.decide(&pending).map_err(HostError::Message)? else { break };
        run.decide(&decisions).map_err(|e| HostError::Message(e.to_string()))?;
    }
    Ok(())
}
