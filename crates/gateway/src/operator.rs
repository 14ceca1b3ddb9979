//! What a person does to a key's plan from outside the agent — through the
//! CLI (`plangate plans …`) or the web console — in one place, so both
//! channels follow exactly the same rules (docs/design.md §5, §7).
//!
//! Plans are folds over each key's event log, so every act here is a
//! [`KeyLog::transact`] with the log's compare-and-set rule: a person's
//! discard or retry and an agent's call racing on one key never both win
//! on a stale view. Every event a person causes names them
//! (`Actor::Operator`) and the channel they used. Reading a plan first
//! brings it up to date, as every plangate process sharing the store does
//! ([`refresh`]): a claim whose lease ran out is marked `in_doubt`, and a
//! plan past its life expires.
//!
//! Errors carry a stable code ([`OperatorError::code`], docs/design.md §8) and a
//! lowercase message naming the value at fault; callers add their own
//! hints (the CLI names commands, the console names buttons).

use plangate_config::Config;
use plangate_core::{
    Actor, Channel, Code, EventKind, KeyPlanView, KeyState, Step, StepStatus, StepView, Verdict,
};
use plangate_store::{ApiKey, now_ms};
use rmcp::model::CallToolResult;
use tokio_util::sync::CancellationToken;

use crate::Gateway;
use crate::acting::Acting;
use crate::apply::{self, ApplyRequest};
use crate::key_log::{KeyLog, LogError};
use crate::plan::{expires_in, expiry_due};
use crate::refusal::Refusal;
use plangate_core::rules::{self, Refused, Selection};

/// Why a person's act on a plan was refused. Nothing was recorded or run.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The plan has no step with that id.
    #[error("there is no step {step:?} in key {key:?}'s plan")]
    NoStep {
        /// The key's name.
        key: String,
        /// The step id given.
        step: String,
    },
    /// A plan rule refused ([`plangate_core::rules`]): the same refusal,
    /// under the same code, as the agent's tools give.
    #[error("{refused} (key {key:?}); nothing was recorded")]
    Rule {
        /// The key's name.
        key: String,
        /// What the rule said.
        refused: Refused,
    },
    /// Only an in-doubt step is retried.
    #[error(
        "step {step} is {status}, not in doubt: only an in-doubt step is retried; nothing was run"
    )]
    NotInDoubt {
        /// The step.
        step: String,
        /// Its status now.
        status: StepStatus,
    },
    /// The plan is no longer the one the person looked at.
    #[error(
        "the plan of key {key} is now {current}, not {seen}; nothing was recorded or run. Look at it again"
    )]
    PlanChanged {
        /// The key's name.
        key: String,
        /// The digest the person saw.
        seen: String,
        /// The digest now.
        current: String,
    },
    /// The plan moved on from the revision the person looked at, though
    /// its digest may be the same (a step's status changed).
    #[error(
        "the plan of key {key} is at revision {current}, not {seen}, the one you looked at; nothing was recorded or run. Look at it again"
    )]
    RevisionMoved {
        /// The key's name.
        key: String,
        /// The revision the person saw.
        seen: u64,
        /// The revision now.
        current: u64,
    },
    /// Not a plan digest at all.
    #[error("{0:?} is not a plan digest: it looks like sha256: and 64 hex digits")]
    BadDigest(String),
    /// New arguments for a step that cannot be taken.
    #[error("{0}; nothing was recorded")]
    BadArguments(String),
    /// The step changed while a person was acting on it (another person
    /// amended it, or it was applied, discarded or rejected meanwhile).
    #[error(
        "step {step} of key {key:?} changed while you were amending it (it is {status} now, or someone else amended it first); nothing was recorded. Look at it again"
    )]
    StepChanged {
        /// The key's name.
        key: String,
        /// The step.
        step: String,
        /// Its status now.
        status: StepStatus,
    },
    /// Nothing is waiting, so there is nothing to approve.
    #[error("key {key:?} has no waiting steps to approve; nothing was recorded")]
    NothingWaiting {
        /// The key's name.
        key: String,
    },
    /// A rejection needs a reason the agent can act on.
    #[error(
        "a rejection needs a reason (1 to {max} characters), for the agent to read; nothing was recorded"
    )]
    BadReason {
        /// The longest reason taken.
        max: usize,
    },
    /// An apply of the key's plan is (or may still be) running.
    #[error(
        "an apply of key {key:?}'s plan is still running (or stopped less than a lease ago); step {step} stays in doubt. Try again shortly"
    )]
    ApplyAlive {
        /// The key's name.
        key: String,
        /// The step the person wanted to retry.
        step: String,
    },
    /// The plan's life is over, so a retried step would only expire.
    #[error(
        "key {key:?}'s plan outlived its life, so a retried step would expire unrun; step {step} stays in doubt. Discard it, or have the agent begin a new session and plan it again"
    )]
    PlanOutlived {
        /// The key's name.
        key: String,
        /// The step.
        step: String,
    },
    /// An upstream a step calls is not connected.
    #[error("upstream {server:?} is not connected ({why}); nothing was run")]
    UpstreamDown {
        /// The upstream.
        server: String,
        /// Why, as the gateway knows it.
        why: String,
    },
    /// The apply itself refused.
    #[error("apply refused ({}): {}", .0.code.as_str(), .0.message)]
    Refused(Refusal),
    /// The event log could not be read or written.
    #[error("{0}")]
    Log(#[from] LogError),
}

