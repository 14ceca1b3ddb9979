//! The validated configuration: what the gateway builds from. Every value
//! here has passed validation, every default is resolved and every variable
//! expanded, so the build stage never re-checks anything.

pub use crate::rate_limit::RateLimit;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use plangate_core::{Effect, Modes, REDACTED, is_secret_key};
use serde::Serialize;

// === impl Config ===

/// A validated plangate configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// Where it came from, for messages and `config check`.
    pub source: ConfigSource,
    /// The `[gateway]` settings, defaults filled in.
    pub gateway: GatewaySettings,
    /// Upstream servers by name; every name passed
    /// [`plangate_core::validate_upstream_name`]. Never empty when loaded
    /// from a file.
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// The modes an agent may choose (docs/design.md §4): the built-in `plan`
    /// (unless `[modes.plan]` overrides it) plus every `[modes.NAME]`;
    /// `default` is always there too. The JSON formats get
    /// [`Modes::default`].
    pub modes: Modes,
    /// What counts as a secret beyond the built-in rules (`[redaction]`).
    pub redaction: Redaction,
    /// What the audit log records beyond every call that is not a read
    /// (`[audit]`).
    pub audit: Audit,
    /// The operator's own server profiles (`[profiles.NAME]`), matched
    /// before the built-in ones ([`crate::profiles`]).
    pub profiles: BTreeMap<String, crate::profiles::Profile>,
    /// Rules over tools and their arguments (`[[rules]]`), in order; every
    /// one compiled and checked when the file was loaded
    /// ([`plangate_policy::Policy::compile`]).
    pub rules: Vec<plangate_policy::RuleSpec>,
    /// Who may call besides API-key holders (`[auth]`).
    pub auth: Auth,
}

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

/// `[audit]`: every call that is not a read is always on the record
/// (`call_recorded`); reads too with `reads = true`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Audit {
    /// Record reads as well (one durable write per read: it costs the
    /// passthrough path, so it is off by default).
    pub reads: bool,
}

/// An operator's own secret names and credential shapes (`[redaction]`),
/// added to the built-in ones ([`plangate_core::Redactor`]). Every entry was
/// checked when the config was loaded, so [`Redaction::redactor`] cannot
/// fail for a loaded config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Redaction {
    /// Key names that are secrets wherever they appear in a key (case and
    /// `-`/`_` folded), like the built-in `password`.
    pub names: Vec<String>,
    /// Regular expressions matched inside every string value.
    pub patterns: Vec<String>,
}

impl Redaction {
    /// The rules: built in plus these.
    pub fn redactor(&self) -> Result<plangate_core::Redactor, plangate_core::RedactionError> {
        plangate_core::Redactor::new(&self.names, &self.patterns)
    }
}

impl Config {
    /// The operator's settings for tool `tool` of upstream `server`
    /// (`[upstreams.NAME.tools.TOOL]`), if any: the one lookup planning,
    /// apply and the tool pins share.
    pub fn tool_settings(&self, server: &str, tool: &str) -> Option<&ToolOverride> {
        self.upstreams.get(server)?.tools.get(tool)
    }

    /// A configuration with every setting at its default: `[gateway]`
    /// defaults and the built-in modes. For configs built in code, such as
    /// the CLI's zero-config demo.
    pub fn new(source: ConfigSource, upstreams: BTreeMap<String, UpstreamConfig>) -> Config {
        Config {
            source,
            gateway: GatewaySettings::default(),
            upstreams,
            modes: Modes::default(),
            redaction: Redaction::default(),
            audit: Audit::default(),
            profiles: BTreeMap::new(),
            rules: Vec::new(),
            auth: Auth::default(),
        }
    }

    /// Whether tools, prompts and resources are exposed as `NAME__…`:
    /// always with `namespace = "always"`, and with `"auto"` once more than
    /// one upstream is enabled (docs/design.md §1).
    pub fn namespaced(&self) -> bool {
        match self.gateway.namespace {
            Namespace::Always => true,
            Namespace::Auto => self.enabled_upstreams().count() > 1,
        }
    }

