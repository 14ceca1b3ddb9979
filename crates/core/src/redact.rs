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

/// Text an upstream produced (a preview sentence, an error message) with
/// every occurrence of a secret argument value replaced by [`REDACTED`]:
/// an upstream that echoes what it was given must not leak it through
/// plangate.
pub fn scrub_text(text: &str, secrets: &[(String, Value)]) -> String {
    let mut out = text.to_owned();
    for s in secret_texts(secrets) {
        if out.contains(&s) {
            out = out.replace(&s, REDACTED);
        }
    }
    out
}

/// A JSON value an upstream produced, redacted by key ([`redact`]) and with
/// every string scrubbed of secret argument values ([`scrub_text`]).
pub fn scrub_value(value: &Value, secrets: &[(String, Value)]) -> Value {
    fn scrub(v: &Value, texts: &[String]) -> Value {
        match v {
            Value::String(s) => {
                let mut out = s.clone();
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
