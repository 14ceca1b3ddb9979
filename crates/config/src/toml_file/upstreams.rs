//! `[upstreams.NAME]` and `[upstreams.NAME.tools.TOOL]` of a
//! `plangate.toml`: how to reach each server, and per-tool settings.

use std::collections::BTreeMap;

use plangate_core::validate_upstream_name;

use super::values::{duration_in, effect_value, non_empty_text, rate_limit};
use crate::check::{Checker, Kind, TransportFields, child, transport};
use crate::model::{
    DEFAULT_CALL_TIMEOUT, LandsOnSetting, MAX_CALL_TIMEOUT, ToolOverride, UpstreamConfig,
    UpstreamProtocol,
};
use crate::planning::{pointer_problem, template_placeholders};

const UPSTREAM_KEYS: [&str; 14] = crate::check::transport_keys_and([
    "ca_file",
    "trust_annotations",
    "enabled",
    "call_timeout",
    "startup_timeout",
    "protocol",
    "tools",
    "oauth",
]);
const TOOL_KEYS: [&str; 13] = [
    "effect",
    "enabled",
    "predicted_effect",
    "preview",
    "lands_on",
    "lands_on_note",
    "target",
    "copy_id",
    "links",
    "snapshots",
    "undo",
    "rate_limit",
    "paths",
];

pub(super) fn upstreams(
    c: &mut Checker<'_>,
    node: &toml::Value,
) -> Option<BTreeMap<String, UpstreamConfig>> {
    // An `[upstreams]` table with none in it says "none yet" on purpose (a
    // service's starter config, before `plangate wrap --service` moves a
    // client's servers in): it loads, and serves no tools until one is
    // added. A config with no `[upstreams]` at all is still refused.
    let entries = c.table("upstreams", node, "a table of [upstreams.NAME] tables")?;
    let mut out = Some(BTreeMap::new());
    for (name, value) in entries {
        // One whose variables are unset is down, not a mistake: the
        // others load and serve ([`Checker::upstream_or_down`]).
        let up = c.upstream_or_down(name, |c| upstream(c, name, value));
        out = out.zip(up).map(|(mut m, u)| {
            if let Some(u) = u {
                m.insert(name.to_owned(), u);
            }
            m
        });
    }
    out
}

fn upstream(c: &mut Checker<'_>, name: &str, node: &toml::Value) -> Option<UpstreamConfig> {
    let key = child("upstreams", name);
    let name_ok = match validate_upstream_name(name) {
        Ok(()) => true,
        Err(e) => {
            c.error(&key, e.to_string());
            false
        }
    };
    let entries = c.table(&key, node, "a table")?;
    c.unknown_keys(&key, &entries, &UPSTREAM_KEYS);
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let fields = TransportFields::of(&entries);
    let kind = match (fields.command, fields.url) {
        (Some(_), None) => Some(Kind::Stdio),
        (None, Some(_)) => Some(Kind::Http),
        (Some(_), Some(_)) => {
            c.error(
                &key,
                "has both command and url: give exactly one (command for a stdio server, url for Streamable HTTP)",
            );
            None
        }
        (None, None) => {
            c.error(
                &key,
                "has neither command nor url: give exactly one (command for a stdio server, url for Streamable HTTP)",
            );
            None
        }
    };
    let transport = kind.and_then(|kind| transport(c, &key, kind, &fields, true));
    let trust = get("trust_annotations")
        .map(|n| c.bool(&child(&key, "trust_annotations"), n).map(Some))
        .unwrap_or(Some(None));
    let enabled = get("enabled")
        .map(|n| c.bool(&child(&key, "enabled"), n))
        .unwrap_or(Some(true));
    let call_timeout = get("call_timeout")
        .map(|n| {
            duration_in(
                c,
                &child(&key, "call_timeout"),
                n,
                "call_timeout",
                MAX_CALL_TIMEOUT,
            )
        })
        .unwrap_or(Some(DEFAULT_CALL_TIMEOUT));
    let startup_timeout = get("startup_timeout")
        .map(|n| {
            duration_in(
                c,
                &child(&key, "startup_timeout"),
                n,
                "startup_timeout",
                MAX_CALL_TIMEOUT,
            )
        })
        .unwrap_or(Some(crate::model::DEFAULT_STARTUP_TIMEOUT));
    let protocol = get("protocol")
        .map(|n| protocol(c, &child(&key, "protocol"), n))
        .unwrap_or(Some(UpstreamProtocol::default()));
    let tools = get("tools")
        .map(|n| tools(c, &child(&key, "tools"), n))
        .unwrap_or_else(|| Some(BTreeMap::new()));
    let oauth = match get("oauth") {
        Some(n) => oauth(c, &key, kind, fields.headers, n).map(Some),
        None => Some(None),
    };
    let transport = transport?;
    let trust_annotations = trust?.unwrap_or_else(|| transport.default_trust_annotations());
    name_ok.then_some(UpstreamConfig {
        name: name.to_owned(),
        transport,
        trust_annotations,
        enabled: enabled?,
        call_timeout: call_timeout?,
        startup_timeout: startup_timeout?,
        protocol: protocol?,
        tools: tools?,
        oauth: oauth?,
    })
}

