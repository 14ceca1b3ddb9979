//! The background sweep: plans past their life expire, claims whose
//! owner died become `in_doubt` — found by any process sharing the store,
//! never by start-up alone — and what applied steps replaced is dropped
//! once kept for `undo_ttl` ([`Gateway::drop_old_undo`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Weak;
use std::time::Duration;

use crate::{Gateway, apply, key_log};

/// Expires plans whose life is over, in the background (calls also expire
/// them lazily, so correctness never depends on this timer). Safe with many
/// sweepers: each expiry is a compare-and-set append, and a plan already
/// expired by someone else has nothing left to expire.
pub(crate) async fn sweep(gw: Weak<Gateway>) {
    loop {
        let Some(g) = gw.upgrade() else { return };
        let every = Duration::from_millis(u64::try_from(g.ttl_ms() / 4).unwrap_or(1000))
            .clamp(Duration::from_secs(1), Duration::from_secs(30));
        let shutdown = g.shutdown.clone();
        if let Err(e) = g.sweep_watched().await {
            tracing::warn!("plan expiry sweep: {e}");
        }
        if let Err(e) = g.drop_old_undo().await {
            tracing::warn!("undo retention sweep: {e}");
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
pub(crate) struct SweepWatch {
    /// Keys with a plan's life or a claim, each with when it is next due
    /// a look (ms since the epoch; `i64::MIN`: every pass).
    open: BTreeMap<String, i64>,
    /// Keys with events since the last pass (the follower adds them).
    pub(crate) dirty: BTreeSet<String>,
    passes: u64,
}

/// Every this many background passes, the sweep looks at every key with
/// events, not only the watched ones.
const FULL_SWEEP_EVERY: u64 = 20;

impl Gateway {
    /// One pass of the expiry sweep over every key with events.
    pub async fn sweep_once(&self) -> Result<usize, key_log::LogError> {
        let keys = self.store().keys_with_events().await?;
        self.sweep_keys(keys).await
    }

    /// The background pass: the watched keys, or every key now and then
    /// (and on the first pass).
    async fn sweep_watched(&self) -> Result<usize, key_log::LogError> {
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

    async fn sweep_keys(&self, keys: Vec<String>) -> Result<usize, key_log::LogError> {
        let ttl = self.ttl_ms();
        let mut expired = 0;
        for key_id in keys {
            // Not `state`: a pass over every key must not pull idle keys
            // into memory.
            let state = self.log().peek(&key_id).await?;
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
                .log()
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
    /// Drops what applied steps replaced once it was kept for `[gateway]
    /// undo_ttl`, and says so in each step's key's log (`undo_recorded`,
    /// dropped). Safe with many sweepers: a row is deleted by one of them,
    /// which alone records it. Answers how many were dropped.
    pub async fn drop_old_undo(&self) -> Result<usize, key_log::LogError> {
        let ttl = self.config().gateway.undo_ttl;
        let before = plangate_store::now_ms()
            .saturating_sub(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let dropped = self.store().undo_states().drop_undo_before(before).await?;
        let reason = format!(
            "kept for [gateway] undo_ttl ({}), then dropped",
            plangate_config::format_duration(ttl)
        );
        for (key_id, step_id) in &dropped {
            let event = plangate_core::Event {
                at_ms: plangate_store::now_ms(),
                key_id: key_id.clone(),
                actor: plangate_core::Actor::System,
                channel: plangate_core::Channel::Sweeper,
                kind: plangate_core::EventKind::UndoRecorded {
                    step_id: step_id.clone(),
                    undo: plangate_core::undo::Undo::Dropped {
                        reason: reason.clone(),
                    },
                },
            };
            self.log()
                .transact(key_id, |_| {
                    Ok::<_, std::convert::Infallible>((vec![event.clone()], ()))
                })
                .await?
                .unwrap_or_else(|never| match never {});
        }
        Ok(dropped.len())
    }

    /// Marks claims whose lease ran out `in_doubt` and finishes a dead apply
    /// of `key_id` (docs/design.md §5 "Leases": found by any process, never by
    /// start-up alone).
    pub async fn sweep_leases(&self, key_id: &str) -> Result<usize, key_log::LogError> {
        let lease = self.lease_ms();
        let acting_key = plangate_store::ApiKey {
            id: key_id.to_owned(),
            name: String::new(),
            scope: plangate_core::Scope::Read,
            prefix: String::new(),
            created_at_ms: 0,
            revoked_at_ms: None,
        };
        let acting = crate::acting::Acting {
            key: acting_key,
            channel: plangate_core::Channel::Sweeper,
            operator: None,
        };
        let (_, n) = self
            .log()
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