    /// The upstreams the gateway connects to: those not disabled.
    pub fn enabled_upstreams(&self) -> impl Iterator<Item = &UpstreamConfig> {
        self.upstreams.values().filter(|u| u.enabled)
    }
}

/// Where a configuration came from. Kept so that `config check` and start-up
/// logs can say which file is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "origin", rename_all = "snake_case")]
pub enum ConfigSource {
    /// A `plangate.toml`.
    Toml(PathBuf),
    /// An `mcpServers` (Claude Desktop, Cursor, Claude Code) or `servers`
    /// (VS Code) JSON file given with `--mcp-config`.
    McpJson(PathBuf),
    /// Built by the CLI itself, e.g. the zero-config demo; the string names
    /// it.
    Builtin(&'static str),
}

// === impl GatewaySettings ===

/// The `[gateway]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewaySettings {
    /// What a caller without an API key may do (docs/design.md §2).
    pub anonymous: Anonymous,
    /// `Host` header values accepted by `serve --http`, lowercase, so that a
    /// web page cannot reach a local gateway by DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`scheme://host[:port]`, `:*` for any port, or
    /// `null`) whose requests `/mcp` accepts; a request with any other
    /// `Origin` is refused 403 (the MCP spec's rule), one without an
    /// `Origin` (every non-browser client) is accepted. `None`: the origins
    /// of [`GatewaySettings::allowed_hosts`], any port, http or https —
    /// see [`GatewaySettings::origins`].
    pub allowed_origins: Option<Vec<String>>,
    /// The largest message a client may send, in bytes, over stdio and
    /// HTTP alike; a larger one is answered with a JSON-RPC error (`-32600`,
    /// `data.code = "too_large"`) for its id. 1 KiB to
    /// [`MAX_REQUEST_BYTES_LIMIT`]; default [`DEFAULT_MAX_REQUEST_BYTES`].
    pub max_request_bytes: usize,
    /// The most MCP sessions (HTTP, `Mcp-Session-Id`) alive at once; past
    /// it, a new session closes the least recently used one.
    pub max_sessions: u32,
    /// The most sessions one key (or all anonymous callers together) keeps
    /// alive at once; past it, a new session of that key closes its least
    /// recently used one.
    pub max_sessions_per_key: u32,
    /// How long `serve --http` waits for a request's head on a connection
    /// (new, or kept alive between requests) before closing it: cuts off
    /// slow-header attacks and idle connections. 1 s to 1 h.
    #[serde(serialize_with = "serialize_duration")]
    pub header_read_timeout: Duration,
    /// How long `serve --http` waits for a request's whole body, counted
    /// from its head: a body still unfinished then is cut (`408`,
    /// `body_timeout`), so a stalled upload holds neither a connection nor
    /// memory for long. 1 s to [`MAX_BODY_READ_TIMEOUT`]; default
    /// [`DEFAULT_BODY_READ_TIMEOUT`].
    #[serde(serialize_with = "serialize_duration")]
    pub body_read_timeout: Duration,
    /// The most calls one key (all anonymous callers together count as
    /// one) may have in flight at once that reach an upstream, plan or
    /// apply (a tool of an upstream, `apply_plan`, `exit_plan_mode`); the
    /// gateway's own bookkeeping tools are not counted. Past it a call waits up to a second for a
    /// slot, then is refused `rate_limited` with when to retry. 1 to
    /// [`MAX_CONCURRENT_CALLS_LIMIT`]; default
    /// [`DEFAULT_MAX_CONCURRENT_CALLS_PER_KEY`].
    pub max_concurrent_calls_per_key: u32,
    /// The most `tools/call`s one key (all anonymous callers together
    /// count as one) may send in a window; more are refused
    /// `rate_limited` with when to retry. `None` (the default): no limit.
    pub rate_limit: Option<RateLimit>,
    /// When upstream names prefix exposed tools.
    pub namespace: Namespace,
    /// Prefix of the gateway's own tools (`plangate_get_plan`, …).
    pub tool_prefix: String,
    /// The most steps a plan may hold; the next write is refused
    /// `plan_full` (docs/design.md §5). 1 to [`MAX_STEPS_LIMIT`].
    pub max_steps: u32,
    /// How long a plan lives from the last `begin_session` (or its first
    /// step); then its waiting steps expire. 1 s to [`MAX_PLAN_TTL`]. Shown
    /// (and serialized) as a duration string like `"4h"` or `"1h30m"`.
    #[serde(serialize_with = "serialize_duration")]
    pub plan_ttl: Duration,
    /// How long a step's claim holds without renewal while its call runs
    /// (renewed every third of it); a claim silent for longer means its
    /// process died, and the step becomes `in_doubt` (docs/design.md §5 Leases).
    /// 1 s to [`MAX_LEASE`].
    #[serde(serialize_with = "serialize_duration")]
    pub lease: Duration,
    /// How long a question to the person (`exit_plan_mode`, an `ask` mode)
    /// waits for an answer; then it lapses and nothing is written. 1 s to
    /// 1 h.
    #[serde(serialize_with = "serialize_duration")]
    pub review_timeout: Duration,
    /// The most bytes of a step's preview (a diff, a state) kept and
    /// shown; a longer one is cut and says so. Its digest covers it all.
    pub max_preview_bytes: usize,
    /// The most bytes a key's plan may hold (its open steps' arguments and
    /// previews, as recorded): a write that would take the plan past it is
    /// refused `too_large`, so no plan can grow to what a `get_plan` or a
    /// person's screen cannot carry.
    pub max_plan_bytes: usize,
    /// How many keys' folded states (mode and plan) a process keeps in
    /// memory, least recently used first out; any other key is folded
    /// from the store when it is used. Bounds memory whatever the number
    /// of keys; 1 to [`MAX_CACHED_KEYS`].
    pub cached_keys: u32,
}

