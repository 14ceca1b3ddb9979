//! The web console (docs/design.md §7): a person approves, discards and retries
//! every key's plan from a browser, while the agent waits.
//!
//! Served by `plangate serve --http` at `/console`, behind an **operator
//! token** (`plangate operator token`), never an API key: the two kinds
//! live in separate tables with separate prefixes, so neither can stand in
//! for the other, and `/mcp` never accepts an operator token.
//!
//! Why it is built this way:
//!
//! * **Sessions any replica can verify.** Logging in sets an HttpOnly,
//!   `SameSite=Strict`, `Path=/console` cookie holding the token's id, an
//!   expiry and a nonce, signed (HMAC-SHA256) with the signing key every
//!   replica shares (`PLANGATE_SIGNING_KEY`). Nothing is kept in memory, and
//!   every request looks the token up again, so a revoked token stops
//!   working at its next request, on every replica. Logging out records
//!   the session as ended in the store (by the SHA-256 of its nonce, until
//!   it would have expired), and every request asks that too: a cookie
//!   copied before the logout and replayed after it is refused on every
//!   replica, while the operator's other sessions go on.
//! * **CSRF-safe.** Every state-changing request is a `POST` whose JSON body
//!   comes with a per-session CSRF token in the `X-Plangate-CSRF` header — a
//!   header no cross-site form can send — and passes an origin check first:
//!   a browser's `Sec-Fetch-Site` must say `same-origin` (or, where a browser
//!   sends none, `Origin` must be this very origin: another port on the same
//!   host is another origin, though the same site).
//!   A refused request records nothing.
//! * **The same rendering discipline as the MCP Apps view**: one
//!   self-contained page, compiled in, with no external asset; every value
//!   is set through DOM text APIs, never parsed as markup; a strict CSP pins
//!   the one inline script and style by hash (computed here from the bytes
//!   served, so it cannot drift), forbids framing and allows forms and
//!   fetches only to this origin.
//! * **One set of rules.** Approve, discard and retry go through
//!   [`crate::operator`], the code behind `plangate plans`, recorded as
//!   `Actor::Operator { name }` (the token's name) over `Channel::Console`.
//!   Approve binds the digest the person saw: if the plan changed since,
//!   the answer is `plan_changed` and nothing is recorded.
//!
//! Tokens, cookies and sealed arguments never appear in a log line or an
//! answer; JSON answers carry a stable `error` code (docs/design.md §8 where one
//! fits) and a message.

use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json};
use plangate_core::{AccessCode, Code, ErrorBody, hmac_hex};
use plangate_store::{OperatorToken, now_ms};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

use crate::Gateway;

mod api;
mod batch;
mod history;
mod keys;
mod logs;
mod mode;
mod passkey;
mod people;
mod poll;

/// The session cookie's name.
pub const COOKIE: &str = "plangate_console";
/// The header that must carry the session's CSRF token on every `POST`.
pub const CSRF_HEADER: &str = "x-plangate-csrf";
/// How long a console session lasts after logging in.
pub const SESSION_MS: i64 = 12 * 3600 * 1000;

/// The console page, byte for byte.
pub const CONSOLE_HTML: &str = include_str!("console.html");
/// The login page; `<!--MESSAGE-->` becomes the (escaped) outcome.
pub const LOGIN_HTML: &str = include_str!("login.html");

