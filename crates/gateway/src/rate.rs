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
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use plangate_config::{Config, RateLimit};
use plangate_core::Code;

use crate::refusal::Refusal;

/// The limits of one gateway.
pub struct RateLimits {
    per_key: Option<(RateLimit, DefaultKeyedRateLimiter<String>)>,
    per_tool: HashMap<(String, String), (RateLimit, DefaultDirectRateLimiter)>,
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
        let per_key = config
            .gateway
            .rate_limit
            .map(|l| (l, RateLimiter::keyed(quota(l))));
        let per_tool = config
            .upstreams
            .values()
            .flat_map(|u| {
                u.tools.iter().filter_map(|(tool, o)| {
                    o.rate_limit.map(|l| {
                        (
                            (u.name.clone(), tool.clone()),
                            (l, RateLimiter::direct(quota(l))),
                        )
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
