//! Secret redaction (docs/design.md §5): a secret shows as `"[redacted]"` in every
//! answer, log line, view and export, at any depth.
//!
//! A value is a secret when its object key **names** one (`password`,
//! `api_key`, `auth`, … — [`Redactor::is_secret_key`]) or when it **looks
//! like** one: a string holding a well-known credential shape (`sk-…`,
//! `ghp_…`, `AKIA…`, `xoxb-…`, a JWT, a PEM private key), matched inside
//! longer text too ("deploy with ghp_… from CI"). Operators add names and
//! patterns in config (`[redaction]`); a [`Redactor`] holds the rules, and
//! the free functions here use the built-in ones ([`Redactor::builtin`]).
//!
//! The same rules decide what is shown, what is sealed and what is keyed
//! into digests ([`Redactor::split`], [`Redactor::keyed`]), so a value
//! hidden from a person is always one that is sealed at rest and delivered
//! byte-exact when the call runs.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

mod text;

use text::{push_quoted_marker, skip_ws, value_end};

use crate::canonical::{canonical_lossless, push_pointer_token};
use crate::hash::HMAC_PREFIX;
use crate::hash::hmac_hex;
use crate::{CanonicalError, check_safe_integers};

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Words that make a key a secret wherever they appear in it (case and
/// `-`/`_` folded): `db_password`, `X-Api-Key`, `refreshToken`.
const SECRET_WORDS: [&str; 13] = [
    "api_key",
    "apikey",
    "token",
    "password",
    "passwd",
    "secret",
    "cookie",
    "authorization",
    "credential",
    "private_key",
    "privatekey",
    "passphrase",
    "session_id",
];

/// Short words that make a key a secret only as a whole word of it
/// (`pass`, `x-auth`, `otpCode`), so `author`, `compass` or `hotpath` stay
/// shown.
const SECRET_TOKENS: [&str; 6] = ["pass", "pwd", "auth", "bearer", "otp", "sessionid"];

/// Credential shapes found inside any string, whatever its key: OpenAI /
/// Anthropic (`sk-`), Stripe (`sk_live_`, `rk_test_`), GitHub (`ghp_`,
/// `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`), GitLab (`glpat-`), AWS
/// access key ids (`AKIA`, `ASIA`), Slack (`xoxb-` …), Google API keys
/// (`AIza`), JWTs, and PEM private keys (to their END line, or to the end
/// of the text when cut short).
const BUILTIN_PATTERNS: [&str; 10] = [
    r"\bsk-[A-Za-z0-9][A-Za-z0-9_-]{19,}",
    r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    r"\bAIza[0-9A-Za-z_-]{35}\b",
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
];

/// Why configured redaction rules cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactionError {
    /// A configured name is empty or not a plain word.
    #[error("redaction name {0:?} is not usable: use letters, digits, '_' or '-'")]
    BadName(String),
    /// A configured pattern is not a valid regular expression.
    #[error("redaction pattern {pattern:?} is not a valid regular expression: {reason}")]
    BadPattern {
        /// The pattern as configured.
        pattern: String,
        /// What the regex compiler said.
        reason: String,
    },
}

/// The rules that decide what is a secret: the built-in names and shapes,
/// plus an operator's own.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// Extra names, folded like [`SECRET_WORDS`] and matched the same way.
    names: Vec<String>,
    /// Every credential shape, built in and configured, as one expression.
    patterns: Regex,
}

