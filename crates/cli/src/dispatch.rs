//! Command dispatch: each parsed command handed, with the store and config
//! it needs ([`crate::setup`]), to the module that does it. Apart from
//! `main`, which only starts the runtime and turns the outcome into an
//! exit code.

use std::path::Path;

use anyhow::{Context, Result};

use crate::args::{
    ApprovalsCommand, AuditCommand, Cli, Command, ConfigCommand, ConfigSourceArgs, Held,
    KeysCommand, ModeCommand, OperatorCommand, PlanApply, PlanYes, PlansCommand, PolicyCommand,
    ServiceCommand, ToolsCommand, UpstreamCommand, WrapTarget,
};
use crate::setup::{
    builtin_modes, config_to_call, key_material, load_config, log_key, open_store, to_call,
    use_database, vault_of,
};
use crate::{
    audit, audit_verify, catalog, chain_text, commands, demo, factor, output, plans, policy, tools,
    upstream,
};
use crate::{connect, serve, service, wrap};
use plangate_gateway::operator::factor::Act;

/// Runs the command `cli` names.
pub(crate) async fn run(cli: Cli) -> Result<()> {
    use_database(cli.database.clone());
    let data_dir = cli
        .data_dir
        .clone()
        .unwrap_or_else(plangate_store::default_data_dir);
    let data_dir = data_dir.as_path();
    match cli.command {
        Command::Serve(args) => serve::serve(args, data_dir).await,
        Command::Console(args) => serve::console(args, data_dir).await,
        Command::Connect { url } => connect::run(&url).await,
        Command::Service(ServiceCommand::Install {
            user,
            listen,
            dry_run,
            no_start,
        }) => service::install(&service::Install {
            user: &user,
            listen: &listen,
            dry_run,
            no_start,
        }),
        Command::Keys(cmd) => keys_command(cmd, data_dir).await,
        Command::Operator(cmd) => operator_command(cmd, data_dir).await,
        Command::Approvals(cmd) => approvals_command(cmd, data_dir).await,
        Command::Config(ConfigCommand::Check { source, json }) => {
            config_check(&source, data_dir, json).await
        }
        Command::Tools(cmd) => tools_command(cmd, data_dir).await,
        Command::Upstream(cmd) => upstream_command(cmd, data_dir).await,
        Command::Policy(PolicyCommand::Test {
            source,
            key,
            tool,
            arguments,
            effect,
            json,
            remote,
        }) => {
            let test = policy::Test {
                key: &key,
                tool: &tool,
                arguments: &arguments,
                effect: effect.as_deref(),
            };
            if let Some(url) = &remote.server {
                return policy::test_remote(url, test, json).await;
            }
            let (config, store, material) = to_call(&source, data_dir).await?;
            policy::test(config, store, material, test, json).await
        }
        Command::DemoSite(args) => serve::demo_site(args).await,
        Command::Wrap {
            target,
            scope,
            key_name,
            to,
            service,
            service_config,
            dry_run,
        } => {
            let args = wrap::Wrap {
                target: wrap_target(target),
                scope: scope.into(),
                key_name,
                to,
                dry_run,
                service,
                service_config,
            };
            wrap::wrap(args, data_dir, async || open_store(data_dir).await).await
        }
        Command::Unwrap {
            target,
            force,
            keep_key,
        } => wrap::unwrap(wrap_target(target), (force, keep_key), data_dir).await,
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "plangate", &mut out);
            output::write_all(&out)
        }
        Command::Man { dir } => man(dir.as_deref()),
        Command::CountingUpstream { log } => plangate_demo_site::counting::serve_stdio(log).await,
        Command::Mode(cmd) => mode_command(cmd, data_dir).await,
        Command::Plans(cmd) => plans_command(cmd, data_dir).await,
        Command::Audit(cmd) => audit_command(cmd, data_dir).await,
        Command::Notify(cmd) => crate::notify::run(cmd, data_dir).await,
        Command::Demo { json } => demo::run(json).await,
        Command::Catalog { source, json, html } => {
            let config = load_config(&source, data_dir)?;
            let format = match (json, html) {
                (true, _) => catalog::Format::Json,
                (_, true) => catalog::Format::Html,
                _ => catalog::Format::Table,
            };
            catalog::run(&config, format)
        }
    }
}

