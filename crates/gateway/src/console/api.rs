//! The console's JSON API for a person's acts: approve, discard, retry,
//! apply, reject, amend, and accept or reject a held tool definition —
//! each through the same code as `plangate plans` and `plangate tools`.
//! What the page polls is in [`super::poll`], a key's past in
//! [`super::history`]. The checks ran before any handler here ([`super::Viewer`],
//! [`super::Acting`]); every refusal is a [`ConsoleError`].

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use plangate_core::rules::Selection;
use plangate_core::{AccessCode, Channel, Code, Receipt};
use plangate_store::{ApiKey, now_ms};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Acting, Body, ConsoleError, Session, Viewer, ok_json, ok_typed};
use crate::Gateway;
use crate::operator::{self, OperatorError};

/// `POST /console/api/tool` body: accept or reject exactly the held
/// definition the person looked at (the page always sends its hash;
/// `tools accept --server` without `--hash` decides on what is held, as
/// at the data dir).
#[derive(Deserialize)]
pub(super) struct ToolBody {
    server: String,
    tool: String,
    #[serde(default)]
    definition_hash: Option<String>,
    decision: ToolVerdict,
    #[serde(default)]
    allow_downgrade: bool,
    #[serde(flatten)]
    factor: FactorFields,
}

/// The factor a person types into the console for an act that widens
/// what runs, when the store requires one ([`operator::factor`]).
#[derive(Deserialize, Default)]
pub(super) struct FactorFields {
    /// A code from the operator's authenticator, or a recovery code.
    #[serde(default)]
    pub(super) code: Option<String>,
    /// The enrolled operator (needed when several are).
    #[serde(default)]
    pub(super) operator: Option<String>,
    /// A passkey's answer to the challenge issued for this act
    /// (`POST /console/api/passkey/challenge`).
    #[serde(default)]
    passkey: Option<operator::factor::passkey::AssertionFields>,
}

/// What a person saw of a plan, as a passkey's challenge binds it.
pub(super) fn seen_text(digest: &str, revision: Option<u64>) -> String {
    match revision {
        Some(r) => format!("at {digest} revision {r}"),
        None => format!("at {digest}"),
    }
}

