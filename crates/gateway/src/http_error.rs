//! The one HTTP answer of a refusal, for every HTTP face (the front door,
//! the session guard, the web console): the body is core's [`ErrorBody`],
//! whose code declares the status. Below every face, so each can answer
//! through it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plangate_core::ErrorBody;

/// `{"error": code, "message": …}` with the status the code declares
/// ([`plangate_core::Code::http_status`], [`plangate_core::AccessCode::http_status`]).
pub(crate) fn respond(body: ErrorBody) -> Response {
    let status = StatusCode::from_u16(body.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}