impl OperatorError {
    /// The stable code (docs/design.md §8) for answers a program reads.
    pub fn code(&self) -> &'static str {
        match self {
            OperatorError::NoStep { .. }
            | OperatorError::NotInDoubt { .. }
            | OperatorError::BadDigest(_)
            | OperatorError::NothingWaiting { .. }
            | OperatorError::BadArguments(_)
            | OperatorError::BadReason { .. } => Code::InvalidArguments.as_str(),
            OperatorError::StepChanged { .. } => Code::PlanChanged.as_str(),
            OperatorError::Rule { refused, .. } => refused.code().as_str(),
            OperatorError::PlanChanged { .. } | OperatorError::RevisionMoved { .. } => {
                Code::PlanChanged.as_str()
            }
            OperatorError::ApplyAlive { .. } => Code::ApplyInProgress.as_str(),
            OperatorError::PlanOutlived { .. } => Code::PlanExpired.as_str(),
            OperatorError::UpstreamDown { .. } => Code::UpstreamUnavailable.as_str(),
            OperatorError::Log(_) => Code::StoreUnavailable.as_str(),
            OperatorError::Refused(r) => r.code.as_str(),
        }
    }

    /// Whether the person asked for something that cannot be (a bad step,
    /// digest or status) rather than the world failing: the CLI exits 2.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            OperatorError::NoStep { .. }
                | OperatorError::Rule { .. }
                | OperatorError::NotInDoubt { .. }
                | OperatorError::BadDigest(_)
                | OperatorError::NothingWaiting { .. }
                | OperatorError::BadArguments(_)
                | OperatorError::BadReason { .. }
        )
    }
}

/// The person acting on `key`'s plan, named `operator`, over `channel`.
pub fn acting(key: &ApiKey, operator: &str, channel: Channel) -> Acting {
    Acting {
        key: key.clone(),
        channel,
        operator: Some(operator.to_owned()),
    }
}

/// A plan's life in ms, from config.
pub fn ttl_ms(config: &Config) -> i64 {
    i64::try_from(config.gateway.plan_ttl.as_millis()).unwrap_or(i64::MAX)
}

/// A claim's lease in ms, from config.
pub fn lease_ms(config: &Config) -> i64 {
    i64::try_from(config.gateway.lease.as_millis()).unwrap_or(30_000)
}

/// Checks that `d` is shaped like a plan digest (`sha256:` + 64 hex).
pub fn check_digest(d: &str) -> Result<(), OperatorError> {
    let hex = d.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(OperatorError::BadDigest(d.to_owned()))
    }
}

/// Brings a key's plan up to date before a person reads or changes it:
/// expires a plan past its life and marks claims whose lease ran out
/// `in_doubt` (the same events the gateway's sweeper appends, by
/// `Actor::System`). Returns the state after.
pub async fn refresh(
    log: &KeyLog,
    acting: &Acting,
    ttl_ms: i64,
    lease_ms: i64,
) -> Result<KeyState, LogError> {
    let (state, ()) = log
        .transact(&acting.key.id, |state| {
            let now = now_ms();
            let mut view = state.clone();
            let mut events = Vec::new();
            if let Some(e) = expiry_due(&view, now, ttl_ms, acting) {
                view.apply(view.last_seq + 1, &e);
                events.push(e);
            }
            for e in apply::lease_cleanup(&view, now, lease_ms, acting) {
                view.apply(view.last_seq + 1, &e);
                events.push(e);
            }
            Ok::<_, std::convert::Infallible>((events, ()))
        })
        .await?
        .unwrap_or_else(|never| match never {});
    Ok(state)
}

