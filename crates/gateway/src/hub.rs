//! Routing between the two sides of the gateway while calls are in flight.
//!
//! * **Progress**: rmcp puts its own progress token on every request it
//!   sends upstream, so the downstream client's token cannot pass through.
//!   Each forwarded call registers `(upstream, upstream token) → (client,
//!   client token)`; progress from the upstream is re-sent to that client
//!   under its own token. A notification that arrives before its mapping is
//!   registered is held briefly and delivered once the mapping exists.
//! * **Requests from an upstream** (elicitation, sampling, roots) go to the
//!   client whose call to that upstream is in progress, handled inside that
//!   call's own request task so the transport routes them like any request
//!   related to the call. If no call is in progress, or calls of several
//!   different clients are (plangate cannot tell which one the upstream
//!   means), the request is declined.
//! * **Clients**: every initialized downstream peer is kept so catalog
//!   changes reach all of them (`notifications/tools/list_changed`).

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP
// 2025-11-25, which plangate serves and speaks upstream; forwarding them
// during a call is part of being a faithful gateway.
#![allow(deprecated)]

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult, ProgressNotificationParam, ProgressToken,
};
use rmcp::{ErrorData, Peer, RoleServer};
use tokio::sync::{mpsc, oneshot};

/// How long progress for a token nobody has registered yet is kept.
const ORPHAN_PROGRESS_TTL: Duration = Duration::from_secs(5);
/// At most this many orphaned progress notifications are kept.
const ORPHAN_PROGRESS_MAX: usize = 256;

/// A request an upstream sent while one of its calls was in flight, waiting
/// to be asked of the calling client.
pub enum Ask {
    /// `elicitation/create`.
    Elicit(
        ElicitRequestParams,
        oneshot::Sender<Result<ElicitResult, ErrorData>>,
    ),
    /// `sampling/createMessage`.
    Sample(
        CreateMessageRequestParams,
        oneshot::Sender<Result<CreateMessageResult, ErrorData>>,
    ),
    /// `roots/list`.
    Roots(oneshot::Sender<Result<ListRootsResult, ErrorData>>),
}

impl Ask {
    /// Marks an elicitation as the named upstream's question, so the person
    /// never takes it for plangate's own (an upstream could otherwise ask
    /// "plangate: approve the plan?"). Other requests carry no text to
    /// mark.
    pub fn from_upstream(self, upstream: &str) -> Ask {
        match self {
            Ask::Elicit(params, tx) => {
                let marked = serde_json::to_value(&params).ok().and_then(|mut v| {
                    let message = v.get("message")?.as_str()?;
                    v["message"] = serde_json::Value::String(format!(
                        "[Asked by the upstream MCP server \"{upstream}\", not by plangate] {message}"
                    ));
                    serde_json::from_value(v).ok()
                });
                Ask::Elicit(marked.unwrap_or(params), tx)
            }
            other => other,
        }
    }
}

struct InFlight {
    id: u64,
    upstream: String,
    client_id: u64,
    upstream_token: Option<ProgressToken>,
    client_token: Option<ProgressToken>,
    asks: mpsc::Sender<Ask>,
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
}

struct Orphan {
    upstream: String,
    at: Instant,
    params: ProgressNotificationParam,
}

/// The shared routing state. One per gateway.
#[derive(Default)]
pub struct Hub {
    next_id: AtomicU64,
    inflight: Mutex<Vec<InFlight>>,
    orphans: Mutex<Vec<Orphan>>,
    clients: Mutex<Vec<Client>>,
    subscriptions: Mutex<Vec<(u64, rmcp::service::SubscriptionSink, Option<String>)>>,
}

/// A connected client session and the key it runs as.
struct Client {
    peer: Peer<RoleServer>,
    session: u64,
    key_id: Option<String>,
}

/// A registered in-flight call; dropping it unregisters the call.
pub struct CallGuard<'a> {
    hub: &'a Hub,
    id: u64,
    /// Requests the upstream sends during this call.
    pub asks: mpsc::Receiver<Ask>,
    /// Progress for this call, already under the client's token, in the
    /// order the upstream sent it.
    pub progress: mpsc::UnboundedReceiver<ProgressNotificationParam>,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.hub.inflight.lock().retain(|c| c.id != self.id);
    }
}

