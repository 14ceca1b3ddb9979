//! A write's step as planning makes it ([`prepare_step`]): redacted
//! arguments, keyed fingerprint, sealed secrets, previews, predicted effect
//! and where it lands. Apart from recording the step because a person's
//! amendment makes its record here too, so an amended step is checked,
//! previewed, redacted and sealed exactly as a planned one (docs/design.md
//! §5).

use plangate_config::ToolOverride;
use plangate_config::profiles::ToolProfile;
use plangate_core::rules;
use plangate_core::{
    CallFacts, Code, Effect, InForce, JsonText, KeyState, LandsOn, Scope, StepRecord, Where,
    arguments_fingerprint, generic_effect, render_template,
};
use plangate_store::now_ms;
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::Value;

use super::secrets::{seal, secrets_to_scrub};
use crate::acting::Acting;
use crate::refusal::Refusal;
use crate::{CatalogTool, Ops};

/// What planning a write works from: who plans, in which mode, which tool.
struct Planning<'a> {
    gw: Ops<'a>,
    acting: &'a Acting,
    in_force: &'a InForce,
    tool: &'a CatalogTool,
}

/// The previews of a write, as the agent and the person may see them.
struct Previewed {
    /// What the configured preview tool said the write would do (only when
    /// the agent may read it).
    predicted: Option<String>,
    /// What it names as the target, when the configuration does not.
    target: Option<String>,
    /// The target's version it reported, which apply checks again.
    target_version: Option<Value>,
}

/// A write's step as planning makes it, before it has a place in the plan
/// (`position` 0): redacted arguments, keyed fingerprint, sealed secrets
/// (bound to `step_id`), preview, predicted effect, where it lands and
/// whether it is destructive. Planning a write and a person amending a
/// step both make their record here, so an amended step is checked,
/// previewed, redacted and sealed exactly as a planned one. `known` is the
/// key's state if already read; it is kept for the append that follows.
pub(crate) async fn prepare_step(
    gw: Ops<'_>,
    acting: &Acting,
    in_force: &InForce,
    tool: &CatalogTool,
    arguments: &JsonObject,
    step_id: String,
    known: &mut Option<KeyState>,
) -> Result<StepRecord, Refusal> {
    let at = Planning {
        gw,
        acting,
        in_force,
        tool,
    };
    let args = Value::Object(arguments.clone());
    let (redacted, secrets) = gw.redactor().split(&args);
    let (keyed, fingerprint, schema_hash) = at.identify(&args, &redacted, &secrets)?;
    let config = gw.config();
    let configured = config.tool_settings(&tool.upstream, &tool.original);
    let has_settings = configured.is_some();
    let settings = configured.cloned().unwrap_or_default();
    // A built-in profile fills in what the operator did not set.
    let profile = tool.profile.as_deref().map(|m| &m.tool);
    let named = match settings.target.as_deref() {
        Some(p) => pointer_text(&redacted, p),
        None => profile
            .and_then(|p| p.target.as_deref())
            .and_then(|p| target_text(&redacted, p)),
    };
    let told = match &settings.preview {
        Some(preview_tool) => {
            at.configured_preview(preview_tool, arguments, &args, &secrets, known)
                .await?
        }
        None => None,
    };
    let Previewed {
        predicted,
        target,
        target_version,
    } = told.map_or(
        Previewed {
            predicted: None,
            target: named.clone(),
            target_version: None,
        },
        |p| Previewed {
            target: named.or(p.target),
            ..p
        },
    );
    let (step_preview, preview_withheld) =
        at.profile_preview(&args, &secrets, &target, known).await?;
    let lands_where = match (has_settings, settings.lands_on, profile) {
        (false, _, Some(p)) if p.lands_on.as_deref() == Some("copy") => Where::Copy,
        (_, plangate_config::LandsOnSetting::Copy, _) => Where::Copy,
        _ => Where::Live,
    };
    let predicted_effect = predicted.unwrap_or_else(|| {
        at.predicted_effect(
            (&settings, profile),
            target.as_deref(),
            &redacted,
            (step_preview.as_ref(), preview_withheld.is_some()),
            lands_where,
        )
    });
    let lands_on = LandsOn {
        where_: lands_where,
        target,
        copy_id: None,
        note: settings.lands_on_note.clone(),
    };
    let approval_required = tool.effect == Effect::Destructive;
    let sealed_secrets = seal(&gw, &secrets, &step_id)?;
    let arguments = JsonText::from_value(&redacted);
    let keyed_arguments = StepRecord::keyed_unless_same(&arguments, JsonText::from_value(&keyed));
    Ok(StepRecord {
        step_id,
        position: 0,
        server: tool.upstream.clone(),
        tool: tool.original.clone(),
        exposed_as: tool.exposed.clone(),
        arguments,
        keyed_arguments,
        sealed_secrets,
        fingerprint,
        effect: tool.effect,
        schema_hash,
        predicted_effect,
        lands_on,
        approval_required,
        approval_note: approval_required.then(|| at.approval_note()),
        planned_at_ms: now_ms(),
        target_version,
        definition_hash: Some(tool.definition_hash.clone()),
        preview: step_preview,
        rule: None,
        preview_withheld,
        reverts: None,
        unanswered: None,
    })
}

