//! The flags of `plangate notify`: check a `[[notify]]` receiver, and see
//! what the outbox delivered.

use clap::Subcommand;

use super::ConfigSourceArgs;

#[derive(Subcommand, Debug)]
pub(crate) enum NotifyCommand {
    /// Send one signed `notify.test` message to a `[[notify]]` receiver
    /// now (not through the outbox) and print what it answered.
    Test {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// The receiver's `name`.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The newest messages in the outbox: to whom, where each stands, how
    /// many attempts and what the last one got.
    List {
        /// How many, newest first.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
        /// Print JSON (with each attempt) instead of a table.
        #[arg(long)]
        json: bool,
    },
}
