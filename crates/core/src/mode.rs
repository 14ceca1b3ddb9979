//! Modes (docs/design.md §4): named, durable, per-key state that caps which effects
//! run directly and says what happens above the cap.
//!
//! `default` is reserved and has no cap. `plan` is built in (reads run,
//! writes are planned) and may be overridden by config. Operators define
//! more. A mode recorded in the log but no longer defined reads as the
//! built-in `plan` — fail closed.

use crate::closed_names::closed_names;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Effect;

/// The reserved name of the mode with no cap.
pub const DEFAULT_MODE: &str = "default";
/// The name of the built-in plan mode.
pub const PLAN_MODE: &str = "plan";

/// What happens to a call whose effect is above the mode's access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverAccess {
    /// The call becomes a plan step.
    Plan,
    /// The call is refused `forbidden_by_mode`.
    Refuse,
    /// The person is asked first (review); no yes, no call.
    Ask,
}

impl OverAccess {
    /// Every value, in the order docs/config.md lists them.
    pub const ALL: [OverAccess; 3] = [OverAccess::Plan, OverAccess::Refuse, OverAccess::Ask];

    /// The lowercase name used in config and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            OverAccess::Plan => "plan",
            OverAccess::Refuse => "refuse",
            OverAccess::Ask => "ask",
        }
    }
}

closed_names!(OverAccess, parse: ParseOverAccessError, "over_access", ": expected plan, refuse or ask");

/// One mode's definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeSpec {
    /// The mode's name.
    pub name: String,
    /// Guidance shown to the agent while the mode is in force.
    pub instructions: Option<String>,
    /// The widest effect that runs directly.
    pub access: Effect,
    /// What happens above `access`.
    pub over_access: OverAccess,
}

impl ModeSpec {
    /// The mode with no cap.
    pub fn default_mode() -> ModeSpec {
        ModeSpec {
            name: DEFAULT_MODE.to_owned(),
            instructions: None,
            access: Effect::Destructive,
            over_access: OverAccess::Refuse,
        }
    }

    /// The built-in plan mode: reads run, every write is planned.
    pub fn builtin_plan() -> ModeSpec {
        ModeSpec {
            name: PLAN_MODE.to_owned(),
            instructions: Some(
                "Plan mode: reads run; every write becomes a plan step for the person to review. Nothing is written until they say yes and plangate_apply_plan runs."
                    .to_owned(),
            ),
            access: Effect::Read,
            over_access: OverAccess::Plan,
        }
    }

    /// Whether this is a plan-like mode (`over_access = "plan"`): the plan
    /// tools are the agent's way forward and `exit_plan_mode` is offered.
    pub fn plan_mode(&self) -> bool {
        self.over_access == OverAccess::Plan
    }
}

/// Why a mode definition is not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// `default` is reserved.
    #[error("mode name \"default\" is reserved: it always means no cap")]
    Reserved,
    /// The name breaks the rule.
    #[error(
        "mode name {0:?} is not allowed: use 1–32 lowercase letters, digits, '-' and '_', starting with a letter"
    )]
    BadName(String),
}

/// Checks a mode name: 1–32 of `a-z 0-9 - _`, starting with a letter, not
/// `default`.
pub fn validate_mode_name(name: &str) -> Result<(), ModeError> {
    if name == DEFAULT_MODE {
        return Err(ModeError::Reserved);
    }
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ModeError::BadName(name.to_owned()))
    }
}

/// The configured modes: the built-in `plan` (unless overridden) plus the
/// operator's, and `default`; and the mode of a key that never set one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Modes {
    defined: BTreeMap<String, ModeSpec>,
    /// The mode of a key whose log sets none (`[gateway] default_mode`).
    default: String,
    /// Whether every key without an operator's lock or unlock is locked at
    /// `default` (`[gateway] default_mode_locked`).
    default_locked: bool,
}

/// Who holds a key's mode lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LockedBy {
    /// An operator locked this key (`plangate mode set --lock`, the
    /// console).
    Operator,
    /// `[gateway] default_mode_locked`: no operator has locked or unlocked
    /// this key, and the config locks every such key.
    Config,
}

impl LockedBy {
    /// Who can lift the lock, in words for the refusal.
    pub fn describe(self) -> &'static str {
        match self {
            LockedBy::Operator => "an operator locked this key's mode",
            LockedBy::Config => {
                "plangate's config locks the mode of every key ([gateway] default_mode_locked)"
            }
        }
    }
}

/// The mode in force for one key, and whether its agent may change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    /// The mode.
    pub spec: ModeSpec,
    /// Set once when the recorded mode is no longer defined (see
    /// [`Modes::resolve`]).
    pub notice: Option<String>,
    /// Who locked it, if it is locked.
    pub locked_by: Option<LockedBy>,
}

