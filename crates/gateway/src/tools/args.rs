//! The gateway tools' arguments, read once by serde into one [`Call`].
//!
//! Every gateway tool call is read here before anything runs, so a wrong
//! argument is refused the same way for every tool — `invalid_arguments`,
//! naming the field and the shape the tool takes — and the handlers get
//! typed values, never a JSON object to pick apart.

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use plangate_core::Code;

use super::GatewayTool;
use crate::apply::ApplyRequest;
use crate::refusal::Refusal;

/// A gateway tool call with its arguments read.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// A tool that works on the key's session and plan alone
    /// ([`super::call`]).
    Session(SessionCall),
    /// `apply_plan {step_ids?, plan_digest?, continue_on_error?}`
    /// ([`crate::apply::apply_plan`]).
    ApplyPlan(ApplyRequest),
    /// `exit_plan_mode {plan}` ([`crate::review::exit_plan_mode`]).
    ExitPlanMode {
        /// The agent's plan in plain words (empty if it sent none).
        plan: String,
    },
    /// `revert {step_ids?}` ([`crate::operator::revert`]).
    Revert {
        /// The applied steps to undo; every step of the last apply when
        /// empty.
        step_ids: Vec<String>,
    },
}

/// A gateway tool that needs nothing but the key's log.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionCall {
    /// `begin_session {mode}`.
    BeginSession {
        /// The mode to work in.
        mode: String,
    },
    /// `get_plan {step_id?}`.
    GetPlan {
        /// One step to show whole (every value, however large), instead of
        /// the plan's open steps with large values shown by their digest.
        step_id: Option<String>,
    },
    /// `discard_plan {step_ids?}`.
    DiscardPlan {
        /// The steps to discard; every waiting step if `None`.
        step_ids: Option<Vec<String>>,
    },
    /// `end_session`.
    EndSession,
}

/// `begin_session`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct BeginSession {
    /// The mode to work in; "default" has no cap.
    #[schemars(required)]
    mode: Option<String>,
}

/// `get_plan`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct GetPlan {
    /// Show only this step, whole (large values included).
    step_id: Option<String>,
}

/// `discard_plan`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct DiscardPlan {
    /// Steps to discard; all waiting steps if omitted.
    step_ids: Option<Vec<String>>,
}

/// `apply_plan`'s arguments. It refuses an argument it does not know: a
/// misspelt `plan_digest` must not quietly run an unchecked plan.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ApplyPlan {
    /// Steps to run; all waiting steps if omitted. A failed step runs again
    /// when named, once the person said yes to it again if this key's plans
    /// wait for a person.
    step_ids: Option<Vec<String>>,
    /// The digest of the plan the person approved (from get_plan).
    plan_digest: Option<String>,
    /// Run the remaining steps after a failure (default false).
    continue_on_error: Option<bool>,
}

/// `exit_plan_mode`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct ExitPlanMode {
    /// The plan in plain words, as you would explain it to the person.
    #[schemars(required)]
    plan: Option<String>,
}

/// `revert`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct Revert {
    /// Applied steps to undo; every step of the last apply if omitted.
    step_ids: Option<Vec<String>>,
}

/// `end_session` takes no arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(super) struct EndSession {}

/// The input schema of a gateway tool, derived from the struct its
/// arguments are read into: one definition for both, so the schema an
/// agent is shown is the shape the gateway reads. `Option` fields are
/// optional (not nullable), and the struct's name is not a title.
pub(crate) fn schema_of<T: JsonSchema>() -> JsonObject {
    let mut settings = SchemaSettings::draft2020_12();
    settings.meta_schema = None;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.values_mut().for_each(not_null);
    }
    let mut object = match schema {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    };
    // Clients read `properties` even when a tool takes none.
    object
        .entry("properties")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    object.remove("title");
    object.remove("description");
    object
}

/// The output schema of a gateway tool, derived from the type of its
/// answer's `structuredContent` (`PlanView`, `Receipt`, …): what a client
/// that checks structured results checks them against. A value the answer
/// writes as `null` is allowed `null`; a refusal (`isError`) is not held
/// to it.
pub(super) fn output_schema_of<T: JsonSchema>() -> JsonObject {
    let mut settings = SchemaSettings::draft2020_12();
    settings.meta_schema = None;
    // What the answer is written as (a field it leaves out when empty is
    // not required), not what would be read.
    settings.contract = schemars::generate::Contract::Serialize;
    let schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    let mut object = match schema {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    };
    object.remove("title");
    // MCP asks an output schema for an object at its root; an answer of
    // alternatives (`anyOf`) is one in each.
    object
        .entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    object
}

