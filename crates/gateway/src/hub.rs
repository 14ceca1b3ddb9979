//! Routing between the two sides of the gateway while calls are in flight.
//!
//! * **Progress**: rmcp puts its own progress token on every request it
//!   sends upstream, so the downstream client's token cannot pass through.
//!   Each forwarded call registers `(upstream, upstream token) → (client,
//!   client token)`; progress from the upstream is re-sent to that client
//!   under its own token. A notification that arrives before its mapping is
//!   registered is held briefly and delivered once the mapping exists.
//!   plangate's own calls (an apply's steps) register the upstream's token
//!   alone and hear their progress themselves ([`Hub::watch_progress`]).
//! * **Requests from an upstream** (elicitation, sampling, roots) go to the
//!   client whose call caused them, handled inside that call's own request
//!   task so the transport routes them like any request related to the
//!   call. Over HTTP the upstream sends them on the call's own response
//!   stream, and plangate knows the call exactly
//!   ([`crate::upstream::related`]). Over stdio nothing on the wire says
//!   which call a request belongs to: it goes to the one client with calls
//!   in flight on that upstream (clients whose connection closed do not
//!   count); if calls of several clients are in flight, or none, it is
//!   declined and the reason logged — never sent to a client that may not
//!   be the one asked.
//! * **Log messages and resource updates** from an upstream: see
//!   [`crate::notices`].
//! * **Clients**: every initialized downstream peer is kept so catalog
//!   changes reach all of them (`notifications/tools/list_changed`).

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP
// 2025-11-25, which plangate serves and speaks upstream; forwarding them
// during a call is part of being a faithful gateway.
#![allow(deprecated)]

use parking_lot::Mutex;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestId,
};
use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc;

use crate::upstream::Downstream;
pub use crate::upstream::{Ask, marked_elicitation};

/// How long progress for a token nobody has registered yet is kept.
const ORPHAN_PROGRESS_TTL: Duration = Duration::from_secs(5);
/// At most this many orphaned progress notifications are kept.
const ORPHAN_PROGRESS_MAX: usize = 256;

struct InFlight {
    id: u64,
    upstream: String,
    client_id: u64,
    upstream_token: Option<ProgressToken>,
    /// The id of the request plangate sent upstream for this call.
    upstream_request: Option<RequestId>,
    client_token: Option<ProgressToken>,
    asks: mpsc::Sender<Ask>,
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
}

struct Watched {
    id: u64,
    upstream: String,
    token: ProgressToken,
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
}

/// Keeps a watched call's progress routed ([`Hub::watch_progress`]);
/// dropping it stops the routing.
pub struct ProgressWatch<'a> {
    hub: &'a Hub,
    id: u64,
}

