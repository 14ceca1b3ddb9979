//! Taking a new config without a restart ([`Gateway::reload`]): what is
//! compiled from a config, which upstreams start, stop or stay, and which
//! settings wait for a restart. Apart from the crate root because a reload
//! is one operation with its own report ([`Reloaded`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use plangate_config::{Config, UpstreamConfig};

use crate::slots::{Slot, first_attempts};
use crate::{Connector, Gateway, rate, upstream};

/// A config and what is compiled from it, swapped whole by
/// [`Gateway::reload`] so a call sees one generation of each.
pub(crate) struct Loaded {
    pub(crate) config: Arc<Config>,
    pub(crate) redactor: Arc<plangate_core::Redactor>,
    pub(crate) rates: Arc<rate::RateLimits>,
    pub(crate) policy: Arc<plangate_policy::Policy>,
}

impl Loaded {
    /// Compiles `config`; `previous` lends the rate limiters whose limits
    /// did not change, so a reload does not hand out fresh allowances.
    pub(crate) fn compile(config: Config, previous: Option<&rate::RateLimits>) -> Loaded {
        // A loaded config's rules were checked when it was read; one built
        // in code has none of its own.
        let redactor = config.redaction.redactor().unwrap_or_else(|e| {
            tracing::error!("[redaction]: {e}; only the built-in rules apply");
            plangate_core::Redactor::builtin().clone()
        });
        let rates = rate::RateLimits::carried(&config, previous);
        let policy = compile_rules(&config);
        Loaded {
            config: Arc::new(config),
            redactor: Arc::new(redactor),
            rates: Arc::new(rates),
            policy,
        }
    }
}

impl Gateway {
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
    /// most [`FIRST_ATTEMPT_WAIT`](crate::FIRST_ATTEMPT_WAIT), so the answer can say which are up.
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
            rules: rule_changes(&old.rules, &config.rules),
            ..Reloaded::default()
        };
        let loaded = Loaded::compile(config, Some(&self.rates()));
        let config = loaded.config.clone();
        self.engine.put_loaded(loaded);
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
    /// The operator's rules (`[[rules]]`) by name: added, removed,
    /// changed. They are in force from the next call.
    pub rules: [Vec<String>; 3],
}

/// The rules `new` adds, removes and changes against `old`, by name.
fn rule_changes(
    old: &[plangate_policy::RuleSpec],
    new: &[plangate_policy::RuleSpec],
) -> [Vec<String>; 3] {
    let find = |rules: &[plangate_policy::RuleSpec], name: &str| {
        rules.iter().find(|r| r.name == name).cloned()
    };
    let added = new
        .iter()
        .filter(|r| find(old, &r.name).is_none())
        .map(|r| r.name.clone())
        .collect();
    let removed = old
        .iter()
        .filter(|r| find(new, &r.name).is_none())
        .map(|r| r.name.clone())
        .collect();
    let changed = new
        .iter()
        .filter(|r| find(old, &r.name).is_some_and(|o| o != **r))
        .map(|r| r.name.clone())
        .collect();
    [added, removed, changed]
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
        let [added, removed, changed] = &self.rules;
        if !(added.is_empty() && removed.is_empty() && changed.is_empty()) {
            write!(
                f,
                "; rules added: {}; removed: {}; changed: {}",
                list(added),
                list(removed),
                list(changed)
            )?;
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
/// The rules of `config`, compiled. A loaded config's rules were checked
/// when it was read, so this cannot fail for one; should rules built in
/// code be wrong, every call is refused by a rule saying so (fail closed)
/// rather than served without the rules the operator wrote.
fn compile_rules(config: &Config) -> Arc<plangate_policy::Policy> {
    if config.rules.is_empty() {
        return Arc::new(plangate_policy::Policy::empty());
    }
    let modes: Vec<String> = config.modes.names();
    match plangate_policy::Policy::compile(&config.rules, &modes) {
        Ok(policy) => Arc::new(policy),
        Err(errors) => {
            let said: Vec<String> = errors
                .iter()
                .map(|e| format!("rules[{}].{}: {}", e.index, e.field, e.message))
                .collect();
            tracing::error!(
                "the rules cannot be compiled, so every call is refused: {}",
                said.join("; ")
            );
            let refuse_all = plangate_policy::RuleSpec {
                name: "rules-broken".to_owned(),
                when: "true".to_owned(),
                outcome: "refuse".to_owned(),
                message: Some(format!(
                    "plangate's rules cannot be compiled ({}); an operator must fix them",
                    said.join("; ")
                )),
                ..plangate_policy::RuleSpec::default()
            };
            Arc::new(
                plangate_policy::Policy::compile(&[refuse_all], &modes)
                    .unwrap_or_else(|_| plangate_policy::Policy::empty()),
            )
        }
    }
}
