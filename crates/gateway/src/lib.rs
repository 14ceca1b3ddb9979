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

pub mod acting;
pub mod amend;
pub mod apply;
pub mod apps;
pub mod auth;
pub mod call_log;
pub mod catalog;
pub mod console;
mod follow;
pub mod http;
pub mod hub;
pub mod key_log;
pub mod limits;
pub mod memory;
pub mod metrics;
pub mod notices;
pub mod oauth;
pub mod operator;
pub mod parked;
pub mod plan;
pub mod policy;
pub mod preview;
pub mod quick_json;
pub mod rate;
pub mod refusal;
pub mod relay;
pub mod review;
mod server;
pub mod session_guard;
pub mod stdio;
mod supervisor;
mod sweep;
pub mod telemetry;
pub mod tool_pins;
pub mod tools;
pub mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::RwLock;
use std::time::Duration;

use plangate_config::{Config, UpstreamConfig};
use plangate_core::{Actor, Channel, Event, PinnedDefinition, TOOLS_LOG, ToolPins};
use plangate_store::{KeyMaterial, Store};
use tokio_util::sync::CancellationToken;

pub use catalog::{Catalog, CatalogTool};
pub use server::{GatewayHandler, server_capabilities};
pub use upstream::{Connector, Upstream, UpstreamClient, UpstreamError};

/// The gateway's own tools (docs/design.md §5), without the configured prefix.
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

/// One configured upstream and its supervisor. A reload that changes an
/// upstream's settings replaces its slot: the old supervisor is stopped
/// through `stop` and writes only to its own slot, so it cannot touch the
/// new one's state.
struct Slot {
    config: UpstreamConfig,
    state: RwLock<SlotState>,
    /// Stops this slot's supervisor (and closes its session): cancelled
    /// when a reload removes or replaces the upstream, and with the
    /// gateway's shutdown (a child token of it).
    stop: CancellationToken,
}

/// A config and what is compiled from it, swapped whole by
/// [`Gateway::reload`] so a call sees one generation of each.
struct Loaded {
    config: Arc<Config>,
    redactor: Arc<plangate_core::Redactor>,
    rates: Arc<rate::RateLimits>,
    policy: Arc<plangate_policy::Policy>,
}

impl Loaded {
    /// Compiles `config`; `previous` lends the rate limiters whose limits
    /// did not change, so a reload does not hand out fresh allowances.
    fn compile(config: Config, previous: Option<&rate::RateLimits>) -> Loaded {
        // A loaded config's rules were checked when it was read; one built
        // in code has none of its own.
        let redactor = config.redaction.redactor().unwrap_or_else(|e| {
            tracing::error!("[redaction]: {e}; only the built-in rules apply");
            plangate_core::Redactor::builtin().clone()
        });
        let rates = rate::RateLimits::carried(&config, previous);
        let policy = policy::compile(&config);
        Loaded {
            config: Arc::new(config),
            redactor: Arc::new(redactor),
            rates: Arc::new(rates),
            policy,
        }
    }
}

