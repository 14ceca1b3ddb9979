//! What a rule's CEL condition says, read from its syntax tree at load:
//! the call's names it narrows to ([`Guard`]), the arguments it reads
//! ([`Reads`]) and comparisons that can never hold. Apart from compiling
//! and evaluating because it never runs a condition, only looks at it.

use std::collections::BTreeSet;

use crate::{Call, Tool, effect_of};

/// The call's arguments a condition reads: named ones
/// (`arguments.path`, `arguments['path']`, `has(arguments.path)`), or all
/// of them when it uses `arguments` any other way (iterates over it, hands
/// it to a function, indexes it with a computed name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reads {
    /// Only these top-level arguments.
    Named(BTreeSet<String>),
    /// Possibly any.
    All,
}

impl Reads {
    pub(crate) fn of(expr: &cel::parser::Expression) -> Reads {
        use cel::common::ast::{Expr, LiteralValue};
        let is_arguments =
            |e: &cel::parser::Expression| matches!(&e.expr, Expr::Ident(v) if v == "arguments");
        let mut named = BTreeSet::new();
        let mut all = false;
        visit(expr, |e| match &e.expr {
            Expr::Select(select) if is_arguments(&select.operand) => {
                named.insert(select.field.clone());
                false
            }
            Expr::Call(call)
                if call.func_name == "_[_]" && call.args.first().is_some_and(is_arguments) =>
            {
                match call.args.get(1).map(|i| &i.expr) {
                    Some(Expr::Literal(LiteralValue::String(name))) => {
                        named.insert(name.inner().to_owned());
                    }
                    _ => all = true,
                }
                false
            }
            Expr::Ident(v) if v == "arguments" => {
                all = true;
                false
            }
            _ => !all,
        });
        if all { Reads::All } else { Reads::Named(named) }
    }

    /// Whether the condition may read one of `undeclared`.
    pub(crate) fn any_of(&self, undeclared: &[String]) -> bool {
        match self {
            Reads::All => !undeclared.is_empty(),
            Reads::Named(named) => undeclared.iter().any(|u| named.contains(u)),
        }
    }
}

/// What a condition's top-level conjunction says outright about the
/// call's names — `tool == 'move_file'`, `upstream in ['fs', 'git']` — so
/// a rule that cannot match a call is passed over without evaluating it.
/// Sound because CEL's `&&` is false when any operand is false, whatever
/// the others do (even fail): a conjunct that is false makes the whole
/// condition false, never an error a refuse rule would act on.
#[derive(Debug, Default)]
pub(crate) struct Guard {
    /// Per variable (`tool`, `upstream`, `exposed`, `effect`, `mode`): the
    /// values it may have for the condition to hold.
    pub(crate) allowed: Vec<(&'static str, Vec<String>)>,
}

/// The variables a guard may constrain: plain strings of the call.
const GUARDED: [&str; 5] = ["tool", "upstream", "exposed", "effect", "mode"];

impl Guard {
    pub(crate) fn of(expr: &cel::parser::Expression) -> Guard {
        let mut guard = Guard::default();
        let mut conjuncts = vec![expr];
        while let Some(e) = conjuncts.pop() {
            match &e.expr {
                cel::common::ast::Expr::Call(call)
                    if call.func_name == "_&&_" && call.target.is_none() =>
                {
                    conjuncts.extend(call.args.iter());
                }
                _ => {
                    if let Some((var, values)) = literal_constraint(e) {
                        guard.narrow(var, values);
                    }
                }
            }
        }
        guard
    }

    fn narrow(&mut self, var: &'static str, values: Vec<String>) {
        match self.allowed.iter_mut().find(|(v, _)| *v == var) {
            Some((_, have)) => have.retain(|x| values.contains(x)),
            None => self.allowed.push((var, values)),
        }
    }

    pub(crate) fn admits(&self, call: &Call<'_>) -> bool {
        self.allowed.iter().all(|(var, values)| {
            let value = match *var {
                "tool" => call.tool,
                "upstream" => call.upstream,
                "exposed" => call.exposed,
                "effect" => call.effect.as_str(),
                _ => call.mode,
            };
            values.iter().any(|v| v == value)
        })
    }