/// The default `Host` headers for `serve --http`: loopback only.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The default `gateway.max_preview_bytes`: 64 KiB, a diff a person can
/// still read.
pub const DEFAULT_MAX_PREVIEW_BYTES: usize = 64 * 1024;

/// The default `gateway.max_plan_bytes`: 16 MiB, four requests at their
/// default cap.
pub const DEFAULT_MAX_PLAN_BYTES: usize = 16 * 1024 * 1024;

/// The largest `gateway.max_plan_bytes` allowed: 256 MiB.
pub const MAX_PLAN_BYTES_LIMIT: usize = 256 * 1024 * 1024;

/// The default `gateway.max_request_bytes`: 4 MiB, rmcp's HTTP default.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The largest `gateway.max_request_bytes` allowed: 64 MiB.
pub const MAX_REQUEST_BYTES_LIMIT: usize = 64 * 1024 * 1024;

/// The default `gateway.max_sessions`.
pub const DEFAULT_MAX_SESSIONS: u32 = 1024;

/// The default `gateway.max_sessions_per_key`.
pub const DEFAULT_MAX_SESSIONS_PER_KEY: u32 = 128;

/// The largest `gateway.max_sessions` (and `max_sessions_per_key`) allowed.
pub const MAX_SESSIONS_LIMIT: u32 = 100_000;