/// `-` and `_` alike, lowercase.
fn fold(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// The words of a key: split at anything not a letter or digit and where
/// a lowercase letter meets an uppercase one (`sessionId` → session, id).
fn words(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if !c.is_ascii_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        word.push(c.to_ascii_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

impl Redactor {
    /// The built-in rules, compiled once.
    pub fn builtin() -> &'static Redactor {
        static BUILTIN: OnceLock<Redactor> = OnceLock::new();
        BUILTIN.get_or_init(|| match Redactor::new(&[], &[]) {
            Ok(r) => r,
            // The built-in patterns are constants compiled by the tests.
            Err(e) => unreachable!("built-in redaction patterns: {e}"),
        })
    }

    /// The built-in rules plus `names` (matched like the built-in secret
    /// words) and `patterns` (regular expressions, matched inside strings).
    pub fn new(names: &[String], patterns: &[String]) -> Result<Redactor, RedactionError> {
        for n in names {
            if n.is_empty()
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(RedactionError::BadName(n.clone()));
            }
        }
        for p in patterns {
            Regex::new(p).map_err(|e| RedactionError::BadPattern {
                pattern: p.clone(),
                reason: e.to_string(),
            })?;
        }
        let all: Vec<String> = BUILTIN_PATTERNS
            .iter()
            .map(|p| (*p).to_owned())
            .chain(patterns.iter().cloned())
            .map(|p| format!("(?:{p})"))
            .collect();
        let patterns = Regex::new(&all.join("|")).map_err(|e| RedactionError::BadPattern {
            pattern: patterns.join(" | "),
            reason: e.to_string(),
        })?;
        Ok(Redactor {
            names: names.iter().map(|n| fold(n)).collect(),
            patterns,
        })
    }

    /// Whether an object key names a secret: it contains one of the secret
    /// words (`api_key`, `apikey`, `token`, `password`, `passwd`, `secret`,
    /// `cookie`, `authorization`, `credential`, `private_key`, `passphrase`,
    /// `session_id`, or a configured name), `-` and `_` alike and in any
    /// case, or has one of the short secret words (`pass`, `pwd`, `auth`,
    /// `bearer`, `otp`) as a whole word.
    pub fn is_secret_key(&self, key: &str) -> bool {
        let folded = fold(key);
        if SECRET_WORDS.iter().any(|w| folded.contains(w))
            || self.names.iter().any(|w| folded.contains(w.as_str()))
        {
            return true;
        }
        let words = words(key);
        words.iter().any(|w| SECRET_TOKENS.contains(&w.as_str()))
            || words.windows(2).any(|p| p[0] == "session" && p[1] == "id")
    }

    /// `text` with every credential shape in it replaced by [`REDACTED`];
    /// `None` when it holds none.
    pub fn redact_shapes(&self, text: &str) -> Option<String> {
        self.patterns
            .is_match(text)
            .then(|| self.patterns.replace_all(text, REDACTED).into_owned())
    }

    /// A copy of `value` with the value of every secret key, at any depth,
    /// replaced by [`REDACTED`] — whatever that value's type — and every
    /// credential shape inside its strings too.
    pub fn redact(&self, value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let v = if self.is_secret_key(k) {
                            Value::String(REDACTED.to_owned())
                        } else {
                            self.redact(v)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.redact(i)).collect()),
            Value::String(s) => Value::String(self.redact_shapes(s).unwrap_or_else(|| s.clone())),
            other => other.clone(),
        }
    }

    /// The redacted copy of `args` (exactly [`Redactor::redact`]'s) and
    /// every secret value with its RFC 6901 JSON pointer, depth-first in the
    /// order of the value's maps and arrays — deterministic for a given
    /// value. A secret key's whole value is taken, whatever its type; a
    /// string holding a credential shape is taken whole, so putting it back
    /// ([`crate::restore_secrets`]) gives the string byte for byte.
    pub fn split(&self, args: &Value) -> (Value, Vec<(String, Value)>) {
        let mut secrets = Vec::new();
        let mut path = String::new();
        let redacted = self.split_at(args, &mut path, &mut secrets);
        (redacted, secrets)
    }

    fn split_at(&self, v: &Value, path: &mut String, secrets: &mut Vec<(String, Value)>) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, item)| {
                        let len = path.len();
                        push_pointer_token(path, k);
                        let out = if self.is_secret_key(k) {
                            secrets.push((path.clone(), item.clone()));
                            Value::String(REDACTED.to_owned())
                        } else {
                            self.split_at(item, path, secrets)
                        };
                        path.truncate(len);
                        (k.clone(), out)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let len = path.len();
                        push_pointer_token(path, &i.to_string());
                        let out = self.split_at(item, path, secrets);
                        path.truncate(len);
                        out
                    })
                    .collect(),
            ),
            Value::String(s) => match self.redact_shapes(s) {
                Some(shown) => {
                    secrets.push((path.clone(), v.clone()));
                    Value::String(shown)
                }
                None => v.clone(),
            },
            other => other.clone(),
        }
    }

    /// A copy of `args` in which every secret (as [`Redactor::split`] finds
    /// them) is replaced by `"hmac-sha256:" + hmac_hex(key,
    /// canonical_json(value))`: what digests and fingerprints hash, so a
    /// different secret is a different write and nobody without the key
    /// can test a guess. Fails, naming the path, if `args` holds an integer
    /// beyond ±(2^53−1).
    pub fn keyed(&self, args: &Value, signing_key: &[u8; 32]) -> Result<Value, CanonicalError> {
        check_safe_integers(args)?;
        let (redacted, secrets) = self.split(args);
        Ok(keyed_from_split(redacted, &secrets, signing_key))
    }
}

