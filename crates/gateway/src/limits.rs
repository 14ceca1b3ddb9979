//! The request size cap, the same on both transports
//! (`[gateway] max_request_bytes`, default 4 MiB). Over HTTP the body's
//! deadline (`[gateway] body_read_timeout`, default 10 s), which the cap's
//! reads end at, is [`crate::deadline`]'s, re-exported here.
//!
//! Over HTTP, rmcp refuses a body over the cap with a plain-text `413`;
//! over stdio, rmcp's line codec has no cap at all (a 20 MB line was
//! buffered whole, then dropped without an answer). Here both refuse alike,
//! with a JSON-RPC error for the request's own id — code `-32600`,
//! `data.code = "too_large"`, the size and the limit — so the client's
//! call ends at once with a reason instead of hanging:
//!
//! * stdio: [`LineCap`] sits between stdin and rmcp's codec. It passes
//!   lines up to the cap through unchanged (holding at most one line, as
//!   the codec would) and, for a longer line, discards it while
//!   [`IdScanner`] finds its `id`, then hands rmcp a tiny stand-in request
//!   `plangate/too_large` with that id, which the server answers with the
//!   error ([`too_large_error`]). A line without an id (a notification) is
//!   dropped: it gets no answer anyway.
//! * HTTP: [`cap_body`] answers a body whose `Content-Length` is over the
//!   cap with `413` and the same JSON-RPC error, reading (not keeping) the
//!   body to find the id.
//!
//! The scan never holds more than a few hundred bytes beyond the cap.
//!

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};

pub use crate::deadline::{BodyTimedOut, Timed, body_deadline, discard_body, unreadable_body};

/// The stand-in method [`LineCap`] hands rmcp for an oversized request.
pub const TOO_LARGE_METHOD: &str = "plangate/too_large";

/// The JSON-RPC error an oversized request gets.
pub fn too_large_error(bytes: Option<u64>, limit: usize) -> ErrorData {
    let size = match bytes {
        Some(b) => format!("{b} bytes"),
        None => "over the limit".to_owned(),
    };
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "request too large ({size}): plangate accepts at most {limit} bytes per message ([gateway] max_request_bytes); send less, e.g. split the write"
        ),
        Some(json!({"code": plangate_core::AccessCode::TooLarge, "bytes": bytes, "limit": limit})),
    )
}

// === the id of a message too large to keep ===

/// Finds the top-level `"id"` of a JSON-RPC message fed to it in pieces,
/// without keeping the message: a streaming scan of strings, nesting and
/// keys at depth 1.
#[derive(Default)]
pub struct IdScanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The text of the current string while it may be a key at depth 1.
    key: Option<Vec<u8>>,
    /// The last complete string at depth 1, until its `:` or not.
    last_key: Option<Vec<u8>>,
    /// After `"id":` at depth 1: the value's text so far.
    value: Option<Vec<u8>>,
    /// The id found.
    found: Option<Value>,
}

/// Longest id text kept (an id is a number or a short string).
const MAX_ID_TEXT: usize = 256;

impl IdScanner {
    /// Feeds the next bytes of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.found.is_some() {
                return;
            }
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if let Some(value) = &mut self.value {
            match value.first() {
                // A string id: to its closing quote.
                Some(b'"') => {
                    if value.len() < MAX_ID_TEXT {
                        value.push(b);
                    }
                    if self.escaped {
                        self.escaped = false;
                    } else if b == b'\\' {
                        self.escaped = true;
                    } else if b == b'"' {
                        self.finish();
                    }
                    return;
                }
                None if b.is_ascii_whitespace() => return,
                None if b == b'"' => {
                    value.push(b);
                    self.escaped = false;
                    return;
                }
                // A number (or null, true…): to the next delimiter, which
                // still counts for the structure below.
                _ if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() => self.finish(),
                _ => {
                    if value.len() < MAX_ID_TEXT {
                        value.push(b);
                    }
                    return;
                }
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.last_key = self.key.take();
                return;
            }
            if let Some(key) = &mut self.key {
                if key.len() < 8 {
                    key.push(b);
                } else {
                    self.key = None;
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.escaped = false;
                self.key = (self.depth == 1).then(Vec::new);
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.last_key = None;
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                self.last_key = None;
            }
            b':' => {
                if self.depth == 1 && self.last_key.as_deref() == Some(b"id".as_slice()) {
                    self.value = Some(Vec::new());
                }
                self.last_key = None;
            }
            b if b.is_ascii_whitespace() => {}
            _ => self.last_key = None,
        }
    }

    fn finish(&mut self) {
        if let Some(text) = self.value.take() {
            self.found = serde_json::from_slice::<Value>(&text)
                .ok()
                .filter(|v| v.is_string() || v.is_number());
        }
    }

    /// The id, once seen (a number or a string).
    pub fn id(&mut self) -> Option<Value> {
        if self.found.is_none() && self.value.is_some() {
            self.finish();
        }
        self.found.clone()
    }
}

