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
use plangate_gateway::operator::factor::view::{ApprovalsView, RequireAnswer, approvals_view};
use plangate_gateway::operator::factor::{
    self, Act, Confirmed, Enrolment, FactorError, OperatorsLog, Proof,
};
use plangate_store::KeyMaterial;
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

/// Enrols operator `name` at the data dir with `enrol` (a TOTP factor,
/// or a passkey invitation), asking for a code at the terminal as
/// [`asking`] does; answers what it made, and the operators' log.
async fn enrolling<T>(
    data_dir: &Path,
    name: &str,
    given: &FactorArgs,
    enrol: impl AsyncFn(&OperatorsLog, &KeyMaterial, factor::Enrolling<'_>) -> Result<T, FactorError>,
) -> Result<(T, OperatorsLog)> {
    let (log, material) = operators(data_dir).await?;
    let made = asking(&log, given, async |proof| {
        let who = factor::Enrolling {
            name,
            proof,
            channel: Channel::Cli,
        };
        enrol(&log, &material, who).await
    })
    .await?;
    Ok((made, log))
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
    let (enrolment, log) = enrolling(data_dir, name, given, factor::enroll).await?;
    let state = log.state(OPERATORS_LOG).await?;
    print_enrolment(&enrolment, state.require, as_json)
}

/// Prints what enrolment hands the person, once (the QR code on a
/// terminal), and what a yes requires now.
pub(crate) fn print_enrolment(
    enrolment: &Enrolment,
    require: Requirement,
    as_json: bool,
) -> Result<()> {
    if as_json {
        /// The enrolment, and what a yes requires now.
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            #[serde(flatten)]
            enrolment: &'a Enrolment,
            approvals_require: &'static str,
        }
        return crate::output::json(&Shown {
            enrolment,
            approvals_require: require.as_str(),
        });
    }
    let name = &enrolment.operator;
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
    if require == Requirement::None {
        outln!(
            "Approvals do not require it yet. To require a code for every yes: plangate approvals require totp"
        );
    } else {
        outln!("Approvals require {require}.");
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
    let (secret, _) = enrolling(data_dir, name, given, factor::passkey::invite).await?;
    print_invite(name, &invite_link(console, &secret), as_json)
}

/// The console's page that registers a passkey with the one-time
/// `secret`. The secret rides in the fragment, which no browser sends.
pub(crate) fn invite_link(console: &str, secret: &str) -> String {
    format!(
        "{}/console/passkey#invite={secret}",
        console.trim_end_matches('/')
    )
}

/// Prints the passkey link for `name` and what to do with it.
pub(crate) fn print_invite(name: &str, link: &str, as_json: bool) -> Result<()> {
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
    factor::remove(&log, &material, name, given.proof(), (Channel::Cli, None))
        .await
        .map_err(refused)?;
    print_removed(name, as_json)
}

/// Says an operator was removed.
pub(crate) fn print_removed(name: &str, as_json: bool) -> Result<()> {
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
    let to = requirement(to)?;
    let (log, material) = operators(data_dir).await?;
    let answer = asking(&log, given, async |proof| {
        factor::require(&log, &material, to, proof, (Channel::Cli, None)).await
    })
    .await?;
    print_required(answer, as_json)
}

/// The requirement a person typed.
pub(crate) fn requirement(word: &str) -> Result<Requirement> {
    Requirement::parse(word).ok_or_else(|| {
        UsageError(format!(
            "{word:?} is not a requirement: give none, totp, passkey or totp_or_passkey"
        ))
        .into()
    })
}

/// Says what a yes requires now, and what it required before.
pub(crate) fn print_required(answer: RequireAnswer, as_json: bool) -> Result<()> {
    let RequireAnswer { from, require } = answer;
    if as_json {
        return crate::output::json(&json!({"from": from.as_str(), "require": require.as_str()}));
    }
    outln!("approvals now require {require} (were {from}), recorded in plangate's store");
    Ok(())
}

/// `plangate approvals show`: what a yes needs and who is enrolled.
pub(crate) async fn show(data_dir: &Path, as_json: bool) -> Result<()> {
    let (log, _) = operators(data_dir).await?;
    let state = log.state(OPERATORS_LOG).await?;
    print_approvals(&approvals_view(&state), as_json)
}

/// Prints what a yes needs and each enrolled operator's factors.
pub(crate) fn print_approvals(view: &ApprovalsView, as_json: bool) -> Result<()> {
    if as_json {
        let operators: Vec<_> = view
            .operators
            .iter()
            .map(|o| {
                json!({
                    "operator": o.operator,
                    "totp": o.totp,
                    "passkeys": o.passkeys,
                    "recovery_codes_left": o.recovery_codes_left,
                    "enrolled_at": o.enrolled_at,
                })
            })
            .collect();
        return crate::output::json(&json!({
            "require": view.require.as_str(),
            "operators": operators,
        }));
    }
    outln!("approvals require: {}", view.require);
    if view.operators.is_empty() {
        outln!(
            "no operator is enrolled; `plangate operator enroll --name NAME --totp` enrolls one"
        );
    }
    for o in &view.operators {
        let mut factors = Vec::new();
        if o.totp {
            factors.push(format!(
                "totp, {} of {} recovery codes left",
                o.recovery_codes_left, o.recovery_codes
            ));
        }
        if o.passkeys > 0 {
            factors.push(format!("{} passkey(s)", o.passkeys));
        }
        outln!(
            "  {}: {}; enrolled {}",
            o.operator,
            factors.join("; "),
            o.enrolled_at
        );
    }
    Ok(())
}
