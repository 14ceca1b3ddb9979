//! The client of a running plangate's operator API (docs/design.md §12):
//! `plans … --server URL` and `wrap --service URL` reach the gateway
//! `plangate service install` runs as its own OS user through it, with an
//! operator token and no access to its data dir. The server decides
//! everything; this sends requests, asks the person on the terminal for
//! what the server wants (the token, a code when approvals require one)
//! and turns refusals into exit codes. The token comes from
//! `PLANGATE_OPERATOR_TOKEN` or a prompt that does not echo; it is sent as
//! `Authorization: Bearer` and never printed.

use std::io::IsTerminal as _;

use anyhow::{Context as _, Result, anyhow};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::args::FactorArgs;
use crate::commands::UsageError;

/// The environment variable an operator token is read from.
pub(crate) const TOKEN_ENV: &str = "PLANGATE_OPERATOR_TOKEN";

/// A running plangate's operator API, and the token to reach it with.
pub(crate) struct Remote {
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
    pub(crate) fn new(url: &str) -> Result<Remote> {
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

    /// Sends `request` with the token; a success's body as text, or the
    /// server's refusal.
    async fn send_raw(&self, request: reqwest::RequestBuilder) -> Result<Answer<String>> {
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
            return Ok(Answer::Done(text));
        }
        match serde_json::from_str::<Refusal>(&text) {
            Ok(refusal) => Ok(Answer::Refused(refusal)),
            Err(_) => Err(anyhow!(
                "{} answered HTTP {status}, not plangate's operator API; is --server the plangate's own address?",
                self.base
            )),
        }
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Answer<T>> {
        match self.send_raw(request).await? {
            Answer::Done(text) => {
                serde_json::from_str(&text)
                    .map(Answer::Done)
                    .with_context(|| {
                        format!(
                            "{} answered something this plangate does not read (another version?)",
                            self.base
                        )
                    })
            }
            Answer::Refused(r) => Ok(Answer::Refused(r)),
        }
    }

    fn url(&self, path: &str, query: &[(&str, &str)]) -> Result<reqwest::Url> {
        reqwest::Url::parse_with_params(&format!("{}{path}", self.base), query)
            .map_err(|e| UsageError(format!("--server {:?}: {e}", self.base)).into())
    }

    /// `GET` of `path` with `query`, its body as text (an export).
    pub(crate) async fn get_text(&self, path: &str, query: &[(&str, &str)]) -> Result<String> {
        done(self.send_raw(self.http.get(self.url(path, query)?)).await?)
    }

    /// `GET` of `path` with `query`.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T> {
        done(self.send(self.http.get(self.url(path, query)?)).await?)
    }

    /// `POST` of `body` to `path`; when the server wants a factor and none
    /// was given, asks the person on the terminal and sends it once more.
    pub(crate) async fn post<T: DeserializeOwned>(
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
                "invalid_arguments"
                    | "not_found"
                    | "step_not_found"
                    | "plan_changed"
                    | "partial_apply"
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
pub(crate) fn can_ask() -> bool {
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

impl Remote {
    /// The server's address, as given (without a trailing `/`).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }
}