/// What [`Redactor::keyed`] gives for `args`, from what [`Redactor::split`]
/// already gave for them (`redacted`, `secrets`): a caller that needs both
/// scans the arguments once. The caller has checked `args` for unsafe
/// integers.
pub fn keyed_from_split(
    mut redacted: Value,
    secrets: &[(String, Value)],
    signing_key: &[u8; 32],
) -> Value {
    for (pointer, value) in secrets {
        if let Some(slot) = redacted.pointer_mut(pointer) {
            let text = canonical_lossless(value);
            *slot = Value::String(format!(
                "{HMAC_PREFIX}{}",
                hmac_hex(signing_key, text.as_bytes())
            ));
        }
    }
    redacted
}

impl Redactor {
    /// Text from outside plangate (an upstream's preview sentence, error
    /// message, or a text block of its answer) with every secret it carries
    /// replaced by [`REDACTED`]: by **name** — the value of a secret key
    /// inside JSON found in the text (well-formed, truncated, or itself
    /// quoted inside a JSON string), of a `name=value` or `name: value`
    /// pair, and the password of a URL (`scheme://user:password@host`) —
    /// and by **shape** ([`Redactor::redact_shapes`]).
    ///
    /// It scans the text once (no parse attempt at every brace, so a
    /// hostile text cannot make it quadratic) and errs toward hiding: a
    /// sentence like "token: 5 left" loses its 5.
    pub fn redact_text(&self, text: &str) -> String {
        let by_name = self.redact_text_at(text, 0);
        let by_pair = self.redact_key_pairs(&by_name);
        self.redact_shapes(&by_pair).unwrap_or(by_pair)
    }

    /// Whether a JSON key found in text names a secret: it reads as a name
    /// (no spaces, `=` or `:`; a longer text in quotes is scanned as text)
    /// and is a secret key.
    fn names_secret(&self, key: &str) -> bool {
        key.len() <= 128
            && !key.contains(|c: char| c.is_whitespace() || c == '=' || c == ':')
            && self.is_secret_key(key)
    }

    /// A second look for `"name": value` that does not depend on how the
    /// text's quotes pair up (a stray quote before a JSON object makes the
    /// first scan read the object's key as a string's end): every `":`
    /// ends a key that starts at the quote before it.
    fn redact_key_pairs(&self, text: &str) -> String {
        let b = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut done = 0;
        let mut i = 0;
        // The quote that opened the region scanned so far.
        let mut last_quote: Option<usize> = None;
        while i < b.len() {
            if b[i] != b'"' || (i > 0 && b[i - 1] == b'\\') {
                i += 1;
                continue;
            }
            let after = skip_ws(b, i + 1);
            let closes_key = after < b.len() && b[after] == b':';
            if closes_key
                && let Some(open) = last_quote
                && open >= done
                && self.names_secret(&text[open + 1..i])
            {
                let start = skip_ws(b, after + 1);
                let stop = value_end(b, start);
                let already = text[start..stop] == *format!("\"{REDACTED}\"");
                if stop > start && !already {
                    push_quoted_marker(&mut out, &text[done..start]);
                    done = stop;
                    i = stop;
                    last_quote = None;
                    continue;
                }
            }
            last_quote = Some(i);
            i += 1;
        }
        out.push_str(&text[done..]);
        out
    }

    /// Text an upstream produced, redacted ([`Redactor::redact_text`]) and
    /// with every occurrence of a known secret value replaced by
    /// [`REDACTED`]: an upstream that echoes what it was given — in this
    /// call or an earlier one — must not leak it through plangate.
    pub fn scrub_text(&self, text: &str, secrets: &[(String, Value)]) -> String {
        let mut out = self.redact_text(text);
        for s in secret_texts(secrets) {
            if out.contains(&s) {
                out = out.replace(&s, REDACTED);
            }
        }
        out
    }

    /// A JSON value an upstream produced, redacted by key
    /// ([`Redactor::redact`]) and with every string scrubbed as
    /// [`Redactor::scrub_text`] scrubs text.
    pub fn scrub_value(&self, value: &Value, secrets: &[(String, Value)]) -> Value {
        let texts = secret_texts(secrets);
        self.scrub(&self.redact(value), &texts)
    }

