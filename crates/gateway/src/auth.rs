//! Who is calling: API keys over HTTP (`Authorization: Bearer`) and stdio
//! (`PLANGATE_KEY`), or nobody (anonymous, when config allows reads).
//!
//! A key is checked against the store, or against a cache that holds only
//! while the store's key epoch stays the same ([`KeyCache`]), so a revoked
//! key stops working at its next request even when another process
//! revoked it. An HTTP request without a valid key is refused with 401 here,
//! before it reaches MCP, unless config allows anonymous reads; an invalid
//! key is always refused — it never falls back to anonymous.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hashlink::LruCache;
use plangate_config::Anonymous;
use plangate_core::{AccessCode, Code, Decision};
use plangate_store::{ApiKey, KeyEpoch};
use rmcp::model::ErrorCode;
use serde_json::json;
use sha2::Digest as _;

use crate::Gateway;
use crate::policy::may_rule;
use crate::tool_names::GatewayTool;

/// The JSON-RPC error code plangate answers when a request has no caller
/// it could run as (no key, bad key). In the implementation-defined server
/// range; `data.code` carries the stable name.
pub(crate) const UNAUTHORIZED: ErrorCode = ErrorCode(-32001);

/// The caller of a request, as the gateway's policy sees it.
#[derive(Debug, Clone)]
pub enum Caller {
    /// A caller holding a valid API key.
    Key(ApiKey),
    /// A caller without a key, allowed to read because config says so.
    Anonymous,
}

impl Caller {
    /// The key id that a session is bound to (`None` for anonymous).
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Caller::Key(k) => Some(&k.id),
            Caller::Anonymous => None,
        }
    }

    /// How the caller is named in logs: the key's name, never its token.
    pub fn label(&self) -> &str {
        match self {
            Caller::Key(k) => &k.name,
            Caller::Anonymous => "anonymous",
        }
    }
}

/// Why a request has no caller it could run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No key was presented and anonymous access is off.
    NoKey,
    /// A key was presented but it is unknown or revoked.
    BadKey,
    /// The key store could not be read.
    StoreDown,
    /// An OAuth access token was presented and refused.
    Token(crate::oauth::Rejected),
    /// The token is valid but an operator revoked its identity.
    IdentityRevoked(String),
}

impl Denied {
    /// The stable code sent with the refusal.
    pub fn code(&self) -> &'static str {
        use crate::oauth::Rejected;
        match self {
            Denied::NoKey => AccessCode::KeyRequired.as_str(),
            Denied::BadKey => AccessCode::InvalidKey.as_str(),
            Denied::StoreDown => Code::StoreUnavailable.as_str(),
            Denied::Token(Rejected::Invalid(_)) | Denied::IdentityRevoked(_) => {
                AccessCode::InvalidToken.as_str()
            }
            Denied::Token(Rejected::NoScope { .. }) => AccessCode::InsufficientScope.as_str(),
            Denied::Token(Rejected::Unavailable(_)) => AccessCode::IssuerUnavailable.as_str(),
        }
    }

    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        use crate::oauth::Rejected;
        match self {
            Denied::StoreDown | Denied::Token(Rejected::Unavailable(_)) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Denied::Token(Rejected::NoScope { .. }) => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        }
    }

    /// What happened and how to fix it, for a person reading a client's
    /// error pane.
    pub fn message(&self, transport: &str) -> String {
        use crate::oauth::Rejected;
        match self {
            Denied::Token(Rejected::Invalid(why)) => {
                return format!("plangate refused the access token: {why}");
            }
            Denied::Token(Rejected::NoScope { had }) => {
                return format!(
                    "the access token is valid but none of its scopes ({}) gives access to plangate: ask your identity provider's administrator for one of the scopes plangate's metadata lists (scopes_supported)",
                    if had.is_empty() {
                        "none".to_owned()
                    } else {
                        had.join(" ")
                    }
                );
            }
            Denied::Token(Rejected::Unavailable(why)) => return why.clone(),
            Denied::IdentityRevoked(name) => {
                return format!(
                    "an operator revoked identity {name} on this plangate (`plangate keys revoke`); its tokens are refused"
                );
            }
            _ => {}
        }
        let how = match transport {
            "stdio" => {
                "the person who runs plangate creates one (`plangate keys create --name NAME --scope plan`: its writes wait for a person's approval) and puts it in this server's entry in the client's config; plangate's own log says why the key it was given is refused"
            }
            _ => {
                "the person who runs plangate creates one (`plangate keys create --name NAME --scope plan`: its writes wait for a person's approval), and the client sends it as `Authorization: Bearer <key>`"
            }
        };
        match self {
            Denied::NoKey => format!("plangate needs an API key: {how}"),
            Denied::BadKey => format!("this API key is unknown or revoked: {how}"),
            Denied::StoreDown => {
                "plangate cannot read its key store; see the gateway's log".to_owned()
            }
            Denied::Token(_) | Denied::IdentityRevoked(_) => String::new(),
        }
    }
}

