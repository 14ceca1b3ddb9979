//! Notifications (docs/design.md §13): the serving gateway follows the
//! shared event log from where the last notifier stopped, turns what
//! happened into messages for each `[[notify]]` receiver that wants them
//! (`core::notify` says what each says), puts them in the store's outbox,
//! and delivers the outbox — signed, retried with backoff for a day, each
//! attempt on the record.
//!
//! Nothing is lost by a restart: the log position the notifier has
//! handled is kept in the store and moves only once the messages of what
//! it handled are in the outbox, and a plan still waiting out its quiet
//! time holds the position back. Nothing is sent twice by replicas: a
//! message's id is the same wherever its event is noticed, and the outbox
//! holds it once.

pub mod send;

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use plangate_config::Config;
use plangate_core::notify::{
    Notice, NotifyEvent, Trigger, message_id, needs_review, next_attempt, trigger,
};
use plangate_core::operators::OPERATORS_LOG;
use plangate_core::{KeyPlanView, TOOLS_LOG};
use plangate_store::{AttemptEnd, OutboxMessage, StoredEvent, format_time_ms, now_ms};

use crate::{Engine, Gateway, operator};

/// How often the notifier reads the log for what happened.
const READ_EVERY: Duration = Duration::from_millis(500);

/// How often, at most, the notifier stores its position when it made no
/// message (each store is a commit every process notices).
const STORE_EVERY_MS: i64 = 5_000;

/// How often due deliveries are looked for (sooner when the notifier has
/// just enqueued something).
const DELIVER_EVERY: Duration = Duration::from_secs(1);

/// How long a claimed delivery is held for its claimant: longer than an
/// attempt can take ([`send::SEND_TIMEOUT`]).
const HOLD_MS: i64 = 30_000;

/// How long delivered and given-up messages stay on the record.
const KEEP_DONE_MS: i64 = 30 * 24 * 3600 * 1000;

/// The most deliveries attempted at once.
const AT_ONCE: i64 = 16;

/// A key's plan that changed and has not been quiet long enough yet.
#[derive(Debug, Clone, Copy)]
struct Changed {
    /// The first event since it was last looked at: the notifier's
    /// position may not pass it until the plan is looked at.
    first_seq: i64,
    /// When it last changed.
    last_ms: i64,
}

/// What the notifier holds between reads of the log.
#[derive(Debug, Default)]
pub struct Notifier {
    /// The last global seq read.
    after: i64,
    /// The position last stored: written again only when it moves, so an
    /// idle gateway commits nothing (a commit would make every process
    /// read its keys' logs again).
    stored: i64,
    /// When it was last stored (ms).
    stored_at: i64,
    /// Plans changed and not yet looked at, by key id.
    changed: HashMap<String, Changed>,
    /// The digest each apply under way started on, by apply id.
    applies: HashMap<String, Option<String>>,
}

