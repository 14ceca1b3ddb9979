//! What plangate's MCP server declares it can do ([`server_capabilities`]).
//! Apart from the server and below it, because the contract that
//! `plangate catalog` prints ([`crate::apps`]) states the same
//! capabilities without serving anything.

use rmcp::model::ServerCapabilities;

/// Everything plangate's server advertises: prompts, resources, tools (with
/// list changes) and the MCP Apps extension (`io.modelcontextprotocol/ui`)
/// for its plan review view. `plangate catalog` prints the same.
///
/// Logging, completions and resource subscriptions are relayed to the
/// upstreams that offer them ([`crate::notices`],
/// its `complete` handler): advertised always, since
/// upstreams come and go while a session lasts.
pub fn server_capabilities() -> ServerCapabilities {
    let mut caps = ServerCapabilities::builder()
        .enable_prompts()
        .enable_prompts_list_changed()
        .enable_resources()
        .enable_resources_list_changed()
        .enable_resources_subscribe()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_extensions_with(crate::app_view::extensions())
        .build();
    caps.logging = Some(Default::default());
    caps.completions = Some(Default::default());
    caps
}
