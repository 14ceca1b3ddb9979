//! plangate as an OAuth 2.1 protected resource (the MCP authorization
//! spec), when `[auth.oauth]` is configured.
//!
//! * [`metadata`] is its RFC 9728 protected resource metadata: the
//!   resource URL and the authorization servers trusted, so an MCP client
//!   can sign its person in.
//! * [`Verifier::verify`] checks an access token: an RFC 9068 JWT (`typ`
//!   `at+jwt`), signed with an asymmetric algorithm by a key of its
//!   issuer's JWKS (found from the issuer's metadata, cached, fetched again
//!   when an unknown `kid` shows up), from a trusted issuer, for this
//!   resource (`aud`, RFC 8707), within `nbf`..`exp`. `none` and HMAC
//!   tokens are refused before anything else is looked at. The caller is
//!   `(issuer, identity claim)`; its plangate scope is the widest one its
//!   token's scopes map to.
//!
//! A token is never logged, stored or passed to an upstream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use plangate_config::OAuth;
use plangate_core::Scope;
use plangate_store::Identity;
use serde_json::{Value, json};

/// The algorithms a token may be signed with: asymmetric only. HMAC would
/// let anyone holding the shared secret (every resource server of that
/// issuer) mint tokens; `none` is no signature at all.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// How long an issuer's key set is used before it is fetched again.
const KEYS_MAX_AGE: Duration = Duration::from_secs(60 * 60);

/// The shortest wait between two fetches of one issuer's keys prompted by
/// an unknown `kid`: a flood of tokens with made-up `kid`s cannot make
/// plangate hammer the issuer.
const REFETCH_AFTER: Duration = Duration::from_secs(30);

/// How many introspection requests may be under way at once.
const INTROSPECTIONS_AT_ONCE: usize = 8;

/// The longest identity value accepted (it becomes part of a name).
const MAX_IDENTITY_LEN: usize = 256;

/// A token that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Who: `(issuer, identity claim)`.
    pub identity: Identity,
    /// The widest plangate scope the token's scopes map to.
    pub scope: Scope,
    /// Until when (seconds since the epoch) this verdict may be reused
    /// without checking the token again: a JWT's `exp` plus the allowed
    /// clock skew; an introspected token's next question to its issuer
    /// (`every`), never past its `exp`.
    pub recheck_at: u64,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// Not valid here (401 `invalid_token`); the text says why, never
    /// quoting the token.
    Invalid(String),
    /// Valid, but none of its scopes maps to a plangate scope (403
    /// `insufficient_scope`); `had` lists the scopes it carried.
    NoScope {
        /// The token's scopes.
        had: Vec<String>,
    },
    /// The issuer's keys could not be fetched (503).
    Unavailable(String),
}

/// One issuer's signing keys, as last fetched.
struct Keys {
    set: JwkSet,
    fetched: Instant,
}

/// Checks access tokens; holds each trusted issuer's keys.
pub struct Verifier {
    http: reqwest::Client,
    keys: parking_lot::Mutex<HashMap<String, Arc<Keys>>>,
    /// Each issuer's introspection endpoint, once found in its metadata.
    introspection_endpoints: parking_lot::Mutex<HashMap<String, String>>,
    /// At most this many introspection requests at once: a flood of
    /// made-up opaque tokens cannot make plangate flood the issuer.
    introspecting: tokio::sync::Semaphore,
    /// One fetch at a time, so a burst of requests with a new `kid` makes
    /// one request to the issuer.
    fetching: tokio::sync::Mutex<()>,
}

impl Default for Verifier {
    fn default() -> Self {
        // No redirects: a metadata or key URL is fetched where it says,
        // never followed somewhere else (or down to http://).
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Verifier {
            http,
            keys: parking_lot::Mutex::default(),
            introspection_endpoints: parking_lot::Mutex::default(),
            introspecting: tokio::sync::Semaphore::new(INTROSPECTIONS_AT_ONCE),
            fetching: tokio::sync::Mutex::new(()),
        }
    }
}

