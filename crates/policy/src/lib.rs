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

use cel::Program;
use plangate_core::{CallerScope, Code, Decision, Effect, ModeSpec, Scope, decide};
use serde_json::Value;

mod analysis;
mod compile;
mod evaluate;
pub mod paths;

use analysis::{Guard, Reads};

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

impl RuleSpec {
    /// A rule with the three fields every rule has, in every mode, with
    /// no message or effect: the start of one built in code (an embedder's
    /// rules, a test's), the other fields set after.
    pub fn new(
        name: impl Into<String>,
        when: impl Into<String>,
        outcome: impl Into<String>,
    ) -> RuleSpec {
        RuleSpec {
            name: name.into(),
            when: when.into(),
            outcome: outcome.into(),
            ..RuleSpec::default()
        }
    }
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

/// One rule as compiled ([`Policy::compile`]) and evaluated
/// ([`Policy::decide`]): its program, and what its condition says outright
/// (its guard and the arguments it reads), worked out once at load.
struct Rule {
    name: String,
    program: Program,
    modes: Option<Vec<String>>,
    outcome: Outcome,
    message: Option<String>,
    guard: Guard,
    reads: Reads,
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

/// The effect class a rule's word names (`effect`, or a condition's
/// comparison with `effect`), if it names one.
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

    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    /// A rule in every mode; a `refuse` says "NAME says no".
    fn rule(name: &str, when: &str, outcome: &str) -> RuleSpec {
        let mut spec = RuleSpec::new(name, when, outcome);
        if outcome == "refuse" {
            spec.message = Some(format!("{name} says no"));
        }
        spec
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