impl Notifier {
    /// A notifier starting where the store says the last one stopped; on
    /// a store no notifier has read, at the log's end (what happened
    /// before there was a notifier is not announced).
    pub async fn start(engine: &Engine) -> Result<Notifier, String> {
        let store = engine.store();
        let mut after = store
            .outbox()
            .notify_cursor()
            .await
            .map_err(|e| e.to_string())?;
        if after == 0 {
            after = store.last_seq().await.map_err(|e| e.to_string())?;
            store
                .outbox()
                .advance_notify_cursor(after)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(Notifier {
            after,
            stored: after,
            ..Notifier::default()
        })
    }

    /// Reads what the log says since the last read, enqueues the messages
    /// it makes and those of plans quiet for `notify_debounce`, then moves
    /// the stored position as far as nothing is left pending. Answers how
    /// many messages were new.
    pub async fn step(&mut self, engine: &Engine, console: Option<&str>) -> Result<usize, String> {
        let config = engine.config();
        let mut out = Vec::new();
        loop {
            let page = engine
                .store()
                .events_since(self.after, 500)
                .await
                .map_err(|e| e.to_string())?;
            for e in &page {
                if !config.notify.is_empty() {
                    self.note(engine, &config, e, console, &mut out).await;
                }
                self.after = e.seq;
            }
            if page.len() < 500 {
                break;
            }
        }
        let now = now_ms();
        let debounce =
            i64::try_from(config.gateway.notify_debounce.as_millis()).unwrap_or(i64::MAX);
        let quiet: Vec<String> = self
            .changed
            .iter()
            .filter(|(_, c)| now - c.last_ms >= debounce)
            .map(|(k, _)| k.clone())
            .collect();
        for key_id in quiet {
            if let Some(view) = view_of(engine, &config, &key_id, now).await
                && needs_review(&view)
            {
                let notice = Notice::review_needed(&view, format_time_ms(now), console);
                let revision = view.standing.revision.to_string();
                let id = message_id(
                    NotifyEvent::ReviewNeeded,
                    &[&key_id, &view.standing.plan_digest, &revision],
                );
                messages_for(&config, &id, &notice, now, &mut out);
            }
            self.changed.remove(&key_id);
        }
        let outbox = engine.store().outbox();
        let new = if out.is_empty() {
            0
        } else {
            outbox.enqueue(&out).await.map_err(|e| e.to_string())?
        };
        let handled = self
            .changed
            .values()
            .map(|c| c.first_seq - 1)
            .min()
            .unwrap_or(self.after);
        // Stored at once when messages were made, else at most every few
        // seconds: a restart reads those seconds again, and the messages
        // they make are the ones already in the outbox (the same ids).
        if handled > self.stored && (!out.is_empty() || now - self.stored_at >= STORE_EVERY_MS) {
            outbox
                .advance_notify_cursor(handled)
                .await
                .map_err(|e| e.to_string())?;
            self.stored = handled;
            self.stored_at = now;
        }
        Ok(new)
    }

    /// What event `e` leads to: a message now (an apply's end, a step in
    /// doubt, a tool held back), or its key's plan to look at once quiet.
    async fn note(
        &mut self,
        engine: &Engine,
        config: &Config,
        e: &StoredEvent,
        console: Option<&str>,
        out: &mut Vec<OutboxMessage>,
    ) {
        if e.key_id == OPERATORS_LOG {
            return;
        }
        let Ok(event) = serde_json::from_str::<plangate_core::Event>(e.body.as_str()) else {
            return;
        };
        let now = now_ms();
        let at = format_time_ms(e.at_ms);
        let seq = e.seq.to_string();
        match trigger(&event.kind) {
            Trigger::Nothing => {}
            Trigger::PlanChanged if e.key_id != TOOLS_LOG => {
                let c = self.changed.entry(e.key_id.clone()).or_insert(Changed {
                    first_seq: e.seq,
                    last_ms: now,
                });
                c.last_ms = now;
            }
            Trigger::PlanChanged => {}
            Trigger::ApplyStarted {
                apply_id,
                plan_digest,
            } => {
                self.applies.insert(apply_id, plan_digest);
            }
            Trigger::ApplyEnded { apply_id, counts } => {
                let digest = self.applies.remove(&apply_id).flatten();
                let Some(view) = view_of(engine, config, &e.key_id, now).await else {
                    return;
                };
                if let Some(notice) = Notice::apply_ended(&view, counts, digest, at, console) {
                    let id = message_id(notice.event, &[&e.key_id, &seq]);
                    messages_for(config, &id, &notice, now, out);
                }
                // The plan's waiting steps may need a review again.
                self.changed.entry(e.key_id.clone()).or_insert(Changed {
                    first_seq: e.seq,
                    last_ms: now,
                });
            }
            Trigger::InDoubt { step_id, reason } => {
                let Some(view) = view_of(engine, config, &e.key_id, now).await else {
                    return;
                };
                let notice = Notice::in_doubt(&view, &step_id, &reason, at, console);
                let id = message_id(NotifyEvent::InDoubt, &[&e.key_id, &seq]);
                messages_for(config, &id, &notice, now, out);
            }
            Trigger::Quarantined { server, tool, why } => {
                let notice = Notice::tool_quarantined(&server, &tool, why, at, console);
                let id = message_id(NotifyEvent::ToolQuarantined, &[&e.key_id, &seq]);
                messages_for(config, &id, &notice, now, out);
            }
        }
    }
}

/// Key `key_id`'s plan as a person sees it now; `None` for a log that is
/// no key's, or one that cannot be read (said in the log).
async fn view_of(engine: &Engine, config: &Config, key_id: &str, now: i64) -> Option<KeyPlanView> {
    let key = match engine.store().find_key(key_id).await {
        Ok(Some(key)) => key,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(key_id, "notifications: cannot read the key: {e}");
            return None;
        }
    };
    match engine.log().state(key_id).await {
        Ok(state) => Some(operator::plan_view(config, &key, &state, now)),
        Err(e) => {
            tracing::warn!(key_id, "notifications: cannot read the key's log: {e}");
            None
        }
    }
}

/// `notice` as message `id` for every receiver that wants its event.
fn messages_for(
    config: &Config,
    id: &str,
    notice: &Notice,
    now: i64,
    out: &mut Vec<OutboxMessage>,
) {
    let text = serde_json::to_string(notice).expect("a notice serializes to JSON");
    for target in config.notify.iter().filter(|t| t.wants(notice.event)) {
        out.push(OutboxMessage {
            receiver: target.name.clone(),
            msg_id: id.to_owned(),
            event: notice.event.as_str().to_owned(),
            notice: text.clone(),
            created_at_ms: now,
            attempts: 0,
        });
    }
}

