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
        RateLimits {
            per_key,
            per_tool,
            clock: DefaultClock::default(),
        }
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
}
