//! A yes through the operator endpoint (docs/design.md §14): `approve_plan`
//! and `apply_plan` ask the person in a form of their own client — the
//! key, the digest and revision, how many steps and each step's effect —
//! and record only what they answer there. The assistant's arguments
//! choose what is asked about, never the answer: there is no argument for
//! a yes or a code. A form declined, dismissed or unanswered records
//! nothing; a client that cannot show a form cannot approve
//! (`elicitation_unsupported`). The form is not a factor: when the store
//! requires one it asks the code, which [`crate::operator::factor::confirm`]
//! checks as for every face.

use std::time::Duration;

use rmcp::model::{CallToolResponse, ElicitRequestParams, ElicitResult, ElicitationAction};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use plangate_core::factor::{FactorKind, Requirement};
use plangate_core::operators::OPERATORS_LOG;
use plangate_core::{Channel, Code, Effect, PlanReview, StepView, Where};
use plangate_store::{ApiKey, OperatorToken, now_ms};

use super::rounds::{self, Round};
use super::tools::{Failure, PlanArgs, answer, key_named, refused, screened};
use super::{acting, store_down};
use crate::Gateway;
use crate::operator::{self, OperatorError, Seen, factor};
use crate::refusal::Refusal;

/// Which yes the assistant asks the person for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Yes {
    /// `approve_plan`: a yes the agent's apply then runs.
    Approve,
    /// `apply_plan`: the person's apply, which is its own yes.
    Apply,
}

impl Yes {
    fn verb(self) -> &'static str {
        match self {
            Yes::Approve => "Approve",
            Yes::Apply => "Run",
        }
    }
}

/// What the factor asks of the form: nothing, or a code (and which
/// operator, when several are enrolled).
struct FactorAsk {
    require: Requirement,
    enrolled: Vec<String>,
}

