//! A minimal MCP server for race and crash trials: its one write tool,
//! `bump {n, ms?}`, appends every delivery it receives — the argument and
//! the operation key plangate sends — as one JSON line to a log file
//! (synced before answering), then answers after `ms` milliseconds. Tests
//! compare that log with what plangate recorded: every step must reach it
//! at most once.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// The counting server.
#[derive(Clone)]
pub struct Counter {
    log: Arc<PathBuf>,
}

impl Counter {
    /// A counter appending deliveries to `log`.
    pub fn new(log: PathBuf) -> Counter {
        Counter { log: Arc::new(log) }
    }
}

impl ServerHandler for Counter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "ms": {"type": "integer", "minimum": 0}},
            "required": ["n"]
        });
        let annotations = ToolAnnotations::default()
            .read_only(false)
            .destructive(false)
            .idempotent(false);
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "bump",
                "Records one delivery of n, then answers after ms milliseconds.",
                schema.as_object().cloned().unwrap_or_default(),
            )
            .with_annotations(annotations),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let op = cx
            .meta
            .get("dev.plangate/operation_key")
            .cloned()
            .unwrap_or(Value::Null);
        let line = json!({"n": args["n"], "op": op, "pid": std::process::id()}).to_string();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log.as_path())
            .and_then(|mut f| {
                f.write_all(format!("{line}\n").as_bytes())?;
                f.sync_data()
            });
        if let Err(e) = written {
            return Ok(CallToolResult::structured_error(
                json!({"message": format!("cannot record the delivery: {e}")}),
            )
            .into());
        }
        if let Some(ms) = args["ms"].as_u64() {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        Ok(CallToolResult::structured(json!({"n": args["n"], "recorded": true})).into())
    }
}

/// Serves the counter over stdin/stdout until the client disconnects.
pub async fn serve_stdio(log: PathBuf) -> anyhow::Result<()> {
    let running = Counter::new(log).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