/// How long an authenticated key is kept at most, even while the store's
/// key epoch stays the same (a safety net for a revocation whose epoch
/// bump was lost to a crash).
pub(crate) const KEY_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(5);

/// At most this many authenticated keys are kept.
const KEY_CACHE_MAX: usize = 4096;

/// Keys this process authenticated, by the SHA-256 of their token (never
/// the token), each with the store's key epoch when it was checked. A
/// revocation through any process moves the epoch
/// ([`plangate_store::Credentials::key_epoch`]), so a revoked key still stops at
/// its next request; in between, a request costs a small file read instead
/// of a store query. Stores without an epoch are asked every time.
pub struct KeyCache {
    /// Each entry: the key, the epoch it was checked at, and until when it
    /// may be used (at most [`KEY_MAX_AGE`]; an access token's own expiry
    /// when sooner).
    keys: parking_lot::Mutex<LruCache<[u8; 32], (ApiKey, KeyEpoch, std::time::Instant)>>,
    /// On a store without a key epoch (every request asks the store), the
    /// key each token was last found to be: a guess at what a request
    /// will be decided on, to choose what to ask the store with the key
    /// ([`LogSeen`]) — never taken as the answer.
    hints: parking_lot::Mutex<LruCache<[u8; 32], ApiKey>>,
}

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache {
            keys: parking_lot::Mutex::new(LruCache::new(KEY_CACHE_MAX)),
            hints: parking_lot::Mutex::new(LruCache::new(KEY_CACHE_MAX)),
        }
    }
}

impl KeyCache {
    /// The key this token was last found to be, if remembered: a hint.
    fn hint(&self, hash: &[u8; 32]) -> Option<ApiKey> {
        self.hints.lock().get(hash).cloned()
    }

    /// Whether this token was found to be a key before (and not found
    /// unknown since).
    fn has_hint(&self, hash: &[u8; 32]) -> bool {
        self.hints.lock().contains_key(hash)
    }

    fn forget_hint(&self, hash: &[u8; 32]) {
        self.hints.lock().remove(hash);
    }

    fn put_hint(&self, hash: [u8; 32], key: &ApiKey) {
        let mut hints = self.hints.lock();
        if hints.peek(&hash) != Some(key) {
            hints.insert(hash, key.clone());
        }
    }

    fn get(&self, hash: &[u8; 32], epoch: KeyEpoch) -> Option<ApiKey> {
        let mut keys = self.keys.lock();
        let (key, at_epoch, until) = keys.get(hash)?;
        (*at_epoch == epoch && std::time::Instant::now() < *until).then(|| key.clone())
    }

    /// Forgets every remembered caller: after a reload, an OAuth token is
    /// judged by the new `[auth.oauth]` (issuers, scope mapping) at its
    /// next request.
    pub fn clear(&self) {
        self.keys.lock().clear();
        self.hints.lock().clear();
    }

    fn put(&self, hash: [u8; 32], key: ApiKey, epoch: KeyEpoch) {
        self.put_until(hash, key, epoch, KEY_MAX_AGE);
    }

    /// Like `put`, used for at most `life` (capped at [`KEY_MAX_AGE`]).
    fn put_until(&self, hash: [u8; 32], key: ApiKey, epoch: KeyEpoch, life: std::time::Duration) {
        let until = std::time::Instant::now() + life.min(KEY_MAX_AGE);
        // Past KEY_CACHE_MAX keys the least recently used one goes.
        self.keys.lock().insert(hash, (key, epoch, until));
    }
}

