//! The text scanner behind [`Redactor::redact_text`]: JSON inside text
//! (whole, truncated or quoted), `name=value` pairs, URL passwords and the
//! credential shapes, found in one pass over the bytes and redacted by the
//! same names as a value's keys. Apart from the value rules because it is
//! a byte scanner with its own small grammar.

use serde_json::Value;

use super::{REDACTED, Redactor};
pub(super) const MAX_ENCODING_DEPTH: usize = 4;

impl Redactor {
    pub(super) fn redact_text_at(&self, text: &str, depth: usize) -> String {
        let b = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        // `done`: bytes of `text` already copied (or replaced) into `out`.
        let mut done = 0;
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'"' => {
                    let end = string_end(b, i);
                    if end == b.len() && (end - i < 2 || b[end - 1] != b'"') {
                        // An unclosed quote is punctuation, not a string
                        // that would hide the rest of the text from the scan.
                        i += 1;
                        continue;
                    }
                    let after = skip_ws(b, end);
                    let is_key = after < b.len() && b[after] == b':';
                    let raw = &text[i..end];
                    if is_key && self.names_secret(&unquote(raw)) {
                        let start = skip_ws(b, after + 1);
                        let stop = value_end(b, start);
                        push_quoted_marker(&mut out, &text[done..start]);
                        done = stop;
                        i = stop;
                        continue;
                    }
                    if depth < MAX_ENCODING_DEPTH && raw.len() > 2 && raw.ends_with('"') {
                        // Text inside quotes is scanned too: JSON quoted
                        // inside JSON is unescaped, redacted and quoted
                        // again; anything else is redacted as it stands.
                        match serde_json::from_str::<String>(raw) {
                            Ok(inner) => {
                                let redacted = self.redact_text_at(&inner, depth + 1);
                                if redacted != inner {
                                    out.push_str(&text[done..i]);
                                    out.push_str(&Value::String(redacted).to_string());
                                    done = end;
                                }
                            }
                            Err(_) => {
                                let inner = &raw[1..raw.len() - 1];
                                let redacted = self.redact_text_at(inner, depth + 1);
                                if redacted != inner {
                                    out.push_str(&text[done..i + 1]);
                                    out.push_str(&redacted);
                                    out.push('"');
                                    done = end;
                                }
                            }
                        }
                    }
                    i = end;
                }
                c if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' => {
                    let start = i;
                    while i < b.len()
                        && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-')
                    {
                        i += 1;
                    }
                    let word = &text[start..i];
                    if text[i..].starts_with("://") {
                        // scheme://user:password@host — hide the password.
                        let auth_start = i + 3;
                        let auth_end = b[auth_start..]
                            .iter()
                            .position(|&c| {
                                matches!(c, b'/' | b'?' | b'#') || c.is_ascii_whitespace()
                            })
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
                    if sep < b.len()
                        && (b[sep] == b'=' || b[sep] == b':')
                        && self.is_secret_key(word)
                    {
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
}

/// `before` (the text up to a secret's value), then the quoted marker
/// that stands for the value: how a value named like a secret is shown
/// in text, whichever scan found it.
pub(super) fn push_quoted_marker(out: &mut String, before: &str) {
    out.push_str(before);
    out.push('"');
    out.push_str(REDACTED);
    out.push('"');
}

/// The end (exclusive) of the JSON string literal starting at `start` (a
/// `"`), or the end of the text when it is not closed.
pub(super) fn string_end(b: &[u8], start: usize) -> usize {
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
pub(super) fn unquote(raw: &str) -> String {
    serde_json::from_str::<String>(raw)
        .unwrap_or_else(|_| raw.trim_start_matches('"').trim_end_matches('"').to_owned())
}

pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

pub(super) fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i
}

/// The end of the JSON value starting at `start`: a string, a balanced
/// object or array (strings inside respected), or a bare literal up to the
/// next delimiter. Unclosed ⇒ the end of the text (hide too much, not
/// too little).
pub(super) fn value_end(b: &[u8], start: usize) -> usize {
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
pub(super) fn bare_value_end(b: &[u8], start: usize) -> usize {
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
    use super::super::redact_text;

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
