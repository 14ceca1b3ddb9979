//! Evaluating the rules against one call ([`Policy::decide`]), and the
//! functions of ours conditions call (`path`, `glob`), which place paths
//! with the resolver the call lends. Apart from compiling because it runs
//! per call, with the thread's CEL context.

use std::cell::RefCell;
use std::sync::Arc;

use cel::Context;

use crate::{Call, Lexical, Matched, Outcome, PathResolver, Policy, Rule, Unplaced, paths};

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

impl Policy {
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
                if !rule.may_match(call) {
                    continue;
                }
                let scope = scope.get_or_insert_with(|| variables(root, call));
                if let Some(matched) = rule.judge(scope) {
                    return Some(matched);
                }
            }
            None
        })
    }
}

impl Rule {
    /// Whether the rule's condition is worth evaluating for `call`: the
    /// rule applies in its mode, its guard admits it, and it would not
    /// widen what runs on an argument the tool does not declare.
    fn may_match(&self, call: &Call<'_>) -> bool {
        if self
            .modes
            .as_ref()
            .is_some_and(|m| !m.iter().any(|m| m == call.mode))
            || !self.guard.admits(call)
        {
            return false;
        }
        // A rule that would widen what runs does not match on an
        // argument the tool does not declare: the upstream ignores
        // it, so it proves nothing about what the call does.
        let widens = match self.outcome {
            Outcome::Run => true,
            Outcome::Effect(e) => e < call.effect,
            _ => false,
        };
        !(widens && self.reads.any_of(call.undeclared))
    }

    /// The rule's condition evaluated in `scope`: a match when it holds,
    /// or when a `refuse` rule's cannot be evaluated (fail closed).
    fn judge(&self, scope: &Context<'_, '_>) -> Option<Matched<'_>> {
        let matched = |error| Matched {
            rule: &self.name,
            outcome: self.outcome,
            message: self.message.as_deref(),
            error,
        };
        match self.program.execute(scope) {
            Ok(cel::Value::Bool(true)) => Some(matched(None)),
            Ok(cel::Value::Bool(false)) => None,
            Ok(other) if self.outcome == Outcome::Refuse => Some(matched(Some(format!(
                "the condition gave {other:?}, not true or false"
            )))),
            Err(e) if self.outcome == Outcome::Refuse => Some(matched(Some(e.to_string()))),
            Ok(_) | Err(_) => None,
        }
    }
}

/// The variables a condition sees for `call` (see the crate's docs), in a
/// scope of `root`.
fn variables<'r>(root: &'r Context<'static, 'static>, call: &Call<'_>) -> Context<'r, 'static> {
    let mut scope = root.new_inner_scope();
    let key = serde_json::json!({"name": call.key_name, "scope": call.scope});
    let arguments = cel::to_value(call.arguments).unwrap_or(cel::Value::Null);
    scope.add_variable_from_value("key", cel::to_value(&key).unwrap_or(cel::Value::Null));
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
}
