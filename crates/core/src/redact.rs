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
