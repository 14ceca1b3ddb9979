//! Tool effect classes and the rule that assigns one to every upstream tool
//! (docs/design.md §3). The rule is enforced, not advisory: nothing unknown is ever a
//! read.

use crate::closed_names::closed_names;

use serde::{Deserialize, Serialize};

/// What calling a tool may do to the world, ordered `Read < Write <
/// Destructive` so that "effect above the mode's access" is a comparison.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Changes nothing; always runs.
    Read,
    /// Changes something that can be changed back.
    Write,
    /// May destroy or overwrite data; needs a person's attention.
    Destructive,
}

impl Effect {
    /// Every effect, in order; used for messages listing what is allowed.
    pub const ALL: [Effect; 3] = [Effect::Read, Effect::Write, Effect::Destructive];

    /// The lowercase name used in config, answers and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
            Effect::Destructive => "destructive",
        }
    }
}

closed_names!(Effect, parse: ParseEffectError, "effect", ": expected read, write or destructive");

/// Where a tool's effect class came from, so an operator can see why plan
/// mode treats a tool the way it does (`plangate config check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EffectSource {
    /// A per-tool override in plangate's config (trusted).
    Override,
    /// The upstream's own annotations, from an upstream trusted to annotate.
    Annotation,
    /// The MCP spec defaults: not read-only, destructive.
    Default,
}

impl EffectSource {
    /// The lowercase name used in answers and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectSource::Override => "override",
            EffectSource::Annotation => "annotation",
            EffectSource::Default => "default",
        }
    }
}

closed_names!(EffectSource);

/// Classifies a tool (docs/design.md §3): a config override wins; else the
/// annotations, only when the upstream is trusted to annotate
/// (`readOnlyHint: true` ⇒ read, `destructiveHint: false` ⇒ write, else
/// destructive); else the spec defaults, which make it destructive.
///
/// `read_only_hint` and `destructive_hint` are the raw annotation values;
/// `None` means the upstream did not say, which takes the spec default
/// (`readOnlyHint = false`, `destructiveHint = true`).
pub fn classify(
    override_effect: Option<Effect>,
    trust_annotations: bool,
    read_only_hint: Option<bool>,
    destructive_hint: Option<bool>,
) -> (Effect, EffectSource) {
    if let Some(effect) = override_effect {
        return (effect, EffectSource::Override);
    }
    if !trust_annotations || (read_only_hint.is_none() && destructive_hint.is_none()) {
        return (Effect::Destructive, EffectSource::Default);
    }
    let effect = if read_only_hint == Some(true) {
        Effect::Read
    } else if destructive_hint == Some(false) {
        Effect::Write
    } else {
        Effect::Destructive
    };
    (effect, EffectSource::Annotation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_wins_over_annotations() {
        assert_eq!(
            classify(Some(Effect::Write), true, Some(true), None),
            (Effect::Write, EffectSource::Override)
        );
    }

    #[test]
    fn annotations_count_only_from_a_trusted_upstream() {
        assert_eq!(
            classify(None, true, Some(true), None),
            (Effect::Read, EffectSource::Annotation)
        );
        assert_eq!(
            classify(None, false, Some(true), None),
            (Effect::Destructive, EffectSource::Default)
        );
    }

    #[test]
    fn destructive_hint_false_means_write_and_anything_else_destructive() {
        assert_eq!(
            classify(None, true, Some(false), Some(false)).0,
            Effect::Write
        );
        assert_eq!(classify(None, true, None, Some(false)).0, Effect::Write);
        assert_eq!(
            classify(None, true, Some(false), Some(true)).0,
            Effect::Destructive
        );
        assert_eq!(
            classify(None, true, Some(false), None).0,
            Effect::Destructive
        );
    }

    #[test]
    fn a_tool_without_annotations_is_never_a_read() {
        assert_eq!(
            classify(None, true, None, None),
            (Effect::Destructive, EffectSource::Default)
        );
    }

    #[test]
    fn effects_are_ordered_by_what_they_may_do() {
        assert!(Effect::Read < Effect::Write && Effect::Write < Effect::Destructive);
        for e in Effect::ALL {
            assert_eq!(e.as_str().parse::<Effect>(), Ok(e));
        }
        assert!("delete".parse::<Effect>().is_err());
    }
}
