//! A person acting on a running plangate through its operator API
//! (`plangate plans … --server URL` with an operator token), from a
//! directory with no data dir — how a person reaches the service
//! `plangate service install` runs as its own OS user: the plan shows as
//! at the data dir, a yes needs the person's code when approvals require
//! one, and a missing or wrong token is refused before anything is read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output, Stdio};

use common::*;
use serde_json::Value;

/// `plangate ARGS…` from a directory with no data dir (one that does not
/// exist, so any read of it fails), with `token` as the operator token.
fn elsewhere(args: &[&str], token: Option<&str>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(plangate());
    cmd.args(args)
        .current_dir(dir.path())
        .env("PLANGATE_DATA_DIR", dir.path().join("no-data-dir-here"))
        .env_remove("PLANGATE_CONFIG")
        .env_remove("PLANGATE_KEY")
        .env_remove("PLANGATE_SERVER")
        .env_remove("PLANGATE_OPERATOR_TOKEN")
        .stdin(Stdio::null());
    if let Some(t) = token {
        cmd.env("PLANGATE_OPERATOR_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    assert!(
        !dir.path().join("no-data-dir-here").exists(),
        "{args:?} made a data dir"
    );
    out
}

fn review_answers(scratch: &Scratch) -> Vec<Value> {
    let args = ["audit", "export", "--key", "agent"];
    succeeded(&args, &scratch.run(&args))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "review_answered")
        .collect()
}

#[tokio::test]
async fn a_person_approves_and_applies_through_the_service_with_a_code_and_no_data_dir() {
    let (scratch, config, [agent_key]) = demo_keys("", [("agent", "plan")]);
    let args = ["operator", "enroll", "--name", "alice", "--totp", "--json"];
    let enrolled = parsed(&args, &succeeded(&args, &scratch.run(&args)));
    let secret = enrolled["secret_base32"].as_str().unwrap().to_owned();
    let args = ["operator", "token", "--name", "alice"];
    let token = succeeded(&args, &scratch.run(&args)).trim().to_owned();
    assert!(token.starts_with("pgo_"), "{token}");
    let args = ["approvals", "require", "totp"];
    succeeded(&args, &scratch.run(&args));

    let service = serve_http(&scratch, &["--config", &config]);
    let server = format!("http://{}", service.addr);
    let agent = http_client(&service.url(), Some(&agent_key)).await.unwrap();
    ok(&agent, "update_option", tagline("Over the wire")).await;
    ok(&agent, "update_option", json_title("Not this one")).await;

    // The plan, as the service shows it.
    let show = ["plans", "show", "--key", "agent", "--server", &server];
    let shown = succeeded(&show, &elsewhere(&show, Some(&token)));
    assert!(shown.contains("2 step(s) in the plan"), "{shown}");
    assert!(shown.contains("needed"), "{shown}");
    // One block per step, as wide as what it says: no padded table.
    assert!(shown.contains("\n1. [planned] step_"), "{shown}");
    assert!(
        shown.contains("   tool update_option, lands on live (tagline)"),
        "{shown}"
    );
    assert!(shown.lines().all(|l| l.chars().count() < 120), "{shown}");
    let show_json = [
        "plans", "show", "--key", "agent", "--server", &server, "--json",
    ];
    let view = parsed(
        &show_json,
        &succeeded(&show_json, &elsewhere(&show_json, Some(&token))),
    );
    let second = view["steps"][1]["step_id"].as_str().unwrap().to_owned();
    let list = ["plans", "list", "--server", &server];
    let listed = succeeded(&list, &elsewhere(&list, Some(&token)));
    assert!(listed.contains("agent"), "{listed}");

    // No token, a wrong one: refused, nothing read.
    let out = elsewhere(&show, None);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("PLANGATE_OPERATOR_TOKEN"),
        "{}",
        stderr(&out)
    );
    let out = elsewhere(&show, Some("pgo_not_a_token"));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("[unauthorized]"), "{}", stderr(&out));
    // An agent's API key is not an operator token.
    let out = elsewhere(&show, Some(&agent_key));
    assert!(stderr(&out).contains("[unauthorized]"), "{}", stderr(&out));

    // A no to the second step needs no code.
    let reject = [
        "plans",
        "reject",
        "--key",
        "agent",
        &second,
        "--reason",
        "not today",
        "--server",
        &server,
    ];
    let said = succeeded(&reject, &elsewhere(&reject, Some(&token)));
    assert!(said.contains("rejected step"), "{said}");

    let view = parsed(
        &show_json,
        &succeeded(&show_json, &elsewhere(&show_json, Some(&token))),
    );
    let digest = view["plan_digest"].as_str().unwrap().to_owned();
    // A yes without the person's code: refused, nothing recorded.
    let approve = [
        "plans", "approve", "--key", "agent", "--digest", &digest, "--server", &server,
    ];
    let out = elsewhere(&approve, Some(&token));
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("factor_required"), "{}", stderr(&out));
    assert!(review_answers(&scratch).is_empty());
    // Without --digest and no terminal: nothing asked, nothing recorded.
    let unseen = ["plans", "apply", "--key", "agent", "--server", &server];
    let out = elsewhere(&unseen, Some(&token));
    assert!(!out.status.success(), "{out:?}");
    assert!(review_answers(&scratch).is_empty());

    // Keys: listed, made and revoked through the API; a write key needs
    // the code.
    let list = ["keys", "list", "--server", &server];
    let listed = succeeded(&list, &elsewhere(&list, Some(&token)));
    assert!(
        listed.contains("agent") && listed.contains("plan"),
        "{listed}"
    );
    let make = [
        "keys", "create", "--name", "helper", "--scope", "plan", "--server", &server,
    ];
    let made = succeeded(&make, &elsewhere(&make, Some(&token)));
    assert!(made.trim().starts_with("pgk_"), "{made}");
    let revoke = ["keys", "revoke", "helper", "--server", &server];
    let said = succeeded(&revoke, &elsewhere(&revoke, Some(&token)));
    assert!(said.contains("revoked key \"helper\""), "{said}");
    let write = [
        "keys", "create", "--name", "escape", "--scope", "write", "--server", &server,
    ];
    let out = elsewhere(&write, Some(&token));
    assert!(stderr(&out).contains("factor_required"), "{}", stderr(&out));

    // Holding the key tighter needs no code; letting it go does.
    let lock = [
        "mode", "set", "--key", "agent", "plan", "--lock", "--server", &server,
    ];
    let said = succeeded(&lock, &elsewhere(&lock, Some(&token)));
    assert!(said.contains("locked"), "{said}");
    let unlock = [
        "mode", "set", "--key", "agent", "--unlock", "--server", &server,
    ];
    let out = elsewhere(&unlock, Some(&token));
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("factor_required"), "{}", stderr(&out));

    // The person's code: the step is applied, and the yes names alice.
    let code = code_now(&secret);
    let apply = [
        "plans", "apply", "--key", "agent", "--digest", &digest, "--code", &code, "--server",
        &server,
    ];
    let said = succeeded(&apply, &elsewhere(&apply, Some(&token)));
    assert!(said.contains("applied 1"), "{said}");
    assert_eq!(site_tagline(&scratch), "Over the wire");
    let yes = review_answers(&scratch);
    assert_eq!(yes.len(), 1, "{yes:?}");
    assert_eq!(yes[0]["actor"]["name"], "alice", "{}", yes[0]);
    assert_eq!(yes[0]["channel"], "console", "{}", yes[0]);
    agent.cancel().await.unwrap();
}