/// The routes under `/console`, to merge into the gateway's router.
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/console", get(page))
        .route("/console/", get(page))
        .route("/console/login", post(login))
        .route("/console/logout", post(logout))
        .route("/console/api/state", get(poll::state))
        .route("/console/api/plan", get(poll::plan))
        .route("/console/api/keys", post(api::create_key).get(keys::list))
        .route("/console/api/keys/revoke", post(keys::revoke))
        .route("/console/api/mode", post(mode::set))
        .route(
            "/console/api/approvals",
            get(people::show).post(people::require),
        )
        .route("/console/api/operators", get(people::list))
        .route("/console/api/operators/enroll", post(people::enroll))
        .route("/console/api/operators/remove", post(people::remove))
        .route("/console/api/operators/token", post(people::token))
        .route("/console/api/operators/revoke", post(people::revoke))
        .route("/console/api/tools", get(logs::tools))
        .route("/console/api/policy/test", post(logs::policy_test))
        .route("/console/api/audit/verify", get(logs::verify))
        .route("/console/api/audit/export", get(logs::export))
        .route("/console/api/audit/public-key", get(logs::public_key))
        .route("/console/passkey", get(passkey::page))
        .route("/console/api/passkey/options", post(passkey::options))
        .route("/console/api/passkey/register", post(passkey::register))
        .route("/console/api/passkey/challenge", post(passkey::challenge))
        .route("/console/api/approve", post(api::approve))
        .route("/console/api/discard", post(api::discard))
        .route("/console/api/plans/approve", post(batch::approve))
        .route("/console/api/plans/discard", post(batch::discard))
        .route("/console/api/retry", post(api::retry))
        .route("/console/api/tool", post(api::tool_decision))
        .route("/console/api/apply", post(api::apply))
        .route("/console/api/reject", post(api::reject))
        .route("/console/api/amend", post(api::amend))
        .route("/console/api/revert", post(api::revert))
        .route("/console/api/step", get(api::step_form))
        .route("/console/api/diff", get(history::diff))
        .route("/console/api/history", get(history::history))
}

// === headers ===

/// `'sha256-…'` of the text between `open` and `close` in `doc`.
fn pin(doc: &str, open: &str, close: &str) -> String {
    use base64::Engine as _;
    let body = doc
        .split_once(open)
        .and_then(|(_, rest)| rest.split_once(close))
        .map(|(body, _)| body)
        .unwrap_or_default();
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body.as_bytes()));
    format!("'sha256-{hash}'")
}

/// The CSP of a page whose inline script and style are those of `doc`.
fn csp_for(doc: &str) -> String {
    let script = if doc.contains("<script>") {
        pin(doc, "<script>", "</script>")
    } else {
        "'none'".to_owned()
    };
    format!(
        "default-src 'none'; script-src {script}; style-src {}; connect-src 'self'; img-src 'none'; font-src 'none'; media-src 'none'; object-src 'none'; frame-src 'none'; child-src 'none'; worker-src 'none'; manifest-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        pin(doc, "<style>", "</style>")
    )
}

static CONSOLE_CSP: LazyLock<String> = LazyLock::new(|| csp_for(CONSOLE_HTML));
static LOGIN_CSP: LazyLock<String> = LazyLock::new(|| csp_for(LOGIN_HTML));

/// Headers every console answer carries: nothing cached, sniffed, framed
/// or referred.
fn harden(mut response: Response, csp: &str) -> Response {
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

fn html(status: StatusCode, body: String, csp: &str) -> Response {
    let response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response();
    harden(response, csp)
}

/// Why a console API request did not go on: one stable code, the HTTP
/// status that code declares ([`Code::http_status`],
/// [`AccessCode::http_status`]), one message — the one error body
/// ([`ErrorBody`]: `{"error": code, "message": …}`). Every check and every
/// handler of the API answers through it.
#[derive(Debug)]
pub struct ConsoleError(ErrorBody);

impl ConsoleError {
    /// A refusal with a docs/design.md §8 code.
    fn refusal(code: Code, message: impl Into<String>) -> ConsoleError {
        ConsoleError(ErrorBody::new(code, message))
    }

    /// A refusal at the door (session, host, CSRF).
    fn access(code: AccessCode, message: impl Into<String>) -> ConsoleError {
        ConsoleError(ErrorBody::access(code, message))
    }

    fn store_down() -> ConsoleError {
        ConsoleError::refusal(
            Code::StoreUnavailable,
            "plangate cannot read its store; see the gateway's log",
        )
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        harden(crate::http_error::respond(self.0), "default-src 'none'")
    }
}

fn ok_json(body: Value) -> Response {
    ok_typed(&body)
}

/// A typed answer of the API: the operation's own result type, serialized
/// as every other face sees it.
fn ok_typed<T: serde::Serialize>(body: &T) -> Response {
    harden(
        (StatusCode::OK, Json(body)).into_response(),
        "default-src 'none'",
    )
}

fn login_page(status: StatusCode, message: &str) -> Response {
    let body = LOGIN_HTML.replace("<!--MESSAGE-->", &crate::apps::escape_html(message));
    html(status, body, &LOGIN_CSP)
}

// === request checks ===

/// Whether a state-changing request comes from this origin. A browser's
/// `Sec-Fetch-Site` (which pages cannot forge) must be `same-origin`.
/// Without it (an older browser), an `Origin` must be `http(s)://` + this
/// request's `Host` — `null` is refused. With neither, the request is no
/// browser's (curl, a script), and the CSRF header still has to match.
/// (`Origin` is not required when `Sec-Fetch-Site` is there: under the
/// console's `Referrer-Policy: no-referrer` a browser sends `Origin: null`
/// even for its own same-origin `POST`s.)
fn same_origin(headers: &HeaderMap) -> bool {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site") {
        return site == "same-origin";
    }
    match get("origin") {
        None => true,
        Some(origin) => {
            let host = get("host").unwrap_or_default();
            !host.is_empty()
                && (origin == format!("http://{host}") || origin == format!("https://{host}"))
        }
    }
}