/// A running gateway: config, store, upstream sessions and the catalog
/// built from them. Shared by every client session.
pub struct Gateway {
    /// The config in force and what is compiled from it.
    loaded: RwLock<Arc<Loaded>>,
    /// Serializes reloads (a SIGHUP and a file change at once).
    reloading: tokio::sync::Mutex<()>,
    store: Arc<dyn Store>,
    material: KeyMaterial,
    log: Arc<key_log::KeyLog>,
    /// The log of tool pins ([`plangate_core::TOOLS_LOG`]).
    pins: Arc<key_log::KeyLog<ToolPins>>,
    /// The pins as last read: what the catalog is built against.
    pinned: RwLock<Arc<ToolPins>>,
    owner: String,
    slots: RwLock<BTreeMap<String, Arc<Slot>>>,
    catalog: RwLock<Arc<Catalog>>,
    hub: hub::Hub,
    parked: parked::Parked,
    keys: auth::KeyCache,
    watch: parking_lot::Mutex<sweep::SweepWatch>,
    metrics: metrics::Metrics,
    trimmer: Arc<memory::Trimmer>,
    shutdown: CancellationToken,
    /// Where this process serves the web console, once `serve --http`
    /// listens: refusals tell a plan-scope agent where its person approves.
    console_url: std::sync::OnceLock<String>,
    /// Coalescing of repeated refusals in the audit log.
    call_log: call_log::CallLog,
    /// Checks OAuth access tokens (`[auth.oauth]`); holds issuers' keys.
    oauth: oauth::Verifier,
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

/// How long start-up waits for the upstreams' first connection attempts
/// before plangate serves without the ones still connecting. Long enough
/// for a server started by `npx` or `uvx` from a warm cache; an upstream
/// slower than that joins later (its `startup_timeout` bounds each of its
/// attempts, not the start of plangate).
pub const FIRST_ATTEMPT_WAIT: Duration = Duration::from_secs(5);

impl Gateway {
    /// Starts a supervisor for every enabled upstream in `config` and waits
    /// until each has made its first connection attempt, at most
    /// [`FIRST_ATTEMPT_WAIT`]. Upstreams that cannot be reached in that
    /// time are logged and retried in the background; the others serve.
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
        let shutdown = CancellationToken::new();
        let slots = config
            .enabled_upstreams()
            .filter(|u| connectors.contains_key(&u.name))
            .map(|u| (u.name.clone(), Slot::new(u.clone(), &shutdown)))
            .collect();
        let cached_keys = config.gateway.cached_keys as usize;
        let gw = Arc::new(Gateway {
            loaded: RwLock::new(Arc::new(Loaded::compile(config, None))),
            reloading: tokio::sync::Mutex::new(()),
            log: Arc::new(key_log::KeyLog::<plangate_core::KeyState>::with_capacity(
                store.clone(),
                cached_keys,
            )),
            pins: Arc::new(key_log::KeyLog::with_capacity(store.clone(), 1)),
            pinned: RwLock::new(Arc::new(ToolPins::default())),
            owner: format!(
                "{}@{}",
                std::process::id(),
                plangate_store::new_id("gw_").unwrap_or_else(|_| "gw".to_owned())
            ),
            store,
            material,
            slots: RwLock::new(slots),
            catalog: RwLock::new(Arc::new(Catalog::default())),
            hub: hub::Hub::default(),
            parked: parked::Parked::default(),
            keys: auth::KeyCache::default(),
            watch: parking_lot::Mutex::new(sweep::SweepWatch::default()),
            metrics: metrics::Metrics::default(),
            trimmer: Arc::default(),
            shutdown,
            console_url: std::sync::OnceLock::new(),
            call_log: call_log::CallLog::default(),
            oauth: oauth::Verifier::default(),
        });
        // The pins as they stand, before any upstream is judged against them.
        if let Err(e) = gw.reload_pins().await {
            tracing::error!(
                "cannot read the tool pins: {e}; every upstream tool is held back until they can be read"
            );
        }
        let first = gw.supervise(connectors);
        // Serve as soon as the upstreams that start quickly are up: a slow
        // or broken one keeps connecting in the background (`/readyz` says
        // which), and clients hear `list_changed` when it comes.
        let waited = first_attempts(first).await;
        if waited.is_err() {
            let slow: Vec<String> = gw.down_upstreams().into_keys().collect();
            tracing::warn!(
                upstreams = ?slow,
                "still connecting after {}s; serving without them until they are up (GET /readyz says which are down)",
                FIRST_ATTEMPT_WAIT.as_secs()
            );
        }
        gw.rebuild_catalog();
        tokio::spawn(sweep::sweep(Arc::downgrade(&gw)));
        tokio::spawn(follow::follow(Arc::downgrade(&gw)));
        tokio::spawn(gw.trimmer.clone().run(gw.shutdown.clone()));
        gw
    }

    /// What counts as a secret here: the built-in rules plus config's
    /// `[redaction]`. Every split, key, redaction and scrub of the gateway
    /// goes through it, so what is hidden is what is sealed.
    pub fn redactor(&self) -> Arc<plangate_core::Redactor> {
        self.loaded.read().redactor.clone()
    }

    /// The configured rate limits.
    pub fn rates(&self) -> Arc<rate::RateLimits> {
        self.loaded.read().rates.clone()
    }

    /// Notes a call for the memory trimmer ([`memory`]): freed memory is
    /// handed back once calls stop for a moment.
    pub fn note_call(&self) {
        self.trimmer.touch();
    }

    /// The seal and signing keys (docs/design.md §2).
    pub fn material(&self) -> &KeyMaterial {
        &self.material
    }

    /// Every key's event log and folded state.
    pub fn log(&self) -> &key_log::KeyLog {
        &self.log
    }

