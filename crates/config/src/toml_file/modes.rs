//! `[modes.NAME]` of a `plangate.toml`: the modes an agent may choose
//! beside the built-in ones (docs/design.md §4).

use plangate_core::{Effect, ModeSpec, OverAccess, PLAN_MODE, validate_mode_name};

use super::values::{effect_value, non_empty_text};
use crate::check::{Checker, child};

const MODE_KEYS: [&str; 3] = ["instructions", "access", "over_access"];

/// `[modes]`: every `[modes.NAME]` in it.
pub(super) fn modes(c: &mut Checker<'_>, node: &toml::Value) -> Option<Vec<ModeSpec>> {
    let entries = c.table("modes", node, "a table of [modes.NAME] tables")?;
    let mut out = Some(Vec::with_capacity(entries.len()));
    for (name, value) in entries {
        let m = mode(c, name, value);
        out = out.zip(m).map(|(mut v, m)| {
            v.push(m);
            v
        });
    }
    out
}

/// One `[modes.NAME]`. `access` defaults to read and `over_access` to plan;
/// `[modes.plan]` starts from the built-in plan mode, so what it leaves out
/// (its instructions, say) stays as built in.
fn mode(c: &mut Checker<'_>, name: &str, node: &toml::Value) -> Option<ModeSpec> {
    let key = child("modes", name);
    let name_ok = match validate_mode_name(name) {
        Ok(()) => true,
        Err(e) => {
            c.error(&key, e.to_string());
            false
        }
    };
    let entries = c.table(&key, node, "a table")?;
    c.unknown_keys(&key, &entries, &MODE_KEYS);
    let mut spec = if name == PLAN_MODE {
        Some(ModeSpec::builtin_plan())
    } else {
        Some(ModeSpec {
            name: name.to_owned(),
            instructions: None,
            access: Effect::Read,
            over_access: OverAccess::Plan,
        })
    };
    for (k, v) in entries {
        let item_key = child(&key, k);
        let ok =
            match k {
                "instructions" => non_empty_text(c, &item_key, v)
                    .map(|t| spec.as_mut().map(|s| s.instructions = Some(t))),
                "access" => effect_value(c, &item_key, "access", v)
                    .map(|e| spec.as_mut().map(|s| s.access = e)),
                "over_access" => over_access(c, &item_key, name, v)
                    .map(|o| spec.as_mut().map(|s| s.over_access = o)),
                _ => Some(None), // reported by unknown_keys
            };
        if ok.is_none() {
            spec = None;
        }
    }
    spec.filter(|_| name_ok)
}

fn over_access(
    c: &mut Checker<'_>,
    key: &str,
    mode: &str,
    node: &toml::Value,
) -> Option<OverAccess> {
    let s = c.raw_str(key, node)?;
    let Ok(value) = s.parse::<OverAccess>() else {
        c.error(
            key,
            format!("over_access {s:?} is not allowed: use \"plan\", \"refuse\" or \"ask\""),
        );
        return None;
    };
    if mode == PLAN_MODE && value != OverAccess::Plan {
        c.error(
            key,
            format!(
                "over_access {s:?} is not allowed for the plan mode: it plans what is above its access (that is what agents and people expect of \"plan\"); define a mode with another name for \"refuse\" or \"ask\""
            ),
        );
        return None;
    }
    Some(value)
}
