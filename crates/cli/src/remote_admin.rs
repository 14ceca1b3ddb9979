//! The administrative commands over `--server`: `plangate tools`,
//! `plangate audit`, `plangate operator` and `plangate approvals` against
//! a running plangate's operator API ([`crate::remote`]), printed as the
//! data-dir commands print them. The server decides; a factor it asks for
//! is asked of the person on the terminal.

use anyhow::Result;
use plangate_gateway::audit::Verified;
use plangate_gateway::operator::factor::Enrolment;
use plangate_gateway::operator::factor::view::{ApprovalsView, RequireAnswer};
use plangate_gateway::tool_pins::{Decided, ToolRow};
use plangate_store::{OperatorToken, PublicLogKey};
use serde::Deserialize;
use serde_json::json;

use crate::args::{ApprovalsCommand, AuditCommand, FactorArgs, OperatorCommand, ToolsCommand};
use crate::remote::Remote;

/// `plangate tools list|accept|reject --server URL`.
pub(crate) async fn tools(url: &str, cmd: ToolsCommand) -> Result<()> {
    #[derive(Deserialize)]
    struct Rows {
        tools: Vec<ToolRow>,
    }
    let remote = Remote::new(url)?;
    let (held, decision, json, factor) = match cmd {
        ToolsCommand::List { json, .. } => {
            let rows: Rows = remote.get("/console/api/tools", &[]).await?;
            return crate::tools::print_rows(&rows.tools, json);
        }
        ToolsCommand::Accept {
            held,
            allow_downgrade,
            json,
            factor,
            ..
        } => {
            let decision = json!({"decision": "accept", "allow_downgrade": allow_downgrade});
            (held, decision, json, factor)
        }
        ToolsCommand::Reject { held, json, .. } => {
            let decision = json!({"decision": "reject"});
            (held, decision, json, FactorArgs::default())
        }
    };
    let mut body = decision;
    body["server"] = json!(held.upstream);
    body["tool"] = json!(held.tool);
    if let Some(hash) = held.hash {
        body["definition_hash"] = json!(hash);
    }
    let decided: Decided = remote.post("/console/api/tool", body, &factor).await?;
    crate::tools::print_decided(&decided, json)
}

/// `plangate audit export|verify|public-key --server URL`.
pub(crate) async fn audit(url: &str, cmd: AuditCommand) -> Result<()> {
    let remote = Remote::new(url)?;
    match cmd {
        AuditCommand::Export {
            key,
            since,
            out,
            json,
            ..
        } => {
            let since = since.map(|t| t.to_string());
            let query = log_query(key.as_deref(), since.as_deref());
            let text = remote.get_text("/console/api/audit/export", &query).await?;
            let count = text.lines().filter(|l| !l.trim().is_empty()).count();
            crate::audit::write_export(&text, count, out.as_deref(), json)
        }
        AuditCommand::Verify { key, json, .. } => {
            let query = log_query(key.as_deref(), None);
            let found: Verified = remote.get("/console/api/audit/verify", &query).await?;
            crate::audit_verify::report(&found, &format!("the store of {}", remote.base()), json)
        }
        AuditCommand::PublicKey { json, .. } => {
            #[derive(Deserialize)]
            struct Public {
                public_key: String,
            }
            let answer: Public = remote.get("/console/api/audit/public-key", &[]).await?;
            let public = PublicLogKey::parse(&answer.public_key).map_err(|e| {
                anyhow::anyhow!(
                    "{} answered a public key this plangate does not read: {e}",
                    remote.base()
                )
            })?;
            crate::audit_verify::public_key(public, json)
        }
    }
}

/// The query naming a log and a time, as far as given.
fn log_query<'a>(key: Option<&'a str>, since_ms: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
    let mut query = Vec::new();
    if let Some(key) = key {
        query.push(("key", key));
    }
    if let Some(since) = since_ms {
        query.push(("since_ms", since));
    }
    query
}

/// `plangate operator token|list|revoke|enroll|remove --server URL`.
pub(crate) async fn operator(url: &str, cmd: OperatorCommand) -> Result<()> {
    #[derive(Deserialize)]
    struct TokenMade {
        operator: OperatorToken,
        token: String,
    }
    #[derive(Deserialize)]
    struct Invite {
        operator: String,
        invite: String,
    }
    let remote = Remote::new(url)?;
    match cmd {
        OperatorCommand::Token {
            name, json, factor, ..
        } => {
            let made: TokenMade = remote
                .post(
                    "/console/api/operators/token",
                    json!({"name": name}),
                    &factor,
                )
                .await?;
            crate::commands::print_operator_token(&made.operator, &made.token, json)
        }
        OperatorCommand::List { json, .. } => {
            let tokens: Vec<OperatorToken> = remote.get("/console/api/operators", &[]).await?;
            crate::commands::print_operator_tokens(&tokens, json)
        }
        OperatorCommand::Revoke { operator, json, .. } => {
            let revoked: OperatorToken = remote
                .post(
                    "/console/api/operators/revoke",
                    json!({"operator": operator}),
                    &FactorArgs::default(),
                )
                .await?;
            crate::commands::print_operator_revoked(&revoked, json)
        }
        OperatorCommand::Enroll {
            name,
            passkey: true,
            console,
            json,
            factor,
            ..
        } => {
            let body = json!({"name": name, "factor_kind": "passkey"});
            let invite: Invite = remote
                .post("/console/api/operators/enroll", body, &factor)
                .await?;
            let console = console.unwrap_or_else(|| console_of(remote.base()));
            let link = crate::factor::invite_link(&console, &invite.invite);
            crate::factor::print_invite(&invite.operator, &link, json)
        }
        OperatorCommand::Enroll {
            name, json, factor, ..
        } => {
            let body = json!({"name": name, "factor_kind": "totp"});
            let enrolment: Enrolment = remote
                .post("/console/api/operators/enroll", body, &factor)
                .await?;
            let view: ApprovalsView = remote.get("/console/api/approvals", &[]).await?;
            crate::factor::print_enrolment(&enrolment, view.require, json)
        }
        OperatorCommand::Remove {
            name, json, factor, ..
        } => {
            let _: serde_json::Value = remote
                .post(
                    "/console/api/operators/remove",
                    json!({"name": name}),
                    &factor,
                )
                .await?;
            crate::factor::print_removed(&name, json)
        }
    }
}

/// The console's address for a passkey link: the server's, with a
/// loopback IP written as `localhost` (a browser takes passkeys there, not
/// on an IP address; both reach the same listener).
fn console_of(server: &str) -> String {
    server
        .replacen("://127.0.0.1", "://localhost", 1)
        .replacen("://[::1]", "://localhost", 1)
}

/// `plangate approvals require|show --server URL`.
pub(crate) async fn approvals(url: &str, cmd: ApprovalsCommand) -> Result<()> {
    let remote = Remote::new(url)?;
    match cmd {
        ApprovalsCommand::Show { json, .. } => {
            let view: ApprovalsView = remote.get("/console/api/approvals", &[]).await?;
            crate::factor::print_approvals(&view, json)
        }
        ApprovalsCommand::Require {
            requirement,
            json,
            factor,
            ..
        } => {
            let to = crate::factor::requirement(&requirement)?;
            let answer: RequireAnswer = remote
                .post("/console/api/approvals", json!({"require": to}), &factor)
                .await?;
            crate::factor::print_required(answer, json)
        }
    }
}
