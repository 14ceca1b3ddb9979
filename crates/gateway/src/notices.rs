//! What upstreams say outside a call's answer — log messages
//! (`notifications/message`) and resource updates
//! (`notifications/resources/updated`) — and what client sessions asked to
//! hear: a log level (`logging/setLevel`) and resource subscriptions
//! (`resources/subscribe`, `resources/unsubscribe`).
//!
//! plangate holds one session per upstream for all its clients, so both are
//! multiplexed here:
//!
//! * **Log levels.** Each session's level is kept; each upstream that
//!   declares logging is set to the most verbose level any session asked
//!   for, and every message is filtered again per session before it is
//!   sent. A message that relates to a call (over HTTP: it came on that
//!   call's stream; over stdio: the one client with calls in flight there)
//!   goes to that call's client only, unless it asked for a higher level. A
//!   message that relates to no call goes only to sessions that set a level
//!   — an upstream's log can speak of other keys' work, so no session hears
//!   it without asking. With several upstreams the `logger` is prefixed by
//!   the upstream's name (`site` or `site/LOGGER`). A 2026-07-28 upstream
//!   has no `logging/setLevel`: each request carries its caller's level
//!   (`_meta` `logLevel`, see `server::forward::modern_meta`), so it logs
//!   only for callers that asked.
//! * **Subscriptions.** A session subscribes to an exposed URI; plangate
//!   subscribes upstream once per URI while any session wants it, and
//!   unsubscribes when the last one leaves. An update goes to exactly the
//!   sessions subscribed to that URI, under its exposed URI. After an
//!   upstream reconnects, its subscriptions and log level are set again.
//!   A 2026-07-28 upstream has no `resources/subscribe`: its subscribed
//!   URIs go into the filter of the `subscriptions/listen` stream plangate
//!   holds open to it (`supervisor::watch_lists`), opened again whenever
//!   the set changes; an update sent while it reopens is lost.

// Logging and resources/subscribe are deprecated by SEP-2577 and
// 2026-07-28 but remain part of MCP 2025-11-25, which plangate serves and
// speaks upstream.
#![allow(deprecated)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use parking_lot::Mutex;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, RequestId, SetLevelRequestParams,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::{ErrorData, Peer, RoleServer};
use serde_json::json;
use tokio::sync::watch;

use crate::Gateway;

/// Sessions' log levels and resource subscriptions. One per gateway, in
/// the hub.
#[derive(Default)]
pub struct Notices {
    /// Client session → the level it asked for.
    levels: Mutex<HashMap<u64, LoggingLevel>>,
    /// (upstream, the upstream's own URI) → who is subscribed to it.
    subscriptions: Mutex<BTreeMap<(String, String), BTreeSet<Subscriber>>>,
    /// Per 2026-07-28 upstream: a count bumped when the URIs subscribed
    /// there change, so its `subscriptions/listen` stream is opened again
    /// with them. A watch channel: every watcher sees every change, and a
    /// change made while a stream is being opened is not lost.
    listens: Mutex<HashMap<String, watch::Sender<u64>>>,
}

/// Who asked for a resource's updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subscriber {
    /// A 2025-11-25 client session (`resources/subscribe`).
    Session(u64),
    /// A 2026-07-28 client's `subscriptions/listen` stream, by its id in
    /// the hub ([`crate::hub::Hub::add_subscription`]).
    Listen(u64),
}

/// A level's severity, least severe (most verbose) first, as the spec
/// orders them (RFC 5424).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl Notices {
    /// The most verbose level any live session asked for.
    fn floor(&self, gw: &Gateway) -> Option<LoggingLevel> {
        let mut levels = self.levels.lock();
        levels.retain(|session, _| gw.hub().client_peer(*session).is_some());
        levels.values().copied().min_by_key(|l| rank(*l))
    }

    /// Forgets what a session asked for (its connection closed). A URI
    /// nobody wants any more stays subscribed upstream until the upstream
    /// reconnects (its updates then reach no one).
    fn forget(&self, session: u64) {
        self.levels.lock().remove(&session);
        self.subscriptions.lock().retain(|_, sessions| {
            sessions.remove(&Subscriber::Session(session));
            !sessions.is_empty()
        });
    }
}

/// Whether upstream `name` declared `what` (`logging`, or
/// `resources.subscribe`) when it connected.
fn declares(gw: &Gateway, name: &str, what: &str) -> bool {
    let Some(up) = gw.upstream(name) else {
        return false;
    };
    let Some(info) = up.peer().peer_info() else {
        return false;
    };
    match what {
        "logging" => info.capabilities.logging.is_some(),
        _ => info
            .capabilities
            .resources
            .as_ref()
            .and_then(|r| r.subscribe)
            .unwrap_or(false),
    }
}