/// Where the caller's key's event log stood when the statement that
/// authenticated it ran ([`plangate_store::Credentials::authenticate_seen`]):
/// its last key_seq. That statement ran after the request arrived, so a
/// state folded up to this key_seq is current enough to decide the request
/// on — as if it had been read at that moment — without a read of its own
/// ([`crate::key_log::KeyLog::state_seen`]). Only stores without a log
/// mark answer it, and only when the key was asked, not taken from the
/// cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSeen(pub i64);

/// What a token is remembered by: its SHA-256, never the token.
fn token_hash(token: &str) -> [u8; 32] {
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Resolves an optional presented token to a caller.
pub async fn resolve(gw: &Gateway, token: Option<&str>) -> Result<Caller, Denied> {
    resolve_seen(gw, token, Asked::Other)
        .await
        .map(|(caller, _)| caller)
}

/// What a request asks, as far as authentication needs to know: whether
/// to ask the store where the key's log stands ([`LogSeen`]).
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// A `tools/call` of this tool.
    Tool(&'a str),
    /// Another method (or a notification, a response).
    Other,
    /// Not known (an HTTP body too large to read first).
    Unknown,
}

/// [`resolve`], also asking the store where the key's log stands when the
/// key is asked of it and that could spare the request a read
/// (`seen_would_help`); [`LogSeen`] if the store says.
/// Reading it costs the store a little more (the key's newest event is
/// read, often one just committed), so a read does not ask.
pub async fn resolve_seen(
    gw: &Gateway,
    token: Option<&str>,
    asked: Asked<'_>,
) -> Result<(Caller, Option<LogSeen>), Denied> {
    match token {
        Some(token) => {
            // Read before asking the store: a revocation in between moves
            // the epoch past the one recorded with the answer.
            let epoch = gw.store().key_epoch();
            let hash = token_hash(token);
            if let Some(epoch) = epoch
                && let Some(key) = gw.key_cache().get(&hash, epoch)
            {
                return Ok((Caller::Key(key), None));
            }
            // API keys have their prefix; anything else is an access
            // token when OAuth is configured.
            let config = gw.config();
            match &config.auth.oauth {
                Some(oauth) if !token.starts_with(plangate_store::TOKEN_PREFIX) => Ok((
                    authenticate_token(gw, oauth, token, hash, epoch).await?,
                    None,
                )),
                _ => authenticate(gw, token, hash, epoch, asked).await,
            }
        }
        None => match gw.config().gateway.anonymous {
            Anonymous::Read => Ok((Caller::Anonymous, None)),
            Anonymous::None => Err(Denied::NoKey),
        },
    }
}

/// Whether knowing where the key's log stands when the key is
/// authenticated ([`LogSeen`]) could spare a call of `name` a read of the
/// store — asking it costs the store a little on every request, so only
/// such calls ask. It could when this process holds a
/// state of the key (`hint`: the key this token was last found to be, a
/// guess, never a credential) and the call is decided on it: plangate's
/// own tools, a tool the operator's rules may decide, and a write that the
/// held state would not plan — a write to plan is decided on the held
/// state anyway (its append's compare-and-set confirms it), so only a
/// write that runs, asks or is refused needs the fresh view. A read no
/// rule touches, and an unknown tool, need no state.
fn seen_would_help(gw: &Gateway, name: &str, hint: Option<&ApiKey>) -> bool {
    let Some(key) = hint else {
        return false;
    };
    if GatewayTool::parse(&gw.config().gateway.tool_prefix, name).is_some() {
        return gw.log().look_cached(&key.id, |_| ()).is_some();
    }
    let catalog = gw.catalog();
    let Some(tool) = catalog.tool(name) else {
        return false;
    };
    if may_rule(gw.ops(), tool) {
        return true;
    }
    if tool.effect == plangate_core::Effect::Read {
        return false;
    }
    let config = gw.config();
    gw.log()
        .look_cached(&key.id, |state| {
            let in_force = config.modes.in_force(state);
            plangate_policy::decision(None, tool.effect, key.scope, &in_force.spec, false)
                != Decision::Plan
        })
        .unwrap_or(false)
}

async fn authenticate(
    gw: &Gateway,
    token: &str,
    hash: [u8; 32],
    epoch: Option<KeyEpoch>,
    asked: Asked<'_>,
) -> Result<(Caller, Option<LogSeen>), Denied> {
    {
        let hint = gw.key_cache().hint(&hash);
        let wants_seen = match asked {
            Asked::Tool(tool) => seen_would_help(gw, tool, hint.as_ref()),
            Asked::Unknown => {
                hint.is_some_and(|key| gw.log().look_cached(&key.id, |_| ()).is_some())
            }
            Asked::Other => false,
        };
        let asked = if wants_seen {
            gw.store().authenticate_seen(token).await
        } else {
            (gw.store().authenticate(token).await).map(|key| key.map(|key| (key, None)))
        };
        match asked {
            Ok(Some((key, seen))) => {
                match epoch {
                    Some(epoch) => gw.key_cache().put(hash, key.clone(), epoch),
                    None => gw.key_cache().put_hint(hash, &key),
                }
                Ok((Caller::Key(key), seen.map(LogSeen)))
            }
            Ok(None) => {
                // Its next request is refused from its headers alone
                // (`require_caller` reads no body of a token with no hint).
                gw.key_cache().forget_hint(&hash);
                Err(Denied::BadKey)
            }
            Err(e) => {
                tracing::error!("key store: {e}");
                Err(Denied::StoreDown)
            }
        }
    }
}

/// An OAuth access token's caller: its identity's row (recorded on its
/// first request; refused if an operator revoked it), with the scope this
/// token maps to. Cached like a key, so a revocation is seen at once.
async fn authenticate_token(
    gw: &Gateway,
    oauth: &plangate_config::OAuth,
    token: &str,
    hash: [u8; 32],
    epoch: Option<KeyEpoch>,
) -> Result<Caller, Denied> {
    let verified = gw
        .oauth()
        .verify(oauth, token)
        .await
        .map_err(Denied::Token)?;
    let row = match gw
        .store()
        .ensure_identity(&verified.identity, verified.scope)
        .await
    {
        Ok(row) => row,
        Err(e) => {
            tracing::error!("key store: {e}");
            return Err(Denied::StoreDown);
        }
    };
    if !row.is_active() {
        return Err(Denied::IdentityRevoked(row.name));
    }
    let key = ApiKey {
        scope: verified.scope,
        ..row
    };
    if let Some(epoch) = epoch {
        // Never past the token's own expiry (with the allowed skew), nor,
        // for an introspected token, past its next question to the issuer.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let left = verified.recheck_at.saturating_sub(now);
        gw.key_cache().put_until(
            hash,
            key.clone(),
            epoch,
            std::time::Duration::from_secs(left),
        );
    }
    Ok(Caller::Key(key))
}

/// axum middleware for `/mcp`: puts the [`Caller`] (and its [`LogSeen`],
/// when the store said) into the request's
/// extensions (rmcp hands the request parts to the MCP handler) or answers
/// 401 with a JSON body saying how to get a key.
///
/// A caller is decided from the request's headers alone: a request
/// without a key, or with a token never found to be a key, is refused
/// before a byte of its body is read, so a stalled or huge body of a
/// caller plangate does not know costs it nothing but the socket until
/// the body's deadline ([`crate::deadline::discard_body`]). Only a token
/// this process has already authenticated, on a store that reads the
/// key's log with the key (PostgreSQL), has up to 16 KiB of its body read
/// first — under the same deadline — to see which tool it calls
/// (docs/architecture.md, step 3): without a hint about the key that
/// could not pay anyway.
pub async fn require_caller(
    State(gw): State<Arc<Gateway>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .map(str::to_owned);
    // Where the key's log stands is worth asking with the key only for a
    // request decided on the key's state, and only of a store that reads
    // it with the key.
    let mut peeked = Peeked::Other;
    if let Some(token) = &token
        && gw.store().authenticate_sees_log()
        && gw.key_cache().has_hint(&token_hash(token))
    {
        let within = gw.config().gateway.body_read_timeout;
        (peeked, request) = match peek_tool_call(request, within).await {
            Ok(peeked) => peeked,
            Err(response) => return response,
        };
    }
    let asked = match &peeked {
        Peeked::Tool(name) => Asked::Tool(name),
        Peeked::Other => Asked::Other,
        Peeked::Unknown => Asked::Unknown,
    };
    match resolve_seen(&gw, token.as_deref(), asked).await {
        Ok((caller, seen)) => {
            request.extensions_mut().insert(caller);
            if let Some(seen) = seen {
                request.extensions_mut().insert(seen);
            }
            next.run(request).await
        }
        Err(denied) => {
            // Decided without the body; what the client still sends is
            // read and dropped behind the answer, within the body's
            // deadline.
            let limit = gw.config().gateway.max_request_bytes;
            crate::deadline::discard_body(gw.clone(), request.into_body(), limit);
            let status = denied.status();
            let config = gw.config();
            let oauth = config.auth.oauth.as_ref();
            let mut message = denied.message("http");
            if let (Denied::NoKey | Denied::BadKey, Some(oauth)) = (&denied, oauth) {
                message.push_str(&format!(
                    ". Or sign in through your MCP client: plangate accepts access tokens from {} (its OAuth metadata: {})",
                    oauth.issuers.join(", "),
                    crate::oauth::metadata_url(&oauth.resource)
                ));
            }
            // A JSON-RPC error, as the same refusal is over stdio: MCP
            // clients (the Python SDK among them) show a JSON-RPC error
            // body of a non-2xx answer as the error of their request, so
            // the person reads how to get a key instead of "Server returned
            // an error response".
            let body = json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {
                    "code": UNAUTHORIZED.0,
                    "message": message,
                    "data": {"code": denied.code()},
                },
            });
            let mut response = (status, axum::Json(body)).into_response();
            if let Some(challenge) = challenge(&denied, oauth) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, challenge);
            }
            response
        }
    }
}

