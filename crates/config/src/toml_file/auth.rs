//! `[auth]` and `[auth.oauth]` of a `plangate.toml`: plangate as an OAuth
//! protected resource — its resource URL, the issuers it trusts, how
//! token scopes map to plangate's, and token introspection.

use std::collections::BTreeMap;
use std::time::Duration;

use super::values::duration_in;
use crate::check::{Checker, child, index};
use crate::model::Auth;

const AUTH_KEYS: [&str; 1] = ["oauth"];
const OAUTH_KEYS: [&str; 6] = [
    "resource",
    "issuers",
    "identity_claim",
    "scopes",
    "clock_skew",
    "introspection",
];
const INTROSPECTION_KEYS: [&str; 4] = ["issuer", "client_id", "client_secret", "every"];

/// `[auth]`.
pub(super) fn auth(c: &mut Checker<'_>, node: &toml::Value) -> Option<Auth> {
    let entries = c.table("auth", node, "a table")?;
    c.unknown_keys("auth", &entries, &AUTH_KEYS);
    let mut auth = Auth::default();
    for (k, v) in entries {
        if k == "oauth" {
            auth.oauth = Some(oauth(c, v)?);
        }
    }
    Some(auth)
}

/// `[auth.oauth]`: every field checked, so a token can never be judged
/// against a resource or issuer that is not what the operator meant.
fn oauth(c: &mut Checker<'_>, node: &toml::Value) -> Option<crate::model::OAuth> {
    let entries = c.table("auth.oauth", node, "a table")?;
    c.unknown_keys("auth.oauth", &entries, &OAUTH_KEYS);
    let get = |k: &str| entries.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let mut ok = true;
    let resource = match get("resource") {
        Some(v) => oauth_url(c, "auth.oauth.resource", v, "resource"),
        None => {
            c.error(
                "auth.oauth.resource",
                "missing: the URL clients reach this server at, e.g. resource = \"https://plangate.example.com/mcp\" (every token must be issued for it)",
            );
            None
        }
    };
    let issuers = match get("issuers") {
        Some(v) => match c.string_list("auth.oauth.issuers", v) {
            Some(list) if list.is_empty() => {
                c.error(
                    "auth.oauth.issuers",
                    "empty: name at least one authorization server, e.g. issuers = [\"https://id.example.com\"]",
                );
                None
            }
            Some(list) => {
                let mut checked = Vec::new();
                for (i, issuer) in list.iter().enumerate() {
                    let key = index("auth.oauth.issuers", i);
                    match oauth_url(c, &key, &toml::Value::String(issuer.clone()), "issuer") {
                        Some(u) => checked.push(u),
                        None => ok = false,
                    }
                }
                Some(checked)
            }
            None => None,
        },
        None => {
            c.error(
                "auth.oauth.issuers",
                "missing: the authorization servers whose tokens are accepted, e.g. issuers = [\"https://id.example.com\"]",
            );
            None
        }
    };
    let identity_claim = match get("identity_claim") {
        Some(v) => c.non_empty_string("auth.oauth.identity_claim", v),
        None => Some(crate::model::DEFAULT_IDENTITY_CLAIM.to_owned()),
    };
    let scopes = match get("scopes") {
        Some(v) => oauth_scopes(c, v),
        None => {
            c.error(
                "auth.oauth.scopes",
                "missing: map token scopes to plangate scopes, e.g. [auth.oauth.scopes] \"mcp:plan\" = \"plan\" (a token with none of them is refused)",
            );
            None
        }
    };
    let clock_skew = match get("clock_skew") {
        Some(v) => c
            .integer_in("auth.oauth.clock_skew", v, "clock_skew (seconds)", 0..=300)
            .and_then(|n| u64::try_from(n).ok())
            .map(Duration::from_secs),
        None => Some(crate::model::DEFAULT_CLOCK_SKEW),
    };
    let introspection = match (get("introspection"), &issuers) {
        (Some(v), Some(issuers)) => introspection(c, v, issuers).map(Some),
        (Some(_), None) => None,
        (None, _) => Some(None),
    };
    let (resource, issuers, identity_claim, scopes, clock_skew, introspection) = (
        resource?,
        issuers?,
        identity_claim?,
        scopes?,
        clock_skew?,
        introspection?,
    );
    ok.then_some(crate::model::OAuth {
        resource,
        issuers,
        identity_claim,
        scopes,
        clock_skew,
        introspection,
    })
}

