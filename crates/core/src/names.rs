//! How upstream tool, prompt and resource names are exposed to clients
//! (docs/design.md §1).
//!
//! # The rule
//!
//! * **Upstream names** are 1–24 characters of `A-Z a-z 0-9 - _`, start with
//!   a letter or digit, end with a letter, digit or `-`, and never contain
//!   `__`. So the first `__` in an exposed name always ends the upstream name.
//! * **Tools and prompts**: with namespacing on (several upstreams, or forced
//!   by config) a name is exposed as `NAME__tool`; with one upstream it is
//!   exposed as `tool`. If the result would not be a valid MCP name
//!   (`A-Z a-z 0-9 _ - .`, 1–64 characters), the tool part is rewritten:
//!   every other character becomes `_`, it is cut to fit, and `_` plus the
//!   first 8 hex digits of the SHA-256 of the original name is appended. Two
//!   names that still collide (vanishingly rare) are told apart by hashing
//!   the original name with a counter (`#1`, `#2`, …) in a fixed order, so
//!   exposed names are unique and stable.
//! * **Resource URIs** (and URI templates, and any `_meta.ui.resourceUri`):
//!   with namespacing on, `NAME__` is inserted right after the scheme's `:`
//!   and any `//` — `ui://widget/a.html` becomes `ui://site__widget/a.html`,
//!   `file:///tmp/x` becomes `file://site__/tmp/x`, `urn:x` becomes
//!   `urn:site__x`. The scheme is kept, so `ui://` resources stay MCP Apps
//!   resources, and the rule is exactly reversible. With one upstream URIs
//!   pass unchanged.
//!
//! 64 rather than the spec's 128 characters because widely used clients
//! reject longer tool names.

use sha2::{Digest, Sha256};

/// The longest exposed tool or prompt name.
pub const MAX_EXPOSED_NAME_LEN: usize = 64;
/// Separates the upstream name from the tool or prompt name.
pub const NAMESPACE_SEPARATOR: &str = "__";
const MAX_UPSTREAM_NAME_LEN: usize = 24;
const HASH_SUFFIX_LEN: usize = 1 + 8;

/// Why an upstream name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("upstream name is empty")]
    Empty,
    /// The name is longer than the namespacing rule allows.
    #[error("upstream name {0:?} is longer than {MAX_UPSTREAM_NAME_LEN} characters")]
    TooLong(String),
    /// The name breaks the character rule.
    #[error(
        "upstream name {0:?} is not allowed: use letters, digits, '-' and '_', start with a letter or digit, end with a letter, digit or '-', and never '__'"
    )]
    Invalid(String),
}

/// Checks an upstream name against the rule in the module docs.
pub fn validate_upstream_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_UPSTREAM_NAME_LEN {
        return Err(NameError::TooLong(name.to_owned()));
    }
    let chars_ok = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let last_ok = name.chars().last().is_some_and(|c| c != '_');
    if !chars_ok || !first_ok || !last_ok || name.contains(NAMESPACE_SEPARATOR) {
        return Err(NameError::Invalid(name.to_owned()));
    }
    Ok(())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'
}

fn hash8(input: &str) -> String {
    let digest = Sha256::digest(input.as_bytes());
    hex::encode(&digest[..4])
}

/// The exposed name of one upstream tool or prompt, before collisions are
/// resolved. `upstream` is `Some` when namespacing is on.
pub fn expose_name(upstream: Option<&str>, name: &str) -> String {
    expose_name_with_salt(upstream, name, 0)
}

fn expose_name_with_salt(upstream: Option<&str>, name: &str, salt: u32) -> String {
    let prefix = match upstream {
        Some(up) => format!("{up}{NAMESPACE_SEPARATOR}"),
        None => String::new(),
    };
    let fits = !name.is_empty()
        && name.chars().all(is_name_char)
        && prefix.len() + name.len() <= MAX_EXPOSED_NAME_LEN;
    if fits && salt == 0 {
        return format!("{prefix}{name}");
    }
    let budget = MAX_EXPOSED_NAME_LEN - prefix.len() - HASH_SUFFIX_LEN;
    let base: String = name
        .chars()
        .map(|c| if is_name_char(c) { c } else { '_' })
        .take(budget)
        .collect();
    let hashed = if salt == 0 {
        hash8(name)
    } else {
        hash8(&format!("{name}#{salt}"))
    };
    format!("{prefix}{base}_{hashed}")
}

