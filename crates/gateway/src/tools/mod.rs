//! The gateway's own tools (docs/design.md §5), under the configured prefix: their
//! definitions, their arguments ([`args`]), and the session tools
//! (`begin_session`, `get_plan`, `discard_plan`, `end_session`);
//! `apply_plan` is [`crate::apply`], `exit_plan_mode` [`crate::review`].
//! Every answer is an ordinary tool result: `structuredContent` carries the
//! JSON of docs/design.md §5, `content` the same facts as short text.

use std::sync::Arc;

use plangate_core::ModeSpec;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::Gateway;
use crate::refusal::Refusal;
use plangate_core::rules::Refused;

pub mod args;
mod session;

pub use crate::tool_names::GatewayTool;
pub use args::{Call, SessionCall};
pub use session::call;

/// `begin_session`'s schema: derived from its arguments, with the modes
/// this gateway defines as the values `mode` takes.
fn begin_session_schema(modes: &[String]) -> Arc<JsonObject> {
    let mut schema = args::schema_of::<args::BeginSession>();
    if let Some(Value::Object(mode)) = schema.get_mut("properties").and_then(|p| p.get_mut("mode"))
    {
        mode.insert("enum".into(), json!(modes));
    }
    Arc::new(schema)
}

/// The gateway tools a session lists: `exit_plan_mode` only while a
/// plan-like mode is in force (docs/design.md §4).
pub fn definitions(gw: &Gateway, plan_mode: bool) -> Vec<Tool> {
    definitions_for(&gw.config(), plan_mode)
}

/// The gateway tools a gateway built from `config` lists; the plan tools
/// (`get_plan`, `apply_plan`, `exit_plan_mode`) link the MCP Apps view
/// through `_meta.ui` ([`crate::app_view::tool_meta`]).
pub fn definitions_for(config: &plangate_config::Config, plan_mode: bool) -> Vec<Tool> {
    let prefix = &config.gateway.tool_prefix;
    let modes = config.modes.names();
    let name = |t: GatewayTool| format!("{prefix}{}", t.suffix());
    let annotations = |read_only: bool, destructive: bool, idempotent: bool, title: &str| {
        let mut a = ToolAnnotations::default().read_only(read_only);
        if !read_only {
            a = a.destructive(destructive).idempotent(idempotent);
        }
        let mut a = a.open_world(false);
        a.title = Some(title.to_owned());
        a
    };
    let mut tools = vec![
        Tool::new(
            name(GatewayTool::BeginSession),
            format!(
                "Start working in a mode and (re)start the plan's life. In a plan-like mode (e.g. \"plan\") reads run and every write becomes a plan step the person reviews; nothing is written until they say yes and {prefix}apply_plan runs. Modes: {}.",
                modes.join(", ")
            ),
            begin_session_schema(&modes),
        )
        .with_raw_output_schema(Arc::new(args::output_schema_of::<plangate_core::SessionAnswer>()))
        .with_annotations(annotations(false, false, true, "Begin a session in a mode")),
        Tool::new(
            name(GatewayTool::GetPlan),
            "Show the current plan: every step not yet done, with its status, predicted effect, where it lands and whether it needs the person's explicit yes, plus the plan digest. An argument value or preview over 64 KiB is shown by its size and digest; with step_id, that one step is shown whole. Changes nothing.",
            Arc::new(args::schema_of::<args::GetPlan>()),
        )
        .with_raw_output_schema(Arc::new(args::output_schema_of::<plangate_core::PlanView>()))
        .with_annotations(annotations(true, false, true, "Show the plan")),
        Tool::new(
            name(GatewayTool::DiscardPlan),
            "Discard every waiting step of the plan, or only the named ones (waiting, failed or in doubt). Nothing is written upstream.",
            Arc::new(args::schema_of::<args::DiscardPlan>()),
        )
        .with_raw_output_schema(Arc::new(args::output_schema_of::<plangate_core::DiscardAnswer>()))
        .with_annotations(annotations(false, false, true, "Discard plan steps")),
        Tool::new(
            name(GatewayTool::ApplyPlan),
            "Run the plan's waiting steps (or the named ones) in order, at most once each, after the person said yes; returns a receipt of what happened. Pass the plan_digest the person approved: if the plan changed since, nothing runs. Stops at the first failure unless continue_on_error.",
            Arc::new(args::schema_of::<args::ApplyPlan>()),
        )
        .with_raw_output_schema(Arc::new(args::output_schema_of::<plangate_core::Receipt>()))
        .with_annotations({
            let mut a = annotations(false, true, false, "Apply the approved plan");
            a.open_world_hint = Some(true);
            a
        }),
    ];
    if plan_mode {
        tools.push(
            Tool::new(
                name(GatewayTool::ExitPlanMode),
                "Ask the person to review your plan (your words plus the recorded steps) and say yes or keep planning.",
                Arc::new(args::schema_of::<args::ExitPlanMode>()),
            )
            .with_raw_output_schema(Arc::new(args::output_schema_of::<
                plangate_core::ExitPlanAnswer,
            >()))
            .with_annotations(annotations(false, false, false, "Ask the person to review the plan")),
        );
    }
    tools.push(
        Tool::new(
            name(GatewayTool::Revert),
            format!(
                "Propose undoing applied steps (every step of the last apply, or the named ones): each becomes a plan step that writes back, with the server's own tools, what the step replaced. Nothing is written now; the steps wait for the person like any plan, then {prefix}apply_plan runs them. A target changed since the apply is left as it is, and what cannot be undone is said."
            ),
            Arc::new(args::schema_of::<args::Revert>()),
        )
        .with_raw_output_schema(Arc::new(args::output_schema_of::<
            crate::operator::RevertAnswer,
        >()))
        .with_annotations(annotations(false, false, true, "Propose undoing applied steps")),
    );
    tools.push(
        Tool::new(
            name(GatewayTool::EndSession),
            "End the session: the mode returns to \"default\" and the plan's waiting steps are dropped.",
            Arc::new(args::schema_of::<args::EndSession>()),
        )
        .with_raw_output_schema(Arc::new(args::output_schema_of::<plangate_core::SessionEnded>()))
        .with_annotations(annotations(false, true, true, "End the session")),
    );
    for tool in &mut tools {
        if let Some(suffix) = tool.name.strip_prefix(prefix.as_str())
            && crate::app_view::links_view(suffix)
        {
            tool.meta = Some(crate::app_view::tool_meta(suffix));
        }
    }
    tools
}