const OAUTH_KEYS: [&str; 5] = [
    "scopes",
    "client_id",
    "client_secret",
    "grant",
    "client_metadata_url",
];

/// `[upstreams.NAME.oauth]`: only for a `url` upstream, and not beside an
/// `Authorization` header (the token is plangate's to send).
fn oauth(
    c: &mut Checker<'_>,
    key: &str,
    kind: Option<Kind>,
    headers: Option<&toml::Value>,
    node: &toml::Value,
) -> Option<crate::model::UpstreamOAuth> {
    let key = child(key, "oauth");
    let entries = c.table(&key, node, "a table")?;
    c.unknown_keys(&key, &entries, &OAUTH_KEYS);
    let mut ok = true;
    if kind == Some(Kind::Stdio) {
        c.error(
            &key,
            "OAuth is for upstreams reached by url: a stdio server is started by plangate and needs no sign-in (give it credentials in env)",
        );
        ok = false;
    }
    let has_authorization = headers
        .and_then(toml::Value::as_table)
        .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("authorization")));
    if has_authorization {
        c.error(
            &key,
            "both an Authorization header and [oauth]: remove the header, plangate sends the OAuth token",
        );
        ok = false;
    }
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let scopes = match get("scopes") {
        Some(v) => c.string_list(&child(&key, "scopes"), v),
        None => Some(Vec::new()),
    };
    let client_id = match get("client_id") {
        Some(v) => c.non_empty_string(&child(&key, "client_id"), v).map(Some),
        None => Some(None),
    };
    let client_secret = match get("client_secret") {
        Some(v) => c
            .non_empty_string(&child(&key, "client_secret"), v)
            .map(Some),
        None => Some(None),
    };
    if let (Some(None), Some(Some(_))) = (&client_id, &client_secret) {
        c.error(
            &child(&key, "client_secret"),
            "a client_secret needs the client_id it belongs to",
        );
        ok = false;
    }
    let grant = match get("grant") {
        Some(v) => match c.string(&child(&key, "grant"), v).as_deref() {
            Some("authorization_code") => Some(crate::model::OAuthGrant::AuthorizationCode),
            Some("client_credentials") => Some(crate::model::OAuthGrant::ClientCredentials),
            Some(other) => {
                c.error(
                    &child(&key, "grant"),
                    format!("grant {other:?} is not supported: use \"authorization_code\" (a person signs in with `plangate upstream login`) or \"client_credentials\" (a machine client with client_id and client_secret)"),
                );
                None
            }
            None => None,
        },
        None => Some(crate::model::OAuthGrant::AuthorizationCode),
    };
    if grant == Some(crate::model::OAuthGrant::ClientCredentials)
        && !matches!((&client_id, &client_secret), (Some(Some(_)), Some(Some(_))))
    {
        c.error(
            &child(&key, "grant"),
            "client_credentials needs the client_id and client_secret of a client registered at the authorization server",
        );
        ok = false;
    }
    let client_metadata_url = match get("client_metadata_url") {
        Some(v) => client_metadata_url(c, &child(&key, "client_metadata_url"), v).map(Some),
        None => Some(None),
    };
    let (scopes, client_id, client_secret, grant, client_metadata_url) = (
        scopes?,
        client_id?,
        client_secret?,
        grant?,
        client_metadata_url?,
    );
    ok.then_some(crate::model::UpstreamOAuth {
        scopes,
        client_id,
        client_secret,
        grant,
        client_metadata_url,
    })
}