/// An optional argument is left out, not sent as `null`: its schema's
/// `type: [T, "null"]` becomes `type: T`. Its description (the field's doc
/// comment) reads as one paragraph.
fn not_null(property: &mut Value) {
    if let Some(Value::String(text)) = property.get_mut("description") {
        *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    if let Some(Value::Array(types)) = property.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            property["type"] = only;
        }
    }
}

impl Call {
    /// Reads `tool`'s `arguments`. `modes` names the defined modes, for
    /// `begin_session`'s answer when the mode is missing.
    pub fn read(
        tool: GatewayTool,
        arguments: &JsonObject,
        modes: &[String],
    ) -> Result<Call, Refusal> {
        Ok(match tool {
            GatewayTool::BeginSession => {
                let needs_mode = || {
                    Refusal::new(
                        Code::InvalidArguments,
                        format!("begin_session needs \"mode\": one of {}", modes.join(", ")),
                    )
                };
                let args: BeginSession =
                    read(tool, arguments, "{\"mode\": a mode name}").map_err(|_| needs_mode())?;
                Call::Session(SessionCall::BeginSession {
                    mode: args.mode.ok_or_else(needs_mode)?,
                })
            }
            GatewayTool::GetPlan => read(tool, arguments, "{\"step_id\"?: a step id string}")
                .map(|GetPlan { step_id }| Call::Session(SessionCall::GetPlan { step_id }))?,
            GatewayTool::DiscardPlan => read(
                tool,
                arguments,
                "{\"step_ids\"?: a list of step id strings}",
            )
            .map(|DiscardPlan { step_ids }| Call::Session(SessionCall::DiscardPlan { step_ids }))?,
            GatewayTool::ApplyPlan => {
                let args: ApplyPlan = read(
                    tool,
                    arguments,
                    "{\"step_ids\"?: a list of step id strings, \"plan_digest\"?: a string like \"sha256:…\", \"continue_on_error\"?: true or false}",
                )?;
                Call::ApplyPlan(ApplyRequest {
                    step_ids: args.step_ids,
                    plan_digest: args.plan_digest,
                    continue_on_error: args.continue_on_error.unwrap_or(false),
                })
            }
            GatewayTool::ExitPlanMode => {
                let args: ExitPlanMode =
                    read(tool, arguments, "{\"plan\": your plan in plain words}")?;
                Call::ExitPlanMode {
                    plan: args.plan.unwrap_or_default(),
                }
            }
            GatewayTool::EndSession => Call::Session(SessionCall::EndSession),
            GatewayTool::Revert => read(
                tool,
                arguments,
                "{\"step_ids\"?: a list of applied step id strings}",
            )
            .map(|Revert { step_ids }| Call::Revert {
                step_ids: step_ids.unwrap_or_default(),
            })?,
        })
    }
}