/// The default `gateway.header_read_timeout`: 30 s, hyper's own default
/// when a timer is set.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default `gateway.body_read_timeout`: 10 s. Every MCP message a
/// client sends in practice (a few KiB) arrives within it on any link, and
/// so does a whole `max_request_bytes` body (4 MiB) at 3.4 Mbit/s or more;
/// a body stalled on purpose is cut within it.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `gateway.body_read_timeout` allowed: 10 minutes.
pub const MAX_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// The default `gateway.max_concurrent_calls_per_key`: 32. An agent runs a
/// handful of tool calls in parallel (Claude Code and Cursor send up to
/// about ten at once), and a key shared by a few windows stays well under
/// it; one key's flood of slow calls cannot take every upstream
/// connection and task the gateway has.
pub const DEFAULT_MAX_CONCURRENT_CALLS_PER_KEY: u32 = 32;

/// The largest `gateway.max_concurrent_calls_per_key` allowed.
pub const MAX_CONCURRENT_CALLS_LIMIT: u32 = 100_000;

/// The default prefix of the gateway's own tools.
pub const DEFAULT_TOOL_PREFIX: &str = "plangate_";

/// The default plan step cap (`gateway.max_steps`).
pub const DEFAULT_MAX_STEPS: u32 = 50;

/// The largest `gateway.max_steps` allowed: a plan a person can still read.
pub const MAX_STEPS_LIMIT: u32 = 1000;

/// The default `gateway.cached_keys`: enough for every agent of a busy
/// replica to be served from memory (a key with a 10-step plan holds about
/// 30 KB there).
pub const DEFAULT_CACHED_KEYS: u32 = 1024;

/// The largest `gateway.cached_keys` allowed.
pub const MAX_CACHED_KEYS: u32 = 1_000_000;

/// The default plan life (`gateway.plan_ttl`): 4 hours.
pub const DEFAULT_PLAN_TTL: Duration = Duration::from_secs(4 * 60 * 60);

/// The longest `gateway.plan_ttl` allowed: 30 days. A plan older than that
/// is reviewed against a world that has long moved on.
pub const MAX_PLAN_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// The default step-claim lease (`gateway.lease`): 30 seconds.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The longest `gateway.lease` allowed: 1 hour.
pub const MAX_LEASE: Duration = Duration::from_secs(60 * 60);

/// `Duration` as the string a config would use (`"4h"`, `"1h30m"`), so
/// `config check --json` shows what the operator wrote.
fn serialize_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::duration::format_duration(*d))
}

impl Default for GatewaySettings {
    /// Closed by default: no anonymous access, loopback hosts only.
    fn default() -> Self {
        GatewaySettings {
            anonymous: Anonymous::None,
            allowed_hosts: DEFAULT_ALLOWED_HOSTS.map(str::to_owned).to_vec(),
            allowed_origins: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_key: DEFAULT_MAX_SESSIONS_PER_KEY,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_concurrent_calls_per_key: DEFAULT_MAX_CONCURRENT_CALLS_PER_KEY,
            rate_limit: None,
            namespace: Namespace::Auto,
            tool_prefix: DEFAULT_TOOL_PREFIX.to_owned(),
            max_steps: DEFAULT_MAX_STEPS,
            plan_ttl: DEFAULT_PLAN_TTL,
            lease: DEFAULT_LEASE,
            review_timeout: Duration::from_secs(600),
            cached_keys: DEFAULT_CACHED_KEYS,
            max_preview_bytes: DEFAULT_MAX_PREVIEW_BYTES,
            max_plan_bytes: DEFAULT_MAX_PLAN_BYTES,
        }
    }
}

impl GatewaySettings {
    /// The browser origins `/mcp` accepts: `allowed_origins` when set, else
    /// `http://HOST:*` and `https://HOST:*` for every allowed host (an IPv6
    /// host in brackets) — a page served from a host the gateway answers
    /// to may call it; a page from anywhere else may not.
    pub fn origins(&self) -> Vec<String> {
        if let Some(origins) = &self.allowed_origins {
            return origins.clone();
        }
        self.allowed_hosts
            .iter()
            .flat_map(|h| {
                let host = if h.contains(':') {
                    format!("[{h}]")
                } else {
                    h.clone()
                };
                [format!("http://{host}:*"), format!("https://{host}:*")]
            })
            .collect()
    }
}

