//! Per-key and per-tool rate limits (`[gateway] rate_limit`,
//! `[upstreams.NAME.tools.TOOL] rate_limit`), off unless configured.
//!
//! A call over a limit is refused `rate_limited`, saying which limit and
//! when to try again (`retry_after_ms`), and reaches nothing. The per-key
//! limit counts every `tools/call` a key sends (all anonymous callers
//! together are one key); a per-tool limit counts every caller's calls to
//! that tool, so an expensive upstream is protected whoever calls it.
//! Steps an apply runs are not counted: the person already said yes to
//! them. Limits are per process (each replica enforces its own).
//!
//! Beside the rates, a cap on what one key has under way at once
//! (`[gateway] max_concurrent_calls_per_key`, [`CallSlots`]): a rate
//! counts calls begun, and a key whose calls are slow (a long upstream
//! call, a preview, an apply) could still hold every upstream connection
//! and task within any rate. Only calls that reach an upstream, plan or
//! apply take a slot — a tool of an upstream, `apply_plan`,
//! `exit_plan_mode` (a question, then an apply) — so a key at its cap can
//! still read its plan, discard it or end its session; and since every
//! question to the person and every apply runs inside such a call, the
//! cap also bounds how many sessions a key can hold against eviction
//! (`session_guard`). A call past
//! the cap waits up to [`SLOT_WAIT`] for a slot (an agent's burst of
//! parallel calls is served, a little later, rather than refused), then is
//! refused `rate_limited` with a retry hint.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use plangate_config::{Config, RateLimit};
use plangate_core::Code;

use crate::refusal::Refusal;

/// The limits of one gateway.
pub struct RateLimits {
    per_key: Option<(RateLimit, Arc<DefaultKeyedRateLimiter<String>>)>,
    per_tool: HashMap<(String, String), (RateLimit, Arc<DefaultDirectRateLimiter>)>,
    slots: Arc<CallSlots>,
    clock: DefaultClock,
}

fn quota(limit: RateLimit) -> Quota {
    let calls = NonZeroU32::new(limit.calls).unwrap_or(NonZeroU32::MIN);
    // `calls` at once, then one every `per / calls`.
    let every = limit.per / limit.calls.max(1);
    Quota::with_period(every.max(Duration::from_nanos(1)))
        .unwrap_or_else(|| Quota::per_second(calls))
        .allow_burst(calls)
}

impl RateLimits {
    /// The limits `config` sets.
    pub fn new(config: &Config) -> RateLimits {
        Self::carried(config, None)
    }

    /// The limits `config` sets, keeping `previous`'s counters for every
    /// limit that stayed the same (a reload of the config must not hand
    /// every key a fresh allowance).
    pub fn carried(config: &Config, previous: Option<&RateLimits>) -> RateLimits {
        let per_key = config.gateway.rate_limit.map(|l| {
            let kept = previous
                .and_then(|p| p.per_key.as_ref())
                .filter(|(was, _)| *was == l)
                .map(|(_, limiter)| limiter.clone());
            (
                l,
                kept.unwrap_or_else(|| Arc::new(RateLimiter::keyed(quota(l)))),
            )
        });
        let per_tool = config
            .upstreams
            .values()
            .flat_map(|u| {
                u.tools.iter().filter_map(|(tool, o)| {
                    o.rate_limit.map(|l| {
                        let at = (u.name.clone(), tool.clone());
                        let kept = previous
                            .and_then(|p| p.per_tool.get(&at))
                            .filter(|(was, _)| *was == l)
                            .map(|(_, limiter)| limiter.clone());
                        let limiter =
                            kept.unwrap_or_else(|| Arc::new(RateLimiter::direct(quota(l))));
                        (at, (l, limiter))
                    })
                })
            })
            .collect();
        // Calls under way keep their slots across a reload of the same
        // cap; a new cap counts afresh (calls under way finish on the old).
        let cap = config.gateway.max_concurrent_calls_per_key;
        let slots = previous
            .map(|p| p.slots.clone())
            .filter(|s| s.cap == cap)
            .unwrap_or_else(|| CallSlots::new(cap));
        RateLimits {
            per_key,
            per_tool,
            slots,
            clock: DefaultClock::default(),
        }
    }

