//! `[upstreams.NAME]`: one upstream server — how long plangate waits for
//! it, which MCP revision it speaks, how plangate signs in to it — and its
//! per-tool settings (`[upstreams.NAME.tools.TOOL]`). How it is reached
//! is [`Transport`], beside this file.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use plangate_core::{Effect, REDACTED};
use serde::Serialize;

use super::{RateLimit, Transport, serialize_duration, serialize_redacted_option};

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

impl UpstreamConfig {
    /// Upstream `name` reached by `transport`, every other setting its
    /// default (as an entry that names only its transport gets): enabled,
    /// annotations trusted when it runs locally, the default timeouts and
    /// protocol, no tool settings, no OAuth.
    pub fn new(name: impl Into<String>, transport: Transport) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            trust_annotations: transport.default_trust_annotations(),
            transport,
            enabled: true,
            call_timeout: super::DEFAULT_CALL_TIMEOUT,
            startup_timeout: super::DEFAULT_STARTUP_TIMEOUT,
            protocol: UpstreamProtocol::V2025_11_25,
            tools: BTreeMap::new(),
            oauth: None,
        }
    }
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
    /// The upstream's own tool that undoes this one from a snapshot it
    /// answered (`restore_snapshot` on the demo site): a revert of the
    /// step calls it once per snapshot, with the snapshot id under the
    /// name its `snapshots` pointer ends in (`/snapshot_id` →
    /// `snapshot_id`).
    pub undo: Option<String>,
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
            undo: None,
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
