//! The `[gateway]` table: the limits, timeouts and defaults of the
//! gateway itself, each with its default and its bounds. Apart from the
//! rest of the model because it is the largest table, and stands alone.

use std::time::Duration;

use serde::Serialize;

use super::{RateLimit, serialize_duration};

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
    /// The most bytes of what one applied step replaced that is kept for
    /// an undo (docs/design.md §5, "Undo"); over it, the receipt says undo
    /// is not available and why.
    pub max_undo_bytes: usize,
    /// How long what an applied step replaced is kept; then it is dropped
    /// and its key's log says so. 1 s to [`MAX_UNDO_TTL`].
    #[serde(serialize_with = "serialize_duration")]
    pub undo_ttl: Duration,
    /// How many keys' folded states (mode and plan) a process keeps in
    /// memory, least recently used first out; any other key is folded
    /// from the store when it is used. Bounds memory whatever the number
    /// of keys; 1 to [`MAX_CACHED_KEYS`].
    pub cached_keys: u32,
    /// The address people reach the gateway at from elsewhere (a phone, a
    /// chat), `https://gw.example.com`: notifications link to
    /// `{public_url}/console#key=…` on it. `None`: the address `serve
    /// --http` is bound to, which only this machine may reach.
    pub public_url: Option<String>,
    /// How long a plan must be quiet (no step planned, changed or
    /// decided) before `plan.review_needed` goes out for it, so a plan
    /// being written is announced once, not at every step. 1 s to 1 h;
    /// default [`DEFAULT_NOTIFY_DEBOUNCE`].
    #[serde(serialize_with = "serialize_duration")]
    pub notify_debounce: Duration,
}

/// The default `gateway.notify_debounce`: 5 s.
pub const DEFAULT_NOTIFY_DEBOUNCE: Duration = Duration::from_secs(5);

/// The default `Host` headers for `serve --http`: loopback only.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The default `gateway.max_preview_bytes`: 64 KiB, a diff a person can
/// still read.
pub const DEFAULT_MAX_PREVIEW_BYTES: usize = 64 * 1024;

/// The default `gateway.max_undo_bytes`: 4 MiB per step.
pub const DEFAULT_MAX_UNDO_BYTES: usize = 4 * 1024 * 1024;

/// The default `gateway.undo_ttl`: 30 days.
pub const DEFAULT_UNDO_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The longest `gateway.undo_ttl`: a year.
pub const MAX_UNDO_TTL: Duration = Duration::from_secs(366 * 24 * 3600);

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
            max_undo_bytes: DEFAULT_MAX_UNDO_BYTES,
            undo_ttl: DEFAULT_UNDO_TTL,
            public_url: None,
            notify_debounce: DEFAULT_NOTIFY_DEBOUNCE,
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