/// `arguments` as `T`, or `invalid_arguments` naming the field that does
/// not fit and the shape `tool` takes.
fn read<T: DeserializeOwned>(
    tool: GatewayTool,
    arguments: &JsonObject,
    shape: &str,
) -> Result<T, Refusal> {
    serde_path_to_error::deserialize(Value::Object(arguments.clone())).map_err(
        |e: serde_path_to_error::Error<serde_json::Error>| {
            let at = e.path().to_string();
            let field = if at == "." {
                String::new()
            } else {
                format!("{at}: ")
            };
            Refusal::new(
                Code::InvalidArguments,
                format!(
                    "{}: {field}{}. It takes {shape}; nothing was run",
                    tool.suffix(),
                    e.inner()
                ),
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap()
    }

    /// The derived schemas say what the hand-written ones said: the same
    /// properties, types, descriptions, required fields, and no others.
    #[test]
    fn each_tools_schema_is_the_shape_its_arguments_are_read_into() {
        let schema = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            schema_of::<ApplyPlan>(),
            schema(json!({
                "type": "object",
                "properties": {
                    "step_ids": {"type": "array", "items": {"type": "string"}, "description": "Steps to run; all waiting steps if omitted. A failed step runs again when named, once the person said yes to it again if this key's plans wait for a person."},
                    "plan_digest": {"type": "string", "description": "The digest of the plan the person approved (from get_plan)."},
                    "continue_on_error": {"type": "boolean", "description": "Run the remaining steps after a failure (default false)."}
                },
                "additionalProperties": false
            }))
        );
        assert_eq!(
            schema_of::<ExitPlanMode>(),
            schema(json!({
                "type": "object",
                "properties": {"plan": {"type": "string", "description": "The plan in plain words, as you would explain it to the person."}},
                "required": ["plan"],
                "additionalProperties": false
            }))
        );
        assert_eq!(
            schema_of::<BeginSession>(),
            schema(json!({
                "type": "object",
                "properties": {"mode": {"type": "string", "description": "The mode to work in; \"default\" has no cap."}},
                "required": ["mode"],
                "additionalProperties": false
            }))
        );
        assert_eq!(
            schema_of::<GetPlan>(),
            schema(json!({
                "type": "object",
                "properties": {"step_id": {"type": "string", "description": "Show only this step, whole (large values included)."}},
                "additionalProperties": false
            }))
        );
        assert_eq!(
            schema_of::<DiscardPlan>(),
            schema(json!({
                "type": "object",
                "properties": {"step_ids": {"type": "array", "items": {"type": "string"}, "description": "Steps to discard; all waiting steps if omitted."}},
                "additionalProperties": false
            }))
        );
        assert_eq!(
            schema_of::<EndSession>(),
            schema(json!({"type": "object", "properties": {}, "additionalProperties": false}))
        );
    }

    fn refused(tool: GatewayTool, v: Value) -> String {
        let r = Call::read(tool, &args(v), &["default".into(), "plan".into()]).unwrap_err();
        assert_eq!(r.code, Code::InvalidArguments);
        r.message
    }

    #[test]
    fn apply_plan_reads_every_field_and_defaults_the_rest() {
        let call = Call::read(
            GatewayTool::ApplyPlan,
            &args(json!({"step_ids": ["stp_1"], "plan_digest": null})),
            &[],
        )
        .unwrap();
        assert_eq!(
            call,
            Call::ApplyPlan(ApplyRequest {
                step_ids: Some(vec!["stp_1".into()]),
                plan_digest: None,
                continue_on_error: false,
            })
        );
    }

    #[test]
    fn a_wrong_argument_names_its_field_and_the_shape() {
        let m = refused(GatewayTool::ApplyPlan, json!({"step_ids": ["a", 3]}));
        assert!(
            m.starts_with("apply_plan: step_ids[1]: invalid type"),
            "{m}"
        );
        assert!(m.contains("nothing was run"), "{m}");
        let m = refused(GatewayTool::ApplyPlan, json!({"plan_digets": "sha256:x"}));
        assert!(m.contains("unknown field `plan_digets`"), "{m}");
        let m = refused(GatewayTool::DiscardPlan, json!({"step_ids": "stp_1"}));
        assert!(m.starts_with("discard_plan: step_ids: invalid type"), "{m}");
    }

    #[test]
    fn begin_session_without_a_mode_lists_the_modes() {
        for v in [json!({}), json!({"mode": 3})] {
            assert_eq!(
                refused(GatewayTool::BeginSession, v),
                "begin_session needs \"mode\": one of default, plan"
            );
        }
    }

    #[test]
    fn tools_without_arguments_ignore_what_they_are_sent() {
        for tool in [GatewayTool::GetPlan, GatewayTool::EndSession] {
            assert!(Call::read(tool, &args(json!({"x": 1})), &[]).is_ok());
        }
        assert_eq!(
            Call::read(GatewayTool::GetPlan, &args(json!({"step_id": "s"})), &[]).unwrap(),
            Call::Session(SessionCall::GetPlan {
                step_id: Some("s".into())
            })
        );
        assert!(refused(GatewayTool::GetPlan, json!({"step_id": 3})).contains("step_id"));
        let call = Call::read(GatewayTool::ExitPlanMode, &args(json!({})), &[]).unwrap();
        assert_eq!(
            call,
            Call::ExitPlanMode {
                plan: String::new()
            }
        );
    }
}