/// What a caller with no API key may do. It can never plan
/// (`plan_needs_key`), so there is no `plan` or `write` choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Anonymous {
    /// Refused entirely (the default).
    #[default]
    None,
    /// May call read tools and read resources and prompts.
    Read,
}

/// When exposed names carry the upstream's name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Namespace {
    /// `NAME__tool` only when more than one upstream is enabled, so a single
    /// upstream keeps the tool names its users know (the default).
    #[default]
    Auto,
    /// Always `NAME__tool`, so names stay stable when upstreams are added.
    Always,
}

// === impl UpstreamConfig ===

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamConfig {
    /// Its name: the `NAME` of `NAME__tool`, and how operators refer to it.
    pub name: String,
    /// How to reach it.
    #[serde(flatten)]
    pub transport: Transport,
    /// Whether its tool annotations decide effect classes (docs/design.md §3);
    /// already resolved from the transport's default when not configured.
    pub trust_annotations: bool,
    /// `false`: not started, not connected, not offered.
    pub enabled: bool,
    /// How long plangate waits for the upstream's answer to one call
    /// (a tool call, a preview, a step of an apply, a resource or prompt
    /// read) before it gives up, cancels the call upstream and answers an
    /// error — during an apply the step is `in_doubt`. Progress from the
    /// upstream, and a question it asks the client, restart the wait.
    /// 1 s to [`MAX_CALL_TIMEOUT`]; default [`DEFAULT_CALL_TIMEOUT`].
    #[serde(serialize_with = "serialize_duration")]
    pub call_timeout: Duration,
    /// How long one connection attempt may take — start, `initialize` and
    /// the first lists — before plangate gives up on it (and retries in the
    /// background). 1 s to [`MAX_CALL_TIMEOUT`]; default
    /// [`DEFAULT_STARTUP_TIMEOUT`].
    #[serde(serialize_with = "serialize_duration")]
    pub startup_timeout: Duration,
    /// Which MCP revision plangate speaks to it.
    pub protocol: UpstreamProtocol,
    /// Per-tool overrides, keyed by the upstream's own tool name.
    pub tools: BTreeMap<String, ToolOverride>,
    /// `[upstreams.NAME.oauth]`: an HTTP upstream behind OAuth, reached
    /// with the tokens `plangate upstream login NAME` obtained.
    pub oauth: Option<UpstreamOAuth>,
}

/// `[upstreams.NAME.oauth]`: how plangate signs in to an HTTP upstream
/// that is an OAuth protected resource. The authorization server is found
/// from the upstream's RFC 9728 metadata; the client is the one configured
/// here, else one registered dynamically at the first login.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamOAuth {
    /// The scopes to ask for; empty: those the upstream's metadata lists.
    pub scopes: Vec<String>,
    /// A client registered beforehand at the authorization server; `None`:
    /// register one dynamically (RFC 7591) at login.
    pub client_id: Option<String>,
    /// That client's secret (a confidential client); never shown.
    #[serde(serialize_with = "serialize_redacted_option")]
    pub client_secret: Option<String>,
    /// How plangate gets its tokens.
    pub grant: OAuthGrant,
    /// The https URL of plangate's Client ID Metadata Document, served by
    /// the operator: used as the client id where the authorization server
    /// supports such documents and no `client_id` is configured, instead
    /// of registering a client dynamically at every sign-in.
    pub client_metadata_url: Option<String>,
}

/// `grant` of `[upstreams.NAME.oauth]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OAuthGrant {
    /// A person signs in once (`plangate upstream login`); the tokens are
    /// refreshed from then on.
    #[default]
    AuthorizationCode,
    /// A machine upstream: plangate asks for a token with its client id
    /// and secret whenever it needs one (no person, nothing stored).
    ClientCredentials,
}