/// A key's plan as a person sees it (`plans show --json`, the console):
/// the key, its mode, every open step as `get_plan` shows it (redacted,
/// never sealed) with its attempts, the digest and whether that digest is
/// approved by someone whose approval counts for this key (docs/design.md §7).
pub fn plan_view(config: &Config, key: &ApiKey, state: &KeyState, now: i64) -> KeyPlanView {
    let in_force = config.modes.in_force(state);
    let digest = state.plan_digest();
    let scope = rules::approval_scope_for(state, key.scope, &in_force);
    let covered = rules::approved_steps(state, &key.id, scope);
    let approved = state.covers_waiting(&covered);
    let (mode, notice) = (in_force.spec, in_force.notice);
    KeyPlanView {
        key: key.name.clone(),
        key_id: key.id.clone(),
        scope: key.scope,
        revoked: !key.is_active(),
        mode: mode.name.clone(),
        plan_mode: mode.plan_mode(),
        mode_locked: in_force.locked_by,
        expires_in: expires_in(state, now, ttl_ms(config)),
        pending_steps: state.planned_steps().count(),
        plan_digest: digest,
        revision: state.revision,
        reviewed_revision: state.reviewed.as_ref().map(|r| r.revision),
        since_review: state.since_review(),
        approved,
        steps: state
            .open_steps()
            .map(|s| StepView::for_person(s).covered_by(&covered))
            .collect(),
        notice,
    }
}

/// What a person's `mode set` does to the key's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockChange {
    /// Lock the key in the mode set.
    Lock,
    /// Unlock it: its agent sets its mode again, and `[gateway]
    /// default_mode_locked` no longer holds it.
    Unlock,
    /// Neither: a locked key stays locked (in the new mode), an unlocked
    /// one stays unlocked.
    Keep,
}

/// A person sets `acting`'s key's mode (`mode`, or the mode it is in when
/// `None`, which only an unlock may leave out) and lock: one append of
/// `mode_set` and `mode_locked`/`mode_unlocked` as needed, so the mode and
/// its lock never read apart. A key locked (by an operator or by config)
/// and set without `--lock`/`--unlock` stays locked, in the new mode: an
/// operator moving a held agent does not free it by the way. Returns the
/// mode in force after.
pub async fn set_mode(
    log: &KeyLog,
    config: &Config,
    acting: &Acting,
    mode: Option<&str>,
    lock: LockChange,
) -> Result<plangate_core::InForce, LogError> {
    let modes = &config.modes;
    let (state, ()) = log
        .transact(&acting.key.id, |state| {
            let before = modes.in_force(state);
            let mut events = Vec::new();
            if let Some(mode) = mode {
                events.push(acting.event(EventKind::ModeSet {
                    mode: mode.to_owned(),
                }));
            }
            let target = mode.unwrap_or(&before.spec.name).to_owned();
            match lock {
                LockChange::Lock => {
                    events.push(acting.event(EventKind::ModeLocked { mode: target }))
                }
                LockChange::Keep if before.locked() && mode.is_some() => {
                    events.push(acting.event(EventKind::ModeLocked { mode: target }));
                }
                LockChange::Keep => {}
                LockChange::Unlock => events.push(acting.event(EventKind::ModeUnlocked)),
            }
            Ok::<_, std::convert::Infallible>((events, ()))
        })
        .await?
        .unwrap_or_else(|never| match never {});
    Ok(modes.in_force(&state))
}

