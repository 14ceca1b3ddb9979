//! The decision at dispatch (docs/design.md §4): what happens to one `tools/call`,
//! given the tool's effect, who calls, and the mode in force.
//!
//! It is a pure table so it can be tested cell by cell and applied the same
//! way by every edge. It is evaluated once, when the call arrives; apply runs
//! below it (the mode is not consulted there). What it does *not* decide:
//! whether an anonymous caller may read at all (config's `anonymous`), and
//! whether the call could run (tool enabled, arguments valid, plan not full)
//! — the gateway checks those before acting on the decision.

use crate::{Code, Effect, ModeSpec, OverAccess, Scope};

/// Who is calling, as far as the decision cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallerScope {
    /// No API key: may at most read, never plan.
    Anonymous,
    /// An API key with this scope.
    Key(Scope),
}

/// What to do with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Forward the call to the upstream now.
    Run,
    /// Record the call as a plan step; nothing is written.
    Plan,
    /// Ask the person first (review); no yes, no call.
    Ask,
    /// Refuse the call with this code.
    Refuse(Code),
}

/// The decisions that need neither the caller's key state nor the mode: a
/// read runs for everyone, and a write by a caller without a key is
/// refused (`plan_needs_key`). `None`: [`decide`] needs the mode. The
/// gateway asks this first, so a read or an anonymous call never waits on
/// a key's log.
pub fn decide_before_state(effect: Effect, caller: CallerScope) -> Option<Decision> {
    if effect == Effect::Read {
        return Some(Decision::Run);
    }
    (caller == CallerScope::Anonymous).then_some(Decision::Refuse(Code::PlanNeedsKey))
}

