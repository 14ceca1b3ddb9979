//! The flags of the commands that read plangate's own logs: the tool
//! pins (`plangate tools`) and the audit trail (`plangate audit`). Each
//! acts at the data dir, or with `--server` through a running plangate's
//! operator API.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::since;
use super::{ConfigSourceArgs, FactorArgs, RemoteArgs};

#[derive(Subcommand, Debug)]
pub(crate) enum ToolsCommand {
    /// Every pinned tool, and every quarantined or rejected definition with
    /// what changed (read from the store; no upstream is contacted).
    List {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        /// Print JSON (with each held definition in full) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Trust a quarantined definition: the tool is offered again.
    Accept {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        held: Held,
        /// Accept even though the new definition lowers the tool's effect
        /// class (its calls would no longer be planned).
        #[arg(long)]
        allow_downgrade: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        factor: FactorArgs,
    },
    /// Refuse a quarantined definition: the tool stays out.
    Reject {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        held: Held,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The held definition a person decides on: which tool, and the
/// definition they reviewed.
#[derive(Args, Debug)]
pub(crate) struct Held {
    /// The upstream's name.
    pub(crate) upstream: String,
    /// The upstream's own tool name.
    pub(crate) tool: String,
    /// The definition you reviewed (`sha256:…` from `tools list --json`);
    /// refused if the held one is another.
    #[arg(long, value_name = "HASH")]
    pub(crate) hash: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum AuditCommand {
    /// Write the event log as JSON Lines, one event per line in global
    /// order, each as stored plus `seq` and `key_seq`. Secrets are never in
    /// the log in the clear.
    Export {
        /// Only this key's events (name or id), or one of plangate's own
        /// logs: `tools` (tool pins) or `operators` (who may approve, and
        /// every factor used).
        #[arg(long)]
        key: Option<String>,
        /// Only events at or after this time: RFC 3339
        /// (2026-11-30T10:00:00Z), a date (2026-11-30, midnight UTC) or
        /// Unix milliseconds.
        #[arg(long, value_name = "TIME", value_parser = since::parse_since)]
        since: Option<i64>,
        /// Write to FILE instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// With --out, print the summary as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Check that the event log is the one plangate wrote: every event's
    /// link in its key's hash chain, and the log key's signature over it.
    /// Exit 1, naming the first event that breaks, if anything was changed
    /// or added outside plangate. With --public-key, check an export
    /// (`audit export`) offline instead of the store.
    Verify {
        /// Only this key's log (name or id).
        #[arg(long, conflicts_with = "public_key")]
        key: Option<String>,
        /// A file holding the public log key (`plangate audit public-key`);
        /// checks EXPORT instead of the store.
        #[arg(long, value_name = "FILE", requires = "export")]
        public_key: Option<PathBuf>,
        /// An export to check (with --public-key).
        #[arg(value_name = "EXPORT", requires = "public_key")]
        export: Option<PathBuf>,
        /// Print what was found as JSON.
        #[arg(long)]
        json: bool,
        // With --public-key and EXPORT, a file here is checked even when
        // PLANGATE_SERVER is set.
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Print the public half of the log key (`ed25519:…`), to check exports
    /// with elsewhere (`audit verify --public-key`).
    PublicKey {
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}