/// `plangate approvals require|show`.
async fn approvals_command(cmd: ApprovalsCommand, data_dir: &Path) -> Result<()> {
    let (ApprovalsCommand::Require { remote, .. } | ApprovalsCommand::Show { remote, .. }) = &cmd;
    if let Some(url) = remote.server.clone() {
        return crate::remote_admin::approvals(&url, cmd).await;
    }
    match cmd {
        ApprovalsCommand::Require {
            requirement,
            json,
            factor,
            ..
        } => factor::require(data_dir, &requirement, &factor, json).await,
        ApprovalsCommand::Show { json, .. } => factor::show(data_dir, json).await,
    }
}

/// `plangate audit …`: export, verify, public-key.
async fn audit_command(cmd: AuditCommand, data_dir: &Path) -> Result<()> {
    let server = match &cmd {
        // An export's file is checked here, whatever PLANGATE_SERVER says.
        AuditCommand::Verify {
            public_key: Some(_),
            ..
        } => None,
        AuditCommand::Export { remote, .. }
        | AuditCommand::Verify { remote, .. }
        | AuditCommand::PublicKey { remote, .. } => remote.server.clone(),
    };
    if let Some(url) = server {
        return crate::remote_admin::audit(&url, cmd).await;
    }
    match cmd {
        AuditCommand::Export {
            key,
            since,
            out,
            json,
            ..
        } => {
            let store = open_store(data_dir).await?;
            audit::export(&*store, key.as_deref(), since, out.as_deref(), json).await
        }
        AuditCommand::Verify {
            key,
            public_key,
            export,
            json,
            ..
        } => match (public_key, export) {
            (Some(public_key), Some(export)) => {
                audit_verify::verify_export(&public_key, &export, json)
            }
            _ => {
                let store = open_store(data_dir).await?;
                let public = log_key(data_dir)?.public();
                audit_verify::verify_store(&*store, public, key.as_deref(), json).await
            }
        },
        AuditCommand::PublicKey { json, .. } => {
            audit_verify::public_key(log_key(data_dir)?.public(), json)
        }
    }
}

/// The client file `wrap` and `unwrap` work on, as the flags name it.
fn wrap_target(target: WrapTarget) -> wrap::Target {
    wrap::Target {
        from: target.from,
        client: target.client,
        project: target.project,
    }
}

async fn keys_command(cmd: KeysCommand, data_dir: &Path) -> Result<()> {
    let server = match &cmd {
        KeysCommand::Create { remote, .. }
        | KeysCommand::List { remote, .. }
        | KeysCommand::Revoke { remote, .. } => remote.server.clone(),
    };
    if let Some(url) = server {
        return crate::remote_keys::keys_remote(&url, cmd).await;
    }
    let store = open_store(data_dir).await?;
    match cmd {
        KeysCommand::Create {
            name,
            scope,
            json,
            factor,
            ..
        } => {
            let scope: plangate_core::Scope = scope.into();
            if scope == plangate_core::Scope::Write {
                factor::confirm(data_dir, &Act::CreateWriteKey { name: &name }, &factor).await?;
            }
            commands::keys_create(&*store, &name, scope, json).await
        }
        KeysCommand::List { json, .. } => commands::keys_list(&*store, json).await,
        KeysCommand::Revoke { key, json, .. } => commands::keys_revoke(&*store, &key, json).await,
    }
}