impl Hub {
    /// Registers a call about to be sent to `upstream` for the client
    /// session numbered `client_id`, whose
    /// own progress token (if it asked for progress) is `client_token`.
    pub fn begin_call(
        &self,
        upstream: &str,
        client_id: u64,
        client_token: Option<ProgressToken>,
    ) -> CallGuard<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(4);
        let (ptx, prx) = mpsc::unbounded_channel();
        self.inflight.lock().push(InFlight {
            id,
            upstream: upstream.to_owned(),
            client_id,
            upstream_token: None,
            client_token,
            asks: tx,
            progress: ptx,
        });
        CallGuard {
            hub: self,
            id,
            asks: rx,
            progress: prx,
        }
    }

    /// Records the token rmcp put on the upstream request, and delivers any
    /// progress that raced ahead of it.
    pub async fn set_upstream_token(&self, guard: &CallGuard<'_>, token: ProgressToken) {
        let mut calls = self.inflight.lock();
        let Some(call) = calls.iter_mut().find(|c| c.id == guard.id) else {
            return;
        };
        call.upstream_token = Some(token.clone());
        let Some(client_token) = call.client_token.clone() else {
            return;
        };
        let mut orphans = self.orphans.lock();
        let (mine, rest): (Vec<_>, Vec<_>) = orphans
            .drain(..)
            .partition(|o| o.upstream == call.upstream && o.params.progress_token == token);
        *orphans = rest;
        for o in mine {
            let mut p = o.params;
            p.progress_token = client_token.clone();
            let _ = call.progress.send(p);
        }
    }

    /// Progress from `upstream`, in the order it arrived: queued for the
    /// call it belongs to (under the client's token), dropped if the client
    /// did not ask, held briefly if the call is not registered yet.
    pub fn progress(&self, upstream: &str, params: ProgressNotificationParam) {
        {
            let calls = self.inflight.lock();
            if let Some(call) = calls.iter().find(|c| {
                c.upstream == upstream && c.upstream_token.as_ref() == Some(&params.progress_token)
            }) {
                if let Some(token) = &call.client_token {
                    let mut p = params;
                    p.progress_token = token.clone();
                    let _ = call.progress.send(p);
                }
                return;
            }
        }
        let mut orphans = self.orphans.lock();
        let now = Instant::now();
        orphans.retain(|o| now.duration_since(o.at) < ORPHAN_PROGRESS_TTL);
        if orphans.len() < ORPHAN_PROGRESS_MAX {
            orphans.push(Orphan {
                upstream: upstream.to_owned(),
                at: now,
                params,
            });
        }
    }

    /// The ask channel of the one client with calls in flight on
    /// `upstream`, or `None` if there is no such call or the calls belong to
    /// several clients.
    pub fn ask_target(&self, upstream: &str) -> Option<mpsc::Sender<Ask>> {
        let calls = self.inflight.lock();
        let mut on_upstream = calls.iter().filter(|c| c.upstream == upstream);
        let first = on_upstream.next()?;
        if on_upstream.any(|c| c.client_id != first.client_id) {
            return None;
        }
        // The most recent call of that client carries the request.
        calls
            .iter()
            .rev()
            .find(|c| c.upstream == upstream)
            .map(|c| c.asks.clone())
    }

    /// Remembers an initialized client session (numbered `session`,
    /// running as `key_id`) so list changes reach it.
    pub fn add_client(&self, peer: Peer<RoleServer>, session: u64, key_id: Option<String>) {
        let mut clients = self.clients.lock();
        clients.retain(|c| !c.peer.is_transport_closed());
        clients.push(Client {
            peer,
            session,
            key_id,
        });
    }

    fn peers(&self, filter: impl Fn(&Client) -> bool) -> Vec<Peer<RoleServer>> {
        let mut clients = self.clients.lock();
        clients.retain(|c| !c.peer.is_transport_closed());
        clients
            .iter()
            .filter(|c| filter(c))
            .map(|c| c.peer.clone())
            .collect()
    }

    /// Remembers a 2026-07-28 listen stream (of `key_id`'s client) so list
    /// changes reach it; returns its handle for [`Hub::remove_subscription`].
    pub fn add_subscription(
        &self,
        sink: rmcp::service::SubscriptionSink,
        key_id: Option<String>,
    ) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.subscriptions.lock().push((id, sink, key_id));
        id
    }

    /// Forgets a listen stream that ended.
    pub fn remove_subscription(&self, id: u64) {
        self.subscriptions.lock().retain(|(i, _, _)| *i != id);
    }

    fn sinks(&self, key_id: Option<&str>) -> Vec<rmcp::service::SubscriptionSink> {
        self.subscriptions
            .lock()
            .iter()
            .filter(|(_, _, k)| key_id.is_none() || k.as_deref() == key_id)
            .map(|(_, s, _)| s.clone())
            .collect()
    }

    /// Tells every connected client that the tool list changed.
    pub async fn notify_tools_changed(&self) {
        for peer in self.peers(|_| true) {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!("tools/list_changed not delivered: {e}");
            }
        }
        for sink in self.sinks(None) {
            let _ = sink.notify_tool_list_changed().await;
        }
    }

    /// Tells the other sessions of `key_id` that their tool list changed
    /// (the key's mode changed: `exit_plan_mode` comes or goes).
    pub async fn notify_key_tools_changed(&self, key_id: &str, except_session: u64) {
        for peer in
            self.peers(|c| c.key_id.as_deref() == Some(key_id) && c.session != except_session)
        {
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    /// Tells every connected client that the resource or prompt lists
    /// changed.
    pub async fn notify_lists_changed(&self) {
        for peer in self.peers(|_| true) {
            let _ = peer.notify_resource_list_changed().await;
            let _ = peer.notify_prompt_list_changed().await;
        }
    }
}
