//! `POST /console/api/mode`: a person sets a key's mode and lock through
//! the operator API (`plangate mode set --server`), by the same operation
//! as at the data dir ([`operator::set_mode`]). An unlock, and moving a key
//! held in a plan mode to one that is not, widen what runs: each needs
//! the person's factor when the store requires one.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use plangate_core::{Code, ModeAnswer};
use serde::Deserialize;

use super::api::{FactorFields, confirm, key_by_id};
use super::{Acting, Body, ConsoleError, ok_typed};
use crate::Gateway;
use crate::operator::factor::{Act, FactorError};
use crate::operator::{self, LockChange, OperatorError};

/// The request: the key, the mode (absent: only an unlock), and the lock.
#[derive(Deserialize)]
pub(super) struct ModeBody {
    key_id: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    lock: LockWord,
    #[serde(flatten)]
    factor: FactorFields,
}

/// `lock`, `unlock`, or `keep` (the default: a locked key stays locked).
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum LockWord {
    Lock,
    Unlock,
    #[default]
    Keep,
}

/// Sets the mode; confirms an unlock first, and a move out of plan mode
/// of a held key when the operation says it needs the person's yes.
pub(super) async fn set(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<ModeBody>,
) -> Result<Response, ConsoleError> {
    let key = key_by_id(&gw, &body.key_id).await?;
    let config = gw.config();
    if let Some(mode) = &body.mode
        && !config.modes.contains(mode)
    {
        return Err(ConsoleError::refusal(
            Code::InvalidArguments,
            format!(
                "mode {mode:?} is not defined; use one of {}",
                config.modes.names().join(", ")
            ),
        ));
    }
    let change = match body.lock {
        LockWord::Lock => LockChange::Lock,
        LockWord::Unlock => LockChange::Unlock,
        LockWord::Keep => LockChange::Keep,
    };
    let mut yes = match change {
        LockChange::Unlock => {
            let act = Act::Unlock { key: &key.name };
            Some(confirm(&gw, (&act, ""), &body.factor, &session).await?)
        }
        _ => None,
    };
    let mode = body.mode.as_deref();
    let in_force = loop {
        let who = yes
            .as_ref()
            .and_then(|y| y.operator())
            .unwrap_or(&session.operator.name)
            .to_owned();
        let acting = operator::acting(&key, &who, plangate_core::Channel::Console);
        match operator::set_mode(gw.log(), &config, &acting, mode, change, yes.as_ref()).await {
            Err(OperatorError::Factor(FactorError::Unconfirmed(_))) if yes.is_none() => {
                let act = Act::Relock {
                    key: &key.name,
                    mode: mode.unwrap_or_default(),
                };
                yes = Some(confirm(&gw, (&act, ""), &body.factor, &session).await?);
            }
            other => break other?,
        }
    };
    tracing::info!(operator = %session.operator.name, key = %key.name, mode = %in_force.spec.name, "console: mode set");
    Ok(ok_typed(&ModeAnswer {
        key: key.name.clone(),
        key_id: key.id.clone(),
        mode: in_force.spec.name.clone(),
        plan_mode: in_force.spec.plan_mode(),
        mode_locked: in_force.locked_by,
        set_by: yes
            .as_ref()
            .and_then(|y| y.operator())
            .unwrap_or(&session.operator.name)
            .to_owned(),
    }))
}