    /// [`Guard::admits`] for a call whose mode is not known yet: only the
    /// tool's names and effect are compared.
    pub(crate) fn admits_tool(&self, tool: &Tool<'_>) -> bool {
        self.allowed.iter().all(|(var, values)| {
            let value = match *var {
                "tool" => tool.tool,
                "upstream" => tool.upstream,
                "exposed" => tool.exposed,
                "effect" => tool.effect.as_str(),
                _ => return true,
            };
            values.iter().any(|v| v == value)
        })
    }
}

/// Comparisons in `expr` that can never hold, as errors: a guarded
/// variable (a string of the call) compared with something that is not a
/// string, `effect` with a word that is not an effect class, `mode` with a
/// mode the config does not define. CEL checks none of this itself; a rule
/// that says `effect == 'writes'` would silently never match.
pub(crate) fn never_true(expr: &cel::parser::Expression, modes: &[String]) -> Vec<String> {
    use cel::common::ast::{Expr, LiteralValue};
    let mut out = Vec::new();
    visit(expr, |e| {
        let call = match &e.expr {
            Expr::Call(call) => call,
            // A comprehension may name its own variable like one of ours;
            // what it compares then is not the call's.
            Expr::Comprehension(c) => return !GUARDED.contains(&c.iter_var.as_str()),
            _ => return true,
        };
        let pair = match (call.func_name.as_str(), call.args.as_slice()) {
            ("_==_" | "_!=_", [a, b]) => match (&a.expr, &b.expr) {
                (Expr::Ident(v), _) => Some((v, vec![b])),
                (_, Expr::Ident(v)) => Some((v, vec![a])),
                _ => None,
            },
            ("@in", [a, b]) => match (&a.expr, &b.expr) {
                (Expr::Ident(v), Expr::List(list)) => Some((v, list.elements.iter().collect())),
                _ => None,
            },
            _ => None,
        };
        let Some((var, others)) = pair else {
            return true;
        };
        if !GUARDED.contains(&var.as_str()) {
            return true;
        }
        for other in others {
            let Expr::Literal(lit) = &other.expr else {
                continue;
            };
            let LiteralValue::String(text) = lit else {
                out.push(format!(
                    "the condition compares {var}, a string, with something that is not a string: that is never true"
                ));
                continue;
            };
            let text = text.inner();
            if var == "effect" && effect_of(text).is_none() {
                out.push(format!(
                    "the condition compares effect with {text:?}, which it never is: effect is \"read\", \"write\" or \"destructive\""
                ));
            }
            if var == "mode" && !modes.iter().any(|m| m == text) {
                out.push(format!(
                    "the condition compares mode with {text:?}, which is not a mode: the modes are {}",
                    modes.join(", ")
                ));
            }
        }
        true
    });
    out
}

/// Walks `expr` and every expression inside it, depth first; `f` says for
/// each whether to look inside it. The one traversal of a condition that
/// the checks at load and the read set share.
fn visit<'e>(
    expr: &'e cel::parser::Expression,
    mut f: impl FnMut(&'e cel::parser::Expression) -> bool,
) {
    use cel::common::ast::{EntryExpr, Expr};
    let mut todo = vec![expr];
    while let Some(e) = todo.pop() {
        if !f(e) {
            continue;
        }
        match &e.expr {
            Expr::Call(call) => {
                todo.extend(call.target.as_deref());
                todo.extend(call.args.iter());
            }
            Expr::Comprehension(c) => todo.extend([
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]),
            Expr::List(list) => todo.extend(list.elements.iter()),
            Expr::Select(select) => todo.push(&select.operand),
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        todo.push(&m.key);
                        todo.push(&m.value);
                    }
                }
            }
            Expr::Struct(st) => {
                for entry in &st.entries {
                    if let EntryExpr::StructField(field) = &entry.expr {
                        todo.push(&field.value);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The variables `expr`'s comprehensions bind (`p` in `paths.all(p, …)`):
/// names of the condition's own, not the call's.
pub(crate) fn comprehension_variables(expr: &cel::parser::Expression) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    visit(expr, |e| {
        if let cel::common::ast::Expr::Comprehension(c) = &e.expr {
            out.insert(c.iter_var.clone());
            out.extend(c.iter_var2.clone());
            out.insert(c.accu_var.clone());
        }
        true
    });
    out
}

/// The literal patterns of `glob(p, '…')` calls in `expr` that are
/// relative: paths are placed absolute, so such a pattern never matches.
pub(crate) fn relative_patterns(expr: &cel::parser::Expression) -> Vec<String> {
    use cel::common::ast::{Expr, LiteralValue};
    let mut out = Vec::new();
    visit(expr, |e| {
        if let Expr::Call(call) = &e.expr
            && call.func_name == "glob"
            && let [_, pattern] = call.args.as_slice()
            && let Expr::Literal(LiteralValue::String(p)) = &pattern.expr
            && !p.inner().starts_with('/')
        {
            out.push(p.inner().to_owned());
        }
        true
    });
    out
}

/// `VAR == 'lit'`, `'lit' == VAR` or `VAR in ['a', 'b']` for a guarded
/// variable: the variable and the values it must have.
fn literal_constraint(e: &cel::parser::Expression) -> Option<(&'static str, Vec<String>)> {
    use cel::common::ast::{Expr, LiteralValue};
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    let ident = |x: &cel::parser::Expression| match &x.expr {
        Expr::Ident(name) => GUARDED.iter().copied().find(|g| g == name),
        _ => None,
    };
    let literal = |x: &cel::parser::Expression| match &x.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_owned()),
        _ => None,
    };
    match (
        call.func_name.as_str(),
        call.target.is_none(),
        call.args.as_slice(),
    ) {
        ("_==_", true, [a, b]) => match (ident(a), literal(b), ident(b), literal(a)) {
            (Some(var), Some(value), _, _) | (_, _, Some(var), Some(value)) => {
                Some((var, vec![value]))
            }
            _ => None,
        },
        ("@in", true, [a, b]) => {
            let var = ident(a)?;
            let Expr::List(list) = &b.expr else {
                return None;
            };
            let values: Option<Vec<String>> = list.elements.iter().map(literal).collect();
            Some((var, values?))
        }
        _ => None,
    }
}