/// `logging/setLevel` from client session `session`.
pub async fn set_level(gw: &Gateway, session: u64, level: LoggingLevel) {
    gw.hub().notices.levels.lock().insert(session, level);
    apply_level(gw, None).await;
}

/// The level session `session` asked for with `logging/setLevel`, if any:
/// a 2026-07-28 upstream has no such method and reads it with each request
/// instead (`_meta` `logLevel`).
pub fn level_of(gw: &Gateway, session: u64) -> Option<LoggingLevel> {
    gw.hub().notices.levels.lock().get(&session).copied()
}

/// Sets each upstream that declares logging (or only `only`) to the most
/// verbose level a session asked for. Failures are logged: a client's
/// setLevel succeeds for plangate's own filtering either way.
async fn apply_level(gw: &Gateway, only: Option<&str>) {
    let Some(floor) = gw.hub().notices.floor(gw) else {
        return;
    };
    for name in gw.up_upstreams() {
        if only.is_some_and(|o| o != name) || !declares(gw, &name, "logging") {
            continue;
        }
        // A 2026-07-28 upstream reads the level with each request.
        let Some(up) = gw.upstream(&name).filter(|up| !up.is_modern()) else {
            continue;
        };
        let sent = up.timed(up.peer().set_level(SetLevelRequestParams::new(floor)));
        if let Err(e) = Box::pin(sent).await {
            tracing::info!(upstream = %name, "logging/setLevel not taken: {e}");
        }
    }
}

/// A log message from upstream `upstream`, `related` to the call whose
/// HTTP stream carried it (if known): sent to the sessions that should hear
/// it (see the module's doc).
pub async fn log_message(
    gw: &Gateway,
    upstream: &str,
    related: Option<&RequestId>,
    mut params: LoggingMessageNotificationParam,
) {
    let hub = gw.hub();
    if gw.catalog().namespaced {
        params.logger = Some(match params.logger.take() {
            Some(logger) => format!("{upstream}/{logger}"),
            None => upstream.to_owned(),
        });
    }
    let levels = hub.notices.levels.lock().clone();
    let hears = |session: &u64, default: bool| match levels.get(session) {
        Some(level) => rank(params.level) >= rank(*level),
        None => default,
    };
    let targets: Vec<u64> = match hub.call_target(upstream, related) {
        Ok((session, _)) => hears(&session, true)
            .then_some(session)
            .into_iter()
            .collect(),
        Err(_) => levels.keys().filter(|s| hears(s, false)).copied().collect(),
    };
    for session in targets {
        if let Some(peer) = hub.client_peer(session) {
            send_log(&peer, params.clone()).await;
        } else {
            hub.notices.forget(session);
        }
    }
}

async fn send_log(peer: &Peer<RoleServer>, params: LoggingMessageNotificationParam) {
    if let Err(e) = Box::pin(peer.notify_logging_message(params)).await {
        tracing::debug!("log message not delivered: {e}");
    }
}

/// Whether the exposed `uri` belongs to an upstream that takes resource
/// subscriptions (a 2026-07-28 client's listen filter keeps only those).
pub fn can_subscribe(gw: &Gateway, uri: &str) -> bool {
    route(gw, uri).is_ok_and(|(upstream, _)| declares(gw, &upstream, "subscribe"))
}

/// `resources/subscribe` from `who` to the exposed `uri`.
pub async fn subscribe(gw: &Gateway, who: Subscriber, uri: &str) -> Result<(), ErrorData> {
    let (upstream, original) = route(gw, uri)?;
    let first = {
        let mut subs = gw.hub().notices.subscriptions.lock();
        let sessions = subs
            .entry((upstream.clone(), original.clone()))
            .or_default();
        let first = sessions.is_empty();
        sessions.insert(who);
        first
    };
    if first && let Err(e) = upstream_subscribe(gw, &upstream, &original, true).await {
        remove(gw, who, &upstream, &original);
        return Err(e);
    }
    Ok(())
}

/// `resources/unsubscribe` from `who`.
pub async fn unsubscribe(gw: &Gateway, who: Subscriber, uri: &str) -> Result<(), ErrorData> {
    let (upstream, original) = route(gw, uri)?;
    if remove(gw, who, &upstream, &original) {
        upstream_subscribe(gw, &upstream, &original, false).await?;
    }
    Ok(())
}

/// Removes a subscription; true if nobody is subscribed to the URI any
/// more.
fn remove(gw: &Gateway, who: Subscriber, upstream: &str, original: &str) -> bool {
    let mut subs = gw.hub().notices.subscriptions.lock();
    let key = (upstream.to_owned(), original.to_owned());
    let Some(sessions) = subs.get_mut(&key) else {
        return false;
    };
    sessions.remove(&who);
    if sessions.is_empty() {
        subs.remove(&key);
        return true;
    }
    false
}