/// Delivers what is due in the outbox: each message claimed, sent to its
/// receiver as configured now, and its attempt recorded — delivered, due
/// again later ([`next_attempt`]), or given up after a day. Answers how
/// many were attempted.
pub async fn deliver_due(engine: &Engine, http: &reqwest::Client) -> Result<usize, String> {
    let outbox = engine.store().outbox();
    let due = outbox
        .claim_due(now_ms(), HOLD_MS, AT_ONCE)
        .await
        .map_err(|e| e.to_string())?;
    let config = engine.config();
    let attempts = due.iter().map(|m| attempt(engine, &config, http, m));
    let n = due.len();
    futures::future::join_all(attempts).await;
    Ok(n)
}

/// One attempt at message `m`.
async fn attempt(engine: &Engine, config: &Config, http: &reqwest::Client, m: &OutboxMessage) {
    let number = m.attempts.saturating_add(1);
    let target = config.notify.iter().find(|t| t.name == m.receiver);
    let notice = serde_json::from_str::<Notice>(&m.notice);
    let (status, end) = match (target, notice) {
        (None, _) => (
            "the receiver is no longer configured".to_owned(),
            AttemptEnd::GiveUp,
        ),
        (_, Err(e)) => (
            format!("the message cannot be read: {e}"),
            AttemptEnd::GiveUp,
        ),
        (Some(target), Ok(notice)) => {
            let sent = send::send(http, target, &m.msg_id, &notice, now_ms() / 1000).await;
            let end = if sent.delivered {
                AttemptEnd::Delivered
            } else {
                match next_attempt(m.created_at_ms, number, now_ms()) {
                    Some(at) => AttemptEnd::RetryAt(at),
                    None => AttemptEnd::GiveUp,
                }
            };
            (sent.status, end)
        }
    };
    match end {
        AttemptEnd::Delivered => {
            tracing::info!(receiver = %m.receiver, msg_id = %m.msg_id, event = %m.event, attempt = number, %status, "notification delivered");
        }
        AttemptEnd::RetryAt(at) => {
            tracing::warn!(receiver = %m.receiver, msg_id = %m.msg_id, event = %m.event, attempt = number, %status, next = %format_time_ms(at), "notification not delivered; trying again later");
        }
        AttemptEnd::GiveUp => {
            tracing::warn!(receiver = %m.receiver, msg_id = %m.msg_id, event = %m.event, attempt = number, %status, "notification given up");
        }
    }
    if let Err(e) = engine
        .store()
        .outbox()
        .record_attempt(m, number, now_ms(), &status, end)
        .await
    {
        tracing::warn!(receiver = %m.receiver, msg_id = %m.msg_id, "cannot record a notification attempt: {e}");
    }
}

/// The notifier (started where the store says, [`Notifier::start`]) and
/// the outbox's delivery, for as long as the gateway runs.
pub(crate) async fn run(gw: Weak<Gateway>, mut notifier: Notifier) {
    let Some(g) = gw.upgrade() else { return };
    let shutdown = g.shutdown.clone();
    let wake = Arc::new(tokio::sync::Notify::new());
    let http = match send::client() {
        Ok(http) => http,
        Err(e) => {
            tracing::warn!("notifications are off: {e}");
            return;
        }
    };
    drop(g);
    tokio::spawn(deliver_loop(gw.clone(), http, wake.clone()));
    loop {
        tokio::select! {
            () = tokio::time::sleep(READ_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
        let Some(g) = gw.upgrade() else { return };
        let console = g.console_link_base();
        match notifier.step(&g, console.as_deref()).await {
            Ok(0) => {}
            Ok(_) => wake.notify_one(),
            Err(e) => {
                tracing::debug!("notifications: {e}");
                // Read again from where the store says it was handled.
                if let Ok(again) = Notifier::start(&g).await {
                    notifier = again;
                }
            }
        }
    }
}

/// Delivers due messages every [`DELIVER_EVERY`], or when woken; drops
/// done ones past [`KEEP_DONE_MS`] once an hour.
async fn deliver_loop(gw: Weak<Gateway>, http: reqwest::Client, wake: Arc<tokio::sync::Notify>) {
    let mut pruned_at = 0;
    loop {
        let Some(g) = gw.upgrade() else { return };
        let shutdown = g.shutdown.clone();
        if !g.config().notify.is_empty() {
            loop {
                match deliver_due(&g, &http).await {
                    Ok(n) if n as i64 == AT_ONCE => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::debug!("notifications: {e}");
                        break;
                    }
                }
            }
        }
        let now = now_ms();
        if now - pruned_at > 3600 * 1000 {
            pruned_at = now;
            if let Err(e) = g
                .store()
                .outbox()
                .drop_done_before(now - KEEP_DONE_MS)
                .await
            {
                tracing::debug!("notifications: cannot drop old messages: {e}");
            }
        }
        drop(g);
        tokio::select! {
            () = tokio::time::sleep(DELIVER_EVERY) => {}
            () = wake.notified() => {}
            () = shutdown.cancelled() => return,
        }
    }
}
