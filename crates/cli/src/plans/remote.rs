//! `plangate plans … --server URL`: a person acting on keys' plans through
//! a running plangate's operator API (docs/design.md §12), with an
//! operator token and no access to its data dir — how a person reaches the
//! gateway `plangate service install` runs as its own OS user, which the
//! agent's user cannot read or write.
//!
//! The server decides everything, through the same operations the console
//! and the data-dir commands call ([`plangate_gateway::operator`]); this
//! module asks it, renders its typed answers with the same printing as the
//! local commands, asks the person on the terminal (the steps a yes covers,
//! then a code when approvals require one), and turns refusals into exit
//! codes. The token comes from `PLANGATE_OPERATOR_TOKEN` or, on a terminal,
//! a prompt that does not echo; it is sent as `Authorization: Bearer` and
//! never printed.

use std::io::IsTerminal as _;

use anyhow::{Context as _, Result, anyhow};
use plangate_core::{
    ApprovalAnswer, DiscardAnswer, KeyPlanView, PlanReview, PlannedStep, Receipt, RejectionAnswer,
    StepStatus,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::confirm::{Act, Shown, confirm};
use super::render::finish_receipt;
use super::review::{print_approval, print_discarded, print_rejected};
use crate::args::{FactorArgs, PlanYes, PlansCommand};
use crate::commands::UsageError;

/// The environment variable an operator token is read from.
pub const TOKEN_ENV: &str = "PLANGATE_OPERATOR_TOKEN";

/// A running plangate's operator API, and the token to reach it with.
struct Remote {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// A refusal the server answered: its stable code and message.
#[derive(serde::Deserialize)]
struct Refusal {
    error: String,
    message: String,
}

/// What came back from one request.
enum Answer<T> {
    Done(T),
    Refused(Refusal),
}

impl Remote {
    /// The server at `url`, with the operator token from the environment
    /// or asked for on the terminal.
    fn new(url: &str) -> Result<Remote> {
        let base = url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(UsageError(format!(
                "--server {url:?} is not an http:// or https:// URL (e.g. http://127.0.0.1:7070, where `plangate serve --http` or the service listens)"
            ))
            .into());
        }
        let token = match std::env::var(TOKEN_ENV) {
            Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
            _ => ask_token()?,
        };
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(300))
            .build()
            .context("cannot start an HTTP client")?;
        Ok(Remote { base, token, http })
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Answer<T>> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| {
                anyhow!(
                    "cannot reach plangate at {}: {e}; is `plangate serve --http` (or the service) running there?",
                    self.base
                )
            })?;
        let status = response.status();
        let text = response
            .text()
            .await
            .with_context(|| format!("reading plangate's answer from {}", self.base))?;
        if status.is_success() {
            return serde_json::from_str(&text)
                .map(Answer::Done)
                .with_context(|| {
                    format!(
                        "{} answered something this plangate does not read (another version?)",
                        self.base
                    )
                });
        }
        match serde_json::from_str::<Refusal>(&text) {
            Ok(refusal) => Ok(Answer::Refused(refusal)),
            Err(_) => Err(anyhow!(
                "{} answered HTTP {status}, not plangate's operator API; is --server the plangate's own address?",
                self.base
            )),
        }
    }

    /// `GET` of `path` with `query`.
    async fn get<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> Result<T> {
        let url = reqwest::Url::parse_with_params(&format!("{}{path}", self.base), query)
            .map_err(|e| UsageError(format!("--server {:?}: {e}", self.base)))?;
        done(self.send(self.http.get(url)).await?)
    }

    /// `POST` of `body` to `path`; when the server wants a factor and none
    /// was given, asks the person on the terminal and sends it once more.
    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        mut body: Value,
        factor: &FactorArgs,
    ) -> Result<T> {
        let url = format!("{}{path}", self.base);
        put_factor(
            &mut body,
            factor.code.as_deref(),
            factor.operator.as_deref(),
        );
        match self.send(self.http.post(&url).json(&body)).await? {
            Answer::Refused(r)
                if r.error == "factor_required" && factor.code.is_none() && can_ask() =>
            {
                crate::output::note(format_args!("{}", r.message));
                let code = ask_line("code from your authenticator (or a recovery code): ")?;
                put_factor(&mut body, Some(&code), factor.operator.as_deref());
                done(self.send(self.http.post(&url).json(&body)).await?)
            }
            other => done(other),
        }
    }

    /// One key's plan as a person reviews it.
    async fn review(&self, key: &str) -> Result<PlanReview> {
        self.get("/console/api/plan", &[("key", key)]).await
    }
}

