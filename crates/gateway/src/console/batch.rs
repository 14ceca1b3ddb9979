//! The console's acts on several keys' plans at once (`POST
//! /console/api/plans/approve`, `…/plans/discard`): each plan bound to the
//! digest and revision on the person's screen, all or nothing — one plan
//! that moved on records nothing for any, and the answer names it so the
//! page can show which (docs/console.md, "Several plans at once"). Apart
//! from the one-key acts in [`super::api`] because the refusal carries the
//! key it is about.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plangate_core::Channel;
use serde::Deserialize;
use serde_json::json;

use super::api::{FactorFields, acting_on, confirm, refused, seen_text};
use super::{Acting, Body, ConsoleError, harden, ok_json};
use crate::Gateway;
use crate::operator::{self, OperatorError};

/// The most plans one act covers.
const MAX_PLANS: usize = 100;

/// One plan as the page showed it.
#[derive(Deserialize)]
pub(super) struct ShownPlan {
    key_id: String,
    plan_digest: String,
    #[serde(default)]
    revision: Option<u64>,
}

impl ShownPlan {
    fn seen(&self) -> operator::Seen<'_> {
        operator::Seen {
            digest: &self.plan_digest,
            revision: self.revision,
        }
    }
}

/// The body of both acts.
#[derive(Deserialize)]
pub(super) struct Plans {
    plans: Vec<ShownPlan>,
    #[serde(flatten)]
    factor: FactorFields,
}

/// The refusal of a batch: the code and message of the one plan that
/// stopped it, and that plan's key, so the page can mark it.
fn batch_refused(e: OperatorError) -> Result<Response, ConsoleError> {
    let key = match &e {
        OperatorError::PlanChanged { key, .. }
        | OperatorError::RevisionMoved { key, .. }
        | OperatorError::NothingWaiting { key }
        | OperatorError::Rule { key, .. } => key.clone(),
        _ => return Err(refused(e)),
    };
    let body = refused(e).0;
    let status = StatusCode::from_u16(body.status).unwrap_or(StatusCode::CONFLICT);
    let answer = json!({
        "error": body.error,
        "message": format!("{} Nothing was recorded for any of the plans.", body.message),
        "key": key,
    });
    Ok(harden(
        (status, Json(answer)).into_response(),
        "default-src 'none'",
    ))
}

/// The plans named, checked: 1 to [`MAX_PLANS`], each key once.
async fn acting_on_all(
    gw: &Gateway,
    plans: &[ShownPlan],
    session: &super::Session,
) -> Result<Vec<crate::acting::Acting>, ConsoleError> {
    if plans.is_empty() || plans.len() > MAX_PLANS {
        return Err(refused(OperatorError::BadArguments(format!(
            "pick 1 to {MAX_PLANS} plans (got {})",
            plans.len()
        ))));
    }
    let mut all = Vec::with_capacity(plans.len());
    for p in plans {
        if plans.iter().filter(|o| o.key_id == p.key_id).count() > 1 {
            return Err(refused(OperatorError::BadArguments(format!(
                "key {} is named twice",
                p.key_id
            ))));
        }
        all.push(acting_on(gw, &p.key_id, session).await?);
    }
    Ok(all)
}

/// `POST /console/api/plans/approve`: a yes to every waiting step of each
/// plan, as shown, with one factor for the whole act.
pub(super) async fn approve(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<Plans>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on_all(&gw, &body.plans, &session).await?;
    let names: Vec<String> = acting.iter().map(|a| a.key.name.clone()).collect();
    let seen: Vec<String> = body
        .plans
        .iter()
        .map(|p| seen_text(&p.plan_digest, p.revision))
        .collect();
    let yes = confirm(
        &gw,
        (
            &operator::factor::Act::ApprovePlans { keys: &names },
            &seen.join("; "),
        ),
        &body.factor,
        &session,
    )
    .await?;
    let plans: Vec<_> = acting
        .iter()
        .zip(&body.plans)
        .map(|(a, p)| (a.key.clone(), p.seen()))
        .collect();
    let actor = acting.first().map(crate::acting::Acting::actor);
    let Some(actor) = actor else {
        return Err(refused(OperatorError::BadArguments(
            "pick a plan".to_owned(),
        )));
    };
    match operator::approve_together(gw.log(), &plans, actor.clone(), &yes, Channel::Console).await
    {
        Ok(approved) => {
            tracing::info!(operator = %session.operator.name, keys = ?names, "console: approved plans together");
            let config = gw.config();
            let answers: Vec<_> = acting
                .iter()
                .zip(&approved)
                .map(|(a, ap)| operator::approval_answer(&config, &a.key, actor.clone(), ap))
                .collect();
            Ok(ok_json(json!({ "success": true, "approved": answers })))
        }
        Err(e) => batch_refused(e),
    }
}

/// `POST /console/api/plans/discard`: every waiting step of each plan, as
/// shown, discarded.
pub(super) async fn discard(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<Plans>,
) -> Result<Response, ConsoleError> {
    let acting = acting_on_all(&gw, &body.plans, &session).await?;
    let plans: Vec<_> = acting
        .into_iter()
        .zip(&body.plans)
        .map(|(a, p)| (a, p.seen()))
        .collect();
    match operator::discard_together(gw.log(), &plans, gw.ttl_ms()).await {
        Ok(discarded) => {
            tracing::info!(operator = %session.operator.name, plans = discarded.len(), "console: discarded plans together");
            Ok(ok_json(json!({ "success": true, "discarded": discarded })))
        }
        Err(e) => batch_refused(e),
    }
}