impl InForce {
    /// Whether the agent is held in this mode: it cannot choose another,
    /// end its session or leave plan mode, and its plans need an approval
    /// from outside the key.
    pub fn locked(&self) -> bool {
        self.locked_by.is_some()
    }
}

impl Default for Modes {
    fn default() -> Self {
        Modes::new(Vec::new())
    }
}

impl Modes {
    /// The built-in modes plus `configured` (already validated names; a
    /// configured `plan` replaces the built-in one).
    pub fn new(configured: Vec<ModeSpec>) -> Modes {
        let mut defined = BTreeMap::new();
        defined.insert(PLAN_MODE.to_owned(), ModeSpec::builtin_plan());
        for m in configured {
            defined.insert(m.name.clone(), m);
        }
        Modes {
            defined,
            default: DEFAULT_MODE.to_owned(),
            default_locked: false,
        }
    }

    /// The same modes with `name` (`default` or a defined mode, checked by
    /// the config) as the mode of keys that set none, locked for every key
    /// without an operator's word if `locked`.
    pub fn with_default(mut self, name: &str, locked: bool) -> Modes {
        self.default = name.to_owned();
        self.default_locked = locked;
        self
    }

    /// The mode of a key that never set one.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// Whether keys without an operator's lock or unlock are locked.
    pub fn default_locked(&self) -> bool {
        self.default_locked
    }

    /// The mode in force for a key's folded state — the one reading of
    /// mode and lock every channel uses:
    ///
    /// * an operator's lock: the locked mode, locked;
    /// * an operator's unlock: the last `mode_set`, else the default mode;
    /// * no operator word and `default_mode_locked`: the default mode,
    ///   locked, whatever the agent set before;
    /// * otherwise the last `mode_set`, else the default mode.
    pub fn in_force(&self, state: &crate::KeyState) -> InForce {
        use crate::fold::ModeLock;
        let (recorded, locked_by) = match &state.lock {
            Some(ModeLock::Locked { mode, .. }) => (Some(mode.as_str()), Some(LockedBy::Operator)),
            Some(ModeLock::Unlocked { .. }) => (state.mode.as_deref(), None),
            None if self.default_locked => (Some(self.default.as_str()), Some(LockedBy::Config)),
            None => (state.mode.as_deref(), None),
        };
        let (spec, notice) = self.resolve(recorded);
        InForce {
            spec,
            notice,
            locked_by,
        }
    }

    /// Every mode an agent may choose: `default` first, then the defined
    /// ones by name (the enum of `begin_session`'s `mode`).
    pub fn names(&self) -> Vec<String> {
        std::iter::once(DEFAULT_MODE.to_owned())
            .chain(self.defined.keys().cloned())
            .collect()
    }

    /// Whether `name` is `default` or a defined mode.
    pub fn contains(&self, name: &str) -> bool {
        name == DEFAULT_MODE || self.defined.contains_key(name)
    }

    /// The mode a recorded name stands for. `None` (nothing recorded) is the
    /// configured default mode. A recorded name that is no longer defined
    /// reads as the built-in `plan` — fail closed — and the second value
    /// says so once. A key's mode in force is [`Modes::in_force`].
    pub fn resolve(&self, recorded: Option<&str>) -> (ModeSpec, Option<String>) {
        match recorded.or(Some(self.default.as_str())) {
            None | Some(DEFAULT_MODE) => (ModeSpec::default_mode(), None),
            Some(name) => match self.defined.get(name) {
                Some(spec) => (spec.clone(), None),
                None => {
                    let mut plan = ModeSpec::builtin_plan();
                    plan.name = PLAN_MODE.to_owned();
                    (
                        plan,
                        Some(format!(
                            "mode {name:?} is no longer defined in plangate's config; the built-in plan mode is in force instead"
                        )),
                    )
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undefined_recorded_mode_fails_closed_to_plan_with_a_notice() {
        let modes = Modes::default();
        let (spec, notice) = modes.resolve(Some("careful"));
        assert_eq!(spec.name, "plan");
        assert!(spec.plan_mode());
        assert!(notice.unwrap().contains("careful"));
        assert_eq!(modes.resolve(None).0, ModeSpec::default_mode());
        assert!(!ModeSpec::default_mode().plan_mode());
    }

    #[test]
    fn mode_names_follow_the_rule() {
        assert_eq!(validate_mode_name("default"), Err(ModeError::Reserved));
        assert!(validate_mode_name("careful").is_ok());
        assert!(validate_mode_name("read-only_2").is_ok());
        for bad in ["", "Plan", "9x", "a b", &"x".repeat(33)] {
            assert!(validate_mode_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_mode_enum_lists_default_and_every_defined_mode() {
        let modes = Modes::new(vec![ModeSpec {
            name: "careful".into(),
            instructions: None,
            access: Effect::Write,
            over_access: OverAccess::Ask,
        }]);
        assert_eq!(modes.names(), ["default", "careful", "plan"]);
    }
}
