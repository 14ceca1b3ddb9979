//! The stable refusal codes of docs/design.md §8.
//!
//! A refusal is a tool result with `isError: true` and one of these codes.
//! Agents, scripts and tests branch on them, so the strings never change:
//! one enum owns them and every edge (gateway, CLI, console) names a refusal
//! through it instead of spelling the string again.

use crate::closed_names::closed_names;

use serde::{Deserialize, Serialize};

/// Why plangate refused a call; serialized as its snake_case string.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// An anonymous caller tried to write: planning needs an API key.
    PlanNeedsKey,
    /// The plan already holds the configured maximum of steps.
    PlanFull,
    /// The `plan_digest` given to apply no longer matches the plan.
    PlanChanged,
    /// The plan's life ran out; its waiting steps expired.
    PlanExpired,
    /// Another apply of the same plan is running.
    ApplyInProgress,
    /// The key's scope does not allow the call.
    Forbidden,
    /// The mode in force refuses calls above its access.
    ForbiddenByMode,
    /// An operator's rule (`[[rules]]`, outcome `refuse`) refuses the call;
    /// the refusal names the rule and carries its message.
    ForbiddenByRule,
    /// The arguments are not valid for the tool (schema, unsafe integers).
    InvalidArguments,
    /// The target changed since the step was planned (tool, schema, effect,
    /// preview version).
    StaleTarget,
    /// A call was sent and no answer came (a timeout, a connection closed
    /// mid-call): it may have taken effect — check before calling again.
    UpstreamUnavailable,
    /// A plan-mode tool was called while no plan-like mode is in force.
    NotInPlanMode,
    /// The person did not approve.
    ReviewDeclined,
    /// The client cannot be asked (no elicitation, stateless transport).
    ElicitationUnsupported,
    /// An operator (or config) locked the key's mode: the agent cannot
    /// change it, end the session or leave plan mode; only an operator can
    /// unlock it.
    ModeLocked,
    /// The tool's definition is new or changed since it was pinned; an
    /// operator must accept it first.
    ToolQuarantined,
    /// A per-key or per-tool rate limit was reached; the refusal says when
    /// to try again.
    RateLimited,
    /// A call, a step or a plan over its configured cap (a plan past
    /// `max_plan_bytes`); the same word as the front's
    /// [`AccessCode::TooLarge`], for the same thing one level up.
    TooLarge,
    /// plangate's own store could not be read or written: plangate's
    /// failure, never the upstream's.
    StoreUnavailable,
    /// An act that widens what runs (an approval, a person's apply, an
    /// unlock…) needs a factor only the person holds — a TOTP code — and
    /// none was given, or the one given was wrong (docs/design.md §12).
    FactorRequired,
    /// The key's event log does not verify (a row changed or added outside
    /// plangate: its hash chain or signature breaks, docs/design.md §6):
    /// nothing is applied from it until a person looks
    /// (`plangate audit verify`).
    TamperedLog,
    /// A person's apply would run some steps and leave behind a waiting
    /// step tied to one of them (the same target, or a name it moves or
    /// removes: docs/design.md §5, "Partial applies"); nothing ran. Apply
    /// them together, or say it is meant (`--partial`, the console's
    /// confirmation).
    PartialApply,
    /// The upstream is not connected (it is down, and why is said): nothing
    /// was sent, so nothing happened there; the other upstreams serve.
    UpstreamDown,
    /// Something in plangate itself failed (no randomness, a signing
    /// failure): plangate's failure, never the upstream's.
    InternalError,
}

impl Code {
    /// Every code, in docs/design.md §8 order; for docs, catalogs and tests.
    pub const ALL: [Code; 24] = [
        Code::PlanNeedsKey,
        Code::PlanFull,
        Code::PlanChanged,
        Code::PlanExpired,
        Code::ApplyInProgress,
        Code::Forbidden,
        Code::ForbiddenByMode,
        Code::ForbiddenByRule,
        Code::InvalidArguments,
        Code::StaleTarget,
        Code::UpstreamUnavailable,
        Code::NotInPlanMode,
        Code::ReviewDeclined,
        Code::ElicitationUnsupported,
        Code::ModeLocked,
        Code::ToolQuarantined,
        Code::RateLimited,
        Code::TooLarge,
        Code::StoreUnavailable,
        Code::FactorRequired,
        Code::TamperedLog,
        Code::PartialApply,
        Code::UpstreamDown,
        Code::InternalError,
    ];

