//! Checking and compiling `[[rules]]` ([`Policy::compile`]): every field
//! of every rule, the condition's variables and functions, and rules an
//! earlier one pre-empts — all reported at once, at load. Apart from
//! evaluation, which only ever sees rules that passed here.

use std::collections::BTreeSet;

use cel::Program;

use crate::analysis::{Guard, Reads, comprehension_variables, never_true, relative_patterns};
use crate::{Outcome, Policy, Rule, RuleError, RuleSpec, VARIABLES, effect_of};

/// Functions of ours, beyond CEL's standard ones.
const OUR_FUNCTIONS: [&str; 2] = ["path", "glob"];

/// The standard functions and operators conditions may use (the parser
/// names operators like `_==_`): anything else is a mistake at load.
const STANDARD: [&str; 40] = [
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_&&_",
    "_||_",
    "!_",
    "_?_:_",
    "_+_",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "-_",
    "_[_]",
    "@in",
    "@not_strictly_false",
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "type",
    "max",
    "min",
    "@it",
    "@ac",
];

/// One rule's mistakes, written down with its place in the list.
struct Faults<'e> {
    index: usize,
    errors: &'e mut Vec<RuleError>,
}

impl Faults<'_> {
    fn bad(&mut self, field: &'static str, message: String) {
        self.errors.push(RuleError {
            index: self.index,
            field,
            message,
        });
    }
}

impl Policy {
    /// Checks and compiles `specs`, in order; `modes` are the mode names
    /// the config defines. Every mistake in every rule is returned at once.
    pub fn compile(specs: &[RuleSpec], modes: &[String]) -> Result<Policy, Vec<RuleError>> {
        let mut errors = Vec::new();
        let mut rules = Vec::new();
        let mut names = BTreeSet::new();
        for (index, spec) in specs.iter().enumerate() {
            let mut faults = Faults {
                index,
                errors: &mut errors,
            };
            check_name(spec, &mut names, &mut faults);
            let outcome = outcome(spec, &mut faults);
            if outcome == Some(Outcome::Refuse)
                && spec.message.as_deref().is_none_or(|m| m.trim().is_empty())
            {
                faults.bad(
                    "message",
                    "a refuse rule needs a message: the agent reads it, with the rule's name"
                        .to_owned(),
                );
            }
            check_modes(spec, modes, &mut faults);
            let program = condition(spec, outcome, modes, &mut faults);
            if let (Some(program), Some(outcome)) = (program, outcome) {
                let guard = Guard::of(program.expression());
                let reads = Reads::of(program.expression());
                rules.push((
                    index,
                    Rule {
                        name: spec.name.clone(),
                        guard,
                        reads,
                        program,
                        modes: spec.modes.clone(),
                        outcome,
                        message: spec.message.clone(),
                    },
                ));
            }
        }
        errors.extend(pre_empted(specs, &rules));
        if errors.is_empty() {
            Ok(Policy {
                rules: rules.into_iter().map(|(_, r)| r).collect(),
            })
        } else {
            errors.sort_by_key(|e| e.index);
            Err(errors)
        }
    }
}

/// A rule's name: 1 to 64 letters, digits, `-`, `_` or `.`, and not one
/// an earlier rule has (`names`).
fn check_name(spec: &RuleSpec, names: &mut BTreeSet<String>, faults: &mut Faults<'_>) {
    let name_ok = !spec.name.is_empty()
        && spec.name.len() <= 64
        && spec
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        faults.bad(
            "name",
            format!(
                "rule name {:?} is not allowed: use 1 to 64 letters, digits, '-', '_' or '.'",
                spec.name
            ),
        );
    } else if !names.insert(spec.name.clone()) {
        faults.bad(
            "name",
            format!(
                "rule name {:?} is used twice: each rule needs its own",
                spec.name
            ),
        );
    }
}

/// The rule's `outcome`, with `effect` only (and always) beside
/// `outcome = "effect"`.
fn outcome(spec: &RuleSpec, faults: &mut Faults<'_>) -> Option<Outcome> {
    match (spec.outcome.as_str(), spec.effect.as_deref()) {
        ("run", None) => Some(Outcome::Run),
        ("plan", None) => Some(Outcome::Plan),
        ("ask", None) => Some(Outcome::Ask),
        ("refuse", None) => Some(Outcome::Refuse),
        ("effect", Some(e)) => match effect_of(e) {
            Some(e) => Some(Outcome::Effect(e)),
            None => {
                faults.bad(
                    "effect",
                    format!(
                        "effect {e:?} is not allowed: use \"read\", \"write\" or \"destructive\""
                    ),
                );
                None
            }
        },
        ("effect", None) => {
            faults.bad(
                "effect",
                "outcome \"effect\" needs effect = \"read\", \"write\" or \"destructive\""
                    .to_owned(),
            );
            None
        }
        ("run" | "plan" | "ask" | "refuse", Some(_)) => {
            faults.bad(
                "effect",
                format!(
                    "effect is only for outcome \"effect\"; this rule's outcome is {:?}",
                    spec.outcome
                ),
            );
            None
        }
        (other, _) => {
            faults.bad(
                "outcome",
                format!(
                    "outcome {other:?} is not allowed: use \"run\", \"plan\", \"ask\", \"refuse\" or \"effect\""
                ),
            );
            None
        }
    }
}