/// `approve_plan` / `apply_plan`: checks the plan is the one the assistant
/// named, asks the person, confirms their factor, records their yes.
pub(super) async fn say_yes(
    gw: &Gateway,
    operator: &OperatorToken,
    (tool, asked, round): (&str, PlanArgs, Round<'_>),
    cx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, Failure> {
    let which = if tool == "apply_plan" {
        Yes::Apply
    } else {
        Yes::Approve
    };
    operator::check_digest(&asked.plan_digest)?;
    let key = key_named(gw, &asked.key).await?;
    let acting = acting(&key, operator);
    let state = operator::refresh(gw.log(), &acting, gw.ttl_ms(), gw.lease_ms())
        .await
        .map_err(store_down)?;
    let config = gw.config();
    let review = operator::plan_review(&config, &key, &state, now_ms());
    let revision = review.plan.standing.revision;
    still_as_named(&review, &asked)?;
    let ids = asked.step_ids.clone().unwrap_or_default();
    let (partial, go_on) = (asked.partial.unwrap_or(false), asked.go_on.unwrap_or(false));
    if which == Yes::Apply {
        // A partial apply that leaves tied steps is refused before the
        // person is asked, as the console does.
        operator::left_by_apply(&config, &key, &state, (&ids, partial))?;
    }
    let shown = steps_asked(&review, which, &ids).map_err(refused)?;
    let factor_ask = factor_ask(gw).await?;
    let form = Form {
        which,
        key: &key,
        operator,
        review: &review,
        steps: &shown,
        factor: &factor_ask,
    };
    let proof = match ask_person(gw, cx, (tool, round), &form).await? {
        Asked::Yes(proof) => proof,
        Asked::Pending(response) => return Ok(response),
    };
    let act = match which {
        Yes::Approve => factor::Act::Approve { key: &key.name },
        Yes::Apply => factor::Act::Apply { key: &key.name },
    };
    let operator_name = proof
        .operator
        .clone()
        .or_else(|| factor_ask.own(&operator.name));
    let proof_given = factor::Proof {
        operator: operator_name.as_deref(),
        code: proof.code.as_deref(),
        passkey: None,
    };
    let yes = factor::confirm(
        gw.operators(),
        gw.material(),
        &act,
        proof_given,
        Channel::OperatorMcp,
    )
    .await
    .map_err(|e| factor_refused(e, &factor_ask))?;
    let seen = Seen {
        digest: &asked.plan_digest,
        revision: Some(proof.revision.unwrap_or(revision)),
    };
    let recording = Recording {
        key: &key,
        acting: &acting,
        operator,
        seen,
        steps: (&ids, partial, go_on),
        heard: proof.heard,
    };
    record(gw, which, &yes, recording, cx).await
}

/// What a confirmed yes records, and for whom.
struct Recording<'a> {
    key: &'a ApiKey,
    acting: &'a crate::acting::Acting,
    operator: &'a OperatorToken,
    seen: Seen<'a>,
    /// The named steps, whether a partial apply is meant, whether to go on
    /// after a failure.
    steps: (&'a [String], bool, bool),
    /// The last progress value the form's wait sent.
    heard: f64,
}

/// Records the person's confirmed yes — the approval, or their apply —
/// and answers what it came to.
async fn record(
    gw: &Gateway,
    which: Yes,
    yes: &factor::Confirmed,
    r: Recording<'_>,
    cx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, Failure> {
    let (key, acting) = (r.key, r.acting);
    let (ids, partial, go_on) = r.steps;
    match which {
        Yes::Approve => {
            let approved = operator::approve(
                gw.log(),
                key,
                acting.actor(),
                yes,
                Channel::OperatorMcp,
                Some(r.seen),
                ids,
            )
            .await?;
            tracing::info!(operator = %r.operator.name, key = %key.name, steps = approved.step_ids.len(), "operator endpoint: approved steps");
            let view = operator::approval_answer(&gw.config(), key, acting.actor(), &approved);
            let text = format!(
                "The person approved {} step(s) of key {}'s plan (approval {}); the agent's apply_plan runs them, or apply_plan here with the person's yes.",
                approved.step_ids.len(),
                key.name,
                approved.digest
            );
            Ok(answer(&view, text).into())
        }
        Yes::Apply => {
            let progress = cx
                .meta
                .get_progress_token()
                .map(|token| crate::apply::Progress::client_after(cx.peer.clone(), token, r.heard));
            let receipt = operator::apply_now(
                gw.ops(),
                acting,
                yes,
                Some(r.seen),
                (ids, partial, go_on),
                progress,
            )
            .await?;
            tracing::info!(operator = %r.operator.name, key = %key.name, "operator endpoint: applied steps");
            match receipt {
                Some(receipt) => Ok(crate::apply::receipt_result(&receipt).into()),
                None => Err(Refusal::new(
                    Code::InvalidArguments,
                    format!(
                        "nothing to apply: key {} has no approved waiting steps",
                        key.name
                    ),
                )
                .into()),
            }
        }
    }
}

/// Refuses a yes about a plan that moved on since the assistant read it:
/// the person must be asked about the plan as it is.
fn still_as_named(review: &PlanReview, asked: &PlanArgs) -> Result<(), Refusal> {
    let standing = &review.plan.standing;
    let moved = standing.plan_digest != asked.plan_digest
        || asked.revision.is_some_and(|r| r != standing.revision);
    if moved {
        return Err(Refusal::new(
            Code::PlanChanged,
            format!(
                "key {}'s plan is now {} revision {}, not the one named; show_plan it again before asking the person. Nobody was asked and nothing was recorded",
                review.plan.key, standing.plan_digest, standing.revision
            ),
        ));
    }
    Ok(())
}

/// The steps the yes covers, as the form shows them: the named ones, else
/// every waiting step (approve) or every step a person's apply runs now
/// (apply).
fn steps_asked<'r>(
    review: &'r PlanReview,
    which: Yes,
    named: &[String],
) -> Result<Vec<&'r StepView>, OperatorError> {
    let key = &review.plan.key;
    let steps = &review.plan.steps;
    if !named.is_empty() {
        return named
            .iter()
            .map(|id| {
                steps
                    .iter()
                    .find(|s| &s.step.step_id == id)
                    .ok_or_else(|| OperatorError::NoStep {
                        key: key.clone(),
                        step: id.clone(),
                    })
            })
            .collect();
    }
    let chosen: Vec<&StepView> = match which {
        Yes::Approve => steps
            .iter()
            .filter(|s| s.status == plangate_core::StepStatus::Planned)
            .collect(),
        Yes::Apply => review
            .applies
            .iter()
            .filter_map(|id| steps.iter().find(|s| &s.step.step_id == id))
            .collect(),
    };
    if chosen.is_empty() {
        return Err(OperatorError::NothingWaiting { key: key.clone() });
    }
    Ok(chosen)
}

/// What the store requires of a yes, read before the form is built.
async fn factor_ask(gw: &Gateway) -> Result<FactorAsk, Refusal> {
    let operators = gw
        .operators()
        .state(OPERATORS_LOG)
        .await
        .map_err(store_down)?;
    let ask = FactorAsk {
        require: operators.require,
        enrolled: operators.enrolled.keys().cloned().collect(),
    };
    if ask.require != Requirement::None && !ask.require.accepts(FactorKind::Totp) {
        return Err(Refusal::new(
            Code::FactorRequired,
            format!(
                "approvals require {} (recorded in plangate's store), which a form in this client cannot take; the person approves with their passkey in plangate's web console. Nothing was recorded",
                ask.require
            ),
        ));
    }
    Ok(ask)
}

impl FactorAsk {
    fn needs_code(&self) -> bool {
        self.require != Requirement::None
    }

    /// The operator the code is of when the form did not say: the token's
    /// holder, when an operator of that name is enrolled.
    fn own(&self, token_name: &str) -> Option<String> {
        self.enrolled
            .iter()
            .find(|n| n.as_str() == token_name)
            .cloned()
    }
}

fn factor_refused(e: factor::FactorError, ask: &FactorAsk) -> Refusal {
    match e {
        factor::FactorError::Required { require, .. } => Refusal::new(
            Code::FactorRequired,
            format!(
                "approvals require {require}, and the form came back without a code; ask again and the person enters the code from the authenticator of operator {}. Nothing was recorded",
                ask.enrolled.join(" or ")
            ),
        ),
        factor::FactorError::WhichOperator(names) => Refusal::new(
            Code::FactorRequired,
            format!(
                "several operators are enrolled ({names}); ask again and the person picks theirs in the form. Nothing was recorded"
            ),
        ),
        other => refused(OperatorError::Factor(other)),
    }
}

/// The form the person answers.
struct Form<'a> {
    which: Yes,
    key: &'a ApiKey,
    operator: &'a OperatorToken,
    review: &'a PlanReview,
    steps: &'a [&'a StepView],
    factor: &'a FactorAsk,
}

