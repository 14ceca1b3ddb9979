//! A partial apply says what it leaves (docs/design.md §5, "Partial
//! applies"). A person who applies some steps of a plan is shown the steps
//! left waiting; when one is tied to a step that runs (the same target, a
//! name it moves or removes) the apply is refused, nothing run, until they
//! name it too or say `--partial` — at the data dir and over `--server`
//! alike. The agent's own apply of the part a person approved still runs,
//! and its answer lists what is left and why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// A `plan`-scope agent on the demo site with three waiting steps: the
/// tagline, a menu item, the tagline again (the first's target).
async fn three_waiting() -> (Scratch, String, Client, [String; 3]) {
    let (scratch, config, [token]) = demo_keys("", [("agent", "plan")]);
    let agent = config_client(&scratch, &config, &token).await;
    let mut ids = Vec::new();
    for (tool, args) in [
        ("update_option", tagline("Fresh bread")),
        ("create_menu_item", menu_item("Hours", "/hours")),
        ("update_option", tagline("Fresh bread daily")),
    ] {
        let planned = ok(&agent, tool, args).await;
        ids.push(planned["step_id"].as_str().unwrap().to_owned());
    }
    (
        scratch,
        config,
        agent,
        <[String; 3]>::try_from(ids).unwrap(),
    )
}

/// The agent's config and one more server, which leaves a mark in the
/// working directory each time it is started (and then exits): an apply
/// whose steps do not call it must not start it.
fn with_a_second_server(scratch: &Scratch, config: &str) -> String {
    let text = std::fs::read_to_string(config).unwrap();
    let ghost = "[upstreams.ghost]\ncommand = \"/bin/sh\"\nargs = [\"-c\", \"echo started >> ghost-starts; exit 1\"]\n";
    let path = scratch.write("with-ghost.toml", &format!("{ghost}\n{text}"));
    path.to_str().unwrap().to_owned()
}

fn digest(scratch: &Scratch) -> String {
    let args = ["plans", "show", "--key", "agent", "--json"];
    let view = parsed(&args, &succeeded(&args, &scratch.run(&args)));
    view["plan_digest"].as_str().unwrap().to_owned()
}

const TIE: &str = "it lands on tagline, as step 1 does";

#[tokio::test]
async fn applying_one_of_two_steps_on_one_target_is_refused_until_the_person_says_partial() {
    let (scratch, config, _agent, [first, menu, second]) = three_waiting().await;
    let before = site_tagline(&scratch);
    let digest = digest(&scratch);
    let apply = apply_args(&config, &digest, &[&first]);
    let out = scratch.run(&apply);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("[partial_apply]"), "{err}");
    assert!(err.contains(TIE), "{err}");
    assert!(err.contains("--partial"), "{err}");
    // Each predicted effect's full stop gives way to the tie's parenthesis.
    assert!(!err.contains(". (") && !err.contains(".;"), "{err}");
    assert_eq!(site_tagline(&scratch), before, "something ran");

    // Leaving behind only steps nothing ties to the one it runs: it goes on.
    let untied = [&apply[..8], &[menu.as_str()]].concat();
    let out = scratch.run(&untied);
    let said = succeeded(&untied, &out);
    assert!(said.contains("applied 1"), "{said}");
    assert!(
        said.contains(&format!("step 3 ({second}): ")) && !said.contains(TIE),
        "{said}"
    );
    assert!(
        stderr(&out).contains(&format!("step 1 ({first}) stays waiting")),
        "{}",
        stderr(&out)
    );
    assert_eq!(site_tagline(&scratch), before);
}

#[tokio::test]
async fn with_partial_it_runs_and_the_receipt_says_what_is_left_and_why() {
    let (scratch, config, _agent, [first, _menu, second]) = three_waiting().await;
    let config = with_a_second_server(&scratch, &config);
    let digest = digest(&scratch);
    let apply = apply_args(&config, &digest, &["--partial", &first]);
    let out = scratch.run(&apply);
    let said = succeeded(&apply, &out);
    assert!(said.contains("applied 1"), "{said}");
    assert!(
        said.contains(&format!("step 3 ({second})")) && said.contains(TIE),
        "{said}"
    );
    assert!(said.contains("may be half done"), "{said}");
    let err = stderr(&out);
    assert!(err.contains("stays waiting: it lands on tagline"), "{err}");
    // Each step is said as it ends; the server no step calls is never
    // started.
    assert!(
        err.contains("[1/1] step 1 applied: Set option tagline"),
        "{err}"
    );
    assert!(!scratch.path().join("ghost-starts").exists(), "{err}");
    assert_eq!(site_tagline(&scratch), "Fresh bread");
}

