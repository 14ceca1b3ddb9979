//! An event's type without its fields ([`EventType`]): what the log
//! stores as `type`, declared from one list with [`EventKind::event_type`]
//! so a kind and its stored string cannot drift apart.
//!
//! Apart from the kinds themselves: filters and queries of the store read
//! only this, never a whole event.

use super::EventKind;

/// Declares [`EventType`] and [`EventKind::event_type`] from one list, so a
/// kind and its stored `type` string cannot drift apart.
macro_rules! event_types {
    ($($kind:ident => $name:literal,)*) => {
        /// The type of an event without its fields: what the log stores as
        /// `type`, for filters and queries that must not deserialize the
        /// whole event. Compare these, never the strings.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventType {
            $(
                #[doc = concat!("`", $name, "`")]
                $kind,
            )*
        }

        impl EventType {
            /// Every type, in the order the contract lists them.
            pub const ALL: &'static [EventType] = &[$(EventType::$kind),*];

            /// The stored `type` string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventType::$kind => $name,)*
                }
            }
        }

        impl EventKind {
            /// This event's type.
            pub fn event_type(&self) -> EventType {
                match self {
                    $(EventKind::$kind { .. } => EventType::$kind,)*
                }
            }
        }
    };
}

event_types! {
    ModeSet => "mode_set",
    ModeLocked => "mode_locked",
    ModeUnlocked => "mode_unlocked",
    SessionBegun => "session_begun",
    StepPlanned => "step_planned",
    StepDeduplicated => "step_deduplicated",
    StepsDiscarded => "steps_discarded",
    StepRejected => "step_rejected",
    StepAmended => "step_amended",
    ReviewRequested => "review_requested",
    ReviewAnswered => "review_answered",
    ApplyStarted => "apply_started",
    StepStarted => "step_started",
    StepApplied => "step_applied",
    UndoRecorded => "undo_recorded",
    StepFailed => "step_failed",
    StepInDoubt => "step_in_doubt",
    StepRetried => "step_retried",
    ApplyFinished => "apply_finished",
    SessionEnded => "session_ended",
    PlanExpired => "plan_expired",
    CallRecorded => "call_recorded",
    ToolsPinned => "tools_pinned",
    ToolQuarantined => "tool_quarantined",
    ToolAccepted => "tool_accepted",
    ToolRejected => "tool_rejected",
    OperatorEnrolled => "operator_enrolled",
    OperatorRemoved => "operator_removed",
    ApprovalsRequired => "approvals_required",
    FactorUsed => "factor_used",
    PasskeyInvited => "passkey_invited",
    PasskeyAdded => "passkey_added",
    FactorRefused => "factor_refused",
}

impl EventType {
    /// The type a stored `type` string names; `None` for one this build
    /// does not know (a newer plangate's).
    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.iter().copied().find(|t| t.as_str() == s)
    }
}

impl PartialEq<EventType> for str {
    fn eq(&self, other: &EventType) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<EventType> for String {
    fn eq(&self, other: &EventType) -> bool {
        self == other.as_str()
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EventKind {
    /// The `type` string stored with the event.
    pub fn name(&self) -> &'static str {
        self.event_type().as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tests::every_kind;

    #[test]
    fn every_event_type_parses_from_the_string_its_events_store() {
        for kind in every_kind() {
            let t = kind.event_type();
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            assert!(*kind.name() == t);
        }
        assert_eq!(EventType::parse("mode-set"), None);
    }
}