/// `[auth.oauth.introspection]`: plangate's client at one of `issuers`.
fn introspection(
    c: &mut Checker<'_>,
    node: &toml::Value,
    issuers: &[String],
) -> Option<crate::model::Introspection> {
    const KEY: &str = "auth.oauth.introspection";
    let entries = c.table(KEY, node, "a table")?;
    c.unknown_keys(KEY, &entries, &INTROSPECTION_KEYS);
    let get = |k: &str| entries.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let issuer = match get("issuer") {
        Some(v) => c
            .non_empty_string(&child(KEY, "issuer"), v)
            .and_then(|issuer| {
                if issuers.contains(&issuer) {
                    Some(issuer)
                } else {
                    c.error(
                        &child(KEY, "issuer"),
                        format!(
                            "{issuer:?} is not one of auth.oauth.issuers ({})",
                            issuers.join(", ")
                        ),
                    );
                    None
                }
            }),
        None if issuers.len() == 1 => issuers.first().cloned(),
        None => {
            c.error(
                &child(KEY, "issuer"),
                format!("missing: with several issuers, name the one whose introspection endpoint plangate asks, e.g. issuer = {:?}", issuers.first().map(String::as_str).unwrap_or_default()),
            );
            None
        }
    };
    let mut required = |name: &str, what: &str| match get(name) {
        Some(v) => c.non_empty_string(&child(KEY, name), v),
        None => {
            c.error(
                &child(KEY, name),
                format!(
                    "missing: {what} (introspection needs a client of the authorization server)"
                ),
            );
            None
        }
    };
    let client_id = required(
        "client_id",
        "plangate's client id at the authorization server",
    );
    let client_secret = required(
        "client_secret",
        "that client's secret, e.g. client_secret = \"${PLANGATE_INTROSPECTION_SECRET}\"",
    );
    let every = match get("every") {
        Some(v) => duration_in(
            c,
            &child(KEY, "every"),
            v,
            "every",
            Duration::from_secs(3600),
        ),
        None => Some(crate::model::DEFAULT_INTROSPECTION_EVERY),
    };
    Some(crate::model::Introspection {
        issuer: issuer?,
        client_id: client_id?,
        client_secret: client_secret?,
        every: every?,
    })
}

/// `[auth.oauth.scopes]`: token scope → `read`, `plan` or `write`.
fn oauth_scopes(
    c: &mut Checker<'_>,
    node: &toml::Value,
) -> Option<BTreeMap<String, plangate_core::Scope>> {
    let entries = c.table(
        "auth.oauth.scopes",
        node,
        "a table of token scope = \"read\" | \"plan\" | \"write\"",
    )?;
    if entries.is_empty() {
        c.error(
            "auth.oauth.scopes",
            "empty: map at least one token scope, e.g. \"mcp:plan\" = \"plan\"",
        );
        return None;
    }
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (token_scope, v) in entries {
        let key = child("auth.oauth.scopes", token_scope);
        if token_scope.is_empty() || token_scope.contains(char::is_whitespace) {
            c.error(
                &key,
                "a token scope is one word without spaces (RFC 6749 §3.3)",
            );
            ok = false;
            continue;
        }
        let Some(text) = c.string(&key, v) else {
            ok = false;
            continue;
        };
        match text.parse::<plangate_core::Scope>() {
            Ok(scope) => {
                out.insert(token_scope.to_owned(), scope);
            }
            Err(e) => {
                c.error(&key, e.to_string());
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// A URL of `[auth.oauth]`: `https://`, or `http://` on a loopback host
/// only (a token or key set fetched in the clear could be swapped on the
/// way); no query or fragment.
fn oauth_url(c: &mut Checker<'_>, key: &str, node: &toml::Value, what: &str) -> Option<String> {
    let url = c.url(key, node)?;
    let lower = url.to_ascii_lowercase();
    if url.contains(['?', '#']) {
        c.error(
            key,
            format!("{what} {url:?} must not have a query or fragment"),
        );
        return None;
    }
    if let Some(rest) = lower.strip_prefix("http://") {
        let authority = rest.split('/').next().unwrap_or_default();
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            c.error(
                key,
                format!("{what} {url:?} uses http:// on a host that is not loopback: use https:// (http:// is allowed for 127.0.0.1, ::1 and localhost only)"),
            );
            return None;
        }
    }
    Some(url)
}
