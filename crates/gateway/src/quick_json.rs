//! Quick answers as one JSON body instead of an event stream.
//!
//! rmcp answers every request of a Streamable HTTP session as
//! `text/event-stream`: the response head and a priming event go out at
//! once, the answer follows as a second chunk, then the end of the chunked
//! body. For a call answered in a fraction of a millisecond that is two
//! writes and two wake-ups of the client instead of one, plus SSE framing
//! the client must parse. The spec lets a server answer a POSTed request
//! with either `application/json` or `text/event-stream` (clients must
//! accept both), so this middleware waits up to [`QUICK`] for the stream's
//! first message: when that message is the final response, it goes out as
//! a plain JSON body with a `Content-Length`, in one write — as the fastest
//! peer bridge answers. Anything else — a progress notification, a question
//! to the client (elicitation), an answer not there within [`QUICK`], a
//! stream that ends early — is passed on as the event stream it was,
//! priming event first, so a long call keeps SSE's resumability
//! (`Last-Event-ID`) and everything the handler sends arrives in order.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// How long a request's answer may take and still go out as JSON. Longer
/// calls are streamed, so the client holds an event id to resume with.
pub const QUICK: Duration = Duration::from_secs(1);

/// The middleware: see the module's note.
pub async fn answer_quickly(request: Request, next: Next) -> Response {
    let post = request.method() == Method::POST;
    let response = next.run(request).await;
    if !post || response.status() != StatusCode::OK || !is_event_stream(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let mut stream = body.into_data_stream();
    let mut seen: Vec<Bytes> = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let deadline = tokio::time::Instant::now() + QUICK;
    let answer = loop {
        let frame = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(frame))) => frame,
            // Slow, ended or failed: the stream goes on as it was.
            Ok(Some(Err(_))) | Ok(None) | Err(_) => break None,
        };
        pending.extend_from_slice(&frame);
        seen.push(frame);
        match first_message(&mut pending) {
            Scan::More => continue,
            Scan::Final(data) => break Some(data),
            Scan::Other => break None,
        }
    };
    match answer {
        Some(data) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            parts.headers.remove(header::CACHE_CONTROL);
            parts.headers.remove(header::TRANSFER_ENCODING);
            parts.headers.remove("x-accel-buffering");
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(data.len()));
            Response::from_parts(parts, Body::from(data))
        }
        None => {
            let replay = futures::stream::iter(seen.into_iter().map(Ok::<_, axum::Error>));
            Response::from_parts(parts, Body::from_stream(replay.chain(stream)))
        }
    }
}

fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// What the events read so far say.
#[derive(Debug, PartialEq)]
enum Scan {
    /// No message yet (only priming events or comments, or a partial event).
    More,
    /// The first message is a JSON-RPC response or error: its JSON text.
    Final(Vec<u8>),
    /// The first message is anything else (a notification or a request).
    Other,
}

/// Reads complete events off the front of `pending` (consuming them) up to
/// the first one that carries data.
fn first_message(pending: &mut Vec<u8>) -> Scan {
    loop {
        let Some(end) = pending.windows(2).position(|w| w == b"\n\n") else {
            return Scan::More;
        };
        let event: Vec<u8> = pending.drain(..end + 2).collect();
        let mut data: Vec<u8> = Vec::new();
        let mut lines = 0;
        for line in event.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(value) = line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if lines > 0 {
                    data.push(b'\n');
                }
                data.extend_from_slice(value);
                lines += 1;
            }
        }
        if data.iter().all(u8::is_ascii_whitespace) {
            // A priming event (an id and an empty data field) or a comment.
            continue;
        }
        return if is_final(&data) {
            Scan::Final(data)
        } else {
            Scan::Other
        };
    }
}

/// A JSON-RPC response or error: an `id` and no `method`.
fn is_final(data: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        method: Option<IgnoredAny>,
        id: Option<IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(data).is_ok_and(|p| p.method.is_none() && p.id.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_priming_event_then_a_response_is_final() {
        let mut p = b"data: \nid: 0/7\nretry: 3000\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n".to_vec();
        assert_eq!(
            first_message(&mut p),
            Scan::Final(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#.to_vec())
        );
    }

    #[test]
    fn an_error_answer_is_final_too() {
        let mut p = b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"x\"}}\n\n".to_vec();
        assert!(matches!(first_message(&mut p), Scan::Final(_)));
    }

    #[test]
    fn a_notification_or_a_question_first_keeps_the_stream() {
        let mut p = b"data: \nid: 0/1\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n".to_vec();
        assert_eq!(first_message(&mut p), Scan::Other);
        let mut p = b"data: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"elicitation/create\",\"params\":{}}\n\n".to_vec();
        assert_eq!(first_message(&mut p), Scan::Other);
    }

    #[test]
    fn a_partial_event_waits_for_the_rest() {
        let mut p = b"data: \nid: 0/1\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":".to_vec();
        assert_eq!(first_message(&mut p), Scan::More);
        p.extend_from_slice(b"1,\"result\":{}}\n\n");
        assert!(matches!(first_message(&mut p), Scan::Final(_)));
    }
}
