//! Each key's durable state: the fold of its events, kept current and
//! appended to with compare-and-set.
//!
//! The mode and the plan of a key are folds of its events
//! ([`plangate_core::KeyState`]); nothing else is authoritative. This
//! module keeps an in-memory copy per key and brings it up to date by
//! folding only the events appended since (by this process or any other
//! sharing the store) — incremental application equals the fold, which the
//! core tests. Every change is a [`KeyLog::transact`]: read the current
//! state, decide, append the resulting events only if nobody appended in
//! between (the store's per-key sequence check), else re-read and decide
//! again. The events are durable before the caller answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use plangate_core::{Event, KeyState};
use plangate_store::{NewEvent, Store, StoreError};

/// How often a transaction is retried after losing a race before giving up.
const MAX_ATTEMPTS: usize = 32;

/// Why the log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The store failed.
    #[error("the event store failed: {0}")]
    Store(#[from] StoreError),
    /// A stored event cannot be read back (never expected; fail closed).
    #[error("event {key_seq} of key {key_id} cannot be read: {reason}")]
    Corrupt {
        /// The key.
        key_id: String,
        /// The event's position in the key's log.
        key_seq: i64,
        /// What was wrong.
        reason: String,
    },
    /// Too many writers raced for the same key.
    #[error("key {0} is too busy right now; try again")]
    Busy(String),
}

/// The per-key event log with its folded states.
pub struct KeyLog {
    store: Arc<dyn Store>,
    cache: Mutex<HashMap<String, KeyState>>,
}

impl KeyLog {
    /// A log over `store`.
    pub fn new(store: Arc<dyn Store>) -> KeyLog {
        KeyLog {
            store,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, key_id: &str) -> KeyState {
        let cache = match self.cache.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        cache.get(key_id).cloned().unwrap_or_default()
    }

    fn remember(&self, key_id: &str, state: &KeyState) {
        let mut cache = match self.cache.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        let newer = cache
            .get(key_id)
            .is_none_or(|known| known.last_seq < state.last_seq);
        if newer {
            cache.insert(key_id.to_owned(), state.clone());
        }
    }

    /// The key's current state: the cached fold plus every event appended
    /// since, by anyone.
    pub async fn state(&self, key_id: &str) -> Result<KeyState, LogError> {
        let mut state = self.cached(key_id);
        let fresh = self.store.load_events(key_id, state.last_seq).await?;
        if fresh.is_empty() {
            return Ok(state);
        }
        for stored in &fresh {
            let event: Event =
                serde_json::from_value(stored.body.clone()).map_err(|e| LogError::Corrupt {
                    key_id: key_id.to_owned(),
                    key_seq: stored.key_seq,
                    reason: e.to_string(),
                })?;
            state.apply(stored.key_seq, &event);
        }
        self.remember(key_id, &state);
        Ok(state)
    }

    /// Reads the state, lets `decide` choose events (and an answer), and
    /// appends them atomically — re-deciding on a fresh state whenever
    /// another writer got there first. `decide` must be a pure function of
    /// the state it is given (it may run more than once). Returns the state
    /// after the append and the answer.
    pub async fn transact<T, E>(
        &self,
        key_id: &str,
        mut decide: impl FnMut(&KeyState) -> Result<(Vec<Event>, T), E>,
    ) -> Result<Result<(KeyState, T), E>, LogError> {
        for _ in 0..MAX_ATTEMPTS {
            let mut state = self.state(key_id).await?;
            let (events, answer) = match decide(&state) {
                Ok(decided) => decided,
                Err(refusal) => return Ok(Err(refusal)),
            };
            if events.is_empty() {
                return Ok(Ok((state, answer)));
            }
            let mut batch = Vec::with_capacity(events.len());
            for e in &events {
                let body = serde_json::to_value(e).map_err(|err| LogError::Corrupt {
                    key_id: key_id.to_owned(),
                    key_seq: state.last_seq + 1,
                    reason: err.to_string(),
                })?;
                batch.push(NewEvent {
                    at_ms: e.at_ms,
                    kind: e.kind.name().to_owned(),
                    body,
                });
            }
            match self
                .store
                .append_events(key_id, state.last_seq, &batch)
                .await
            {
                Ok(last) => {
                    let mut seq = state.last_seq;
                    for e in &events {
                        seq += 1;
                        state.apply(seq, e);
                    }
                    debug_assert_eq!(seq, last);
                    self.remember(key_id, &state);
                    return Ok(Ok((state, answer)));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LogError::Busy(key_id.to_owned()))
    }
}
