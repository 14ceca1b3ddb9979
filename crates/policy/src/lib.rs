//! Rules over tools and their arguments: "writes under ./scratch run,
//! move_file asks, anything named *.env is refused" — written by an
//! operator, compiled once when the config is loaded, and evaluated at
//! dispatch before a mode's default decides.
//!
//! Each rule has a name, a condition in CEL (the Common Expression
//! Language: small, side-effect free, always terminating), optionally the
//! modes it applies in, and an outcome: `run`, `plan`, `ask`, `refuse`
//! (with a message), or an effect class that replaces the tool's. The first
//! rule whose condition holds decides, and its name goes with the decision
//! so every answer and record can say which rule made it.
//!
//! Why CEL over Cedar: a rule here is a predicate over one call — caller,
//! upstream, tool, effect and free-form JSON arguments — not a
//! principal/action/resource authorisation with entity hierarchies. CEL
//! reads like the conditions operators already write elsewhere
//! (Kubernetes, agentgateway), evaluates JSON as it comes, and takes
//! functions of ours (`path`, `glob`) where Cedar allows none; Cedar's
//! strength, schema-typed validation, needs a schema per tool's arguments
//! that MCP servers do not give in a form Cedar can use. What CEL lacks —
//! checking at load — is done here: every variable and function a rule
//! names must exist, outcomes, effects and modes must be known, and a rule
//! that an earlier one always pre-empts is reported.
//!
//! Variables a condition sees: `key` (`{name, scope}`; a caller without a
//! key has name `""` and scope `"anonymous"`), `upstream`, `tool` (the
//! upstream's own name), `exposed` (the name the agent called), `effect`
//! (`"read"`, `"write"` or `"destructive"`, after any override), `mode`
//! (the mode in force), `arguments` (the call's arguments as JSON) and
//! `paths` (the values of every argument the tool takes as a path —
//! `path`, `source`, `destination`, each item of `paths`…, as the tool's
//! profile or schema says: a list of strings, so one rule covers both ends
//! of a move with `paths.all(p, glob(p, '…'))`).
//! Functions beyond CEL's own: `path(p)` — `p` placed where the server
//! will act on it (see [`paths`]) — and `glob(p, pattern)` — whether the
//! placed `p` matches `pattern` (`*`, `?`, `**`), compared in NFC.
//!
//! A condition that fails to evaluate (a missing argument, a type
//! mismatch, a path that cannot be placed) does not hold — except for a
//! `refuse` rule, which then refuses: a rule meant to stop something fails
//! closed. Use `has(…)` to test for optional arguments.
//!
//! **Rules see what the tool takes.** A call's arguments that the tool's
//! input schema does not declare are refused before any rule (by the
//! gateway), unless the schema allows more; then they reach the rules and
//! the upstream, but a rule that would widen what runs (`run`, or an
//! effect class below the tool's) never matches when its condition reads
//! one of them: a decoy `path` beside a `move_file`'s `source` cannot make
//! a `run` rule about `path` hold. A `refuse`, `plan` or `ask` rule
//! matches as written.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Arc;

use cel::{Context, Program};
use plangate_core::{CallerScope, Code, Decision, Effect, ModeSpec, Scope, decide};
use serde_json::Value;

pub mod paths;

pub use paths::{Lexical, PathResolver, Placement, Unplaced};

/// What a rule does with a call it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Send it to the upstream now — for a `plan` key or a locked mode too
    /// (a standing approval the operator wrote); never for a `read` key.
    Run,
    /// Make it a plan step.
    Plan,
    /// Ask the person first.
    Ask,
    /// Refuse it (`forbidden_by_rule`) with the rule's message.
    Refuse,
    /// Treat the tool as having this effect class; the mode decides.
    Effect(Effect),
}

impl Outcome {
    /// The word used in config and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Run => "run",
            Outcome::Plan => "plan",
            Outcome::Ask => "ask",
            Outcome::Refuse => "refuse",
            Outcome::Effect(_) => "effect",
        }
    }
}

/// A rule as the config file writes it (`[[rules]]`), before it is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RuleSpec {
    /// Its name: what answers and records say decided.
    pub name: String,
    /// The condition, in CEL.
    pub when: String,
    /// The modes it applies in; every mode when `None`.
    pub modes: Option<Vec<String>>,
    /// `run`, `plan`, `ask`, `refuse` or `effect`.
    pub outcome: String,
    /// What the agent is told (required for `refuse`).
    pub message: Option<String>,
    /// The effect class, for `outcome = "effect"`.
    pub effect: Option<String>,
}

/// One mistake in a rule, found when the rules are compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// The rule's place in the list, from 0.
    pub index: usize,
    /// The field at fault (`name`, `when`, `modes`, `outcome`, `message`,
    /// `effect`), or `when` for a rule that can never match.
    pub field: &'static str,
    /// Lowercase, one line: what is wrong and what is allowed.
    pub message: String,
}

