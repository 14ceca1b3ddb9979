//! The configured upstreams' slots: what the gateway knows about each
//! upstream right now (connecting, up, down), and the catalog rebuilt from
//! them. Apart from the crate root because it is the gateway's one moving
//! part: every change of an upstream's state passes through here. The
//! supervisors that keep each slot connected ([`crate::supervisor`]) sit
//! above the slots and write their states.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use plangate_config::UpstreamConfig;
use tokio_util::sync::CancellationToken;

use crate::{Catalog, FIRST_ATTEMPT_WAIT, Gateway, Upstream, read, reserved_names, write};

/// What the gateway knows about one configured upstream right now.
#[derive(Clone)]
pub(crate) enum SlotState {
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
pub(crate) struct Slot {
    pub(crate) config: UpstreamConfig,
    pub(crate) state: RwLock<SlotState>,
    /// Stops this slot's supervisor (and closes its session): cancelled
    /// when a reload removes or replaces the upstream, and with the
    /// gateway's shutdown (a child token of it).
    pub(crate) stop: CancellationToken,
}

impl Gateway {
    /// A connected upstream by name.
    pub fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        let slot = self.slots.read().get(name)?.clone();
        match read(&slot.state) {
            SlotState::Up(up) => Some(up),
            _ => None,
        }
    }

    /// Upstreams that are configured and enabled but not connected, with
    /// the reason — those the config could not start for want of
    /// variables ([`plangate_config::Config::down`]) among them.
    pub fn down_upstreams(&self) -> BTreeMap<String, String> {
        let mut down: BTreeMap<String, String> = self
            .slots
            .read()
            .iter()
            .filter_map(|(name, slot)| match read(&slot.state) {
                SlotState::Up(_) => None,
                SlotState::Connecting => Some((name.clone(), "connecting".to_owned())),
                SlotState::Down { reason, .. } => Some((name.clone(), reason)),
            })
            .collect();
        down.extend(self.config().down.clone());
        down
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

    pub(crate) fn rebuild_catalog(&self) {
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
    pub(crate) fn set_state(&self, slot: &Slot, state: SlotState) {
        write(&slot.state, state);
        self.rebuild_catalog();
    }

    /// The slot serving upstream `name` now.
    pub(crate) fn slot(&self, name: &str) -> Option<Arc<Slot>> {
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
    pub(crate) fn new(config: UpstreamConfig, shutdown: &CancellationToken) -> Arc<Slot> {
        Arc::new(Slot {
            config,
            state: RwLock::new(SlotState::Connecting),
            stop: shutdown.child_token(),
        })
    }
}

/// Waits until every upstream in `first` has made its first connection
/// attempt, at most [`FIRST_ATTEMPT_WAIT`]; `Err` when the wait ran out.
pub(crate) async fn first_attempts(
    first: Vec<(String, tokio::sync::oneshot::Receiver<()>)>,
) -> Result<(), tokio::time::error::Elapsed> {
    tokio::time::timeout(FIRST_ATTEMPT_WAIT, async {
        for (_, rx) in first {
            let _ = rx.await;
        }
    })
    .await
}
