//! How an upstream behind OAuth refused a request at its door (a `Bearer`
//! challenge read as written), and what a person reads about it. Apart
//! because it is pure text work, read by every path that calls upstreams.

/// How an upstream behind OAuth refused a request at its door (HTTP 401 or
/// 403 before its MCP server read the request), or how plangate could not
/// present a token at all: the request did not run, and what helps is a
/// person's new sign-in, not a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoorRefusal {
    /// 403 `insufficient_scope`: plangate's grant lacks `scopes` (the ones
    /// the upstream's challenge named; empty when it named none).
    Scope {
        /// The scopes the upstream asked for, each a valid scope token.
        scopes: Vec<String>,
    },
    /// 401, or no token could be had (a refused refresh): the grant was
    /// revoked or expired, or the upstream now trusts another
    /// authorization server.
    Token {
        /// The upstream's `error_description`, cut short and printable.
        description: Option<String>,
    },
}

/// Whether `error` (a request to an upstream that failed) is the upstream
/// refusing plangate's OAuth sign-in; `None` for every other failure.
pub fn door_refusal(error: &rmcp::service::ServiceError) -> Option<DoorRefusal> {
    refusal_of(error.auth_challenge(), error.is_authorization_required())
}

/// [`door_refusal`] for a handshake that failed.
pub fn door_refusal_at_start(error: &rmcp::service::ClientInitializeError) -> Option<DoorRefusal> {
    refusal_of(error.auth_challenge(), error.is_authorization_required())
}

fn refusal_of(challenge: Option<&str>, authorization_required: bool) -> Option<DoorRefusal> {
    if let Some(header) = challenge {
        let params = challenge_params(header);
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        if param("error") == Some("insufficient_scope") {
            return Some(DoorRefusal::Scope {
                scopes: scope_tokens(param("scope").unwrap_or("")),
            });
        }
        return Some(DoorRefusal::Token {
            description: param("error_description").map(printable),
        });
    }
    authorization_required.then_some(DoorRefusal::Token { description: None })
}

/// The auth-params of a `Bearer` challenge (RFC 9110 §11.2: `name=token`
/// or `name="quoted string"`, comma-separated), as written; a malformed
/// rest is ignored.
fn challenge_params(header: &str) -> Vec<(String, String)> {
    let rest = header.trim_start();
    let rest = match rest.split_once(char::is_whitespace) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest,
        _ => return Vec::new(),
    };
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let name: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',' && !c.is_whitespace()))
                .collect();
        if name.is_empty() {
            return params;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        } else {
            value.extend(std::iter::from_fn(|| {
                chars.next_if(|c| *c != ',' && !c.is_whitespace())
            }));
        }
        params.push((name, value));
    }
}

/// The scope tokens of a space-separated list (RFC 6749 §3.3: printable
/// ASCII without space, `"` or `\`); anything else an upstream sends is
/// dropped, so a scope is safe to print and to put on a command line.
pub fn scope_tokens(list: &str) -> Vec<String> {
    let mut seen = Vec::<String>::new();
    for token in list.split_ascii_whitespace() {
        let valid = token.len() <= 200
            && token
                .bytes()
                .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E));
        if valid && !seen.iter().any(|s| s == token) {
            seen.push(token.to_owned());
        }
    }
    seen
}

/// An upstream's text made safe to repeat: printable, at most 200 chars.
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

impl DoorRefusal {
    /// Why upstream `name` could not be connected: its door refused even
    /// a fresh token, so only a person's new sign-in helps. `signs_in`:
    /// whether plangate signs in to it with OAuth (`[upstreams.NAME.oauth]`);
    /// otherwise what it refused are the configured headers.
    pub fn at_start(&self, name: &str, signs_in: bool) -> String {
        let login = format!(
            "plangate upstream login {}",
            plangate_core::shell_word(name)
        );
        match self {
            _ if !signs_in => format!(
                "it refused the credentials plangate sends ({}): check the headers of [upstreams.{name}] (an expired token, say), or, if it signs in with OAuth, add an [upstreams.{name}.oauth] table and run `{login}`",
                self.status()
            ),
            DoorRefusal::Scope { scopes } if scopes.is_empty() => format!(
                "its OAuth sign-in lacks a scope it needs (403 insufficient_scope, naming none): a person runs `{login} --scope SCOPE` with the scope the upstream documents"
            ),
            DoorRefusal::Scope { scopes } => format!(
                "its OAuth sign-in lacks the scope {} (403 insufficient_scope): a person runs `{login} --scope {}`",
                scopes.join(" "),
                plangate_core::shell_word(&scopes.join(" "))
            ),
            DoorRefusal::Token { description } => format!(
                "it refused plangate's OAuth token{} and no fresh token could be had (the sign-in was revoked or expired, or the upstream moved to another authorization server): a person runs `{login}`",
                description
                    .as_deref()
                    .map(|d| format!(" (401: {d})"))
                    .unwrap_or_default()
            ),
        }
    }