    /// A shared handle to the log, for background tasks.
    pub fn log_handle(&self) -> Arc<key_log::KeyLog> {
        self.log.clone()
    }

    /// This gateway process's identity as the owner of step claims.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How long a step claim holds without renewal, in ms.
    pub fn lease_ms(&self) -> i64 {
        operator::lease_ms(&self.config())
    }

    /// How long a question to the person waits for an answer.
    pub fn review_timeout(&self) -> Duration {
        self.config().gateway.review_timeout
    }

    /// How long a plan lives, in ms.
    pub fn ttl_ms(&self) -> i64 {
        operator::ttl_ms(&self.config())
    }

    /// The config in force: the one the gateway was built from, or the
    /// last one [`Gateway::reload`] took.
    pub fn config(&self) -> Arc<Config> {
        self.loaded.read().config.clone()
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

    /// Notes where this process serves the web console (the first call
    /// wins: one process serves one address).
    pub fn set_console_url(&self, url: String) {
        let _ = self.console_url.set(url);
    }

    /// How a person approves key `key_name`'s plan, in words for a refusal
    /// or a step's note: the web console's address when this process serves
    /// one, and the CLI commands, with the plan's `digest` when known.
    pub fn how_to_approve(&self, key_name: &str, digest: Option<&str>) -> String {
        let key_name = plangate_core::shell_word(key_name);
        let cli = format!(
            "`plangate plans show --key {key_name}` then `plangate plans approve --key {key_name} --digest {}`",
            digest.unwrap_or("<the digest it shows>")
        );
        match self.console_url.get() {
            Some(url) => format!(
                "a person reviews and approves it in the web console at {url}, or at the CLI: {cli}"
            ),
            None => format!(
                "a person reviews and approves it at the CLI: {cli}, or in the web console of `plangate serve --http`"
            ),
        }
    }

    /// How a person approves some waiting steps of `key_name`'s plan,
    /// for answers that name steps no approval covers.
    pub fn how_to_approve_steps(&self, key_name: &str) -> String {
        let key_name = plangate_core::shell_word(key_name);
        let cli = format!("`plangate plans approve --key {key_name} STEP…`");
        match self.console_url.get() {
            Some(url) => {
                format!("a person approves them in the web console at {url}, or at the CLI: {cli}")
            }
            None => format!("a person approves them at the CLI: {cli}"),
        }
    }

    /// The operator's rules, compiled (once per load).
    pub fn policy(&self) -> Arc<plangate_policy::Policy> {
        self.loaded.read().policy.clone()
    }

    /// The OAuth access-token checker.
    pub fn oauth(&self) -> &oauth::Verifier {
        &self.oauth
    }

    /// The audit log's coalescing of repeated refusals.
    pub fn call_log(&self) -> &call_log::CallLog {
        &self.call_log
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
        let slot = self.slots.read().get(name)?.clone();
        match read(&slot.state) {
            SlotState::Up(up) => Some(up),
            _ => None,
        }
    }

    /// Upstreams that are configured and enabled but not connected, with
    /// the reason.
    pub fn down_upstreams(&self) -> BTreeMap<String, String> {
        self.slots
            .read()
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
            .read()
            .iter()
            .filter(|(_, slot)| matches!(read(&slot.state), SlotState::Up(_)))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The log of tool pins, for a person's accept or reject
    /// ([`tool_pins::decide`]).
    pub fn pins_log(&self) -> &key_log::KeyLog<ToolPins> {
        &self.pins
    }

    /// The tool pins as last read.
    pub fn pins(&self) -> Arc<ToolPins> {
        read(&self.pinned)
    }

    async fn reload_pins(&self) -> Result<(), key_log::LogError> {
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
    /// calls for (docs/design.md §9): its first listing is pinned; a tool new or
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
        for slot in self.slots.read().values() {
            match read(&slot.state) {
                SlotState::Up(u) => up.push(u),
                SlotState::Down { last: Some(u), .. } => gone.push(u),
                _ => {}
            }
        }
        let pins = self.pins();
        let config = self.config();
        let catalog = Catalog::build(&config, &up, &gone, &reserved_names(&config), Some(&pins));
        write(&self.catalog, Arc::new(catalog));
    }

    /// Sets a slot's state and rebuilds the catalog. A slot a reload
    /// removed or replaced is written to, but is no longer in the catalog.
    fn set_state(&self, slot: &Slot, state: SlotState) {
        write(&slot.state, state);
        self.rebuild_catalog();
    }

    /// The slot serving upstream `name` now.
    fn slot(&self, name: &str) -> Option<Arc<Slot>> {
        self.slots.read().get(name).cloned()
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
                // Not if a reload replaced the upstream meanwhile.
                let Some(slot) = self.slot(name).filter(
                    |s| matches!(read(&s.state), SlotState::Up(ref u) if Arc::ptr_eq(u, &current)),
                ) else {
                    return;
                };
                self.set_state(&slot, SlotState::Up(Arc::new(fresh)));
                self.hub.notify_tools_changed().await;
                self.hub.notify_lists_changed().await;
            }
            Err(e) => tracing::warn!(upstream = name, "refreshing lists failed: {e}"),
        }
    }