/// Constant-time equality of two strings' bytes (a MAC or CSRF token
/// against the expected one), through `subtle`.
fn same(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// The console's session cookie from the request's `Cookie` headers. Its
/// one cookie is a signed `id.expiry.nonce.mac` of URL-safe characters, so
/// splitting on `;` and `=` reads it; a cookie crate would add a
/// dependency for these few lines.
fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

// === sessions ===

/// A verified console session: who is logged in, the session's CSRF
/// token, and what names it in the store (to end it).
struct Session {
    operator: OperatorToken,
    csrf: String,
    /// The SHA-256 (hex) of the cookie's nonce: the session's name in the
    /// store ([`plangate_store::Credentials::end_console_session`]).
    id: String,
    /// When it expires, in ms since the epoch.
    expires_at_ms: i64,
    /// Whether the operator token came as `Authorization: Bearer` (the
    /// CLI's `--server`), not from a logged-in page: no cookie, so no CSRF
    /// to check — a browser never sends that header on its own, and a
    /// cross-origin page cannot add it without a CORS preflight this
    /// server never grants.
    bearer: bool,
    /// Where the request came: the console's origin (`http://HOST`) and
    /// its host name, a passkey's relying party.
    place: Place,
}

/// The console's origin and host name, from the request's `Host` (and
/// `X-Forwarded-Proto` behind a TLS proxy): where a passkey ceremony must
/// have happened.
#[derive(Debug, Clone, Default)]
struct Place {
    origin: String,
    rp_id: String,
}

impl Place {
    fn of(headers: &HeaderMap) -> Place {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let https = headers
            .get("x-forwarded-proto")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
        let rp_id = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        Place {
            origin: format!("{}://{host}", if https { "https" } else { "http" }),
            rp_id: rp_id.to_owned(),
        }
    }

    fn party(&self) -> plangate_core::passkey::Party<'_> {
        plangate_core::passkey::Party {
            rp_id: &self.rp_id,
            origin: &self.origin,
        }
    }
}

fn session_mac(gw: &Gateway, body: &str) -> String {
    hmac_hex(
        gw.material().signing_key(),
        format!("plangate-console-session\0{body}").as_bytes(),
    )
}

fn csrf_of(gw: &Gateway, cookie: &str) -> String {
    hmac_hex(
        gw.material().signing_key(),
        format!("plangate-console-csrf\0{cookie}").as_bytes(),
    )
}

/// A new session cookie value for `operator`: `id.expiry.nonce.mac`.
fn new_session(gw: &Gateway, operator: &OperatorToken) -> Option<String> {
    let nonce = plangate_store::new_id("").ok()?;
    let body = format!("{}.{}.{nonce}", operator.id, now_ms() + SESSION_MS);
    let mac = session_mac(gw, &body);
    Some(format!("{body}.{mac}"))
}