    fn scrub(&self, v: &Value, texts: &[String]) -> Value {
        match v {
            Value::String(s) => {
                let mut out = self.redact_text(s);
                for t in texts {
                    if out.contains(t.as_str()) {
                        out = out.replace(t.as_str(), REDACTED);
                    }
                }
                Value::String(out)
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.scrub(i, texts)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.scrub(v, texts)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// Whether an object key names a secret, by the built-in rules
/// ([`Redactor::is_secret_key`]).
pub fn is_secret_key(key: &str) -> bool {
    Redactor::builtin().is_secret_key(key)
}

/// [`Redactor::redact`] by the built-in rules.
pub fn redact(value: &Value) -> Value {
    Redactor::builtin().redact(value)
}

/// [`Redactor::redact_text`] by the built-in rules.
pub fn redact_text(text: &str) -> String {
    Redactor::builtin().redact_text(text)
}

/// [`Redactor::scrub_text`] by the built-in rules.
pub fn scrub_text(text: &str, secrets: &[(String, Value)]) -> String {
    Redactor::builtin().scrub_text(text, secrets)
}

/// [`Redactor::scrub_value`] by the built-in rules.
pub fn scrub_value(value: &Value, secrets: &[(String, Value)]) -> Value {
    Redactor::builtin().scrub_value(value, secrets)
}

/// How deep [`Redactor::redact_text`] looks into JSON that is itself quoted inside
/// JSON (`"{\"password\":…}"`): deeper encodings are not seen in practice.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_redacted_at_any_depth_and_any_case() {
        let v = json!({
            "id": 42,
            "API_KEY": "k1",
            "nested": [{"Authorization": {"bearer": "x"}}, {"sessionToken": "t"}],
            "db-password": 7,
            "title": "Our story"
        });
        let r = redact(&v);
        assert_eq!(
            r,
            json!({
                "id": 42,
                "API_KEY": "[redacted]",
                "nested": [{"Authorization": "[redacted]"}, {"sessionToken": "[redacted]"}],
                "db-password": "[redacted]",
                "title": "Our story"
            })
        );
        let text = r.to_string();
        for secret in ["k1", "\"x\"", "\"t\"", "7"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
    }
}

/// The literal texts a set of secret values could appear as: every string
/// leaf, and every non-string leaf and subtree as compact JSON. Empty
/// strings are skipped (they cannot be found meaningfully).
fn secret_texts(secrets: &[(String, Value)]) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if !s.is_empty() => out.push(s.clone()),
            Value::String(_) | Value::Null => {}
            Value::Array(items) => {
                out.push(v.to_string());
                items.iter().for_each(|i| walk(i, out));
            }
            Value::Object(map) => {
                out.push(v.to_string());
                map.values().for_each(|i| walk(i, out));
            }
            other => out.push(other.to_string()),
        }
    }
    let mut out = Vec::new();
    for (_, v) in secrets {
        walk(v, &mut out);
    }
    // Longest first, so a secret that contains another is replaced whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

#[cfg(test)]
mod scrub_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn echoed_secrets_are_scrubbed_from_upstream_text_and_values() {
        let secrets = vec![(
            "/value".to_owned(),
            json!({"host": "mail", "password": "hunter2"}),
        )];
        let text = r#"Set option smtp → {"host":"mail","password":"hunter2"}"#;
        let scrubbed = scrub_text(text, &secrets);
        assert!(!scrubbed.contains("hunter2"), "{scrubbed}");
        let v = scrub_value(
            &json!({"new_value": "pw is hunter2", "token": "t"}),
            &secrets,
        );
        assert_eq!(
            v,
            json!({"new_value": "pw is [redacted]", "token": "[redacted]"})
        );
    }
}

#[cfg(test)]
mod rule_tests {
    use serde_json::json;

    use super::*;
    use crate::restore_secrets;

    const GHP: &str = "ghp_R2d2C3poR2d2C3poR2d2C3poR2d2C3po1234";

    /// Asserts `holds` of each of `cases`, naming the case it fails for.
    fn each_holds(cases: &[&str], holds: impl Fn(&str) -> bool) {
        for case in cases {
            assert!(holds(case), "{case}");
        }
    }