    /// The per-key cap on calls under way.
    pub fn slots(&self) -> &Arc<CallSlots> {
        &self.slots
    }

    /// Whether any limit is configured (else nothing is counted).
    pub fn active(&self) -> bool {
        self.per_key.is_some() || !self.per_tool.is_empty()
    }

    /// Counts one call of `key` (its id; `None` for anonymous) to `tool`
    /// (`(upstream, tool)`, `None` for the gateway's own tools), or refuses
    /// it.
    pub fn check(
        &self,
        key: Option<&str>,
        key_name: &str,
        tool: Option<(&str, &str)>,
    ) -> Result<(), Refusal> {
        if let Some((limit, limiter)) = &self.per_key {
            let id = key.unwrap_or("anonymous").to_owned();
            if let Err(not_until) = limiter.check_key(&id) {
                let wait = not_until.wait_time_from(self.clock.now());
                return Err(refusal(
                    format!("key {key_name:?} sent more than {limit} calls ([gateway] rate_limit)"),
                    wait,
                ));
            }
            // Idle keys' state is dropped now and then; memory stays
            // bounded by the keys active within one window.
            if limiter.len() > 4096 {
                limiter.retain_recent();
            }
        }
        if let Some((upstream, name)) = tool
            && let Some((limit, limiter)) =
                self.per_tool.get(&(upstream.to_owned(), name.to_owned()))
            && let Err(not_until) = limiter.check()
        {
            let wait = not_until.wait_time_from(self.clock.now());
            return Err(refusal(
                format!(
                    "tool {name} of upstream {upstream} was called more than {limit} by all callers together ([upstreams.{upstream}.tools.{name}] rate_limit)"
                ),
                wait,
            ));
        }
        Ok(())
    }
}

// === calls under way ===

/// How long a call past its key's cap waits for a slot before it is
/// refused: enough for a burst of quick calls to be served in turn, short
/// enough that an agent is told to back off rather than left hanging.
pub const SLOT_WAIT: Duration = Duration::from_secs(1);

