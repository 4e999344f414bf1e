//! A publish on its way, as every backend gives it: its own module, so the
//! backends and the store both name it without naming each other.

use std::sync::Arc;

use crate::base::error::Result;
use crate::runtime;

/// A publish on its way: resolves once the store has the message.
#[must_use = "a publish's future says whether the store took the message"]
pub struct Publish(PublishState);

enum PublishState {
    Done(Option<Result<()>>),
    /// The store's answer to come, and the connection it comes on.
    Waiting(tokio::sync::oneshot::Receiver<Result<Box<[u8]>>>, Option<Arc<dyn runtime::ReadWhileBlocked>>),
}

impl Publish {
    /// A publish that ended within the call.
    pub(crate) fn done(r: Result<()>) -> Publish {
        Publish(PublishState::Done(Some(r)))
    }

    /// A publish sent over a connection: its answer comes on `rx`, read by
    /// the connection's task or by a thread blocked on it (`reader`).
    pub(crate) fn waiting(rx: tokio::sync::oneshot::Receiver<Result<Box<[u8]>>>, reader: Option<Arc<dyn runtime::ReadWhileBlocked>>) -> Publish {
        Publish(PublishState::Waiting(rx, reader))
    }

    /// Blocks until the store has the message (at once in the owning
    /// process). Must not be called from inside an async task.
    pub fn wait(self) -> Result<()> {
        match self.0 {
            PublishState::Done(r) => r.unwrap_or(Ok(())),
            PublishState::Waiting(..) => runtime::block_on(self),
        }
    }
}

impl std::future::Future for Publish {
    type Output = Result<()>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<()>> {
        match &mut self.0 {
            PublishState::Done(r) => std::task::Poll::Ready(r.take().unwrap_or(Ok(()))),
            PublishState::Waiting(rx, reader) => {
                let p = std::pin::Pin::new(rx).poll(cx);
                if p.is_pending() {
                    runtime::read_while_blocked(|| reader.clone());
                }
                p.map(|r| match r {
                    Ok(r) => r.map(|_| ()),
                    Err(_) => Err(crate::net::client::publish_cut_off()),
                })
            }
        }
    }
}
