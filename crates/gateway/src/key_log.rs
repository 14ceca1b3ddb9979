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

use hashlink::LruCache;
use std::sync::Arc;

use parking_lot::Mutex;

use plangate_core::chain::{self, Chain, Sealed};
use plangate_core::{Event, KeyState, ToolPins};
use plangate_store::{LogKey, LogMark, NewEvent, PublicLogKey, Seal, Store, StoreError};

/// The operators' log, folded ([`crate::operator::factor`]).
pub type OperatorsLog = KeyLog<plangate_core::operators::Operators>;

/// The operators' log over `store`, signed and checked with `key`.
pub fn operators_log(store: Arc<dyn Store>, key: Arc<LogKey>) -> OperatorsLog {
    KeyLog::with_capacity(store, key, 1)
}

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

/// How many keys' folded states are kept in memory by default (the
/// gateway takes `gateway.cached_keys`). A key not among them (not used for
/// the longest time) is folded again from the store when next used: memory
/// stays bounded however many keys ever planned.
pub const CACHED_KEYS: usize = plangate_config::DEFAULT_CACHED_KEYS as usize;

/// A state folded from one log of the store: a key's mode and plan
/// ([`KeyState`]), or the tool pins ([`ToolPins`]).
pub trait Fold: Default + Clone + Send + Sync + 'static {
    /// The seq of the last event folded in.
    fn last_seq(&self) -> i64;
    /// Folds in one event with its seq.
    fn apply(&mut self, seq: i64, event: &Event);
    /// Where the log's hash chain stands ([`plangate_core::chain`]).
    fn chain_mut(&mut self) -> &mut Chain;
}

impl Fold for KeyState {
    fn last_seq(&self) -> i64 {
        self.last_seq
    }
    fn apply(&mut self, seq: i64, event: &Event) {
        KeyState::apply(self, seq, event);
    }
    fn chain_mut(&mut self) -> &mut Chain {
        &mut self.chain
    }
}

impl Fold for plangate_core::operators::Operators {
    fn last_seq(&self) -> i64 {
        self.last_seq
    }
    fn apply(&mut self, seq: i64, event: &Event) {
        plangate_core::operators::Operators::apply(self, seq, event);
    }
    fn chain_mut(&mut self) -> &mut Chain {
        &mut self.chain
    }
}

impl Fold for ToolPins {
    fn last_seq(&self) -> i64 {
        self.last_seq
    }
    fn apply(&mut self, seq: i64, event: &Event) {
        ToolPins::apply(self, seq, event);
    }
    fn chain_mut(&mut self) -> &mut Chain {
        &mut self.chain
    }
}

/// The per-key event log with its folded states (by default keys' plans;
/// `KeyLog<ToolPins>` for the tool pins' log).
pub struct KeyLog<S: Fold = KeyState> {
    store: Arc<dyn Store>,
    /// Signs each appended event's link; its public half checks every
    /// event read.
    key: Arc<LogKey>,
    public: PublicLogKey,
    cache: Mutex<Cache<S>>,
    /// How many times a key's events were read from the store.
    #[cfg(test)]
    loads: std::sync::atomic::AtomicUsize,
}

/// Folded states of the most recently used keys (an exact LRU).
struct Cache<S> {
    states: LruCache<String, Held<S>>,
}

/// A key's folded state, with the store's change mark taken before the
/// events it holds were read: while the store still shows that mark, the
/// state is current without asking it
/// ([`plangate_store::EventLog::log_mark`]).
struct Held<S> {
    state: S,
    mark: Option<LogMark>,
}

impl<S: Fold> Cache<S> {
    fn get(&mut self, key_id: &str) -> Option<S> {
        self.states.get(key_id).map(|held| held.state.clone())
    }

    /// The held state if it is known current at `mark`; otherwise the
    /// held state (possibly behind) as `Err`, for folding on.
    fn current(&mut self, key_id: &str, mark: Option<LogMark>) -> Result<S, Option<S>> {
        match self.states.get(key_id) {
            Some(held) if mark.is_some() && held.mark == mark => Ok(held.state.clone()),
            Some(held) => Err(Some(held.state.clone())),
            None => Err(None),
        }
    }

