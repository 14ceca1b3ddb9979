//! The flags of the commands about people and credentials: API keys,
//! operators (console tokens and enrolled factors) and what a yes needs.

use clap::{Args, Subcommand, ValueEnum};

/// The factor a person gives for an act that widens what runs, when the
/// store requires one (`plangate approvals show`); on a terminal plangate
/// asks for the code instead.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct FactorArgs {
    /// The code from your authenticator app (or one of your recovery
    /// codes), when approvals require one.
    #[arg(long, value_name = "CODE")]
    pub(crate) code: Option<String>,
    /// The enrolled operator you are (needed when several are enrolled).
    #[arg(long, value_name = "NAME")]
    pub(crate) operator: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum KeysCommand {
    /// Create a key and print it once.
    Create {
        /// A name for the key (who or what uses it).
        #[arg(long)]
        name: String,
        /// What the key may do.
        #[arg(long, value_enum)]
        scope: ScopeArg,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        factor: FactorArgs,
        #[command(flatten)]
        remote: super::RemoteArgs,
    },
    /// List keys (never their tokens).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
    },
    /// Revoke a key by name or id.
    Revoke {
        /// The key's name or id.
        key: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum OperatorCommand {
    /// Create an operator token for the web console and print it once.
    Token {
        /// Who holds it; the console records it as the actor of every act.
        #[arg(long)]
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
        #[command(flatten)]
        factor: FactorArgs,
    },
    /// List operator tokens (never the tokens themselves).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
    },
    /// Revoke an operator token by name or id; its console sessions end at
    /// their next request.
    Revoke {
        /// The token's name or id.
        operator: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
    },
    /// Enroll a person as an operator with a factor only they hold: with
    /// --totp, prints an otpauth:// URI for an authenticator app and
    /// one-time recovery codes, once; with --passkey, a one-time link that
    /// registers a passkey in the console. Then `plangate approvals require
    /// totp` (or passkey, or totp_or_passkey) makes every yes need one.
    /// Enrolling a name again with --totp replaces its code.
    Enroll {
        /// The operator's name (recorded with every act they prove).
        #[arg(long)]
        name: String,
        /// A TOTP factor (RFC 6238: SHA-1, 6 digits, 30 s): prints the
        /// otpauth:// URI and recovery codes once.
        #[arg(long, required_unless_present = "passkey", conflicts_with = "passkey")]
        totp: bool,
        /// A passkey (WebAuthn, with user verification): prints a one-time
        /// link (15 minutes) to register one in the console.
        #[arg(long)]
        passkey: bool,
        /// The console's address for the passkey link (a browser takes
        /// passkeys on `localhost` or a domain, not an IP address); by
        /// default --server's (127.0.0.1 written as localhost), else
        /// http://localhost:7070.
        #[arg(long, value_name = "URL", requires = "passkey")]
        console: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
        /// When an operator is enrolled already and a factor is required:
        /// theirs.
        #[command(flatten)]
        factor: FactorArgs,
    },
    /// Remove an enrolled operator and their factors.
    Remove {
        /// The operator's name.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
        #[command(flatten)]
        factor: FactorArgs,
    },
}

/// `plangate approvals …`.
#[derive(Subcommand, Debug)]
pub(crate) enum ApprovalsCommand {
    /// Record in plangate's store what every yes needs: none (anyone who
    /// can run plangate's operator commands), totp (a code from an
    /// enrolled operator's authenticator). Raising it needs nothing;
    /// lowering it needs a code. Never read from a config file.
    Require {
        /// none, totp or totp_or_passkey.
        #[arg(value_name = "REQUIREMENT")]
        requirement: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
        #[command(flatten)]
        factor: FactorArgs,
    },
    /// Show what a yes needs and who is enrolled.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: super::RemoteArgs,
    },
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub(crate) enum ScopeArg {
    Read,
    Plan,
    Write,
}

impl From<ScopeArg> for plangate_core::Scope {
    fn from(s: ScopeArg) -> Self {
        match s {
            ScopeArg::Read => plangate_core::Scope::Read,
            ScopeArg::Plan => plangate_core::Scope::Plan,
            ScopeArg::Write => plangate_core::Scope::Write,
        }
    }
}