/// A person drops steps of `acting`'s key: the `named` waiting, failed or
/// in-doubt ones, or every waiting step when none is named. Returns the
/// state after and the ids discarded (none: nothing was recorded).
pub async fn discard(
    log: &KeyLog,
    acting: &Acting,
    named: &[String],
    ttl_ms: i64,
) -> Result<(KeyState, Vec<String>), OperatorError> {
    let key = &acting.key;
    let (state, ids) = log
        .transact(&key.id, |state| {
            // As the agent's discard does: a plan past its life expires
            // first, so naming one of its steps answers `plan_expired`.
            let mut view = state.clone();
            let mut events = Vec::new();
            if let Some(e) = expiry_due(state, now_ms(), ttl_ms, acting) {
                view.apply(view.last_seq + 1, &e);
                events.push(e);
            }
            let selection = if named.is_empty() {
                Selection::Waiting
            } else {
                Selection::Named(named)
            };
            let ids = rules::discard_selection(&view, selection).map_err(|refused| {
                OperatorError::Rule {
                    key: key.name.clone(),
                    refused,
                }
            })?;
            if !ids.is_empty() {
                events.push(acting.event(EventKind::StepsDiscarded {
                    step_ids: ids.clone(),
                }));
            }
            Ok::<_, OperatorError>((events, ids))
        })
        .await??;
    Ok((state, ids))
}

/// Waiting step `step_id` of `key`'s plan in `state`, or why a person
/// cannot act on it as a waiting step: it is not in the plan, or it is no
/// longer waiting. Approve, reject and amend all start here.
pub fn waiting_step<'s>(
    state: &'s KeyState,
    key: &ApiKey,
    step_id: &str,
) -> Result<&'s Step, OperatorError> {
    let step = state.step(step_id).ok_or_else(|| OperatorError::NoStep {
        key: key.name.clone(),
        step: step_id.to_owned(),
    })?;
    if step.status != StepStatus::Planned {
        return Err(OperatorError::Rule {
            key: key.name.clone(),
            refused: Refused::Status {
                step: step_id.to_owned(),
                status: step.status,
            },
        });
    }
    Ok(step)
}

/// The longest rejection reason taken, in characters.
pub const MAX_REASON: usize = 2000;

/// A person rejects one waiting step of `acting`'s key, saying why
/// (`step_rejected`): it never runs, leaves the plan digest, and its
/// agent reads the reason verbatim in `get_plan` and every apply answer.
/// Returns the state after.
pub async fn reject(
    log: &KeyLog,
    acting: &Acting,
    step_id: &str,
    reason: &str,
) -> Result<KeyState, OperatorError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON {
        return Err(OperatorError::BadReason { max: MAX_REASON });
    }
    let key = &acting.key;
    let (state, ()) = log
        .transact(&key.id, |state| {
            waiting_step(state, key, step_id)?;
            Ok::<_, OperatorError>((
                vec![acting.event(EventKind::StepRejected {
                    step_id: step_id.to_owned(),
                    reason: reason.to_owned(),
                })],
                (),
            ))
        })
        .await??;
    Ok(state)
}

/// What a person approved (`approve`).
#[derive(Debug, Clone)]
pub struct Approved {
    /// The key's state after the approval was recorded.
    pub state: KeyState,
    /// The steps approved, in plan order.
    pub step_ids: Vec<String>,
    /// The digest the approval binds: of exactly those steps (docs/design.md §5
    /// form), the plan's digest when they are every waiting step.
    pub digest: String,
}

/// What a person looked at when they said yes: the plan's digest, and its
/// revision when their screen showed one (the console, a confirmation on a
/// terminal). A yes binds it: a plan that moved on from either is refused
/// `plan_changed` and nothing is recorded.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The plan digest shown.
    pub digest: &'a str,
    /// The plan revision shown, if one was.
    pub revision: Option<u64>,
}

