//! The `plangate` binary.
//!
//! It only parses flags, loads config, builds the gateway from the library
//! crates, serves, and turns outcomes into exit codes: 0 for success, 2 for
//! bad configuration or usage, 1 for anything else. All policy lives in the
//! libraries, so what the binary does is what the tests exercise.

use std::process::ExitCode;

use args::{Cli, Command, LogFormat};
use clap::Parser;
use plangate_config::ConfigErrors;

#[cfg(not(target_env = "msvc"))]
mod alloc;
mod args;
mod audit;
mod audit_verify;
mod catalog;
mod commands;
mod config_check;
mod connect;
mod demo;
mod dispatch;
mod enforcement;
mod factor;
mod notify;
mod otel;
mod output;
mod plans;
mod policy;
mod preview_text;
mod remote;
mod remote_admin;
mod remote_keys;
mod serve;
mod service;
mod setup;
mod tools;
mod upstream;
mod wrap;

/// Exit code for bad configuration or usage.
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // PostgreSQL's notices (e.g. "relation … already exists, skipping" from
    // the idempotent migrations at every start) are not news to an operator.
    let default_filter = match cli.command {
        Command::Serve(_) => "info,rmcp=warn,sqlx::postgres::notice=warn",
        _ => "warn",
    };
    // A stdio server has one client: one worker thread serves it without
    // handing each message between threads (every hand-off is a thread
    // wake-up, and sixteen agents each running plangate on two cores pay
    // for all of them). Everything else gets a worker per core.
    let one_client = match &cli.command {
        Command::Serve(args) => args.http.is_none(),
        Command::DemoSite(args) => args.http.is_none(),
        _ => false,
    };
    let runtime = if one_client {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plangate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Traces from what serves or calls upstreams; not from the demo site
    // or the counting upstream a plangate starts (same binary, same
    // environment), which make no spans of their own.
    let traced = !matches!(
        cli.command,
        Command::DemoSite(_)
            | Command::CountingUpstream { .. }
            | Command::Completions { .. }
            | Command::Man { .. }
    );
    let traces = init_tracing(
        cli.log_format,
        default_filter,
        traced.then(|| runtime.handle()),
    );
    let outcome = runtime.block_on(dispatch::run(cli));
    // The last spans go out before the process ends.
    if let Some(provider) = traces {
        let _ = provider.shutdown();
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(errors) = e.downcast_ref::<ConfigErrors>() {
                output::error(&format!("the configuration has errors:\n{errors}"));
                return ExitCode::from(EXIT_CONFIG);
            }
            if let Some(usage) = e.downcast_ref::<commands::UsageError>() {
                output::error(&usage.to_string());
                return ExitCode::from(EXIT_CONFIG);
            }
            // The reader of stdout went away (`| head`): end quietly, with
            // success (see `output`).
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::from(output::BROKEN_PIPE_STATUS);
            }
            output::error(&chain_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes as one line, `context: cause: cause`, leaving
/// out a cause whose text the line already ends with (an error that
/// prints its source, as the store's i/o errors do, would otherwise say
/// the operating system's message twice).
fn chain_text(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Logs go to stderr only: over stdio, stdout is the MCP protocol.
/// `PLANGATE_LOG` takes an `EnvFilter` directive (e.g. `debug`). When the
/// environment names an OTLP collector, the gateway's spans go there too
/// ([`otel`]); the provider returned is shut down at exit.
fn init_tracing(
    format: LogFormat,
    default_filter: &str,
    runtime: Option<&tokio::runtime::Handle>,
) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PLANGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // rmcp logs whole JSON-RPC messages (tool arguments, results,
    // elicitation answers) at DEBUG and upstream error messages at WARN in
    // `rmcp::service`, and raw unparsable lines at DEBUG elsewhere: argument
    // values must never reach a log line, whatever PLANGATE_LOG says.
    let no_payloads = tracing_subscriber::filter::filter_fn(|meta| {
        let target = meta.target();
        if target == plangate_gateway::telemetry::TARGET {
            // Spans for OpenTelemetry only: log lines stay as they are.
            false
        } else if target == "rmcp::service" || target.starts_with("rmcp::service::") {
            *meta.level() <= tracing::Level::ERROR
        } else if target == "rmcp" || target.starts_with("rmcp::") {
            *meta.level() <= tracing::Level::WARN
        } else {
            true
        }
    });
    let ansi = std::io::stderr().is_terminal();
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().boxed(),
    };
    let provider = match runtime.filter(|_| otel::wanted()) {
        Some(runtime) => match otel::provider(runtime.clone()) {
            Ok(provider) => Some(provider),
            Err(e) => {
                eprintln!("plangate: traces are not exported: {e:#}");
                None
            }
        },
        None => None,
    };
    let traces = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider as _;
        plangate_gateway::telemetry::enable();
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("plangate"))
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target() == plangate_gateway::telemetry::TARGET
            }))
    });
    tracing_subscriber::registry()
        .with(layer.with_filter(no_payloads).with_filter(filter))
        .with(traces)
        .init();
    provider
}