async fn operator_command(cmd: OperatorCommand, data_dir: &Path) -> Result<()> {
    let (OperatorCommand::Token { remote, .. }
    | OperatorCommand::List { remote, .. }
    | OperatorCommand::Revoke { remote, .. }
    | OperatorCommand::Enroll { remote, .. }
    | OperatorCommand::Remove { remote, .. }) = &cmd;
    if let Some(url) = remote.server.clone() {
        return crate::remote_admin::operator(&url, cmd).await;
    }
    let store = open_store(data_dir).await?;
    match cmd {
        OperatorCommand::Token {
            name, json, factor, ..
        } => {
            factor::confirm(data_dir, &Act::IssueOperatorToken { name: &name }, &factor).await?;
            commands::operator_token(&*store, &name, json).await
        }
        OperatorCommand::Enroll {
            name,
            passkey: true,
            console,
            json,
            factor,
            ..
        } => {
            let console = console.as_deref().unwrap_or("http://localhost:7070");
            factor::invite_passkey(data_dir, &name, console, &factor, json).await
        }
        OperatorCommand::Enroll {
            name, json, factor, ..
        } => factor::enroll(data_dir, &name, &factor, json).await,
        OperatorCommand::Remove {
            name, json, factor, ..
        } => factor::remove(data_dir, &name, &factor, json).await,
        OperatorCommand::List { json, .. } => commands::operator_list(&*store, json).await,
        OperatorCommand::Revoke { operator, json, .. } => {
            commands::operator_revoke(&*store, &operator, json).await
        }
    }
}

/// `plangate config check`.
async fn config_check(source: &ConfigSourceArgs, data_dir: &Path, json: bool) -> Result<()> {
    let config = config_to_call(source, data_dir).await?;
    // The pins, when the store can be read, so changed definitions
    // are flagged; config check works without a store too.
    let opened = match crate::setup::store_exists(data_dir) {
        true => open_store(data_dir).await.ok(),
        false => None,
    };
    let (pins, vault) = match opened {
        Some(store) => match key_material(data_dir) {
            Ok(material) => {
                let pins =
                    plangate_gateway::key_log::KeyLog::<plangate_core::ToolPins>::with_capacity(
                        store.clone(),
                        material.log_key(),
                        1,
                    )
                    .state(plangate_core::TOOLS_LOG)
                    .await
                    .ok();
                let vault = plangate_gateway::upstream::oauth::Vault { store, material };
                (pins, Some(vault))
            }
            Err(_) => (None, None),
        },
        None => (None, None),
    };
    let enforcement = crate::enforcement::read(data_dir).await;
    crate::config_check::run(config, (pins, enforcement), vault, json).await
}

async fn upstream_command(cmd: UpstreamCommand, data_dir: &Path) -> Result<()> {
    match cmd {
        UpstreamCommand::ClientMetadata { url } => upstream::client_metadata(&url),
        UpstreamCommand::Login {
            source,
            name,
            timeout,
            scopes,
        } => {
            let config = load_config(&source, data_dir)?;
            let vault = vault_of(data_dir).await?;
            upstream::login(&config, &name, vault, timeout, &scopes).await
        }
        UpstreamCommand::Logout { source, name } => {
            let config = load_config(&source, data_dir)?;
            let vault = vault_of(data_dir).await?;
            upstream::logout(&config, &name, vault).await
        }
    }
}

/// `plangate man [--dir DIR]`: the manual pages, into DIR or to stdout.
fn man(dir: Option<&Path>) -> Result<()> {
    use clap::CommandFactory as _;
    let command = Cli::command();
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write pages into {}", dir.display()))?;
            eprintln!("wrote the manual pages into {}", dir.display());
            Ok(())
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(command).render(&mut out)?;
            output::write_all(&out)
        }
    }
}