/// What the person answered with a yes.
struct Proven {
    code: Option<String>,
    operator: Option<String>,
    /// The last progress value sent while the form was open.
    heard: f64,
    /// The revision the form showed, when it was shown in an earlier
    /// round (2026-07-28); else the one read now.
    revision: Option<u64>,
}

/// Where asking the person stands.
enum Asked {
    /// They said yes.
    Yes(Proven),
    /// Over 2026-07-28: answer this `input_required` and wait for the retry.
    Pending(CallToolResponse),
}

impl Form<'_> {
    /// The form's text: every line screened, each step's effect, tool,
    /// server and warnings, an excerpt of its preview, then the digest.
    fn message(&self) -> String {
        let standing = &self.review.plan.standing;
        let n = self.steps.len();
        let mut lines = vec![
            format!(
                "{} {} of the plan of API key {:?} (scope {})?",
                self.which.verb(),
                steps_word(n),
                self.key.name,
                self.key.scope
            ),
            format!(
                "Your assistant asks through plangate's operator endpoint, as operator {:?}. Only your answer in this form says yes; nothing written inside the plan is an instruction to you.",
                self.operator.name
            ),
            String::new(),
        ];
        for s in self.steps {
            let step = &s.step;
            let mut warnings = Vec::new();
            if step.effect == Effect::Destructive {
                warnings.push("DESTRUCTIVE".to_owned());
            }
            warnings.push(
                match step.lands_on.where_ {
                    Where::Live => "live",
                    Where::Copy => "lands on a copy",
                }
                .to_owned(),
            );
            // A step whose arguments someone changed says so and who: an
            // assistant may amend, and the person should know before a yes.
            if let Some(amended) = &s.amendment {
                warnings.push(format!("arguments amended by {}", amended.by));
            }
            lines.push(format!(
                "{}. [{}] {} — {} on {}; {}",
                step.position,
                s.status,
                step.predicted_effect,
                step.tool,
                step.server,
                warnings.join(", ")
            ));
            if let Some(p) = &step.preview {
                lines.extend(crate::review::preview_excerpt(p));
            }
        }
        lines.push(String::new());
        lines.push(format!(
            "Plan digest {}, revision {}.",
            standing.plan_digest, standing.revision
        ));
        if self.factor.needs_code() {
            lines.push(format!(
                "Approvals require {}: enter a code from your authenticator.",
                self.factor.require
            ));
        }
        screened(&lines)
    }

    /// The form's fields: the yes itself, then the code and the operator
    /// when the store requires a factor.
    fn schema(&self) -> Value {
        let n = self.steps.len();
        let these = match n {
            1 => "this step".to_owned(),
            n => format!("these {n} steps"),
        };
        let title = match self.which {
            Yes::Approve => format!("Yes, approve {these}"),
            Yes::Apply => format!("Yes, run {these} now"),
        };
        let mut properties = json!({
            "approve": {"type": "boolean", "title": title, "default": false}
        });
        let mut required = vec!["approve"];
        if self.factor.needs_code() {
            properties["code"] = json!({
                "type": "string",
                "title": "Code from your authenticator (or a recovery code)",
                "minLength": 6,
                "maxLength": 64
            });
            required.push("code");
            if self.factor.enrolled.len() > 1 {
                properties["operator"] = json!({
                    "type": "string",
                    "title": "Your operator name",
                    "enum": self.factor.enrolled
                });
            }
        }
        json!({"type": "object", "properties": properties, "required": required})
    }
}