    /// Starts a supervisor for every upstream in `connectors` that has a
    /// slot. Returns what resolves once each has made its first attempt.
    fn supervise(
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
            tokio::spawn(supervisor::supervise(
                Arc::downgrade(self),
                slot,
                name,
                connector,
                tx,
            ));
        }
        first
    }

    /// Takes `config` in place of the running one without a restart
    /// (`SIGHUP`, or a change of the watched file): upstreams added are
    /// started, removed ones stopped (their child processes end), changed
    /// ones restarted, unchanged ones keep their sessions; rules,
    /// redaction, modes, rate limits (counters kept where a limit did not
    /// change) and every other setting read per call apply to the next
    /// call. Settings that shape the listener or the store
    /// ([`RESTART_ONLY`]) keep their running values until a restart, and
    /// the answer says which changed. Connected clients hear that the
    /// lists changed; plans stay as they are, and a step whose tool is no
    /// longer served fails its re-check at apply.
    ///
    /// Waits for the started upstreams' first connection attempts, at
    /// most [`FIRST_ATTEMPT_WAIT`], so the answer can say which are up.
    pub async fn reload(self: &Arc<Self>, config: Config) -> Reloaded {
        // Connectors (an HTTP upstream's TLS client among them) only for
        // the upstreams that will start: unchanged ones keep theirs.
        let connectors = config
            .enabled_upstreams()
            .filter(|u| self.slot(&u.name).is_none_or(|s| s.config != **u))
            .map(|u| (u.name.clone(), upstream::connector_for(u)))
            .collect();
        self.reload_with(config, connectors).await
    }

    /// Like [`Gateway::reload`], with the connector of each upstream
    /// given (only those that start are used).
    pub async fn reload_with(
        self: &Arc<Self>,
        mut config: Config,
        mut connectors: BTreeMap<String, Connector>,
    ) -> Reloaded {
        let _one_at_a_time = self.reloading.lock().await;
        let old = self.config();
        let mut report = Reloaded {
            kept_until_restart: keep_restart_only(&old, &mut config),
            ..Reloaded::default()
        };
        let loaded = Loaded::compile(config, Some(&self.rates()));
        let config = loaded.config.clone();
        write(&self.loaded, Arc::new(loaded));
        self.keys.clear();
        let mut stopped = Vec::new();
        let mut start = BTreeMap::new();
        {
            let mut slots = self.slots.write();
            let wanted: BTreeMap<&str, &UpstreamConfig> = config
                .enabled_upstreams()
                .map(|u| (u.name.as_str(), u))
                .collect();
            slots.retain(|name, slot| match wanted.get(name.as_str()) {
                Some(u) if **u == slot.config => {
                    report.unchanged.push(name.clone());
                    true
                }
                changed => {
                    if changed.is_some() {
                        report.restarted.push(name.clone());
                    } else {
                        report.removed.push(name.clone());
                    }
                    stopped.push(slot.clone());
                    false
                }
            });
            for (name, u) in wanted {
                if slots.contains_key(name) {
                    continue;
                }
                let Some(connector) = connectors.remove(name) else {
                    continue;
                };
                if !report.restarted.iter().any(|r| r == name) {
                    report.added.push(name.to_owned());
                }
                slots.insert(name.to_owned(), Slot::new(u.clone(), &self.shutdown));
                start.insert(name.to_owned(), connector);
            }
        }
        for slot in &stopped {
            slot.stop.cancel();
        }
        self.rebuild_catalog();
        self.hub.notify_tools_changed().await;
        self.hub.notify_lists_changed().await;
        let first = self.supervise(start);
        let _ = first_attempts(first).await;
        let down = self.down_upstreams();
        report.not_up = report
            .added
            .iter()
            .chain(&report.restarted)
            .filter_map(|name| down.get(name).map(|why| (name.clone(), why.clone())))
            .collect();
        report
    }

    /// Stops every supervisor and closes every upstream session (child
    /// processes are stopped).
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        // Give supervisors a moment to close their sessions cleanly.
        for _ in 0..50 {
            if self
                .slots
                .read()
                .values()
                .all(|s| !matches!(read(&s.state), SlotState::Up(_)))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Slot {
    fn new(config: UpstreamConfig, shutdown: &CancellationToken) -> Arc<Slot> {
        Arc::new(Slot {
            config,
            state: RwLock::new(SlotState::Connecting),
            stop: shutdown.child_token(),
        })
    }
}

/// Waits until every upstream in `first` has made its first connection
/// attempt, at most [`FIRST_ATTEMPT_WAIT`]; `Err` when the wait ran out.
async fn first_attempts(
    first: Vec<(String, tokio::sync::oneshot::Receiver<()>)>,
) -> Result<(), tokio::time::error::Elapsed> {
    tokio::time::timeout(FIRST_ATTEMPT_WAIT, async {
        for (_, rx) in first {
            let _ = rx.await;
        }
    })
    .await
}

/// The settings a running gateway cannot change: they shaped the HTTP
/// listener (hosts, origins, sizes, sessions, timeouts) or the store's
/// cache when the process started. A reload keeps their running values and
/// says which changed; a restart applies them.
pub const RESTART_ONLY: [&str; 7] = [
    "gateway.allowed_hosts",
    "gateway.allowed_origins",
    "gateway.max_request_bytes",
    "gateway.max_sessions",
    "gateway.max_sessions_per_key",
    "gateway.header_read_timeout",
    "gateway.cached_keys",
];

/// Puts `running`'s values of the [`RESTART_ONLY`] settings into `new`, so
/// the config in force says what is in force; returns the names of those
/// that `new` had changed.
fn keep_restart_only(running: &Config, new: &mut Config) -> Vec<&'static str> {
    let (r, n) = (&running.gateway, &mut new.gateway);
    let mut kept = Vec::new();
    macro_rules! keep {
        ($field:ident, $name:literal) => {
            if r.$field != n.$field {
                kept.push($name);
                n.$field = r.$field.clone();
            }
        };
    }
    keep!(allowed_hosts, "gateway.allowed_hosts");
    keep!(allowed_origins, "gateway.allowed_origins");
    keep!(max_request_bytes, "gateway.max_request_bytes");
    keep!(max_sessions, "gateway.max_sessions");
    keep!(max_sessions_per_key, "gateway.max_sessions_per_key");
    keep!(header_read_timeout, "gateway.header_read_timeout");
    keep!(cached_keys, "gateway.cached_keys");
    kept
}