/// How large a request body is read before authentication to see which
/// tool it calls; a larger one is [`Asked::Unknown`].
const PEEK_LIMIT: usize = 16 * 1024;

/// What a request body calls, as far as [`peek_tool_call`] could tell
/// (owned: the body's bytes move on to rmcp).
enum Peeked {
    /// `tools/call` of this tool.
    Tool(String),
    /// Another method (or a notification, a response).
    Other,
    /// Not read (too large, its length not declared) or not one JSON-RPC
    /// message: rmcp judges it.
    Unknown,
}

/// The method and tool name of a JSON-RPC message, every other field
/// skipped.
#[derive(serde::Deserialize)]
struct PeekMessage<'a> {
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<PeekParams<'a>>,
}

#[derive(serde::Deserialize)]
struct PeekParams<'a> {
    #[serde(borrow)]
    name: Option<std::borrow::Cow<'a, str>>,
}

/// Reads a POST body of a declared length up to [`PEEK_LIMIT`] and says
/// which tool it calls, handing back the request with the same bytes. A
/// body that cannot be read (its deadline passed, the client went away or
/// sent less than it declared) is answered here (`408` or `400`,
/// [`crate::deadline::unreadable_body`]): nothing of it is left to serve.
async fn peek_tool_call(
    request: Request,
    within: std::time::Duration,
) -> Result<(Peeked, Request), Response> {
    let small = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n <= PEEK_LIMIT);
    if request.method() != axum::http::Method::POST || !small {
        let peeked = if request.method() == axum::http::Method::POST {
            Peeked::Unknown
        } else {
            Peeked::Other
        };
        return Ok((peeked, request));
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, PEEK_LIMIT)
        .await
        .map_err(|e| crate::deadline::unreadable_body(&e, None, within))?;
    let peeked = match serde_json::from_slice::<PeekMessage<'_>>(&bytes) {
        Ok(PeekMessage {
            method: Some(method),
            params,
        }) if method == "tools/call" => match params.and_then(|p| p.name) {
            Some(name) => Peeked::Tool(name.into_owned()),
            None => Peeked::Other,
        },
        Ok(_) => Peeked::Other,
        Err(_) => Peeked::Unknown,
    };
    Ok((
        peeked,
        Request::from_parts(parts, axum::body::Body::from(bytes)),
    ))
}

