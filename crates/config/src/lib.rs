//! plangate's configuration: parse and validate, nothing more.
//!
//! This crate owns the *first* of plangate's two config stages. It turns a
//! `plangate.toml`, or the `mcpServers` / `servers` JSON that Claude Desktop,
//! Cursor, Claude Code and VS Code write, into a [`Config`]: every value
//! checked, every default resolved, every `${VAR}` expanded, every relative
//! path made relative to the config file. The gateway's second stage builds
//! real things from it (child processes, HTTP clients, the store).
//!
//! It never opens a socket, touches a database or spawns a process, and it
//! reads only the file it is given (and environment variables, through the
//! [`Env`] trait). That is why the stages are split: `plangate config
//! check` and every test can run this stage alone, with no side effects,
//! and a bad file fails before anything has started.
//!
//! Validation walks the parsed document itself rather than deserializing
//! straight into structs, so that it reports **every** mistake in a file at
//! once — each with the file, a dotted key path and a lowercase message
//! naming the value at fault and what is allowed ([`ConfigErrors`]). Only a
//! syntax error stops the walk early, and it carries a line and column.
//!
//! The full reference, also in `docs/config.md`, follows.

#![doc = include_str!("../../../docs/config.md")]

mod check;
pub mod clients;
mod demo;
mod duration;
pub use duration::{format_duration, parse_duration};
mod env;
mod error;
mod mcp_json;
mod model;
mod planning;
pub mod profiles;
mod rate_limit;
mod toml_file;

use std::path::{Path, PathBuf};

pub use demo::{DEMO_TOML, demo_tool_overrides};
pub use env::{Env, ProcessEnv};
pub use error::{ConfigError, ConfigErrors};
pub use mcp_json::parse_mcp_json;
pub use model::{
    Anonymous, Audit, Auth, Config, ConfigSource, DEFAULT_ALLOWED_HOSTS, DEFAULT_BODY_READ_TIMEOUT,
    DEFAULT_CACHED_KEYS, DEFAULT_CALL_TIMEOUT, DEFAULT_CLOCK_SKEW, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_IDENTITY_CLAIM, DEFAULT_LEASE, DEFAULT_MAX_CONCURRENT_CALLS_PER_KEY,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_KEY,
    DEFAULT_MAX_STEPS, DEFAULT_NOTIFY_DEBOUNCE, DEFAULT_PLAN_TTL, DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TOOL_PREFIX, GatewaySettings, Introspection, LandsOnSetting, MAX_BODY_READ_TIMEOUT,
    MAX_CACHED_KEYS, MAX_CALL_TIMEOUT, MAX_CONCURRENT_CALLS_LIMIT, MAX_LEASE, MAX_PLAN_TTL,
    MAX_REQUEST_BYTES_LIMIT, MAX_SESSIONS_LIMIT, MAX_STEPS_LIMIT, MAX_UNDO_TTL, Namespace,
    NotifyTarget, OAuth, OAuthGrant, RateLimit, Redaction, ToolOverride, Transport, UpstreamConfig,
    UpstreamOAuth, UpstreamProtocol,
};
pub use toml_file::parse_toml;

/// Reads and validates a `plangate.toml`. The path is made absolute first, so
/// relative `cwd`s resolve against the file's real directory and messages
/// name the file unambiguously.
pub fn load_toml(path: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let (origin, text) = read(path)?;
    parse_toml(&text, &origin, env)
}

/// Reads and validates an MCP client's JSON config (`--mcp-config`), like
/// [`load_toml`].
pub fn load_mcp_json(path: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let (origin, text) = read(path)?;
    parse_mcp_json(&text, &origin, env)
}

fn read(path: &Path) -> Result<(PathBuf, String), ConfigErrors> {
    let origin = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match std::fs::read_to_string(&origin) {
        Ok(text) => Ok((origin, text)),
        Err(e) => Err(ConfigErrors::single(
            origin,
            "",
            format!("cannot read config file: {}", e.to_string().to_lowercase()),
        )),
    }
}
