//! Refusals: the one place where a domain decision not to run a call
//! becomes an MCP answer (docs/design.md §8).
//!
//! A refusal is an ordinary tool result with `isError: true`, a stable
//! `code` and a message saying what to do next, so the agent can read it and
//! act. Protocol problems (an unknown tool) are JSON-RPC errors instead and
//! are built where they arise with rmcp's `ErrorData`.

use rmcp::model::CallToolResult;
use serde_json::json;

pub use plangate_core::Code;

/// A decision not to run a tool call, with what to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The stable code.
    pub code: Code,
    /// A sentence or two: what happened and what to do next.
    pub message: String,
    /// For `rate_limited`: how long until a call is allowed again.
    pub retry_after_ms: Option<u64>,
}

impl Refusal {
    /// A refusal with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
            retry_after_ms: None,
        }
    }

    /// plangate's own store could not be read or written (`store_unavailable`,
    /// never the upstream's fault): logged, and said with what to do next.
    pub fn store(e: impl std::fmt::Display, next: &str) -> Self {
        tracing::error!("event log: {e}");
        Refusal::new(
            Code::StoreUnavailable,
            format!("plangate could not read or write its event log ({e}); {next}"),
        )
    }

    /// Something in plangate itself failed (`internal_error`: no
    /// randomness, a signing failure), never the upstream's fault.
    pub fn internal(what: impl std::fmt::Display) -> Self {
        tracing::error!("internal error: {what}");
        Refusal::new(
            Code::InternalError,
            format!(
                "plangate failed internally ({what}); nothing was changed. See the gateway's log"
            ),
        )
    }

    /// The MCP tool result: `structuredContent` carries `{success: false,
    /// code, message}`, `content` the same as text, `isError: true`.
    pub fn into_result(self) -> CallToolResult {
        let mut body = json!({
            "success": false,
            "code": self.code.as_str(),
            "message": self.message,
        });
        if let Some(ms) = self.retry_after_ms {
            body["retry_after_ms"] = json!(ms);
        }
        let text = format!("{} ({})", self.message, self.code.as_str());
        crate::answer::with_text(body, text, true)
    }
}