/// The RFC 9728 metadata document of `oauth`.
pub fn metadata(oauth: &OAuth) -> Value {
    json!({
        "resource": oauth.resource,
        "authorization_servers": oauth.issuers,
        "scopes_supported": oauth.scopes.keys().collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
        "resource_name": "plangate",
    })
}

/// Where [`metadata`] is served for `resource`: the well-known segment
/// between the host and the resource's path (RFC 9728 §3.1), e.g.
/// `https://h/.well-known/oauth-protected-resource/mcp`.
pub fn metadata_url(resource: &str) -> String {
    let (origin, path) = split_url(resource);
    format!(
        "{origin}/.well-known/oauth-protected-resource{}",
        path.trim_end_matches('/')
    )
}

/// The path of [`metadata_url`], for the router.
pub fn metadata_path(resource: &str) -> String {
    let (_, path) = split_url(resource);
    format!(
        "/.well-known/oauth-protected-resource{}",
        path.trim_end_matches('/')
    )
}

/// `scheme://authority` and the path (`""` or starting with `/`).
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// Whether `url` may be fetched for keys or metadata: `https://`, or
/// `http://` on a loopback host.
fn fetchable(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return true;
    }
    let Some(rest) = lower.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The claims part of a JWT, read without checking anything: only to pick
/// the issuer whose keys will check it.
fn unverified_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A token's scopes: `scope` (RFC 9068, space-separated), else `scp` (a
/// list or a string, as some providers send).
fn token_scopes(claims: &Value) -> Vec<String> {
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect();
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) => words(s),
        (_, Some(Value::Array(list))) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        (_, Some(Value::String(s))) => words(s),
        _ => Vec::new(),
    }
}

/// The widest plangate scope `had` maps to.
pub fn mapped_scope(oauth: &OAuth, had: &[String]) -> Option<Scope> {
    let rank = |s: Scope| match s {
        Scope::Read => 0,
        Scope::Plan => 1,
        Scope::Write => 2,
    };
    had.iter()
        .filter_map(|s| oauth.scopes.get(s).copied())
        .max_by_key(|s| rank(*s))
}

