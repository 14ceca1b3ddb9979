//! Which of plangate's calls an HTTP upstream's message belongs to.
//!
//! plangate shares one session to an upstream among all its clients, so a
//! request the upstream sends during a call (elicitation, sampling, roots)
//! or a log line it emits must be told apart by the call it relates to.
//! Over Streamable HTTP the upstream sends those on the response stream of
//! the POST that carried the call — but rmcp's client merges every stream
//! into one, so that link is lost by the time a handler runs. [`Tagging`]
//! wraps the HTTP client and writes the posted request's id into each
//! server request and log message read from that POST's stream (or from a
//! GET that resumes it), as `_meta["dev.plangate/relatedRequest"]`; the
//! handlers read it back with [`take`] and remove it, so no client ever
//! sees the key. The tag carries a per-process secret: an upstream that
//! writes the key into its own `_meta` (over stdio, say) routes nothing.
//!
//! Over stdio there is no such link on the wire; the hub then decides by
//! who has calls in flight ([`crate::hub::Hub::ask_target`]).

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use parking_lot::Mutex;
use rmcp::model::{ClientJsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::Value;

/// The `_meta` key carrying the related request's id, between the HTTP
/// client and plangate's handlers only.
pub const KEY: &str = "dev.plangate/relatedRequest";

/// How many resumable event ids are remembered (the last of each stream).
const EVENT_IDS: usize = 1024;

/// An HTTP client for rmcp's Streamable HTTP transport that tags messages
/// with the request whose response stream carried them.
#[derive(Clone)]
pub struct Tagging {
    inner: reqwest::Client,
    /// A client-credentials upstream's tokens: each request without a
    /// token of its own gets the current one.
    machine: Option<Arc<super::oauth::MachineTokens>>,
    /// The last SSE event id seen on each tagged stream → its request, so a
    /// stream resumed by GET (`Last-Event-ID`) keeps its tag.
    resumable: Arc<Mutex<HashMap<String, Value>>>,
}

impl Tagging {
    /// Wraps `inner`.
    pub fn new(inner: reqwest::Client) -> Self {
        Tagging {
            inner,
            machine: None,
            resumable: Arc::default(),
        }
    }

    /// Wraps `inner`, sending `machine`'s token with every request.
    pub(super) fn with_machine_tokens(
        inner: reqwest::Client,
        machine: Arc<super::oauth::MachineTokens>,
    ) -> Self {
        Tagging {
            machine: Some(machine),
            ..Tagging::new(inner)
        }
    }

    /// The token a request goes with: its own, else the machine token.
    async fn token(&self, auth_header: Option<String>) -> Option<String> {
        match (auth_header, &self.machine) {
            (Some(own), _) => Some(own),
            (None, Some(machine)) => machine.token().await,
            (None, None) => None,
        }
    }

    fn tag_stream(
        &self,
        stream: BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        related: Value,
    ) -> BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>> {
        let resumable = self.resumable.clone();
        let mut last_id: Option<String> = None;
        stream
            .map(move |item| {
                item.map(|mut sse| {
                    if let Some(data) = sse.data.as_mut() {
                        tag(data, &related);
                    }
                    if let Some(id) = &sse.id {
                        let mut ids = resumable.lock();
                        if let Some(old) = last_id.replace(id.clone()) {
                            ids.remove(&old);
                        }
                        if ids.len() >= EVENT_IDS {
                            ids.clear();
                        }
                        ids.insert(id.clone(), related.clone());
                    }
                    sse
                })
            })
            .boxed()
    }
}

/// Adds the tag to a JSON-RPC request from the server, or a log message;
/// responses, other notifications (progress is routed by its token, and
/// its `_meta` is relayed as it is) and unreadable data stay as they are.
fn tag(data: &mut String, related: &Value) {
    if !data.contains("\"method\"") {
        return;
    }
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(data) else {
        return;
    };
    let is_request = message.contains_key("id");
    match message.get("method").and_then(Value::as_str) {
        Some(_) if is_request => {}
        Some("notifications/message") => {}
        _ => return,
    }
    let params = message
        .entry("params")
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(params) = params else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(meta) = meta else {
        return;
    };
    meta.insert(
        KEY.to_owned(),
        serde_json::json!({"request": related, "nonce": nonce()}),
    );
    if let Ok(tagged) = serde_json::to_string(&message) {
        *data = tagged;
    }
}

/// A number drawn once per process and carried in every tag: an upstream
/// never sees a tag (it is removed before anything is relayed), so one
/// that writes the key into its own `_meta` cannot make plangate route its
/// message to a call of its choosing.
fn nonce() -> u64 {
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NONCE.get_or_init(rand::random)
}

/// Removes the tag from a handler's `_meta` and returns the request it
/// names, if plangate put it there.
pub fn take(meta: &mut serde_json::Map<String, Value>) -> Option<RequestId> {
    let value = meta.remove(KEY)?;
    if value.get("nonce").and_then(Value::as_u64) != Some(nonce()) {
        tracing::info!("an upstream's message carried plangate's routing key itself; ignored");
        return None;
    }
    serde_json::from_value(value.get("request")?.clone()).ok()
}

type Error = StreamableHttpError<reqwest::Error>;

/// The longest line of a JSON-lines listen body plangate reads.
const MAX_LINE: usize = 4 << 20;

/// Whether `message` opens a `subscriptions/listen` stream.
fn is_listen(message: &ClientJsonRpcMessage) -> bool {
    matches!(
        message,
        ClientJsonRpcMessage::Request(r)
            if matches!(r.request, rmcp::model::ClientRequest::SubscriptionsListenRequest(_))
    )
}

impl Tagging {
    /// Posts a `subscriptions/listen` request itself. Its answer is a
    /// stream that lasts as long as the subscription: as SSE, or — as some
    /// servers send it, the conformance suite's reference server among
    /// them — an `application/json` body that goes on with one JSON-RPC
    /// message per line. rmcp's client would wait for such a body to end
    /// before it read the acknowledgment; plangate reads it line by line,
    /// so the notifications that follow are heard.
    async fn post_listen(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let mut request = self
            .inner
            .post(uri.as_ref())
            .header(http::header::ACCEPT, "text/event-stream, application/json");
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        if let Some(id) = &session_id {
            request = request.header("mcp-session-id", id.as_ref());
        }
        let response = request
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if !status.is_success() {
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {status} to subscriptions/listen").into(),
            ));
        }
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let kind = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.to_ascii_lowercase())
            .unwrap_or_default();
        if kind.starts_with("text/event-stream") {
            let stream = sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
            return Ok(StreamableHttpPostResponse::Sse(stream.boxed(), session));
        }
        if kind.starts_with("application/json") {
            return Ok(StreamableHttpPostResponse::Sse(
                json_lines(response.bytes_stream().boxed()),
                session,
            ));
        }
        Err(StreamableHttpError::UnexpectedContentType(Some(kind)))
    }
}