/// Confirms `act` for the console's person with what they typed or their
/// passkey answered ([`operator::factor::confirm`]); `seen` is what the
/// passkey's challenge bound beyond the act.
pub(super) async fn confirm(
    gw: &Gateway,
    (act, seen): (&operator::factor::Act<'_>, &str),
    given: &FactorFields,
    session: &Session,
) -> Result<operator::factor::Confirmed, ConsoleError> {
    let proof = operator::factor::Proof {
        operator: given.operator.as_deref(),
        code: given.code.as_deref(),
        passkey: given
            .passkey
            .as_ref()
            .map(|fields| operator::factor::passkey::PasskeyProof {
                fields,
                party: session.place.party(),
                seen,
            }),
    };
    operator::factor::confirm(gw.operators(), gw.material(), act, proof, Channel::Console)
        .await
        .map_err(|e| refused(OperatorError::Factor(e)))
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum ToolVerdict {
    Accept,
    Reject,
}

/// Records a person's accept or reject of a quarantined tool definition,
/// through the same rule as `plangate tools accept|reject`.
pub(super) async fn tool_decision(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<ToolBody>,
) -> Result<Response, ConsoleError> {
    use crate::tool_pins::Decision;
    let decision = match body.decision {
        ToolVerdict::Accept => Decision::Accept {
            allow_downgrade: body.allow_downgrade,
        },
        ToolVerdict::Reject => Decision::Reject,
    };
    let pins = gw.pins_log().state(plangate_core::TOOLS_LOG).await;
    let pins = pins.map_err(log_down)?;
    crate::tool_pins::held_as_seen(
        &pins,
        (&body.server, &body.tool),
        body.definition_hash.as_deref(),
    )
    .map_err(pin_refused)?;
    let yes = match decision {
        Decision::Accept { .. } => {
            let act = operator::factor::Act::AcceptTool {
                server: &body.server,
                tool: &body.tool,
            };
            Some(confirm(&gw, (&act, ""), &body.factor, &session).await?)
        }
        Decision::Reject => None,
    };
    let who = plangate_core::Actor::Operator {
        name: yes
            .as_ref()
            .and_then(|y| y.operator())
            .unwrap_or(&session.operator.name)
            .to_owned(),
    };
    match crate::tool_pins::decide(
        gw.pins_log(),
        &gw.config(),
        &body.server,
        &body.tool,
        body.definition_hash.as_deref(),
        decision,
        (who, yes.as_ref()),
        Channel::Console,
        now_ms(),
    )
    .await
    {
        Ok(pins) => {
            gw.refresh_pins().await;
            tracing::info!(operator = %session.operator.name, server = %body.server, tool = %body.tool, "console: tool definition decided");
            let decided =
                crate::tool_pins::Decided::of(&pins, (&body.server, &body.tool), decision);
            Ok(ok_typed(&decided))
        }
        Err(e) => Err(pin_refused(e)),
    }
}

/// A person's act on a pin the rules refused, as the API answers it.
fn pin_refused(e: crate::tool_pins::PinError) -> ConsoleError {
    use crate::tool_pins::PinError;
    match e {
        PinError::Log(e) => {
            tracing::error!("console: tool pins: {e}");
            ConsoleError::store_down()
        }
        e @ (PinError::Changed { .. } | PinError::Downgrade { .. }) => {
            ConsoleError::refusal(Code::ToolQuarantined, e.to_string())
        }
        // Nothing of that tool is held: no such thing to decide.
        e => ConsoleError::access(AccessCode::NotFound, e.to_string()),
    }
}

/// The event log could not be read: logged, and answered as the store
/// being down.
pub(super) fn log_down(e: impl std::fmt::Display) -> ConsoleError {
    tracing::error!("console: event log: {e}");
    ConsoleError::store_down()
}

/// The key an API request names, by id.
pub(super) async fn key_by_id(gw: &Gateway, key_id: &str) -> Result<ApiKey, ConsoleError> {
    match gw.store().find_key(key_id).await {
        Ok(Some(k)) if k.id == key_id => Ok(k),
        Ok(_) => Err(ConsoleError::access(
            AccessCode::NotFound,
            format!("there is no key with id {key_id:?}"),
        )),
        Err(e) => {
            tracing::error!("console: key store: {e}");
            Err(ConsoleError::store_down())
        }
    }
}

/// The key a request names by name or id: the active key of that name or
/// id, else the most recent revoked one of that name (its log is still
/// there to read) — as `plangate plans` resolves `--key`.
pub(super) async fn key_named(gw: &Gateway, key: &str) -> Result<ApiKey, ConsoleError> {
    match operator::find_key(gw.store().as_ref(), key).await {
        Ok(Some(found)) => Ok(found),
        Ok(None) => Err(ConsoleError::access(
            AccessCode::NotFound,
            format!("there is no key named {key:?}"),
        )),
        Err(e) => {
            tracing::error!("console: key store: {e}");
            Err(ConsoleError::store_down())
        }
    }
}

/// The person acting, through the console, on the key a request names
/// by id.
pub(super) async fn acting_on(
    gw: &Gateway,
    key_id: &str,
    session: &Session,
) -> Result<crate::acting::Acting, ConsoleError> {
    let key = key_by_id(gw, key_id).await?;
    Ok(operator::acting(
        &key,
        &session.operator.name,
        Channel::Console,
    ))
}

impl From<OperatorError> for ConsoleError {
    fn from(e: OperatorError) -> ConsoleError {
        refused(e)
    }
}

pub(super) fn refused(e: OperatorError) -> ConsoleError {
    if let OperatorError::Log(inner) = &e {
        tracing::error!("console: event log: {inner}");
    }
    ConsoleError::refusal(e.code(), e.to_string())
}

/// `POST /console/api/approve` and `POST /console/api/apply` body: the
/// digest and revision of the plan the person saw, and the steps they
/// approve or run (none: every waiting step — for apply, only the approved
/// ones once a person approved part of the plan).
#[derive(Deserialize)]
pub(super) struct SeenSteps {
    key_id: String,
    plan_digest: String,
    /// The revision on screen; the page always sends it, an older client
    /// may not (then the digest alone binds the yes).
    #[serde(default)]
    revision: Option<u64>,
    #[serde(default)]
    step_ids: Vec<String>,
    /// (Apply) The person said a partial apply is meant: it runs even when
    /// it leaves waiting steps tied to the ones it runs.
    #[serde(default)]
    partial: bool,
    /// (Apply) Run every step even when one fails (`--continue`).
    #[serde(default, rename = "continue")]
    go_on: bool,
    #[serde(flatten)]
    factor: FactorFields,
}

impl SeenSteps {
    /// The plan as the person saw it.
    fn seen(&self) -> operator::Seen<'_> {
        operator::Seen {
            digest: &self.plan_digest,
            revision: self.revision,
        }
    }
}

/// Records the operator's yes to the named waiting steps (or all of them)
/// of the plan the person saw; refused with `plan_changed` (nothing
/// recorded) when the plan is no longer at that digest and revision.
pub(super) async fn approve(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<SeenSteps>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on(&gw, &body.key_id, &session).await?;
    let key = &acting.key;
    let seen = seen_text(&body.plan_digest, body.revision);
    let yes = confirm(
        &gw,
        (&operator::factor::Act::Approve { key: &key.name }, &seen),
        &body.factor,
        &session,
    )
    .await?;
    let approved = operator::approve(
        gw.log(),
        key,
        acting.actor(),
        &yes,
        Channel::Console,
        Some(body.seen()),
        &body.step_ids,
    )
    .await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, steps = approved.step_ids.len(), "console: approved steps");
    Ok(ok_typed(&operator::approval_answer(
        &gw.config(),
        key,
        acting.actor(),
        &approved,
    )))
}

