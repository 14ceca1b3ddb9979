//! plangate's MCP edge.
//!
//! This crate owns the two MCP faces of plangate: the server that agents
//! connect to (stdio or Streamable HTTP, via rmcp) and the clients that talk
//! to upstream servers (child processes or Streamable HTTP, via rmcp). It
//! converts between MCP and the domain core in exactly one place per
//! direction — [`catalog`] for names and effects, [`refusal`] for refusals —
//! and decides nothing itself that the core can decide.
//!
//! It must never write an argument value to a log line, never hand-write
//! JSON-RPC (rmcp is the protocol layer on both sides), and never let a call
//! through that policy refused: on any doubt (no key, unknown key, store
//! down, upstream down) it fails closed with a clear answer.
//!
//! Building and serving are separate steps ([`Gateway::build`], then
//! [`serve_stdio`] or [`http::router`]), so tests drive the gateway in
//! process without sockets. Every upstream has a supervisor task that
//! connects it, notices when its session ends, and reconnects with backoff;
//! the catalog is rebuilt (and clients told) whenever an upstream comes,
//! goes or changes its lists.

pub mod apply;
pub mod apps;
pub mod auth;
pub mod catalog;
pub mod console;
pub mod http;
pub mod hub;
pub mod limits;
pub mod log;
pub mod memory;
pub mod metrics;
pub mod operator;
pub mod parked;
pub mod plan;
pub mod quick_json;
pub mod rate;
pub mod refusal;
pub mod review;
mod server;
pub mod session_guard;
pub mod stdio;
pub mod tool_pins;
pub mod tools;
pub mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use std::time::{Duration, Instant};

use plangate_config::{Config, UpstreamConfig};
use plangate_core::{Actor, Channel, Event, PinnedDefinition, TOOLS_LOG, ToolPins};
use plangate_store::{KeyMaterial, Store};
use tokio_util::sync::CancellationToken;

pub use catalog::{Catalog, CatalogTool};
pub use server::{GatewayHandler, server_capabilities};
pub use upstream::{Connector, Upstream, UpstreamClient, UpstreamError};

/// The gateway's own tools (DESIGN §5), without the configured prefix.
/// Their names are reserved even before every one of them is served, so an
/// upstream tool can never take a name the gateway will need.
pub const GATEWAY_TOOLS: [&str; 6] = [
    "begin_session",
    "get_plan",
    "discard_plan",
    "apply_plan",
    "exit_plan_mode",
    "end_session",
];

/// First wait before reconnecting a failed upstream; doubles up to
/// [`MAX_BACKOFF`], and starts over once a session has lasted a minute.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the gateway knows about one configured upstream right now.
#[derive(Clone)]
enum SlotState {
    /// The first connection attempt has not finished.
    Connecting,
    /// Connected and serving.
    Up(Arc<Upstream>),
    /// Not connected; `last` keeps the lists it had, so calls to its tools
    /// fail fast with `upstream_unavailable` instead of "unknown tool".
    Down {
        reason: String,
        last: Option<Arc<Upstream>>,
    },
}

struct Slot {
    config: UpstreamConfig,
    state: RwLock<SlotState>,
}

/// A running gateway: config, store, upstream sessions and the catalog
/// built from them. Shared by every client session.
pub struct Gateway {
    config: Config,
    redactor: plangate_core::Redactor,
    rates: rate::RateLimits,
    store: Arc<dyn Store>,
    material: KeyMaterial,
    log: Arc<log::KeyLog>,
    /// The log of tool pins ([`plangate_core::TOOLS_LOG`]).
    pins: Arc<log::KeyLog<ToolPins>>,
    /// The pins as last read: what the catalog is built against.
    pinned: RwLock<Arc<ToolPins>>,
    owner: String,
    slots: BTreeMap<String, Slot>,
    catalog: RwLock<Arc<Catalog>>,
    hub: hub::Hub,
    parked: parked::Parked,
    keys: auth::KeyCache,
    watch: parking_lot::Mutex<SweepWatch>,
    metrics: metrics::Metrics,
    trimmer: Arc<memory::Trimmer>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock.write() = value;
}