    /// The stable string carried in a refusal's `code`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::PlanNeedsKey => "plan_needs_key",
            Code::PlanFull => "plan_full",
            Code::PlanChanged => "plan_changed",
            Code::PlanExpired => "plan_expired",
            Code::ApplyInProgress => "apply_in_progress",
            Code::Forbidden => "forbidden",
            Code::ForbiddenByMode => "forbidden_by_mode",
            Code::ForbiddenByRule => "forbidden_by_rule",
            Code::InvalidArguments => "invalid_arguments",
            Code::StaleTarget => "stale_target",
            Code::UpstreamUnavailable => "upstream_unavailable",
            Code::NotInPlanMode => "not_in_plan_mode",
            Code::ReviewDeclined => "review_declined",
            Code::ElicitationUnsupported => "elicitation_unsupported",
            Code::ModeLocked => "mode_locked",
            Code::ToolQuarantined => "tool_quarantined",
            Code::RateLimited => "rate_limited",
            Code::TooLarge => "too_large",
            Code::StoreUnavailable => "store_unavailable",
            Code::FactorRequired => "factor_required",
            Code::TamperedLog => "tampered_log",
            Code::PartialApply => "partial_apply",
            Code::UpstreamDown => "upstream_down",
            Code::InternalError => "internal_error",
        }
    }
}

impl Code {
    /// The HTTP status of an HTTP answer that carries this code (the web
    /// console's API): declared here once, so no edge picks its own.
    /// plangate's own failures are 5xx, never a conflict.
    pub fn http_status(self) -> u16 {
        match self {
            Code::PlanNeedsKey => 401,
            Code::Forbidden
            | Code::ForbiddenByMode
            | Code::ForbiddenByRule
            | Code::FactorRequired => 403,
            Code::InvalidArguments | Code::ElicitationUnsupported => 400,
            Code::PlanExpired => 410,
            Code::PlanFull
            | Code::PlanChanged
            | Code::ApplyInProgress
            | Code::StaleTarget
            | Code::NotInPlanMode
            | Code::ReviewDeclined
            | Code::ModeLocked
            | Code::ToolQuarantined
            | Code::TamperedLog
            | Code::PartialApply => 409,
            Code::TooLarge => 413,
            Code::RateLimited => 429,
            Code::InternalError => 500,
            Code::UpstreamUnavailable | Code::UpstreamDown | Code::StoreUnavailable => 503,
        }
    }

    /// The JSON-RPC error code of a refusal that answers a request with no
    /// tool result to carry it (a resource read, a prompt, a completion):
    /// bad arguments are invalid params, a cap is an invalid request, the
    /// rest an internal error — each with `data.code` ([`Code::error_data`]).
    pub fn jsonrpc_code(self) -> i32 {
        match self {
            Code::InvalidArguments => -32602,
            Code::TooLarge => -32600,
            _ => -32603,
        }
    }

    /// The `data` of a JSON-RPC error that carries this code:
    /// `{"code": "<code>"}`, the one shape every such error has.
    pub fn error_data(self) -> serde_json::Value {
        serde_json::json!({ "code": self.as_str() })
    }
}

/// The one body of an HTTP answer that refuses: `{"error": code,
/// "message": …}`, for the console's API and the front door alike, with
/// the HTTP status its code declares (not serialized).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    /// The HTTP status the code declares.
    #[serde(skip)]
    pub status: u16,
    /// The stable code ([`Code`] or [`AccessCode`] string).
    pub error: &'static str,
    /// What happened and what to do next, for a person.
    pub message: String,
}

impl ErrorBody {
    /// A refusal's body.
    pub fn new(code: Code, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            status: code.http_status(),
            error: code.as_str(),
            message: message.into(),
        }
    }

    /// A front-door refusal's body.
    pub fn access(code: AccessCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            status: code.http_status(),
            error: code.as_str(),
            message: message.into(),
        }
    }
}

closed_names!(Code, parse: ParseCodeError, "refusal code", "");

/// The codes of refusals that come before MCP — an HTTP answer from the
/// gateway's front door or the web console, not a tool result — so they
/// are not docs/design.md §8's [`Code`]s, but they are as stable: clients and
/// scripts branch on them (each variant names its HTTP status).
/// A refusal that is plangate's own failure uses [`Code::StoreUnavailable`]
/// or [`Code::InternalError`] on every channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessCode {
    /// No API key, and anonymous callers may not (401).
    KeyRequired,
    /// The key presented is unknown or revoked (401).
    InvalidKey,
    /// A caller other than the session's owner used its session (403).
    SessionKeyMismatch,
    /// The request body is over `max_request_bytes` (413, or JSON-RPC
    /// -32600 with `data.code`).
    TooLarge,
    /// The request body did not arrive whole within `body_read_timeout`
    /// (408, with a JSON-RPC error -32600 carrying `data.code`).
    BodyTimeout,
    /// The `Host` header is not in `allowed_hosts` (403).
    ForbiddenHost,
    /// The console needs an operator session (401).
    Unauthorized,
    /// A console request from another site (403).
    CrossSiteRequest,
    /// A console POST without its session's CSRF token (403).
    CsrfTokenInvalid,
    /// An OAuth access token that is not valid here: malformed, expired,
    /// for another resource, from an issuer not trusted, badly signed, or
    /// its identity revoked (401).
    InvalidToken,
    /// A valid OAuth access token whose scopes map to no plangate scope
    /// (403).
    InsufficientScope,
    /// A trusted authorization server's keys could not be fetched to check
    /// a token (503).
    IssuerUnavailable,
    /// A path plangate does not serve, such as OAuth metadata when OAuth is
    /// not configured (404).
    NotFound,
}