/// A body of JSON-RPC messages, one per line, as the events of an SSE
/// stream (each line one event's data). A line longer than [`MAX_LINE`]
/// ends the stream with an error.
fn json_lines<B: AsRef<[u8]> + Send + 'static>(
    body: BoxStream<'static, Result<B, reqwest::Error>>,
) -> BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>> {
    let state = (body, Vec::<u8>::new(), false);
    futures::stream::unfold(state, |(mut body, mut buf, mut done)| async move {
        loop {
            if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                match line_event(&line) {
                    Some(event) => return Some((Ok(event), (body, buf, done))),
                    None => continue,
                }
            }
            if done {
                let event = line_event(&buf)?;
                buf.clear();
                return Some((Ok(event), (body, buf, done)));
            }
            if buf.len() > MAX_LINE {
                let e = sse_stream::Error::Body("a line of the listen stream is too long".into());
                return Some((Err(e), (body, Vec::new(), true)));
            }
            match body.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(chunk.as_ref()),
                Some(Err(e)) => {
                    return Some((
                        Err(sse_stream::Error::Body(Box::new(e))),
                        (body, Vec::new(), true),
                    ));
                }
                None => done = true,
            }
        }
    })
    .boxed()
}

/// One line of a JSON-lines body as an SSE event (its data the line,
/// trimmed); `None` for a blank line.
fn line_event(line: &[u8]) -> Option<sse_stream::Sse> {
    let text = String::from_utf8_lossy(line).trim().to_owned();
    (!text.is_empty()).then(|| sse_stream::Sse {
        data: Some(text),
        ..Default::default()
    })
}