/// Exposed names for a list of upstream names (tools or prompts) of one
/// upstream, unique among themselves and against `taken`.
///
/// Names that need no rewriting keep priority; a rewritten name that lands on
/// a taken one is re-hashed with a counter. The result is in input order and
/// depends only on the inputs, so it is stable across restarts. Every name
/// assigned is added to `taken`.
pub fn assign_names(
    upstream: Option<&str>,
    names: &[&str],
    taken: &mut std::collections::BTreeSet<String>,
) -> Vec<String> {
    let mut out = vec![String::new(); names.len()];
    // First pass: names that are exposed as they are.
    let mut pending = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let exposed = expose_name(upstream, name);
        let natural = match upstream {
            Some(up) => exposed == format!("{up}{NAMESPACE_SEPARATOR}{name}"),
            None => exposed == *name,
        };
        if natural && taken.insert(exposed.clone()) {
            out[i] = exposed;
        } else {
            pending.push(i);
        }
    }
    // Second pass: rewritten names, re-hashed until unique.
    for i in pending {
        let mut salt = 0;
        loop {
            let candidate = expose_name_with_salt(upstream, names[i], salt);
            if taken.insert(candidate.clone()) {
                out[i] = candidate;
                break;
            }
            salt += 1;
        }
    }
    out
}

/// What a name reads as to a person: lowercased, with characters that look
/// alike in common fonts folded together (`1 I i | → l`, `0 → o`,
/// `rn → m`, `vv → w`, `- . → _`). Two names with one skeleton can be told
/// apart only by looking closely.
fn skeleton(name: &str) -> String {
    let folded: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            '1' | 'i' | '|' => 'l',
            '0' => 'o',
            '-' | '.' => '_',
            other => other,
        })
        .collect();
    folded.replace("rn", "m").replace("vv", "w")
}

/// Whether an exposed upstream tool name could pass for one of the
/// gateway's own tools: it starts with the gateway's tool `prefix` once
/// both are read as a person reads them (case and look-alike characters
/// folded: `1 I i | → l`, `0 → o`, `rn → m`, `vv → w`, `- . → _`), e.g.
/// `plangate_apply_pIan` or `pIangate_get_plan`. Such a tool is never
/// offered: an agent (or a person reading its transcript) would take it
/// for plangate's.
pub fn imitates_gateway_tool(exposed: &str, prefix: &str) -> bool {
    skeleton(exposed).starts_with(&skeleton(prefix))
}

/// Splits an exposed namespaced name at the first `__` into upstream name and
/// the rest. Returns `None` for names without the separator.
pub fn split_exposed_name(exposed: &str) -> Option<(&str, &str)> {
    exposed.split_once(NAMESPACE_SEPARATOR)
}

/// Where the name part of a URI starts: after `scheme:` and any `//`.
/// URIs without a valid scheme are namespaced at their very start.
fn uri_insert_point(uri: &str) -> usize {
    let Some(colon) = uri.find(':') else {
        return 0;
    };
    let scheme = &uri[..colon];
    let valid_scheme = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.');
    if !valid_scheme {
        return 0;
    }
    let after = colon + 1;
    if uri[after..].starts_with("//") {
        after + 2
    } else {
        after
    }
}

/// The exposed form of an upstream resource URI (or URI template).
/// `upstream` is `Some` when namespacing is on.
pub fn expose_uri(upstream: Option<&str>, uri: &str) -> String {
    match upstream {
        None => uri.to_owned(),
        Some(up) => {
            let at = uri_insert_point(uri);
            format!("{}{up}{NAMESPACE_SEPARATOR}{}", &uri[..at], &uri[at..])
        }
    }
}

