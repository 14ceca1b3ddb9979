//! plangate as a service of its own OS user, against an agent with a shell
//! in another user (docs/security.md, "An agent with a shell").
//!
//! `service install --dry-run` prints the unit; a CI container has no
//! systemd to run it, so the test does what the unit does — as root it
//! creates the service user and an owner-only data dir (`StateDirectory=`)
//! and runs the unit's `ExecStart` as that user — then plays the agent as
//! a second, unprivileged user: it cannot read the service's data dir, so
//! no `plangate` command of its own approves anything, while through
//! `plangate connect` it plans with its `plan` key. The person approves as
//! the service user with the authenticator's code; then the agent's apply
//! runs. Needs root (CI runs as root); users and files are removed after.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use rmcp::ServiceExt as _;
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use serde_json::{Value, json};

/// Whether this test may create users (root), else why not; under CI it
/// must.
fn as_root() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    assert!(
        root || std::env::var_os("CI").is_none(),
        "CI runs as root: the service test creates users"
    );
    root
}

/// An OS user made for the test, removed when dropped.
struct User(String);

impl User {
    fn create(prefix: &str) -> User {
        let name = format!("{prefix}{}", std::process::id() % 100_000);
        let _ = Command::new("userdel").arg(&name).output();
        let out = Command::new("useradd")
            .args(["--system", "--user-group", "--no-create-home", "--shell"])
            .args(["/usr/sbin/nologin", &name])
            .output()
            .unwrap();
        assert!(out.status.success(), "useradd {name}: {out:?}");
        User(name)
    }

    /// `plangate ARGS` run as this user, with `env`.
    fn plangate(&self, binary: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", &self.0, "--", "env"]);
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.arg(binary).args(args).current_dir("/");
        cmd
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = Command::new("pkill").args(["-u", &self.0]).output();
        let _ = Command::new("userdel").arg(&self.0).output();
    }
}