impl Verifier {
    /// Checks `token` against `oauth`.
    pub async fn verify(&self, oauth: &OAuth, token: &str) -> Result<Verified, Rejected> {
        let invalid = |why: &str| Rejected::Invalid(why.to_owned());
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            // Not a JWT: an opaque token, which only its issuer can judge.
            return match &oauth.introspection {
                Some(introspection) => self.introspect(oauth, introspection, token).await,
                None => Err(invalid(
                    "the bearer token is neither a plangate API key (pgk_…) nor a JWT access token (opaque tokens are accepted only with [auth.oauth.introspection])",
                )),
            };
        };
        if !ALGORITHMS.contains(&header.alg) {
            return Err(Rejected::Invalid(format!(
                "the access token is signed with {:?}; only asymmetric algorithms (RS*, PS*, ES256, ES384, EdDSA) are accepted",
                header.alg
            )));
        }
        let typ_ok = header.typ.as_deref().is_some_and(|t| {
            t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt")
        });
        if !typ_ok {
            return Err(invalid(
                "the token is not an OAuth access token (RFC 9068: its header's typ must be at+jwt); an ID token or other JWT is not accepted",
            ));
        }
        let claims =
            unverified_claims(token).ok_or_else(|| invalid("the token's claims cannot be read"))?;
        let issuer = claims
            .get("iss")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("the token names no issuer (iss)"))?;
        let Some(issuer) = oauth.issuers.iter().find(|i| *i == issuer) else {
            return Err(Rejected::Invalid(format!(
                "the token's issuer {issuer:?} is not one plangate trusts ([auth.oauth] issuers)"
            )));
        };
        let jwk = self
            .key_for(issuer, &header.alg, header.kid.as_deref())
            .await?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|_| invalid("the issuer's key for this token cannot be used"))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[&oauth.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = oauth.clock_skew.as_secs();
        validation.validate_nbf = true;
        let checked = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            Rejected::Invalid(match e.kind() {
                K::ExpiredSignature => "the access token has expired: the client should refresh it or sign in again".to_owned(),
                K::ImmatureSignature => "the access token is not valid yet (nbf)".to_owned(),
                K::InvalidAudience => format!(
                    "the access token was issued for another resource (aud); plangate's is {} — the client must ask for a token for it (RFC 8707 resource)",
                    oauth.resource
                ),
                K::InvalidSignature => "the access token's signature does not verify".to_owned(),
                K::MissingRequiredClaim(c) => format!("the access token has no {c} claim"),
                _ => "the access token is not valid".to_owned(),
            })
        })?;
        let claims = checked.claims;
        let value = match claims.get(&oauth.identity_claim) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                return Err(Rejected::Invalid(format!(
                    "the access token has no {:?} claim naming the caller ([auth.oauth] identity_claim)",
                    oauth.identity_claim
                )));
            }
        };
        if value.is_empty() || value.len() > MAX_IDENTITY_LEN || value.chars().any(char::is_control)
        {
            return Err(Rejected::Invalid(format!(
                "the access token's {:?} claim cannot name a caller (empty, over {MAX_IDENTITY_LEN} bytes, or with control characters)",
                oauth.identity_claim
            )));
        }
        let had = token_scopes(&claims);
        let scope = mapped_scope(oauth, &had).ok_or(Rejected::NoScope { had })?;
        Ok(Verified {
            identity: Identity::new(issuer, &value),
            scope,
            recheck_at: claims
                .get("exp")
                .and_then(Value::as_u64)
                .map_or(0, |exp| exp + oauth.clock_skew.as_secs()),
        })
    }

    /// Asks `introspection.issuer` about an opaque `token` (RFC 7662): it
    /// must be active, an access token, issued for plangate's resource
    /// (`aud`), by that issuer (`iss`, when said), not expired; the caller
    /// and scope are read from the answer as from a JWT's claims. The
    /// answer counts until `every` has passed (the caller's cache).
    async fn introspect(
        &self,
        oauth: &OAuth,
        introspection: &plangate_config::Introspection,
        token: &str,
    ) -> Result<Verified, Rejected> {
        let issuer = &introspection.issuer;
        let unavailable = |why: String| {
            tracing::warn!(issuer = %issuer, "cannot introspect a token: {why}");
            Rejected::Unavailable(format!(
                "plangate cannot ask {issuer} whether the token is active ({why}); try again shortly"
            ))
        };
        let endpoint = self
            .introspection_endpoint(issuer)
            .await
            .map_err(unavailable)?;
        let _turn = self
            .introspecting
            .acquire()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let response = self
            .http
            .post(&endpoint)
            .basic_auth(&introspection.client_id, Some(&introspection.client_secret))
            .header("accept", "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await
            .map_err(|e| unavailable(format!("{endpoint}: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            return Err(unavailable(format!(
                "{endpoint} answered {status}; check [auth.oauth.introspection] client_id and client_secret"
            )));
        }
        let answer: Value = response
            .json()
            .await
            .map_err(|e| unavailable(format!("{endpoint} did not answer JSON: {e}")))?;
        verified_from_introspection(oauth, issuer, &answer, now_secs())
    }

    /// `issuer`'s `introspection_endpoint`, from its metadata (cached).
    async fn introspection_endpoint(&self, issuer: &str) -> Result<String, String> {
        if let Some(found) = self.introspection_endpoints.lock().get(issuer) {
            return Ok(found.clone());
        }
        let endpoint = self
            .named_in_metadata(issuer, Endpoint::Introspection)
            .await?;
        self.introspection_endpoints
            .lock()
            .insert(issuer.to_owned(), endpoint.clone());
        Ok(endpoint)
    }

    /// The key of `issuer` that signed a token with `alg` and `kid`:
    /// from the cached set, else from a fresh fetch (a rotated key).
    async fn key_for(
        &self,
        issuer: &str,
        alg: &Algorithm,
        kid: Option<&str>,
    ) -> Result<Jwk, Rejected> {
        let cached = self.keys.lock().get(issuer).cloned();
        if let Some(keys) = &cached
            && keys.fetched.elapsed() < KEYS_MAX_AGE
            && let Some(jwk) = pick(&keys.set, alg, kid)
        {
            return Ok(jwk);
        }
        let _one = self.fetching.lock().await;
        // Someone else may have fetched while this request waited.
        let cached = self.keys.lock().get(issuer).cloned();
        let fresh = match cached {
            Some(keys) if keys.fetched.elapsed() < REFETCH_AFTER => keys,
            stale => match self.fetch_keys(issuer).await {
                Ok(set) => {
                    let keys = Arc::new(Keys {
                        set,
                        fetched: Instant::now(),
                    });
                    self.keys.lock().insert(issuer.to_owned(), keys.clone());
                    keys
                }
                Err(why) => {
                    tracing::warn!(issuer, "cannot fetch the issuer's signing keys: {why}");
                    // Keys fetched before still check tokens they know.
                    match stale.filter(|k| pick(&k.set, alg, kid).is_some()) {
                        Some(keys) => keys,
                        None => {
                            return Err(Rejected::Unavailable(format!(
                                "plangate cannot fetch the signing keys of {issuer} to check the token ({why}); try again shortly"
                            )));
                        }
                    }
                }
            },
        };
        pick(&fresh.set, alg, kid).ok_or_else(|| {
            Rejected::Invalid(match kid {
                Some(_) => format!("the token's signing key (kid) is not among {issuer}'s keys"),
                None => format!(
                    "the token names no signing key (kid) and {issuer} has more than one that fits"
                ),
            })
        })
    }

    /// The issuer's key set: its metadata (RFC 8414, else OpenID
    /// discovery) names `jwks_uri`, whose `issuer` must be the issuer
    /// itself (RFC 8414 §3.3).
    async fn fetch_keys(&self, issuer: &str) -> Result<JwkSet, String> {
        let jwks_uri = self.named_in_metadata(issuer, Endpoint::Jwks).await?;
        let set = self.get_json(&jwks_uri).await?;
        serde_json::from_value(set).map_err(|e| format!("{jwks_uri} is not a JWK set: {e}"))
    }

    /// The URL `issuer`'s metadata names for `endpoint`, if plangate may
    /// fetch it: https://, or http:// on loopback only.
    async fn named_in_metadata(&self, issuer: &str, endpoint: Endpoint) -> Result<String, String> {
        let meta = self.issuer_metadata(issuer).await?;
        let field = endpoint.field();
        let url = match endpoint {
            Endpoint::Jwks => meta.jwks_uri,
            Endpoint::Introspection => meta.introspection_endpoint,
        }
        .ok_or_else(|| format!("{issuer}'s metadata names no {field}"))?;
        if !fetchable(&url) {
            return Err(format!(
                "its {field} {url} is not https:// (http:// only on loopback)"
            ));
        }
        Ok(url)
    }

    /// The issuer's metadata (RFC 8414, else OpenID discovery), whose
    /// `issuer` must be the issuer itself (RFC 8414 §3.3).
    async fn issuer_metadata(&self, issuer: &str) -> Result<IssuerMetadata, String> {
        let (origin, path) = split_url(issuer);
        let path = path.trim_end_matches('/');
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
            format!("{origin}/.well-known/openid-configuration{path}"),
        ];
        let mut tried = Vec::new();
        for url in candidates {
            if tried.contains(&url) {
                continue;
            }
            let meta = self.get_json(&url).await.and_then(|v| {
                serde_json::from_value::<IssuerMetadata>(v)
                    .map_err(|e| format!("not authorization server metadata: {e}"))
            });
            match meta {
                Ok(meta) if meta.issuer == issuer => return Ok(meta),
                Ok(_) => tracing::debug!(url, "metadata of another issuer: skipped"),
                Err(e) => tracing::debug!(url, "no metadata: {e}"),
            }
            tried.push(url);
        }
        Err(format!(
            "no authorization server metadata naming it as issuer (tried {})",
            tried.join(", ")
        ))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        if !fetchable(url) {
            return Err(format!("{url} is not https://"));
        }
        let response = self
            .http
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        response
            .json::<Value>()
            .await
            .map_err(|e| format!("{url} did not answer JSON: {e}"))
    }
}

