//! Where the line is (docs/security.md, "An agent with a shell"): what the
//! running set-up stops, said by `plangate serve` when it starts and by
//! `plangate config check`. Over MCP plan mode always holds; against an
//! agent with a shell in the same OS user it holds only as far as a
//! factor (and, beyond that, a user of plangate's own) takes it, and the
//! person is told which.

use std::path::Path;

use plangate_core::factor::Requirement;
use plangate_core::operators::OPERATORS_LOG;
use plangate_gateway::operator::factor::operators_log;

/// What the set-up stops, in a word and a sentence.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Enforcement {
    /// `cooperative` (the agent's OS user can approve) or `factor` (a
    /// code is required; the data dir is still readable by that user).
    pub(crate) level: &'static str,
    /// What a yes needs, as recorded in the store.
    pub(crate) approvals_require: &'static str,
    /// The sentence for the person.
    pub(crate) text: String,
}

/// Reads what the store requires and says what that stops; `None` when the
/// store cannot be read.
pub(crate) async fn read(data_dir: &Path) -> Option<Enforcement> {
    let store = crate::setup::open_store(data_dir).await.ok()?;
    let material = crate::setup::key_material(data_dir).ok()?;
    let state = operators_log(store, material.log_key())
        .state(OPERATORS_LOG)
        .await
        .ok()?;
    let user = std::env::var("USER").unwrap_or_else(|_| "this user".to_owned());
    Some(match state.require {
        Requirement::None => Enforcement {
            level: "cooperative",
            approvals_require: Requirement::None.as_str(),
            text: format!(
                "cooperative: anything running as OS user {user} (which owns the data dir) can approve plans, an agent with a shell too; `plangate operator enroll --name NAME --totp` then `plangate approvals require totp` makes every yes need a code (docs/security.md, \"An agent with a shell\")"
            ),
        },
        require => Enforcement {
            level: "factor",
            approvals_require: require.as_str(),
            text: format!(
                "approvals need {require}: an agent that runs plangate's commands cannot approve without the code, but anything running as OS user {user} can still read the data dir's files; run plangate as a user of its own to close that (docs/security.md, \"An agent with a shell\")"
            ),
        },
    })
}
