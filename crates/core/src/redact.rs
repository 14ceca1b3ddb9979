//! Secret redaction (DESIGN §5): any object key that names a secret shows
//! `"[redacted]"` in every answer, log line, view and export, at any depth.

use serde_json::Value;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

const SECRET_WORDS: [&str; 9] = [
    "api_key",
    "apikey",
    "token",
    "password",
    "passwd",
    "secret",
    "cookie",
    "authorization",
    "credential",
];

/// Whether an object key names a secret: it contains one of the secret words
/// (`api_key`, `apikey`, `token`, `password`, `passwd`, `secret`, `cookie`,
/// `authorization`, `credential`), in any case. `-` and `_` are treated alike
/// so `api-key` and `API_KEY` both match.
pub fn is_secret_key(key: &str) -> bool {
    let folded: String = key
        .chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    SECRET_WORDS.iter().any(|w| folded.contains(w))
}

/// A copy of `value` with the value of every secret key, at any depth,
/// replaced by [`REDACTED`] — whatever that value's type.
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(k) {
                        Value::String(REDACTED.to_owned())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
}

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

/// How deep [`redact_text`] looks into JSON that is itself quoted inside
/// JSON (`"{\"password\":…}"`): deeper encodings are not seen in practice.
const MAX_ENCODING_DEPTH: usize = 4;

/// Text from outside plangate (an upstream's preview sentence, error
/// message, or a text block of its answer) with every secret it carries by
/// **name** replaced by [`REDACTED`]: the value of a secret key inside JSON
/// found in the text — well-formed, truncated, or itself quoted inside a
/// JSON string — of a `name=value` or `name: value` pair, and the password
/// of a URL (`scheme://user:password@host`). Names are those of
/// [`is_secret_key`], as for arguments.
///
/// It scans the text once (no parse attempt at every brace, so a hostile
/// text cannot make it quadratic) and errs toward hiding: a sentence like
/// "token: 5 left" loses its 5.
pub fn redact_text(text: &str) -> String {
    redact_text_at(text, 0)
}

fn redact_text_at(text: &str, depth: usize) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    // `done`: bytes of `text` already copied (or replaced) into `out`.
    let mut done = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i);
                let after = skip_ws(b, end);
                let is_key = after < b.len() && b[after] == b':';
                let raw = &text[i..end];
                if is_key {
                    if is_secret_key(&unquote(raw)) {
                        let start = skip_ws(b, after + 1);
                        let stop = value_end(b, start);
                        out.push_str(&text[done..start]);
                        out.push('"');
                        out.push_str(REDACTED);
                        out.push('"');
                        done = stop;
                        i = stop;
                        continue;
                    }
                } else if depth < MAX_ENCODING_DEPTH && raw.len() > 2 && raw.ends_with('"') {
                    // JSON quoted inside JSON: redact the inner text, then
                    // quote it again.
                    if let Ok(inner) = serde_json::from_str::<String>(raw) {
                        let redacted = redact_text_at(&inner, depth + 1);
                        if redacted != inner {
                            out.push_str(&text[done..i]);
                            out.push_str(&Value::String(redacted).to_string());
                            done = end;
                        }
                    }
                }
                i = end;
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-')
                {
                    i += 1;
                }
                let word = &text[start..i];
                if text[i..].starts_with("://") {
                    // scheme://user:password@host — hide the password.
                    let auth_start = i + 3;
                    let auth_end = b[auth_start..]
                        .iter()
                        .position(|&c| matches!(c, b'/' | b'?' | b'#') || c.is_ascii_whitespace())
                        .map_or(b.len(), |p| auth_start + p);
                    if let Some(at) = text[auth_start..auth_end].rfind('@') {
                        let userinfo = &text[auth_start..auth_start + at];
                        if let Some(colon) = userinfo.find(':') {
                            let pw_start = auth_start + colon + 1;
                            out.push_str(&text[done..pw_start]);
                            out.push_str(REDACTED);
                            done = auth_start + at;
                        }
                    }
                    i = auth_end;
                    continue;
                }
                let sep = skip_spaces(b, i);
                if sep < b.len() && (b[sep] == b'=' || b[sep] == b':') && is_secret_key(word) {
                    let start = skip_spaces(b, sep + 1);
                    let stop = bare_value_end(b, start);
                    if stop > start {
                        out.push_str(&text[done..start]);
                        out.push_str(REDACTED);
                        done = stop;
                        i = stop;
                    }
                }
            }
            _ => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out.push_str(&text[done..]);
    out
}

