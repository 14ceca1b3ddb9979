//! What a person sees when an upstream will not start: its own last words
//! (stderr) in the error, a `startup_timeout` that bounds the wait, and a
//! plangate listed as its own upstream refused at once with the entry to
//! remove — as real `plangate config check` and `serve` processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;

/// `plangate config check --config FILE`, which must fail; its stderr.
fn check_fails(scratch: &Scratch, config: &str) -> String {
    let out = scratch.run(&["config", "check", "--config", config]);
    assert!(!out.status.success(), "{}", stdout(&out));
    stderr(&out)
}

#[test]
fn a_failing_upstream_says_why_in_its_own_words() {
    let scratch = Scratch::new();
    let config = scratch.write(
        "plangate.toml",
        "[upstreams.boom]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'boom: missing API token' >&2; exit 1\"]\n",
    );
    let err = check_fails(&scratch, config.to_str().unwrap());
    assert!(err.contains("upstream boom"), "{err}");
    assert!(
        err.contains("its stderr ended with: boom: missing API token"),
        "{err}"
    );
    assert!(!err.contains("OrderedProgress"), "rmcp's type names: {err}");
}

#[test]
fn a_silent_upstream_is_given_up_on_after_its_startup_timeout() {
    let scratch = Scratch::new();
    let config = scratch.write(
        "plangate.toml",
        "[upstreams.silent]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'waiting for a licence server' >&2; exec sleep 60\"]\nstartup_timeout = \"1s\"\n",
    );
    let started = Instant::now();
    let err = check_fails(&scratch, config.to_str().unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "waited {:?}",
        started.elapsed()
    );
    assert!(
        err.contains("no answer within 1s (its startup_timeout)"),
        "{err}"
    );
    assert!(err.contains("waiting for a licence server"), "{err}");
}

#[test]
fn plangate_listed_as_its_own_upstream_is_refused_with_the_entry_to_remove() {
    let scratch = Scratch::new();
    let path = scratch.path().join("plangate.toml");
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.myself]\ncommand = {:?}\nargs = [\"serve\", \"--stdio\", \"--config\", {:?}]\n",
            plangate().display().to_string(),
            path.display().to_string()
        ),
    );
    let started = Instant::now();
    let err = check_fails(&scratch, config.to_str().unwrap());
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(
        err.contains("started as upstream \"myself\" of another plangate"),
        "{err}"
    );
    assert!(err.contains("remove the \"myself\" entry"), "{err}");
    // `serve` itself, started the way a plangate starts its upstreams,
    // refuses at once with exit code 2.
    let out = scratch
        .command(&["serve", "--stdio", "--config", config.to_str().unwrap()])
        .env("PLANGATE_STARTED_AS_UPSTREAM", "myself")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