impl<'a> Seen<'a> {
    /// Only the digest was shown (`--digest`).
    pub fn digest(digest: &'a str) -> Seen<'a> {
        Seen {
            digest,
            revision: None,
        }
    }

    /// Whether `state` is still the plan the person saw: the same digest,
    /// and the same revision when one was shown.
    fn check(&self, key: &ApiKey, state: &KeyState) -> Result<(), OperatorError> {
        let current = state.plan_digest();
        if self.digest != current {
            return Err(OperatorError::PlanChanged {
                key: key.name.clone(),
                seen: self.digest.to_owned(),
                current,
            });
        }
        match self.revision {
            Some(seen) if seen != state.revision => Err(OperatorError::RevisionMoved {
                key: key.name.clone(),
                seen,
                current: state.revision,
            }),
            _ => Ok(()),
        }
    }
}

/// Records `actor`'s yes over `channel` to the `named` waiting (or
/// failed: to run again) steps of `key`'s plan, or to every waiting step
/// when none is named
/// (`review_answered`, approve, with the step ids and the digest of
/// exactly those steps). The approval covers those steps while they are
/// unchanged, whatever else the plan gains or loses; an amendment of one
/// of them ends it. With `seen`, what the person looked at, a plan that
/// moved since is refused ([`OperatorError::PlanChanged`],
/// [`OperatorError::RevisionMoved`]). Nothing is recorded when anything is
/// refused.
pub async fn approve(
    log: &KeyLog,
    key: &ApiKey,
    actor: Actor,
    channel: Channel,
    seen: Option<Seen<'_>>,
    named: &[String],
) -> Result<Approved, OperatorError> {
    if let Some(seen) = seen {
        check_digest(seen.digest)?;
    }
    let (state, (step_ids, digest)) = log
        .transact(&key.id, |state| {
            if let Some(seen) = seen {
                seen.check(key, state)?;
            }
            let mut ids: Vec<&Step> = Vec::new();
            if named.is_empty() {
                ids.extend(state.planned_steps());
            }
            for id in named {
                // A failed step named: the person's new yes to run it
                // again (the last one was spent on its failed run).
                let step = match state.step(id) {
                    Some(step) if step.status == StepStatus::Failed => step,
                    _ => waiting_step(state, key, id)?,
                };
                if !ids.iter().any(|s| s.record.step_id == *id) {
                    ids.push(step);
                }
            }
            if ids.is_empty() {
                return Err(OperatorError::NothingWaiting {
                    key: key.name.clone(),
                });
            }
            ids.sort_by_key(|s| s.record.position);
            let step_ids: Vec<String> = ids.iter().map(|s| s.record.step_id.clone()).collect();
            let digest = plangate_core::plan_digest(ids.iter().map(|s| &s.record));
            let event = plangate_core::Event {
                at_ms: now_ms(),
                key_id: key.id.clone(),
                actor: actor.clone(),
                channel,
                kind: EventKind::ReviewAnswered {
                    review_id: None,
                    verdict: Verdict::Approve,
                    plan_digest: digest.clone(),
                    feedback: None,
                    step_ids: Some(step_ids.clone()),
                    revision: Some(state.revision),
                },
            };
            Ok((vec![event], (step_ids, digest)))
        })
        .await??;
    Ok(Approved {
        state,
        step_ids,
        digest,
    })
}

/// Which steps a person's apply of `key`'s plan runs now: the same rule as
/// the agent's ([`rules::apply_steps`] with the person's act as the yes) —
/// the `named` waiting or failed steps, or every waiting step (only the
/// approved ones once a person approved part of the plan).
pub fn steps_to_apply(
    config: &Config,
    key: &ApiKey,
    state: &KeyState,
    named: &[String],
) -> Result<rules::ApplySteps, OperatorError> {
    let selection = if named.is_empty() {
        Selection::Waiting
    } else {
        Selection::Named(named)
    };
    let scope = rules::approval_scope_for(state, key.scope, &config.modes.in_force(state));
    let covered = rules::approved_steps(state, &key.id, scope);
    rules::apply_steps(state, selection, rules::Applier::Operator, &covered).map_err(|refused| {
        OperatorError::Rule {
            key: key.name.clone(),
            refused,
        }
    })
}

/// A person applies `acting`'s key's plan now (`plans apply`, the
/// console's Apply): checks the plan is still the one the person saw
/// (`seen`, when given),
/// records the person's yes for exactly the waiting steps it runs
/// ([`steps_to_apply`]), then runs them through `gw` with the same claims,
/// fresh checks and at-most-once rule as the agent's `apply_plan`. `None`
/// when nothing is waiting to run.
pub async fn apply_now(
    gw: &Gateway,
    acting: &Acting,
    seen: Option<Seen<'_>>,
    named: &[String],
) -> Result<Option<CallToolResult>, OperatorError> {
    if let Some(seen) = seen {
        check_digest(seen.digest)?;
    }
    let key = &acting.key;
    let state = refresh(gw.log(), acting, gw.ttl_ms(), gw.lease_ms()).await?;
    let run = steps_to_apply(&gw.config(), key, &state, named)?.run;
    if run.is_empty() {
        return Ok(None);
    }
    if let Some(seen) = seen {
        seen.check(key, &state)?;
    }
    let current = state.plan_digest();
    require_upstreams(gw, run.iter().filter_map(|id| state.step(id)))?;
    // The yes covers exactly the waiting steps this apply runs (a failed
    // step named to run again was approved when it first ran).
    let waiting: Vec<String> = run
        .iter()
        .filter(|id| {
            state
                .step(id)
                .is_some_and(|s| s.status == StepStatus::Planned)
        })
        .cloned()
        .collect();
    if !waiting.is_empty() {
        approve(
            gw.log(),
            key,
            acting.actor(),
            acting.channel,
            Some(Seen {
                digest: &current,
                revision: Some(state.revision),
            }),
            &waiting,
        )
        .await?;
    }
    let request = ApplyRequest {
        step_ids: (!named.is_empty()).then(|| named.to_vec()),
        plan_digest: Some(current),
        continue_on_error: false,
    };
    apply::apply_plan(gw, acting, request, None, CancellationToken::new())
        .await
        .map(Some)
        .map_err(OperatorError::Refused)
}

/// Fails unless every upstream the steps call is connected, so nothing is
/// claimed (or recorded as failed) when the world cannot be reached.
pub fn require_upstreams<'a>(
    gw: &Gateway,
    steps: impl IntoIterator<Item = &'a Step>,
) -> Result<(), OperatorError> {
    let down = gw.down_upstreams();
    for step in steps {
        let server = &step.record.server;
        if gw.upstream(server).is_none() {
            return Err(OperatorError::UpstreamDown {
                server: server.clone(),
                why: down
                    .get(server)
                    .cloned()
                    .unwrap_or_else(|| "not configured".to_owned()),
            });
        }
    }
    Ok(())
}