/// What [`Gateway::reload`] did, for the operator's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Upstreams started because the new config has them.
    pub added: Vec<String>,
    /// Upstreams stopped because the new config no longer has them (or
    /// disables them).
    pub removed: Vec<String>,
    /// Upstreams whose settings changed: stopped and started again.
    pub restarted: Vec<String>,
    /// Upstreams whose sessions were kept.
    pub unchanged: Vec<String>,
    /// [`RESTART_ONLY`] settings the new config changed, still at their
    /// running values.
    pub kept_until_restart: Vec<&'static str>,
    /// Upstreams added or restarted that were not up after the first
    /// attempt, with the reason (they keep trying in the background).
    pub not_up: BTreeMap<String, String>,
}

impl std::fmt::Display for Reloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        write!(
            f,
            "upstreams added: {}; removed: {}; restarted: {}; unchanged: {}",
            list(&self.added),
            list(&self.removed),
            list(&self.restarted),
            list(&self.unchanged)
        )?;
        for (name, why) in &self.not_up {
            write!(f, "; {name} is not up yet ({why}), still trying")?;
        }
        if !self.kept_until_restart.is_empty() {
            write!(
                f,
                "; changed but kept at their running values until plangate restarts: {}",
                self.kept_until_restart.join(", ")
            )?;
        }
        Ok(())
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
    let handler = server::Traced(GatewayHandler::stdio(gw, token));
    let (reader, writer) = stdio::transport();
    let running = handler
        .serve((limits::LineCap::new(reader, limit), writer))
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
