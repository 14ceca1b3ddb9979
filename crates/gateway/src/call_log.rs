//! Every call on the record (docs/design.md §9): each call of a key that is not a
//! read — run, planned, asked or refused — becomes a durable
//! `call_recorded` event in that key's log before its answer goes back
//! (a planned one in the same append as its step: [`crate::plan`]);
//! `[audit] reads = true` records reads too.
//!
//! Refusals an agent can repeat at no cost (`forbidden`,
//! `forbidden_by_mode`, `forbidden_by_rule`, `rate_limited`, `too_large`)
//! are coalesced per key
//! and code:
//! the first in a minute is written, the rest are counted and the count
//! rides on the next one written (`repeated`), so a loop of refused calls
//! cannot force a write (and an fsync) each. Counts not yet written when
//! the process stops are lost; the refusals themselves were answered.
//!
//! Calls without a key are not recorded: they have no log, and they can
//! only read (or be refused `plan_needs_key`).

use std::time::{Duration, Instant};

use hashlink::LruCache;
use parking_lot::Mutex;
use plangate_core::{CallDecision, CallOutcome, CallRecord, Code, EventKind, JsonText};
use rmcp::ErrorData;
use rmcp::model::CallToolResponse;
use serde_json::Value;

use crate::acting::Acting;
use crate::{CatalogTool, Engine, Gateway};

/// How long one written refusal stands for the same key and code.
const WINDOW: Duration = Duration::from_secs(60);

/// The most (key, code) windows held; the least recently used goes first
/// (its count is lost, its next refusal is written).
const MAX_WINDOWS: usize = 10_000;

/// Refusals counted rather than written one by one.
const COALESCED: [Code; 5] = [
    Code::Forbidden,
    Code::ForbiddenByMode,
    Code::ForbiddenByRule,
    Code::RateLimited,
    Code::TooLarge,
];

struct Window {
    since: Instant,
    counted: u32,
}

/// The coalescing windows of one process.
pub struct CallLog {
    windows: Mutex<LruCache<(String, String), Window>>,
}

impl Default for CallLog {
    fn default() -> Self {
        CallLog {
            windows: Mutex::new(LruCache::new(MAX_WINDOWS)),
        }
    }
}