    /// The HTTP status and what the upstream said, for a message.
    fn status(&self) -> String {
        match self {
            DoorRefusal::Scope { .. } => "403 insufficient_scope".to_owned(),
            DoorRefusal::Token {
                description: Some(d),
            } => format!("401: {d}"),
            DoorRefusal::Token { description: None } => "401".to_owned(),
        }
    }

    /// What a person reads: what happened at upstream `name`, that nothing
    /// ran, and the command that helps. `signs_in` as for [`Self::at_start`];
    /// `None` when the caller cannot tell (both ways are then said).
    pub fn explain(&self, name: &str, signs_in: Option<bool>) -> String {
        let login = format!(
            "plangate upstream login {}",
            plangate_core::shell_word(name)
        );
        match (self, signs_in) {
            (_, Some(false)) => format!(
                "upstream {name} refused the credentials plangate sends before running the request ({}): check the headers of [upstreams.{name}] (an expired token, say), then call again",
                self.status()
            ),
            (_, None) => format!(
                "upstream {name} refused plangate's credentials before running the request ({}): if it signs in with OAuth ([upstreams.{name}.oauth]) a person runs `{login}{}`; otherwise check the headers of [upstreams.{name}]; then call again",
                self.status(),
                match self {
                    DoorRefusal::Scope { scopes } if !scopes.is_empty() =>
                        format!(" --scope {}", plangate_core::shell_word(&scopes.join(" "))),
                    _ => String::new(),
                }
            ),
            (DoorRefusal::Scope { scopes }, _) if scopes.is_empty() => format!(
                "upstream {name} refused the request before running it: plangate's OAuth sign-in lacks a scope it needs (403 insufficient_scope, naming none). A person signs plangate in again with the scope the upstream documents — `{login} --scope SCOPE` — then call again"
            ),
            (DoorRefusal::Scope { scopes }, _) => {
                let list = scopes.join(" ");
                format!(
                    "upstream {name} refused the request before running it: plangate's OAuth sign-in lacks the scope {list} (403 insufficient_scope). A person signs plangate in again, keeping the scopes granted so far and adding this one — `{login} --scope {}` — then call again",
                    plangate_core::shell_word(&list)
                )
            }
            (DoorRefusal::Token { description }, _) => format!(
                "upstream {name} refused plangate's OAuth token before running the request (401{}): plangate reconnects with a fresh token; if its sign-in no longer works (revoked, expired, or the upstream moved to another authorization server) a person runs `{login}`, then call again",
                description
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_challenge_is_read_as_written_and_only_scope_tokens_are_kept() {
        let params = challenge_params(
            r#"Bearer error="insufficient_scope", scope="mcp:basic  mcp:write", resource_metadata="http://x/.well-known/oauth-protected-resource/mcp",error_description="need \"write\"""#,
        );
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("error"), Some("insufficient_scope"));
        assert_eq!(get("scope"), Some("mcp:basic  mcp:write"));
        assert_eq!(get("error_description"), Some(r#"need "write""#));
        assert_eq!(
            challenge_params("Bearer realm=x, error=invalid_token")[1].1,
            "invalid_token"
        );
        assert!(challenge_params("Basic realm=\"x\"").is_empty());
        assert!(challenge_params("Bearer").is_empty());
        assert!(challenge_params("Bearer ,,,= \"").is_empty());
        assert_eq!(challenge_params("Bearer scope=\"unterminated").len(), 1);
        assert_eq!(
            scope_tokens("mcp:write mcp:write a\"b $(rm) `x`\u{7f} files:read"),
            // Valid scope tokens, however odd (quoted for a shell when
            // shown); a control character or a quote drops the token.
            ["mcp:write", "$(rm)", "files:read"]
        );
    }

    /// What a person reads names the command that helps, with the scopes
    /// quoted for a shell.
    #[test]
    fn a_refusal_names_the_sign_in_that_helps() {
        let scope = DoorRefusal::Scope {
            scopes: vec!["mcp:write".into(), "files:read".into()],
        };
        assert!(
            scope
                .explain("gh", Some(true))
                .contains("`plangate upstream login gh --scope 'mcp:write files:read'`"),
            "{}",
            scope.explain("gh", Some(true))
        );
        let token = DoorRefusal::Token {
            description: Some("authorization server has changed".into()),
        };
        assert!(
            token
                .explain("gh", Some(true))
                .contains("(401: authorization server has changed)")
        );
        assert!(
            token
                .at_start("gh", true)
                .contains("`plangate upstream login gh`")
        );
        // An upstream reached with static headers: check them, no login.
        let headers = token.explain("gh", Some(false));
        assert!(
            headers.contains("check the headers of [upstreams.gh]"),
            "{headers}"
        );
        assert!(!headers.contains("upstream login"), "{headers}");
        assert!(
            token
                .at_start("gh", false)
                .contains("check the headers of [upstreams.gh]")
        );
        // Not known: both ways, the login with the scope it asked for.
        let both = scope.explain("gh", None);
        assert!(
            both.contains("`plangate upstream login gh --scope 'mcp:write files:read'`"),
            "{both}"
        );
        assert!(both.contains("otherwise check the headers"), "{both}");
    }
}
