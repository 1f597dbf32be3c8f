//! A question a run's MCP server asks a person mid-call
//! (`elicitation/create`), relayed to whoever drives the run: the tool call
//! waits while [`crate::drive`] puts it to its front end ([`Front::elicit`]:
//! the terminal asks, a front end with nobody to ask declines). While no
//! drive listens (a run equipped but not driven), questions are declined.
//!
//! [`Front::elicit`]: crate::drive::Front::elicit

use std::sync::{Arc, Mutex};

use noesis_mcp::{Elicitation, Elicited, Elicitor};
use tokio::sync::{mpsc, oneshot};

/// One question on its way to the front end.
pub struct Asked {
    /// The server that asks.
    pub server: String,
    /// The question.
    pub question: Elicitation,
    /// Where the answer goes (dropped: declined).
    pub answer: oneshot::Sender<Elicited>,
}

/// The relay of one run's questions (an [`Elicitor`] lent to its MCP
/// servers).
#[derive(Clone, Default)]
pub struct Questions {
    to: Arc<Mutex<Option<mpsc::UnboundedSender<Asked>>>>,
}

impl Questions {
    /// Questions from now on come here (the last listener wins).
    pub fn listen(&self) -> mpsc::UnboundedReceiver<Asked> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.to.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tx);
        rx
    }

    /// Nobody listens any more: questions are declined.
    pub fn stop(&self) {
        *self.to.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

impl Elicitor for Questions {
    fn elicit<'a>(
        &'a self,
        server: &'a str,
        question: Elicitation,
    ) -> std::pin::Pin<Box<dyn Future<Output = Elicited> + Send + 'a>> {
        let to = self.to.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        Box::pin(async move {
            let Some(to) = to else { return Elicited::Decline };
            let (answer, answered) = oneshot::channel();
            if to.send(Asked { server: server.to_owned(), question, answer }).is_err() {
                return Elicited::Decline;
            }
            answered.await.unwrap_or(Elicited::Decline)
        })
    }
}