/// `client_metadata_url`: a Client ID Metadata Document's URL is the
/// client id itself, so it must be https with a path
/// (draft-ietf-oauth-client-id-metadata-document).
fn client_metadata_url(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<String> {
    let url = c.url(key, node)?;
    let lower = url.to_ascii_lowercase();
    let valid = lower.strip_prefix("https://").is_some_and(|rest| {
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        !authority.contains('@') && !path.is_empty() && !path.starts_with('?') && !url.contains('#')
    });
    if valid {
        Some(url)
    } else {
        c.error(
            key,
            format!("client_metadata_url {url:?} is not a Client ID Metadata Document URL: give the https:// URL (with a path, no fragment) where plangate's client metadata is served; `plangate upstream client-metadata URL` prints the document to serve there"),
        );
        None
    }
}

fn tools(
    c: &mut Checker<'_>,
    key: &str,
    node: &toml::Value,
) -> Option<BTreeMap<String, ToolOverride>> {
    let entries = c.table(key, node, "a table of [...tools.TOOL] tables")?;
    let mut out = Some(BTreeMap::new());
    for (tool, value) in entries {
        let tool_key = child(key, tool);
        let t = tool_override(c, &tool_key, tool, value);
        out = out.zip(t).map(|(mut m, t)| {
            m.insert(tool.to_owned(), t);
            m
        });
    }
    out
}

fn tool_override(
    c: &mut Checker<'_>,
    key: &str,
    tool: &str,
    node: &toml::Value,
) -> Option<ToolOverride> {
    if tool.is_empty() {
        c.error(key, "tool name must not be empty");
        return None;
    }
    let entries = c.table(key, node, "a table")?;
    c.unknown_keys(key, &entries, &TOOL_KEYS);
    let mut out = Some(ToolOverride::default());
    for &(k, v) in &entries {
        let item_key = child(key, k);
        let ok = match k {
            "effect" => effect_value(c, &item_key, "effect", v)
                .map(|e| out.as_mut().map(|o| o.effect = Some(e))),
            "enabled" => c
                .bool(&item_key, v)
                .map(|b| out.as_mut().map(|o| o.enabled = b)),
            "predicted_effect" => predicted_effect(c, &item_key, v)
                .map(|t| out.as_mut().map(|o| o.predicted_effect = Some(t))),
            "preview" => {
                preview(c, &item_key, tool, v).map(|p| out.as_mut().map(|o| o.preview = Some(p)))
            }
            "lands_on" => lands_on(c, &item_key, v).map(|l| out.as_mut().map(|o| o.lands_on = l)),
            "lands_on_note" => non_empty_text(c, &item_key, v)
                .map(|n| out.as_mut().map(|o| o.lands_on_note = Some(n))),
            "target" => pointer(c, &item_key, v, Pointer::IntoArguments)
                .map(|p| out.as_mut().map(|o| o.target = Some(p))),
            "copy_id" => pointer(c, &item_key, v, Pointer::IntoResult)
                .map(|p| out.as_mut().map(|o| o.copy_id = Some(p))),
            "links" => c
                .list_of(&item_key, v, |c, k, n| {
                    pointer(c, k, n, Pointer::IntoResult)
                })
                .map(|l| out.as_mut().map(|o| o.links = l)),
            "snapshots" => c
                .list_of(&item_key, v, |c, k, n| {
                    pointer(c, k, n, Pointer::IntoResult)
                })
                .map(|l| out.as_mut().map(|o| o.snapshots = l)),
            "undo" => {
                non_empty_text(c, &item_key, v).map(|t| out.as_mut().map(|o| o.undo = Some(t)))
            }
            "rate_limit" => {
                rate_limit(c, &item_key, v).map(|r| out.as_mut().map(|o| o.rate_limit = Some(r)))
            }
            "paths" => c
                .list_of(&item_key, v, |c, k, n| {
                    pointer(c, k, n, Pointer::IntoArguments)
                })
                .map(|l| out.as_mut().map(|o| o.paths = Some(l))),
            _ => Some(None), // reported by unknown_keys
        };
        if ok.is_none() {
            out = None;
        }
    }
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    if get("predicted_effect").is_some() && get("preview").is_some() {
        c.error(
            &child(key, "preview"),
            "preview and predicted_effect are both set: give one (the preview tool's answer or the template's sentence describes the step)",
        );
        out = None;
    }
    if get("undo").is_some() && get("snapshots").is_none() {
        c.error(
            &child(key, "undo"),
            "undo names the tool that restores this tool's snapshots: set snapshots too (the pointers into its result that give them)",
        );
        out = None;
    }
    // Checked on the raw values, so that other mistakes in the table do not
    // hide this one; a lands_on that is not a string or not live/copy is
    // already reported.
    let lands_live = get("lands_on").is_none_or(|v| v.as_str() == Some("live"));
    if get("copy_id").is_some() && lands_live {
        c.error(
            &child(key, "copy_id"),
            "copy_id only applies to a tool that lands on a copy: set lands_on = \"copy\" too",
        );
        out = None;
    }
    out
}

/// A one-line template with balanced braces (see
/// [`template_placeholders`]).
fn predicted_effect(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<String> {
    let t = non_empty_text(c, key, node)?;
    if t.contains(['\n', '\r']) {
        c.error(
            key,
            "predicted_effect must be one line: one sentence saying what the write will do",
        );
        return None;
    }
    if let Err(problem) = template_placeholders(&t) {
        c.error(key, format!("predicted_effect {t:?} {problem}"));
        return None;
    }
    Some(t)
}

/// The name of another tool on the same upstream. Whether it exists is
/// known only once the gateway has connected.
fn preview(c: &mut Checker<'_>, key: &str, tool: &str, node: &toml::Value) -> Option<String> {
    let p = non_empty_text(c, key, node)?;
    if p.chars().any(char::is_whitespace) {
        c.error(
            key,
            format!("preview {p:?} is not a tool name: write the upstream's own tool name, without spaces"),
        );
        return None;
    }
    if p == tool {
        c.error(
            key,
            format!("preview {p:?} is the tool itself: name a separate read-only tool that describes the write without doing it"),
        );
        return None;
    }
    Some(p)
}

fn protocol(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<UpstreamProtocol> {
    match c.raw_str(key, node)? {
        "2025-11-25" => Some(UpstreamProtocol::V2025_11_25),
        "2026-07-28" => Some(UpstreamProtocol::V2026_07_28),
        "auto" => Some(UpstreamProtocol::Auto),
        other => {
            c.error(
                key,
                format!(
                    "protocol {other:?} is not allowed: use \"2025-11-25\" (the default), \"2026-07-28\" or \"auto\""
                ),
            );
            None
        }
    }
}

fn lands_on(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<LandsOnSetting> {
    match c.raw_str(key, node)? {
        "live" => Some(LandsOnSetting::Live),
        "copy" => Some(LandsOnSetting::Copy),
        other => {
            c.error(
                key,
                format!("lands_on {other:?} is not allowed: use \"live\" or \"copy\""),
            );
            None
        }
    }
}

/// What a JSON pointer points into, which decides whether `""` (the whole
/// document) makes sense.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pointer {
    /// The call's arguments: `""` names them all.
    IntoArguments,
    /// The upstream's `structuredContent`: an id or link is one value in it.
    IntoResult,
}

fn pointer(c: &mut Checker<'_>, key: &str, node: &toml::Value, into: Pointer) -> Option<String> {
    let p = c.raw_str(key, node)?;
    if p.is_empty() && into == Pointer::IntoResult {
        c.error(
            key,
            "must not be empty: point at one value of the upstream's structuredContent, like \"/id\"",
        );
        return None;
    }
    if let Some(problem) = pointer_problem(p) {
        c.error(key, problem);
        return None;
    }
    Some(p.to_owned())
}