/// The answer, or the server's refusal as the CLI reports one: bad input
/// exits 2, anything else 1, each with its stable code.
fn done<T>(answer: Answer<T>) -> Result<T> {
    match answer {
        Answer::Done(t) => Ok(t),
        Answer::Refused(Refusal { error, message }) => {
            let line = format!("{message} [{error}]");
            if matches!(
                error.as_str(),
                "invalid_arguments" | "not_found" | "step_not_found" | "plan_changed"
            ) {
                Err(UsageError(line).into())
            } else {
                Err(anyhow!(line))
            }
        }
    }
}

/// Sets the factor fields of a request body.
fn put_factor(body: &mut Value, code: Option<&str>, operator: Option<&str>) {
    if let Value::Object(map) = body {
        if let Some(code) = code {
            map.insert("code".into(), json!(code));
        }
        if let Some(operator) = operator {
            map.insert("operator".into(), json!(operator));
        }
    }
}

/// Whether a person is at the terminal to answer.
fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks for one line on the terminal.
fn ask_line(prompt: &str) -> Result<String> {
    use std::io::{BufRead as _, Write as _};
    let mut err = std::io::stderr().lock();
    write!(err, "{prompt}")?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().to_owned())
}

/// Asks for the operator token on the terminal without echoing it; with
/// no terminal, says where the token goes.
fn ask_token() -> Result<String> {
    if !can_ask() {
        return Err(UsageError(format!(
            "--server needs an operator token: set {TOKEN_ENV} (a person creates one with `plangate operator token --name NAME` where the gateway's data dir is) [unauthorized]"
        ))
        .into());
    }
    let token = without_echo(|| ask_line("operator token (not shown): "))?;
    eprintln!();
    if token.is_empty() {
        return Err(UsageError("no operator token was given [unauthorized]".to_owned()).into());
    }
    Ok(token)
}

/// Runs `read` with the terminal's echo off, restoring it after.
#[cfg(unix)]
fn without_echo<T>(read: impl FnOnce() -> Result<T>) -> Result<T> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let Ok(before) = tcgetattr(&stdin) else {
        return read();
    };
    let mut quiet = before.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    let _ = tcsetattr(&stdin, OptionalActions::Now, &quiet);
    let out = read();
    let _ = tcsetattr(&stdin, OptionalActions::Now, &before);
    out
}

#[cfg(not(unix))]
fn without_echo<T>(read: impl FnOnce() -> Result<T>) -> Result<T> {
    read()
}

/// Runs a `plans` verb against the server at `url`.
pub(crate) async fn run(url: &str, command: PlansCommand) -> Result<()> {
    let remote = Remote::new(url)?;
    match command {
        PlansCommand::List { json, .. } => list(&remote, json).await,
        PlansCommand::Show { key, json, .. } => {
            super::read::print_review(&remote.review(&key).await?, json)
        }
        PlansCommand::Reject {
            key,
            step,
            reason,
            json,
            ..
        } => {
            let review = remote.review(&key).await?;
            let body = json!({"key_id": review.plan.key_id, "step_id": step, "reason": reason});
            let answer: RejectionAnswer = remote
                .post("/console/api/reject", body, &FactorArgs::default())
                .await?;
            print_rejected(&answer, json)
        }
        PlansCommand::Discard {
            key, steps, json, ..
        } => {
            let review = remote.review(&key).await?;
            let body = json!({"key_id": review.plan.key_id, "step_ids": steps});
            let answer: DiscardAnswer = remote
                .post("/console/api/discard", body, &FactorArgs::default())
                .await?;
            print_discarded(&answer, json)
        }
        PlansCommand::Retry {
            key,
            step,
            json,
            factor,
            ..
        } => {
            let review = remote.review(&key).await?;
            let body = json!({"key_id": review.plan.key_id, "step_id": step});
            let receipt: Receipt = remote.post("/console/api/retry", body, &factor).await?;
            finish_receipt(receipt, json)
        }
        PlansCommand::Approve(yes) => approve(&remote, yes).await,
        PlansCommand::Apply(yes) => apply(&remote, yes).await,
        PlansCommand::Amend { .. } | PlansCommand::Diff { .. } => Err(UsageError(
            "`plans amend` and `plans diff` work on the data dir; over --server, use the web console's amend form and history".to_owned(),
        )
        .into()),
    }
}

