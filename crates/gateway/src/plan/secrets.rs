//! The secrets a step seals and the ones upstream text is scrubbed of.
//! Apart from planning proper because apply and amend use the same keys
//! and the same rule: a value sealed by one step never comes back through
//! another's preview or answer (docs/design.md §5).

use plangate_core::{KeyState, StepRecord};
use serde_json::Value;

use crate::Engine;
use crate::acting::Acting;
use crate::refusal::Refusal;

/// The secret values sealed with a step, opened with this gateway's seal
/// key; `None` when they cannot be opened (the keys changed).
pub fn open_secrets(engine: &Engine, record: &StepRecord) -> Option<Vec<(String, Value)>> {
    match &record.sealed_secrets {
        None => Some(Vec::new()),
        Some(sealed) => {
            plangate_store::seal::unseal(engine.material(), sealed, record.step_id.as_bytes())
                .ok()
                .and_then(|plain| serde_json::from_slice(&plain).ok())
        }
    }
}

/// Fewest characters a secret from an earlier step must have to be
/// scrubbed from later upstream text: shorter ones ("1", "on") would blank
/// out ordinary words and numbers everywhere.
const MIN_LOGGED_SECRET: usize = 4;

/// Every secret a preview's answer must be scrubbed of: this call's and
/// every one the key's log sealed. The key's state is read once and kept
/// in `known` for the append that follows.
pub(super) async fn secrets_to_scrub(
    engine: &Engine,
    acting: &Acting,
    known: &mut Option<KeyState>,
    current: &[(String, Value)],
) -> Result<Vec<(String, Value)>, Refusal> {
    let state = match known.take() {
        Some(state) => state,
        None => engine
            .log()
            .state(&acting.key.id)
            .await
            .map_err(|e| Refusal::store(e, "nothing was planned"))?,
    };
    let secrets = known_secrets(engine, &state, current);
    *known = Some(state);
    Ok(secrets)
}

/// Every secret value sealed in the key's log, with `current` (the call's
/// own secrets, whatever their length): what upstream text is scrubbed of,
/// so a value sealed by one step cannot come back through another step's
/// preview (the upstream's current state quotes it).
pub(crate) fn known_secrets(
    engine: &Engine,
    state: &KeyState,
    current: &[(String, Value)],
) -> Vec<(String, Value)> {
    let mut all = current.to_vec();
    for step in &state.steps {
        if step.record.sealed_secrets.is_none() {
            continue;
        }
        for (pointer, value) in open_secrets(engine, &step.record).unwrap_or_default() {
            let long_enough = match &value {
                Value::String(s) => s.chars().count() >= MIN_LOGGED_SECRET,
                Value::Array(_) | Value::Object(_) => true,
                other => other.to_string().len() >= MIN_LOGGED_SECRET,
            };
            if long_enough {
                all.push((pointer, value));
            }
        }
    }
    all
}

/// A step's secret values sealed with this gateway's seal key, bound to
/// `step_id`; none when the arguments hold no secret.
pub(super) fn seal(
    engine: &Engine,
    secrets: &[(String, Value)],
    step_id: &str,
) -> Result<Option<String>, Refusal> {
    if secrets.is_empty() {
        return Ok(None);
    }
    let plain = serde_json::to_vec(secrets).map_err(Refusal::internal)?;
    plangate_store::seal::seal(engine.material(), &plain, step_id.as_bytes())
        .map(Some)
        .map_err(|e| Refusal::internal(format!("sealing a secret failed: {e}")))
}
