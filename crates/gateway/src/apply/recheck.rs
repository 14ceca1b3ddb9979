//! The fresh checks before a step's call (docs/design.md §5 Apply, 2): the tool is
//! still offered, enabled, not withheld, its definition and schema the
//! ones planned against, its effect not raised, and the target unchanged
//! since its preview. A step that fails one is never sent.

use plangate_core::{Code, Effect, StepError, StepRecord, restore_secrets};
use rmcp::model::CallToolRequestParams;
use serde_json::Value;

use crate::acting::Acting;
use crate::plan::planned_tool;
use crate::{Catalog, CatalogTool, Ops};

/// The fresh checks before a step's call (docs/design.md §5 Apply, 2). `key` is
/// the key's check, asked beside the step's claim; it is reported in its
/// place among the others. Answers what the target's read found, when a
/// profile reads it: the state the step is about to replace.
pub(super) async fn recheck(
    gw: Ops<'_>,
    acting: &Acting,
    step: &plangate_core::Step,
    secrets: &[(String, Value)],
    key: Result<(), StepError>,
) -> Result<Option<Found>, StepError> {
    let record = &step.record;
    let catalog = gw.catalog();
    let tool = tool_as_planned(gw, &catalog, record)?;
    // The key's check, asked beside the step's claim (`KeyCheck`).
    key?;
    let fresh = Fresh {
        gw,
        acting,
        tool,
        record,
        secrets,
    };
    fresh.declared_only()?;
    fresh.no_rule_refuses().await?;
    let found = fresh.target_as_seen().await?;
    fresh.version_as_planned().await?;
    Ok(found)
}

/// What a step's fresh check read of its target (a profile's read): the
/// state the step replaces, and how to read it again once it ran.
pub(super) struct Found {
    /// The read and its real arguments.
    pub(super) spec: plangate_config::profiles::PreviewSpec,
    /// The step's real arguments (secrets restored): the read's come from
    /// them.
    pub(super) real: Value,
    /// What it found.
    pub(super) seen: crate::preview::Seen,
    /// What its digest bound besides (where the target is).
    pub(super) bind: crate::preview::Bind,
}

/// What the checks after the tool's own look at: the step, its tool as
/// offered now, the secrets sealed with it (its real arguments, and what
/// every message is scrubbed of).
struct Fresh<'a> {
    gw: Ops<'a>,
    acting: &'a Acting,
    tool: &'a CatalogTool,
    record: &'a StepRecord,
    secrets: &'a [(String, Value)],
}

/// A step's failure before its call: nothing was sent.
fn fail(code: Code, message: String) -> StepError {
    StepError {
        code: code.into(),
        message,
        upstream: None,
    }
}

/// The step's tool, if it is still offered, enabled, not withheld, with
/// the definition and schema the step was planned against and an effect
/// not raised since.
fn tool_as_planned<'c>(
    gw: Ops<'_>,
    catalog: &'c Catalog,
    record: &StepRecord,
) -> Result<&'c CatalogTool, StepError> {
    let Some(tool) = planned_tool(catalog, record) else {
        return Err(fail(
            Code::StaleTarget,
            format!(
                "{} is no longer offered by {}; nothing was sent",
                record.tool, record.server
            ),
        ));
    };
    if !tool.enabled {
        return Err(fail(
            Code::Forbidden,
            format!(
                "{} is now disabled in plangate's config; nothing was sent",
                tool.exposed
            ),
        ));
    }
    if let Some(why) = &tool.withheld {
        return Err(fail(
            why.code(),
            format!(
                "{}. Nothing was sent",
                why.reason(tool, &gw.config().gateway.tool_prefix)
            ),
        ));
    }
    if record
        .definition_hash
        .as_ref()
        .is_some_and(|planned| *planned != tool.definition_hash)
    {
        return Err(fail(
            Code::StaleTarget,
            format!(
                "{}'s definition changed since the step was planned (an operator accepted a new one); the person reviewed the old one, so plan it again. Nothing was sent",
                tool.exposed
            ),
        ));
    }
    if tool.schema_hash.as_deref() != Some(record.schema_hash.as_str()) {
        return Err(fail(
            Code::StaleTarget,
            format!(
                "{}'s input schema changed since the step was planned; plan it again. Nothing was sent",
                tool.exposed
            ),
        ));
    }
    if tool.effect > record.effect {
        return Err(fail(
            Code::Forbidden,
            format!(
                "{} is now classed {} (planned as {}); plan it again so the person sees that. Nothing was sent",
                tool.exposed, tool.effect, record.effect
            ),
        ));
    }
    Ok(tool)
}