/// Why a request has no session.
enum NoSession {
    /// No cookie, a forged or expired one, or a revoked token.
    Invalid,
    /// The store could not be asked.
    StoreDown,
    /// An `Authorization` header whose operator token is unknown, revoked
    /// or not a bearer token.
    BadToken,
}

/// Verifies the request's session cookie (signature, expiry) and that its
/// token is still active — on every request.
async fn session(gw: &Gateway, headers: &HeaderMap) -> Result<Session, NoSession> {
    if let Some(token) = bearer_token(headers) {
        return bearer_session(gw, token?, headers).await;
    }
    let cookie = cookie_value(headers).ok_or(NoSession::Invalid)?;
    let (body, mac) = cookie.rsplit_once('.').ok_or(NoSession::Invalid)?;
    if !same(&session_mac(gw, body), mac) {
        return Err(NoSession::Invalid);
    }
    let mut parts = body.split('.');
    let (Some(id), Some(expiry), Some(nonce), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(NoSession::Invalid);
    };
    let Some(expires_at_ms) = expiry.parse::<i64>().ok().filter(|t| *t > now_ms()) else {
        return Err(NoSession::Invalid);
    };
    let session_id = hex::encode(Sha256::digest(nonce.as_bytes()));
    let store = gw.store();
    // Both asked at once: a revoked token, or a session logged out.
    let operator = match tokio::try_join!(
        store.operator_token(id),
        store.console_session_ended(&session_id)
    ) {
        Ok((Some(op), false)) if op.is_active() => op,
        Ok(_) => return Err(NoSession::Invalid),
        Err(e) => {
            tracing::error!("console: operator store: {e}");
            return Err(NoSession::StoreDown);
        }
    };
    Ok(Session {
        operator,
        csrf: csrf_of(gw, &cookie),
        id: session_id,
        expires_at_ms,
        bearer: false,
        place: Place::of(headers),
    })
}

/// The operator token of an `Authorization: Bearer` header, if the
/// request has one (an error if it is not a bearer token at all).
fn bearer_token(headers: &HeaderMap) -> Option<Result<&str, NoSession>> {
    let value = headers.get(header::AUTHORIZATION)?;
    Some(
        value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(NoSession::BadToken),
    )
}

/// A session for one request that carries an operator token itself (the
/// CLI's `--server`): the token is looked up as at login, every time.
async fn bearer_session(
    gw: &Gateway,
    token: &str,
    headers: &HeaderMap,
) -> Result<Session, NoSession> {
    match gw.store().authenticate_operator(token).await {
        Ok(Some(operator)) => Ok(Session {
            operator,
            csrf: String::new(),
            id: String::new(),
            expires_at_ms: now_ms(),
            bearer: true,
            place: Place::of(headers),
        }),
        Ok(None) => {
            tracing::info!("console: an operator token was refused");
            Err(NoSession::BadToken)
        }
        Err(e) => {
            tracing::error!("console: operator store: {e}");
            Err(NoSession::StoreDown)
        }
    }
}

impl From<NoSession> for ConsoleError {
    fn from(why: NoSession) -> ConsoleError {
        match why {
            NoSession::Invalid => ConsoleError::access(
                AccessCode::Unauthorized,
                "no console session, or it ended (expired, logged out, or its operator token was revoked); log in again at /console",
            ),
            NoSession::StoreDown => ConsoleError::store_down(),
            NoSession::BadToken => ConsoleError::access(
                AccessCode::Unauthorized,
                "that operator token is unknown or revoked; a person creates one with `plangate operator token --name NAME` where the gateway's data dir is",
            ),
        }
    }
}

/// The first check of every console request: its `Host` is one of
/// `allowed_hosts`.
fn allowed_host(gw: &Gateway, headers: &HeaderMap) -> Result<(), ConsoleError> {
    if crate::hosts::host_allowed(gw, headers) {
        return Ok(());
    }
    Err(ConsoleError::access(
        AccessCode::ForbiddenHost,
        "this Host is not in allowed_hosts",
    ))
}