/// Reverses [`expose_uri`] for a namespaced URI: the upstream name and the
/// upstream's own URI. `None` if the URI carries no valid upstream name.
pub fn split_exposed_uri(exposed: &str) -> Option<(&str, String)> {
    let at = uri_insert_point(exposed);
    let rest = &exposed[at..];
    let (up, tail) = rest.split_once(NAMESPACE_SEPARATOR)?;
    validate_upstream_name(up).ok()?;
    Some((up, format!("{}{}", &exposed[..at], tail)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn valid(name: &str) -> bool {
        !name.is_empty() && name.len() <= MAX_EXPOSED_NAME_LEN && name.chars().all(is_name_char)
    }

    #[test]
    fn several_upstreams_prefix_tools_with_the_upstream_name() {
        assert_eq!(
            expose_name(Some("site"), "update_page"),
            "site__update_page"
        );
        assert_eq!(expose_name(None, "update_page"), "update_page");
        assert_eq!(
            split_exposed_name("site__update_page"),
            Some(("site", "update_page"))
        );
    }

    #[test]
    fn invalid_or_long_names_are_rewritten_into_valid_ones() {
        let spaced = expose_name(Some("fs"), "read file");
        assert!(valid(&spaced), "{spaced}");
        assert!(spaced.starts_with("fs__read_file_"));
        let long = "x".repeat(100);
        let exposed = expose_name(Some("github-enterprise"), &long);
        assert!(valid(&exposed), "{exposed}");
        assert_eq!(exposed.len(), MAX_EXPOSED_NAME_LEN);
        assert!(valid(&expose_name(None, "")));
    }

    #[test]
    fn assigned_names_never_collide() {
        // "a b" rewrites to "a_b_<hash>"; a natural tool of exactly that name
        // must keep it and the rewritten one must move.
        let rewritten = expose_name(None, "a b");
        let names = ["a b", rewritten.as_str(), "a_b", "a?b"];
        let mut taken = BTreeSet::new();
        let out = assign_names(None, &names, &mut taken);
        let unique: BTreeSet<_> = out.iter().collect();
        assert_eq!(unique.len(), names.len(), "{out:?}");
        assert_eq!(out[1], rewritten);
        assert_eq!(out[2], "a_b");
        assert!(out.iter().all(|n| valid(n)));
    }

    #[test]
    fn assigned_names_respect_names_already_taken() {
        let mut taken = BTreeSet::from(["plangate_get_plan".to_owned()]);
        let out = assign_names(None, &["plangate_get_plan"], &mut taken);
        assert_ne!(out[0], "plangate_get_plan");
    }

    #[test]
    fn upstream_names_follow_the_rule() {
        for ok in ["site", "fs-2", "my_server", "a", "x-"] {
            assert_eq!(validate_upstream_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a__b", "_a", "a_", "with space", "ünï", &"x".repeat(25)] {
            assert!(validate_upstream_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn uris_keep_their_scheme_and_round_trip() {
        let cases = [
            ("ui://widget/a.html", "ui://site__widget/a.html"),
            ("file:///tmp/x", "file://site__/tmp/x"),
            ("urn:x:y", "urn:site__x:y"),
            ("no scheme", "site__no scheme"),
            ("memo://{id}", "memo://site__{id}"),
        ];
        for (orig, exposed) in cases {
            assert_eq!(expose_uri(Some("site"), orig), exposed);
            assert_eq!(
                split_exposed_uri(exposed),
                Some(("site", orig.to_owned())),
                "{exposed}"
            );
        }
        assert_eq!(expose_uri(None, "file:///x"), "file:///x");
        assert_eq!(split_exposed_uri("file:///x"), None);
    }

    #[test]
    fn look_alikes_of_the_gateway_prefix_are_caught() {
        for name in [
            "plangate_apply_plan",
            "plangate_apply_pIan",
            "pIangate_get_plan",
            "PLANGATE_anything",
            "p1angate-discard",
            "plangate.x",
        ] {
            assert!(imitates_gateway_tool(name, "plangate_"), "{name}");
        }
        for name in ["site__plangate_apply_plan", "plan", "get_plan", "planet_x"] {
            assert!(!imitates_gateway_tool(name, "plangate_"), "{name}");
        }
        assert!(imitates_gateway_tool("gw_apply", "gw_"));
    }
}

/// `name` as one word of a shell command in a hint (`plangate plans show
/// --key NAME`): as it is when every character is plain, else in single
/// quotes. An OAuth identity's name (`https://id.example.com#alice`)
/// holds a `#`, which some shells read as a comment or a glob.
pub fn shell_word(name: &str) -> std::borrow::Cow<'_, str> {
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@+=,".contains(&b));
    if plain {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(format!("'{}'", name.replace('\'', r"'\''")))
    }
}

#[cfg(test)]
mod shell_word_tests {
    use super::shell_word;

    #[test]
    fn plain_names_stay_and_others_are_quoted_for_any_shell() {
        assert_eq!(shell_word("agent-1"), "agent-1");
        assert_eq!(shell_word("key_0123abcd"), "key_0123abcd");
        assert_eq!(
            shell_word("https://id.example.com#alice"),
            "'https://id.example.com#alice'"
        );
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