fn route(gw: &Gateway, uri: &str) -> Result<(String, String), ErrorData> {
    gw.catalog().route_uri(uri).ok_or_else(|| {
        ErrorData::resource_not_found(
            format!("unknown resource: {uri}"),
            Some(json!({"uri": uri})),
        )
    })
}

async fn upstream_subscribe(
    gw: &Gateway,
    upstream: &str,
    original: &str,
    on: bool,
) -> Result<(), ErrorData> {
    let Some(up) = gw.upstream(upstream) else {
        return Err(ErrorData::internal_error(
            format!("upstream {upstream} is down; nothing was sent — try again once it is up"),
            Some(plangate_core::Code::UpstreamDown.error_data()),
        ));
    };
    if !declares(gw, upstream, "subscribe") {
        return Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("upstream {upstream} does not support resource subscriptions"),
            Some(json!({"upstream": upstream})),
        ));
    }
    if up.is_modern() {
        // 2026-07-28 has no resources/subscribe: the URIs travel in the
        // filter of the upstream's subscriptions/listen stream, opened again
        // with the new set (`supervisor::watch_lists`).
        listen_changed(gw, upstream).send_modify(|n| *n = n.wrapping_add(1));
        return Ok(());
    }
    let result = if on {
        Box::pin(up.timed(up.peer().subscribe(SubscribeRequestParams::new(original)))).await
    } else {
        Box::pin(
            up.timed(
                up.peer()
                    .unsubscribe(UnsubscribeRequestParams::new(original)),
            ),
        )
        .await
    };
    result.map_err(|e| crate::upstream::service_error(upstream, e))
}

/// The count bumped when the URIs subscribed on 2026-07-28 upstream
/// `upstream` change (`subscribe()` it to watch).
pub(crate) fn listen_changed(gw: &Gateway, upstream: &str) -> watch::Sender<u64> {
    gw.hub()
        .notices
        .listens
        .lock()
        .entry(upstream.to_owned())
        .or_insert_with(|| watch::Sender::new(0))
        .clone()
}

/// The upstream's own URIs some session is subscribed to on `upstream`.
pub(crate) fn subscribed(gw: &Gateway, upstream: &str) -> Vec<String> {
    gw.hub()
        .notices
        .subscriptions
        .lock()
        .keys()
        .filter(|(u, _)| u == upstream)
        .map(|(_, uri)| uri.clone())
        .collect()
}

/// An update of `uri` (the upstream's own URI) from `upstream`: told to
/// the sessions and listen streams subscribed to it, under its exposed URI.
pub async fn resource_updated(gw: &Gateway, upstream: &str, uri: &str) {
    let subscribers: Vec<Subscriber> = gw
        .hub()
        .notices
        .subscriptions
        .lock()
        .get(&(upstream.to_owned(), uri.to_owned()))
        .map(|s| s.iter().copied().collect())
        .unwrap_or_default();
    let ns = gw.catalog().namespaced.then_some(upstream);
    let exposed = plangate_core::expose_uri(ns, uri);
    for who in subscribers {
        let delivered = match who {
            Subscriber::Session(session) => match gw.hub().client_peer(session) {
                Some(peer) => {
                    let params =
                        rmcp::model::ResourceUpdatedNotificationParam::new(exposed.clone());
                    if let Err(e) = Box::pin(peer.notify_resource_updated(params)).await {
                        tracing::debug!("resource update not delivered: {e}");
                    }
                    true
                }
                None => false,
            },
            Subscriber::Listen(id) => match gw.hub().listen_sink(id) {
                Some(sink) => {
                    if let Err(e) = sink.notify_resource_updated(exposed.clone()).await {
                        tracing::debug!("resource update not delivered: {e}");
                    }
                    true
                }
                None => false,
            },
        };
        if !delivered && remove(gw, who, upstream, uri) {
            let _ = upstream_subscribe(gw, upstream, uri, false).await;
        }
    }
}

/// After `upstream` (re)connected: its log level and subscriptions as the
/// sessions asked for them.
pub async fn restore(gw: &Gateway, upstream: &str) {
    apply_level(gw, Some(upstream)).await;
    if gw.upstream(upstream).is_some_and(|up| up.is_modern()) {
        // Its listen stream is opened with the subscriptions as they are.
        return;
    }
    for uri in subscribed(gw, upstream) {
        if let Err(e) = upstream_subscribe(gw, upstream, &uri, true).await {
            tracing::info!(upstream, uri, "resubscribing failed: {}", e.message);
        }
    }
}
