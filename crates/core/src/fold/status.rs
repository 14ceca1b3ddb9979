//! A step's status and the one table of the moves between statuses
//! (docs/design.md §5 "Step statuses").
//!
//! Apart from the fold that applies it: [`StepStatus::can_become`] is the
//! table every status change of the fold goes through (and the rules of
//! which steps a discard or an apply may take read it too), so it is read
//! and tested here on its own.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a step is in its life (docs/design.md §5 "Step statuses").
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Waiting to be applied.
    Planned,
    /// Claimed by an apply; the upstream call may be under way.
    Running,
    /// The upstream answered with a result.
    Applied,
    /// The upstream answered with an error (or a fresh check failed);
    /// naming it in `apply_plan` runs it again.
    Failed,
    /// No definite answer was recorded; runs again only by a person's retry.
    InDoubt,
    /// The plan's life ran out while it waited.
    Expired,
    /// Dropped from the plan.
    Discarded,
    /// A person said no to it, with a reason: listed with the plan, never
    /// run, outside the digest.
    Rejected,
}

impl StepStatus {
    /// Whether the step is still part of the plan (`planned`, `running`,
    /// `failed`, `in_doubt`, `rejected`): what `get_plan` lists.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            StepStatus::Planned
                | StepStatus::Running
                | StepStatus::Failed
                | StepStatus::InDoubt
                | StepStatus::Rejected
        )
    }

    /// The snake_case name used in answers and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Planned => "planned",
            StepStatus::Running => "running",
            StepStatus::Applied => "applied",
            StepStatus::Failed => "failed",
            StepStatus::InDoubt => "in_doubt",
            StepStatus::Expired => "expired",
            StepStatus::Discarded => "discarded",
            StepStatus::Rejected => "rejected",
        }
    }

    /// Whether a step may move from `self` to `to` (docs/design.md §5): the
    /// one table the fold obeys. A step moves only to a status its status
    /// can become, and an event asking for any other move changes nothing:
    ///
    /// * `step_started`: `planned` | `failed` → `running`;
    /// * `step_applied` / `step_failed` / `step_in_doubt`: `running` →
    ///   `applied` | `failed` | `in_doubt`;
    /// * `step_retried`: `in_doubt` → `planned`;
    /// * `step_rejected`: `planned` → `rejected`;
    /// * `steps_discarded` / `session_ended`: `planned` | `failed` |
    ///   `in_doubt` | `rejected` → `discarded`;
    /// * `plan_expired`: `planned` | `rejected` → `expired`.
    ///
    /// No status becomes itself: amending a waiting step and renewing a
    /// running claim keep the status, and are not moves.
    pub fn can_become(self, to: StepStatus) -> bool {
        use StepStatus::*;
        matches!(
            (self, to),
            (Planned, Running | Expired | Discarded | Rejected)
                | (Running, Applied | Failed | InDoubt)
                | (Failed, Running | Discarded)
                | (InDoubt, Planned | Discarded)
                | (Rejected, Expired | Discarded)
        )
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::StepStatus::{self, *};

    /// Every status, in declaration order.
    const ALL: [StepStatus; 8] = [
        Planned, Running, Applied, Failed, InDoubt, Expired, Discarded, Rejected,
    ];

    /// Its place in [`ALL`]; fails to compile when a status is added, so
    /// [`ALL`] names it too.
    fn place(status: StepStatus) -> usize {
        match status {
            Planned => 0,
            Running => 1,
            Applied => 2,
            Failed => 3,
            InDoubt => 4,
            Expired => 5,
            Discarded => 6,
            Rejected => 7,
        }
    }

    /// Every status a step may come from to reach `to`, in declaration
    /// order.
    fn sources(to: StepStatus) -> Vec<StepStatus> {
        ALL.into_iter().filter(|from| from.can_become(to)).collect()
    }

    #[test]
    fn the_table_holds_each_move_the_fold_makes_and_no_other() {
        assert_eq!(sources(Planned), [InDoubt], "a person's retry");
        assert_eq!(sources(Running), [Planned, Failed], "a claim");
        for outcome in [Applied, Failed, InDoubt] {
            assert_eq!(sources(outcome), [Running], "{outcome}");
        }
        assert_eq!(sources(Rejected), [Planned], "a person's no");
        assert_eq!(sources(Discarded), [Planned, Failed, InDoubt, Rejected]);
        assert_eq!(sources(Expired), [Planned, Rejected]);
    }

    #[test]
    fn no_status_becomes_itself_and_ended_steps_stay_ended() {
        for status in ALL {
            assert!(!status.can_become(status), "{status}");
            if !status.is_open() {
                let onward: Vec<_> = ALL
                    .into_iter()
                    .filter(|to| status.can_become(*to))
                    .collect();
                assert_eq!(onward, [], "{status} ended");
            }
        }
    }

    #[test]
    fn all_lists_every_status_once_by_its_name() {
        let names: Vec<&str> = ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "planned",
                "running",
                "applied",
                "failed",
                "in_doubt",
                "expired",
                "discarded",
                "rejected"
            ]
        );
        for status in ALL {
            assert_eq!(ALL[place(status)], status);
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
        }
    }
}
