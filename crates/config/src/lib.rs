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
//! # Configuration reference
//!
//! ## `plangate.toml`
//!
//! ```toml
//! [gateway]
//! anonymous = "none"
//! allowed_hosts = ["localhost", "127.0.0.1", "::1"]
//! namespace = "auto"
//! tool_prefix = "plangate_"
//!
//! [upstreams.site]
//! command = "node"
//! args = ["server.js"]
//! env = { API_TOKEN = "${env:MY_TOKEN}" }
//! cwd = "/srv/site"
//! trust_annotations = true
//! enabled = true
//!
//! [upstreams.site.tools.update_page]
//! effect = "write"
//! enabled = true
//!
//! [upstreams.docs]
//! url = "https://docs.example.com/mcp"
//! headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
//! ```
//!
//! Every key is optional except where noted. An unknown key or table
//! anywhere is an error that lists the keys allowed there, so a misspelt
//! setting is never silently ignored.
//!
//! ### `[gateway]`
//!
//! | key | values | default | meaning |
//! |---|---|---|---|
//! | `anonymous` | `"none"`, `"read"` | `"none"` | what a caller with no API key may do; it can never plan |
//! | `allowed_hosts` | list of host names | `["localhost", "127.0.0.1", "::1"]` | `Host` headers accepted by `serve --http` (DNS-rebinding protection); bare host names, no scheme or path, compared lowercase; must not be empty |
//! | `namespace` | `"auto"`, `"always"` | `"auto"` | `auto`: tools are exposed as `NAME__tool` only while more than one upstream is enabled; `always`: always |
//! | `tool_prefix` | string | `"plangate_"` | prefix of the gateway's own tools: 2–17 characters, lowercase letters, digits and `_`, starting with a letter, ending with `_`, never `__` |
//!
//! ### `[upstreams.NAME]`
//!
//! At least one upstream is required. `NAME` is 1–24 characters of
//! `A-Z a-z 0-9 - _`, starts with a letter or digit, does not end with `_`
//! and never contains `__` (see `plangate_core::names`). Each upstream has
//! exactly one of `command` (a stdio server plangate starts as a child
//! process) or `url` (a Streamable HTTP server).
//!
//! | key | applies to | values | default | meaning |
//! |---|---|---|---|---|
//! | `command` | stdio | string | — | program to run, looked up on `PATH` |
//! | `args` | stdio | list of strings | `[]` | its arguments |
//! | `env` | stdio | table of strings | `{}` | variables added to its environment |
//! | `cwd` | stdio | path | plangate's | working directory; a relative path is relative to the config file's directory |
//! | `url` | http | `http://` or `https://` URL | — | the Streamable HTTP endpoint |
//! | `headers` | http | table of strings | `{}` | headers sent with every request |
//! | `trust_annotations` | both | bool | `true` for stdio, `false` for url | whether the server's tool annotations decide effect classes |
//! | `enabled` | both | bool | `true` | `false`: not started, not offered |
//! | `tools` | both | table of tables | `{}` | per-tool overrides, below |
//!
//! Keys of the other transport (`headers` on a stdio upstream; `args`,
//! `env`, `cwd` on a url upstream) are errors.
//!
//! ### `[upstreams.NAME.tools.TOOL]`
//!
//! `TOOL` is the upstream's own tool name (not the exposed `NAME__TOOL`).
//!
//! | key | values | default | meaning |
//! |---|---|---|---|
//! | `effect` | `"read"`, `"write"`, `"destructive"` | from annotations or the spec default | a trusted effect class; wins over annotations |
//! | `enabled` | bool | `true` | `false`: the tool is not offered and calls to it are refused |
//!
//! A tool's effect is, in order: this override; else its annotations if
//! the upstream is trusted (`readOnlyHint: true` ⇒ read, `destructiveHint:
//! false` ⇒ write, else destructive); else destructive.
//!
//! ## `--mcp-config FILE` (JSON from other MCP clients)
//!
//! Accepted as the other clients write them, with `[gateway]` defaults:
//!
//! ```json
//! {
//!   "mcpServers": {
//!     "filesystem": {
//!       "command": "npx",
//!       "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"],
//!       "env": { "LOG_LEVEL": "info" }
//!     },
//!     "docs": { "type": "http", "url": "https://docs.example.com/mcp",
//!               "headers": { "Authorization": "Bearer ${env:DOCS_TOKEN}" } }
//!   }
//! }
//! ```
//!
//! * Top-level `mcpServers` (Claude Desktop, Cursor, Claude Code), `servers`
//!   (VS Code `mcp.json`) or `mcp.servers` (VS Code `settings.json`). Other
//!   top-level keys (`inputs`, `preferences`, …) are ignored. `//` and
//!   `/* */` comments and trailing commas are accepted, as VS Code accepts
//!   them.
//! * Per server: `command`, `args`, `env`, `cwd`, `url`, `headers`, `type`
//!   (or Cursor's `transport`) and `disabled` are read; other fields
//!   (`autoApprove`, `alwaysAllow`, `timeout`, `description`, …) are
//!   ignored. `"disabled": true` disables the upstream.
//! * `type`: `"stdio"`; `"http"`, `"streamable-http"` or `"streamableHttp"`
//!   for Streamable HTTP. Without a type, `command` means stdio and `url`
//!   means Streamable HTTP.
//! * Not supported, each an error: legacy SSE (`"type": "sse"`, or a url
//!   ending in `/sse` with no type — use the server's Streamable HTTP
//!   endpoint); `envFile`; `${input:…}` prompts.
//! * Server names must satisfy the upstream name rule above; plangate never
//!   renames a server, so a bad name is an error naming it.
//! * `trust_annotations` takes its transport's default; there are no
//!   per-tool overrides (use `plangate.toml` for those).
//!
//! ## Variables
//!
//! Every string value of an upstream (`command`, `args`, `env` and `headers`
//! values, `cwd`, `url`) and each of `gateway.allowed_hosts` is expanded:
//!
//! * `${VAR}` or `${env:VAR}`: the environment variable `VAR`. An unset
//!   variable is an error naming the file, the key and the variable — never
//!   an empty string.
//! * `${VAR:-default}`, `${env:VAR:-default}`: `default` when `VAR` is unset
//!   or empty.
//! * `$${` is a literal `${`; any other `$` is literal.
//! * `${input:…}` and other `${kind:…}` forms are errors.
//!
//! ## Errors
//!
//! One line per mistake, `FILE: KEY: MESSAGE`, then a count:
//!
//! ```text
//! /etc/plangate.toml: gateway.anonymous: anonymous "public" is not allowed: use "none" or "read"
//! /etc/plangate.toml: upstreams.site.comand: unknown key "comand": allowed keys are command, args, env, cwd, url, headers, trust_annotations, enabled and tools
//! 2 errors in configuration
//! ```
//!
//! ## Secrets
//!
//! `env` and `headers` values often hold tokens. [`Transport`]'s `Debug`
//! and `Serialize` (and so `plangate config check --json`) show them as
//! `"[redacted]"`, along with URL passwords, secret-looking URL query
//! values and `--token VALUE`-style arguments.

mod check;
mod env;
mod error;
mod mcp_json;
mod model;
mod toml_file;

use std::path::{Path, PathBuf};

pub use env::{Env, ProcessEnv};
pub use error::{ConfigError, ConfigErrors};
pub use mcp_json::parse_mcp_json;
pub use model::{
    Anonymous, Config, ConfigSource, DEFAULT_ALLOWED_HOSTS, DEFAULT_TOOL_PREFIX, GatewaySettings,
    Namespace, ToolOverride, Transport, UpstreamConfig,
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
