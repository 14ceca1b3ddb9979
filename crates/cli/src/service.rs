//! `plangate service install`: plangate as a service of its own OS user
//! (docs/security.md, "An agent with a shell"), so the data dir — the
//! keys, the log key, the sealed factor secrets — is out of reach of the
//! agent's user, who gets a `plan` key and `plangate connect` instead.
//!
//! On Linux it writes a systemd unit (`User=`, `StateDirectory=` — an
//! owner-only data dir systemd creates for that user — and the usual
//! hardening: `NoNewPrivileges`, `ProtectSystem=strict`, `ProtectHome`,
//! `PrivateTmp`); on macOS a LaunchDaemon with `UserName`. The service
//! runs `plangate serve --http` on loopback. `--dry-run` prints the unit
//! and every command it would run, and needs neither root nor the user.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow};

use crate::commands::UsageError;
use crate::output::outln;

/// What `service install` is asked for.
pub(crate) struct Install<'a> {
    /// The service's OS user (created when missing).
    pub(crate) user: &'a str,
    /// Where it listens (loopback).
    pub(crate) listen: &'a str,
    /// Print, do not do.
    pub(crate) dry_run: bool,
    /// Write and enable, but do not start (a machine without a running
    /// service manager).
    pub(crate) no_start: bool,
}

/// The files and commands of an install, worked out before anything is
/// done, so `--dry-run` shows exactly what a real run does.
pub(crate) struct Plan {
    /// The binary the service runs.
    pub(crate) binary: PathBuf,
    /// The data dir (owned by the service user, 0700).
    pub(crate) data_dir: PathBuf,
    /// The config the service reads.
    pub(crate) config: PathBuf,
    /// The unit or plist file, and its text.
    pub(crate) unit: (PathBuf, String),
    /// The commands, in order.
    pub(crate) commands: Vec<Vec<String>>,
}

/// The `ExecStart` of the unit: what the service runs, as that user.
pub(crate) fn exec_start(binary: &Path, config: &Path, listen: &str) -> Vec<String> {
    vec![
        binary.display().to_string(),
        "serve".into(),
        "--http".into(),
        listen.into(),
        "--config".into(),
        config.display().to_string(),
        // `plangate wrap --service` adds servers to the config: the
        // service takes them within a second, as on SIGHUP.
        "--watch-config".into(),
    ]
}

/// The config the service of `user` reads, where `service install` puts
/// it on this OS (and `wrap --service` looks for it).
pub(crate) fn config_path(user: &str) -> PathBuf {
    if cfg!(target_os = "macos") {
        PathBuf::from(format!("/usr/local/etc/{user}/plangate.toml"))
    } else {
        PathBuf::from(format!("/etc/{user}/plangate.toml"))
    }
}

/// Works out the install for this OS.
pub(crate) fn plan(install: &Install<'_>) -> Result<Plan> {
    if !is_user_name(install.user) {
        return Err(UsageError(format!(
            "--user {:?} is not a user name: lower-case letters, digits, `_` and `-`, starting with a letter or `_`, at most 32",
            install.user
        ))
        .into());
    }
    let listen: std::net::SocketAddr = install.listen.parse().map_err(|_| {
        UsageError(format!(
            "--listen {:?} is not an address: give 127.0.0.1:PORT",
            install.listen
        ))
    })?;
    if !listen.ip().is_loopback() {
        return Err(UsageError(format!(
            "--listen {listen}: the service listens on loopback only (put a TLS proxy in front to reach it from elsewhere)"
        ))
        .into());
    }
    let user = install.user;
    if cfg!(target_os = "macos") {
        Ok(launchd_plan(user, install.listen))
    } else {
        Ok(systemd_plan(user, install.listen, install.no_start))
    }
}