impl AccessCode {
    /// Every access code.
    pub const ALL: [AccessCode; 13] = [
        AccessCode::KeyRequired,
        AccessCode::InvalidKey,
        AccessCode::SessionKeyMismatch,
        AccessCode::TooLarge,
        AccessCode::BodyTimeout,
        AccessCode::ForbiddenHost,
        AccessCode::Unauthorized,
        AccessCode::CrossSiteRequest,
        AccessCode::CsrfTokenInvalid,
        AccessCode::InvalidToken,
        AccessCode::InsufficientScope,
        AccessCode::IssuerUnavailable,
        AccessCode::NotFound,
    ];

    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessCode::KeyRequired => "key_required",
            AccessCode::InvalidKey => "invalid_key",
            AccessCode::SessionKeyMismatch => "session_key_mismatch",
            AccessCode::TooLarge => "too_large",
            AccessCode::BodyTimeout => "body_timeout",
            AccessCode::ForbiddenHost => "forbidden_host",
            AccessCode::Unauthorized => "unauthorized",
            AccessCode::CrossSiteRequest => "cross_site_request",
            AccessCode::CsrfTokenInvalid => "csrf_token_invalid",
            AccessCode::InvalidToken => "invalid_token",
            AccessCode::InsufficientScope => "insufficient_scope",
            AccessCode::IssuerUnavailable => "issuer_unavailable",
            AccessCode::NotFound => "not_found",
        }
    }
}

impl AccessCode {
    /// The HTTP status of the answer that carries this code, declared once
    /// (each variant's doc names it too).
    pub fn http_status(self) -> u16 {
        match self {
            AccessCode::KeyRequired
            | AccessCode::InvalidKey
            | AccessCode::Unauthorized
            | AccessCode::InvalidToken => 401,
            AccessCode::SessionKeyMismatch
            | AccessCode::ForbiddenHost
            | AccessCode::CrossSiteRequest
            | AccessCode::CsrfTokenInvalid
            | AccessCode::InsufficientScope => 403,
            AccessCode::BodyTimeout => 408,
            AccessCode::NotFound => 404,
            AccessCode::TooLarge => 413,
            AccessCode::IssuerUnavailable => 503,
        }
    }
}

closed_names!(AccessCode);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_codes_serialize_as_their_strings_and_never_reuse_a_refusal_code() {
        for code in AccessCode::ALL {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::String(code.as_str().to_owned())
            );
            // `too_large` is one cap's word at both levels (docs/design.md §8).
            if code != AccessCode::TooLarge {
                assert!(code.as_str().parse::<Code>().is_err(), "{code}");
            }
        }
    }

    #[test]
    fn plangates_own_failures_are_never_answered_as_a_conflict_or_bad_input() {
        for code in Code::ALL {
            let status = code.http_status();
            assert!((400..600).contains(&status), "{code}");
            let own = matches!(
                code,
                Code::StoreUnavailable
                    | Code::InternalError
                    | Code::UpstreamUnavailable
                    | Code::UpstreamDown
            );
            assert_eq!(own, status >= 500, "{code} answers {status}");
            assert_eq!(code.error_data()["code"], code.as_str());
        }
        assert_eq!(Code::InvalidArguments.jsonrpc_code(), -32602);
        assert_eq!(Code::StoreUnavailable.jsonrpc_code(), -32603);
    }

    #[test]
    fn every_code_serializes_as_its_stable_string_and_parses_back() {
        for code in Code::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().to_owned()));
            assert_eq!(serde_json::from_value::<Code>(json).unwrap(), code);
            assert_eq!(code.to_string().parse::<Code>(), Ok(code));
        }
        assert!("plan-full".parse::<Code>().is_err());
    }

    /// The first round's codes, then the later rounds' as they land
    /// (docs/design.md §8, §12).
    #[test]
    fn the_codes_are_exactly_those_of_design_section_8() {
        let names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "plan_needs_key",
                "plan_full",
                "plan_changed",
                "plan_expired",
                "apply_in_progress",
                "forbidden",
                "forbidden_by_mode",
                "forbidden_by_rule",
                "invalid_arguments",
                "stale_target",
                "upstream_unavailable",
                "not_in_plan_mode",
                "review_declined",
                "elicitation_unsupported",
                "mode_locked",
                "tool_quarantined",
                "rate_limited",
                "too_large",
                "store_unavailable",
                "factor_required",
                "tampered_log",
                "partial_apply",
                "upstream_down",
                "internal_error",
            ]
        );
    }
}