impl fmt::Debug for UpstreamOAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamOAuth")
            .field("scopes", &self.scopes)
            .field("client_id", &self.client_id)
            .field("client_metadata_url", &self.client_metadata_url)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| REDACTED),
            )
            .finish()
    }
}

fn serialize_redacted<S: serde::Serializer>(_: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(REDACTED)
}

fn serialize_redacted_option<S: serde::Serializer>(
    v: &Option<String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(_) => s.serialize_str(REDACTED),
        None => s.serialize_none(),
    }
}

/// Which MCP revision plangate speaks to an upstream (`protocol`).
///
/// The default is 2025-11-25: plangate relays that revision's whole
/// feature set (elicitation inside a call, log levels, resource
/// subscriptions) to every client. A server that also serves 2026-07-28
/// (stateless, `input_required`) gives its 2025-11-25 clients' features up
/// on that path, and plangate does not yet translate them, so 2026-07-28 is
/// asked for per upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum UpstreamProtocol {
    /// `initialize`, sessions: MCP 2025-11-25.
    #[default]
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    /// `server/discover`, per-request metadata, `input_required`: MCP
    /// 2026-07-28; no fallback.
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
    /// Probe with `server/discover`; fall back to 2025-11-25 when the
    /// server does not serve 2026-07-28.
    #[serde(rename = "auto")]
    Auto,
}

/// The default `call_timeout` of an upstream: 60 seconds, the official
/// MCP SDKs' default request timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The default `startup_timeout` of an upstream: 30 seconds (an `npx`
/// package's first download fits; a server that answers nothing in 30 s
/// is retried in the background).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `call_timeout` allowed: 1 day.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// How to reach an upstream. Env and header values may hold secrets, so
/// `Debug` and `Serialize` show them as `"[redacted]"` (see
/// [`Transport::redacted`]); read the fields to get the real values.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio {
        /// The program; looked up on `PATH` when not a path.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the child's environment.
        env: BTreeMap<String, String>,
        /// Its working directory, absolute when the config file's path was;
        /// `None`: plangate's own.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Headers sent with every request (typically `Authorization`).
        headers: BTreeMap<String, String>,
        /// A PEM file of extra CA certificates trusted for this upstream
        /// besides the system's (a self-hosted server with a private CA);
        /// absolute when the config file's path was. Only the path is
        /// checked here: the gateway reads the file when it builds the
        /// upstream's HTTP client.
        ca_file: Option<PathBuf>,
    },
}

impl Transport {
    /// The `trust_annotations` default for this transport (docs/design.md §3): a
    /// local process already runs with the user's permissions, so its
    /// annotations are trusted; a remote server's are not.
    pub fn default_trust_annotations(&self) -> bool {
        matches!(self, Transport::Stdio { .. })
    }

    /// `"stdio"` or `"http"`, for tables and messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }

    /// A copy safe to log or print: every env and header value becomes
    /// `"[redacted]"`, as do URL passwords, URL query values and
    /// `--flag value` / `--flag=value` arguments whose name looks like a
    /// secret (the words of [`plangate_core::is_secret_key`]).
    pub fn redacted(&self) -> Transport {
        let hide = |map: &BTreeMap<String, String>| {
            map.keys()
                .map(|k| (k.clone(), REDACTED.to_owned()))
                .collect()
        };
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => Transport::Stdio {
                command: command.clone(),
                args: redact_args(args),
                env: hide(env),
                cwd: cwd.clone(),
            },
            Transport::Http {
                url,
                headers,
                ca_file,
            } => Transport::Http {
                url: redact_url(url),
                headers: hide(headers),
                ca_file: ca_file.clone(),
            },
        }
    }
}

