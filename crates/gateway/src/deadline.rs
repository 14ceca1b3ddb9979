//! An HTTP request body's deadline (`[gateway] body_read_timeout`,
//! default 10 s), and the answers to a body refused or unread. Apart from
//! the size cap ([`crate::limits`]) and below it and the key check
//! ([`crate::auth`]), which both read bodies within it and answer alike
//! when one is late.
//!
//! hyper bounds the wait for a request's head (`header_read_timeout`),
//! not for its body: a client could declare a megabyte, send a few bytes
//! and hold the connection, a task and every buffer read so far for as
//! long as it liked. [`body_deadline`] wraps every request's body, on every
//! route, in [`Timed`]: from the moment the head is read the body has
//! `body_read_timeout` to end, after which any reader of it — the key
//! check's peek, [`crate::limits::cap_body`], the console's forms — gets
//! [`BodyTimedOut`] instead of waiting. [`crate::limits::cap_body`] reads
//! `/mcp`'s bodies whole before the session and rmcp see them, so a late
//! one is answered `408` with a JSON-RPC error (`data.code =
//! "body_timeout"`) like the other refusals of the front. A request
//! refused from its headers (no key, a bad key) never has its body read
//! for the answer: [`discard_body`] drains it in the background, bounded
//! by the same deadline, keeping none of it.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rmcp::model::ErrorCode;
use serde_json::{Value, json};

/// The error a [`Timed`] body ends with when its deadline passes first.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?} ([gateway] body_read_timeout)")]
pub struct BodyTimedOut(std::time::Duration);

/// A request body with a deadline: data that arrived is handed on as it
/// comes; once the deadline passes, the next read ends the body with
/// [`BodyTimedOut`]. The timer is armed only when a read has to wait: a
/// body that came with its head (most MCP messages) never sets one.
pub struct Timed {
    inner: axum::body::Body,
    deadline: tokio::time::Instant,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    within: std::time::Duration,
}

impl Timed {
    /// `inner`, which must end within `within` from now.
    pub fn new(inner: axum::body::Body, within: std::time::Duration) -> Timed {
        Timed {
            inner,
            deadline: tokio::time::Instant::now() + within,
            timer: None,
            within,
        }
    }
}

impl axum::body::HttpBody for Timed {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        // What has arrived is taken first, so a body that ended in time is
        // never cut by a deadline passing while it is read.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.within))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// axum middleware for every route: the request's body is [`Timed`] by
/// `[gateway] body_read_timeout`, counted from now (its head was just
/// read). A refused request (any `4xx` or `5xx`) is noted for the memory
/// trimmer, as a call is ([`crate::memory`]): a burst of requests refused
/// before any call (late bodies, say) hands its connections' buffers back
/// too.
pub async fn body_deadline(
    State(gw): State<std::sync::Arc<crate::Gateway>>,
    request: Request,
    next: Next,
) -> Response {
    let within = gw.config().gateway.body_read_timeout;
    let response = next
        .run(request.map(|body| axum::body::Body::new(Timed::new(body, within))))
        .await;
    if response.status().is_client_error() || response.status().is_server_error() {
        gw.note_call();
    }
    response
}

/// Whether `error` is, or was caused by, a [`Timed`] body's deadline.
pub(crate) fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(error);
    while let Some(e) = at {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        at = e.source();
    }
    false
}

/// Reads and drops what is left of a refused request's body, in the
/// background, up to `limit` bytes and no longer than its deadline
/// ([`Timed`]): the answer goes out at once, and the client is not reset
/// (closing a socket with unread bytes makes the kernel send a reset,
/// which can reach the client before the answer does). Nothing read is
/// kept. When it is over (and the connection with it), the gateway's
/// memory trimmer is told, as after a call ([`crate::memory`]): a flood
/// of refused connections hands its buffers back once it has passed.
pub fn discard_body(gw: std::sync::Arc<crate::Gateway>, body: axum::body::Body, limit: usize) {
    tokio::spawn(async move {
        let mut stream = body.into_data_stream();
        let mut seen = 0usize;
        while let Some(Ok(chunk)) = stream.next().await {
            seen = seen.saturating_add(chunk.len());
            if seen > limit {
                break;
            }
        }
        gw.note_call();
    });
}

/// The answer to a body that could not be read: `408` when its deadline
/// passed (`body_timeout`), else `400` (the client went away mid-body);
/// a JSON-RPC error either way, with the request's `id` when it was seen.
pub fn unreadable_body(
    error: &axum::Error,
    id: Option<Value>,
    within: std::time::Duration,
) -> Response {
    let (status, code, message) = if timed_out(error) {
        tracing::info!("HTTP request body not received within body_read_timeout ({within:?}): cut");
        (
            StatusCode::REQUEST_TIMEOUT,
            Some(plangate_core::AccessCode::BodyTimeout),
            format!(
                "the request body did not arrive within {} ([gateway] body_read_timeout): send the whole message at once, or ask the operator to allow more time",
                plangate_config::format_duration(within)
            ),
        )
    } else {
        (
            StatusCode::BAD_REQUEST,
            None,
            "plangate could not read the request body (the connection ended before it did): send the request again".to_owned(),
        )
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": ErrorCode::INVALID_REQUEST.0,
            "message": message,
            "data": code.map(|c| json!({"code": c})),
        },
    });
    let mut response = (status, axum::Json(body)).into_response();
    // What is left of the body is not waited for.
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}
