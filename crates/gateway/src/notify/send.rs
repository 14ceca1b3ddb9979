//! Sending one message to one receiver: the Standard Webhooks POST, and
//! what came of it in words the outbox keeps (`HTTP 204`, `connection
//! refused`). Apart from the outbox's loop so `plangate notify test` sends
//! exactly as a delivery does.

use std::time::Duration;

use plangate_config::NotifyTarget;
use plangate_core::notify::{Notice, sign};

/// How long a receiver has to answer one attempt.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// How one attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Whether the receiver took it (a 2xx answer).
    pub delivered: bool,
    /// What it got: `HTTP 204 No Content`, `connection refused`, …
    pub status: String,
}

/// The HTTP client deliveries go out through: no redirects (a receiver's
/// URL is where a message goes, never somewhere it points to) and
/// [`SEND_TIMEOUT`] per attempt.
pub fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(SEND_TIMEOUT)
        .user_agent(concat!("plangate/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client for notifications: {e}"))
}

/// POSTs `notice` as message `msg_id` to `target` in its format, signed
/// with its secret at `now_secs` (the `webhook-timestamp`).
pub async fn send(
    http: &reqwest::Client,
    target: &NotifyTarget,
    msg_id: &str,
    notice: &Notice,
    now_secs: i64,
) -> Sent {
    let body = notice.body(target.format);
    let signature = sign(&target.key(), msg_id, now_secs, &body);
    let request = http
        .post(&target.url)
        .header("content-type", "application/json")
        .header("webhook-id", msg_id)
        .header("webhook-timestamp", now_secs.to_string())
        .header("webhook-signature", signature)
        .body(body);
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            Sent {
                delivered: status.is_success(),
                status: format!(
                    "HTTP {} {}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or_default()
                )
                .trim_end()
                .to_owned(),
            }
        }
        Err(e) => Sent {
            delivered: false,
            status: failure(e),
        },
    }
}

/// A failed request in a few words, without its URL (which may carry a
/// token in its path or query).
fn failure(e: reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer within {} s", SEND_TIMEOUT.as_secs());
    }
    if e.is_connect() {
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let text = s.to_string().to_lowercase();
            if text.contains("refused") {
                return "connection refused".to_owned();
            }
            if text.contains("dns") || text.contains("resolve") || text.contains("lookup") {
                return "the receiver's host name does not resolve".to_owned();
            }
            if text.contains("certificate") || text.contains("tls") {
                return format!("TLS: {s}");
            }
            source = s.source();
        }
        return "cannot connect".to_owned();
    }
    e.without_url().to_string()
}