    /// Keeps `state` unless a newer fold of the key is already held (a
    /// concurrent reader may have folded further). An equal fold takes
    /// the new mark: each pair of state and mark is true on its own, and
    /// the newest mark is the one most likely to still hold.
    fn put(&mut self, key_id: &str, state: &S, mark: Option<LogMark>) {
        match self.states.get_mut(key_id) {
            Some(held) if held.state.last_seq() > state.last_seq() => {}
            Some(held) if held.state.last_seq() == state.last_seq() => held.mark = mark,
            _ => {
                self.states.insert(
                    key_id.to_owned(),
                    Held {
                        state: state.clone(),
                        mark,
                    },
                );
            }
        }
    }
}

impl KeyLog<KeyState> {
    /// The keys' logs over `store`, signed and checked with `key`, keeping
    /// at most [`CACHED_KEYS`] folded states.
    pub fn new(store: Arc<dyn Store>, key: Arc<LogKey>) -> KeyLog {
        Self::with_capacity(store, key, CACHED_KEYS)
    }
}

impl<S: Fold> KeyLog<S> {
    /// A log over `store`, signed and checked with `key`, keeping at most
    /// `capacity` keys' folded states.
    pub fn with_capacity(store: Arc<dyn Store>, key: Arc<LogKey>, capacity: usize) -> KeyLog<S> {
        KeyLog {
            store,
            public: key.public(),
            key,
            cache: Mutex::new(Cache {
                states: LruCache::new(capacity.max(1)),
            }),
            #[cfg(test)]
            loads: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn remember(&self, key_id: &str, state: &S, mark: Option<LogMark>) {
        self.cache.lock().put(key_id, state, mark);
    }

    /// How many keys' states are held in memory now.
    pub fn cached_keys(&self) -> usize {
        self.cache.lock().states.len()
    }

    /// The key's current state: the cached fold plus every event appended
    /// since, by anyone. When the store's change mark is the one taken
    /// before the cached fold last read the store, nothing was appended
    /// since, by anyone, and the fold is the answer without a query.
    pub async fn state(&self, key_id: &str) -> Result<S, LogError> {
        // Taken before reading: the events read next include every
        // commit up to it.
        let mark = self.store.log_mark();
        let cached = match self.cache.lock().current(key_id, mark) {
            Ok(current) => return Ok(current),
            Err(behind) => behind,
        };
        let state = self.fold_onto(key_id, cached.unwrap_or_default()).await?;
        self.remember(key_id, &state, mark);
        Ok(state)
    }

    /// [`KeyLog::state`], answered from memory when the held state is
    /// folded up to `seen` — the key's last key_seq as the statement that
    /// authenticated the request read it ([`crate::auth::LogSeen`]): that
    /// statement ran after the request arrived, so the held state is
    /// current for it. Otherwise (no `seen`, or the held state is behind
    /// or ahead of it) the store is asked as by [`KeyLog::state`].
    pub async fn state_seen(&self, key_id: &str, seen: Option<i64>) -> Result<S, LogError> {
        if let Some(seen) = seen
            && let Some(held) = self.cached(key_id)
            && held.last_seq() == seen
        {
            return Ok(held);
        }
        self.state(key_id).await
    }

    /// `look` at the key's state as this process last saw it, without
    /// asking the store or copying the state (which holds the whole plan);
    /// `None` if no state of the key is held.
    pub fn look_cached<T>(&self, key_id: &str, look: impl FnOnce(&S) -> T) -> Option<T> {
        self.cache
            .lock()
            .states
            .peek(key_id)
            .map(|held| look(&held.state))
    }

    /// The key's state as this process last saw it, without asking the
    /// store: for an append that decides nothing from the state (a call's
    /// record), whose compare-and-set catches a stale one and retries on a
    /// fresh read.
    pub fn cached(&self, key_id: &str) -> Option<S> {
        self.cache.lock().get(key_id)
    }

    /// The key's current state without making it a recently used key: a
    /// key not in memory is folded from the store and not kept. For passes
    /// over every key (the background sweep) that must not fill memory
    /// with idle keys.
    pub async fn peek(&self, key_id: &str) -> Result<S, LogError> {
        let mark = self.store.log_mark();
        let cached = self
            .cache
            .lock()
            .states
            .peek(key_id)
            .map(|held| held.state.clone());
        let keep = cached.is_some();
        let state = self.fold_onto(key_id, cached.unwrap_or_default()).await?;
        if keep {
            self.remember(key_id, &state, mark);
        }
        Ok(state)
    }

    /// `state` brought up to date with the events appended after it, each
    /// row followed in the hash chain and its signature checked: a row
    /// that does not verify is still folded (a person must see what the
    /// log holds) but marks the chain broken, and an apply refuses it.
    async fn fold_onto(&self, key_id: &str, mut state: S) -> Result<S, LogError> {
        #[cfg(test)]
        self.loads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fresh = self.store.load_events(key_id, state.last_seq()).await?;
        for stored in fresh {
            let key_seq = stored.key_seq;
            let sealed = Sealed {
                hash: stored.hash.as_deref(),
                sig: stored.sig.as_deref(),
            };
            let intact = state.chain_mut().broken.is_none();
            state.chain_mut().follow(
                key_id,
                key_seq,
                stored.at_ms,
                &stored.kind,
                stored.body.as_str(),
                sealed,
                |link, sig| self.public.verifies(link, sig),
            );
            if intact && let Some(broken) = &state.chain_mut().broken {
                tracing::error!(
                    key_id,
                    key_seq = broken.key_seq,
                    "the event log does not verify: {broken}; nothing is applied from it (`plangate audit verify`)"
                );
            }
            let event: Event =
                serde_json::from_str(stored.body.as_str()).map_err(|e| LogError::Corrupt {
                    key_id: key_id.to_owned(),
                    key_seq,
                    reason: e.to_string(),
                })?;
            state.apply(key_seq, &event);
        }
        // An append lands whole, so a read ends on a signed event unless
        // rows were added without the log key.
        let intact = state.chain_mut().broken.is_none();
        state.chain_mut().settle(key_id);
        if intact && let Some(broken) = &state.chain_mut().broken {
            tracing::error!(
                key_id,
                key_seq = broken.key_seq,
                "the event log does not verify: {broken}; nothing is applied from it (`plangate audit verify`)"
            );
        }
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
        decide: impl FnMut(&S) -> Result<(Vec<Event>, T), E>,
    ) -> Result<Result<(S, T), E>, LogError> {
        self.transact_from(key_id, None, decide).await
    }

    /// [`KeyLog::transact`], deciding first on `known` — a state the caller
    /// just read or wrote — instead of reading the log again. The append is
    /// still compare-and-set on `known.last_seq`, so a state that is no
    /// longer current only costs a retry on a fresh read.
    pub async fn transact_from<T, E>(
        &self,
        key_id: &str,
        mut known: Option<S>,
        mut decide: impl FnMut(&S) -> Result<(Vec<Event>, T), E>,
    ) -> Result<Result<(S, T), E>, LogError> {
        for _ in 0..MAX_ATTEMPTS {
            let mut state = match known.take() {
                Some(state) => state,
                None => self.state(key_id).await?,
            };
            let (events, answer) = match decide(&state) {
                Ok(decided) => decided,
                Err(refusal) => return Ok(Err(refusal)),
            };
            if events.is_empty() {
                return Ok(Ok((state, answer)));
            }
            let (batch, links) = self.sealed_batch(key_id, &mut state, &events)?;
            match self
                .store
                .append_events_marked(key_id, state.last_seq(), &batch)
                .await
            {
                Ok((last, mark)) => {
                    let mut seq = state.last_seq();
                    for (e, link) in events.iter().zip(links) {
                        seq += 1;
                        state.apply(seq, e);
                        state.chain_mut().extend(link);
                    }
                    debug_assert_eq!(seq, last);
                    // The store's mark when it knows no other commit came
                    // between: then this state is current at it.
                    self.remember(key_id, &state, mark);
                    return Ok(Ok((state, answer)));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LogError::Busy(key_id.to_owned()))
    }

    /// [`KeyLog::transact`] over several keys at once, all or nothing: reads
    /// each key's state, lets `decide` choose each key's events (in the
    /// order of `key_ids`, each key once) and an answer, and appends them
    /// in one transaction ([`plangate_store::EventLog::append_together`]) —
    /// deciding again on fresh states whenever another writer moved any of
    /// the logs first. A refusal from `decide` records nothing for any key.
    /// For a person's act on several plans at once (approve them all, or
    /// none).
    pub async fn transact_together<T, E>(
        &self,
        key_ids: &[&str],
        mut decide: impl FnMut(&[S]) -> Result<(Vec<Vec<Event>>, T), E>,
    ) -> Result<Result<(Vec<S>, T), E>, LogError> {
        for _ in 0..MAX_ATTEMPTS {
            let mut states = Vec::with_capacity(key_ids.len());
            for key_id in key_ids {
                states.push(self.state(key_id).await?);
            }
            let (events, answer) = match decide(&states) {
                Ok(decided) => decided,
                Err(refusal) => return Ok(Err(refusal)),
            };
            let mut parts = Vec::with_capacity(key_ids.len());
            let mut links = Vec::with_capacity(key_ids.len());
            for ((key_id, state), events) in key_ids.iter().zip(&mut states).zip(&events) {
                let (batch, chained) = self.sealed_batch(key_id, state, events)?;
                parts.push(plangate_store::AppendPart {
                    key_id: (*key_id).to_owned(),
                    expected_key_seq: state.last_seq(),
                    events: batch,
                });
                links.push(chained);
            }
            match self.store.append_together(&parts).await {
                Ok(_) => {
                    for (((key_id, state), events), chained) in
                        key_ids.iter().zip(&mut states).zip(&events).zip(links)
                    {
                        let mut seq = state.last_seq();
                        for (e, link) in events.iter().zip(chained) {
                            seq += 1;
                            state.apply(seq, e);
                            state.chain_mut().extend(link);
                        }
                        self.remember(key_id, state, None);
                    }
                    return Ok(Ok((states, answer)));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LogError::Busy(key_ids.join(", ")))
    }

    /// `events` as rows to append after `state`, each with its link in the
    /// key's hash chain and the log key's signature over it; the links, to
    /// move the chain's head once the append lands.
    fn sealed_batch(
        &self,
        key_id: &str,
        state: &mut S,
        events: &[Event],
    ) -> Result<(Vec<NewEvent>, Vec<[u8; 32]>), LogError> {
        let mut head = state.chain_mut().head;
        let mut key_seq = state.last_seq();
        let mut batch = Vec::with_capacity(events.len());
        let mut links = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            key_seq += 1;
            let corrupt = |err: serde_json::Error| LogError::Corrupt {
                key_id: key_id.to_owned(),
                key_seq,
                reason: err.to_string(),
            };
            let body = serde_json::to_value(e).map_err(corrupt)?;
            let text = plangate_store::body_text(&body).map_err(corrupt)?;
            let kind = e.kind.name();
            head = chain::link(&head, key_id, key_seq, e.at_ms, kind, &text);
            batch.push(NewEvent {
                at_ms: e.at_ms,
                kind: kind.to_owned(),
                body,
                // The append's last link is signed; it covers the others,
                // and the append lands whole or not at all.
                seal: Some(Seal {
                    hash: hex::encode(head),
                    sig: (i + 1 == events.len()).then(|| self.key.sign(&head)),
                }),
            });
            links.push(head);
        }
        Ok((batch, links))
    }

    /// The public half of the key this log is checked with.
    pub fn public_key(&self) -> PublicLogKey {
        self.public
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use plangate_core::{Actor, Channel, EventKind};

    use super::*;

    fn mode(key_id: &str, mode: &str) -> Event {
        Event {
            at_ms: 1,
            key_id: key_id.to_owned(),
            actor: Actor::System,
            channel: Channel::Cli,
            kind: EventKind::ModeSet {
                mode: mode.to_owned(),
            },
        }
    }

    #[tokio::test]
    async fn memory_holds_at_most_its_capacity_and_evicted_keys_fold_again_correctly() {
        let dir = tempfile::tempdir().unwrap();
        let store = plangate_store::open_sqlite(&dir.path().join("plangate.db"))
            .await
            .unwrap();
        let log = KeyLog::<KeyState>::with_capacity(store.clone(), test_key(), 8);
        for i in 0..40 {
            let key = format!("key_{i}");
            log.transact(&key, |_| {
                Ok::<_, std::convert::Infallible>((vec![mode(&key, &format!("m{i}"))], ()))
            })
            .await
            .unwrap()
            .unwrap();
            assert!(log.cached_keys() <= 8, "{} keys held", log.cached_keys());
        }
        // Every key, held or evicted, reads back its own last mode.
        for i in 0..40 {
            let state = log.state(&format!("key_{i}")).await.unwrap();
            assert_eq!(state.mode.as_deref(), Some(format!("m{i}").as_str()));
            assert_eq!(state.last_seq, 1);
        }
        // `peek` of a key not held does not make it held.
        let before = log.cached_keys();
        let peeked = log.peek("key_39").await.unwrap();
        assert_eq!(peeked.mode.as_deref(), Some("m39"));
        assert_eq!(log.cached_keys(), before);
        // Another writer's event is seen whether or not the key is held.
        let other = KeyLog::<KeyState>::with_capacity(store.clone(), test_key(), 1);
        set(&other, "key_0", "late").await;
        let state = log.state("key_0").await.unwrap();
        assert_eq!(state.mode.as_deref(), Some("late"));
        assert_eq!(
            state.chain.broken, None,
            "another plangate's event verifies"
        );
    }

    fn test_key() -> Arc<LogKey> {
        Arc::new(LogKey::from_seed(&[5; 32]).unwrap())
    }

    #[tokio::test]
    async fn a_log_written_before_signing_is_covered_by_its_first_signed_event() {
        let dir = tempfile::tempdir().unwrap();
        let store = plangate_store::open_sqlite(&dir.path().join("plangate.db"))
            .await
            .unwrap();
        // What an older plangate left: rows without hash or signature.
        let old = |m: &str| NewEvent {
            at_ms: 1,
            kind: "mode_set".into(),
            body: serde_json::to_value(mode("k", m)).unwrap(),
            seal: None,
        };
        store
            .append_events("k", 0, &[old("plan"), old("default")])
            .await
            .unwrap();
        let log = KeyLog::new(store.clone(), test_key());
        let before = log.state("k").await.unwrap();
        assert_eq!(
            (before.chain.unsigned, before.chain.broken.clone()),
            (2, None)
        );
        set(&log, "k", "plan").await;
        // A fresh reader: the old rows pass, the signed one covers them.
        let fresh = KeyLog::new(store, test_key());
        let state = fresh.state("k").await.unwrap();
        assert_eq!(state.chain.broken, None);
        assert!(state.chain.signed);
        assert_eq!(state.mode.as_deref(), Some("plan"));
    }

    #[tokio::test]
    async fn a_row_put_into_the_store_without_the_log_key_breaks_the_chain_and_apply_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let store = plangate_store::open_sqlite(&dir.path().join("plangate.db"))
            .await
            .unwrap();
        let log = KeyLog::new(store.clone(), test_key());
        set(&log, "k", "plan").await;
        set(&log, "k", "plan").await;
        assert_eq!(log.state("k").await.unwrap().chain.broken, None);
        // What an insert into the database looks like: no seal at all.
        let forged = NewEvent {
            at_ms: 2,
            kind: "mode_set".into(),
            body: serde_json::to_value(mode("k", "default")).unwrap(),
            seal: None,
        };
        store.append_events("k", 2, &[forged]).await.unwrap();
        let state = log.state("k").await.unwrap();
        let broken = state.chain.broken.clone().expect("the forged row is seen");
        assert_eq!(broken.key_seq, 3);
        assert!(broken.reason.contains("unsigned"), "{}", broken.reason);
        let refused = plangate_core::rules::log_intact(&state).unwrap_err();
        assert_eq!(refused.code(), plangate_core::Code::TamperedLog);
        // Signed with another key: a break too, named as such.
        let other = KeyLog::new(
            store.clone(),
            Arc::new(LogKey::from_seed(&[6; 32]).unwrap()),
        );
        set(&other, "j", "plan").await;
        let broken = log.state("j").await.unwrap().chain.broken.expect("broken");
        assert!(broken.reason.contains("signature"), "{}", broken.reason);
        // A fresh reader folding from the start finds the same break.
        let fresh = KeyLog::new(store, test_key());
        assert_eq!(
            fresh
                .state("k")
                .await
                .unwrap()
                .chain
                .broken
                .unwrap()
                .key_seq,
            3
        );
    }

    /// The mode `log` reads for `key` now.
    async fn mode_of(log: &KeyLog, key: &str) -> Option<String> {
        log.state(key).await.unwrap().mode
    }

    async fn set(log: &KeyLog, key: &str, m: &str) {
        log.transact(key, |_| {
            Ok::<_, std::convert::Infallible>((vec![mode(key, m)], ()))
        })
        .await
        .unwrap()
        .unwrap();
    }

    /// Two logs, each on its own store handle, on one SQLite file in `dir`.
    async fn two_processes(dir: &tempfile::TempDir) -> (KeyLog, KeyLog) {
        let path = dir.path().join("plangate.db");
        let open = || async {
            KeyLog::new(
                plangate_store::open_sqlite(&path).await.unwrap(),
                test_key(),
            )
        };
        (open().await, open().await)
    }

    /// How many times `log` read a key's events from the store.
    fn loads(log: &KeyLog) -> usize {
        log.loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_state_is_answered_from_memory_only_while_nothing_was_committed_anywhere() {
        let dir = tempfile::tempdir().unwrap();
        // Two gateways on one data dir (two stdio windows).
        let (here, there) = two_processes(&dir).await;
        set(&here, "key_a", "plan").await;
        // (The transaction read the key once, to decide.)
        let base = loads(&here);

        // Its own append left the state current at the mark after it.
        for _ in 0..5 {
            assert_eq!(mode_of(&here, "key_a").await.as_deref(), Some("plan"));
        }
        assert_eq!(loads(&here), base, "nothing committed since: no store read");

        // The other process changes the key: seen at once.
        set(&there, "key_a", "act").await;
        assert_eq!(mode_of(&here, "key_a").await.as_deref(), Some("act"));
        assert_eq!(mode_of(&here, "key_a").await.as_deref(), Some("act"));
        assert_eq!(loads(&here), base + 1);

        // A commit to another key also moves the mark: one read, same state.
        set(&there, "key_b", "plan").await;
        assert_eq!(mode_of(&here, "key_a").await.as_deref(), Some("act"));
        assert_eq!(mode_of(&here, "key_a").await.as_deref(), Some("act"));
        assert_eq!(loads(&here), base + 2);

        // This process's own commit to key_c: key_c is current, key_a
        // (held at an older mark) is read once more.
        set(&here, "key_c", "plan").await;
        let base = loads(&here);
        assert_eq!(mode_of(&here, "key_c").await.as_deref(), Some("plan"));
        assert_eq!(loads(&here), base);
        assert_eq!(mode_of(&here, "key_a").await.as_deref(), Some("act"));
        assert_eq!(loads(&here), base + 1);
    }

    #[tokio::test]
    async fn a_state_folded_up_to_where_authentication_saw_the_log_is_answered_without_a_read() {
        let dir = tempfile::tempdir().unwrap();
        let (here, there) = two_processes(&dir).await;
        set(&here, "key_a", "plan").await;
        // Another process writes after this request's key was
        // authenticated at key_seq 1: the request is decided as of then.
        set(&there, "key_a", "act").await;
        let base = loads(&here);
        let state = here.state_seen("key_a", Some(1)).await.unwrap();
        assert_eq!((state.last_seq, state.mode.as_deref()), (1, Some("plan")));
        assert_eq!(
            loads(&here),
            base,
            "held at the seen key_seq: no store read"
        );

        // A later request's authentication saw key_seq 2: the held state
        // is behind it and the log is read.
        let state = here.state_seen("key_a", Some(2)).await.unwrap();
        assert_eq!((state.last_seq, state.mode.as_deref()), (2, Some("act")));
        assert_eq!(loads(&here), base + 1);

        // Nothing seen (a store that does not say): as `state`.
        set(&there, "key_a", "plan").await;
        assert_eq!(
            here.state_seen("key_a", None)
                .await
                .unwrap()
                .mode
                .as_deref(),
            Some("plan")
        );
        assert_eq!(loads(&here), base + 2);
        // A key not held is read whatever was seen.
        let state = here.state_seen("key_b", Some(0)).await.unwrap();
        assert_eq!(state.last_seq, 0);
        assert_eq!(loads(&here), base + 3);
    }
}
