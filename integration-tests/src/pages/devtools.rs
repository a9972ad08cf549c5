//! A raw DevTools connection: commands and their JSON results, and every event as JSON
//! ([`RawEvent`]), whatever the browser's protocol version.
//!
//! It is chromiumoxide's own websocket connection ([`Connection`]) with an event type that
//! parses any event, driven by a task of its own. Invariants: every call gets an answer
//! (the result, the browser's error, or "closed" once the connection is gone); events are
//! handed over in arrival order; the task ends when the connection fails or the
//! [`DevTools`] is dropped.

use std::collections::HashMap;

use chromiumoxide::cdp::browser_protocol::target::SessionId;
use chromiumoxide::error::CdpError;
use chromiumoxide::types::{CallId, EventMessage, Message, Method, MethodId};
use chromiumoxide::Connection;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::BoxError;

/// A DevTools event as JSON: method, parameters, and the session (tab) it is about.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RawEvent {
    /// E.g. `Network.requestWillBeSent`.
    pub(crate) method: String,
    /// The event's parameters (`null` when it has none).
    #[serde(default)]
    pub(crate) params: Value,
    /// The session (attached tab) it is about; `None` for the browser's own.
    #[serde(rename = "sessionId")]
    pub(crate) session_id: Option<String>,
}

impl Method for RawEvent {
    fn identifier(&self) -> MethodId {
        self.method.clone().into()
    }
}

impl EventMessage for RawEvent {
    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
}

/// A command for the connection's task, and where its result goes.
struct Call {
    method: &'static str,
    session: Option<String>,
    params: Value,
    reply: oneshot::Sender<Result<Value, String>>,
}

/// A DevTools connection driven by a task; closed when dropped.
#[derive(Debug)]
pub(crate) struct DevTools {
    calls: mpsc::UnboundedSender<Call>,
    task: JoinHandle<()>,
}

impl DevTools {
    /// Connects to the DevTools endpoint `url` (`ws://...`); `on_event` gets every event,
    /// `on_failure` why the connection failed, if it does.
    pub(crate) async fn connect(
        url: &str,
        on_event: impl FnMut(RawEvent) + Send + 'static,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<DevTools, BoxError> {
        let connection = Connection::<RawEvent>::connect(url)
            .await
            .map_err(|e| format!("a DevTools connection to {url}: {e}"))?;
        let (calls, queued) = mpsc::unbounded_channel();
        let driver = Driver {
            connection,
            pending: HashMap::new(),
            on_event,
        };
        let task = tokio::spawn(async move {
            if let Err(failure) = driver.run(queued).await {
                on_failure(failure);
            }
        });
        Ok(DevTools { calls, task })
    }

    /// Runs `method` with `params`, on the attached tab `session` or the browser (`None`),
    /// and returns its result.
    pub(crate) async fn call(
        &self,
        method: &'static str,
        session: Option<String>,
        params: Value,
    ) -> Result<Value, BoxError> {
        let (reply, result) = oneshot::channel();
        let call = Call {
            method,
            session,
            params,
            reply,
        };
        let closed = || format!("{method}: the DevTools connection closed");
        self.calls.send(call).map_err(|_| closed())?;
        let result = result.await.map_err(|_| closed())?;
        result.map_err(|e| format!("{method}: {e}").into())
    }
}

impl Drop for DevTools {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The task's state: the connection, the calls awaiting their answers, the event sink.
struct Driver<F> {
    connection: Connection<RawEvent>,
    pending: HashMap<CallId, oneshot::Sender<Result<Value, String>>>,
    on_event: F,
}

impl<F: FnMut(RawEvent)> Driver<F> {
    /// Sends the queued calls, answers them and hands over the events until the
    /// connection closes (`Ok`) or fails (`Err`), or the [`DevTools`] is dropped.
    async fn run(mut self, mut queued: mpsc::UnboundedReceiver<Call>) -> Result<(), String> {
        loop {
            tokio::select! {
                call = queued.recv() => match call {
                    Some(call) => self.submit(call),
                    None => return Ok(()),
                },
                message = self.connection.next() => match message {
                    Some(Ok(Message::Response(response))) => {
                        let result = match response.error {
                            Some(error) => Err(error.to_string()),
                            None => Ok(response.result.unwrap_or_default()),
                        };
                        if let Some(reply) = self.pending.remove(&response.id) {
                            let _ = reply.send(result);
                        }
                    }
                    Some(Ok(Message::Event(event))) => (self.on_event)(event),
                    // Not even JSON with a method: nothing to hand over.
                    Some(Err(CdpError::InvalidMessage(text, err))) => {
                        tracing::warn!(%err, text, "unparsable DevTools message");
                    }
                    Some(Err(err)) => return Err(err.to_string()),
                    None => return Ok(()),
                },
            }
        }
    }

    /// Queues `call` on the connection (sent as the connection is polled).
    fn submit(&mut self, call: Call) {
        let session = call.session.map(SessionId::new);
        match self
            .connection
            .submit_command(call.method.into(), session, call.params)
        {
            Ok(id) => {
                self.pending.insert(id, call.reply);
            }
            Err(err) => {
                let _ = call.reply.send(Err(err.to_string()));
            }
        }
    }
}
