//! Binding every HTTP message of an MCP session to the key that opened it.
//!
//! rmcp's session manager routes whatever carries a session's
//! `Mcp-Session-Id` into that session: requests reach the handler (which
//! could check the caller), but JSON-RPC **responses** (the answer to an
//! elicitation the gateway sent), notifications (`notifications/cancelled`),
//! the `GET` stream and `DELETE` never reach a handler method. A guard
//! inside the handler therefore cannot stop another key — or an anonymous
//! caller — that learned a session id from answering that session's
//! questions, cancelling its apply, reading its stream or closing it.
//!
//! This middleware runs after [`crate::auth::require_caller`] and before
//! rmcp sees anything: it learns each session's owner from the answer that
//! creates it (the `initialize` response carrying the new
//! `Mcp-Session-Id`), and refuses every later message of that session
//! whose caller is not that owner with `403` and code
//! `session_key_mismatch`. An anonymous caller never touches a keyed
//! session, nor a key an anonymous one. A session the guard does not know
//! but rmcp does is refused too (fail closed); one neither knows is left to
//! rmcp, which answers `404` as the spec asks.
//!
//! It also bounds how many sessions live at once (`[gateway]
//! max_sessions`, `max_sessions_per_key`): a new session past a cap closes
//! an older one rather than being refused, so a client that forgets its
//! sessions cannot lock itself or anyone out, and memory stays bounded.
//! The evicted session's next request gets `404` and its client starts a
//! new one. Which one goes (docs/config.md, "Which session a new one
//! closes"):
//!
//! * **Never a held session**: one a question to the person is waiting on
//!   (an elicitation of `exit_plan_mode`, of an `ask` mode, or an
//!   upstream's, relayed) or an apply runs in ([`SessionHolds`]). Closing
//!   it would lose the person's answer or the apply's receipt. While every
//!   candidate is held a cap is exceeded, by at most the key's calls under
//!   way (each hold lives inside one, `max_concurrent_calls_per_key`).
//! * **Past `max_sessions_per_key`**: that key's own least recently used.
//! * **Past `max_sessions`**: a key's sessions go before another key's
//!   are taken below the floor ([`FLOOR`] each, or `max_sessions_per_key`
//!   if lower). The victim is the least recently used session of the key
//!   holding the most sessions — above the floor, so a key flooding new
//!   sessions loses its own first and a key with a session or two keeps
//!   them. Only when no key is above the floor does the least recently
//!   used session of all go.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::auth::Caller;
use plangate_core::AccessCode;
use rmcp::RoleServer;
use rmcp::service::RequestContext;

/// The header carrying a session's id (matched case-insensitively).
const SESSION_HEADER: &str = "mcp-session-id";

/// The code and message a caller gets for another key's session.
pub const MISMATCH_CODE: AccessCode = AccessCode::SessionKeyMismatch;
const MISMATCH_MESSAGE: &str = "this MCP session was opened with another API key (or without one); every message of a session — requests, responses, notifications, its GET stream and DELETE — must come with the key that opened it. Start a new session with your own key";

/// Whose a session is: the id of the key that opened it, `None` for an
/// anonymous session.
type Owner = Option<String>;

/// How many sessions of each key eviction for another key's new session
/// leaves, while some key has more (capped by `max_sessions_per_key`): an
/// agent's session, and one more for a second window or a reconnect.
pub const FLOOR: usize = 2;

/// Sessions' owners, beside the session manager that holds the sessions.
pub struct SessionOwners {
    manager: Arc<LocalSessionManager>,
    owners: Mutex<Owners>,
    caps: Caps,
    holds: Arc<SessionHolds>,
}

// === held sessions ===

/// The HTTP sessions eviction must not take now: a question to the person
/// is waiting on them, or an apply runs in them. [`bind`] hands it to every
/// request (in its extensions, which rmcp passes on to the handler), the
/// handlers hold their session for as long as that lasts ([`hold`]), and
/// [`SessionOwners`] asks before it evicts.
#[derive(Debug, Default)]
pub struct SessionHolds {
    /// Session id → how many holds it has.
    held: Mutex<HashMap<String, usize>>,
}

/// One hold on a session, let go when dropped.
#[derive(Debug)]
pub struct Held {
    holds: Arc<SessionHolds>,
    session: String,
}

