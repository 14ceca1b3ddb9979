//! `counting-upstream --log FILE`: the race-and-crash test upstream of
//! [`plangate_demo_site::counting`] over stdio.

use std::path::PathBuf;

use clap::Parser;

/// Counts deliveries of `bump` into a log file.
#[derive(Debug, Parser)]
#[command(name = "counting-upstream")]
struct Args {
    /// The file every delivery is appended to (one JSON object per line).
    #[arg(long, value_name = "FILE")]
    log: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    plangate_demo_site::counting::serve_stdio(Args::parse().log).await
}