/// What plangate reads of an authorization server's metadata (RFC 8414 §2,
/// or OpenID discovery): whose it is, and the two endpoints it may use to
/// check a token. Other fields are ignored.
#[derive(Debug, serde::Deserialize)]
struct IssuerMetadata {
    issuer: String,
    #[serde(default)]
    jwks_uri: Option<String>,
    #[serde(default)]
    introspection_endpoint: Option<String>,
}

/// An endpoint an issuer's metadata names.
#[derive(Debug, Clone, Copy)]
enum Endpoint {
    /// `jwks_uri`: its signing keys.
    Jwks,
    /// `introspection_endpoint` (RFC 7662).
    Introspection,
}

impl Endpoint {
    /// The metadata field that names it.
    fn field(self) -> &'static str {
        match self {
            Endpoint::Jwks => "jwks_uri",
            Endpoint::Introspection => "introspection_endpoint",
        }
    }
}

/// Seconds since the epoch, now.
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What an RFC 7662 introspection `answer` from `issuer` makes of a token,
/// at `now`: the same checks as a JWT's claims get, from the answer.
fn verified_from_introspection(
    oauth: &OAuth,
    issuer: &str,
    answer: &Value,
    now: u64,
) -> Result<Verified, Rejected> {
    let invalid = |why: String| Rejected::Invalid(why);
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(invalid(format!(
            "the access token is not active: {issuer} says it was revoked, has expired or is unknown — the client should sign in again"
        )));
    }
    if answer
        .get("token_type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("refresh_token"))
    {
        return Err(invalid(
            "a refresh token is not an access token: send the access token".to_owned(),
        ));
    }
    if let Some(said) = answer.get("iss").and_then(Value::as_str)
        && said != issuer
    {
        return Err(invalid(format!(
            "the token's issuer {said:?} is not {issuer}, whose introspection endpoint was asked"
        )));
    }
    let for_us = match answer.get("aud") {
        Some(Value::String(aud)) => *aud == oauth.resource,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(&oauth.resource)),
        _ => false,
    };
    if !for_us {
        return Err(invalid(format!(
            "the access token was not issued for plangate's resource {} (its introspection names another audience, or none) — the client must ask for a token for it (RFC 8707 resource)",
            oauth.resource
        )));
    }
    let expires_at = answer.get("exp").and_then(Value::as_u64);
    if expires_at.is_some_and(|exp| exp + oauth.clock_skew.as_secs() <= now) {
        return Err(invalid(
            "the access token has expired: the client should refresh it or sign in again"
                .to_owned(),
        ));
    }
    if answer
        .get("nbf")
        .and_then(Value::as_u64)
        .is_some_and(|nbf| nbf > now + oauth.clock_skew.as_secs())
    {
        return Err(invalid(
            "the access token is not valid yet (nbf)".to_owned(),
        ));
    }
    let value = match answer.get(&oauth.identity_claim) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            return Err(invalid(format!(
                "the introspection of the access token names no {:?} for the caller ([auth.oauth] identity_claim)",
                oauth.identity_claim
            )));
        }
    };
    if value.is_empty() || value.len() > MAX_IDENTITY_LEN || value.chars().any(char::is_control) {
        return Err(invalid(format!(
            "the access token's {:?} cannot name a caller (empty, over {MAX_IDENTITY_LEN} bytes, or with control characters)",
            oauth.identity_claim
        )));
    }
    let had = token_scopes(answer);
    let scope = mapped_scope(oauth, &had).ok_or(Rejected::NoScope { had })?;
    let every = oauth
        .introspection
        .as_ref()
        .map_or(0, |i| i.every.as_secs());
    Ok(Verified {
        identity: Identity::new(issuer, &value),
        scope,
        // Asked again after `every`, and never used past its expiry.
        recheck_at: expires_at.map_or(now + every, |exp| {
            (exp + oauth.clock_skew.as_secs()).min(now + every)
        }),
    })
}