/// The shape `Debug` and `Serialize` show; built from [`Transport::redacted`]
/// only, so neither can leak a secret.
#[derive(Debug, Serialize)]
#[serde(tag = "transport", rename_all = "lowercase")]
enum TransportView<'a> {
    Stdio {
        command: &'a str,
        args: &'a [String],
        env: &'a BTreeMap<String, String>,
        cwd: &'a Option<PathBuf>,
    },
    Http {
        url: &'a str,
        headers: &'a BTreeMap<String, String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ca_file: &'a Option<PathBuf>,
    },
}

impl<'a> From<&'a Transport> for TransportView<'a> {
    fn from(t: &'a Transport) -> Self {
        match t {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => TransportView::Stdio {
                command,
                args,
                env,
                cwd,
            },
            Transport::Http {
                url,
                headers,
                ca_file,
            } => TransportView::Http {
                url,
                headers,
                ca_file,
            },
        }
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = self.redacted();
        let view = TransportView::from(&redacted);
        match view {
            TransportView::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", &command)
                .field("args", &args)
                .field("env", env)
                .field("cwd", cwd)
                .finish(),
            TransportView::Http {
                url,
                headers,
                ca_file,
            } => f
                .debug_struct("Http")
                .field("url", &url)
                .field("headers", headers)
                .field("ca_file", ca_file)
                .finish(),
        }
    }
}

impl Serialize for Transport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let redacted = self.redacted();
        TransportView::from(&redacted).serialize(s)
    }
}

/// `--token X` and `--api-key=X` style arguments with the value hidden.
fn redact_args(args: &[String]) -> Vec<String> {
    let flag_name = |a: &str| {
        a.strip_prefix("--")
            .or_else(|| a.strip_prefix('-'))
            .map(str::to_owned)
    };
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push(REDACTED.to_owned());
            hide_next = false;
            continue;
        }
        match arg.split_once('=') {
            Some((flag, _)) if flag_name(flag).is_some_and(|n| is_secret_key(&n)) => {
                out.push(format!("{flag}={REDACTED}"));
            }
            Some(_) => out.push(arg.clone()),
            None => {
                hide_next = flag_name(arg).is_some_and(|n| is_secret_key(&n));
                out.push(arg.clone());
            }
        }
    }
    out
}

/// The URL with any userinfo password and secret-looking query values hidden.
fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    format!("{scheme}://{user}:{REDACTED}@{host}{path}")
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret_key(k) => format!("{k}={REDACTED}"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// A trusted per-tool setting (`[upstreams.NAME.tools.TOOL]`): the tool's
/// effect class, whether it is offered, and how its planned steps and
/// receipts are described (docs/design.md §5). Every planning field is optional;
/// without them a step gets a generic sentence and lands `live`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolOverride {
    /// The tool's effect class, winning over annotations (docs/design.md §3).
    pub effect: Option<Effect>,
    /// `false`: the tool is not offered and calls to it are refused.
    pub enabled: bool,
    /// A one-sentence template for a planned step's `predicted_effect`:
    /// `{arg}` is replaced by the top-level argument `arg`, `{{` and `}}`
    /// are literal braces. Checked for balanced braces and non-empty names;
    /// never set together with [`preview`](Self::preview).
    pub predicted_effect: Option<String>,
    /// The upstream's own name of a read tool on the same upstream that,
    /// given the same arguments, answers `structuredContent` `{effect,
    /// target, target_version}` without changing anything. Whether it exists
    /// (and is a read) is checked when the gateway connects, not here.
    pub preview: Option<String>,
    /// Where the write lands: live, or on a copy.
    pub lands_on: LandsOnSetting,
    /// Shown with the step (`lands_on.note`), e.g. what the copy is.
    pub lands_on_note: Option<String>,
    /// A JSON pointer (RFC 6901) into the call's arguments naming what the
    /// write changes (`lands_on.target`); `""` is the whole arguments.
    pub target: Option<String>,
    /// A JSON pointer into the upstream's `structuredContent` giving the
    /// copy's id for the receipt; only with `lands_on = "copy"`.
    pub copy_id: Option<String>,
    /// JSON pointers into the upstream's `structuredContent` giving links
    /// for the receipt (a preview URL, say).
    pub links: Vec<String>,
    /// JSON pointers into the upstream's `structuredContent` giving snapshot
    /// ids for the receipt (what undoes the write).
    pub snapshots: Vec<String>,
    /// The most calls to this tool, from all callers together, in a
    /// window; more are refused `rate_limited`. `None`: no limit.
    pub rate_limit: Option<RateLimit>,
    /// JSON pointers to the arguments that are paths (`*` walks a list):
    /// what rules see as `paths`, replacing the profile's or the names
    /// found in the schema. `Some(vec![])`: the tool takes no path.
    pub paths: Option<Vec<String>>,
}

