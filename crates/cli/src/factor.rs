//! The CLI's face of a factor for every yes (docs/design.md §12):
//! `--code` and `--operator` on every act that widens what runs (or a
//! prompt on a terminal), `plangate operator enroll|remove|factors` and
//! `plangate approvals require|show`. What is required, who is enrolled
//! and every code used live in the store's operators log; the rules are
//! in `plangate_gateway::operator::factor`.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;

use anyhow::{Result, anyhow};
use plangate_core::Channel;
use plangate_core::factor::Requirement;
use plangate_core::operators::OPERATORS_LOG;
use plangate_gateway::operator::factor::{self, Act, Confirmed, FactorError, OperatorsLog, Proof};
use serde_json::json;

use crate::args::FactorArgs;
use crate::commands::UsageError;
use crate::output::outln;
use crate::setup::{key_material, open_store};

/// The operators' log of `data_dir`'s store.
async fn operators(data_dir: &Path) -> Result<(OperatorsLog, plangate_store::KeyMaterial)> {
    let store = open_store(data_dir).await?;
    let material = key_material(data_dir)?;
    Ok((factor::operators_log(store, material.log_key()), material))
}

/// Confirms `act` for the person at the CLI: with `--code` (and
/// `--operator`) when given; when a factor is required and none was given,
/// asks for the code on a terminal; with no terminal, refuses
/// (`factor_required`), nothing recorded.
pub(crate) async fn confirm(
    data_dir: &Path,
    act: &Act<'_>,
    given: &FactorArgs,
) -> Result<Confirmed> {
    let (log, material) = operators(data_dir).await?;
    asking(&log, given, async |proof| {
        factor::confirm(&log, &material, act, proof, Channel::Cli).await
    })
    .await
}

impl FactorArgs {
    /// What the person gave on the command line.
    fn proof(&self) -> Proof<'_> {
        Proof {
            operator: self.operator.as_deref(),
            code: self.code.as_deref(),
            passkey: None,
        }
    }
}

/// Runs `attempt` with what was given; when it wants a code and none was
/// given, asks the person at the terminal (if there is one) and runs it
/// once more with their code.
async fn asking<T>(
    log: &OperatorsLog,
    given: &FactorArgs,
    attempt: impl AsyncFn(Proof<'_>) -> Result<T, FactorError>,
) -> Result<T> {
    match attempt(given.proof()).await {
        Err(FactorError::Required { .. }) if given.code.is_none() && can_ask() => {
            let code = ask_code(log, given.operator.as_deref()).await?;
            let proof = Proof {
                operator: given.operator.as_deref(),
                code: Some(&code),
                passkey: None,
            };
            attempt(proof).await.map_err(refused)
        }
        other => other.map_err(refused),
    }
}

/// Whether a person is at the terminal to type a code.
fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks on the terminal for the code of `operator` (or the only one).
async fn ask_code(log: &OperatorsLog, operator: Option<&str>) -> Result<String> {
    let state = log.state(OPERATORS_LOG).await?;
    let who = operator.map(str::to_owned).unwrap_or_else(|| {
        state
            .enrolled
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(" or ")
    });
    let mut err = std::io::stderr().lock();
    write!(
        err,
        "approvals require {}: code from {who}'s authenticator (or a recovery code): ",
        state.require
    )?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().to_owned())
}

/// A factor refusal as the CLI shows it: the message with its code.
fn refused(e: FactorError) -> anyhow::Error {
    let code = e.code();
    anyhow!("{e} [{}]", code.as_str())
}

/// `plangate operator enroll --name NAME --totp`: prints the
/// `otpauth://` URI (and the secret, to type in) and the recovery codes,
/// once.
pub(crate) async fn enroll(
    data_dir: &Path,
    name: &str,
    given: &FactorArgs,
    as_json: bool,
) -> Result<()> {
    let (log, material) = operators(data_dir).await?;
    let enrolment = factor::enroll(&log, &material, name, given.proof(), Channel::Cli)
        .await
        .map_err(refused)?;
    let state = log.state(OPERATORS_LOG).await?;
    if as_json {
        return crate::output::json(&json!({
            "operator": enrolment.operator,
            "otpauth_uri": enrolment.otpauth_uri,
            "secret_base32": enrolment.secret_base32,
            "recovery_codes": enrolment.recovery_codes,
            "approvals_require": state.require.as_str(),
        }));
    }
    outln!(
        "enrolled operator {name:?} with a TOTP factor. This is the only time the secret and the recovery codes are shown: store them now."
    );
    outln!();
    outln!("Add it to your authenticator app (scan or paste the URI, or type the secret):");
    if std::io::stdout().is_terminal() {
        print_qr(&enrolment.otpauth_uri);
    }
    outln!("  {}", enrolment.otpauth_uri);
    outln!("  secret: {}", enrolment.secret_base32);
    outln!();
    outln!("Recovery codes (each works once, in place of a code, if the authenticator is lost):");
    for code in &enrolment.recovery_codes {
        outln!("  {code}");
    }
    outln!();
    if state.require == Requirement::None {
        outln!(
            "Approvals do not require it yet. To require a code for every yes: plangate approvals require totp"
        );
    } else {
        outln!("Approvals require {}.", state.require);
    }
    Ok(())
}