// === stdio ===

/// stdin as rmcp reads it, with every line over `limit` bytes replaced by
/// the stand-in request (see the module docs).
pub struct LineCap<R> {
    inner: R,
    limit: usize,
    /// The current line while it fits.
    line: Vec<u8>,
    /// Finding the id of a line over the limit, and its size so far.
    over: Option<(IdScanner, u64)>,
    /// Bytes ready for rmcp.
    out: Vec<u8>,
    out_at: usize,
    eof: bool,
}

impl<R> LineCap<R> {
    /// Caps lines of `inner` at `limit` bytes.
    pub fn new(inner: R, limit: usize) -> LineCap<R> {
        LineCap {
            inner,
            limit,
            line: Vec::new(),
            over: None,
            out: Vec::new(),
            out_at: 0,
            eof: false,
        }
    }

    /// Takes `bytes` read from the inner reader.
    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match newline {
                Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
                None => (bytes, None),
            };
            match &mut self.over {
                Some((scanner, size)) => {
                    scanner.feed(part);
                    *size += part.len() as u64;
                }
                None if self.line.len() + part.len() > self.limit => {
                    let mut scanner = IdScanner::default();
                    scanner.feed(&self.line);
                    scanner.feed(part);
                    let size = (self.line.len() + part.len()) as u64;
                    self.line = Vec::new();
                    self.over = Some((scanner, size));
                }
                None => self.line.extend_from_slice(part),
            }
            match rest {
                Some(rest) => {
                    self.end_line();
                    bytes = rest;
                }
                None => break,
            }
        }
    }

    /// A newline (or the end of input) closes the current line.
    fn end_line(&mut self) {
        match self.over.take() {
            Some((mut scanner, size)) => {
                tracing::warn!(
                    bytes = size,
                    limit = self.limit,
                    "stdio message over max_request_bytes refused"
                );
                if let Some(id) = scanner.id() {
                    let stand_in = json!({
                        "jsonrpc": "2.0",
                        "id": id,
                        "method": TOO_LARGE_METHOD,
                        "params": {"bytes": size},
                    });
                    self.out.extend_from_slice(stand_in.to_string().as_bytes());
                    self.out.push(b'\n');
                }
            }
            None => {
                self.out.append(&mut self.line);
                self.out.push(b'\n');
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.out_at < this.out.len() {
                let n = (this.out.len() - this.out_at).min(buf.remaining());
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                if this.out_at == this.out.len() {
                    this.out.clear();
                    this.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let filled = read.filled();
                    if filled.is_empty() {
                        this.eof = true;
                        // A last line without a newline is still a line.
                        if !this.line.is_empty() || this.over.is_some() {
                            this.end_line();
                            // The codec takes the line at its newline; at
                            // the very end it takes what is left.
                        }
                    } else {
                        let bytes = filled.to_vec();
                        this.take(&bytes);
                    }
                }
            }
        }
    }
}

// === HTTP ===