impl Default for ToolOverride {
    /// Enabled, effect from annotations, no planning settings, lands live.
    fn default() -> Self {
        ToolOverride {
            effect: None,
            enabled: true,
            predicted_effect: None,
            preview: None,
            lands_on: LandsOnSetting::Live,
            lands_on_note: None,
            target: None,
            copy_id: None,
            links: Vec::new(),
            snapshots: Vec::new(),
            rate_limit: None,
            paths: None,
        }
    }
}

/// Where a tool's write lands (`lands_on`): the `where` of a planned
/// step's `lands_on`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LandsOnSetting {
    /// On the real thing, at once (the default).
    #[default]
    Live,
    /// On a copy (a draft, a branch) that someone still has to promote; the
    /// receipt's `copy_id` names it.
    Copy,
}

impl LandsOnSetting {
    /// `"live"` or `"copy"`, as in config and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            LandsOnSetting::Live => "live",
            LandsOnSetting::Copy => "copy",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(args: &[&str]) -> Transport {
        Transport::Stdio {
            command: "node".into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::from([("API_TOKEN".into(), "tok-123".into())]),
            cwd: None,
        }
    }

    #[test]
    fn debug_and_json_never_show_env_or_header_values() {
        let t = stdio(&[
            "server.js",
            "--api-key",
            "k-1",
            "--token=t-2",
            "--port",
            "80",
        ]);
        let debug = format!("{t:?}");
        let json = serde_json::to_string(&t).unwrap();
        for shown in [&debug, &json] {
            for secret in ["tok-123", "k-1", "t-2"] {
                assert!(!shown.contains(secret), "{secret} leaked: {shown}");
            }
            assert!(
                shown.contains("API_TOKEN") && shown.contains("80"),
                "{shown}"
            );
        }
        let h = Transport::Http {
            url: "https://u:pw@example.com/mcp?api_key=abc&x=1".into(),
            headers: BTreeMap::from([("Authorization".into(), "Bearer zzz".into())]),
            ca_file: None,
        };
        let json = serde_json::to_string(&h).unwrap();
        for secret in ["zzz", "pw", "abc"] {
            assert!(!json.contains(secret), "{secret} leaked: {json}");
        }
        assert!(json.contains("https://u:[redacted]@example.com/mcp?api_key=[redacted]&x=1"));
        assert!(!format!("{h:?}").contains("zzz"));
    }

    #[test]
    fn namespacing_follows_enabled_upstreams_in_auto_mode() {
        let up = |name: &str, enabled| UpstreamConfig {
            name: name.into(),
            transport: stdio(&[]),
            trust_annotations: true,
            enabled,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            protocol: UpstreamProtocol::default(),
            tools: BTreeMap::new(),
            oauth: None,
        };
        let mut config = Config::new(
            ConfigSource::Builtin("test"),
            BTreeMap::from([("a".into(), up("a", true)), ("b".into(), up("b", false))]),
        );
        assert!(!config.namespaced());
        config.upstreams.get_mut("b").unwrap().enabled = true;
        assert!(config.namespaced());
        config.upstreams.remove("b");
        config.gateway.namespace = Namespace::Always;
        assert!(config.namespaced());
    }
}