async fn mode_command(cmd: ModeCommand, data_dir: &Path) -> Result<()> {
    let ModeCommand::Set {
        source,
        remote,
        key,
        mode,
        lock,
        unlock,
        json,
        factor,
    } = cmd;
    if let Some(url) = &remote.server {
        let change = (lock, unlock);
        return crate::plans::remote_mode(url, &key, mode.as_deref(), change, &factor, json).await;
    }
    // `plan` and `default` are always defined: setting them needs
    // no upstream config, so a broken or absent one cannot keep an
    // operator from locking an agent down.
    let config = match load_config(&source, data_dir) {
        Ok(config) => config,
        Err(e)
            if mode.as_deref().is_none_or(|m| {
                m == plangate_core::PLAN_MODE || m == plangate_core::DEFAULT_MODE
            }) =>
        {
            eprintln!(
                "note: the config was not loaded ({}); `plan` and `default` need none",
                chain_text(&e)
            );
            builtin_modes()
        }
        Err(e) => return Err(e),
    };
    let store = open_store(data_dir).await?;
    let change = match (lock, unlock) {
        (true, _) => plangate_gateway::operator::LockChange::Lock,
        (_, true) => plangate_gateway::operator::LockChange::Unlock,
        _ => plangate_gateway::operator::LockChange::Keep,
    };
    let yes = if unlock {
        Some(factor::confirm(data_dir, &Act::Unlock { key: &key }, &factor).await?)
    } else {
        None
    };
    let log_key = log_key(data_dir)?;
    let set = |yes| {
        commands::mode_set(
            &config,
            (store.clone(), log_key.clone()),
            &key,
            mode.as_deref(),
            (change, yes),
            json,
        )
    };
    match set(yes.as_ref()).await {
        // A locked key moved out of plan mode: the person's yes first.
        Err(e)
            if yes.is_none()
                && e.downcast_ref::<plangate_gateway::operator::OperatorError>()
                    .is_some_and(|e| {
                        matches!(
                            e,
                            plangate_gateway::operator::OperatorError::Factor(
                                plangate_gateway::operator::factor::FactorError::Unconfirmed(_)
                            )
                        )
                    }) =>
        {
            let act = Act::Relock {
                key: &key,
                mode: mode.as_deref().unwrap_or_default(),
            };
            let yes = factor::confirm(data_dir, &act, &factor).await?;
            set(Some(&yes)).await
        }
        other => other,
    }
}
/// `plangate tools list|accept|reject`.
async fn tools_command(cmd: ToolsCommand, data_dir: &Path) -> Result<()> {
    use plangate_gateway::tool_pins::Decision;
    let (ToolsCommand::List { remote, .. }
    | ToolsCommand::Accept { remote, .. }
    | ToolsCommand::Reject { remote, .. }) = &cmd;
    if let Some(url) = remote.server.clone() {
        return crate::remote_admin::tools(&url, cmd).await;
    }
    let (source, held, decision, json) = match cmd {
        ToolsCommand::List { source, json, .. } => {
            let config = load_config(&source, data_dir)?;
            let store = open_store(data_dir).await?;
            return tools::list(&config, store, log_key(data_dir)?, json).await;
        }
        ToolsCommand::Accept {
            source,
            held,
            allow_downgrade,
            json,
            factor,
            ..
        } => {
            let (store, key) = (open_store(data_dir).await?, log_key(data_dir)?);
            let named = (held.upstream.as_str(), held.tool.as_str());
            tools::held_as_seen(store, key, named, held.hash.as_deref()).await?;
            let act = Act::AcceptTool {
                server: &held.upstream,
                tool: &held.tool,
            };
            let yes = factor::confirm(data_dir, &act, &factor).await?;
            let decision = (Decision::Accept { allow_downgrade }, Some(yes));
            (source, held, decision, json)
        }
        ToolsCommand::Reject {
            source, held, json, ..
        } => (source, held, (Decision::Reject, None), json),
    };
    let Held {
        upstream,
        tool,
        hash,
    } = held;
    let config = load_config(&source, data_dir)?;
    let store = open_store(data_dir).await?;
    tools::decide(
        &config,
        store,
        log_key(data_dir)?,
        (&upstream, &tool),
        hash.as_deref(),
        (decision.0, decision.1.as_ref()),
        json,
    )
    .await
}