/// Holds the HTTP session the request of `cx` came in until the guard
/// drops: a question to the person, or an apply, is under way in it.
/// `None` over stdio, or before a session exists (nothing to evict then).
pub fn hold(cx: &RequestContext<RoleServer>) -> Option<Held> {
    let parts = cx.extensions.get::<http::request::Parts>()?;
    let holds = parts.extensions.get::<Arc<SessionHolds>>()?;
    let session = parts.headers.get(SESSION_HEADER)?.to_str().ok()?.to_owned();
    *holds.held.lock().entry(session.clone()).or_insert(0) += 1;
    Some(Held {
        holds: holds.clone(),
        session,
    })
}

impl SessionHolds {
    /// Whether `session` is held.
    pub fn is_held(&self, session: &str) -> bool {
        self.held.lock().contains_key(session)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.holds.held.lock();
        if let Some(n) = held.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.session);
            }
        }
    }
}

/// The most sessions that live at once: in all, and per key (anonymous
/// callers count as one key).
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// In all.
    pub total: usize,
    /// Per key.
    pub per_key: usize,
}

struct Entry {
    owner: Owner,
    last_seen: std::time::Instant,
}

struct Owners {
    by_id: HashMap<String, Entry>,
    /// Size at which entries of sessions rmcp has since closed (idle
    /// expiry happens inside rmcp, unseen here) are dropped.
    prune_at: usize,
}

/// A key's least recently used session that may go, and when it was used.
type Oldest<'a> = (&'a String, std::time::Instant);

impl Owners {
    /// The sessions to close so the caps hold after `new` (of `owner`)
    /// joined, never one `held` says is held, nor `new` itself (the rule
    /// is in the module docs): past `per_key`, the key's least recently
    /// used; past `total`, the least recently used of the key with the
    /// most sessions above the floor, else of all. Stops early, leaving a
    /// cap exceeded, when only held sessions are left to take.
    fn evict(
        &mut self,
        new: &str,
        owner: &Owner,
        caps: Caps,
        held: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let may_go = |id: &str| id != new && !held(id);
        let per_key = caps.per_key.max(1);
        while self.by_id.values().filter(|e| e.owner == *owner).count() > per_key {
            let victim = self
                .by_id
                .iter()
                .filter(|(id, e)| e.owner == *owner && may_go(id))
                .min_by_key(|(_, e)| e.last_seen)
                .map(|(id, _)| id.clone());
            let Some(id) = victim else { break };
            self.by_id.remove(&id);
            out.push(id);
        }
        let floor = FLOOR.min(per_key);
        while self.by_id.len() > caps.total.max(1) {
            let Some(id) = self.over_total_victim(floor, &may_go) else {
                break;
            };
            self.by_id.remove(&id);
            out.push(id);
        }
        out
    }

    /// Past `max_sessions`: the least recently used session that may go
    /// of the key holding the most sessions above `floor` (ties: the
    /// older such session), else the least recently used of all.
    fn over_total_victim(&self, floor: usize, may_go: &dyn Fn(&str) -> bool) -> Option<String> {
        // Per key: how many sessions, and its least recently used that may go.
        let mut keys: HashMap<&Owner, (usize, Option<Oldest<'_>>)> = HashMap::new();
        for (id, entry) in &self.by_id {
            let (count, oldest) = keys.entry(&entry.owner).or_insert((0, None));
            *count += 1;
            if may_go(id) && oldest.is_none_or(|(_, seen)| entry.last_seen < seen) {
                *oldest = Some((id, entry.last_seen));
            }
        }
        let above_floor = keys
            .values()
            .filter(|(count, _)| *count > floor)
            .filter_map(|(count, oldest)| oldest.map(|(id, seen)| (*count, seen, id)))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        if let Some((_, _, id)) = above_floor {
            return Some(id.clone());
        }
        keys.values()
            .filter_map(|(_, oldest)| *oldest)
            .min_by_key(|(_, seen)| *seen)
            .map(|(id, _)| id.clone())
    }
}

/// Fewest entries before the first prune.
const FIRST_PRUNE: usize = 256;

impl SessionOwners {
    /// Owners of the sessions `manager` holds, at most `caps` of them,
    /// never evicting a held one ([`hold`]).
    pub fn new(manager: Arc<LocalSessionManager>, caps: Caps) -> Arc<SessionOwners> {
        Arc::new(SessionOwners {
            manager,
            owners: Mutex::new(Owners {
                by_id: HashMap::new(),
                prune_at: FIRST_PRUNE,
            }),
            caps,
            holds: Arc::default(),
        })
    }