impl CallLog {
    /// Whether a refusal `code` of `key_id` is written now: `Some(n)` with
    /// the `n` counted since the last one written, or `None` to count it.
    fn admit(&self, key_id: &str, code: &str, now: Instant) -> Option<u32> {
        if !COALESCED.iter().any(|c| c.as_str() == code) {
            return Some(0);
        }
        let mut windows = self.windows.lock();
        let k = (key_id.to_owned(), code.to_owned());
        match windows.get_mut(&k) {
            Some(w) if now.duration_since(w.since) < WINDOW => {
                w.counted = w.counted.saturating_add(1);
                None
            }
            Some(w) => {
                let counted = w.counted;
                *w = Window {
                    since: now,
                    counted: 0,
                };
                Some(counted)
            }
            None => {
                windows.insert(
                    k,
                    Window {
                        since: now,
                        counted: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

/// One call to record: what was called, decided and how it ended.
pub struct Call<'a> {
    /// The tool called.
    pub tool: &'a CatalogTool,
    /// Its arguments as sent (redacted here), if they were read.
    pub arguments: Option<&'a Value>,
    /// The decision.
    pub decision: CallDecision,
    /// The end.
    pub outcome: CallOutcome,
    /// The refusal's or error's code.
    pub code: Option<String>,
    /// When the call arrived.
    pub started: Instant,
    /// The rule that decided it, if one did.
    pub rule: Option<String>,
}

/// Whether calls of `tool` are recorded: every call that is not a read,
/// and reads with `[audit] reads`.
pub fn records(gw: &Engine, tool: &CatalogTool) -> bool {
    tool.effect > plangate_core::Effect::Read || gw.config().audit.reads
}

/// The record of `call` (arguments redacted), or `None` when it is a
/// refusal counted into the next one.
pub fn record_of(gw: &Gateway, key_id: &str, call: Call<'_>) -> Option<CallRecord> {
    let repeated = match (call.outcome, call.code.as_deref()) {
        (CallOutcome::Refused, Some(code)) => gw.call_log().admit(key_id, code, Instant::now())?,
        _ => 0,
    };
    Some(CallRecord {
        repeated,
        ..record_once(gw, call)
    })
}

/// The record of `call` (arguments redacted), counted into no other: a
/// call that was not refused, such as a planned write.
pub fn record_once(engine: &Engine, call: Call<'_>) -> CallRecord {
    let arguments = call
        .arguments
        .map(|v| JsonText::from_value(&engine.redactor().split(v).0));
    CallRecord {
        server: call.tool.upstream.clone(),
        tool: call.tool.original.clone(),
        exposed_as: call.tool.exposed.clone(),
        effect: call.tool.effect,
        arguments,
        decision: call.decision,
        outcome: call.outcome,
        code: call.code,
        step_id: None,
        duration_ms: u64::try_from(call.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        repeated: 0,
        rule: call.rule,
    }
}

/// Records `call` of `acting`'s key durably, unless it is not recorded
/// ([`records`]) or is counted into a later record. A store failure is
/// logged: the call was answered (or run) already, and its answer is not
/// changed by the audit log failing.
pub async fn record(gw: &Gateway, acting: &Acting, call: Call<'_>) {
    if !records(gw, call.tool) {
        return;
    }
    let tool = call.tool.exposed.clone();
    let Some(record) = record_of(gw, &acting.key.id, call) else {
        return;
    };
    append(gw, acting, record, &tool).await;
}

/// Records that a message of `acting`'s key was refused `too_large`
/// before it was read (so its tool is not known: the record names none),
/// coalesced like every cheap refusal. `bytes` is its declared size.
pub async fn record_too_large(gw: &Gateway, acting: &Acting, bytes: Option<u64>) {
    let code = plangate_core::AccessCode::TooLarge.as_str().to_owned();
    let Some(repeated) = gw.call_log().admit(&acting.key.id, &code, Instant::now()) else {
        return;
    };
    let record = CallRecord {
        server: String::new(),
        tool: String::new(),
        exposed_as: String::new(),
        // Unread, so unknown: the spec's default for a tool nothing says
        // about.
        effect: plangate_core::Effect::Destructive,
        arguments: bytes.map(|b| JsonText::from_value(&serde_json::json!({"bytes": b}))),
        decision: CallDecision::Refuse,
        outcome: CallOutcome::Refused,
        code: Some(code),
        step_id: None,
        duration_ms: 0,
        repeated,
        rule: None,
    };
    append(gw, acting, record, "a message over max_request_bytes").await;
}

/// Appends one record to `acting`'s key's log; a failure is logged.
async fn append(gw: &Gateway, acting: &Acting, record: CallRecord, what: &str) {
    let event = acting.event(EventKind::CallRecorded { call: record });
    // The record decides nothing from the key's state, so the state in
    // memory will do: no read of the log before the one durable append.
    let known = gw.log().cached(&acting.key.id);
    let appended = gw
        .log()
        .transact_from(&acting.key.id, known, |_| {
            Ok::<_, std::convert::Infallible>((vec![event.clone()], ()))
        })
        .await;
    if let Err(e) = appended {
        tracing::error!(key = %acting.key.name, call = what, "the call could not be recorded in the audit log: {e}");
    }
}

/// How a forwarded call ended, for its record: the outcome and a code.
pub fn outcome_of(answer: &Result<CallToolResponse, ErrorData>) -> (CallOutcome, Option<String>) {
    match answer {
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
            let code = result
                .structured_content
                .as_ref()
                .and_then(|s| s.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("upstream_error")
                .to_owned();
            (CallOutcome::Error, Some(code))
        }
        Ok(CallToolResponse::Complete(_)) => (CallOutcome::Ok, None),
        Ok(_) => (CallOutcome::Pending, None),
        Err(_) => (CallOutcome::Error, Some("upstream_error".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_refusal_is_counted_then_written_with_its_count() {
        let log = CallLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit("k", "forbidden", t0), Some(0));
        for _ in 0..5 {
            assert_eq!(log.admit("k", "forbidden", t0), None);
        }
        // Another key, another code: windows of their own.
        assert_eq!(log.admit("j", "forbidden", t0), Some(0));
        assert_eq!(log.admit("k", "rate_limited", t0), Some(0));
        assert_eq!(log.admit("k", "too_large", t0), Some(0));
        assert_eq!(log.admit("k", "too_large", t0), None);
        // A refusal not coalesced is always written.
        assert_eq!(log.admit("k", "invalid_arguments", t0), Some(0));
        assert_eq!(log.admit("k", "invalid_arguments", t0), Some(0));
        // After the window the next one is written, carrying the five.
        let later = t0 + WINDOW + Duration::from_millis(1);
        assert_eq!(log.admit("k", "forbidden", later), Some(5));
        assert_eq!(log.admit("k", "forbidden", later), None);
    }
}
