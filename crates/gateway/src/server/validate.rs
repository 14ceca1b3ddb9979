//! The checks a call must pass before it could run or be planned
//! ([`validate`]): the tool is enabled and not withheld, the plan flag is a
//! boolean, every integer is safe, and the arguments fit the tool's input
//! schema. Apart from the pipeline because what they refuse, and how they
//! say it, is the same whatever is decided next.

use plangate_core::{Code, check_safe_integers};
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::Value;

use crate::CatalogTool;
use crate::refusal::Refusal;

/// The argument that asks for a single write to be planned.
const PLAN_FLAG: &str = "_plangate_plan";

/// A call that passed every check a call must pass before it could run.
#[derive(Clone)]
pub(super) struct Checked {
    /// The call to send upstream: the client's, without [`PLAN_FLAG`].
    pub(super) forward: CallToolRequestParams,
    /// Its arguments.
    pub(super) arguments: JsonObject,
    /// The same arguments as one JSON value.
    pub(super) value: Value,
    /// Whether the agent asked for this write to be planned.
    pub(super) explicit: bool,
    /// Top-level arguments the tool's schema does not declare but allows
    /// (the rest were refused): no widening rule decides on them.
    pub(super) undeclared: Vec<String>,
}

/// The checks a call must pass before it could run or be planned: the tool
/// is enabled and not withheld, the plan flag is a boolean, every integer
/// is safe, and the arguments fit the tool's input schema.
pub(super) fn validate(
    tool: &CatalogTool,
    prefix: &str,
    request: CallToolRequestParams,
) -> Result<Checked, Refusal> {
    if !tool.enabled {
        return Err(Refusal::new(
            Code::Forbidden,
            format!(
                "tool {} is disabled in plangate's config (upstreams.{}.tools.{}.enabled = false); ask the operator to enable it",
                tool.exposed, tool.upstream, tool.original
            ),
        ));
    }
    if let Some(why) = &tool.withheld {
        return Err(Refusal::new(
            why.code(),
            format!("{}. Nothing was run or planned", why.reason(tool, prefix)),
        ));
    }
    let mut forward = request;
    let mut arguments = forward.arguments.take().unwrap_or_default();
    let explicit = match arguments.remove(PLAN_FLAG) {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => {
            return Err(Refusal::new(
                Code::InvalidArguments,
                format!("\"{PLAN_FLAG}\" must be true or false"),
            ));
        }
    };
    let value = Value::Object(arguments.clone());
    if let Err(e) = check_safe_integers(&value) {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!("{e}; send it as a string or a smaller number. Nothing was run or planned"),
        ));
    }
    if let Err(errors) = tool.check_arguments(&value) {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "the arguments do not match {}'s input schema: {}. Nothing was run or planned",
                tool.exposed,
                errors.join("; ")
            ),
        ));
    }
    // An argument the tool does not take is one its server ignores: a rule
    // must not decide on it, so it is refused unless the schema allows
    // more (docs/config.md, "Rules see what the tool takes").
    let undeclared = plangate_core::undeclared(&tool.tool.input_schema, &value);
    if !undeclared.refused.is_empty() {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "{} does not take {}: its input schema does not declare {}. Send only the arguments it declares (tools/list shows its schema). Nothing was run or planned",
                tool.exposed,
                undeclared.refused.join(", "),
                if undeclared.refused.len() == 1 {
                    "it"
                } else {
                    "them"
                },
            ),
        ));
    }
    forward.arguments = Some(arguments.clone());
    Ok(Checked {
        forward,
        arguments,
        value,
        explicit,
        undeclared: undeclared.allowed,
    })
}