impl StreamableHttpClient for Tagging {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let auth_header = self.token(auth_header).await;
        if is_listen(&message) {
            return self
                .post_listen(uri, message, session_id, auth_header, custom_headers)
                .await;
        }
        let related = match &message {
            ClientJsonRpcMessage::Request(r) => serde_json::to_value(&r.id).ok(),
            _ => None,
        };
        let response = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        Ok(match (response, related) {
            (StreamableHttpPostResponse::Sse(stream, session), Some(related)) => {
                StreamableHttpPostResponse::Sse(self.tag_stream(stream, related), session)
            }
            (other, _) => other,
        })
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let auth_header = self.token(auth_header).await;
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>, Error> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>, Error> {
        let auth_header = self.token(auth_header).await;
        let related = last_event_id
            .as_ref()
            .and_then(|id| self.resumable.lock().get(id).cloned());
        let stream = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(match related {
            Some(related) => self.tag_stream(stream, related),
            None => stream,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_json_lines_body_becomes_one_event_per_message_whatever_the_chunks() {
        let chunks: Vec<Result<Vec<u8>, reqwest::Error>> = vec![
            Ok(br#"{"jsonrpc":"2.0","method":"a"}"#.to_vec()),
            Ok(b"\n\n{\"jsonrpc\":\"2.0\",".to_vec()),
            Ok(br#""method":"b"}"#.to_vec()),
            Ok(b"\r\n{\"last\":true}".to_vec()),
        ];
        let events: Vec<_> = json_lines(futures::stream::iter(chunks).boxed())
            .collect()
            .await;
        let data: Vec<String> = events
            .into_iter()
            .map(|e| e.unwrap().data.unwrap())
            .collect();
        assert_eq!(
            data,
            [
                r#"{"jsonrpc":"2.0","method":"a"}"#,
                r#"{"jsonrpc":"2.0","method":"b"}"#,
                r#"{"last":true}"#
            ]
        );
    }

    #[tokio::test]
    async fn an_endless_line_ends_the_stream_with_an_error() {
        let chunk = vec![b'x'; MAX_LINE / 4 + 1];
        let chunks = futures::stream::repeat_with(move || Ok::<_, reqwest::Error>(chunk.clone()));
        let events: Vec<_> = json_lines(chunks.boxed()).collect().await;
        assert_eq!(events.len(), 1);
        assert!(events[0].is_err());
    }

    #[test]
    fn requests_and_notifications_are_tagged_responses_are_not() {
        let related = json!(7);
        let mut request =
            r#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"message":"m"}}"#
                .to_owned();
        tag(&mut request, &related);
        let v: Value = serde_json::from_str(&request).unwrap();
        assert_eq!(v["params"]["_meta"][KEY]["request"], 7);
        assert_eq!(v["params"]["message"], "m");

        let mut note = r#"{"jsonrpc":"2.0","method":"notifications/message"}"#.to_owned();
        tag(&mut note, &related);
        let v: Value = serde_json::from_str(&note).unwrap();
        assert_eq!(v["params"]["_meta"][KEY]["request"], 7);

        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
        let mut same = progress.to_owned();
        tag(&mut same, &related);
        assert_eq!(same, progress);

        let response = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"\"method\""}]}}"#;
        let mut same = response.to_owned();
        tag(&mut same, &related);
        assert_eq!(same, response);
    }

    #[test]
    fn take_removes_the_key_and_trusts_only_plangates_own_tag() {
        let mut message = r#"{"jsonrpc":"2.0","id":0,"method":"roots/list"}"#.to_owned();
        tag(&mut message, &json!("abc"));
        let v: Value = serde_json::from_str(&message).unwrap();
        let mut meta = v["params"]["_meta"].as_object().cloned().unwrap();
        meta.insert("other".into(), json!(1));
        assert_eq!(take(&mut meta), Some(RequestId::String("abc".into())));
        assert!(!meta.contains_key(KEY));
        assert_eq!(take(&mut meta), None);

        // An upstream that writes the key itself routes nothing.
        let mut forged = json!({KEY: {"request": "abc", "nonce": 1}})
            .as_object()
            .cloned()
            .unwrap();
        assert_eq!(take(&mut forged), None);
        assert!(!forged.contains_key(KEY));
        let mut bare = json!({KEY: "abc"}).as_object().cloned().unwrap();
        assert_eq!(take(&mut bare), None);
    }
}