#[tokio::test]
async fn over_the_operator_api_a_partial_apply_needs_the_same_word() {
    let (scratch, config, _agent, [first, ..]) = three_waiting().await;
    let args = ["operator", "token", "--name", "alice"];
    let token = succeeded(&args, &scratch.run(&args)).trim().to_owned();
    let service = serve_http(&scratch, &["--config", &config]);
    let server = format!("http://{}", service.addr);
    let digest = digest(&scratch);
    let apply = [
        "plans", "apply", "--key", "agent", "--digest", &digest, &first, "--server", &server,
    ];
    let run = |args: &[&str]| {
        scratch
            .command(args)
            .env("PLANGATE_OPERATOR_TOKEN", &token)
            .output()
            .unwrap()
    };
    let out = run(&apply);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("[partial_apply]"), "{}", stderr(&out));
    assert_eq!(site_tagline(&scratch), "Just another demo site");
    let partial = [&apply[..], &["--partial"]].concat();
    let said = succeeded(&partial, &run(&partial));
    assert!(said.contains("applied 1") && said.contains(TIE), "{said}");
}

#[tokio::test]
async fn the_agents_apply_of_the_part_a_person_approved_lists_what_it_leaves() {
    let (scratch, _config, agent, [first, ..]) = three_waiting().await;
    let digest = digest(&scratch);
    let approve = [
        "plans", "approve", "--key", "agent", "--digest", &digest, &first,
    ];
    // The person approving part of the plan is told which step their yes
    // leaves behind tied to it, before the agent's apply runs it.
    let said = succeeded(&approve, &scratch.run(&approve));
    assert!(
        said.contains(&format!("is tied to an approved step: {TIE}")),
        "{said}"
    );
    assert!(said.contains("plans approve --key agent"), "{said}");
    let r = call(&agent, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    let receipt = body(&r);
    assert_eq!(receipt["applied"], 1, "{receipt}");
    let left: Vec<Value> = receipt["left_waiting"].as_array().unwrap().clone();
    assert_eq!(left.len(), 2, "{receipt}");
    assert_eq!(left[1]["tied"], TIE, "{receipt}");
    assert!(left[0].get("tied").is_none(), "{receipt}");
    let text = r.content[0].as_text().unwrap().text.clone();
    assert!(text.contains(&format!("still waiting: {TIE}")), "{text}");
}

/// A long step's own progress — the official `server-everything`'s
/// long-running operation, counted as a write here so it is planned — is
/// shown while `plans apply` runs it, not only its end.
#[tokio::test]
async fn plans_apply_shows_the_servers_own_progress_while_a_step_runs() {
    let scratch = Scratch::new();
    let everything = peers().js("@modelcontextprotocol/server-everything/dist/index.js");
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n\n[upstreams.everything.tools.\"trigger-long-running-operation\"]\neffect = \"write\"\n",
            everything.display().to_string()
        ),
    );
    let config = config.to_str().unwrap();
    let token = scratch.create_key("agent", "plan");
    let agent = config_client(&scratch, config, &token).await;
    let planned = ok(
        &agent,
        "trigger-long-running-operation",
        json!({"duration": 1.5, "steps": 3}),
    )
    .await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    let digest = digest(&scratch);
    let apply = apply_args(config, &digest, &[]);
    let out = scratch.run(&apply);
    let said = succeeded(&apply, &out);
    assert!(said.contains("applied 1"), "{said}");
    let err = stderr(&out);
    // The server's last notification can reach plangate after the call's
    // result (they travel apart), and progress after a step ended is not
    // shown: the ones before it are.
    for n in 1..=2 {
        assert!(
            err.contains(&format!("[1/1]   the server says: {n} of 3")),
            "{err}"
        );
    }
    let running = err.find("[1/1] step 1 running").expect(&err);
    let first = err.find("the server says: 1 of 3").unwrap();
    let applied = err.find("[1/1] step 1 applied").expect(&err);
    assert!(running < first && first < applied, "{err}");
    agent.cancel().await.unwrap();
}
