//! `[auth]`: who may call besides API-key holders — plangate as an OAuth
//! protected resource. Apart from the gateway settings because it is a
//! table of its own, with secrets.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use plangate_core::REDACTED;
use serde::Serialize;

use super::{serialize_duration, serialize_redacted};

/// `[auth]`: callers besides API-key holders. API keys always work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Auth {
    /// `[auth.oauth]`: plangate as an OAuth 2.1 protected resource (the
    /// MCP authorization spec), when set.
    pub oauth: Option<OAuth>,
}

/// `[auth.oauth]`: plangate accepts access tokens (RFC 9068 JWTs) issued
/// for its own resource URL by the authorization servers named here, and
/// says so in its RFC 9728 metadata, so MCP clients can sign their person
/// in. Each token's `scope` maps to a plangate scope per request; the
/// caller is the identity `(issuer, identity_claim)`, with one plan of its
/// own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OAuth {
    /// This server's resource URL, as clients reach it (e.g.
    /// `https://plangate.example.com/mcp`): the audience every token must
    /// name (RFC 8707), and the `resource` of the metadata. `https://`
    /// except on loopback; no query or fragment.
    pub resource: String,
    /// The issuer identifiers of the authorization servers trusted,
    /// exactly as they appear in tokens' `iss`. `https://` except on
    /// loopback.
    pub issuers: Vec<String>,
    /// The claim that names the caller (`sub` by default; `email` or
    /// `preferred_username` where the provider sets them).
    pub identity_claim: String,
    /// Token scope → plangate scope; the widest one a token holds wins. A
    /// token with none of these scopes is refused `insufficient_scope`.
    pub scopes: BTreeMap<String, plangate_core::Scope>,
    /// How far a token's `exp` and `nbf` may be off this machine's clock
    /// (`clock_skew`, in seconds, 0 to 300; default 60).
    #[serde(serialize_with = "serialize_duration")]
    pub clock_skew: Duration,
    /// RFC 7662 token introspection (`[auth.oauth.introspection]`): the
    /// authorization server is asked whether each token is still active,
    /// so a revoked token is refused within `every`, not only at its
    /// expiry; it also accepts opaque (non-JWT) tokens.
    pub introspection: Option<Introspection>,
}

/// `[auth.oauth.introspection]`: how plangate asks an issuer's
/// introspection endpoint (named by its metadata) about tokens.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Introspection {
    /// The issuer asked (one of `issuers`): its tokens are introspected,
    /// and an opaque token is taken to be its.
    pub issuer: String,
    /// plangate's client at that authorization server.
    pub client_id: String,
    /// That client's secret; never shown.
    #[serde(serialize_with = "serialize_redacted")]
    pub client_secret: String,
    /// How long an answer counts for a token before the server is asked
    /// again (never past the token's expiry).
    #[serde(serialize_with = "serialize_duration")]
    pub every: Duration,
}

impl fmt::Debug for Introspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Introspection")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &REDACTED)
            .field("every", &self.every)
            .finish()
    }
}

/// The default `auth.oauth.introspection.every`: 60 s.
pub const DEFAULT_INTROSPECTION_EVERY: Duration = Duration::from_secs(60);

/// The default `auth.oauth.clock_skew`: 60 s.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The default `auth.oauth.identity_claim`.
pub const DEFAULT_IDENTITY_CLAIM: &str = "sub";