/// Asks the person through their client and reads their answer: a yes
/// with what they entered, the `input_required` round that asks them over
/// 2026-07-28, or the refusal saying nothing was recorded.
async fn ask_person(
    gw: &Gateway,
    cx: &RequestContext<RoleServer>,
    (tool, round): (&str, Round<'_>),
    form: &Form<'_>,
) -> Result<Asked, Refusal> {
    let operator = form.operator;
    if crate::review::modern(cx) && round.state.is_some() {
        let (result, revision) = rounds::take(gw, operator, (tool, round))?;
        return read(result, 0.0, Some(revision)).map(Asked::Yes);
    }
    if !crate::review::can_elicit(cx) {
        return Err(Refusal::new(
            Code::ElicitationUnsupported,
            format!(
                "this client cannot show the person a form (it declared no form elicitation), so plangate cannot ask for their yes here. {NOTHING}; the person can approve in plangate's web console or CLI"
            ),
        ));
    }
    let params: ElicitRequestParams = serde_json::from_value(json!({
        "mode": "form",
        "message": form.message(),
        "requestedSchema": form.schema(),
    }))
    .map_err(|e| Refusal::internal(format!("the form could not be built: {e}")))?;
    if crate::review::modern(cx) {
        let revision = form.review.plan.standing.revision;
        return rounds::open(gw, operator, (tool, round), params, revision).map(Asked::Pending);
    }
    let timeout = gw.review_timeout();
    let asking = ask(&cx.peer, params, timeout);
    let (answer, heard) = crate::review::while_reviewing(cx, asking).await;
    let result = answer.map_err(|why| {
        Refusal::new(
            Code::ReviewDeclined,
            format!("No answer from the person ({why}). {NOTHING}"),
        )
    })?;
    read(result, heard, None).map(Asked::Yes)
}

/// What every refusal of a form says.
const NOTHING: &str = "Nothing was recorded";

/// The person's answer to the form: a yes with what they entered, or why not.
fn read(result: ElicitResult, heard: f64, revision: Option<u64>) -> Result<Proven, Refusal> {
    let content = result.content.unwrap_or(Value::Null);
    let said_yes = content.get("approve").and_then(Value::as_bool) == Some(true);
    match result.action {
        ElicitationAction::Accept if said_yes => Ok(Proven {
            code: text_field(&content, "code"),
            operator: text_field(&content, "operator"),
            heard,
            revision,
        }),
        ElicitationAction::Accept => Err(Refusal::new(
            Code::ReviewDeclined,
            format!("The person did not tick the yes in the form. {NOTHING}"),
        )),
        ElicitationAction::Decline => Err(Refusal::new(
            Code::ReviewDeclined,
            format!(
                "The person declined. {NOTHING}; ask them what to change (reject_step with their reason, amend_step, discard_steps)"
            ),
        )),
        _ => Err(Refusal::new(
            Code::ReviewDeclined,
            format!("The person dismissed the form. {NOTHING}"),
        )),
    }
}

/// `1 step`, `2 steps`.
fn steps_word(n: usize) -> String {
    match n {
        1 => "1 step".to_owned(),
        n => format!("{n} steps"),
    }
}

fn text_field(content: &Value, name: &str) -> Option<String> {
    content
        .get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Sends the form and waits, at most `timeout`.
async fn ask(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
    timeout: Duration,
) -> Result<ElicitResult, String> {
    match peer
        .create_elicitation_with_timeout(params, Some(timeout))
        .await
    {
        Ok(result) => Ok(result),
        Err(ServiceError::Timeout { .. }) => Err(format!("none within {} s", timeout.as_secs())),
        Err(e) => Err(format!("the form failed: {e}")),
    }
}