/// `plans approve --server`: the plan as the server shows it, the person's
/// yes to it (asked on the terminal without `--digest`), then the server's
/// approve bound to that digest and revision.
async fn approve(remote: &Remote, yes: PlanYes) -> Result<()> {
    let review = remote.review(&yes.key).await?;
    let view = &review.plan;
    let shown = match &yes.digest {
        Some(d) => Shown::at(d, view.revision),
        None => {
            let steps = chosen(view, &yes.steps, |s| s.status == StepStatus::Planned, &[]);
            asked(view, steps, Act::Approve).await?
        }
    };
    let seen = shown.seen();
    let body = json!({
        "key_id": view.key_id,
        "plan_digest": seen.digest,
        "revision": yes.digest.is_none().then_some(view.revision),
        "step_ids": yes.steps,
    });
    let answer: ApprovalAnswer = remote
        .post("/console/api/approve", body, &yes.factor)
        .await?;
    print_approval(&answer, |id| position_and_effect(view, id), yes.json)
}

/// `plans apply --server`: as [`approve`], then the server runs the steps
/// and answers the receipt.
async fn apply(remote: &Remote, yes: PlanYes) -> Result<()> {
    let review = remote.review(&yes.key).await?;
    let view = &review.plan;
    let shown = match &yes.digest {
        Some(d) => Shown::at(d, view.revision),
        None => {
            let runnable = |s: &&plangate_core::StepView| {
                matches!(s.status, StepStatus::Planned | StepStatus::Failed)
            };
            let steps = chosen(view, &yes.steps, runnable, &review.applies);
            asked(view, steps, Act::Apply).await?
        }
    };
    let seen = shown.seen();
    let body = json!({
        "key_id": view.key_id,
        "plan_digest": seen.digest,
        "revision": yes.digest.is_none().then_some(view.revision),
        "step_ids": yes.steps,
    });
    let receipt: Receipt = remote.post("/console/api/apply", body, &yes.factor).await?;
    finish_receipt(receipt, yes.json)
}

/// The steps a yes covers, as the server listed them: the named ones that
/// pass `fits`, or (none named) those in `all` — or, with `all` empty,
/// every waiting step.
fn chosen(
    view: &KeyPlanView,
    named: &[String],
    fits: impl Fn(&&plangate_core::StepView) -> bool,
    all: &[String],
) -> Vec<PlannedStep> {
    view.steps
        .iter()
        .filter(|s| match named.is_empty() {
            false => named.contains(&s.step.step_id) && fits(s),
            true if all.is_empty() => s.status == StepStatus::Planned,
            true => all.contains(&s.step.step_id),
        })
        .map(|s| s.step.clone())
        .collect()
}

/// Shows the person the steps and asks; with none to show, the plan as it
/// is, for the server to refuse.
async fn asked(view: &KeyPlanView, steps: Vec<PlannedStep>, act: Act) -> Result<Shown> {
    let shown = Shown::at(&view.plan_digest, view.revision);
    if steps.is_empty() {
        return Ok(shown);
    }
    confirm(&view.key, shown, &steps, act).await
}

/// A step's position and predicted effect, from the plan the server showed.
fn position_and_effect(view: &KeyPlanView, id: &str) -> Option<(u32, String)> {
    view.steps
        .iter()
        .find(|s| s.step.step_id == id)
        .map(|s| (s.step.position, s.step.predicted_effect.clone()))
}

/// `plans list --server`: every key with a plan, from the server's view.
async fn list(remote: &Remote, as_json: bool) -> Result<()> {
    let state: Value = remote.get("/console/api/state", &[]).await?;
    let views: Vec<KeyPlanView> = serde_json::from_value(state["keys"].clone())
        .context("the server's plans are not what this plangate reads (another version?)")?;
    let rows: Vec<Value> = views.iter().map(super::read::row_of_view).collect();
    super::read::print_rows(&rows, as_json)
}