impl Drop for ProgressWatch<'_> {
    fn drop(&mut self) {
        self.hub.watched.lock().retain(|w| w.id != self.id);
    }
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
    /// plangate's own calls whose progress is heard: (watch id, upstream,
    /// its token, where the notifications go).
    watched: Mutex<Vec<Watched>>,
    clients: Mutex<Vec<Client>>,
    /// Log levels and resource subscriptions ([`crate::notices`]).
    pub(crate) notices: crate::notices::Notices,
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
            upstream_request: None,
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

    /// Records the id of the request sent upstream and the progress token
    /// rmcp put on it, and delivers any progress that raced ahead of it.
    pub async fn set_upstream_request(
        &self,
        guard: &CallGuard<'_>,
        request: RequestId,
        token: ProgressToken,
    ) {
        let mut calls = self.inflight.lock();
        let Some(call) = calls.iter_mut().find(|c| c.id == guard.id) else {
            return;
        };
        call.upstream_request = Some(request);
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
            let watched = self.watched.lock();
            if let Some(w) = watched
                .iter()
                .find(|w| w.upstream == upstream && w.token == params.progress_token)
            {
                let _ = w.progress.send(params);
                return;
            }
        }
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

    /// Routes the progress `upstream` sends under `token` — the token of a
    /// call plangate sent on its own (an apply's step) — to the receiver
    /// returned, as the upstream sent it, while the guard lives; what came
    /// before this was registered is delivered first.
    pub fn watch_progress(
        &self,
        upstream: &str,
        token: &ProgressToken,
    ) -> (
        mpsc::UnboundedReceiver<ProgressNotificationParam>,
        ProgressWatch<'_>,
    ) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        // Held while the early ones are delivered, so a later one cannot
        // overtake them ([`Hub::progress`] never holds it while it takes
        // the orphans).
        let mut watched = self.watched.lock();
        {
            let mut orphans = self.orphans.lock();
            let (mine, rest): (Vec<_>, Vec<_>) = orphans
                .drain(..)
                .partition(|o| o.upstream == upstream && o.params.progress_token == *token);
            *orphans = rest;
            for o in mine {
                let _ = tx.send(o.params);
            }
        }
        watched.push(Watched {
            id,
            upstream: upstream.to_owned(),
            token: token.clone(),
            progress: tx,
        });
        (rx, ProgressWatch { hub: self, id })
    }

    /// Where a request from `upstream` goes: to the call it relates to
    /// (`related`: the upstream request id its HTTP stream carried), or,
    /// when that is not known, to the most recent call of the one client
    /// with calls in flight on `upstream`. `Err` says why it goes nowhere.
    pub fn ask_target(
        &self,
        upstream: &str,
        related: Option<&RequestId>,
    ) -> Result<mpsc::Sender<Ask>, &'static str> {
        let (_, id) = self.call_target(upstream, related)?;
        self.inflight
            .lock()
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.asks.clone())
            .ok_or("the call it relates to has just ended")
    }

    /// The client session and the in-flight call a message from `upstream`
    /// belongs to; see [`Hub::ask_target`].
    pub(crate) fn call_target(
        &self,
        upstream: &str,
        related: Option<&RequestId>,
    ) -> Result<(u64, u64), &'static str> {
        let calls = self.inflight.lock();
        if let Some(related) = related {
            return calls
                .iter()
                .find(|c| c.upstream == upstream && c.upstream_request.as_ref() == Some(related))
                .map(|c| (c.client_id, c.id))
                .ok_or("the call it relates to is no longer in progress");
        }
        let closed = self.closed_sessions();
        let mut live = calls
            .iter()
            .filter(|c| c.upstream == upstream && !closed.contains(&c.client_id));
        let Some(first) = live.next() else {
            return Err("no client call to this server is in progress");
        };
        if live.any(|c| c.client_id != first.client_id) {
            return Err(
                "calls of several clients are in progress on this server and it did not say which one it asks for (over stdio nothing on the wire does)",
            );
        }
        // The most recent call of that client carries the request.
        calls
            .iter()
            .rev()
            .find(|c| c.upstream == upstream && c.client_id == first.client_id)
            .map(|c| (c.client_id, c.id))
            .ok_or("no client call to this server is in progress")
    }

    /// Sessions whose client connection has closed.
    fn closed_sessions(&self) -> Vec<u64> {
        self.clients
            .lock()
            .iter()
            .filter(|c| c.peer.is_transport_closed())
            .map(|c| c.session)
            .collect()
    }

    /// The peer of client session `session`, if it is still connected.
    pub(crate) fn client_peer(&self, session: u64) -> Option<Peer<RoleServer>> {
        self.clients
            .lock()
            .iter()
            .find(|c| c.session == session && !c.peer.is_transport_closed())
            .map(|c| c.peer.clone())
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

    /// The listen stream [`Hub::add_subscription`] numbered `id`, while it
    /// lasts.
    pub fn listen_sink(&self, id: u64) -> Option<rmcp::service::SubscriptionSink> {
        self.subscriptions
            .lock()
            .iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, s, _)| s.clone())
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
        for sink in self.sinks(None) {
            let _ = sink.notify_resource_list_changed().await;
            let _ = sink.notify_prompt_list_changed().await;
        }
    }
}

/// What an upstream sends on its own reaches the downstream side here: its
/// requests and progress go to the calls in flight (the [`Hub`]), its log
/// messages and resource updates to the sessions that hear them
/// ([`crate::notices`]).
impl Downstream for crate::Gateway {
    fn ask_target(
        &self,
        upstream: &str,
        related: Option<&RequestId>,
    ) -> Result<mpsc::Sender<Ask>, &'static str> {
        self.hub().ask_target(upstream, related)
    }

    fn upstream_progress(&self, upstream: &str, params: ProgressNotificationParam) {
        self.hub().progress(upstream, params);
    }

    fn upstream_log(
        &self,
        upstream: &str,
        related: Option<&RequestId>,
        params: LoggingMessageNotificationParam,
    ) -> impl Future<Output = ()> + Send {
        crate::notices::log_message(self, upstream, related, params)
    }

    fn upstream_resource_updated(
        &self,
        upstream: &str,
        uri: &str,
    ) -> impl Future<Output = ()> + Send {
        crate::notices::resource_updated(self, upstream, uri)
    }
}