/// An `update_option` call that sets the site's title.
fn json_title(value: &str) -> Value {
    serde_json::json!({"name": "site_title", "value": value})
}

#[test]
fn a_passkey_link_keeps_only_its_hash_and_no_passkey_requirement_without_one() {
    let scratch = Scratch::new();
    let args = ["operator", "enroll", "--name", "bo", "--passkey", "--json"];
    let said = parsed(&args, &succeeded(&args, &scratch.run(&args)));
    let link = said["link"].as_str().unwrap();
    let secret = link
        .strip_prefix("http://localhost:7070/console/passkey#invite=")
        .unwrap_or_else(|| panic!("{link}"));
    let args = ["audit", "export", "--key", "operators"];
    let trail = succeeded(&args, &scratch.run(&args));
    assert!(trail.contains("passkey_invited"), "{trail}");
    assert!(!trail.contains(secret), "the link's secret reached the log");
    // Nobody has registered a passkey yet: nobody could meet it.
    let out = scratch.run(&["approvals", "require", "passkey"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("--passkey"), "{}", stderr(&out));
}

#[test]
fn totp_enrolment_on_a_terminal_shows_the_uri_as_a_qr_code_and_piped_does_not() {
    let scratch = Scratch::new();
    let term = Terminal::start(&scratch, &["operator", "enroll", "--name", "zed", "--totp"]);
    let (status, screen) = term.finish();
    assert!(status.success(), "{screen}");
    let uri_at = screen.find("otpauth://totp/plangate:zed").unwrap();
    let qr = &screen[..uri_at];
    assert!(
        qr.lines()
            .filter(|l| l.contains('▄') || l.contains('▀'))
            .count()
            > 10,
        "no QR code before the URI:\n{screen}"
    );
    let args = ["operator", "enroll", "--name", "ann", "--totp"];
    let piped = succeeded(&args, &scratch.run(&args));
    assert!(!piped.contains('▄'), "{piped}");
}

/// Puts an older definition of the site's `update_option` into the tool
/// pins before any gateway ran: at its first listing the gateway holds
/// the real one back, changed, for a person to accept.
async fn pin_an_older_update_option(scratch: &Scratch) {
    let store = plangate_store::open_sqlite(&scratch.data_dir().join("plangate.db"))
        .await
        .unwrap();
    let older = serde_json::json!({
        "name": "update_option",
        "description": "an older definition",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": false, "destructiveHint": false},
    });
    let pinned = plangate_core::testing::tools_pinned(
        "site",
        vec![plangate_core::PinnedDefinition::of("update_option", &older)],
    );
    let event = plangate_store::NewEvent {
        at_ms: 1,
        kind: "tools_pinned".into(),
        body: serde_json::to_value(&pinned).unwrap(),
        seal: None,
    };
    store
        .append_events(plangate_core::TOOLS_LOG, 0, &[event])
        .await
        .unwrap();
}

/// Runs `plangate ARGS… --server SERVER` from no data dir with `token`.
fn over(server: &str, token: &str, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--server", server]);
    elsewhere(&all, Some(token))
}

/// Refused for want of the person's code, with nothing else said wrong.
fn wants_a_code(out: &Output) {
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(out).contains("[factor_required]"), "{}", stderr(out));
}