fn systemd_plan(user: &str, listen: &str, no_start: bool) -> Plan {
    let binary = PathBuf::from("/usr/local/bin/plangate");
    let data_dir = PathBuf::from(format!("/var/lib/{user}"));
    let config = config_path(user);
    let exec = exec_start(&binary, &config, listen).join(" ");
    let unit = format!(
        "[Unit]
Description=plangate, an MCP gateway with an enforced plan mode
Documentation=https://github.com/plangate/plangate
After=network-online.target

[Service]
Type=simple
User={user}
Group={user}
# systemd creates /var/lib/{user} owned by {user}, mode 0700: the keys,
# the log key and the sealed factor secrets live there, out of reach of
# every other user (the agent's too).
StateDirectory={user}
StateDirectoryMode=0700
ConfigurationDirectory={user}
ConfigurationDirectoryMode=0750
Environment=PLANGATE_DATA_DIR={data}
Environment=PLANGATE_SERVICE_USER={user}
ExecStart={exec}
ExecReload=/bin/kill -HUP $MAINPID
UMask=0077
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes
ReadWritePaths={data}
Restart=on-failure

[Install]
WantedBy=multi-user.target
",
        data = data_dir.display()
    );
    let unit_path = PathBuf::from(format!("/etc/systemd/system/{user}.service"));
    let mut commands = vec![
        args(&[
            "useradd",
            "--system",
            "--user-group",
            "--home-dir",
            &data_dir.display().to_string(),
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            user,
        ]),
        make_dir(&data_dir.display().to_string(), "0700", (user, Some(user))),
        make_dir(&format!("/etc/{user}"), "0750", ("root", Some(user))),
        args(&["systemctl", "daemon-reload"]),
    ];
    if no_start {
        commands.push(args(&["systemctl", "enable", &format!("{user}.service")]));
    } else {
        commands.push(args(&[
            "systemctl",
            "enable",
            "--now",
            &format!("{user}.service"),
        ]));
    }
    Plan {
        binary,
        data_dir,
        config,
        unit: (unit_path, unit),
        commands,
    }
}

fn launchd_plan(user: &str, listen: &str) -> Plan {
    let binary = PathBuf::from("/usr/local/bin/plangate");
    let data_dir = PathBuf::from(format!("/usr/local/var/{user}"));
    let config = config_path(user);
    let exec: String = exec_start(&binary, &config, listen)
        .iter()
        .map(|a| format!("    <string>{a}</string>\n"))
        .collect();
    let plist = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>dev.plangate</string>
  <key>UserName</key><string>{user}</string>
  <key>ProgramArguments</key>
  <array>
{exec}  </array>
  <key>EnvironmentVariables</key>
  <dict>
    <key>PLANGATE_DATA_DIR</key><string>{data}</string>
    <key>PLANGATE_SERVICE_USER</key><string>{user}</string>
  </dict>
  <key>Umask</key><integer>63</integer>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
</dict>
</plist>
"#,
        data = data_dir.display()
    );
    let commands = vec![
        args(&[
            "sysadminctl",
            "-addUser",
            user,
            "-home",
            &data_dir.display().to_string(),
            "-shell",
            "/usr/bin/false",
        ]),
        make_dir(&data_dir.display().to_string(), "0700", (user, None)),
        args(&[
            "launchctl",
            "bootstrap",
            "system",
            "/Library/LaunchDaemons/dev.plangate.plist",
        ]),
    ];
    Plan {
        binary,
        data_dir,
        config,
        unit: (
            PathBuf::from("/Library/LaunchDaemons/dev.plangate.plist"),
            plist,
        ),
        commands,
    }
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

/// `install -d`: directory `path` with permission bits `mode`, owned by
/// (user, group when given).
fn make_dir(path: &str, mode: &str, (owner, group): (&str, Option<&str>)) -> Vec<String> {
    let mut command = args(&["install", "-d", "-m", mode, "-o", owner]);
    if let Some(group) = group {
        command.extend(args(&["-g", group]));
    }
    command.push(path.to_owned());
    command
}

/// Whether `name` is a portable user name (`useradd`'s default rule).
fn is_user_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// The config a new service starts with: no upstream yet (`plangate wrap
/// --service` moves a client's servers in, or add `[upstreams.NAME]`
/// tables by hand).
const STARTER_CONFIG: &str =
    "# plangate, run as a service of its own user (plangate service install).
# Add the MCP servers it fronts as [upstreams.NAME] tables, or let
# `plangate wrap --service URL` move a client's servers here. Their
# secrets stay in this file, readable by the service user only.

