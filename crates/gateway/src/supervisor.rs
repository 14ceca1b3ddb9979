//! Keeping each upstream connected: connect, wait for the session to end,
//! mark it down, wait with backoff, reconnect — until the gateway shuts
//! down. A crashed stdio upstream comes back; the others keep serving.
//! One supervisor per slot ([`Gateway::supervise`]), above the slots
//! ([`crate::slots`]) whose states it writes.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::upstream::{self, Connector, UpstreamClient};
use crate::{Gateway, Slot, SlotState, read};

/// First wait before reconnecting a failed upstream; doubles up to
/// [`MAX_BACKOFF`], and starts over once a session has lasted a minute.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Gateway {
    /// Starts a supervisor for every upstream in `connectors` that has a
    /// slot. Returns what resolves once each has made its first attempt.
    pub(crate) fn supervise(
        self: &Arc<Self>,
        connectors: BTreeMap<String, Connector>,
    ) -> Vec<(String, tokio::sync::oneshot::Receiver<()>)> {
        let mut first = Vec::new();
        for (name, connector) in connectors {
            let Some(slot) = self.slot(&name) else {
                continue;
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            first.push((name.clone(), rx));
            tokio::spawn(supervise(Arc::downgrade(self), slot, name, connector, tx));
        }
        first
    }
}