/// `text` as a QR code drawn with block characters, light on dark as a
/// phone's camera reads it from a terminal.
fn print_qr(text: &str) {
    use qrcode::render::unicode::Dense1x2;
    let Ok(code) = qrcode::QrCode::new(text.as_bytes()) else {
        return;
    };
    let drawn = code
        .render::<Dense1x2>()
        .dark_color(Dense1x2::Light)
        .light_color(Dense1x2::Dark)
        .quiet_zone(true)
        .build();
    crate::output::lines(&drawn);
}

/// `plangate operator enroll --name NAME --passkey`: prints the one-time
/// link that registers a passkey for the operator in the console.
pub(crate) async fn invite_passkey(
    data_dir: &Path,
    name: &str,
    console: &str,
    given: &FactorArgs,
    as_json: bool,
) -> Result<()> {
    let (log, material) = operators(data_dir).await?;
    let secret = asking(&log, given, async |proof| {
        plangate_gateway::operator::factor::passkey::invite(
            &log,
            &material,
            name,
            proof,
            Channel::Cli,
        )
        .await
    })
    .await?;
    let link = format!(
        "{}/console/passkey#invite={secret}",
        console.trim_end_matches('/')
    );
    if as_json {
        return crate::output::json(&json!({"operator": name, "link": link}));
    }
    outln!(
        "Open this link in a browser on this machine within 15 minutes, once, to register a passkey for operator {name:?}:"
    );
    outln!("  {link}");
    outln!(
        "It must be the console's own address (`plangate serve --http` serves it), as localhost or a domain: browsers take passkeys there, not on an IP address."
    );
    outln!(
        "Then `plangate approvals require passkey` (or totp_or_passkey) makes every yes need it; in the console, \"Use a passkey\" proves an act."
    );
    Ok(())
}

/// `plangate operator remove NAME`.
pub(crate) async fn remove(
    data_dir: &Path,
    name: &str,
    given: &FactorArgs,
    as_json: bool,
) -> Result<()> {
    let (log, material) = operators(data_dir).await?;
    factor::remove(&log, &material, name, given.proof(), Channel::Cli)
        .await
        .map_err(refused)?;
    if as_json {
        return crate::output::json(&json!({"removed": name}));
    }
    outln!("removed operator {name:?} and its factors");
    Ok(())
}

/// `plangate approvals require none|totp|passkey|totp_or_passkey`.
pub(crate) async fn require(
    data_dir: &Path,
    to: &str,
    given: &FactorArgs,
    as_json: bool,
) -> Result<()> {
    let to = Requirement::parse(to).ok_or_else(|| {
        UsageError(format!(
            "{to:?} is not a requirement: give none, totp, passkey or totp_or_passkey"
        ))
    })?;
    let (log, material) = operators(data_dir).await?;
    let (from, to) = asking(&log, given, async |proof| {
        factor::require(&log, &material, to, proof, Channel::Cli).await
    })
    .await?;
    if as_json {
        return crate::output::json(&json!({"from": from.as_str(), "require": to.as_str()}));
    }
    outln!("approvals now require {to} (were {from}), recorded in plangate's store");
    Ok(())
}

/// `plangate approvals show`: what a yes needs and who is enrolled.
pub(crate) async fn show(data_dir: &Path, as_json: bool) -> Result<()> {
    let (log, _) = operators(data_dir).await?;
    let state = log.state(OPERATORS_LOG).await?;
    if as_json {
        let operators: Vec<_> = state
            .enrolled
            .iter()
            .map(|(name, e)| {
                json!({
                    "operator": name,
                    "totp": e.totp_sealed.is_some(),
                    "passkeys": e.passkeys.len(),
                    "recovery_codes_left": e.recovery.iter().filter(|(_, used)| !used).count(),
                    "enrolled_at": plangate_core::format_time_ms(e.enrolled_at_ms),
                })
            })
            .collect();
        return crate::output::json(&json!({
            "require": state.require.as_str(),
            "operators": operators,
        }));
    }
    outln!("approvals require: {}", state.require);
    if state.enrolled.is_empty() {
        outln!(
            "no operator is enrolled; `plangate operator enroll --name NAME --totp` enrolls one"
        );
    }
    for (name, e) in &state.enrolled {
        let mut factors = Vec::new();
        if e.totp_sealed.is_some() {
            factors.push(format!(
                "totp, {} of {} recovery codes left",
                e.recovery.iter().filter(|(_, used)| !used).count(),
                e.recovery.len()
            ));
        }
        if !e.passkeys.is_empty() {
            factors.push(format!("{} passkey(s)", e.passkeys.len()));
        }
        outln!(
            "  {name}: {}; enrolled {}",
            factors.join("; "),
            plangate_core::format_time_ms(e.enrolled_at_ms)
        );
    }
    Ok(())
}