/// axum middleware for `/mcp`: a body declared larger than the cap is
/// answered `413` with the JSON-RPC error for its id (see the module docs);
/// any other is read whole here, within its deadline ([`Timed`]), before
/// the session binding and rmcp see the request — a late one is answered
/// `408`, one that grows past the cap without declaring its length `413`.
pub async fn cap_body(
    State(gw): State<std::sync::Arc<crate::Gateway>>,
    request: Request,
    next: Next,
) -> Response {
    let limit = gw.config().gateway.max_request_bytes;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(bytes) = declared.filter(|&b| b > limit as u64) else {
        let (parts, body) = request.into_parts();
        let within = gw.config().gateway.body_read_timeout;
        return match read_whole(body, limit).await {
            Ok(bytes) => {
                next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                    .await
            }
            Err(Unread::Error(e)) => unreadable_body(&e, None, within),
            Err(Unread::TooLarge) => {
                tracing::warn!(limit, "HTTP message over max_request_bytes refused");
                let body = json!({
                    "jsonrpc": "2.0",
                    "id": null,
                    "error": too_large_error(None, limit),
                });
                let mut response =
                    (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(body)).into_response();
                response.headers_mut().insert(
                    header::CONNECTION,
                    header::HeaderValue::from_static("close"),
                );
                response
            }
        };
    };
    // Read what the client sends (it is waiting to send it) to find the id,
    // keeping none of it; a body that never ends is cut at twice the
    // declared size.
    let mut scanner = IdScanner::default();
    let request_caller = request.extensions().get::<crate::auth::Caller>().cloned();
    let mut stream = request.into_body().into_data_stream();
    let mut seen: u64 = 0;
    // Each read ends at the body's deadline ([`Timed`]) at the latest.
    while let Some(Ok(chunk)) = stream.next().await {
        scanner.feed(&chunk);
        seen += chunk.len() as u64;
        if seen > bytes.saturating_mul(2) || scanner.id().is_some() {
            break;
        }
    }
    tracing::warn!(bytes, limit, "HTTP message over max_request_bytes refused");
    // On the record for a key (the auth middleware ran first).
    if let Some(crate::auth::Caller::Key(key)) = request_caller {
        let acting = crate::acting::Acting {
            key,
            channel: plangate_core::Channel::Http,
            operator: None,
        };
        crate::call_log::record_too_large(&gw, &acting, Some(bytes)).await;
    }
    let error = too_large_error(Some(bytes), limit);
    let body = json!({
        "jsonrpc": "2.0",
        "id": scanner.id(),
        "error": error,
    });
    let mut response = (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

/// Why [`read_whole`] has no body to hand on.
enum Unread {
    /// The body could not be read: its deadline passed, or the client left.
    Error(axum::Error),
    /// It grew past the cap (its length was not declared).
    TooLarge,
}

/// The whole of `body`, at most `limit` bytes. Memory grows with what
/// arrives, never with what the client declared: a body that declares the
/// cap and stalls holds only what it sent, until its deadline.
async fn read_whole(body: axum::body::Body, limit: usize) -> Result<axum::body::Bytes, Unread> {
    let mut stream = body.into_data_stream();
    let first = match stream.next().await {
        None => return Ok(axum::body::Bytes::new()),
        Some(Err(e)) => return Err(Unread::Error(e)),
        Some(Ok(chunk)) => chunk,
    };
    if first.len() > limit {
        return Err(Unread::TooLarge);
    }
    let mut whole: Option<Vec<u8>> = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(Unread::Error)?;
        let buffer = whole.get_or_insert_with(|| first.to_vec());
        if buffer.len().saturating_add(chunk.len()) > limit {
            return Err(Unread::TooLarge);
        }
        buffer.extend_from_slice(&chunk);
    }
    // One chunk (the usual case) is handed on without a copy.
    Ok(whole.map_or(first, axum::body::Bytes::from))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::deadline::timed_out;

    fn id_of(text: &str, pieces: usize) -> Option<Value> {
        let mut s = IdScanner::default();
        let bytes = text.as_bytes();
        let step = (bytes.len() / pieces).max(1);
        for chunk in bytes.chunks(step) {
            s.feed(chunk);
        }
        s.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_stands_in_any_pieces() {
        let big = "x".repeat(10_000);
        for pieces in [1, 3, 97] {
            assert_eq!(
                id_of(
                    &format!(
                        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"arguments":{{"text":"{big}"}}}}}}"#
                    ),
                    pieces
                ),
                Some(json!(7))
            );
            // The Python SDK writes the id last; a nested "id" is not it.
            assert_eq!(
                id_of(
                    &format!(
                        r#"{{"method":"tools/call","params":{{"id":1,"arguments":{{"id":"no","t":"{big}"}}}},"jsonrpc":"2.0","id":"req-9"}}"#
                    ),
                    pieces
                ),
                Some(json!("req-9"))
            );
            assert_eq!(
                id_of(
                    &format!(r#"{{"params":{{"text":"\"id\": 5, {big}"}},"id" : 12 }}"#),
                    pieces
                ),
                Some(json!(12))
            );
        }
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#, 1),
            None
        );
        assert_eq!(id_of("not json at all", 1), None);
    }

    /// A body fed by hand: what is sent arrives, and it ends only when the
    /// sender is dropped.
    fn fed() -> (
        futures::channel::mpsc::Sender<Result<axum::body::Bytes, std::io::Error>>,
        axum::body::Body,
    ) {
        let (tx, rx) = futures::channel::mpsc::channel(8);
        (tx, axum::body::Body::from_stream(rx))
    }

    fn chunk(text: &'static str) -> Result<axum::body::Bytes, std::io::Error> {
        Ok(axum::body::Bytes::from_static(text.as_bytes()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_stalled_past_its_deadline_is_answered_408_body_timeout() {
        let within = std::time::Duration::from_secs(2);
        let (mut tx, inner) = fed();
        tx.try_send(chunk(r#"{"jsonrpc":"2.0","#)).unwrap();
        let started = tokio::time::Instant::now();
        let body = axum::body::Body::new(Timed::new(inner, within));
        let Err(Unread::Error(error)) = read_whole(body, 1024).await else {
            panic!("a stalled body was read");
        };
        assert_eq!(started.elapsed(), within);
        assert!(timed_out(&error), "{error}");
        let response = unreadable_body(&error, None, within);
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(answer["error"]["code"], -32600);
        assert_eq!(answer["error"]["data"]["code"], "body_timeout");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("within 2s ([gateway] body_read_timeout)"),
            "{answer}"
        );
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_in_time_is_read_whole_and_one_past_the_cap_is_too_large() {
        let within = std::time::Duration::from_secs(2);
        let (mut tx, inner) = fed();
        let body = axum::body::Body::new(Timed::new(inner, within));
        let feeding = tokio::spawn(async move {
            for piece in [r#"{"id":1,"#, r#""method":"#, r#""ping"}"#] {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                tx.try_send(chunk(piece)).unwrap();
            }
        });
        let whole = read_whole(body, 1024).await.ok().unwrap();
        assert_eq!(&whole[..], br#"{"id":1,"method":"ping"}"#);
        feeding.await.unwrap();

        let (mut tx, inner) = fed();
        for _ in 0..3 {
            tx.try_send(chunk("0123456789")).unwrap();
        }
        drop(tx);
        let body = axum::body::Body::new(Timed::new(inner, within));
        assert!(matches!(read_whole(body, 25).await, Err(Unread::TooLarge)));
    }

    async fn through(input: Vec<u8>, limit: usize) -> String {
        let mut capped = LineCap::new(std::io::Cursor::new(input), limit);
        let mut out = String::new();
        capped.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn lines_under_the_cap_pass_unchanged_and_a_longer_one_becomes_the_stand_in() {
        let small = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let big = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"w","arguments":{{"t":"{}"}}}},"id":42}}"#,
            "y".repeat(5000)
        );
        let note = format!(
            r#"{{"jsonrpc":"2.0","method":"n","params":{{"t":"{}"}}}}"#,
            "z".repeat(5000)
        );
        let input = format!("{small}\n{big}\n{note}\n{small}").into_bytes();
        let out = through(input, 1024).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0], small);
        let stand_in: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(stand_in["id"], 42);
        assert_eq!(stand_in["method"], TOO_LARGE_METHOD);
        assert_eq!(stand_in["params"]["bytes"], big.len());
        assert_eq!(lines[2], small, "the notification over the cap is dropped");
    }
}

#[cfg(test)]
mod fuzz {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use proptest::prelude::*;
    use tokio::io::AsyncReadExt;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512)
        ))]

        #[test]
        fn the_id_scanner_takes_any_bytes_in_any_pieces(bytes in prop::collection::vec(any::<u8>(), 0..600), step in 1usize..50) {
            let mut s = IdScanner::default();
            for chunk in bytes.chunks(step) {
                s.feed(chunk);
            }
            let _ = s.id();
        }

        #[test]
        fn no_line_longer_than_the_cap_ever_reaches_rmcp(
            lines in prop::collection::vec("\\PC{0,300}", 0..8),
            limit in 16usize..200,
        ) {
            let input = lines.join("\n").into_bytes();
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let out = rt.block_on(async {
                let mut capped = LineCap::new(std::io::Cursor::new(input), limit);
                let mut out = Vec::new();
                capped.read_to_end(&mut out).await.unwrap();
                out
            });
            for line in out.split(|&b| b == b'\n') {
                let stand_in = std::str::from_utf8(line).is_ok_and(|l| l.contains(TOO_LARGE_METHOD));
                prop_assert!(line.len() <= limit || stand_in, "{} > {}", line.len(), limit);
            }
        }
    }
}
