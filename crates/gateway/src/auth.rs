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
use plangate_core::{AccessCode, Code};
use plangate_store::{ApiKey, KeyEpoch};
use serde_json::json;
use sha2::Digest as _;

use crate::Gateway;

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
                "create one with `plangate keys create --name NAME --scope plan` (plan: its writes wait for a person's approval) and set it as PLANGATE_KEY in the environment of `plangate serve` (in your client's MCP server config); a key made with another data dir is unknown here, so give `plangate serve` the same --data-dir or PLANGATE_DATA_DIR (its log names the one it uses)"
            }
            _ => {
                "create one with `plangate keys create --name NAME --scope plan` (plan: its writes wait for a person's approval) and send it as `Authorization: Bearer <key>`"
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
}

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache {
            keys: parking_lot::Mutex::new(LruCache::new(KEY_CACHE_MAX)),
        }
    }
}

impl KeyCache {
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

/// Resolves an optional presented token to a caller.
pub async fn resolve(gw: &Gateway, token: Option<&str>) -> Result<Caller, Denied> {
    match token {
        Some(token) => {
            // Read before asking the store: a revocation in between moves
            // the epoch past the one recorded with the answer.
            let epoch = gw.store().key_epoch();
            let hash: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
            if let Some(epoch) = epoch
                && let Some(key) = gw.key_cache().get(&hash, epoch)
            {
                return Ok(Caller::Key(key));
            }
            // API keys have their prefix; anything else is an access
            // token when OAuth is configured.
            let config = gw.config();
            match &config.auth.oauth {
                Some(oauth) if !token.starts_with(plangate_store::TOKEN_PREFIX) => {
                    authenticate_token(gw, oauth, token, hash, epoch).await
                }
                _ => authenticate(gw, token, hash, epoch).await,
            }
        }
        None => match gw.config().gateway.anonymous {
            Anonymous::Read => Ok(Caller::Anonymous),
            Anonymous::None => Err(Denied::NoKey),
        },
    }
}

async fn authenticate(
    gw: &Gateway,
    token: &str,
    hash: [u8; 32],
    epoch: Option<KeyEpoch>,
) -> Result<Caller, Denied> {
    {
        match gw.store().authenticate(token).await {
            Ok(Some(key)) => {
                if let Some(epoch) = epoch {
                    gw.key_cache().put(hash, key.clone(), epoch);
                }
                Ok(Caller::Key(key))
            }
            Ok(None) => Err(Denied::BadKey),
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

/// How much of a refused request's body is read before the answer.
const REFUSED_BODY_LIMIT: usize = 1 << 20;

/// axum middleware for `/mcp`: puts the [`Caller`] into the request's
/// extensions (rmcp hands the request parts to the MCP handler) or answers
/// 401 with a JSON body saying how to get a key.
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
    match resolve(&gw, token.as_deref()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(denied) => {
            // Read what the client sent (bounded) before refusing: closing
            // a socket with unread request bytes makes the kernel reset the
            // connection, and the client may then lose the 401 itself.
            let _ = axum::body::to_bytes(request.into_body(), REFUSED_BODY_LIMIT).await;
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
                    "code": crate::server::UNAUTHORIZED.0,
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
