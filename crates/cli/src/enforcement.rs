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
    /// `cooperative` (the agent's OS user can approve), `factor` (a code
    /// is required; the data dir is still readable by that user),
    /// `service` (a user of its own, no factor) or `enforced` (both).
    pub(crate) level: &'static str,
    /// What a yes needs, as recorded in the store.
    pub(crate) approvals_require: &'static str,
    /// The sentence for the person.
    pub(crate) text: String,
}

/// Reads what the store requires and says what that stops; `None` when the
/// store cannot be read.
pub(crate) async fn read(data_dir: &Path) -> Option<Enforcement> {
    // A data dir not made yet requires nothing: looking does not make it.
    let state = if crate::setup::store_exists(data_dir) {
        let store = crate::setup::open_store(data_dir).await.ok()?;
        let material = crate::setup::key_material(data_dir).ok()?;
        operators_log(store, material.log_key())
            .state(OPERATORS_LOG)
            .await
            .ok()?
    } else {
        plangate_core::operators::Operators::default()
    };
    let user = current_user();
    // Run as the user `plangate service install` made for it: the data
    // dir is that user's alone.
    let service = std::env::var("PLANGATE_SERVICE_USER")
        .ok()
        .filter(|s| *s == user);
    if let Some(service) = service {
        return Some(match state.require {
            Requirement::None => Enforcement {
                level: "service",
                approvals_require: Requirement::None.as_str(),
                text: format!(
                    "service user {service}: the data dir is out of other users' reach, but approvals need no factor — anyone who can run plangate's commands as {service} (or reach the console with a token) approves; `plangate approvals require totp` after enrolling closes that"
                ),
            },
            require => Enforcement {
                level: "enforced",
                approvals_require: require.as_str(),
                text: format!("enforced: service user {service}, approvals need {require}"),
            },
        });
    }
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

/// The OS user this process runs as, by name.
fn current_user() -> String {
    std::process::Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "this user".to_owned())
}