/// The end (exclusive) of the JSON string literal starting at `start` (a
/// `"`), or the end of the text when it is not closed.
fn string_end(b: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The contents of a JSON string literal, unescaped when it is well formed.
fn unquote(raw: &str) -> String {
    serde_json::from_str::<String>(raw)
        .unwrap_or_else(|_| raw.trim_start_matches('"').trim_end_matches('"').to_owned())
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i
}

/// The end of the JSON value starting at `start`: a string, a balanced
/// object or array (strings inside respected), or a bare literal up to the
/// next delimiter. Unclosed ⇒ the end of the text (hide too much, not
/// too little).
fn value_end(b: &[u8], start: usize) -> usize {
    match b.get(start) {
        None => start,
        Some(b'"') => string_end(b, start),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            b.len()
        }
        Some(_) => b[start..]
            .iter()
            .position(|&c| matches!(c, b',' | b'}' | b']' | b'\n' | b'\r'))
            .map_or(b.len(), |p| start + p),
    }
}

/// The end of a bare `name=value` value: a quoted run, or up to whitespace
/// or a separator.
fn bare_value_end(b: &[u8], start: usize) -> usize {
    match b.get(start) {
        None => start,
        Some(&q @ (b'"' | b'\'')) => b[start + 1..]
            .iter()
            .position(|&c| c == q)
            .map_or(b.len(), |p| start + p + 2),
        Some(b'{' | b'[') => value_end(b, start),
        Some(_) => b[start..]
            .iter()
            .position(|&c| {
                c.is_ascii_whitespace() || matches!(c, b'&' | b';' | b',' | b')' | b']' | b'}')
            })
            .map_or(b.len(), |p| start + p),
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn json_inside_text_is_redacted_by_key() {
        let text = r#"Set option smtp: {"host":"mail","password":"hunter2"} → {"host":"mail","password":{"v":"new}pw"}}; live at once."#;
        assert_eq!(
            redact_text(text),
            r#"Set option smtp: {"host":"mail","password":"[redacted]"} → {"host":"mail","password":"[redacted]"}; live at once."#
        );
    }

    #[test]
    fn truncated_and_quoted_json_is_redacted_too() {
        assert_eq!(
            redact_text(r#"body was {"user":"a","api_key": "k-123"#),
            r#"body was {"user":"a","api_key": "[redacted]""#
        );
        let double = serde_json::to_string(r#"{"token":"t0ps3cret"}"#).unwrap();
        let redacted = redact_text(&format!("payload {double} rejected"));
        assert!(!redacted.contains("t0ps3cret"), "{redacted}");
        assert!(redacted.contains("token"), "{redacted}");
    }

    #[test]
    fn name_value_pairs_and_url_passwords_are_redacted() {
        assert_eq!(
            redact_text("retry with password=hunter2&user=bob or Token: abc.def"),
            "retry with password=[redacted]&user=bob or Token: [redacted]"
        );
        assert_eq!(
            redact_text("connect postgres://app:s3cr3t@db:5432/x failed"),
            "connect postgres://app:[redacted]@db:5432/x failed"
        );
        assert_eq!(
            redact_text("see https://example.com/a:b@c and http://host/p"),
            "see https://example.com/a:b@c and http://host/p"
        );
    }

    #[test]
    fn text_without_secrets_is_unchanged() {
        for text in [
            "Update page 42 (About): title.",
            r#"{"id": 1, "title": "x \"quoted\" y"}"#,
            "ünïcödé → ok; \"unterminated",
            "{{{{[[[[",
            "",
        ] {
            assert_eq!(redact_text(text), text);
        }
    }

    #[test]
    fn a_hostile_text_is_scanned_once() {
        // A parse attempt at every brace would take hours on these.
        let text = "{\"a\":".repeat(200_000);
        assert_eq!(redact_text(&text), text);
        let open = "\"password\":{".repeat(100_000);
        assert_eq!(redact_text(&open), "\"password\":\"[redacted]\"");
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

/// Text an upstream produced (a preview sentence, an error message),
/// redacted by name ([`redact_text`]) and with every occurrence of a known
/// secret value replaced by [`REDACTED`]: an upstream that echoes what it
/// was given — in this call or an earlier one — must not leak it through
/// plangate.
pub fn scrub_text(text: &str, secrets: &[(String, Value)]) -> String {
    let mut out = redact_text(text);
    for s in secret_texts(secrets) {
        if out.contains(&s) {
            out = out.replace(&s, REDACTED);
        }
    }
    out
}

/// A JSON value an upstream produced, redacted by key ([`redact`]) and with
/// every string scrubbed as [`scrub_text`] scrubs text.
pub fn scrub_value(value: &Value, secrets: &[(String, Value)]) -> Value {
    fn scrub(v: &Value, texts: &[String]) -> Value {
        match v {
            Value::String(s) => {
                let mut out = redact_text(s);
                for t in texts {
                    if out.contains(t.as_str()) {
                        out = out.replace(t.as_str(), REDACTED);
                    }
                }
                Value::String(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(|i| scrub(i, texts)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), scrub(v, texts)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    scrub(&redact(value), &secret_texts(secrets))
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