/// The rule's `modes`, when given: not empty, each one the config defines.
fn check_modes(spec: &RuleSpec, modes: &[String], faults: &mut Faults<'_>) {
    let Some(list) = &spec.modes else {
        return;
    };
    if list.is_empty() {
        faults.bad(
            "modes",
            "modes is empty, so the rule would never apply: list modes, or leave it out for every mode".to_owned(),
        );
    }
    for m in list {
        if !modes.contains(m) {
            faults.bad(
                "modes",
                format!(
                    "mode {m:?} is not defined: the modes are {}",
                    modes.join(", ")
                ),
            );
        }
    }
}

/// The rule's `when` compiled, and checked as far as CEL does not
/// ([`check_condition`]); `None` when it is not CEL.
fn condition(
    spec: &RuleSpec,
    outcome: Option<Outcome>,
    modes: &[String],
    faults: &mut Faults<'_>,
) -> Option<Program> {
    match Program::compile(&spec.when) {
        Ok(program) => {
            check_condition(&program, outcome, modes, faults);
            Some(program)
        }
        Err(e) => {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or("").to_owned();
            faults.bad("when", format!("the condition is not CEL: {first}"));
            None
        }
    }
}

/// What CEL itself does not check in a condition: every variable and
/// function it names exists, no comparison or glob pattern can never
/// hold, and a `run` rule over paths names its tools.
fn check_condition(
    program: &Program,
    outcome: Option<Outcome>,
    modes: &[String],
    faults: &mut Faults<'_>,
) {
    let refs = program.references();
    let bound = comprehension_variables(program.expression());
    let mut unknown: Vec<&str> = refs
        .variables()
        .into_iter()
        .filter(|v| !VARIABLES.contains(v) && !bound.contains(*v))
        .collect();
    unknown.sort_unstable();
    for v in unknown {
        faults.bad(
            "when",
            format!(
                "the condition uses {v:?}, which is not a variable: use {}",
                VARIABLES.join(", ")
            ),
        );
    }
    let mut functions: Vec<&str> = refs
        .functions()
        .into_iter()
        .filter(|f| !OUR_FUNCTIONS.contains(f) && !STANDARD.contains(f))
        .collect();
    functions.sort_unstable();
    for f in functions {
        faults.bad(
            "when",
            format!(
                "the condition calls {f:?}, which is not a function here: use CEL's standard ones, path(p) or glob(p, pattern)"
            ),
        );
    }
    for never in never_true(program.expression(), modes) {
        faults.bad("when", never);
    }
    for pattern in relative_patterns(program.expression()) {
        faults.bad(
            "when",
            format!(
                "glob's pattern {pattern:?} is relative, and paths are placed absolute before they are compared, so it never matches: start it with / (\"/**/{pattern}\" for any directory)"
            ),
        );
    }
    let names_tools = Guard::of(program.expression())
        .allowed
        .iter()
        .any(|(var, _)| matches!(*var, "tool" | "exposed"));
    if outcome == Some(Outcome::Run) && refs.variables().contains(&"paths") && !names_tools {
        faults.bad(
            "when",
            "a run rule over paths must name its tools (tool == '…' or tool in […]): a tool that takes no path has paths = [], and paths.all(…) holds for it".to_owned(),
        );
    }
}

/// Rules an earlier one always pre-empts: the earlier one's condition is
/// `true` or the same text, in every mode the later one applies in.
/// `rules` are the compiled ones, each with its place in `specs`.
fn pre_empted(specs: &[RuleSpec], rules: &[(usize, Rule)]) -> Vec<RuleError> {
    let mut errors = Vec::new();
    for (i, (index, later)) in rules.iter().enumerate() {
        let later_when = specs[*index].when.trim();
        for (earlier_index, earlier) in rules[..i].iter() {
            let earlier_when = specs[*earlier_index].when.trim();
            let covers_modes = match (&earlier.modes, &later.modes) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(e), Some(l)) => l.iter().all(|m| e.contains(m)),
            };
            if covers_modes && (earlier_when == "true" || earlier_when == later_when) {
                errors.push(RuleError {
                    index: *index,
                    field: "when",
                    message: format!(
                        "rule {:?} can never match: rule {:?} before it matches every call it would",
                        later.name, earlier.name
                    ),
                });
                break;
            }
        }
    }
    errors
}
