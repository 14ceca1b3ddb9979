//! One `tools/call` of a catalog tool once its tool is resolved
//! ([`ToolCall`]), as every step of the pipeline passes it along. Apart
//! from the pipeline that makes it ([`super::call`]) so the steps it hands
//! the call to — the decision ([`super::judge`]), the record, the ask —
//! name it without depending on the pipeline.

use std::time::Instant;

use rmcp::RoleServer;
use rmcp::service::RequestContext;

use crate::CatalogTool;
use crate::auth::Caller;

/// One `tools/call` of a catalog tool once its tool is resolved: who
/// calls, what, since when, and the request it came in. Every refusal
/// from there on is metered, logged and on the record.
#[derive(Clone, Copy)]
pub(super) struct ToolCall<'a> {
    pub(super) caller: &'a Caller,
    pub(super) tool: &'a CatalogTool,
    pub(super) started: Instant,
    pub(super) cx: &'a RequestContext<RoleServer>,
    /// The progress already sent under the request's token (a question's
    /// heartbeat): what the upstream's progress is counted above, as MCP
    /// wants each value above the last.
    pub(super) progress_sent: f64,
}