/// An answer: `structuredContent` = `body`, `content` = `text`.
fn answer(body: Value, text: String) -> CallToolResult {
    crate::answer::with_text(body, text, false)
}

/// A log failure as a refusal that changes nothing.
pub(crate) fn log_failed(e: crate::key_log::LogError) -> Refusal {
    Refusal::store(e, "nothing was changed — try again")
}

/// A lock's refusal on a session tool: what happened, that `nothing` did,
/// and who can unlock.
pub(crate) fn locked(refused: &Refused, key_name: &str, nothing: &str) -> Refusal {
    let key_name = plangate_core::shell_word(key_name);
    Refusal::new(
        refused.code(),
        format!(
            "{refused} (`plangate mode set --key {key_name} --unlock`). Nothing changed: {nothing}. Keep working in this mode: plan your writes and let the person review them"
        ),
    )
}

/// What a session's agent is told about working through plangate (docs/design.md
/// §5), plus the mode's own guidance.
pub fn session_instructions(prefix: &str, mode: &ModeSpec) -> String {
    let mut out = String::new();
    if let Some(i) = &mode.instructions {
        out.push_str(i.trim());
        out.push(' ');
    }
    out.push_str(&general_instructions(prefix));
    out
}

/// The server instructions of docs/design.md §5.
pub fn general_instructions(prefix: &str) -> String {
    format!(
        "plangate sits in front of this session's MCP servers. Reads pass through. A planned step is a question for the person, not a done deed: show the plan in plain words ({prefix}get_plan lists it) and apply it only after they say yes. Steps are independent — a step never uses another step's result — so when a write needs an earlier write's result, apply first, then plan the rest. A refused call answers isError with a stable code and says what to do next. Only a person approves a plan, outside this session: never approve, unlock or apply one by other means (a shell command, an edited file), even where you could — that is the person's yes, not yours. plangate governs MCP tool calls only, not your own shell or file edits."
    )
}