/// `POST /console/api/discard` body: no `step_ids` discards every waiting
/// step.
#[derive(Deserialize)]
pub(super) struct DiscardBody {
    key_id: String,
    #[serde(default)]
    step_ids: Vec<String>,
}

pub(super) async fn discard(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<DiscardBody>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on(&gw, &body.key_id, &session).await?;
    let key = &acting.key;
    let discarded = operator::discard(
        gw.log(),
        &acting,
        Selection::of(&body.step_ids),
        gw.ttl_ms(),
    )
    .await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, discarded = discarded.discarded.len(), "console: discarded steps");
    Ok(ok_typed(&discarded))
}

/// One step of a key's plan: the `POST /console/api/retry` body, and the
/// query `?key_id=…&step_id=…` of the amend form.
#[derive(Deserialize)]
pub(super) struct StepRef {
    key_id: String,
    step_id: String,
    #[serde(flatten)]
    factor: FactorFields,
}

/// Retries one in-doubt step now and answers its receipt.
pub(super) async fn retry(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<StepRef>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on(&gw, &body.key_id, &session).await?;
    let key = &acting.key;
    let act = operator::factor::Act::Retry {
        key: &key.name,
        step: &body.step_id,
    };
    let yes = confirm(&gw, (&act, ""), &body.factor, &session).await?;
    let receipt = operator::retry(gw.ops(), &acting, &yes, &body.step_id).await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: retried a step");
    Ok(ok_typed(&receipt))
}

/// The person's Apply: the same code as `plangate plans apply`
/// ([`operator::apply_now`]); the page sees each step's progress through
/// its live view of the log, and this answers the receipt.
pub(super) async fn apply(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<SeenSteps>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on(&gw, &body.key_id, &session).await?;
    let key = &acting.key;
    // A partial apply that leaves tied steps is refused before the
    // person's code is spent; the page asks them and sends `partial`.
    let state = operator::refresh(gw.log(), &acting, gw.ttl_ms(), gw.lease_ms())
        .await
        .map_err(log_down)?;
    operator::left_by_apply(&gw.config(), key, &state, (&body.step_ids, body.partial))?;
    let seen = seen_text(&body.plan_digest, body.revision);
    let yes = confirm(
        &gw,
        (&operator::factor::Act::Apply { key: &key.name }, &seen),
        &body.factor,
        &session,
    )
    .await?;
    let receipt = operator::apply_now(
        gw.ops(),
        &acting,
        &yes,
        Some(body.seen()),
        (&body.step_ids, body.partial, body.go_on),
        None,
    )
    .await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: applied steps");
    let receipt = match receipt {
        Some(receipt) => receipt,
        None => {
            let state = operator::refresh(gw.log(), &acting, gw.ttl_ms(), gw.lease_ms())
                .await
                .map_err(log_down)?;
            Receipt::nothing(
                format!("Nothing to apply: key {} has no waiting steps.", key.name),
                state.plan_digest(),
                gw.config().modes.in_force(&state).spec.plan_mode(),
            )
        }
    };
    Ok(ok_typed(&receipt))
}

/// `POST /console/api/reject` body.
#[derive(Deserialize)]
pub(super) struct RejectBody {
    key_id: String,
    step_id: String,
    reason: String,
}

/// A person's no to one waiting step, with the reason its agent reads.
pub(super) async fn reject(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<RejectBody>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on(&gw, &body.key_id, &session).await?;
    let key = &acting.key;
    let rejected = operator::reject(gw.log(), &acting, &body.step_id, &body.reason).await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: rejected a step");
    Ok(ok_typed(&rejected))
}

/// `POST /console/api/amend` body: the new arguments, and the plan
/// revision the person saw.
#[derive(Deserialize)]
pub(super) struct AmendBody {
    key_id: String,
    step_id: String,
    arguments: Value,
    revision: u64,
}