/// Each key's slots for calls under way (`[gateway]
/// max_concurrent_calls_per_key`; all anonymous callers together are one
/// key). A key's entry lives while it has a call under way or waiting, so
/// memory is bounded by the keys active at once.
pub struct CallSlots {
    cap: u32,
    keys: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// One call's slot, given back when dropped.
pub struct CallSlot {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    key: String,
    slots: Arc<CallSlots>,
}

impl CallSlots {
    /// `cap` slots per key.
    pub fn new(cap: u32) -> Arc<CallSlots> {
        Arc::new(CallSlots {
            cap: cap.max(1),
            keys: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a call of `key` (its id; `None` for anonymous), waiting
    /// up to [`SLOT_WAIT`] while the key has `cap` calls under way, or the
    /// refusal to answer.
    pub async fn take(
        self: &Arc<Self>,
        key: Option<&str>,
        key_name: &str,
    ) -> Result<CallSlot, Refusal> {
        if let Some(slot) = self.try_take(key) {
            return Ok(slot);
        }
        let id = key.unwrap_or("anonymous");
        let semaphore = self.semaphore(id);
        let permit = tokio::time::timeout(SLOT_WAIT, semaphore.acquire_owned())
            .await
            .ok()
            .and_then(Result::ok);
        let Some(permit) = permit else {
            self.tidy(id);
            return Err(refusal(
                format!(
                    "key {key_name:?} already has {} calls under way ([gateway] max_concurrent_calls_per_key); wait for one to end",
                    self.cap
                ),
                SLOT_WAIT,
            ));
        };
        Ok(CallSlot {
            permit: Some(permit),
            key: id.to_owned(),
            slots: self.clone(),
        })
    }

    /// A slot for a call of `key` if one is free now, without waiting
    /// (the path every call under the cap takes; [`CallSlots::take`]
    /// waits).
    pub fn try_take(self: &Arc<Self>, key: Option<&str>) -> Option<CallSlot> {
        let id = key.unwrap_or("anonymous");
        let permit = self.semaphore(id).try_acquire_owned().ok();
        let Some(permit) = permit else {
            self.tidy(id);
            return None;
        };
        Some(CallSlot {
            permit: Some(permit),
            key: id.to_owned(),
            slots: self.clone(),
        })
    }

    fn semaphore(&self, id: &str) -> Arc<tokio::sync::Semaphore> {
        let mut keys = self.keys.lock();
        if let Some(semaphore) = keys.get(id) {
            return semaphore.clone();
        }
        let semaphore = Arc::new(tokio::sync::Semaphore::new(self.cap as usize));
        keys.insert(id.to_owned(), semaphore.clone());
        semaphore
    }

    /// Forgets `id`'s entry when nothing holds or awaits one of its slots
    /// (the map's own reference is the only one left).
    fn tidy(&self, id: &str) {
        let mut keys = self.keys.lock();
        if keys.get(id).is_some_and(|s| Arc::strong_count(s) == 1) {
            keys.remove(id);
        }
    }

    /// How many keys have a call under way or waiting.
    pub fn keys_busy(&self) -> usize {
        self.keys.lock().len()
    }
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.slots.tidy(&self.key);
    }
}

fn refusal(what: String, wait: Duration) -> Refusal {
    let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
    let mut refusal = Refusal::new(
        Code::RateLimited,
        format!(
            "{what}; try again in {:.1} s. Nothing was run or planned",
            ms as f64 / 1000.0
        ),
    );
    refusal.retry_after_ms = Some(ms);
    refusal
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use plangate_config::ConfigSource;

    fn limited(limit: &str) -> Config {
        let mut config = Config::new(ConfigSource::Builtin("test"), Default::default());
        config.gateway.rate_limit = RateLimit::parse(limit);
        config
    }

    /// A reload must not hand every key a fresh allowance: an unchanged
    /// limit keeps its counters, a changed one starts anew.
    #[test]
    fn a_reload_keeps_the_counters_of_limits_that_did_not_change() {
        let before = RateLimits::new(&limited("1/h"));
        assert!(before.check(Some("k"), "k", None).is_ok());
        assert!(before.check(Some("k"), "k", None).is_err());

        let same = RateLimits::carried(&limited("1/h"), Some(&before));
        let refused = same.check(Some("k"), "k", None).unwrap_err();
        assert_eq!(refused.code, Code::RateLimited);

        let changed = RateLimits::carried(&limited("2/h"), Some(&same));
        assert!(changed.check(Some("k"), "k", None).is_ok());

        let off = RateLimits::carried(&limited("off"), Some(&changed));
        assert!(!off.active());
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_past_its_cap_waits_a_moment_then_is_refused_while_other_keys_go_on() {
        let slots = CallSlots::new(2);
        let one = slots.take(Some("a"), "a").await.unwrap();
        let _two = slots.take(Some("a"), "a").await.unwrap();
        let started = tokio::time::Instant::now();
        let refused = slots.take(Some("a"), "a").await.err().unwrap();
        assert_eq!(started.elapsed(), SLOT_WAIT, "it waited for a slot first");
        assert_eq!(refused.code, Code::RateLimited);
        assert_eq!(refused.retry_after_ms, Some(1000));
        assert!(
            refused.message.contains("max_concurrent_calls_per_key"),
            "{}",
            refused.message
        );
        let _other = slots.take(Some("b"), "b").await.unwrap();
        let _anonymous = slots.take(None, "anonymous").await.unwrap();

        // A slot given back while a call waits is that call's.
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take(Some("a"), "a").await.is_ok() }
        });
        tokio::time::sleep(SLOT_WAIT / 2).await;
        drop(one);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test]
    async fn a_key_with_nothing_under_way_holds_no_entry() {
        let slots = CallSlots::new(1);
        let slot = slots.take(Some("a"), "a").await.unwrap();
        assert_eq!(slots.keys_busy(), 1);
        drop(slot);
        assert_eq!(slots.keys_busy(), 0);
        let _held = slots.take(Some("a"), "a").await.unwrap();
        assert!(slots.take(Some("a"), "a").await.is_err());
        assert_eq!(slots.keys_busy(), 1, "the refused call left nothing behind");
    }
}