/// Refuses unless `step_id` is in doubt in `state`.
pub fn check_in_doubt(state: &KeyState, key: &ApiKey, step_id: &str) -> Result<(), OperatorError> {
    match state.step(step_id) {
        None => Err(OperatorError::NoStep {
            key: key.name.clone(),
            step: step_id.to_owned(),
        }),
        Some(s) if s.status != StepStatus::InDoubt => Err(OperatorError::NotInDoubt {
            step: step_id.to_owned(),
            status: s.status,
        }),
        Some(_) => Ok(()),
    }
}

/// A person's explicit retry of an in-doubt step (docs/design.md §5): records
/// `step_retried` by the operator, then runs exactly that step now through
/// `gw`, with the same claims, fresh checks and at-most-once rule as an
/// agent's `apply_plan`. Returns the receipt.
pub async fn retry(
    gw: &Gateway,
    acting: &Acting,
    step_id: &str,
) -> Result<CallToolResult, OperatorError> {
    let key = &acting.key;
    let (lease, ttl) = (gw.lease_ms(), gw.ttl_ms());
    let state = refresh(gw.log(), acting, ttl, lease).await?;
    check_in_doubt(&state, key, step_id)?;
    if let Some(step) = state.step(step_id) {
        require_upstreams(gw, [step])?;
    }
    gw.log()
        .transact(&key.id, |state| {
            check_in_doubt(state, key, step_id)?;
            let now = now_ms();
            if plangate_core::rules::apply_alive(state, now, lease) {
                return Err(OperatorError::ApplyAlive {
                    key: key.name.clone(),
                    step: step_id.to_owned(),
                });
            }
            // Retried into a plan whose life is over, the step would only
            // expire unrun.
            if plangate_core::rules::life_over(state, now, ttl) {
                return Err(OperatorError::PlanOutlived {
                    key: key.name.clone(),
                    step: step_id.to_owned(),
                });
            }
            let event = acting.event(EventKind::StepRetried {
                step_id: step_id.to_owned(),
            });
            Ok((vec![event], ()))
        })
        .await??;
    // The person's explicit retry is the authority to run this one step,
    // whatever the key's scope: a recorded approval would cover the whole
    // plan digest, not just this step.
    let request = ApplyRequest {
        step_ids: Some(vec![step_id.to_owned()]),
        plan_digest: None,
        continue_on_error: false,
    };
    apply::apply_plan(gw, acting, request, None, CancellationToken::new())
        .await
        .map_err(OperatorError::Refused)
}