    /// The session's owner, noting that it is in use now.
    fn owner(&self, session: &str) -> Option<Owner> {
        let mut owners = self.owners.lock();
        let entry = owners.by_id.get_mut(session)?;
        entry.last_seen = std::time::Instant::now();
        Some(entry.owner.clone())
    }

    async fn record(&self, session: String, owner: Owner) {
        let (due, evicted) = {
            let mut owners = self.owners.lock();
            owners.by_id.insert(
                session.clone(),
                Entry {
                    owner: owner.clone(),
                    last_seen: std::time::Instant::now(),
                },
            );
            let evicted = owners.evict(&session, &owner, self.caps, &|id| self.holds.is_held(id));
            (owners.by_id.len() >= owners.prune_at, evicted)
        };
        for id in evicted {
            tracing::info!(session = %id, "session closed: over max_sessions or max_sessions_per_key (see docs/config.md for which goes)");
            let id: Arc<str> = Arc::from(id.as_str());
            let _ =
                rmcp::transport::streamable_http_server::session::SessionManager::close_session(
                    &*self.manager,
                    &id,
                )
                .await;
        }
        if due {
            let live: std::collections::HashSet<String> = self
                .manager
                .sessions
                .read()
                .await
                .keys()
                .map(|id| id.to_string())
                .collect();
            let mut owners = self.owners.lock();
            owners.by_id.retain(|id, _| live.contains(id));
            owners.prune_at = (owners.by_id.len() * 2).max(FIRST_PRUNE);
        }
    }

    fn forget(&self, session: &str) {
        self.owners.lock().by_id.remove(session);
    }

    /// How many sessions have a known owner (for tests and metrics).
    pub fn len(&self) -> usize {
        self.owners.lock().by_id.len()
    }

    /// Whether no session has a known owner.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The middleware: see the module's note.
pub async fn bind(
    State(sessions): State<Arc<SessionOwners>>,
    mut request: Request,
    next: Next,
) -> Response {
    // How the handler marks its session held ([`hold`]).
    request.extensions_mut().insert(sessions.holds.clone());
    let caller: Owner = request
        .extensions()
        .get::<Caller>()
        .and_then(|c| c.key_id().map(str::to_owned));
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let method = request.method().clone();
    match session {
        None => {
            let response = next.run(request).await;
            // The answer that opens a session names it: its opener owns it.
            if let Some(opened) = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                sessions.record(opened.to_owned(), caller).await;
            }
            response
        }
        Some(session) => {
            match sessions.owner(&session) {
                Some(owner) if owner == caller => {}
                Some(_) => return refuse(request).await,
                None => {
                    let known = sessions
                        .manager
                        .sessions
                        .read()
                        .await
                        .keys()
                        .any(|id| **id == *session);
                    if known {
                        return refuse(request).await;
                    }
                    // Neither knows it: rmcp answers 404 (start over).
                    return next.run(request).await;
                }
            }
            let mut response = next.run(request).await;
            let ended = method == Method::DELETE && response.status().is_success();
            if ended || response.status() == StatusCode::NOT_FOUND {
                sessions.forget(&session);
            }
            // The session is gone when the answer leaves: 204, as HTTP
            // clients expect of a DELETE that is done, not rmcp's 202
            // ("accepted, still to happen").
            if ended && response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            response
        }
    }
}

/// How much of a refused request's body is read before the answer.
const REFUSED_BODY_LIMIT: usize = 1 << 20;

async fn refuse(request: Request) -> Response {
    // Read what the client sent (bounded) first: closing a socket with
    // unread request bytes makes the kernel reset the connection, and the
    // client may then lose the answer itself.
    let _ = axum::body::to_bytes(request.into_body(), REFUSED_BODY_LIMIT).await;
    let mut response = crate::http_error::respond(plangate_core::ErrorBody::access(
        MISMATCH_CODE,
        MISMATCH_MESSAGE,
    ));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, Instant};

    use super::*;