/// Keeps one upstream connected: connect, wait for the session to end, mark
/// it down, wait (with backoff), reconnect — until the gateway shuts down
/// or a reload removes or replaces `slot` (its `stop` token).
pub(crate) async fn supervise(
    gw: Weak<Gateway>,
    slot: Arc<Slot>,
    name: String,
    connector: Connector,
    first: tokio::sync::oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut backoff = FIRST_BACKOFF;
    // The last failure to connect, logged once until it changes.
    let mut last_failure: Option<String> = None;
    loop {
        if gw.strong_count() == 0 {
            return;
        }
        let shutdown = slot.stop.clone();
        let config = slot.config.clone();
        let client = UpstreamClient::new(&name, gw.clone());
        let attempt = tokio::select! {
            r = upstream::connect_once(&config, &connector, client) => r,
            () = shutdown.cancelled() => return,
        };
        match attempt {
            Ok((upstream, session)) => {
                last_failure = None;
                let kill = upstream.kill_token();
                tracing::info!(
                    upstream = %name,
                    tools = upstream.tools.len(),
                    prompts = upstream.prompts.len(),
                    resources = upstream.resources.len(),
                    "upstream connected"
                );
                let since = Instant::now();
                if let Some(g) = gw.upgrade() {
                    g.judge_tools(&upstream).await;
                    g.set_state(&slot, SlotState::Up(Arc::new(upstream)));
                    // Clients connected meanwhile (a reconnection, or an
                    // upstream that came up after plangate began to serve)
                    // hear that the lists changed; before anyone connected
                    // there is nobody to tell.
                    g.hub.notify_tools_changed().await;
                    g.hub.notify_lists_changed().await;
                    // The sessions' log level and subscriptions, set again
                    // on a new connection (off this task: it may wait on
                    // the upstream).
                    let (g2, n2) = (g.clone(), name.clone());
                    tokio::spawn(async move { crate::notices::restore(&g2, &n2).await });
                    if let SlotState::Up(up) = read(&slot.state)
                        && up.is_modern()
                    {
                        tokio::spawn(watch_lists(gw.clone(), name.clone(), up.peer().clone()));
                    }
                }
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
                let session_ct = session.cancellation_token();
                let ended = tokio::select! {
                    r = session.waiting() => ended_because(r),
                    () = kill.cancelled() => {
                        session_ct.cancel();
                        "session failed".to_owned()
                    }
                    () = shutdown.cancelled() => {
                        session_ct.cancel();
                        if let Some(g) = gw.upgrade() {
                            g.set_state(&slot, SlotState::Down { reason: "shut down".into(), last: None });
                        }
                        tracing::info!(upstream = %name, "upstream stopped");
                        return;
                    }
                };
                tracing::warn!(upstream = %name, "upstream disconnected: {ended}; reconnecting");
                if let Some(g) = gw.upgrade() {
                    let last = match read(&slot.state) {
                        SlotState::Up(up) => Some(up),
                        _ => None,
                    };
                    g.set_state(
                        &slot,
                        SlotState::Down {
                            reason: "disconnected; reconnecting".into(),
                            last,
                        },
                    );
                    g.hub.notify_tools_changed().await;
                }
                if since.elapsed() > Duration::from_secs(60) {
                    backoff = FIRST_BACKOFF;
                }
            }
            Err(e) => {
                connect_failed(
                    &gw,
                    &slot,
                    (&name, &e.to_string()),
                    backoff,
                    &mut last_failure,
                );
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(jittered(backoff)) => {}
            () = new_sign_in(&gw, &slot.config) => {
                tracing::info!(upstream = %name, "a new OAuth sign-in is in the store; reconnecting now");
                backoff = FIRST_BACKOFF;
                continue;
            }
            () = shutdown.cancelled() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// An attempt to connect `name` failed, saying `said`: logged with when
/// it is tried again (once, until the failure changes — `/readyz` keeps
/// saying it), and the upstream marked down with why.
fn connect_failed(
    gw: &Weak<Gateway>,
    slot: &Slot,
    (name, said): (&str, &str),
    backoff: Duration,
    last_failure: &mut Option<String>,
) {
    if last_failure.as_deref() == Some(said) {
        tracing::debug!(upstream = %name, "{said} (again)");
    } else {
        tracing::error!(
            upstream = %name,
            "{said}; trying again in about {backoff:?}, then at most every {} s until it starts (the same failure is not logged again; /readyz shows it)",
            MAX_BACKOFF.as_secs()
        );
        *last_failure = Some(said.to_owned());
    }
    if let Some(g) = gw.upgrade() {
        let last = match read(&slot.state) {
            SlotState::Down { last, .. } => last,
            _ => None,
        };
        g.set_state(
            slot,
            SlotState::Down {
                reason: said.to_owned(),
                last,
            },
        );
    }
}

/// How often a down upstream's sealed OAuth credentials are looked at.
const SIGN_IN_POLL: Duration = Duration::from_secs(1);

/// Resolves when upstream `config`'s sealed OAuth credentials change — a
/// person ran `plangate upstream login`, perhaps in another process or on
/// another replica — so a down upstream reconnects at once rather than
/// after its backoff (up to 30 s). Never resolves for an upstream without
/// a person's sign-in. One small row read per second, only while down.
async fn new_sign_in(gw: &Weak<Gateway>, config: &plangate_config::UpstreamConfig) {
    let signs_in = config
        .oauth
        .as_ref()
        .is_some_and(|o| o.grant == plangate_config::OAuthGrant::AuthorizationCode);
    let store = gw.upgrade().map(|g| g.store().clone());
    let (true, Some(store)) = (signs_in, store) else {
        return std::future::pending().await;
    };
    let Ok(before) = store.upstream_credentials(&config.name).await else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(SIGN_IN_POLL).await;
        match store.upstream_credentials(&config.name).await {
            Ok(now) if now != before => return,
            _ => {}
        }
    }
}

/// Somewhere between half of `backoff` and all of it, at random: replicas
/// (and upstreams) that failed together do not all knock again at the same
/// instant. A few lines, so no backoff crate.
fn jittered(backoff: Duration) -> Duration {
    let ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(ms / 2 + rand::random_range(0..=ms / 2))
}

/// A 2026-07-28 upstream tells of list changes and resource updates only
/// on a `subscriptions/listen` stream: one is held open while the
/// connection lasts, asking for list changes and for updates of the URIs
/// sessions subscribed to there ([`crate::notices`]); it is opened again
/// whenever that set changes. A list change re-reads the upstream's lists
/// as a 2025-11-25 `list_changed` notification would; an update goes to the
/// subscribed sessions.
async fn watch_lists(gw: Weak<Gateway>, name: String, peer: rmcp::Peer<rmcp::RoleClient>) {
    use rmcp::model::{ServerNotification, SubscriptionFilter};
    let Some(mut changed) = gw
        .upgrade()
        .map(|g| crate::notices::listen_changed(&g, &name).subscribe())
    else {
        return;
    };
    loop {
        changed.borrow_and_update();
        let uris = match gw.upgrade() {
            Some(g) => crate::notices::subscribed(&g, &name),
            None => return,
        };
        let mut filter = SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        if !uris.is_empty() {
            filter.resource_subscriptions = Some(uris);
        }
        let mut subscription = match peer.listen(filter).await {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(upstream = %name, "no subscriptions/listen stream ({}); its list changes and resource updates are not heard", upstream::without_type_names(&e.to_string()));
                // Opened again when the subscriptions change (or the
                // upstream reconnects).
                tokio::select! {
                    _ = changed.changed() => continue,
                    () = peer_closed(&peer) => return,
                }
            }
        };
        loop {
            let notification = tokio::select! {
                n = subscription.next() => n,
                _ = changed.changed() => break,
            };
            let Ok(Some(notification)) = notification else {
                // The stream ended: wait for a change of subscriptions; a
                // new connection starts its own watch.
                tokio::select! {
                    _ = changed.changed() => break,
                    () = peer_closed(&peer) => return,
                }
            };
            let Some(g) = gw.upgrade() else { return };
            match notification {
                ServerNotification::ToolListChangedNotification(_)
                | ServerNotification::PromptListChangedNotification(_)
                | ServerNotification::ResourceListChangedNotification(_) => {
                    tracing::info!(upstream = %name, "upstream lists changed");
                    let n = name.clone();
                    tokio::spawn(async move { g.refresh_upstream(&n).await });
                }
                ServerNotification::ResourceUpdatedNotification(update) => {
                    let n = name.clone();
                    tokio::spawn(async move {
                        crate::notices::resource_updated(&g, &n, &update.params.uri).await;
                    });
                }
                _ => {}
            }
        }
    }
}

/// Resolves when the connection `peer` belongs to has closed.
async fn peer_closed(peer: &rmcp::Peer<rmcp::RoleClient>) {
    while !peer.is_transport_closed() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Why an upstream's session ended, in words for `/readyz` and the log
/// (not rmcp's Debug form).
fn ended_because(r: Result<rmcp::service::QuitReason, tokio::task::JoinError>) -> String {
    use rmcp::service::QuitReason;
    match r {
        Ok(QuitReason::Closed) => {
            "the server closed the connection (it exited, or its stream ended)".to_owned()
        }
        Ok(QuitReason::Cancelled) => "the session was cancelled".to_owned(),
        Ok(QuitReason::JoinError(e)) | Err(e) => format!("the session's task failed: {e}"),
        Ok(other) => format!("the session ended ({other:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_wait_stays_between_half_and_all_of_the_backoff() {
        for backoff in [FIRST_BACKOFF, MAX_BACKOFF] {
            for _ in 0..200 {
                let wait = jittered(backoff);
                assert!(wait >= backoff / 2 && wait <= backoff, "{wait:?}");
            }
        }
    }

    #[test]
    fn why_a_session_ended_is_said_in_words_not_rusts_debug_form() {
        let said = ended_because(Ok(rmcp::service::QuitReason::Closed));
        assert_eq!(
            said,
            "the server closed the connection (it exited, or its stream ended)"
        );
        assert!(!said.contains("Ok("), "{said}");
    }
}