/// The extractor `$name(Session)`, whose session `$check` (an async fn
/// of the gateway and the request's headers) gives before the handler
/// runs — so no handler can forget a check.
macro_rules! person_extractor {
    ($name:ident, $check:path) => {
        impl FromRequestParts<Arc<Gateway>> for $name {
            type Rejection = ConsoleError;

            async fn from_request_parts(
                parts: &mut Parts,
                gw: &Arc<Gateway>,
            ) -> Result<$name, ConsoleError> {
                $check(gw, &parts.headers).await.map($name)
            }
        }
    };
}

/// A person reading the console (`GET` of the API).
struct Viewer(Session);
person_extractor!(Viewer, viewing);

/// An allowed host and a live session.
async fn viewing(gw: &Gateway, headers: &HeaderMap) -> Result<Session, ConsoleError> {
    allowed_host(gw, headers)?;
    Ok(session(gw, headers).await?)
}

/// A person acting through the console (every state-changing request).
struct Acting(Session);
person_extractor!(Acting, acting);

/// Allowed host, same origin, a live session and its CSRF token in the
/// header, in that order (a bearer operator token needs no CSRF token).
async fn acting(gw: &Gateway, headers: &HeaderMap) -> Result<Session, ConsoleError> {
    allowed_host(gw, headers)?;
    if bearer_token(headers).is_some() {
        return Ok(session(gw, headers).await?);
    }
    if !same_origin(headers) {
        return Err(ConsoleError::access(
            AccessCode::CrossSiteRequest,
            "refused: this request did not come from the console's own page; nothing was recorded",
        ));
    }
    let session = session(gw, headers).await?;
    let sent = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !same(sent, &session.csrf) {
        return Err(ConsoleError::access(
            AccessCode::CsrfTokenInvalid,
            "refused: the request lacks this session's CSRF token; reload the console. Nothing was recorded",
        ));
    }
    Ok(session)
}

/// A JSON request body, refused in the console's shape when it is not
/// what the endpoint takes.
struct Body<T>(T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequest<S> for Body<T> {
    type Rejection = ConsoleError;

    async fn from_request(
        request: axum::extract::Request,
        state: &S,
    ) -> Result<Body<T>, ConsoleError> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(e) => Err(ConsoleError::refusal(
                Code::InvalidArguments,
                format!(
                    "the request body is not what this endpoint takes: {}",
                    e.body_text()
                ),
            )),
        }
    }
}

// === pages ===

/// `GET /console`: the console for a live session, else the login form.
async fn page(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if !crate::hosts::host_allowed(&gw, &headers) {
        return login_page(StatusCode::FORBIDDEN, "This Host is not in allowed_hosts.");
    }
    match session(&gw, &headers).await {
        Ok(_) => html(StatusCode::OK, CONSOLE_HTML.to_owned(), &CONSOLE_CSP),
        Err(NoSession::StoreDown) => login_page(
            StatusCode::SERVICE_UNAVAILABLE,
            "plangate cannot read its store; see the gateway's log.",
        ),
        Err(NoSession::Invalid | NoSession::BadToken) => login_page(StatusCode::OK, ""),
    }
}