#[tokio::test]
async fn who_may_say_yes_is_managed_through_the_service_with_no_data_dir() {
    let (scratch, config, _) = demo_keys("", [("agent", "plan")]);
    // The service user's first acts, at its data dir: one operator, one token.
    let args = ["operator", "enroll", "--name", "alice", "--totp", "--json"];
    let enrolled = parsed(&args, &succeeded(&args, &scratch.run(&args)));
    let mut codes: Vec<String> = enrolled["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    let args = ["operator", "token", "--name", "alice"];
    let token = succeeded(&args, &scratch.run(&args)).trim().to_owned();
    let service = serve_http(&scratch, &["--config", &config]);
    let server = format!("http://{}", service.addr);
    let run = |args: &[&str]| over(&server, &token, args);

    let args = ["approvals", "show", "--json"];
    let shown = parsed(&args, &succeeded(&args, &run(&args)));
    assert_eq!(shown["require"], "none", "{shown}");
    assert_eq!(shown["operators"][0]["operator"], "alice", "{shown}");
    assert_eq!(shown["operators"][0]["recovery_codes_left"], 8, "{shown}");
    // Raising needs nothing; from then on every widening act needs a code.
    let args = ["approvals", "require", "totp"];
    let said = succeeded(&args, &run(&args));
    assert!(said.contains("now require totp (were none)"), "{said}");

    let enroll = ["operator", "enroll", "--name", "bob", "--totp", "--json"];
    wants_a_code(&run(&enroll));
    let code = codes.pop().unwrap();
    let with_code = [&enroll[..], &["--code", &code]].concat();
    let bob = parsed(&with_code, &succeeded(&with_code, &run(&with_code)));
    assert!(
        bob["otpauth_uri"]
            .as_str()
            .unwrap()
            .starts_with("otpauth://totp/plangate:bob")
    );
    assert_eq!(bob["recovery_codes"].as_array().unwrap().len(), 8, "{bob}");
    assert_eq!(bob["approvals_require"], "totp", "{bob}");

    let mint = ["operator", "token", "--name", "bob-console"];
    wants_a_code(&run(&mint));
    let code = codes.pop().unwrap();
    let minted = [&mint[..], &["--code", &code, "--operator", "alice"]].concat();
    let bobs = succeeded(&minted, &run(&minted)).trim().to_owned();
    assert!(bobs.starts_with("pgo_"), "{bobs}");
    // The new token works; revoked, it does not.
    let list = ["operator", "list", "--json"];
    let listed = succeeded(&list, &over(&server, &bobs, &list));
    assert!(
        listed.contains("bob-console") && !listed.contains(&bobs),
        "{listed}"
    );
    let revoke = ["operator", "revoke", "bob-console"];
    succeeded(&revoke, &run(&revoke));
    let out = over(&server, &bobs, &["approvals", "show"]);
    assert!(stderr(&out).contains("[unauthorized]"), "{}", stderr(&out));

    let invite = [
        "operator",
        "enroll",
        "--name",
        "carol",
        "--passkey",
        "--json",
    ];
    let code = codes.pop().unwrap();
    let invite = [&invite[..], &["--code", &code, "--operator", "alice"]].concat();
    let link = parsed(&invite, &succeeded(&invite, &run(&invite)));
    let port = service.addr.rsplit_once(':').unwrap().1;
    let page = format!("http://localhost:{port}/console/passkey#invite=");
    assert!(link["link"].as_str().unwrap().starts_with(&page), "{link}");

    let remove = ["operator", "remove", "bob"];
    wants_a_code(&run(&remove));
    let code = codes.pop().unwrap();
    let remove = [&remove[..], &["--code", &code, "--operator", "alice"]].concat();
    let said = succeeded(&remove, &run(&remove));
    assert!(said.contains("removed operator \"bob\""), "{said}");

    // Lowering needs a code too; the trail names alice over the API.
    let lower = ["approvals", "require", "none"];
    wants_a_code(&run(&lower));
    let code = codes.pop().unwrap();
    let lower = [&lower[..], &["--code", &code]].concat();
    succeeded(&lower, &run(&lower));
    let args = ["audit", "export", "--key", "operators"];
    let trail = succeeded(&args, &scratch.run(&args));
    let lowered = trail
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "approvals_required")
        .unwrap();
    assert_eq!(lowered["require"], "none", "{lowered}");
    assert_eq!(lowered["actor"]["name"], "alice", "{lowered}");
    assert_eq!(lowered["channel"], "console", "{lowered}");
}

