//! Rules at dispatch agree with the rules' own decision function — the one
//! `plangate policy test` prints — on generated calls (a property test):
//! for each call, what the gateway did (ran it, planned it, refused it and
//! with which code, or asked) is what [`plangate_policy::Policy::decide`]
//! and [`plangate_policy::decision`] say for that call in the key's mode.
//!
//! The gateway runs in process on the demo site, with rules over its tools
//! and arguments of every outcome; the agent holds a `write` key in plan
//! mode and declares no elicitation, so an `ask` shows as
//! `elicitation_unsupported`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use plangate_core::{Code, Decision, Scope};
use plangate_gateway::policy::{Who, call_paths, judge};
use plangate_policy::RuleSpec;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{Value, json};

fn rule(name: &str, when: &str, outcome: &str) -> RuleSpec {
    let message = (outcome == "refuse").then(|| format!("{name} says no"));
    RuleSpec {
        message,
        ..RuleSpec::new(name, when, outcome)
    }
}

fn rules() -> Vec<RuleSpec> {
    let mut page_three = rule(
        "page-three-is-precious",
        "tool == 'get_page' && arguments.id == 3",
        "effect",
    );
    page_three.effect = Some("destructive".into());
    vec![
        rule(
            "no-env-labels",
            "has(arguments.label) && arguments.label.endsWith('.env')",
            "refuse",
        ),
        rule(
            "tagline-runs",
            "tool == 'update_option' && arguments.name == 'tagline'",
            "run",
        ),
        rule("deletes-ask", "tool == 'delete_page'", "ask"),
        rule(
            "local-menus-plan",
            "tool == 'create_menu_item' && arguments.url.startsWith('/')",
            "plan",
        ),
        page_three,
    ]
}

/// A generated call: the tool and its arguments (valid for the demo site,
/// so only the rules and the mode decide).
fn calls() -> impl Strategy<Value = (String, Value)> {
    let label = prop::sample::select(vec![
        "Hours", "prod.env", ".env", "x.envy", "../a.env", "Menu",
    ]);
    let url = prop::sample::select(vec!["/hours", "https://example.com", "/a/../b"]);
    let option = prop::sample::select(vec!["tagline", "site_title"]);
    let id = 1u64..5;
    prop_oneof![
        (option, "[a-z ]{0,12}")
            .prop_map(|(n, v)| ("update_option".to_owned(), json!({"name": n, "value": v}))),
        (label, url).prop_map(|(l, u)| (
            "create_menu_item".to_owned(),
            json!({"menu": "main", "label": l, "url": u})
        )),
        id.clone()
            .prop_map(|i| ("delete_page".to_owned(), json!({"id": i}))),
        id.prop_map(|i| ("get_page".to_owned(), json!({"id": i}))),
    ]
}

/// What the gateway did with a call, in the words of a decision.
fn what_happened(result: &rmcp::model::CallToolResult) -> String {
    let body = body(result);
    match body["code"].as_str() {
        Some("plan_step") => "plan".to_owned(),
        Some("elicitation_unsupported") => "ask".to_owned(),
        Some(code) if result.is_error == Some(true) => format!("refuse {code}"),
        _ => "run".to_owned(),
    }
}

fn said(decision: Decision) -> String {
    match decision {
        Decision::Run => "run".to_owned(),
        Decision::Plan => "plan".to_owned(),
        Decision::Ask => "ask".to_owned(),
        Decision::Refuse(code) => format!("refuse {}", code.as_str()),
    }
}

#[test]
fn dispatch_decides_each_generated_call_as_the_rules_decision_function_says() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (gw, client) = rt.block_on(async {
        let (store, token) = store_with_key(dir.path(), Scope::Write).await;
        let mut config = demo_site_config();
        config.rules = rules();
        config.gateway.max_steps = 1000;
        let (site, _) = in_process("site", demo(dir.path().join("site.json")));
        let gw = start(config, store, vec![("site", site)]).await;
        let client = client_of(gw.clone(), Some(token), Seen::default()).await;
        call_ok(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
        (gw, client)
    });
    let (plan, _) = gw.config().modes.resolve(Some("plan"));
    // A fixed seed: the cases are generated the same way in every run, so
    // that every kind of decision is reached is not left to chance (a
    // random 48 once missed one).
    let mut runner = TestRunner::new_with_rng(
        ProptestConfig {
            cases: 48,
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let seen = std::cell::RefCell::new(std::collections::BTreeSet::new());
    runner
        .run(&calls(), |(tool, arguments)| {
            let catalog = gw.catalog();
            let t = catalog.tool(&tool).unwrap();
            let paths = rt.block_on(call_paths(
                Some(gw.ops()),
                &gw.config(),
                &t.upstream,
                &t.paths,
                &arguments,
            ));
            let policy = gw.policy();
            let who = Who {
                name: "agent",
                scope: "write",
            };
            let undeclared = plangate_core::undeclared(&t.tool.input_schema, &arguments).allowed;
            let matched = judge(
                &policy,
                t.into(),
                t.effect,
                who,
                "plan",
                &arguments,
                &undeclared,
                &paths,
            );
            let expected = said(plangate_policy::decision(
                matched.as_ref().map(|m| m.outcome),
                t.effect,
                Scope::Write,
                &plan,
                false,
            ));
            let result = rt.block_on(call(&client, &tool, arguments.clone()));
            let happened = what_happened(&result);
            seen.borrow_mut().insert(expected.clone());
            prop_assert_eq!(&happened, &expected, "{} {}: {:?}", tool, arguments, result);
            if expected == format!("refuse {}", Code::ForbiddenByRule.as_str()) {
                let message = body(&result)["message"].as_str().unwrap_or("").to_owned();
                prop_assert!(message.contains("no-env-labels"), "{}", message);
            }
            Ok(())
        })
        .unwrap();
    // The generated calls reached every kind of decision.
    for kind in ["run", "plan", "ask", "refuse forbidden_by_rule"] {
        assert!(
            seen.borrow().contains(kind),
            "no case was decided {kind}: {seen:?}"
        );
    }
    rt.block_on(async {
        client.cancel().await.unwrap();
        gw.shutdown().await;
    });
}