[gateway]

# None yet: the service starts and serves no tools until one is added.
[upstreams]
";

/// `plangate service install`.
pub(crate) fn install(install: &Install<'_>) -> Result<()> {
    let plan = plan(install)?;
    let (unit_path, unit) = &plan.unit;
    if install.dry_run {
        outln!("# {} would be written:", unit_path.display());
        for line in unit.lines() {
            outln!("{line}");
        }
        outln!();
        outln!("# and, as root, these commands run:");
        outln!(
            "install -m 0755 {} {}",
            current_exe()?.display(),
            plan.binary.display()
        );
        outln!(
            "# {} (starter config, if missing; mode 0640, group {})",
            plan.config.display(),
            install.user
        );
        for command in &plan.commands {
            outln!("{}", shell_line(command));
        }
        outln!();
        outln!(
            "# the service's data dir is {} (owner {}, 0700); its MCP endpoint http://{}/mcp",
            plan.data_dir.display(),
            install.user,
            install.listen
        );
        return Ok(());
    }
    if !is_root() {
        return Err(UsageError(
            "service install creates a user and writes system files: run it as root (sudo), or see what it would do with --dry-run".to_owned(),
        )
        .into());
    }
    let user_exists = Command::new("id")
        .arg(install.user)
        .output()
        .is_ok_and(|o| o.status.success());
    copy_binary(&plan.binary)?;
    for command in &plan.commands {
        let adds_user = matches!(command[0].as_str(), "useradd" | "sysadminctl");
        if adds_user && user_exists {
            continue;
        }
        run(command)?;
    }
    if !plan.config.exists() {
        std::fs::write(&plan.config, STARTER_CONFIG)
            .with_context(|| format!("cannot write {}", plan.config.display()))?;
        run(&args(&[
            "chown",
            &format!("root:{}", install.user),
            &plan.config.display().to_string(),
        ]))?;
        run(&args(&[
            "chmod",
            "0640",
            &plan.config.display().to_string(),
        ]))?;
    }
    std::fs::write(unit_path, unit)
        .with_context(|| format!("cannot write {}", unit_path.display()))?;
    outln!(
        "installed: {} runs `{}` as user {}; data dir {} (owner-only)",
        unit_path.display(),
        exec_start(&plan.binary, &plan.config, install.listen).join(" "),
        install.user,
        plan.data_dir.display()
    );
    let as_service = format!(
        "sudo -u {user} plangate --data-dir {data}",
        user = install.user,
        data = plan.data_dir.display()
    );
    outln!("next, as the person (keep what these print from the agent):");
    outln!("  {as_service} operator token --name YOU          # your operator token");
    outln!(
        "  {as_service} operator enroll --name YOU --totp  # then: {as_service} approvals require totp"
    );
    outln!(
        "  sudo plangate wrap --service http://{listen} --from ~/.claude.json   # the client's servers move in; it gets a plan key",
        listen = install.listen
    );
    outln!(
        "  plangate plans show --key claude-code --server http://{listen}       # review; approve the same way, with your code",
        listen = install.listen
    );
    outln!(
        "every operator command (plans, mode, keys, tools, approvals, operator, audit) takes --server the same way"
    );
    Ok(())
}

/// Runs one command, failing with what it said.
fn run(command: &[String]) -> Result<()> {
    let out = Command::new(&command[0])
        .args(&command[1..])
        .output()
        .with_context(|| format!("cannot run {}", command[0]))?;
    if !out.status.success() {
        return Err(anyhow!(
            "`{}` failed ({}): {}",
            shell_line(command),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Copies this binary to where the service runs it (unless it is there).
fn copy_binary(to: &Path) -> Result<()> {
    let from = current_exe()?;
    if from == to {
        return Ok(());
    }
    run(&args(&[
        "install",
        "-m",
        "0755",
        &from.display().to_string(),
        &to.display().to_string(),
    ]))
}

fn current_exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find plangate's own executable")
}

/// Whether this process runs as root.
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A command as a person would type it.
fn shell_line(command: &[String]) -> String {
    command
        .iter()
        .map(|a| plangate_core::shell_word(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