impl Gateway {
    /// Starts a supervisor for every enabled upstream in `config` and waits
    /// until each has made its first connection attempt. Upstreams that
    /// cannot be reached are logged and retried; the others serve.
    pub async fn build(
        config: Config,
        store: Arc<dyn Store>,
        material: KeyMaterial,
    ) -> Arc<Gateway> {
        let connectors = config
            .enabled_upstreams()
            .map(|u| (u.name.clone(), upstream::connector_for(u)))
            .collect();
        Self::start(config, store, material, connectors).await
    }

    /// Like [`Gateway::build`], with the connector of each upstream given —
    /// e.g. in-process transports in tests. Upstreams without a connector
    /// are not started.
    pub async fn start(
        config: Config,
        store: Arc<dyn Store>,
        material: KeyMaterial,
        connectors: BTreeMap<String, Connector>,
    ) -> Arc<Gateway> {
        let slots = config
            .enabled_upstreams()
            .filter(|u| connectors.contains_key(&u.name))
            .map(|u| {
                (
                    u.name.clone(),
                    Slot {
                        config: u.clone(),
                        state: RwLock::new(SlotState::Connecting),
                    },
                )
            })
            .collect();
        let cached_keys = config.gateway.cached_keys as usize;
        // A loaded config's rules were checked when it was read; one built
        // in code has none of its own.
        let redactor = config.redaction.redactor().unwrap_or_else(|e| {
            tracing::error!("[redaction]: {e}; only the built-in rules apply");
            plangate_core::Redactor::builtin().clone()
        });
        let rates = rate::RateLimits::new(&config);
        let gw = Arc::new(Gateway {
            redactor,
            rates,
            config,
            log: Arc::new(log::KeyLog::<plangate_core::KeyState>::with_capacity(
                store.clone(),
                cached_keys,
            )),
            pins: Arc::new(log::KeyLog::with_capacity(store.clone(), 1)),
            pinned: RwLock::new(Arc::new(ToolPins::default())),
            owner: format!(
                "{}@{}",
                std::process::id(),
                plangate_store::new_id("gw_").unwrap_or_else(|_| "gw".to_owned())
            ),
            store,
            material,
            slots,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            hub: hub::Hub::default(),
            parked: parked::Parked::default(),
            keys: auth::KeyCache::default(),
            watch: parking_lot::Mutex::new(SweepWatch::default()),
            metrics: metrics::Metrics::default(),
            trimmer: Arc::default(),
            shutdown: CancellationToken::new(),
        });
        // The pins as they stand, before any upstream is judged against them.
        if let Err(e) = gw.reload_pins().await {
            tracing::error!(
                "cannot read the tool pins: {e}; every upstream tool is held back until they can be read"
            );
        }
        let mut first = Vec::new();
        for (name, connector) in connectors {
            if !gw.slots.contains_key(&name) {
                continue;
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            first.push(rx);
            tokio::spawn(supervise(Arc::downgrade(&gw), name, connector, tx));
        }
        for rx in first {
            let _ = rx.await;
        }
        gw.rebuild_catalog();
        tokio::spawn(sweep(Arc::downgrade(&gw)));
        tokio::spawn(follow(Arc::downgrade(&gw)));
        tokio::spawn(gw.trimmer.clone().run(gw.shutdown.clone()));
        gw
    }

    /// What counts as a secret here: the built-in rules plus config's
    /// `[redaction]`. Every split, key, redaction and scrub of the gateway
    /// goes through it, so what is hidden is what is sealed.
    pub fn redactor(&self) -> &plangate_core::Redactor {
        &self.redactor
    }

    /// The configured rate limits.
    pub fn rates(&self) -> &rate::RateLimits {
        &self.rates
    }

    /// Notes a call for the memory trimmer ([`memory`]): freed memory is
    /// handed back once calls stop for a moment.
    pub fn note_call(&self) {
        self.trimmer.touch();
    }

    /// The seal and signing keys (DESIGN §2).
    pub fn material(&self) -> &KeyMaterial {
        &self.material
    }

    /// Every key's event log and folded state.
    pub fn log(&self) -> &log::KeyLog {
        &self.log
    }

    /// A shared handle to the log, for background tasks.
    pub fn log_handle(&self) -> Arc<log::KeyLog> {
        self.log.clone()
    }

    /// This gateway process's identity as the owner of step claims.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How long a step claim holds without renewal, in ms.
    pub fn lease_ms(&self) -> i64 {
        i64::try_from(self.config.gateway.lease.as_millis()).unwrap_or(30_000)
    }

    /// How long a question to the person waits for an answer.
    pub fn review_timeout(&self) -> Duration {
        self.config.gateway.review_timeout
    }

    /// How long a plan lives, in ms.
    pub fn ttl_ms(&self) -> i64 {
        i64::try_from(self.config.gateway.plan_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// The config the gateway was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store holding keys and the event log.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Routing state for calls in flight.
    pub fn hub(&self) -> &hub::Hub {
        &self.hub
    }

    /// Keys this process authenticated (see [`auth::KeyCache`]).
    pub fn key_cache(&self) -> &auth::KeyCache {
        &self.keys
    }

    /// Calls waiting for a 2026-07-28 client to answer their upstream's
    /// question.
    pub fn parked(&self) -> &parked::Parked {
        &self.parked
    }

    /// Call counters and latencies for `/metrics`.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.metrics
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        read(&self.catalog)
    }

    /// A connected upstream by name.
    pub fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        match read(&self.slots.get(name)?.state) {
            SlotState::Up(up) => Some(up),
            _ => None,
        }
    }

    /// Upstreams that are configured and enabled but not connected, with
    /// the reason.
    pub fn down_upstreams(&self) -> BTreeMap<String, String> {
        self.slots
            .iter()
            .filter_map(|(name, slot)| match read(&slot.state) {
                SlotState::Up(_) => None,
                SlotState::Connecting => Some((name.clone(), "connecting".to_owned())),
                SlotState::Down { reason, .. } => Some((name.clone(), reason)),
            })
            .collect()
    }

    /// Names of the upstreams currently connected.
    pub fn up_upstreams(&self) -> Vec<String> {
        self.slots
            .iter()
            .filter(|(_, slot)| matches!(read(&slot.state), SlotState::Up(_)))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The log of tool pins, for a person's accept or reject
    /// ([`tool_pins::decide`]).
    pub fn pins_log(&self) -> &log::KeyLog<ToolPins> {
        &self.pins
    }

    /// The tool pins as last read.
    pub fn pins(&self) -> Arc<ToolPins> {
        read(&self.pinned)
    }

    async fn reload_pins(&self) -> Result<(), log::LogError> {
        let pins = self.pins.state(TOOLS_LOG).await?;
        write(&self.pinned, Arc::new(pins));
        Ok(())
    }

    /// Reads the pins again (another process accepted, rejected or
    /// quarantined a tool), rebuilds the catalog and tells every client.
    pub async fn refresh_pins(&self) {
        match self.reload_pins().await {
            Ok(()) => {
                self.rebuild_catalog();
                self.hub.notify_tools_changed().await;
            }
            Err(e) => tracing::warn!("cannot read the tool pins: {e}"),
        }
    }

    /// Judges an upstream's listing against the pins and records what it
    /// calls for (DESIGN §9): its first listing is pinned; a tool new or
    /// changed since is quarantined. When the store cannot be written, the
    /// tools not yet judged stay held back (the catalog offers only
    /// accepted definitions).
    async fn judge_tools(&self, upstream: &Upstream) {
        let server = upstream.name().to_owned();
        let listing: Vec<PinnedDefinition> = upstream
            .tools
            .iter()
            .map(|t| {
                PinnedDefinition::of(
                    &t.name,
                    &serde_json::to_value(t).unwrap_or(serde_json::Value::Null),
                )
            })
            .collect();
        let judged = self
            .pins
            .transact(TOOLS_LOG, |pins| {
                let now = plangate_store::now_ms();
                let events: Vec<Event> = pins
                    .judge_listing(&server, &listing)
                    .into_iter()
                    .map(|kind| Event {
                        at_ms: now,
                        key_id: TOOLS_LOG.to_owned(),
                        actor: Actor::System,
                        channel: Channel::Gateway,
                        kind,
                    })
                    .collect();
                let held: Vec<String> = events
                    .iter()
                    .filter_map(|e| match &e.kind {
                        plangate_core::EventKind::ToolQuarantined {
                            definition, reason, ..
                        } => Some(format!("{} ({})", definition.tool, reason.as_str())),
                        _ => None,
                    })
                    .collect();
                Ok::<_, std::convert::Infallible>((events, held))
            })
            .await;
        match judged {
            Ok(Ok((pins, held))) => {
                if !held.is_empty() {
                    tracing::warn!(upstream = %server, tools = %held.join(", "), "tool definitions quarantined: new or changed since this upstream's tools were pinned; an operator must accept them (plangate tools list)");
                }
                write(&self.pinned, Arc::new(pins));
            }
            Ok(Err(never)) => match never {},
            Err(e) => {
                tracing::error!(upstream = %server, "cannot record its tool pins: {e}; its tools not yet accepted stay held back")
            }
        }
    }

    fn rebuild_catalog(&self) {
        let mut up = Vec::new();
        let mut gone = Vec::new();
        for slot in self.slots.values() {
            match read(&slot.state) {
                SlotState::Up(u) => up.push(u),
                SlotState::Down { last: Some(u), .. } => gone.push(u),
                _ => {}
            }
        }
        let pins = self.pins();
        let catalog = Catalog::build(
            &self.config,
            &up,
            &gone,
            &reserved_names(&self.config),
            Some(&pins),
        );
        write(&self.catalog, Arc::new(catalog));
    }

    fn set_state(&self, name: &str, state: SlotState) {
        if let Some(slot) = self.slots.get(name) {
            write(&slot.state, state);
        }
        self.rebuild_catalog();
    }

    /// Re-reads an upstream's lists after it said they changed, rebuilds the
    /// catalog and tells every client.
    pub async fn refresh_upstream(&self, name: &str) {
        let Some(current) = self.upstream(name) else {
            return;
        };
        match current.relisted().await {
            Ok(fresh) => {
                self.judge_tools(&fresh).await;
                self.set_state(name, SlotState::Up(Arc::new(fresh)));
                self.hub.notify_tools_changed().await;
                self.hub.notify_lists_changed().await;
            }
            Err(e) => tracing::warn!(upstream = name, "refreshing lists failed: {e}"),
        }
    }

    /// Stops every supervisor and closes every upstream session (child
    /// processes are stopped).
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        // Give supervisors a moment to close their sessions cleanly.
        for _ in 0..50 {
            if self
                .slots
                .values()
                .all(|s| !matches!(read(&s.state), SlotState::Up(_)))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Keeps one upstream connected: connect, wait for the session to end, mark
/// it down, wait (with backoff), reconnect — until the gateway shuts down.
async fn supervise(
    gw: Weak<Gateway>,
    name: String,
    connector: Connector,
    first: tokio::sync::oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some(g) = gw.upgrade() else { return };
        let shutdown = g.shutdown.clone();
        let Some(config) = g.slots.get(&name).map(|s| s.config.clone()) else {
            return;
        };
        let was_up_before = first.is_none();
        drop(g);
        let client = UpstreamClient::new(&name, gw.clone());
        let attempt = tokio::select! {
            r = upstream::connect_once(&config, &connector, client) => r,
            () = shutdown.cancelled() => return,
        };
        match attempt {
            Ok((upstream, session)) => {
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
                    g.set_state(&name, SlotState::Up(Arc::new(upstream)));
                    if was_up_before {
                        g.hub.notify_tools_changed().await;
                    }
                }
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
                let session_ct = session.cancellation_token();
                let ended = tokio::select! {
                    r = session.waiting() => format!("session ended ({r:?})"),
                    () = kill.cancelled() => {
                        session_ct.cancel();
                        "session failed".to_owned()
                    }
                    () = shutdown.cancelled() => {
                        session_ct.cancel();
                        if let Some(g) = gw.upgrade() {
                            g.set_state(&name, SlotState::Down { reason: "shut down".into(), last: None });
                        }
                        return;
                    }
                };
                tracing::warn!(upstream = %name, "upstream disconnected: {ended}; reconnecting");
                if let Some(g) = gw.upgrade() {
                    let last = g.upstream(&name);
                    g.set_state(
                        &name,
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
                tracing::error!("{e}");
                if let Some(g) = gw.upgrade() {
                    let last = match g.slots.get(&name).map(|s| read(&s.state)) {
                        Some(SlotState::Down { last, .. }) => last,
                        _ => None,
                    };
                    g.set_state(
                        &name,
                        SlotState::Down {
                            reason: e.to_string(),
                            last,
                        },
                    );
                }
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.cancelled() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// How often a gateway looks at the shared log for changes other processes
/// made.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Follows the shared event log so a mode set through another replica (or
/// the CLI) reaches this replica's clients of that key as
/// `notifications/tools/list_changed` — `exit_plan_mode` comes or goes —
/// without waiting for their next call.
async fn follow(gw: Weak<Gateway>) {
    let Some(g) = gw.upgrade() else { return };
    let shutdown = g.shutdown.clone();
    let mut after = match g.store.last_seq().await {
        Ok(seq) => seq,
        Err(e) => {
            tracing::warn!("cannot follow the event log: {e}");
            return;
        }
    };
    drop(g);
    loop {
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
        let Some(g) = gw.upgrade() else { return };
        loop {
            let page = match g.store.events_since(after, 500).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::debug!("following the event log: {e}");
                    break;
                }
            };
            let Some(last) = page.last() else { break };
            after = last.seq;
            g.watch
                .lock()
                .dirty
                .extend(page.iter().map(|e| e.key_id.clone()));
            let mut keys: Vec<&str> = page
                .iter()
                .filter(|e| e.kind == "mode_set")
                .map(|e| e.key_id.as_str())
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                g.hub.notify_key_tools_changed(key, u64::MAX).await;
            }
            if page.iter().any(|e| e.key_id == TOOLS_LOG) {
                g.refresh_pins().await;
            }
            if page.len() < 500 {
                break;
            }
        }
    }
}

/// Expires plans whose life is over, in the background (calls also expire
/// them lazily, so correctness never depends on this timer). Safe with many
/// sweepers: each expiry is a compare-and-set append, and a plan already
/// expired by someone else has nothing left to expire.
async fn sweep(gw: Weak<Gateway>) {
    loop {
        let Some(g) = gw.upgrade() else { return };
        let every = Duration::from_millis(u64::try_from(g.ttl_ms() / 4).unwrap_or(1000))
            .clamp(Duration::from_secs(1), Duration::from_secs(30));
        let shutdown = g.shutdown.clone();
        if let Err(e) = g.sweep_watched().await {
            tracing::warn!("plan expiry sweep: {e}");
        }
        drop(g);
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Which keys the background sweep must look at: those it found with a
/// plan or a claim last time whose expiry has come (a claim: every pass),
/// and those with events since (the followed log says which: only an
/// event moves a plan's expiry). Every [`FULL_SWEEP_EVERY`]th pass looks at
/// every key. So a pass over 10,000 open plans that are not due reads
/// none of them.
#[derive(Default)]
struct SweepWatch {
    /// Keys with a plan's life or a claim, each with when it is next due
    /// a look (ms since the epoch; `i64::MIN`: every pass).
    open: BTreeMap<String, i64>,
    dirty: BTreeSet<String>,
    passes: u64,
}

/// Every this many background passes, the sweep looks at every key with
/// events, not only the watched ones.
const FULL_SWEEP_EVERY: u64 = 20;

impl Gateway {
    /// One pass of the expiry sweep over every key with events.
    pub async fn sweep_once(&self) -> Result<usize, log::LogError> {
        let keys = self.store.keys_with_events().await?;
        self.sweep_keys(keys).await
    }

    /// The background pass: the watched keys, or every key now and then
    /// (and on the first pass).
    async fn sweep_watched(&self) -> Result<usize, log::LogError> {
        let keys = {
            let mut watch = self.watch.lock();
            watch.passes += 1;
            if watch.passes % FULL_SWEEP_EVERY == 1 {
                watch.dirty.clear();
                None
            } else {
                let now = plangate_store::now_ms();
                let mut keys = std::mem::take(&mut watch.dirty);
                keys.extend(
                    watch
                        .open
                        .iter()
                        .filter(|(_, due)| **due <= now)
                        .map(|(key, _)| key.clone()),
                );
                Some(keys.into_iter().collect::<Vec<_>>())
            }
        };
        match keys {
            Some(keys) => self.sweep_keys(keys).await,
            None => self.sweep_once().await,
        }
    }

    async fn sweep_keys(&self, keys: Vec<String>) -> Result<usize, log::LogError> {
        let ttl = self.ttl_ms();
        let mut expired = 0;
        for key_id in keys {
            // Not `state`: a pass over every key must not pull idle keys
            // into memory.
            let state = self.log.peek(&key_id).await?;
            let claims = state.applying.is_some()
                || state
                    .steps
                    .iter()
                    .any(|s| s.status == plangate_core::StepStatus::Running);
            {
                let mut watch = self.watch.lock();
                // A claim's lease may run out any time: every pass. A plan
                // is due when its life ends (it is expired below if it
                // already has); events that start a new life make the key
                // dirty, and it is looked at again then.
                let due = if claims {
                    Some(i64::MIN)
                } else {
                    state.expires_at_ms(ttl)
                };
                match due {
                    Some(due) => {
                        watch.open.insert(key_id.clone(), due);
                    }
                    None => {
                        watch.open.remove(&key_id);
                    }
                }
            }
            if claims {
                self.sweep_leases(&key_id).await?;
            }
            if plangate_core::rules::expiring_steps(&state, plangate_store::now_ms(), ttl).is_none()
            {
                continue;
            }
            let (_, n) = self
                .log
                .transact(&key_id, |state| {
                    let now = plangate_store::now_ms();
                    let Some(ids) = plangate_core::rules::expiring_steps(state, now, ttl) else {
                        return Ok::<_, std::convert::Infallible>((vec![], 0));
                    };
                    let n = ids.len();
                    let event = plangate_core::Event {
                        at_ms: now,
                        key_id: key_id.clone(),
                        actor: plangate_core::Actor::System,
                        channel: plangate_core::Channel::Sweeper,
                        kind: plangate_core::EventKind::PlanExpired { step_ids: ids },
                    };
                    Ok((vec![event], n))
                })
                .await?
                .unwrap_or_else(|never| match never {});
            expired += n;
        }
        Ok(expired)
    }
}

impl Gateway {
    /// Marks claims whose lease ran out `in_doubt` and finishes a dead apply
    /// of `key_id` (DESIGN §5 "Leases": found by any process, never by
    /// start-up alone).
    pub async fn sweep_leases(&self, key_id: &str) -> Result<usize, log::LogError> {
        let lease = self.lease_ms();
        let acting_key = plangate_store::ApiKey {
            id: key_id.to_owned(),
            name: String::new(),
            scope: plangate_core::Scope::Read,
            prefix: String::new(),
            created_at_ms: 0,
            revoked_at_ms: None,
        };
        let acting = plan::Acting {
            key: acting_key,
            channel: plangate_core::Channel::Sweeper,
            operator: None,
        };
        let (_, n) = self
            .log
            .transact(key_id, |state| {
                let events = apply::lease_cleanup(state, plangate_store::now_ms(), lease, &acting);
                let n = events.len();
                Ok::<_, std::convert::Infallible>((events, n))
            })
            .await?
            .unwrap_or_else(|never| match never {});
        Ok(n)
    }
}

/// The exposed names of the gateway's own tools.
pub fn reserved_names(config: &Config) -> BTreeSet<String> {
    GATEWAY_TOOLS
        .iter()
        .map(|t| format!("{}{t}", config.gateway.tool_prefix))
        .collect()
}

/// Serves one MCP client over this process's stdin and stdout until it
/// disconnects. `token` is the API key from `PLANGATE_KEY`, if any; it is
/// checked on every request so a revocation takes effect at once.
pub async fn serve_stdio(gw: Arc<Gateway>, token: Option<String>) -> Result<(), std::io::Error> {
    use rmcp::ServiceExt;
    let limit = gw.config().gateway.max_request_bytes;
    let handler = GatewayHandler::stdio(gw, token);
    let (reader, writer) = stdio::transport();
    let running = handler
        .serve((limits::LineCap::new(reader, limit), writer))
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