/// The `WWW-Authenticate` challenge of a refusal. With `[auth.oauth]`, a
/// Bearer challenge naming plangate's RFC 9728 metadata, so an MCP client
/// can sign its person in (with `error` for a refused token, RFC 6750 §3).
/// Without it, not `Bearer`: MCP clients take a Bearer challenge for OAuth
/// and go looking for an authorization server plangate does not have; the
/// key is still sent as `Authorization: Bearer <key>` (RFC 9110 wants some
/// challenge with a 401).
fn challenge(denied: &Denied, oauth: Option<&plangate_config::OAuth>) -> Option<HeaderValue> {
    use crate::oauth::Rejected;
    let Some(oauth) = oauth else {
        return (denied.status() == StatusCode::UNAUTHORIZED).then(|| {
            HeaderValue::from_static(
                "ApiKey realm=\"plangate\", header=\"Authorization: Bearer <key>\"",
            )
        });
    };
    // A quoted-string holds no `"` or `\` here, nor anything outside
    // visible ASCII.
    let quoted = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\' || *c == ' ')
            .collect()
    };
    let metadata = quoted(&crate::oauth::metadata_url(&oauth.resource));
    let text = match denied {
        Denied::Token(Rejected::Invalid(why)) => format!(
            "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{metadata}\"",
            quoted(why)
        ),
        Denied::IdentityRevoked(_) => format!(
            "Bearer error=\"invalid_token\", error_description=\"identity revoked by an operator\", resource_metadata=\"{metadata}\""
        ),
        Denied::Token(Rejected::NoScope { .. }) => {
            let scopes: Vec<&str> = oauth.scopes.keys().map(String::as_str).collect();
            format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{metadata}\"",
                quoted(&scopes.join(" "))
            )
        }
        Denied::NoKey | Denied::BadKey => {
            format!("Bearer resource_metadata=\"{metadata}\"")
        }
        Denied::StoreDown | Denied::Token(Rejected::Unavailable(_)) => return None,
    };
    HeaderValue::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn post(body: &str) -> Request {
        Request::builder()
            .method("POST")
            .uri("/mcp")
            .header(header::CONTENT_LENGTH, body.len())
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap()
    }

    /// What was peeked, and the body the request carries on.
    async fn peek(request: Request) -> (String, Vec<u8>) {
        let Ok((peeked, request)) =
            peek_tool_call(request, std::time::Duration::from_secs(5)).await
        else {
            panic!("refused");
        };
        let what = match peeked {
            Peeked::Tool(name) => format!("tool {name}"),
            Peeked::Other => "other".to_owned(),
            Peeked::Unknown => "unknown".to_owned(),
        };
        let body = axum::body::to_bytes(request.into_body(), usize::MAX)
            .await
            .unwrap();
        (what, body.to_vec())
    }

    #[tokio::test]
    async fn a_peeked_request_names_its_tool_and_goes_on_byte_for_byte() {
        let call = r#"{"params":{"arguments":{"path":"a\"b"},"name":"write_\u0066ile"},"jsonrpc":"2.0","id":7,"method":"tools/call"}"#;
        let (what, body) = peek(post(call)).await;
        assert_eq!(what, "tool write_file");
        assert_eq!(body, call.as_bytes());

        for (body, expected) in [
            (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, "other"),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                "other",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, "other"),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
                "other",
            ),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]"#,
                "unknown",
            ),
            ("not json", "unknown"),
        ] {
            let (what, back) = peek(post(body)).await;
            assert_eq!(
                (what.as_str(), back.as_slice()),
                (expected, body.as_bytes())
            );
        }
    }

    #[tokio::test]
    async fn a_large_or_unmeasured_body_is_not_read_first() {
        let large = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"w","arguments":{{"c":"{}"}}}}}}"#,
            "x".repeat(PEEK_LIMIT)
        );
        let (what, body) = peek(post(&large)).await;
        assert_eq!((what.as_str(), body.len()), ("unknown", large.len()));

        let chunked = Request::builder()
            .method("POST")
            .uri("/mcp")
            .body(axum::body::Body::from("{}"))
            .unwrap();
        assert_eq!(peek(chunked).await.0, "unknown");
        let get = Request::builder()
            .method("GET")
            .uri("/mcp")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(peek(get).await.0, "other");
    }
}
