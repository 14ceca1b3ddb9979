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
//! the least recently used one (of that key, or of all) rather than being
//! refused, so a client that forgets its sessions cannot lock itself or
//! anyone out, and memory stays bounded. The evicted session's next
//! request gets `404` and its client starts a new one.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::json;

use crate::auth::Caller;
use plangate_core::AccessCode;

/// The header carrying a session's id (matched case-insensitively).
const SESSION_HEADER: &str = "mcp-session-id";

/// The code and message a caller gets for another key's session.
pub const MISMATCH_CODE: AccessCode = AccessCode::SessionKeyMismatch;
const MISMATCH_MESSAGE: &str = "this MCP session was opened with another API key (or without one); every message of a session — requests, responses, notifications, its GET stream and DELETE — must come with the key that opened it. Start a new session with your own key";

/// Whose a session is: the id of the key that opened it, `None` for an
/// anonymous session.
type Owner = Option<String>;

/// Sessions' owners, beside the session manager that holds the sessions.
pub struct SessionOwners {
    manager: Arc<LocalSessionManager>,
    owners: Mutex<Owners>,
    caps: Caps,
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

impl Owners {
    /// The sessions to close so the caps hold after `new` (of `owner`)
    /// joined: the key's least recently used past `per_key`, then the
    /// least recently used of all past `total`. `new` itself stays.
    fn evict(&mut self, new: &str, owner: &Owner, caps: Caps) -> Vec<String> {
        let mut out = Vec::new();
        let oldest = |owners: &HashMap<String, Entry>, of: Option<&Owner>| {
            owners
                .iter()
                .filter(|(id, e)| id.as_str() != new && of.is_none_or(|o| e.owner == *o))
                .min_by_key(|(_, e)| e.last_seen)
                .map(|(id, _)| id.clone())
        };
        while self.by_id.values().filter(|e| e.owner == *owner).count() > caps.per_key.max(1) {
            let Some(id) = oldest(&self.by_id, Some(owner)) else {
                break;
            };
            self.by_id.remove(&id);
            out.push(id);
        }
        while self.by_id.len() > caps.total.max(1) {
            let Some(id) = oldest(&self.by_id, None) else {
                break;
            };
            self.by_id.remove(&id);
            out.push(id);
        }
        out
    }
}

/// Fewest entries before the first prune.
const FIRST_PRUNE: usize = 256;

impl SessionOwners {
    /// Owners of the sessions `manager` holds, at most `caps` of them.
    pub fn new(manager: Arc<LocalSessionManager>, caps: Caps) -> Arc<SessionOwners> {
        Arc::new(SessionOwners {
            manager,
            owners: Mutex::new(Owners {
                by_id: HashMap::new(),
                prune_at: FIRST_PRUNE,
            }),
            caps,
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
            let evicted = owners.evict(&session, &owner, self.caps);
            (owners.by_id.len() >= owners.prune_at, evicted)
        };
        for id in evicted {
            tracing::info!(session = %id, "session closed: over max_sessions or max_sessions_per_key, least recently used");
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
    request: Request,
    next: Next,
) -> Response {
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
    let mut response = (
        StatusCode::FORBIDDEN,
        axum::Json(json!({"error": MISMATCH_CODE, "message": MISMATCH_MESSAGE})),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
