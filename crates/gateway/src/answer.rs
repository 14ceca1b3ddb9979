//! How a typed answer becomes an MCP tool result: its JSON as
//! `structuredContent`, and one text block a person or agent reads
//! (docs/design.md §5). Below [`crate::refusal`] and every module that
//! answers a tool call (plan, the gateway's tools, review, apply), which all
//! build their results here.

use plangate_core::Code;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

/// A typed answer as a tool result: `structuredContent` = `view`'s JSON,
/// `content` = `text`.
pub fn structured<T: serde::Serialize>(view: &T, text: String) -> CallToolResult {
    let body = serde_json::to_value(view).unwrap_or_else(|e| {
        // Every view is strings, numbers and JSON already parsed: this
        // cannot happen, and if it did the agent must not get half an answer.
        tracing::error!("serialising an answer: {e}");
        json!({"code": Code::InternalError, "message": "plangate could not write its answer; see its log"})
    });
    with_text(body, text, false)
}

/// A tool result carrying `body` as `structuredContent` and `text` as its
/// one content block. Built directly rather than with rmcp's
/// `CallToolResult::structured`, which also writes the whole body out as
/// JSON text — work thrown away when the text is replaced by the summary,
/// and on every planned write and `get_plan` the largest answer there is.
pub fn with_text(body: Value, text: String, is_error: bool) -> CallToolResult {
    let content = vec![ContentBlock::text(text)];
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(body);
    result
}