/// `plangate plans …`.
async fn plans_command(cmd: PlansCommand, data_dir: &Path) -> Result<()> {
    if let Some(server) = cmd.server() {
        let server = server.to_owned();
        return plans::remote(&server, cmd).await;
    }
    match cmd {
        PlansCommand::List { source, json, .. } => {
            let config = load_config(&source, data_dir)?;
            let store = open_store(data_dir).await?;
            plans::list(&config, (store, log_key(data_dir)?), json).await
        }
        PlansCommand::Show {
            source, key, json, ..
        } => {
            let config = load_config(&source, data_dir)?;
            let store = open_store(data_dir).await?;
            plans::show(&config, store, log_key(data_dir)?, &key, json).await
        }
        PlansCommand::Reject(no) => {
            let store = open_store(data_dir).await?;
            plans::reject(
                store,
                log_key(data_dir)?,
                &no.key,
                &no.step,
                &no.reason,
                no.json,
            )
            .await
        }
        PlansCommand::Amend {
            source,
            key,
            step,
            arguments,
            revision,
            json,
        } => {
            let (config, store, material) = to_call(&source, data_dir).await?;
            let change = plans::Amendment {
                step: &step,
                arguments: &arguments,
                seen_revision: revision,
            };
            plans::amend(config, store, material, &key, change, json).await
        }
        PlansCommand::Diff { key, since, json } => {
            plans::diff(open_store(data_dir).await?, &key, since, json).await
        }
        PlansCommand::Discard {
            source,
            key,
            steps,
            json,
            ..
        } => {
            let config = load_config(&source, data_dir)?;
            let store = open_store(data_dir).await?;
            plans::discard(&config, store, log_key(data_dir)?, &key, &steps, json).await
        }
        PlansCommand::Retry {
            source,
            key,
            step,
            json,
            factor,
            ..
        } => {
            let (config, store, material) = to_call(&source, data_dir).await?;
            let confirming = plans::Confirming {
                data_dir,
                factor: &factor,
            };
            plans::retry(config, (store, material), confirming, &key, &step, json).await
        }
        PlansCommand::Revert {
            source,
            key,
            steps,
            json,
            ..
        } => revert(&source, (&key, &steps), json, data_dir).await,
        PlansCommand::Approve(yes) => approve(yes, data_dir).await,
        PlansCommand::Apply(PlanApply {
            yes:
                PlanYes {
                    source,
                    key,
                    digest,
                    steps,
                    json,
                    factor,
                    ..
                },
            partial,
            go_on,
        }) => {
            let (config, store, material) = to_call(&source, data_dir).await?;
            plans::apply_cmd(
                config,
                (store, material),
                plans::Confirming {
                    data_dir,
                    factor: &factor,
                },
                &key,
                (digest.as_deref(), &steps, (partial, go_on)),
                json,
            )
            .await
        }
    }
}

/// `plangate plans approve`. It needs only the store: the config says
/// whose yes counts for the key (a lock it sets) for what is left waiting
/// afterwards, and when it does not load the built-in modes stand in.
async fn approve(yes: PlanYes, data_dir: &Path) -> Result<()> {
    let PlanYes {
        source,
        key,
        digest,
        steps,
        json,
        factor,
        ..
    } = yes;
    let config = load_config(&source, data_dir).unwrap_or_else(|e| {
        eprintln!(
            "note: the config was not loaded ({}); what is left waiting for a yes is counted without its [gateway] default_mode_locked",
            chain_text(&e)
        );
        builtin_modes()
    });
    let store = open_store(data_dir).await?;
    let approver = std::env::var("PLANGATE_KEY").ok().filter(|t| !t.is_empty());
    plans::approve(
        &config,
        (store, log_key(data_dir)?),
        plans::Confirming {
            data_dir,
            factor: &factor,
        },
        &key,
        (digest.as_deref(), &steps),
        approver.as_deref(),
        json,
    )
    .await
}

/// `plans revert` at the data dir.
async fn revert(
    source: &ConfigSourceArgs,
    (key, steps): (&str, &[String]),
    json: bool,
    data_dir: &Path,
) -> Result<()> {
    let config = config_to_call(source, data_dir).await?;
    let store = open_store(data_dir).await?;
    let material = key_material(data_dir)?;
    plans::revert(config, (store, material), key, steps, json).await
}