impl Fresh<'_> {
    /// An argument the tool does not take (a step planned before plangate
    /// refused those) could have passed a rule it should not have.
    fn declared_only(&self) -> Result<(), StepError> {
        let (tool, record) = (self.tool, self.record);
        let undeclared =
            plangate_core::undeclared(&tool.tool.input_schema, &record.arguments.value());
        if !undeclared.refused.is_empty() {
            return Err(fail(
                Code::InvalidArguments,
                format!(
                    "{} does not take {}: its input schema does not declare it, and a rule may have decided on it. Nothing was sent; plan the write again without it",
                    tool.exposed,
                    undeclared.refused.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// A refuse rule added (or matching) since the step was planned stops
    /// it: the operator's "never" holds at apply too.
    async fn no_rule_refuses(&self) -> Result<(), StepError> {
        let (gw, acting, tool, record, secrets) =
            (self.gw, self.acting, self.tool, self.record, self.secrets);
        if gw.policy().is_empty() {
            return Ok(());
        }
        let real = restore_secrets(&record.arguments.value(), secrets);
        let mode = match gw.log().state(&acting.key.id).await {
            Ok(state) => gw.config().modes.in_force(&state).spec.name,
            Err(_) => gw.config().modes.default_name().to_owned(),
        };
        let undeclared = plangate_core::undeclared(&tool.tool.input_schema, &real).allowed;
        let paths =
            crate::policy::call_paths(Some(gw), &gw.config(), &record.server, &tool.paths, &real)
                .await;
        let policy = gw.policy();
        let who = crate::policy::Who {
            name: &acting.key.name,
            scope: acting.key.scope.as_str(),
        };
        if let Some(m) = crate::policy::judge(
            &policy,
            tool.into(),
            tool.effect,
            who,
            &mode,
            &real,
            &undeclared,
            &paths,
        ) && m.outcome == plangate_policy::Outcome::Refuse
        {
            let doubt = m
                .error
                .map(|e| format!(" (its condition could not be evaluated — {e} — and a refuse rule refuses when in doubt)"))
                .unwrap_or_default();
            return Err(fail(
                Code::ForbiddenByRule,
                gw.redactor().scrub_text(
                    &format!(
                        "the operator's rule {:?} refuses it now: {}{doubt}. Nothing was sent",
                        m.rule,
                        m.message.unwrap_or("")
                    ),
                    secrets,
                ),
            ));
        }
        Ok(())
    }

    /// A profile's preview: the target must be as the person saw it, at the
    /// place they saw it — read with a read that may still be made.
    /// Answers what was read.
    async fn target_as_seen(&self) -> Result<Option<Found>, StepError> {
        let (gw, acting, tool, record, secrets) =
            (self.gw, self.acting, self.tool, self.record, self.secrets);
        let (Some(planned), Some(spec)) = (
            record.preview.as_ref().and_then(|p| p.before_digest()),
            crate::preview::spec_of(gw, tool),
        ) else {
            return Ok(None);
        };
        let real = restore_secrets(&record.arguments.value(), secrets);
        let read_args =
            serde_json::Value::Object(plangate_config::profiles::read_arguments(spec, &real));
        let in_force = match gw.log().state(&acting.key.id).await {
            Ok(state) => gw.config().modes.in_force(&state).spec,
            Err(_) => gw.config().modes.resolve(None).0,
        };
        let checked = match crate::preview::access(
            gw,
            acting,
            &in_force,
            &record.server,
            &spec.read,
            &read_args,
        )
        .await
        {
            crate::preview::Access::Never(why) => {
                Err(format!("the target cannot be checked: {why}"))
            }
            _ => crate::preview::still_as_seen(gw, tool, spec, &real, planned)
                .await
                .map_err(|moved| moved.why),
        };
        let why = match checked {
            Ok((seen, bind)) => {
                return Ok(Some(Found {
                    spec: spec.clone(),
                    real,
                    seen,
                    bind,
                }));
            }
            Err(why) => why,
        };
        // What a withheld preview read stays unsaid here too.
        let why = if record.preview_withheld.is_some() {
            "the target changed since the person reviewed it, or cannot be read to check it"
                .to_owned()
        } else {
            gw.redactor().scrub_text(&why, secrets)
        };
        Err(fail(
            Code::StaleTarget,
            format!(
                "{why}: the person approved it as it was then. Nothing was sent; plan the write again so they review it as it is now",
            ),
        ))
    }

    /// The configured preview tool must still show the target as it was when
    /// planned (the version it reported then).
    async fn version_as_planned(&self) -> Result<(), StepError> {
        let (gw, tool, record, secrets) = (self.gw, self.tool, self.record, self.secrets);
        let config = gw.config();
        let settings = config.tool_settings(&record.server, &record.tool);
        let (Some(preview_tool), Some(planned_version)) = (
            settings.and_then(|s| s.preview.clone()),
            record.target_version.clone(),
        ) else {
            return Ok(());
        };
        if tool.effect < Effect::Write {
            return Ok(());
        }
        let mut params = CallToolRequestParams::new(preview_tool);
        params.arguments = restore_secrets(&record.arguments.value(), secrets)
            .as_object()
            .cloned();
        let Some(preview) = gw.read(&record.server, params).await else {
            return Err(fail(
                Code::UpstreamDown,
                format!(
                    "upstream {} is not connected; nothing was sent",
                    record.server
                ),
            ));
        };
        let now_version = match preview {
            Ok(r) if r.is_error != Some(true) => r
                .structured_content
                .and_then(|s| s.get("target_version").cloned()),
            Ok(r) => {
                let why = r
                    .content
                    .iter()
                    .find_map(|c| {
                        c.as_text()
                            .map(|t| gw.redactor().scrub_text(&t.text, secrets))
                    })
                    .unwrap_or_default();
                return Err(fail(
                    Code::StaleTarget,
                    format!("the target is no longer as planned: {why}. Nothing was sent"),
                ));
            }
            _ => None,
        };
        if now_version.as_ref() != Some(&planned_version) {
            return Err(fail(
                Code::StaleTarget,
                format!(
                    "the target changed since the step was planned (version {} then, {} now); show the person the new state and plan again. Nothing was sent",
                    planned_version,
                    now_version
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "unknown".into())
                ),
            ));
        }
        Ok(())
    }
}