/// A person's change to a waiting step's arguments, through the same code
/// as `plangate plans amend`; `plan_changed` if someone amended it after
/// the revision the person saw.
pub(super) async fn amend(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<AmendBody>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on(&gw, &body.key_id, &session).await?;
    let key = &acting.key;
    let change = operator::Amend {
        step_id: &body.step_id,
        arguments: &body.arguments,
        seen_revision: Some(body.revision),
    };
    let amended = operator::amend(gw.ops(), &acting, change).await?;
    tracing::info!(operator = %session.operator.name, key = %key.name, "console: amended a step");
    Ok(ok_typed(&amended))
}

/// What the amend form is built from: the step's tool's input schema and
/// its current (redacted) arguments.
pub(super) async fn step_form(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
    Query(q): Query<StepRef>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &q.key_id).await?;
    let state = gw.log().state(&key.id).await.map_err(log_down)?;
    let Some(step) = state.step(&q.step_id) else {
        return Err(refused(OperatorError::NoStep {
            key: key.name.clone(),
            step: q.step_id.clone(),
        }));
    };
    let catalog = gw.catalog();
    let schema = catalog
        .tools
        .iter()
        .find(|t| t.upstream == step.record.server && t.original == step.record.tool)
        .map(|t| Value::Object((*t.tool.input_schema).clone()));
    Ok(ok_json(json!({
        "step_id": step.record.step_id,
        "exposed_as": step.record.exposed_as,
        "arguments": step.record.arguments,
        "input_schema": schema,
        "revision": state.revision,
    })))
}

/// `POST /console/api/keys` body: a key for an agent, made by a person
/// through the operator API (`plangate wrap --service`).
#[derive(Deserialize)]
pub(super) struct NewKey {
    name: String,
    scope: plangate_core::Scope,
    /// Take `name`, or the first of `name-2`, `name-3`… no active key has.
    #[serde(default)]
    unique: bool,
    #[serde(flatten)]
    factor: FactorFields,
}

/// A key just made: its token, shown this once.
#[derive(serde::Serialize)]
struct KeyMade {
    key: String,
    key_id: String,
    scope: plangate_core::Scope,
    token: String,
}

/// Creates a key as `plangate keys create` does; a `write` key widens what
/// runs, so it needs the person's factor when approvals require one.
pub(super) async fn create_key(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<NewKey>,
) -> Result<Response, ConsoleError> {
    let store = gw.store();
    let name = match body.unique {
        false => body.name.clone(),
        true => {
            let keys = store.list_keys().await.map_err(log_down)?;
            let taken = |n: &str| keys.iter().any(|k| k.is_active() && k.name == n);
            std::iter::once(body.name.clone())
                .chain((2..1000).map(|i| format!("{}-{i}", body.name)))
                .find(|n| !taken(n))
                .unwrap_or_else(|| body.name.clone())
        }
    };
    if body.scope == plangate_core::Scope::Write {
        let act = operator::factor::Act::CreateWriteKey { name: &name };
        confirm(&gw, (&act, ""), &body.factor, &session).await?;
    }
    let created = store
        .create_key(&name, body.scope)
        .await
        .map_err(|e| match e {
            e @ (plangate_store::StoreError::KeyNameTaken(_)
            | plangate_store::StoreError::InvalidKeyName(_)) => {
                ConsoleError::refusal(Code::InvalidArguments, e.to_string())
            }
            e => log_down(e),
        })?;
    tracing::info!(operator = %session.operator.name, key = %created.key.name, scope = %created.key.scope, "console: key created");
    Ok(ok_typed(&KeyMade {
        key: created.key.name,
        key_id: created.key.id,
        scope: created.key.scope,
        token: created.token,
    }))
}

/// `POST /console/api/revert` body: the applied steps to revert, every
/// step of the key's last apply when none is named.
#[derive(Deserialize)]
pub(super) struct RevertBody {
    key_id: String,
    #[serde(default)]
    step_ids: Vec<String>,
}

/// A person's Revert (and `plans revert --server`): inverse steps planned
/// in the key's plan by the same operation as `plangate plans revert`
/// ([`operator::revert`]); they wait for a yes like any step, so nothing
/// here needs the factor.
pub(super) async fn revert(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<RevertBody>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on(&gw, &body.key_id, &session).await?;
    let answer = operator::revert(gw.ops(), &acting, &body.step_ids).await?;
    tracing::info!(operator = %session.operator.name, key = %acting.key.name, planned = answer.planned.len(), "console: planned a revert");
    Ok(ok_typed(&answer))
}