fn chown(path: &Path, user: &str) {
    let out = Command::new("chown")
        .args(["-R", &format!("{user}:{user}")])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn output(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The unit `service install --dry-run` prints for `user`.
fn dry_run_unit(user: &str) -> String {
    let out = Command::new(plangate())
        .args(["service", "install", "--dry-run", "--user", user])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// With the person's yes recorded, the agent's `apply_plan` at `digest`
/// runs its one step; then the agent leaves.
async fn the_agent_applies_its_one_step(agent: Client, digest: &str) {
    let receipt = call_body(
        &agent,
        "plangate_apply_plan",
        json!({"plan_digest": digest}),
    )
    .await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    agent.cancel().await.unwrap();
}

/// A plangate command run as the service's user: whether it succeeded, its
/// stdout and its stderr.
type AsService<'a> = dyn Fn(&[&str]) -> (bool, String, String) + 'a;

/// Enrols operator `ana` with TOTP and makes a code required for every
/// yes, through `as_service` (a plangate command as the service's user);
/// answers ana's TOTP secret.
fn ana_with_totp_required(as_service: &AsService<'_>) -> String {
    let (fine, enrolled, err) =
        as_service(&["operator", "enroll", "--name", "ana", "--totp", "--json"]);
    assert!(fine, "{err}");
    let secret = serde_json::from_str::<Value>(&enrolled).unwrap()["secret_base32"]
        .as_str()
        .unwrap()
        .to_owned();
    let (fine, _, err) = as_service(&["approvals", "require", "totp"]);
    assert!(fine, "{err}");
    secret
}

/// A service's user and an agent's user, created for the test (each
/// removed when dropped), or `None`, said, where users cannot be created
/// (not root).
fn service_and_agent(service: &str, agent: &str) -> Option<(User, User)> {
    if !as_root() {
        eprintln!("skipped: not root (CI runs it as root)");
        return None;
    }
    Some((User::create(service), User::create(agent)))
}

#[tokio::test]
async fn an_agent_in_another_user_cannot_approve_what_a_service_holds() {
    let Some((service, agent_user)) = service_and_agent("pgsvc", "pgagt") else {
        return;
    };
    let svc = service.0.as_str();

    the_unit_is_hardened(svc);

    let root = tempfile::Builder::new()
        .prefix("pgservice")
        .tempdir()
        .unwrap();
    let (binary, data, config) = lay_out(root.path(), svc);
    let data_s = data.to_str().unwrap();
    let env = [
        ("PLANGATE_DATA_DIR", data_s),
        ("PLANGATE_SERVICE_USER", svc),
    ];
    let as_service = |args: &[&str]| output(&mut service.plangate(&binary, args, &env));

    // The person, as the service user: a plan key for the agent, a factor.
    let (fine, key, err) = as_service(&[
        "keys", "create", "--name", "agent", "--scope", "plan", "--json",
    ]);
    assert!(fine, "{err}");
    let key: Value = serde_json::from_str(&key).unwrap();
    let token = key["token"].as_str().unwrap().to_owned();
    let secret = ana_with_totp_required(&as_service);
    let config_s = config.to_str().unwrap();
    let (_, checked, _) = as_service(&["config", "check", "--config", config_s, "--json"]);
    let checked: Value = serde_json::from_str(&checked).unwrap();
    assert_eq!(checked["enforcement"]["level"], "enforced", "{checked}");

    // The unit's ExecStart, as the service user.
    let mut serve = service.plangate(
        &binary,
        &["serve", "--http", "127.0.0.1:0", "--config", config_s],
        &env,
    );
    serve.env_remove("PLANGATE_KEY");
    let server = Proc::start(serve, "plangate serving ");
    assert!(
        server.log().contains(&format!(
            "enforced: service user {svc}, approvals need totp"
        )),
        "{}",
        server.log()
    );
    let url = server.url();

    // The agent's user plans through `plangate connect` with its key…
    let agent = connect_as(&agent_user, &binary, &url, &token).await;
    let planned = ok(&agent, "update_option", tagline("From the agent's user")).await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    let digest = plan_digest(&agent).await;

    // …and nothing it can run approves: the data dir is not its to read.
    let agent_env = [("PLANGATE_DATA_DIR", data_s)];
    for args in [
        vec![
            "plans",
            "approve",
            "--key",
            "agent",
            "--digest",
            digest.as_str(),
        ],
        vec!["plans", "list"],
        vec!["audit", "export"],
    ] {
        let (fine, _, err) = output(&mut agent_user.plangate(&binary, &args, &agent_env));
        assert!(!fine, "{args:?} ran as the agent's user");
        assert!(
            err.contains("ermission denied") || err.contains("owned by"),
            "{args:?}: {err}"
        );
    }
    apply_refused(&agent, &digest).await;

    // The person approves as the service user, with the code; the agent's
    // apply then runs.
    let code = code_now(&secret);
    let (fine, _, err) = as_service(&[
        "plans", "approve", "--key", "agent", "--digest", &digest, "--code", &code,
    ]);
    assert!(fine, "{err}");
    the_agent_applies_its_one_step(agent, &digest).await;
    drop(server);
}

/// What `service install --dry-run` prints for `svc`: the hardened unit
/// and the commands.
fn the_unit_is_hardened(svc: &str) {
    let unit = dry_run_unit(svc);
    for line in [
        format!("User={svc}"),
        format!("StateDirectory={svc}"),
        "StateDirectoryMode=0700".to_owned(),
        "NoNewPrivileges=yes".to_owned(),
        "ProtectSystem=strict".to_owned(),
        "ProtectHome=yes".to_owned(),
        format!("Environment=PLANGATE_SERVICE_USER={svc}"),
        "ExecStart=/usr/local/bin/plangate serve --http 127.0.0.1:7070".to_owned(),
    ] {
        assert!(unit.contains(&line), "{line} not in the unit:\n{unit}");
    }
    assert!(unit.contains("useradd --system"), "{unit}");
}

/// What the unit sets up, done by hand under `root`: the binary and the
/// config where the service user reads them, and an owner-only data dir
/// of that user (`StateDirectory=`).
fn lay_out(root: &Path, svc: &str) -> (PathBuf, PathBuf, PathBuf) {
    set_mode(root, 0o755);
    let binary = root.join("plangate");
    std::fs::copy(plangate(), &binary).unwrap();
    set_mode(&binary, 0o755);
    let data: PathBuf = root.join("state");
    std::fs::create_dir(&data).unwrap();
    chown(&data, svc);
    set_mode(&data, 0o700);
    let config = root.join("plangate.toml");
    std::fs::write(
        &config,
        plangate_upstream(
            "site",
            &[
                "demo-site",
                "--state",
                data.join("demo-site.json").to_str().unwrap(),
            ],
        )
        .replace(
            &plangate().display().to_string(),
            &binary.display().to_string(),
        ),
    )
    .unwrap();
    set_mode(&config, 0o644);
    (binary, data, config)
}

/// An rmcp client that runs `plangate connect --url URL` as `user` with
/// `token` — the agent's client in the agent's user.
async fn connect_as(user: &User, binary: &Path, url: &str, token: &str) -> Client {
    let (user, binary, url, token) = (
        user.0.clone(),
        binary.to_owned(),
        url.to_owned(),
        token.to_owned(),
    );
    let cmd = tokio::process::Command::new("runuser").configure(move |c| {
        c.args(["-u", &user, "--", "env"])
            .arg(format!("PLANGATE_KEY={token}"))
            .arg(&binary)
            .args(["connect", "--url", &url])
            .current_dir("/");
    });
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    client_info().serve(transport).await.unwrap()
}

/// `wrap --service`, as the person runs it with sudo: the client's servers
/// (and their secrets) move into the service's config, which stays
/// `root:SERVICE 0640`; the client's file keeps its owner and gets an
/// entry that runs `plangate connect` with a `plan` key the service made;
/// the agent's user cannot read where the secrets went, plans through the
/// entry, and the person approves through `plans approve --server` with a
/// code, from no data dir.
#[tokio::test]
async fn wrap_service_moves_a_clients_servers_where_the_agents_user_cannot_read_them() {
    let Some((service, agent_user)) = service_and_agent("pgwsv", "pgwag") else {
        return;
    };
    let svc = service.0.as_str();
    let root = tempfile::Builder::new().prefix("pgwrap").tempdir().unwrap();
    let (binary, data, config) = lay_out(root.path(), svc);
    starter_config(&config, svc);
    let (data_s, config_s) = (data.to_str().unwrap(), config.to_str().unwrap());
    let env = [
        ("PLANGATE_DATA_DIR", data_s),
        ("PLANGATE_SERVICE_USER", svc),
    ];
    let as_service = |args: &[&str]| output(&mut service.plangate(&binary, args, &env));
    let (fine, operator_token, err) = as_service(&["operator", "token", "--name", "ana"]);
    assert!(fine, "{err}");
    let operator_token = operator_token.trim().to_owned();
    let secret = ana_with_totp_required(&as_service);
    let mut serve = service.plangate(&binary, &exec_start_args(config_s), &env);
    serve.env_remove("PLANGATE_KEY");
    let server = Proc::start(serve, "plangate serving ");
    let base = format!("http://{}", server.addr);

    let file = client_file(root.path(), &binary, &data, &agent_user);

    // The person, with sudo.
    let person_data = root.path().join("root-data");
    let wrapped = Command::new(&binary)
        .arg("--data-dir")
        .arg(&person_data)
        .args([
            "wrap",
            "--service",
            &base,
            "--service-config",
            config_s,
            "--from",
        ])
        .arg(&file)
        .env("PLANGATE_OPERATOR_TOKEN", &operator_token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(wrapped.status.success(), "{wrapped:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains("s3cret"),
        "the secret stayed in the client's file: {text}"
    );
    assert!(
        text.contains("connect") && text.contains(&format!("{base}/mcp")),
        "{text}"
    );
    let moved = std::fs::read_to_string(&config).unwrap();
    assert!(
        moved.contains("s3cret-of-the-site") && moved.contains("[upstreams.site]"),
        "{moved}"
    );
    owners_kept(&file, &config, &agent_user);
    // The agent's user cannot read where the secret went.
    let (fine, _, _) =
        output(Command::new("runuser").args(["-u", &agent_user.0, "--", "cat", config_s]));
    assert!(!fine, "the agent's user read the service's config");

    // The client's entry, as the client runs it, in the agent's user.
    let entry: Value = serde_json::from_str(&text).unwrap();
    let entry = &entry["mcpServers"]["plangate"];
    let key = entry["env"]["PLANGATE_KEY"].as_str().unwrap().to_owned();
    let mcp_url = format!("{base}/mcp");
    let agent = once_served(&agent_user, &binary, (&mcp_url, &key), &server).await;
    let planned = ok(&agent, "update_option", tagline("Moved and planned")).await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    let digest = plan_digest(&agent).await;

    // The person approves over the operator API, with the code.
    let code = code_now(&secret);
    let approved = Command::new(&binary)
        .args([
            "plans",
            "approve",
            "--key",
            "claude-desktop",
            "--digest",
            &digest,
        ])
        .args(["--code", &code, "--server", &base])
        .env("PLANGATE_OPERATOR_TOKEN", &operator_token)
        .env("PLANGATE_DATA_DIR", root.path().join("nowhere"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(approved.status.success(), "{approved:?}");
    the_agent_applies_its_one_step(agent, &digest).await;
    drop(server);
}

/// The unit's `ExecStart` arguments after the binary, on a free port.
fn exec_start_args(config: &str) -> Vec<&str> {
    vec![
        "serve",
        "--http",
        "127.0.0.1:0",
        "--config",
        config,
        "--watch-config",
    ]
}

/// The starter config `service install` writes (no upstream yet), owned
/// `root:SVC`, 0640.
fn starter_config(config: &Path, svc: &str) {
    std::fs::write(config, "[gateway]\n\n[upstreams]\n").unwrap();
    let out = Command::new("chown")
        .arg(format!("root:{svc}"))
        .arg(config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    set_mode(config, 0o640);
}

/// The agent's user's Claude Desktop file, owner-only, with one server
/// (the demo site, under a name of its own: a client's server that is
/// plangate itself is not wrapped) and its secret.
fn client_file(root: &Path, binary: &Path, data: &Path, agent_user: &User) -> PathBuf {
    let home = root.join("agent-home");
    std::fs::create_dir(&home).unwrap();
    chown(&home, &agent_user.0);
    let file = home.join("claude_desktop_config.json");
    let site = root.join("site-server");
    std::fs::copy(binary, &site).unwrap();
    set_mode(&site, 0o755);
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&json!({"mcpServers": {"site": {
            "command": site,
            "args": ["demo-site", "--state", data.join("demo-site.json")],
            "env": {"SITE_API_TOKEN": "s3cret-of-the-site"}
        }}}))
        .unwrap(),
    )
    .unwrap();
    chown(&file, &agent_user.0);
    set_mode(&file, 0o600);
    file
}

/// The client's file still belongs to the agent's user; the service's
/// config is still root's, 0640.
fn owners_kept(file: &Path, config: &Path, agent_user: &User) {
    use std::os::unix::fs::MetadataExt as _;
    let owner = Command::new("id")
        .args(["-u", &agent_user.0])
        .output()
        .unwrap();
    let uid: u32 = String::from_utf8_lossy(&owner.stdout)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        std::fs::metadata(file).unwrap().uid(),
        uid,
        "the client's file changed owner"
    );
    let service_config = std::fs::metadata(config).unwrap();
    assert_eq!(service_config.uid(), 0);
    assert_eq!(service_config.mode() & 0o777, 0o640);
}

/// The agent's client through `connect`, once the service serves the
/// moved servers' tools (it reloads its config within a second).
async fn once_served(
    user: &User,
    binary: &Path,
    (url, key): (&str, &str),
    server: &Proc,
) -> Client {
    for _ in 0..50 {
        let agent = connect_as(user, binary, url, key).await;
        if tool_names(&agent)
            .await
            .contains(&"update_option".to_owned())
        {
            return agent;
        }
        agent.cancel().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!(
        "the service never took the moved servers:\n{}",
        server.log()
    );
}
