//! The transport-free part of a gateway: the config in force (and what is
//! compiled from it), the store, every key's log and folded state, the
//! operators' and the tool pins' logs, and this process's identity as the
//! owner of step claims. Nothing here speaks MCP or HTTP, holds an upstream
//! session or a client's peer: a verb that needs no more than this takes
//! an [`Engine`] (a [`crate::Gateway`] derefs to its engine), so it can
//! run where no upstream is started — the CLI's operator verbs — and says
//! in its signature that it touches no transport.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use plangate_config::Config;
use plangate_core::ToolPins;
use plangate_store::{KeyMaterial, Store};

use crate::key_log::{OperatorsLog, operators_log};
use crate::reload::Loaded;
use crate::{key_log, rate};

/// A plan's life in ms, from config.
pub fn ttl_ms(config: &Config) -> i64 {
    i64::try_from(config.gateway.plan_ttl.as_millis()).unwrap_or(i64::MAX)
}

/// A claim's lease in ms, from config.
pub fn lease_ms(config: &Config) -> i64 {
    i64::try_from(config.gateway.lease.as_millis()).unwrap_or(30_000)
}

/// The config, the store and the logs, shared by every face of a gateway.
pub struct Engine {
    /// The config in force and what is compiled from it.
    loaded: RwLock<Arc<Loaded>>,
    store: Arc<dyn Store>,
    material: KeyMaterial,
    log: Arc<key_log::KeyLog>,
    /// The log of tool pins ([`plangate_core::TOOLS_LOG`]).
    pins: Arc<key_log::KeyLog<ToolPins>>,
    /// The operators' log: what a yes needs and who can give it
    /// ([`crate::operator::factor`]).
    operators: OperatorsLog,
    owner: String,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over `store` with `config` in force; `material` seals and
    /// signs (docs/design.md §2).
    pub fn open(config: Config, store: Arc<dyn Store>, material: KeyMaterial) -> Engine {
        let cached_keys = config.gateway.cached_keys as usize;
        Engine {
            loaded: RwLock::new(Arc::new(Loaded::compile(config, None))),
            log: Arc::new(key_log::KeyLog::<plangate_core::KeyState>::with_capacity(
                store.clone(),
                material.log_key(),
                cached_keys,
            )),
            operators: operators_log(store.clone(), material.log_key()),
            pins: Arc::new(key_log::KeyLog::with_capacity(
                store.clone(),
                material.log_key(),
                1,
            )),
            owner: format!(
                "{}@{}",
                std::process::id(),
                plangate_store::new_id("gw_").unwrap_or_else(|_| "gw".to_owned())
            ),
            store,
            material,
        }
    }

    /// Puts a newly compiled config in force ([`crate::Gateway::reload`]).
    pub(crate) fn put_loaded(&self, loaded: Loaded) {
        *self.loaded.write() = Arc::new(loaded);
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

    /// The operator's rules, compiled (once per load).
    pub fn policy(&self) -> Arc<plangate_policy::Policy> {
        self.loaded.read().policy.clone()
    }

    /// The config in force: the one the gateway was built from, or the
    /// last one [`crate::Gateway::reload`] took.
    pub fn config(&self) -> Arc<Config> {
        self.loaded.read().config.clone()
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

    /// The operators' log ([`crate::operator::factor`]).
    pub fn operators(&self) -> &OperatorsLog {
        &self.operators
    }

    /// The log of tool pins, for a person's accept or reject
    /// ([`crate::tool_pins::decide`]).
    pub fn pins_log(&self) -> &key_log::KeyLog<ToolPins> {
        &self.pins
    }

    /// The store holding keys and the event log.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// This gateway process's identity as the owner of step claims.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How long a step claim holds without renewal, in ms.
    pub fn lease_ms(&self) -> i64 {
        lease_ms(&self.config())
    }

    /// How long a question to the person waits for an answer.
    pub fn review_timeout(&self) -> Duration {
        self.config().gateway.review_timeout
    }

    /// Whether plangate signs in to upstream `server` with OAuth
    /// (`[upstreams.NAME.oauth]`).
    pub fn signs_in(&self, server: &str) -> bool {
        self.config()
            .upstreams
            .get(server)
            .is_some_and(|u| u.oauth.is_some())
    }

    /// How long a plan lives, in ms.
    pub fn ttl_ms(&self) -> i64 {
        ttl_ms(&self.config())
    }
}