    #[test]
    fn the_wider_names_are_secrets_and_their_look_alikes_are_not() {
        let r = Redactor::builtin();
        each_holds(
            &[
                "private_key",
                "privateKey",
                "passphrase",
                "pwd",
                "pass",
                "db_pass",
                "bearer",
                "auth",
                "X-Auth",
                "authHeader",
                "session_id",
                "sessionId",
                "SESSIONID",
                "otp",
                "otpCode",
            ],
            |key| r.is_secret_key(key),
        );
        each_holds(
            &[
                "author",
                "authors",
                "compass",
                "passage",
                "bypass_cache",
                "hotpath",
                "session",
                "title",
                "path",
            ],
            |key| !r.is_secret_key(key),
        );
    }

    #[test]
    fn credential_shapes_are_found_inside_longer_text() {
        let r = Redactor::builtin();
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----";
        for (text, secret) in [
            (format!("deploy with {GHP} from CI"), GHP),
            (
                "key sk-ant-api03-abcdefghijklmnopqrstu ok".to_owned(),
                "sk-ant-api03-abcdefghijklmnopqrstu",
            ),
            (
                "aws AKIAIOSFODNN7EXAMPLE here".to_owned(),
                "AKIAIOSFODNN7EXAMPLE",
            ),
            (
                "slack xoxb-1234567890-abcdefghij".to_owned(),
                "xoxb-1234567890-abcdefghij",
            ),
            (format!("Bearer {jwt}"), jwt),
            (format!("key:\n{pem}\nthanks"), "MIIEow"),
            (
                "cut -----BEGIN PRIVATE KEY-----\nMIIEvQ".to_owned(),
                "MIIEvQ",
            ),
        ] {
            let shown = r
                .redact_shapes(&text)
                .unwrap_or_else(|| panic!("missed in {text}"));
            assert!(!shown.contains(secret), "{shown}");
            assert!(shown.contains(REDACTED), "{shown}");
        }
        each_holds(
            &[
                "task-list of items",
                "a ghp_ short",
                "AKIA",
                "the sk-8 model",
                "pass the salt",
            ],
            |text| r.redact_shapes(text).is_none(),
        );
    }

    #[test]
    fn a_shaped_value_is_shown_redacted_sealed_whole_and_put_back_byte_exact() {
        let r = Redactor::builtin();
        let content = format!("# notes\ntoken for CI: {GHP}\n");
        let args = json!({"path": "notes.md", "content": content});
        let (shown, secrets) = r.split(&args);
        assert_eq!(shown["path"], "notes.md");
        assert_eq!(shown["content"], "# notes\ntoken for CI: [redacted]\n");
        assert_eq!(secrets, vec![("/content".to_owned(), json!(content))]);
        assert_eq!(restore_secrets(&shown, &secrets), args);
        assert_eq!(r.redact(&args), shown);
        // Keyed by the same rule: a different token is a different write.
        let keyed = r.keyed(&args, &[3; 32]).unwrap();
        assert!(keyed["content"].as_str().unwrap().starts_with(HMAC_PREFIX));
        let other = json!({"path": "notes.md", "content": content.replace("1234", "5678")});
        assert_ne!(keyed, r.keyed(&other, &[3; 32]).unwrap());
        assert!(!keyed.to_string().contains(GHP));
    }

    #[test]
    fn upstream_text_loses_shapes_as_well_as_named_values() {
        let text = format!(r#"wrote {{"path":"a","pwd":"x1"}} using {GHP}"#);
        let out = redact_text(&text);
        assert_eq!(
            out,
            r#"wrote {"path":"a","pwd":"[redacted]"} using [redacted]"#
        );
    }

    #[test]
    fn configured_names_and_patterns_add_to_the_built_in_ones() {
        let r = Redactor::new(&["ssn".to_owned()], &[r"\bACME-[0-9]{6}\b".to_owned()]).unwrap();
        assert!(r.is_secret_key("customer_ssn"));
        assert!(r.is_secret_key("password"), "built-ins stay");
        assert_eq!(
            r.redact(&json!({"note": "ticket ACME-123456 done", "ssn": 1})),
            json!({"note": "ticket [redacted] done", "ssn": "[redacted]"})
        );
        assert!(!Redactor::builtin().is_secret_key("customer_ssn"));
        let err = Redactor::new(&[], &["(unclosed".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("(unclosed"), "{err}");
        assert!(matches!(
            Redactor::new(&["has space".to_owned()], &[]),
            Err(RedactionError::BadName(_))
        ));
    }
}