#[tokio::test]
async fn held_tools_and_the_audit_trail_are_reached_through_the_service_with_no_data_dir() {
    let (scratch, config, _) = demo_keys("", [("agent", "plan")]);
    pin_an_older_update_option(&scratch).await;
    let args = ["operator", "enroll", "--name", "alice", "--totp", "--json"];
    let enrolled = parsed(&args, &succeeded(&args, &scratch.run(&args)));
    let code = enrolled["recovery_codes"][0].as_str().unwrap().to_owned();
    let args = ["operator", "token", "--name", "alice"];
    let token = succeeded(&args, &scratch.run(&args)).trim().to_owned();
    let args = ["approvals", "require", "totp"];
    succeeded(&args, &scratch.run(&args));
    let service = serve_http(&scratch, &["--config", &config]);
    let server = format!("http://{}", service.addr);
    let run = |args: &[&str]| over(&server, &token, args);

    // The changed definition is held, as `tools list` shows it here.
    let list = ["tools", "list", "--json"];
    let mut held = Value::Null;
    for _ in 0..100 {
        let rows = parsed(&list, &succeeded(&list, &run(&list)));
        if let Some(row) = rows["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tool"] == "update_option" && r["status"] == "quarantined")
        {
            held = row.clone();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(held["reason"], "changed", "{held}");
    let hash = held["held_hash"].as_str().unwrap().to_owned();
    let table = ["tools", "list"];
    let said = succeeded(&table, &run(&table));
    assert!(said.contains("quarantined (changed)"), "{said}");

    let accept = ["tools", "accept", "site", "update_option", "--hash", &hash];
    wants_a_code(&run(&accept));
    let stale = [
        "tools",
        "accept",
        "site",
        "update_option",
        "--hash",
        "sha256:00",
        "--code",
        &code,
    ];
    let out = run(&stale);
    assert!(
        stderr(&out).contains("changed again since you looked"),
        "{}",
        stderr(&out)
    );
    // A stale look is refused before the code is spent: the same code
    // then accepts what the person saw.
    let accept = [&accept[..], &["--code", &code, "--json"]].concat();
    let decided = parsed(&accept, &succeeded(&accept, &run(&accept)));
    assert_eq!(decided["decision"], "accepted", "{decided}");
    assert_eq!(decided["definition_hash"], hash.as_str(), "{decided}");
    let again = ["tools", "accept", "site", "update_option"];
    let out = run(&again);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("is quarantined"), "{}", stderr(&out));

    // The audit trail: the same export, key and verdict as at the data dir.
    let public = ["audit", "public-key"];
    let here = succeeded(&public, &scratch.run(&public));
    assert_eq!(succeeded(&public, &run(&public)), here);
    let verify = ["audit", "verify"];
    let said = succeeded(&verify, &run(&verify));
    assert!(said.contains("verify: every link"), "{said}");
    let export = ["audit", "export", "--key", "tools"];
    let remote = succeeded(&export, &run(&export));
    assert_eq!(remote, succeeded(&export, &scratch.run(&export)));
    assert!(remote.contains("\"tool_accepted\""), "{remote}");
    let files = tempfile::tempdir().unwrap();
    let key_file = files.path().join("log.pub");
    let export_file = files.path().join("export.jsonl");
    std::fs::write(&key_file, &here).unwrap();
    let to_file = ["audit", "export", "--out", export_file.to_str().unwrap()];
    let said = succeeded(&to_file, &run(&to_file));
    assert!(said.contains("event(s) to"), "{said}");
    let offline = [
        "audit",
        "verify",
        "--public-key",
        key_file.to_str().unwrap(),
        export_file.to_str().unwrap(),
    ];
    succeeded(&offline, &elsewhere(&offline, None));
    let nobody = ["audit", "verify", "--key", "nobody"];
    let out = run(&nobody);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("no key named \"nobody\""),
        "{}",
        stderr(&out)
    );
}