impl Planning<'_> {
    /// The write refused as one that cannot be planned, saying `what`.
    fn cannot(&self, what: &str) -> Refusal {
        Refusal::new(
            Code::InvalidArguments,
            format!("{} cannot be planned: {what}", self.tool.exposed),
        )
    }

    /// What identifies the write: its arguments with secrets keyed, their
    /// fingerprint and the tool's schema hash. Unsafe integers and a
    /// schema that cannot be canonicalised are refused.
    fn identify(
        &self,
        args: &Value,
        redacted: &Value,
        secrets: &[(String, Value)],
    ) -> Result<(Value, String, String), Refusal> {
        let tool = self.tool;
        let signing = self.gw.material().signing_key();
        plangate_core::check_safe_integers(args).map_err(|e| self.cannot(&e.to_string()))?;
        // One scan of the arguments for what is shown and what is keyed.
        let keyed = plangate_core::keyed_from_split(redacted.clone(), secrets, signing);
        let fingerprint = arguments_fingerprint(&tool.upstream, &tool.original, &keyed)
            .map_err(|e| self.cannot(&e.to_string()))?;
        let schema_hash = tool
            .schema_hash
            .clone()
            .ok_or_else(|| self.cannot("its input schema cannot be canonicalised"))?;
        Ok((keyed, fingerprint, schema_hash))
    }

    /// What the operator's configured preview tool says of the write, if
    /// it may be asked. A preview is a read by the caller: one it may not
    /// make is not made; one a rule keeps from it binds the target's
    /// version but tells the agent nothing of what it said.
    async fn configured_preview(
        &self,
        preview_tool: &str,
        arguments: &JsonObject,
        args: &Value,
        secrets: &[(String, Value)],
        known: &mut Option<KeyState>,
    ) -> Result<Option<Previewed>, Refusal> {
        let (gw, tool) = (self.gw, self.tool);
        let access = crate::preview::access(
            gw,
            self.acting,
            &self.in_force.spec,
            &tool.upstream,
            preview_tool,
            args,
        )
        .await;
        if matches!(access, crate::preview::Access::Never(_)) {
            return Ok(None);
        }
        // The preview sees the real arguments; whatever it says back is
        // scrubbed of them, and of every secret the key's log holds,
        // before anyone else sees it.
        let secrets = secrets_to_scrub(&gw, self.acting, known, secrets).await?;
        let shown = access == crate::preview::Access::Read;
        let redactor = gw.redactor();
        match preview(gw, tool, preview_tool, arguments).await {
            Ok(Some(p)) => Ok(Some(Previewed {
                predicted: p
                    .effect
                    .filter(|_| shown)
                    .map(|e| redactor.scrub_text(&e, &secrets)),
                target: p
                    .target
                    .filter(|_| shown)
                    .map(|t| redactor.scrub_text(&t, &secrets)),
                target_version: p.target_version,
            })),
            Ok(None) => Ok(None),
            Err(mut refusal) => {
                refusal.message = if shown {
                    redactor.scrub_text(&refusal.message, &secrets)
                } else {
                    format!(
                        "{} cannot be planned: its preview refused it ({}). Nothing was planned or written",
                        tool.exposed,
                        plangate_core::preview::WITHHELD
                    )
                };
                Err(refusal)
            }
        }
    }

    /// The profile's preview: the upstream's own read (or dry run) of the
    /// target, with the real arguments, decided as the key's own read;
    /// what it shows is scrubbed. With it, why it is withheld from the
    /// agent, when a rule keeps that read from the key.
    async fn profile_preview(
        &self,
        args: &Value,
        secrets: &[(String, Value)],
        target: &Option<String>,
        known: &mut Option<KeyState>,
    ) -> Result<(Option<plangate_core::Preview>, Option<String>), Refusal> {
        let (gw, tool) = (self.gw, self.tool);
        let Some(spec) = crate::preview::spec_of(gw, tool) else {
            return Ok((None, None));
        };
        let read_args = Value::Object(plangate_config::profiles::read_arguments(spec, args));
        let access = crate::preview::access(
            gw,
            self.acting,
            &self.in_force.spec,
            &tool.upstream,
            &spec.read,
            &read_args,
        )
        .await;
        let withheld = match &access {
            crate::preview::Access::Never(why) => {
                let unavailable = plangate_core::Preview::Unavailable {
                    target: target.clone(),
                    reason: why.clone(),
                };
                return Ok((Some(unavailable), None));
            }
            crate::preview::Access::Withheld(why) => Some(why.clone()),
            crate::preview::Access::Read => None,
        };
        let secrets = secrets_to_scrub(&gw, self.acting, known, secrets).await?;
        let bind = crate::preview::Bind {
            at: crate::preview::placed_at(gw, tool, args).await,
            key: withheld.as_ref().map(|_| *gw.material().signing_key()),
        };
        let taken = match crate::preview::take(
            gw,
            tool,
            spec,
            args,
            &secrets,
            target.clone(),
            &bind,
        )
        .await
        {
            Ok(taken) => taken,
            // The key may read the target: the server's words, and
            // nothing planned — a step that cannot succeed is no
            // question for a person.
            Err(crate::preview::DryRunFailed(said)) if withheld.is_none() => {
                return Err(Refusal::new(
                    Code::InvalidArguments,
                    format!(
                        "{} was not planned: the server's own dry run of it failed: {said}. Nothing was planned or written; read the target again and plan the change that fits it",
                        tool.exposed
                    ),
                ));
            }
            // It may not: the step is planned, and says nothing of
            // what the dry run saw.
            Err(_) => plangate_core::Preview::Unavailable {
                target: target.clone(),
                reason: plangate_core::preview::WITHHELD.to_owned(),
            },
        };
        Ok((Some(taken), withheld))
    }

    /// The sentence saying what the write would do, when no preview tool
    /// said it: the operator's (or the profile's) template with the target
    /// and a preview's summary, or the core's generic sentence.
    fn predicted_effect(
        &self,
        (settings, profile): (&ToolOverride, Option<&ToolProfile>),
        target: Option<&str>,
        redacted: &Value,
        (preview, withheld): (Option<&plangate_core::Preview>, bool),
        lands: Where,
    ) -> String {
        let template = settings
            .predicted_effect
            .as_deref()
            .or(profile.and_then(|p| p.predicted_effect.as_deref()));
        let Some(t) = template else {
            let tool = self.tool;
            return generic_effect(&CallFacts {
                server: &tool.upstream,
                tool: &tool.original,
                effect: tool.effect,
                arguments: redacted,
                schema: Some(&tool.tool.input_schema),
                target,
                lands,
            });
        };
        let named = target.unwrap_or("?");
        let t = t.replace("{@target}", &named.replace('{', "{{").replace('}', "}}"));
        let sentence = render_template(&t, redacted);
        match preview {
            // What the preview read is not for the agent.
            Some(_) if withheld => format!("{sentence}."),
            Some(p) => format!("{sentence}: {}.", p.summary()),
            None => format!("{sentence}."),
        }
    }

    /// What a destructive step says about whose yes runs it: for a plan key
    /// (or a locked mode) a person outside the key; for a write key its own
    /// apply is the yes (docs/design.md §7).
    fn approval_note(&self) -> String {
        let (tool, key) = (self.tool, &self.acting.key);
        let outside = rules::approval_scope(key.scope, self.in_force) == Scope::Plan;
        if outside {
            format!(
                "Destructive: {} may destroy or overwrite data. It runs only after {}.",
                tool.exposed,
                self.gw.how_to_approve()
            )
        } else {
            format!(
                "Destructive: {} may destroy or overwrite data. It needs the person's explicit yes; applying the plan is that yes.",
                tool.exposed
            )
        }
    }
}

