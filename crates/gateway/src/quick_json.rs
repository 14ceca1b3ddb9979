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
///
/// Runs over every byte of every answer passed on, which may be a large
/// file read: the event's end and its lines are found with `memchr`, and
/// the JSON is looked at only as far as its top-level keys
/// ([`is_final`]).
fn first_message(pending: &mut Vec<u8>) -> Scan {
    loop {
        let Some(end) = memchr::memmem::find(pending, b"\n\n") else {
            return Scan::More;
        };
        let data = event_data(&pending[..end]);
        pending.drain(..end + 2);
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

/// The data of one event (its `data:` lines joined by newlines).
fn event_data(event: &[u8]) -> Vec<u8> {
    let mut data: Vec<u8> = Vec::new();
    let mut lines = 0;
    let mut at = 0;
    while at <= event.len() {
        let stop = memchr::memchr(b'\n', &event[at..]).map_or(event.len(), |n| at + n);
        let line = &event[at..stop];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if lines > 0 {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
            lines += 1;
        }
        at = stop + 1;
    }
    data
}

/// A JSON-RPC response or error: an `id` and no `method`.
///
/// rmcp writes a message's top-level keys first (`jsonrpc`, `id`, then
/// `result`, `error` or `method`), so [`top_level_kind`] usually tells
/// from the first few bytes, without reading a large result through;
/// whenever it cannot, the whole message is parsed.
fn is_final(data: &[u8]) -> bool {
    top_level_kind(data).unwrap_or_else(|| parsed_is_final(data))
}

/// [`is_final`] by parsing the whole message.
fn parsed_is_final(data: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        method: Option<IgnoredAny>,
        id: Option<IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(data).is_ok_and(|p| p.method.is_none() && p.id.is_some())
}

/// Whether the message is final, read from its top-level keys up to the
/// first `result`, `error` or `method`: `Some(false)` at `method`,
/// `Some(true)` at `result` or `error` after an `id`. `None` — parse it
/// whole — for anything else: a key with an escape, a value before those
/// keys that is an object or array, `result` before `id`, a message
/// without them, text that is not an object.
fn top_level_kind(data: &[u8]) -> Option<bool> {
    let mut at = skip_space(data, 0);
    if data.get(at) != Some(&b'{') {
        return None;
    }
    let mut saw_id = false;
    loop {
        at = skip_space(data, at + 1);
        if data.get(at) != Some(&b'"') {
            return None;
        }
        let key_start = at + 1;
        let key_end = key_start + memchr::memchr2(b'"', b'\\', &data[key_start..])?;
        if data[key_end] != b'"' {
            return None;
        }
        let key = &data[key_start..key_end];
        at = skip_space(data, key_end + 1);
        if data.get(at) != Some(&b':') {
            return None;
        }
        match key {
            b"method" => return Some(false),
            b"result" | b"error" if saw_id => return Some(true),
            b"result" | b"error" => return None,
            _ => {}
        }
        let value = skip_space(data, at + 1);
        at = skip_scalar(data, value)?;
        // An `id` of null counts as none, as in the parse.
        saw_id |= key == b"id" && &data[value..at] != b"null";
        at = skip_space(data, at);
        if data.get(at) != Some(&b',') {
            return None;
        }
    }
}

/// The index after the scalar value (string, number, `true`, `false`,
/// `null`) at `at`; `None` for an object, an array, or a string with an
/// escape.
fn skip_scalar(data: &[u8], at: usize) -> Option<usize> {
    match data.get(at)? {
        b'"' => {
            let end = at + 1 + memchr::memchr2(b'"', b'\\', &data[at + 1..])?;
            (data[end] == b'"').then_some(end + 1)
        }
        b'{' | b'[' => None,
        _ => {
            let len = data[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}') || b.is_ascii_whitespace())?;
            (len > 0).then_some(at + len)
        }
    }
}

fn skip_space(data: &[u8], mut at: usize) -> usize {
    while data.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
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
    fn the_quick_look_agrees_with_parsing_the_whole_message() {
        let cases: &[&[u8]] = &[
            br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"a \"b\" c"}]}}"#,
            br#"{"jsonrpc":"2.0","id":"s-1","error":{"code":-32602,"message":"x"}}"#,
            br#"{ "jsonrpc" : "2.0" , "id" : 7 , "result" : {} }"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{}}"#,
            // Shapes the quick look leaves to the parser.
            br#"{"result":{},"jsonrpc":"2.0","id":1}"#,
            br#"{"result":{},"method":"x","id":1}"#,
            br#"{"jsonrpc":"2.0","id":{"odd":1},"result":{}}"#,
            br#"{"jsonrpc":"2.0","i\u0064":1,"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#,
            br#"{"jsonrpc":"2.0"}"#,
            br#"{"jsonrpc":"2.0","id":1}"#,
            br#"[1,2]"#,
            b"not json",
            b"",
        ];
        for case in cases {
            assert_eq!(
                is_final(case),
                parsed_is_final(case),
                "{}",
                String::from_utf8_lossy(case)
            );
        }
        // And it does look quickly where it can.
        assert_eq!(top_level_kind(cases[0]), Some(true));
        assert_eq!(top_level_kind(cases[4]), Some(false));
        assert_eq!(top_level_kind(cases[5]), None);
    }

    #[test]
    fn a_large_answer_on_several_data_lines_is_joined_whole() {
        let text = "x".repeat(100_000);
        let head = r#"{"jsonrpc":"2.0","id":3"#;
        let tail = format!(r#","result":{{"t":"{text}"}}}}"#);
        let mut p = format!("data: \nid: 0/3\n\ndata: {head}\r\ndata:{tail}\n\nleft").into_bytes();
        let Scan::Final(data) = first_message(&mut p) else {
            panic!("not final")
        };
        assert_eq!(data, format!("{head}\n{tail}").into_bytes());
        assert_eq!(p, b"left");
    }

    #[test]
    fn a_partial_event_waits_for_the_rest() {
        let mut p = b"data: \nid: 0/1\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":".to_vec();
        assert_eq!(first_message(&mut p), Scan::More);
        p.extend_from_slice(b"1,\"result\":{}}\n\n");
        assert!(matches!(first_message(&mut p), Scan::Final(_)));
    }
}