/// The dispatch table of docs/design.md §4.
///
/// * A read runs for everyone.
/// * A write or destructive call: anonymous ⇒ `plan_needs_key`; `read`
///   scope ⇒ `forbidden`; `plan` scope ⇒ planned, whatever the mode;
///   `write` scope ⇒ planned when `explicit_plan` (`_plangate_plan: true`),
///   else run when the effect is within the mode's access, else the mode's
///   `over_access` (plan, refuse `forbidden_by_mode`, or ask).
pub fn decide(
    effect: Effect,
    caller: CallerScope,
    mode: &ModeSpec,
    explicit_plan: bool,
) -> Decision {
    if let Some(decision) = decide_before_state(effect, caller) {
        return decision;
    }
    match caller {
        CallerScope::Anonymous => Decision::Refuse(Code::PlanNeedsKey),
        CallerScope::Key(Scope::Read) => Decision::Refuse(Code::Forbidden),
        CallerScope::Key(Scope::Plan) => Decision::Plan,
        CallerScope::Key(Scope::Write) => {
            if explicit_plan {
                Decision::Plan
            } else if effect <= mode.access {
                Decision::Run
            } else {
                match mode.over_access {
                    OverAccess::Plan => Decision::Plan,
                    OverAccess::Refuse => Decision::Refuse(Code::ForbiddenByMode),
                    OverAccess::Ask => Decision::Ask,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn mode(access: Effect, over_access: OverAccess) -> ModeSpec {
        ModeSpec {
            name: "m".into(),
            instructions: None,
            access,
            over_access,
        }
    }

    const CALLERS: [CallerScope; 4] = [
        CallerScope::Anonymous,
        CallerScope::Key(Scope::Read),
        CallerScope::Key(Scope::Plan),
        CallerScope::Key(Scope::Write),
    ];
    const OVER: [OverAccess; 3] = [OverAccess::Plan, OverAccess::Refuse, OverAccess::Ask];

    /// The table of docs/design.md §4 written out independently of `decide`, one
    /// row per (effect vs access, explicit plan) and one column per caller.
    fn expected(
        effect: Effect,
        caller: CallerScope,
        access: Effect,
        over: OverAccess,
        explicit: bool,
    ) -> Decision {
        use Decision::*;
        let [anon, read, plan, write] = if effect == Effect::Read {
            [Run, Run, Run, Run]
        } else {
            let write_col = if explicit {
                Plan
            } else if effect <= access {
                Run
            } else {
                match over {
                    OverAccess::Plan => Plan,
                    OverAccess::Refuse => Refuse(Code::ForbiddenByMode),
                    OverAccess::Ask => Ask,
                }
            };
            [
                Refuse(Code::PlanNeedsKey),
                Refuse(Code::Forbidden),
                Plan,
                write_col,
            ]
        };
        match caller {
            CallerScope::Anonymous => anon,
            CallerScope::Key(Scope::Read) => read,
            CallerScope::Key(Scope::Plan) => plan,
            CallerScope::Key(Scope::Write) => write,
        }
    }

    #[test]
    fn every_cell_of_the_dispatch_table_is_as_designed() {
        let mut cells = 0;
        for effect in Effect::ALL {
            for caller in CALLERS {
                for access in Effect::ALL {
                    for over in OVER {
                        for explicit in [false, true] {
                            let got = decide(effect, caller, &mode(access, over), explicit);
                            assert_eq!(
                                got,
                                expected(effect, caller, access, over, explicit),
                                "{effect} {caller:?} access={access} over={over} explicit={explicit}"
                            );
                            cells += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cells, 3 * 4 * 3 * 3 * 2);
    }

    #[test]
    fn the_designs_named_cells() {
        let plan = ModeSpec::builtin_plan();
        let default = ModeSpec::default_mode();
        let careful = mode(Effect::Write, OverAccess::Ask);
        let readonly = mode(Effect::Read, OverAccess::Refuse);
        let write = CallerScope::Key(Scope::Write);
        // A write in plan mode is planned, not run.
        assert_eq!(decide(Effect::Write, write, &plan, false), Decision::Plan);
        // Reads run even in plan mode and even for anonymous callers.
        assert_eq!(
            decide(Effect::Read, CallerScope::Anonymous, &plan, false),
            Decision::Run
        );
        // The default mode runs everything for a write key.
        assert_eq!(
            decide(Effect::Destructive, write, &default, false),
            Decision::Run
        );
        // `_plangate_plan: true` plans even in the default mode.
        assert_eq!(decide(Effect::Write, write, &default, true), Decision::Plan);
        // A plan-scope key plans whatever the mode.
        assert_eq!(
            decide(
                Effect::Write,
                CallerScope::Key(Scope::Plan),
                &default,
                false
            ),
            Decision::Plan
        );
        assert_eq!(decide(Effect::Write, write, &careful, false), Decision::Run);
        assert_eq!(
            decide(Effect::Destructive, write, &careful, false),
            Decision::Ask
        );
        assert_eq!(
            decide(Effect::Write, write, &readonly, false),
            Decision::Refuse(Code::ForbiddenByMode)
        );
        assert_eq!(
            decide(Effect::Write, CallerScope::Anonymous, &default, false),
            Decision::Refuse(Code::PlanNeedsKey)
        );
        assert_eq!(
            decide(
                Effect::Destructive,
                CallerScope::Key(Scope::Read),
                &default,
                false
            ),
            Decision::Refuse(Code::Forbidden)
        );
    }

    fn any_effect() -> impl Strategy<Value = Effect> {
        prop::sample::select(Effect::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn nothing_but_a_read_runs_unless_a_write_key_is_within_the_modes_access(
            effect in any_effect(),
            caller in prop::sample::select(CALLERS.to_vec()),
            access in any_effect(),
            over in prop::sample::select(OVER.to_vec()),
            explicit in any::<bool>(),
        ) {
            let runs = decide(effect, caller, &mode(access, over), explicit) == Decision::Run;
            let allowed = effect == Effect::Read
                || (caller == CallerScope::Key(Scope::Write) && effect <= access && !explicit);
            prop_assert_eq!(runs, allowed);
        }
    }

    #[test]
    fn what_is_decided_before_the_state_agrees_with_the_whole_table() {
        let modes = [
            mode(Effect::Read, OverAccess::Plan),
            mode(Effect::Write, OverAccess::Refuse),
            mode(Effect::Destructive, OverAccess::Ask),
        ];
        for effect in [Effect::Read, Effect::Write, Effect::Destructive] {
            for caller in [
                CallerScope::Anonymous,
                CallerScope::Key(Scope::Read),
                CallerScope::Key(Scope::Plan),
                CallerScope::Key(Scope::Write),
            ] {
                if let Some(early) = decide_before_state(effect, caller) {
                    for m in &modes {
                        for explicit in [false, true] {
                            assert_eq!(decide(effect, caller, m, explicit), early);
                        }
                    }
                }
            }
        }
        assert_eq!(
            decide_before_state(Effect::Write, CallerScope::Key(Scope::Write)),
            None
        );
    }
}