/// The value at JSON `pointer` in `args` as text (a string as is, anything
/// else as JSON; null and absent are none): how a configured pointer names
/// a target, a copy, a link or a snapshot.
pub(crate) fn pointer_text(args: &Value, pointer: &str) -> Option<String> {
    match args.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// What a profile's target pointer names, in words: a list by its items'
/// names (`name`, `entityName`, `from`→`to`), anything else as
/// [`pointer_text`] gives it.
fn target_text(args: &Value, pointer: &str) -> Option<String> {
    let Some(Value::Array(items)) = args.pointer(pointer) else {
        return pointer_text(args, pointer);
    };
    let names: Vec<String> = items
        .iter()
        .map(|item| match item {
            Value::String(s) => s.clone(),
            Value::Object(o) => match (o.get("from"), o.get("to")) {
                (Some(Value::String(f)), Some(Value::String(t))) => format!("{f} → {t}"),
                _ => ["name", "entityName", "id"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .map(str::to_owned)
                    .unwrap_or_else(|| item.to_string()),
            },
            other => other.to_string(),
        })
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

/// What a preview tool said about a write.
struct Preview {
    effect: Option<String>,
    target: Option<String>,
    target_version: Option<Value>,
}

/// The version the upstream's configured preview of `tool` gives for
/// `arguments` now (`None`: no preview tool, or it gave none or refused):
/// what an undo by snapshot binds ([`crate::apply`] keeps it after the
/// step, a revert compares it).
pub(crate) async fn preview_version(
    gw: Ops<'_>,
    tool: &CatalogTool,
    arguments: &JsonObject,
) -> Option<Value> {
    let name = gw
        .config()
        .tool_settings(&tool.upstream, &tool.original)?
        .preview
        .clone()?;
    preview(gw, tool, &name, arguments)
        .await
        .ok()
        .flatten()?
        .target_version
}

/// Asks the upstream's configured preview tool what the write would do.
/// `Err` carries a refusal when the preview says the write cannot work.
async fn preview(
    gw: Ops<'_>,
    tool: &CatalogTool,
    preview_tool: &str,
    arguments: &JsonObject,
) -> Result<Option<Preview>, Refusal> {
    let mut params = CallToolRequestParams::new(preview_tool.to_owned());
    params.arguments = Some(arguments.clone());
    let result = match gw.read(&tool.upstream, params).await {
        None => return Ok(None),
        Some(Ok(result)) => result,
        Some(Err(e)) => {
            tracing::warn!(upstream = %tool.upstream, preview = preview_tool, "preview failed: {e}");
            return Ok(None);
        }
    };
    let structured = result.structured_content.clone().unwrap_or(Value::Null);
    if result.is_error == Some(true) {
        let why = structured
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                result
                    .content
                    .iter()
                    .find_map(|c| c.as_text().map(|t| t.text.clone()))
            })
            .unwrap_or_else(|| "the upstream's preview refused it".to_owned());
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "{} cannot be planned: {why}. Nothing was planned or written; fix the arguments and call it again",
                tool.exposed
            ),
        ));
    }
    Ok(Some(Preview {
        effect: structured
            .get("effect")
            .and_then(Value::as_str)
            .map(str::to_owned),
        target: structured.get("target").map(|t| match t {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }),
        target_version: structured.get("target_version").cloned(),
    }))
}