    /// Sessions opened in the order given, `(id, key)`, one millisecond
    /// apart (the first is the least recently used).
    fn opened(sessions: &[(&str, &str)]) -> Owners {
        let start = Instant::now();
        let by_id = sessions
            .iter()
            .enumerate()
            .map(|(i, (id, key))| {
                let entry = Entry {
                    owner: Some((*key).to_owned()),
                    last_seen: start + Duration::from_millis(i as u64),
                };
                ((*id).to_owned(), entry)
            })
            .collect();
        Owners {
            by_id,
            prune_at: FIRST_PRUNE,
        }
    }

    fn key(k: &str) -> Owner {
        Some(k.to_owned())
    }

    const NONE_HELD: &dyn Fn(&str) -> bool = &|_| false;

    #[test]
    fn a_held_session_is_never_evicted_even_when_it_is_the_least_recently_used() {
        let caps = Caps {
            total: 100,
            per_key: 2,
        };
        let mut owners = opened(&[("a1", "a"), ("a2", "a"), ("a3", "a")]);
        let held = |id: &str| id == "a1";
        assert_eq!(owners.evict("a3", &key("a"), caps, &held), ["a2"]);
        // Every other session held: the cap waits for them.
        let mut owners = opened(&[("a1", "a"), ("a2", "a"), ("a3", "a")]);
        let held = |id: &str| id != "a3";
        assert!(owners.evict("a3", &key("a"), caps, &held).is_empty());
        assert_eq!(owners.by_id.len(), 3);
        // Over the total too.
        let caps = Caps {
            total: 2,
            per_key: 100,
        };
        let mut owners = opened(&[("b1", "b"), ("b2", "b"), ("a1", "a"), ("a2", "a")]);
        let held = |id: &str| id == "a1" || id == "b1";
        assert_eq!(owners.evict("a2", &key("a"), caps, &held), ["b2"]);
        assert_eq!(owners.by_id.len(), 3, "b1 and a1 are held");
    }

    #[test]
    fn a_flooding_key_loses_its_own_sessions_before_another_key_goes_below_the_floor() {
        let caps = Caps {
            total: 6,
            per_key: 100,
        };
        // b's sessions are the oldest of all, and b keeps them.
        let mut owners = opened(&[
            ("b1", "b"),
            ("b2", "b"),
            ("b3", "b"),
            ("a1", "a"),
            ("a2", "a"),
            ("a3", "a"),
            ("a4", "a"),
        ]);
        assert_eq!(owners.evict("a4", &key("a"), caps, NONE_HELD), ["a1"]);
        let mut flood = owners;
        for i in 5..20 {
            let id = format!("a{i}");
            flood.by_id.insert(
                id.clone(),
                Entry {
                    owner: key("a"),
                    last_seen: Instant::now() + Duration::from_secs(i),
                },
            );
            let evicted = flood.evict(&id, &key("a"), caps, NONE_HELD);
            assert_eq!(evicted.len(), 1);
            assert!(evicted[0].starts_with('a'), "{evicted:?}");
        }
        for b in ["b1", "b2", "b3"] {
            assert!(flood.by_id.contains_key(b), "{b} was evicted");
        }
        // A key as large as the flooder: the older of the two goes.
        let mut even = opened(&[
            ("b1", "b"),
            ("a1", "a"),
            ("b2", "b"),
            ("a2", "a"),
            ("b3", "b"),
            ("a3", "a"),
            ("c1", "c"),
        ]);
        assert_eq!(even.evict("c1", &key("c"), caps, NONE_HELD), ["b1"]);
    }

    #[test]
    fn a_key_at_the_floor_is_taken_only_when_no_key_is_above_it() {
        let caps = Caps {
            total: 4,
            per_key: 100,
        };
        let mut owners = opened(&[
            ("a1", "a"),
            ("b1", "b"),
            ("a2", "a"),
            ("b2", "b"),
            ("c1", "c"),
        ]);
        assert_eq!(owners.evict("c1", &key("c"), caps, NONE_HELD), ["a1"]);
        // The floor is never above the per-key cap.
        let caps = Caps {
            total: 3,
            per_key: 1,
        };
        let mut owners = opened(&[("b1", "b"), ("a1", "a"), ("c1", "c"), ("d1", "d")]);
        assert_eq!(owners.evict("d1", &key("d"), caps, NONE_HELD), ["b1"]);
    }
}
