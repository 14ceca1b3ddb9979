//! What a new user meets in the first hour, each a real `plangate`
//! process: messages that say what to do instead of the operating system's
//! words, nothing started before a bad address is refused, no demo site
//! answering for a config that was not given.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[test]
fn a_bare_port_for_http_gets_the_addresses_it_could_mean_before_anything_starts() {
    let scratch = Scratch::new();
    let started = Instant::now();
    let out = scratch.run(&["serve", "--http", "7071"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains("--http 7071: give an address with the port, e.g. 127.0.0.1:7071"),
        "{err}"
    );
    assert!(!err.contains("upstream connected"), "nothing starts: {err}");
    assert!(!scratch.data_dir().exists(), "nothing is made either");
    assert!(started.elapsed() < Duration::from_secs(10));

    let out = scratch.run(&["serve", "--http", "localhost"]);
    assert!(
        stderr(&out).contains("not an address: use HOST:PORT"),
        "{out:?}"
    );
}

#[test]
fn a_port_in_use_is_said_first_not_after_the_upstreams_came_up() {
    let scratch = Scratch::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = scratch.run(&["serve", "--http", &addr]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "cannot listen on {addr}: another process is already listening there"
        )),
        "{err}"
    );
    assert!(!err.contains("upstream connected"), "{err}");
    assert!(!err.contains("plangate ready"), "{err}");
}

#[test]
fn a_file_given_as_data_dir_is_named_once_without_the_os_words_twice() {
    let scratch = Scratch::new();
    let file = scratch.write("not-a-dir", "x");
    for dir in [file.clone(), file.join("below")] {
        let out = plangate_cmd()
            .arg("--data-dir")
            .arg(&dir)
            .args(["keys", "list"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{} is a file, not a directory", file.display())),
            "{err}"
        );
        assert!(!err.contains("File exists"), "{err}");
        assert!(!err.contains("os error"), "{err}");
    }
}

fn plangate_cmd() -> std::process::Command {
    let mut cmd = std::process::Command::new(plangate());
    cmd.env_remove("PLANGATE_CONFIG").env_remove("PLANGATE_KEY");
    cmd
}

/// A plan on upstream `blog` (the demo site under another name), made
/// through `plangate serve --config`.
async fn plan_on_blog(scratch: &Scratch) -> String {
    let state = scratch.path().join("blog.json");
    let config = scratch.write(
        "blog.toml",
        &plangate_upstream("blog", &["demo-site", "--state", state.to_str().unwrap()]),
    );
    let token = scratch.create_key("agent", "plan");
    let agent = stdio_client(
        scratch,
        &["--config", config.to_str().unwrap()],
        Some(&token),
    )
    .await;
    let planned = call(
        &agent,
        "update_option",
        json!({"name": "tagline", "value": "x"}),
    )
    .await
    .unwrap();
    assert!(body(&planned)["planned"] == true, "{planned:?}");
    agent.cancel().await.unwrap();
    config.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn commands_that_call_upstreams_refuse_the_demo_site_for_plans_on_other_upstreams() {
    let scratch = Scratch::new();
    let config = plan_on_blog(&scratch).await;
    // Elsewhere, so ./plangate.toml is not found either.
    for args in [
        vec!["plans", "apply", "--key", "agent"],
        vec!["plans", "retry", "--key", "agent", "step-1"],
        vec!["config", "check"],
    ] {
        let out = scratch.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = stderr(&out);
        assert!(err.contains("no config was found"), "{args:?}: {err}");
        assert!(err.contains("name upstream(s) \"blog\""), "{args:?}: {err}");
        assert!(err.contains("--config"), "{args:?}: {err}");
    }
    assert!(
        !scratch.data_dir().join("demo-site.json").exists(),
        "the demo site never started"
    );
    // With the config, it applies.
    let digest = shown_digest(&scratch, "agent");
    let out = scratch.run(&[
        "plans", "apply", "--key", "agent", "--digest", &digest, "--config", &config,
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        site_state(&scratch.path().join("blog.json"))["options"]["tagline"]["value"],
        "x"
    );
}

#[test]
fn config_check_on_a_machine_that_never_served_checks_the_demo_site() {
    let scratch = Scratch::new();
    let out = scratch.run(&["config", "check"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("site"), "{out:?}");
}

#[test]
fn a_stdio_key_from_another_data_dir_is_named_as_such() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "plan");
    let other = scratch.path().join("other-data");
    let mut child = plangate_cmd()
        .arg("--data-dir")
        .arg(&other)
        .args(["serve", "--stdio"])
        .current_dir(scratch.path())
        .env("PLANGATE_KEY", &token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Closing stdin ends the stdio server.
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "PLANGATE_KEY is not an active key of data dir {}",
            other.display()
        )),
        "{err}"
    );
    assert!(err.contains("0 active key(s) there"), "{err}");
    assert!(!err.contains(&token), "the token is never echoed: {err}");
}

#[test]
fn config_check_counts_the_rules_warns_of_a_mode_list_that_skips_the_default_and_makes_no_data_dir()
{
    let scratch = Scratch::new();
    let site = plangate_upstream(
        "site",
        &[
            "demo-site",
            "--state",
            scratch.path().join("site.json").to_str().unwrap(),
        ],
    );
    let rules = "[[rules]]\nname = \"no-plugins\"\nmodes = [\"plan\"]\nwhen = \"tool == 'set_plugin_active'\"\noutcome = \"refuse\"\nmessage = \"not plugins\"\n\n[[rules]]\nname = \"menus-plan\"\nwhen = \"tool == 'create_menu_item'\"\noutcome = \"plan\"\n";
    let config = scratch.write("plangate.toml", &format!("{site}\n{rules}"));
    let args = ["config", "check", "--config", config.to_str().unwrap()];
    let said = succeeded(&args, &scratch.run(&args));
    assert!(said.contains("rules: 2 (no-plugins, menus-plan)"), "{said}");
    assert!(
        said.contains(
            "warning: rule no-plugins applies only in mode(s) plan: a key in mode default"
        ),
        "{said}"
    );
    assert!(!said.contains("warning: rule menus-plan"), "{said}");
    assert!(
        !scratch.data_dir().exists(),
        "config check made the data dir"
    );
}