/// The key of `set` for `alg` and `kid`: with a `kid`, only the key of
/// that id; without one, the only key that fits `alg`. A key meant for
/// encryption, or for another algorithm, never fits.
fn pick(set: &JwkSet, alg: &Algorithm, kid: Option<&str>) -> Option<Jwk> {
    let fits = |k: &&Jwk| {
        k.common
            .public_key_use
            .as_ref()
            .is_none_or(|u| *u == PublicKeyUse::Signature)
            && k.common
                .key_algorithm
                .is_none_or(|a| Algorithm::try_from(a).is_ok_and(|a| a == *alg))
    };
    match kid {
        Some(kid) => set
            .keys
            .iter()
            .filter(|k| k.common.key_id.as_deref() == Some(kid))
            .find(fits)
            .cloned(),
        None => {
            let mut fitting = set.keys.iter().filter(fits);
            let only = fitting.next()?;
            fitting.next().is_none().then(|| only.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// `[auth.oauth]` for resource `https://p.example/mcp` and issuer
    /// `https://id.example`, mapping `scopes`.
    fn oauth(scopes: &[(&str, Scope)]) -> OAuth {
        OAuth {
            resource: "https://p.example/mcp".into(),
            issuers: vec!["https://id.example".into()],
            identity_claim: "sub".into(),
            clock_skew: Duration::from_secs(60),
            introspection: None,
            scopes: scopes.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    #[test]
    fn metadata_lives_at_the_well_known_path_of_the_resource() {
        assert_eq!(
            metadata_url("https://plangate.example.com/mcp"),
            "https://plangate.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:7070"),
            "http://127.0.0.1:7070/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            metadata_path("http://127.0.0.1:7070/team/mcp/"),
            "/.well-known/oauth-protected-resource/team/mcp"
        );
    }

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        assert!(fetchable("https://id.example.com/jwks"));
        assert!(fetchable("http://127.0.0.1:9/jwks"));
        assert!(fetchable("http://[::1]:9/jwks"));
        assert!(fetchable("http://localhost/jwks"));
        assert!(!fetchable("http://id.example.com/jwks"));
        assert!(!fetchable("http://127.0.0.1.evil.example/jwks"));
        assert!(!fetchable("file:///etc/passwd"));
    }

    #[test]
    fn the_widest_mapped_scope_wins_and_unmapped_ones_are_ignored() {
        let oauth = oauth(&[
            ("mcp:read", Scope::Read),
            ("mcp:plan", Scope::Plan),
            ("mcp:write", Scope::Write),
        ]);
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            mapped_scope(&oauth, &s(&["openid", "mcp:read", "mcp:plan"])),
            Some(Scope::Plan)
        );
        assert_eq!(
            mapped_scope(&oauth, &s(&["mcp:write", "mcp:read"])),
            Some(Scope::Write)
        );
        assert_eq!(mapped_scope(&oauth, &s(&["openid", "email"])), None);
        assert_eq!(token_scopes(&json!({"scope": "a  b"})), ["a", "b"]);
        assert_eq!(token_scopes(&json!({"scp": ["a", "b"]})), ["a", "b"]);
        assert!(token_scopes(&json!({})).is_empty());
    }

    fn jwt(header: Value, claims: Value) -> String {
        let b64 = |v: &Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
        };
        format!("{}.{}.c2ln", b64(&header), b64(&claims))
    }

    /// `none`, HMAC and tokens that are not access tokens are refused
    /// before any issuer is asked for keys (there is none to ask here).
    #[tokio::test]
    async fn none_hmac_and_non_access_tokens_are_refused_without_fetching_anything() {
        let oauth = oauth(&[("mcp:read", Scope::Read)]);
        let v = Verifier::default();
        let claims = json!({"iss": "https://id.example", "sub": "a", "aud": "https://p.example/mcp", "exp": 4_000_000_000u64});
        for (header, says) in [
            (json!({"alg": "none", "typ": "at+jwt"}), "neither"),
            (json!({"alg": "HS256", "typ": "at+jwt"}), "only asymmetric"),
            (json!({"alg": "RS256", "typ": "JWT"}), "typ must be at+jwt"),
            (json!({"alg": "RS256"}), "typ must be at+jwt"),
        ] {
            match v.verify(&oauth, &jwt(header.clone(), claims.clone())).await {
                Err(Rejected::Invalid(why)) => assert!(why.contains(says), "{header}: {why}"),
                other => panic!("{header}: {other:?}"),
            }
        }
        let other = json!({"iss": "https://evil.example", "sub": "a"});
        match v
            .verify(
                &oauth,
                &jwt(json!({"alg": "ES256", "typ": "at+jwt"}), other),
            )
            .await
        {
            Err(Rejected::Invalid(why)) => {
                assert!(why.contains("not one plangate trusts"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        match v.verify(&oauth, "pgk_nope").await {
            Err(Rejected::Invalid(why)) => assert!(why.contains("neither"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// An introspection answer is held to what a JWT's claims are: active,
    /// an access token, this issuer's, for plangate's resource, unexpired,
    /// naming a caller and a mapped scope; its verdict is reused for
    /// `every` at most, never past its expiry.
    #[test]
    fn an_introspection_answer_is_checked_like_a_token() {
        let oauth = OAuth {
            clock_skew: Duration::from_secs(5),
            introspection: Some(plangate_config::Introspection {
                issuer: "https://id.example".into(),
                client_id: "plangate".into(),
                client_secret: "s".into(),
                every: Duration::from_secs(30),
            }),
            ..oauth(&[("mcp:write", Scope::Write)])
        };
        let now = 1_000_000;
        let good = json!({"active": true, "iss": "https://id.example", "aud": ["x", "https://p.example/mcp"],
                          "sub": "ana", "scope": "openid mcp:write", "exp": now + 600, "token_type": "Bearer"});
        let v = verified_from_introspection(&oauth, "https://id.example", &good, now).unwrap();
        assert_eq!(v.scope, Scope::Write);
        assert_eq!(v.identity, Identity::new("https://id.example", "ana"));
        assert_eq!(v.recheck_at, now + 30);
        let mut soon = good.clone();
        soon["exp"] = json!(now + 10);
        let v = verified_from_introspection(&oauth, "https://id.example", &soon, now).unwrap();
        assert_eq!(v.recheck_at, now + 15, "never past exp (with the skew)");
        let with = |key: &str, value: Value| {
            let mut a = good.clone();
            a[key] = value;
            a
        };
        let mut no_aud = good.clone();
        no_aud.as_object_mut().unwrap().remove("aud");
        let mut no_sub = good.clone();
        no_sub.as_object_mut().unwrap().remove("sub");
        for (answer, says) in [
            (json!({"active": false}), "not active"),
            (with("active", json!("true")), "not active"),
            (with("token_type", json!("refresh_token")), "refresh token"),
            (
                with("iss", json!("https://evil.example")),
                "is not https://id.example",
            ),
            (
                with("aud", json!("https://other.example/mcp")),
                "not issued for plangate",
            ),
            (no_aud, "not issued for plangate"),
            (with("exp", json!(now - 10)), "expired"),
            (with("nbf", json!(now + 60)), "not valid yet"),
            (no_sub, "names no \"sub\""),
            (with("sub", json!("a\u{0}b")), "cannot name a caller"),
        ] {
            match verified_from_introspection(&oauth, "https://id.example", &answer, now) {
                Err(Rejected::Invalid(why)) => assert!(why.contains(says), "{answer}: {why}"),
                other => panic!("{answer}: {other:?}"),
            }
        }
        assert_eq!(
            verified_from_introspection(
                &oauth,
                "https://id.example",
                &with("scope", json!("openid")),
                now
            ),
            Err(Rejected::NoScope {
                had: vec!["openid".into()]
            })
        );
    }
}