/// The variables a condition may use.
pub const VARIABLES: [&str; 8] = [
    "key",
    "upstream",
    "tool",
    "exposed",
    "effect",
    "mode",
    "arguments",
    "paths",
];

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

struct Rule {
    name: String,
    program: Program,
    modes: Option<Vec<String>>,
    outcome: Outcome,
    message: Option<String>,
    guard: Guard,
    reads: Reads,
}

/// The call's arguments a condition reads: named ones
/// (`arguments.path`, `arguments['path']`, `has(arguments.path)`), or all
/// of them when it uses `arguments` any other way (iterates over it, hands
/// it to a function, indexes it with a computed name).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reads {
    /// Only these top-level arguments.
    Named(BTreeSet<String>),
    /// Possibly any.
    All,
}

impl Reads {
    fn of(expr: &cel::parser::Expression) -> Reads {
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
    fn any_of(&self, undeclared: &[String]) -> bool {
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
struct Guard {
    /// Per variable (`tool`, `upstream`, `exposed`, `effect`, `mode`): the
    /// values it may have for the condition to hold.
    allowed: Vec<(&'static str, Vec<String>)>,
}

/// The variables a guard may constrain: plain strings of the call.
const GUARDED: [&str; 5] = ["tool", "upstream", "exposed", "effect", "mode"];

impl Guard {
    fn of(expr: &cel::parser::Expression) -> Guard {
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

    fn admits(&self, call: &Call<'_>) -> bool {
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
    fn admits_tool(&self, tool: &Tool<'_>) -> bool {
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
fn never_true(expr: &cel::parser::Expression, modes: &[String]) -> Vec<String> {
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
fn comprehension_variables(expr: &cel::parser::Expression) -> BTreeSet<String> {
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
fn relative_patterns(expr: &cel::parser::Expression) -> Vec<String> {
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

/// The rules of one config, compiled: evaluate calls with [`Policy::decide`].
pub struct Policy {
    rules: Vec<Rule>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|r| (&r.name, r.outcome.as_str())))
            .finish()
    }
}

/// The rule that decided a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched<'p> {
    /// Its name.
    pub rule: &'p str,
    /// What it decided.
    pub outcome: Outcome,
    /// Its message, if it has one.
    pub message: Option<&'p str>,
    /// Why its condition could not be evaluated, when a `refuse` rule
    /// refused because of that (fail closed).
    pub error: Option<String>,
}

/// The tool of a call, before anything else about the call is known.
#[derive(Debug, Clone, Copy)]
pub struct Tool<'a> {
    /// The upstream.
    pub upstream: &'a str,
    /// The upstream's own tool name.
    pub tool: &'a str,
    /// The name the agent called.
    pub exposed: &'a str,
    /// The tool's effect class.
    pub effect: Effect,
}

/// One call, as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The key's name (`""` without a key).
    pub key_name: &'a str,
    /// The key's scope (`read`, `plan`, `write`), or `anonymous`.
    pub scope: &'a str,
    /// The upstream.
    pub upstream: &'a str,
    /// The upstream's own tool name.
    pub tool: &'a str,
    /// The name the agent called.
    pub exposed: &'a str,
    /// The tool's effect class.
    pub effect: Effect,
    /// The mode in force.
    pub mode: &'a str,
    /// The call's arguments.
    pub arguments: &'a Value,
    /// The values of the arguments the tool takes as paths (the `paths`
    /// variable): strings as sent, placed when a rule asks.
    pub paths: &'a [String],
    /// Top-level arguments the tool's schema does not declare but allows
    /// (undeclared ones it does not allow were refused before the rules):
    /// a rule that would widen what runs never matches on them.
    pub undeclared: &'a [String],
}

/// The resolver of the call being evaluated, and the paths it placed for
/// this call so far: many rules look at the same argument, and resolving
/// symlinks costs system calls, so each path is placed once per call.
struct Lent {
    resolver: Arc<dyn PathResolver>,
    seen: Vec<(String, Result<String, Unplaced>)>,
}

thread_local! {
    /// What the call being evaluated lends: CEL functions are plain
    /// closures, so the one evaluation in progress on this thread lends
    /// its resolver here.
    static RESOLVER: RefCell<Option<Lent>> = const { RefCell::new(None) };
}

fn resolved(p: &str) -> Result<String, Unplaced> {
    RESOLVER.with(|r| match r.borrow_mut().as_mut() {
        Some(lent) => {
            if let Some((_, out)) = lent.seen.iter().find(|(path, _)| path == p) {
                return out.clone();
            }
            let out = lent.resolver.resolve(p);
            lent.seen.push((p.to_owned(), out.clone()));
            out
        }
        None => Lexical::default().resolve(p),
    })
}

/// A path that cannot be placed, as the error of the function that asked:
/// the condition fails to evaluate (a refuse rule refuses, others do not
/// match).
fn unplaced(function: &str, why: Unplaced) -> cel::ExecutionError {
    cel::ExecutionError::function_error(function, why)
}

/// The root context every evaluation starts from: CEL's standard library
/// and our functions.
fn root() -> Context<'static, 'static> {
    let mut context = Context::default();
    // Neither name is a standard function, so adding them cannot fail.
    let _ = context.add_function("path", |p: Arc<String>| {
        resolved(&p)
            .map(Arc::new)
            .map_err(|why| unplaced("path", why))
    });
    let _ = context.add_function("glob", |p: Arc<String>, pattern: Arc<String>| {
        resolved(&p)
            .map(|placed| paths::glob_placed(&placed, &pattern))
            .map_err(|why| unplaced("glob", why))
    });
    context
}

fn effect_of(word: &str) -> Option<Effect> {
    match word {
        "read" => Some(Effect::Read),
        "write" => Some(Effect::Write),
        "destructive" => Some(Effect::Destructive),
        _ => None,
    }
}

impl Policy {
    /// No rules.
    pub fn empty() -> Policy {
        Policy { rules: Vec::new() }
    }

    /// Whether there are no rules (dispatch then skips evaluation).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any rule could decide a call of `tool`, whatever its
    /// caller, mode and arguments: false when every rule's condition says
    /// outright that it is about other tools (`tool == '…'`, `upstream in
    /// […]`, `effect == '…'`). Dispatch then skips the rules — and reading
    /// the key's mode they might need — so rules about other tools cost a
    /// call nothing.
    pub fn may_decide(&self, tool: &Tool<'_>) -> bool {
        self.rules.iter().any(|rule| rule.guard.admits_tool(tool))
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Checks and compiles `specs`, in order; `modes` are the mode names
    /// the config defines. Every mistake in every rule is returned at once.
    pub fn compile(specs: &[RuleSpec], modes: &[String]) -> Result<Policy, Vec<RuleError>> {
        let mut errors = Vec::new();
        let mut rules = Vec::new();
        let mut names = BTreeSet::new();
        for (index, spec) in specs.iter().enumerate() {
            let mut bad = |field, message: String| {
                errors.push(RuleError {
                    index,
                    field,
                    message,
                })
            };
            let name_ok = !spec.name.is_empty()
                && spec.name.len() <= 64
                && spec
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !name_ok {
                bad(
                    "name",
                    format!(
                        "rule name {:?} is not allowed: use 1 to 64 letters, digits, '-', '_' or '.'",
                        spec.name
                    ),
                );
            } else if !names.insert(spec.name.clone()) {
                bad(
                    "name",
                    format!(
                        "rule name {:?} is used twice: each rule needs its own",
                        spec.name
                    ),
                );
            }
            let outcome = match (spec.outcome.as_str(), spec.effect.as_deref()) {
                ("run", None) => Some(Outcome::Run),
                ("plan", None) => Some(Outcome::Plan),
                ("ask", None) => Some(Outcome::Ask),
                ("refuse", None) => Some(Outcome::Refuse),
                ("effect", Some(e)) => match effect_of(e) {
                    Some(e) => Some(Outcome::Effect(e)),
                    None => {
                        bad(
                            "effect",
                            format!(
                                "effect {e:?} is not allowed: use \"read\", \"write\" or \"destructive\""
                            ),
                        );
                        None
                    }
                },
                ("effect", None) => {
                    bad(
                        "effect",
                        "outcome \"effect\" needs effect = \"read\", \"write\" or \"destructive\""
                            .to_owned(),
                    );
                    None
                }
                ("run" | "plan" | "ask" | "refuse", Some(_)) => {
                    bad(
                        "effect",
                        format!(
                            "effect is only for outcome \"effect\"; this rule's outcome is {:?}",
                            spec.outcome
                        ),
                    );
                    None
                }
                (other, _) => {
                    bad(
                        "outcome",
                        format!(
                            "outcome {other:?} is not allowed: use \"run\", \"plan\", \"ask\", \"refuse\" or \"effect\""
                        ),
                    );
                    None
                }
            };
            if outcome == Some(Outcome::Refuse)
                && spec.message.as_deref().is_none_or(|m| m.trim().is_empty())
            {
                bad(
                    "message",
                    "a refuse rule needs a message: the agent reads it, with the rule's name"
                        .to_owned(),
                );
            }
            if let Some(list) = &spec.modes {
                if list.is_empty() {
                    bad(
                        "modes",
                        "modes is empty, so the rule would never apply: list modes, or leave it out for every mode".to_owned(),
                    );
                }
                for m in list {
                    if !modes.contains(m) {
                        bad(
                            "modes",
                            format!(
                                "mode {m:?} is not defined: the modes are {}",
                                modes.join(", ")
                            ),
                        );
                    }
                }
            }
            let program = match Program::compile(&spec.when) {
                Ok(p) => Some(p),
                Err(e) => {
                    let first = e.to_string();
                    let first = first.lines().next().unwrap_or("").to_owned();
                    bad("when", format!("the condition is not CEL: {first}"));
                    None
                }
            };
            if let Some(program) = &program {
                let refs = program.references();
                let bound = comprehension_variables(program.expression());
                let mut unknown: Vec<&str> = refs
                    .variables()
                    .into_iter()
                    .filter(|v| !VARIABLES.contains(v) && !bound.contains(*v))
                    .collect();
                unknown.sort_unstable();
                for v in unknown {
                    bad(
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
                    bad(
                        "when",
                        format!(
                            "the condition calls {f:?}, which is not a function here: use CEL's standard ones, path(p) or glob(p, pattern)"
                        ),
                    );
                }
                for never in never_true(program.expression(), modes) {
                    bad("when", never);
                }
                for pattern in relative_patterns(program.expression()) {
                    bad(
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
                if outcome == Some(Outcome::Run)
                    && refs.variables().contains(&"paths")
                    && !names_tools
                {
                    bad(
                        "when",
                        "a run rule over paths must name its tools (tool == '…' or tool in […]): a tool that takes no path has paths = [], and paths.all(…) holds for it".to_owned(),
                    );
                }
            }
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
        // A rule an earlier one always pre-empts: the earlier one's
        // condition is `true` or the same text, in every mode the later
        // one applies in.
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
        if errors.is_empty() {
            Ok(Policy {
                rules: rules.into_iter().map(|(_, r)| r).collect(),
            })
        } else {
            errors.sort_by_key(|e| e.index);
            Err(errors)
        }
    }

    /// The first rule that decides `call`, if any: rules scoped to other
    /// modes are skipped; a condition that holds decides; one that cannot
    /// be evaluated decides only for a `refuse` rule (fail closed).
    /// Paths in conditions are resolved with `resolver`.
    pub fn decide(&self, call: &Call<'_>, resolver: Arc<dyn PathResolver>) -> Option<Matched<'_>> {
        if self.rules.is_empty() {
            return None;
        }
        thread_local! {
            static ROOT: Context<'static, 'static> = root();
        }
        struct Lend;
        impl Drop for Lend {
            fn drop(&mut self) {
                RESOLVER.with(|r| r.borrow_mut().take());
            }
        }
        RESOLVER.with(|r| {
            *r.borrow_mut() = Some(Lent {
                resolver,
                seen: Vec::new(),
            })
        });
        let _lend = Lend;
        ROOT.with(|root| {
            // The call's variables, made once and only if a rule gets as
            // far as its condition.
            let mut scope: Option<Context<'_, '_>> = None;
            for rule in &self.rules {
                if rule
                    .modes
                    .as_ref()
                    .is_some_and(|m| !m.iter().any(|m| m == call.mode))
                    || !rule.guard.admits(call)
                {
                    continue;
                }
                // A rule that would widen what runs does not match on an
                // argument the tool does not declare: the upstream ignores
                // it, so it proves nothing about what the call does.
                let widens = match rule.outcome {
                    Outcome::Run => true,
                    Outcome::Effect(e) => e < call.effect,
                    _ => false,
                };
                if widens && rule.reads.any_of(call.undeclared) {
                    continue;
                }
                let scope = scope.get_or_insert_with(|| {
                    let mut scope = root.new_inner_scope();
                    let key = serde_json::json!({"name": call.key_name, "scope": call.scope});
                    let arguments = cel::to_value(call.arguments).unwrap_or(cel::Value::Null);
                    scope.add_variable_from_value(
                        "key",
                        cel::to_value(&key).unwrap_or(cel::Value::Null),
                    );
                    scope.add_variable_from_value("upstream", call.upstream.to_owned());
                    scope.add_variable_from_value("tool", call.tool.to_owned());
                    scope.add_variable_from_value("exposed", call.exposed.to_owned());
                    scope.add_variable_from_value("effect", call.effect.as_str().to_owned());
                    scope.add_variable_from_value("mode", call.mode.to_owned());
                    scope.add_variable_from_value("arguments", arguments);
                    scope.add_variable_from_value(
                        "paths",
                        cel::to_value(call.paths).unwrap_or(cel::Value::Null),
                    );
                    scope
                });
                let matched = |error| Matched {
                    rule: &rule.name,
                    outcome: rule.outcome,
                    message: rule.message.as_deref(),
                    error,
                };
                match rule.program.execute(scope) {
                    Ok(cel::Value::Bool(true)) => return Some(matched(None)),
                    Ok(cel::Value::Bool(false)) => {}
                    Ok(other) if rule.outcome == Outcome::Refuse => {
                        return Some(matched(Some(format!(
                            "the condition gave {other:?}, not true or false"
                        ))));
                    }
                    Err(e) if rule.outcome == Outcome::Refuse => {
                        return Some(matched(Some(e.to_string())));
                    }
                    Ok(_) | Err(_) => {}
                }
            }
            None
        })
    }
}

/// What a key's call comes to when a rule with `outcome` decided it (the
/// mode's table, [`decide`], when none did): `refuse` refuses
/// (`forbidden_by_rule`); `run` runs — a standing approval, for a `plan`
/// key or a locked mode too — but never widens a `read` key, and a write
/// the agent asked to plan (`explicit`) is planned; `plan` plans a write
/// (a read runs: there is nothing to plan); `ask` asks the person, except
/// that a `plan` key's write is planned (its own client's yes does not
/// count); an effect class replaces `effect` and the mode's table decides
/// with it. The gateway's dispatch and `plangate policy test` both decide
/// here, so they cannot disagree.
pub fn decision(
    outcome: Option<Outcome>,
    effect: Effect,
    scope: Scope,
    mode: &ModeSpec,
    explicit: bool,
) -> Decision {
    let write = effect > Effect::Read;
    match outcome {
        None => decide(effect, CallerScope::Key(scope), mode, explicit),
        Some(Outcome::Refuse) => Decision::Refuse(Code::ForbiddenByRule),
        Some(Outcome::Effect(e)) => decide(e, CallerScope::Key(scope), mode, explicit),
        Some(_) if scope == Scope::Read && write => Decision::Refuse(Code::Forbidden),
        Some(Outcome::Run) if explicit && write => Decision::Plan,
        Some(Outcome::Run) => Decision::Run,
        Some(Outcome::Plan) if write => Decision::Plan,
        Some(Outcome::Plan) => Decision::Run,
        Some(Outcome::Ask) if scope == Scope::Plan && write => Decision::Plan,
        Some(Outcome::Ask) => Decision::Ask,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    fn rule(name: &str, when: &str, outcome: &str) -> RuleSpec {
        RuleSpec {
            name: name.into(),
            when: when.into(),
            outcome: outcome.into(),
            message: (outcome == "refuse").then(|| format!("{name} says no")),
            ..RuleSpec::default()
        }
    }

    fn modes() -> Vec<String> {
        vec!["default".into(), "plan".into()]
    }

    fn call<'a>(tool: &'a str, effect: Effect, arguments: &'a Value) -> Call<'a> {
        Call {
            key_name: "agent",
            scope: "plan",
            upstream: "fs",
            tool,
            exposed: tool,
            effect,
            mode: "plan",
            arguments,
            paths: &[],
            undeclared: &[],
        }
    }

    fn lexical() -> Arc<dyn PathResolver> {
        Arc::new(Lexical::default())
    }

    #[test]
    fn the_first_matching_rule_decides_and_paths_are_normalised_first() {
        let policy = Policy::compile(
            &[
                rule(
                    "no-env",
                    "has(arguments.path) && glob(arguments.path, '/**/*.env')",
                    "refuse",
                ),
                rule(
                    "scratch",
                    "effect != 'read' && glob(arguments.path, '/srv/root/scratch/**')",
                    "run",
                ),
                rule("moves-ask", "tool == 'move_file'", "ask"),
            ],
            &modes(),
        )
        .unwrap();
        let decide = |tool: &str, effect, args: Value| {
            policy
                .decide(&call(tool, effect, &args), lexical())
                .map(|m| (m.rule.to_owned(), m.outcome))
        };
        assert_eq!(
            decide(
                "write_file",
                Effect::Destructive,
                json!({"path": "/srv/root/scratch/a.txt"})
            ),
            Some(("scratch".into(), Outcome::Run))
        );
        assert_eq!(
            decide(
                "write_file",
                Effect::Destructive,
                json!({"path": "/srv/root/scratch/../x"})
            ),
            None,
            "walked out of scratch: no rule, the mode decides"
        );
        assert_eq!(
            decide(
                "write_file",
                Effect::Destructive,
                json!({"path": "/srv/root/scratch/prod.env"})
            ),
            Some(("no-env".into(), Outcome::Refuse)),
            "the refuse rule comes first"
        );
        assert_eq!(
            decide(
                "move_file",
                Effect::Write,
                json!({"source": "/a", "destination": "/b"})
            ),
            Some(("moves-ask".into(), Outcome::Ask)),
            "a missing path makes glob fail: not a match for run, has() keeps the refuse rule quiet"
        );
    }

    #[test]
    fn a_refuse_rule_that_cannot_be_evaluated_refuses() {
        let policy = Policy::compile(
            &[rule("strict", "arguments.path.endsWith('.key')", "refuse")],
            &modes(),
        )
        .unwrap();
        let args = json!({"other": 1});
        let m = policy
            .decide(&call("write_file", Effect::Write, &args), lexical())
            .unwrap();
        assert_eq!((m.rule, m.outcome), ("strict", Outcome::Refuse));
        assert!(m.error.is_some());
        // The same condition on a run rule simply does not match.
        let policy = Policy::compile(
            &[rule("lax", "arguments.path.endsWith('.txt')", "run")],
            &modes(),
        )
        .unwrap();
        assert_eq!(
            policy.decide(&call("write_file", Effect::Write, &args), lexical()),
            None
        );
    }

    #[test]
    fn rules_apply_only_in_their_modes() {
        let mut r = rule("plan-only", "true", "run");
        r.modes = Some(vec!["plan".into()]);
        let policy = Policy::compile(&[r], &modes()).unwrap();
        let args = json!({});
        let mut c = call("t", Effect::Write, &args);
        assert!(policy.decide(&c, lexical()).is_some());
        c.mode = "default";
        assert!(policy.decide(&c, lexical()).is_none());
    }

    #[test]
    fn every_mistake_is_reported_at_load() {
        let mut unknown_mode = rule("m", "tool == 'm'", "plan");
        unknown_mode.modes = Some(vec!["careful".into()]);
        let mut bad_effect = rule("e", "tool == 'x'", "effect");
        bad_effect.effect = Some("harmless".into());
        let specs = [
            rule("", "tool == 'z'", "run"),
            rule("typo", "tol == 'x'", "run"),
            rule("fn", "shout(tool)", "run"),
            rule("syntax", "tool ==", "run"),
            rule("what", "tool == 'w'", "maybe"),
            RuleSpec {
                message: None,
                ..rule("quiet", "tool == 'y'", "refuse")
            },
            unknown_mode,
            bad_effect,
        ];
        let errors = Policy::compile(&specs, &modes()).unwrap_err();
        let said: Vec<(usize, &str)> = errors.iter().map(|e| (e.index, e.field)).collect();
        assert_eq!(
            said,
            [
                (0, "name"),
                (1, "when"),
                (2, "when"),
                (3, "when"),
                (4, "outcome"),
                (5, "message"),
                (6, "modes"),
                (7, "effect"),
            ],
            "{errors:#?}"
        );
        assert!(
            errors[1].message.contains("\"tol\""),
            "{}",
            errors[1].message
        );
    }

    #[test]
    fn no_rule_widens_a_read_key_and_a_plan_keys_own_yes_never_counts() {
        let plan = ModeSpec::builtin_plan();
        for outcome in [Outcome::Run, Outcome::Plan, Outcome::Ask] {
            assert_eq!(
                decision(Some(outcome), Effect::Write, Scope::Read, &plan, false),
                Decision::Refuse(Code::Forbidden),
                "{outcome:?}"
            );
        }
        assert_eq!(
            decision(
                Some(Outcome::Ask),
                Effect::Destructive,
                Scope::Plan,
                &plan,
                false
            ),
            Decision::Plan,
            "its own client cannot say yes"
        );
        assert_eq!(
            decision(Some(Outcome::Run), Effect::Write, Scope::Write, &plan, true),
            Decision::Plan,
            "a write the agent asked to plan stays planned"
        );
        assert_eq!(
            decision(Some(Outcome::Run), Effect::Write, Scope::Plan, &plan, false),
            Decision::Run,
            "a standing approval"
        );
    }

    #[test]
    fn a_comparison_that_can_never_hold_is_reported() {
        for (when, says) in [
            ("effect == 'writes'", "effect with \"writes\""),
            (
                "tool == 'x' || mode == 'careful'",
                "\"careful\", which is not a mode",
            ),
            ("tool == 3", "not a string"),
            ("upstream in ['fs', 2]", "not a string"),
        ] {
            let errors = Policy::compile(&[rule("r", when, "run")], &modes()).unwrap_err();
            assert!(errors[0].message.contains(says), "{when}: {errors:?}");
        }
        // Fine: strings of ours, an argument compared with a number, and a
        // comprehension's own variable.
        for when in [
            "effect == 'write' && mode == 'plan'",
            "arguments.count == 3",
            "arguments.items.exists(tool, tool == 3)",
        ] {
            assert!(
                Policy::compile(&[rule("r", when, "run")], &modes()).is_ok(),
                "{when}"
            );
        }
    }

    #[test]
    fn a_rule_an_earlier_one_always_pre_empts_is_reported() {
        let errors = Policy::compile(
            &[
                rule("all", "true", "plan"),
                rule("never", "tool == 'x'", "run"),
            ],
            &modes(),
        )
        .unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].message.contains("can never match"),
            "{}",
            errors[0].message
        );
        // Scoped to another mode, the earlier rule does not pre-empt it.
        let mut scoped = rule("all", "true", "plan");
        scoped.modes = Some(vec!["plan".into()]);
        assert!(Policy::compile(&[scoped, rule("x", "tool == 'x'", "run")], &modes()).is_ok());
    }

    #[test]
    fn a_rule_for_another_tool_is_passed_over_as_cel_would_judge_it() {
        // `false && error` and `error && false` are both false in CEL: a
        // refuse rule whose tool does not match never refuses, whichever
        // side fails — and the guard passes it over without evaluating.
        for when in [
            "tool == 'x' && arguments.missing.deeper == 1",
            "arguments.missing.deeper == 1 && tool == 'x'",
            "tool in ['x', 'z'] && arguments.missing.deeper == 1",
        ] {
            let policy = Policy::compile(&[rule("only-x", when, "refuse")], &modes()).unwrap();
            let args = json!({});
            assert_eq!(
                policy.decide(&call("y", Effect::Write, &args), lexical()),
                None,
                "{when}"
            );
            let m = policy
                .decide(&call("x", Effect::Write, &args), lexical())
                .unwrap();
            assert!(
                m.error.is_some(),
                "{when}: for x it cannot be evaluated, so it refuses"
            );
        }
        let guarded = Policy::compile(
            &[rule(
                "g",
                "'fs' == upstream && tool == 'a' && tool == 'b'",
                "run",
            )],
            &modes(),
        )
        .unwrap();
        let args = json!({});
        assert_eq!(
            guarded.decide(&call("a", Effect::Write, &args), lexical()),
            None
        );
    }

    /// A resolver that says every path under /srv/root/scratch/link is in
    /// /srv/root/secrets, as a symlink there would.
    struct Linked;

    impl PathResolver for Linked {
        fn resolve(&self, raw: &str) -> Result<String, Unplaced> {
            let path = Lexical::default().resolve(raw)?;
            Ok(match path.strip_prefix("/srv/root/scratch/link") {
                Some(rest) => format!("/srv/root/secrets{rest}"),
                None => path,
            })
        }
    }

    #[test]
    fn a_symlink_out_of_a_directory_is_followed_before_matching() {
        let policy = Policy::compile(
            &[rule(
                "scratch",
                "glob(arguments.path, '/srv/root/scratch/**')",
                "run",
            )],
            &modes(),
        )
        .unwrap();
        let args = json!({"path": "/srv/root/scratch/link/passwords"});
        let c = call("write_file", Effect::Write, &args);
        assert!(policy.decide(&c, lexical()).is_some());
        assert!(policy.decide(&c, Arc::new(Linked)).is_none());
    }

    /// Counts what it is asked to resolve.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl PathResolver for Counting {
        fn resolve(&self, raw: &str) -> Result<String, Unplaced> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Lexical::default().resolve(raw)
        }
    }

    #[test]
    fn each_path_is_resolved_once_per_call_however_many_rules_look_at_it() {
        let specs: Vec<RuleSpec> = (0..20)
            .map(|i| {
                rule(
                    &format!("r{i}"),
                    &format!(
                        "glob(arguments.path, '/srv/{i}/**') || path(arguments.to) == '/x{i}'"
                    ),
                    "run",
                )
            })
            .collect();
        let policy = Policy::compile(&specs, &modes()).unwrap();
        let args = json!({"path": "/srv/a/../b", "to": "/y"});
        let counting = Arc::new(Counting::default());
        let c = call("write_file", Effect::Write, &args);
        assert_eq!(policy.decide(&c, counting.clone()), None);
        assert_eq!(counting.0.load(std::sync::atomic::Ordering::Relaxed), 2);
        // The next call resolves afresh: a link may have changed since.
        assert_eq!(policy.decide(&c, counting.clone()), None);
        assert_eq!(counting.0.load(std::sync::atomic::Ordering::Relaxed), 4);
    }

    #[test]
    fn rules_about_other_tools_are_known_not_to_decide_before_the_mode_is_read() {
        let tool = |name: &'static str, effect| Tool {
            upstream: "fs",
            tool: name,
            exposed: name,
            effect,
        };
        let named = Policy::compile(
            &[
                rule("moves", "tool == 'move_file' && mode == 'plan'", "ask"),
                rule(
                    "writes",
                    "effect == 'write' && glob(arguments.path, '/x/**')",
                    "run",
                ),
            ],
            &modes(),
        )
        .unwrap();
        assert!(named.may_decide(&tool("move_file", Effect::Destructive)));
        assert!(named.may_decide(&tool("write_file", Effect::Write)));
        assert!(!named.may_decide(&tool("read_file", Effect::Read)));
        let unnamed = Policy::compile(
            &[rule("any", "glob(arguments.path, '/x/**')", "plan")],
            &modes(),
        )
        .unwrap();
        assert!(unnamed.may_decide(&tool("read_file", Effect::Read)));
    }

    /// The run rule the docs once showed, the one a decoy walked around.
    fn scratch_rule() -> RuleSpec {
        rule(
            "scratch",
            "effect != 'read' && has(arguments.path) && glob(arguments.path, '/srv/ws/scratch/**')",
            "run",
        )
    }

    #[test]
    fn a_decoy_argument_the_tool_does_not_declare_never_makes_a_run_rule_match() {
        let policy = Policy::compile(&[scratch_rule()], &modes()).unwrap();
        let args = json!({
            "source": "/srv/ws/protected/important.txt",
            "destination": "/srv/ws/scratch/stolen.txt",
            "path": "/srv/ws/scratch/decoy",
        });
        let decoy = ["path".to_owned()];
        let mut c = call("move_file", Effect::Write, &args);
        assert!(
            policy.decide(&c, lexical()).is_some(),
            "without knowing it is undeclared, the decoy fools the rule"
        );
        c.undeclared = &decoy;
        assert_eq!(policy.decide(&c, lexical()), None);
        // A refuse rule over the same argument still refuses: narrowing
        // on a decoy harms nobody.
        let refuse = Policy::compile(
            &[rule(
                "no-scratch",
                "glob(arguments.path, '/srv/ws/scratch/**')",
                "refuse",
            )],
            &modes(),
        )
        .unwrap();
        assert!(refuse.decide(&c, lexical()).is_some());
        // A condition that reads every argument is as good as reading the
        // decoy; one that reads only declared ones is not affected.
        for (when, matches) in [
            (
                "tool == 'move_file' && arguments.exists(k, k == 'path')",
                false,
            ),
            ("tool == 'move_file' && arguments['path'] != ''", false),
            (
                "tool == 'move_file' && glob(arguments.destination, '/srv/ws/scratch/**')",
                true,
            ),
        ] {
            let p = Policy::compile(&[rule("r", when, "run")], &modes()).unwrap();
            assert_eq!(p.decide(&c, lexical()).is_some(), matches, "{when}");
        }
        // An effect rule that lowers the effect widens too; one that
        // raises it narrows.
        let mut lower = rule("lower", "arguments.path != ''", "effect");
        lower.effect = Some("read".into());
        let p = Policy::compile(&[lower], &modes()).unwrap();
        assert_eq!(p.decide(&c, lexical()), None);
        let mut raise = rule("raise", "arguments.path != ''", "effect");
        raise.effect = Some("destructive".into());
        let p = Policy::compile(&[raise], &modes()).unwrap();
        assert!(p.decide(&c, lexical()).is_some());
    }

    #[test]
    fn paths_holds_every_path_argument_so_one_rule_covers_both_ends_of_a_move() {
        let policy = Policy::compile(
            &[rule(
                "scratch-moves",
                "tool in ['move_file', 'write_file'] && paths.all(p, glob(p, '/srv/ws/scratch/**'))",
                "run",
            )],
            &modes(),
        )
        .unwrap();
        let args = json!({});
        let mut c = call("move_file", Effect::Write, &args);
        let out = [
            "/srv/ws/protected/important.txt".to_owned(),
            "/srv/ws/scratch/stolen.txt".to_owned(),
        ];
        c.paths = &out;
        assert_eq!(policy.decide(&c, lexical()), None, "the source is outside");
        let inside = [
            "/srv/ws/scratch/a".to_owned(),
            "/srv/ws/scratch/../scratch/b".to_owned(),
        ];
        c.paths = &inside;
        assert!(policy.decide(&c, lexical()).is_some());
        let relative = ["/srv/ws/scratch/a".to_owned(), "scratch/b".to_owned()];
        c.paths = &relative;
        assert_eq!(
            policy.decide(&c, lexical()),
            None,
            "a path that cannot be placed makes a run rule not match"
        );
    }

    #[test]
    fn a_path_that_cannot_be_placed_makes_a_refuse_rule_refuse() {
        let policy = Policy::compile(
            &[rule(
                "no-git",
                "paths.exists(p, glob(p, '/srv/ws/.git/**'))",
                "refuse",
            )],
            &modes(),
        )
        .unwrap();
        let args = json!({});
        for raw in [".git/config", "~/.git/hooks-x", ""] {
            let paths = ["/srv/ws/ok.txt".to_owned(), raw.to_owned()];
            let mut c = call("write_file", Effect::Write, &args);
            c.paths = &paths;
            let m = policy.decide(&c, lexical()).unwrap();
            assert_eq!(m.outcome, Outcome::Refuse, "{raw}");
            assert!(
                m.error.is_some(),
                "{raw}: refused because it cannot be placed"
            );
        }
        // Placed the way the server places it, it is judged on where it lands.
        struct Served;
        impl PathResolver for Served {
            fn resolve(&self, raw: &str) -> Result<String, Unplaced> {
                let placement = Placement {
                    home: Some("/home/agent".into()),
                    bases: Some(vec!["/srv/ws".into()]),
                    relative_to_bases: true,
                };
                paths::place(raw, &placement)
            }
        }
        let paths = [".git/config".to_owned()];
        let mut c = call("write_file", Effect::Write, &args);
        c.paths = &paths;
        let m = policy.decide(&c, Arc::new(Served)).unwrap();
        assert_eq!((m.outcome, m.error), (Outcome::Refuse, None));
        let paths = ["notes/a.txt".to_owned()];
        c.paths = &paths;
        assert_eq!(policy.decide(&c, Arc::new(Served)), None);
    }

    #[test]
    fn rules_that_would_hold_too_often_or_never_are_reported_at_load() {
        let errors = Policy::compile(
            &[rule(
                "any",
                "paths.all(p, glob(p, '/srv/ws/scratch/**'))",
                "run",
            )],
            &modes(),
        )
        .unwrap_err();
        assert!(
            errors[0].message.contains("must name its tools"),
            "{errors:?}"
        );
        // A refuse rule over paths needs no tool: it only narrows.
        assert!(
            Policy::compile(
                &[rule("r", "paths.exists(p, glob(p, '/x/**'))", "refuse")],
                &modes()
            )
            .is_ok()
        );
        let errors = Policy::compile(
            &[rule("rel", "glob(arguments.path, '*.env')", "refuse")],
            &modes(),
        )
        .unwrap_err();
        assert!(errors[0].message.contains("relative"), "{errors:?}");
    }
}
