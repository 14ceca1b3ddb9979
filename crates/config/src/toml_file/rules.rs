//! `[[rules]]` of a `plangate.toml`: each rule's fields read strictly,
//! then all of them compiled by the policy crate, its mistakes placed on
//! the rule and line they come from.

use plangate_core::{ModeSpec, PLAN_MODE};

use crate::check::{Checker, child, index};

const RULE_KEYS: [&str; 6] = ["name", "when", "modes", "outcome", "message", "effect"];

/// `[[rules]]`: each table's fields read strictly, then all of them
/// compiled together ([`plangate_policy::Policy::compile`]) against the
/// modes the file defines, so a condition that is not CEL, names an
/// unknown variable or function, or can never match is an error at load —
/// named by its place (`rules[2].when`) and the line its table starts on.
pub(super) fn rules(
    c: &mut Checker<'_>,
    node: &toml::Value,
    defined: &[ModeSpec],
    text: &str,
) -> Option<Vec<plangate_policy::RuleSpec>> {
    let Some(items) = node.as_array() else {
        c.error(
            "rules",
            "rules must be [[rules]] tables, each with name, when and outcome",
        );
        return None;
    };
    // The line each `[[rules]]` table starts on, in order.
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("[[rules]]"))
        .map(|(i, _)| i + 1)
        .collect();
    let at = |i: usize| {
        lines
            .get(i)
            .map(|l| format!(" (line {l})"))
            .unwrap_or_default()
    };
    // The rules that read well, with their place; all are compiled even
    // when another is broken, so every mistake shows in one pass.
    let mut parsed: Vec<(usize, plangate_policy::RuleSpec)> = Vec::with_capacity(items.len());
    let mut all_read = true;
    for (i, item) in items.iter().enumerate() {
        let key = index("rules", i);
        let Some(entries) = c.table(&key, item, "a table with name, when and outcome") else {
            all_read = false;
            continue;
        };
        c.unknown_keys(&key, &entries, &RULE_KEYS);
        let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let field = |c: &mut Checker<'_>, k: &str, required: bool| match get(k) {
            Some(v) => c.string(&child(&key, k), v),
            None if required => {
                c.error(&child(&key, k), format!("this rule has no {k}{}", at(i)));
                None
            }
            None => Some(String::new()),
        };
        let name = field(c, "name", true);
        let when = field(c, "when", true);
        let outcome = field(c, "outcome", true);
        let message = field(c, "message", false);
        let effect = field(c, "effect", false);
        let modes = match get("modes") {
            Some(v) => c.string_list(&child(&key, "modes"), v).map(Some),
            None => Some(None),
        };
        let spec = (|| {
            Some(plangate_policy::RuleSpec {
                name: name?,
                when: when?,
                modes: modes?,
                outcome: outcome?,
                message: message.filter(|m| !m.is_empty()),
                effect: effect.filter(|e| !e.is_empty()),
            })
        })();
        match spec {
            Some(spec) => parsed.push((i, spec)),
            None => all_read = false,
        }
    }
    let mut mode_names: Vec<String> =
        vec![plangate_core::DEFAULT_MODE.to_owned(), PLAN_MODE.to_owned()];
    for m in defined {
        if !mode_names.contains(&m.name) {
            mode_names.push(m.name.clone());
        }
    }
    let specs: Vec<plangate_policy::RuleSpec> = parsed.iter().map(|(_, s)| s.clone()).collect();
    match plangate_policy::Policy::compile(&specs, &mode_names) {
        Ok(_) => all_read.then_some(specs),
        Err(errors) => {
            for e in errors {
                let i = parsed.get(e.index).map_or(e.index, |(i, _)| *i);
                c.error(
                    &child(&index("rules", i), e.field),
                    format!("{}{}", e.message, at(i)),
                );
            }
            None
        }
    }
}