/// The login form's fields.
#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// `POST /console/login`: an operator token in, a session cookie out.
async fn login(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    if !crate::hosts::host_allowed(&gw, &headers) {
        return login_page(StatusCode::FORBIDDEN, "This Host is not in allowed_hosts.");
    }
    if !same_origin(&headers) {
        return login_page(
            StatusCode::FORBIDDEN,
            "Refused: this login did not come from the console's own page.",
        );
    }
    let Ok(Form(form)) = form else {
        return login_page(StatusCode::BAD_REQUEST, "Paste an operator token.");
    };
    let operator = match gw.store().authenticate_operator(form.token.trim()).await {
        Ok(Some(op)) => op,
        Ok(None) => {
            tracing::info!("console: login refused");
            return login_page(
                StatusCode::UNAUTHORIZED,
                "That is not a valid operator token. Create one with `plangate operator token --name NAME`.",
            );
        }
        Err(e) => {
            tracing::error!("console: operator store: {e}");
            return login_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "plangate cannot read its store; see the gateway's log.",
            );
        }
    };
    let Some(cookie) = new_session(&gw, &operator) else {
        return login_page(
            StatusCode::SERVICE_UNAVAILABLE,
            "plangate could not start a session (no randomness); see the gateway's log.",
        );
    };
    tracing::info!(operator = %operator.name, "console: logged in");
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let set = format!(
        "{COOKIE}={cookie}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_MS / 1000,
        if secure { "; Secure" } else { "" }
    );
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/console")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&set) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    harden(response, "default-src 'none'")
}

/// `POST /console/logout`: ends this session in the store, for every
/// replica, then has the browser forget the cookie; a copy of the cookie
/// replayed later is refused. The operator's other sessions, and the
/// token, stay valid (revoke the token to end every session).
async fn logout(State(gw): State<Arc<Gateway>>, Acting(session): Acting) -> Response {
    if session.bearer {
        // A token sent with each request has no session to end.
        return ok_json(json!({"success": true}));
    }
    if let Err(e) = gw
        .store()
        .end_console_session(&session.id, session.expires_at_ms)
        .await
    {
        tracing::error!("console: operator store: {e}");
        return ConsoleError::refusal(Code::StoreUnavailable,
            "plangate cannot record the logout in its store, so the session is still open; try again, or revoke the operator token to end all its sessions",
        )
        .into_response();
    }
    tracing::info!(operator = %session.operator.name, "console: logged out");
    let mut response = ok_json(json!({"success": true}));
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "plangate_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_pages_are_self_contained_and_render_text_only() {
        for (name, doc) in [("console", CONSOLE_HTML), ("login", LOGIN_HTML)] {
            crate::page_checks::assert_text_only(name, doc, &[]);
            let lower = doc.to_lowercase();
            assert!(lower.matches("<script").count() <= 1, "{name}");
            assert_eq!(lower.matches("<style").count(), 1, "{name}");
        }
    }

    #[test]
    fn the_csp_pins_the_served_script_and_style_and_forbids_framing() {
        let csp = csp_for(CONSOLE_HTML);
        assert!(csp.contains("script-src 'sha256-"), "{csp}");
        assert!(csp.contains("style-src 'sha256-"), "{csp}");
        for d in [
            "default-src 'none'",
            "frame-ancestors 'none'",
            "form-action 'self'",
            "connect-src 'self'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(d), "{d} missing from {csp}");
        }
        assert!(!csp.contains("unsafe"), "{csp}");
        assert!(csp_for(LOGIN_HTML).contains("script-src 'sha256-"));
    }

    #[test]
    fn only_this_origin_may_change_state() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_static(v));
            }
            m
        };
        assert!(same_origin(&h(&[("host", "127.0.0.1:7070")])));
        assert!(same_origin(&h(&[
            ("host", "127.0.0.1:7070"),
            ("origin", "http://127.0.0.1:7070"),
        ])));
        assert!(same_origin(&h(&[
            ("host", "127.0.0.1:7070"),
            ("origin", "null"),
            ("sec-fetch-site", "same-origin"),
        ])));
        for bad in [
            h(&[("host", "127.0.0.1:7070"), ("sec-fetch-site", "same-site")]),
            h(&[("host", "127.0.0.1:7070"), ("sec-fetch-site", "cross-site")]),
            h(&[
                ("host", "127.0.0.1:7070"),
                ("origin", "http://127.0.0.1:7071"),
            ]),
            h(&[("host", "127.0.0.1:7070"), ("origin", "null")]),
        ] {
            assert!(!same_origin(&bad), "{bad:?}");
        }
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut m = HeaderMap::new();
        m.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; plangate_console=x.y.z.m; b=2"),
        );
        assert_eq!(cookie_value(&m).as_deref(), Some("x.y.z.m"));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
