//! The command line: every command, flag and argument (clap), parsed and
//! checked before anything runs. What each does is in the modules that
//! `main` hands the parsed values to.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod logs;
mod notify;
mod people;
mod since;

pub(crate) use logs::{AuditCommand, Held, ToolsCommand};
pub(crate) use notify::NotifyCommand;
pub(crate) use people::{ApprovalsCommand, FactorArgs, KeysCommand, OperatorCommand, ScopeArg};

#[derive(Parser, Debug)]
#[command(
    name = "plangate",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("PLANGATE_COMMIT"), ")"),
    about = "An MCP gateway that gives any MCP server an enforced plan mode."
)]
pub(crate) struct Cli {
    /// Where plangate keeps its SQLite database and key files.
    #[arg(long, global = true, env = "PLANGATE_DATA_DIR", value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// The database instead of the data dir's SQLite file: a
    /// `postgres://USER:PASSWORD@HOST:PORT/DB` URL (replicas share it), a
    /// sqlite:PATH URL or a file path. Key files stay in the data dir unless
    /// PLANGATE_SEAL_KEY, PLANGATE_SIGNING_KEY and PLANGATE_LOG_KEY are set.
    #[arg(
        long,
        global = true,
        env = "PLANGATE_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) database: Option<String>,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Serve MCP clients (stdio unless --http is given).
    Serve(ServeArgs),
    /// Serve the web console (and its operator API) from the data dir or
    /// database, with no MCP endpoint and no upstream started: where a
    /// person reviews the plans of agents whose plangate runs over stdio
    /// (`wrap`). Approve, reject, amend and discard here; the agent's
    /// gateway runs approved steps at its next apply_plan, and its answers
    /// name this console. With --apply the console starts the config's
    /// servers too, so Apply runs steps here (a second copy of each server
    /// beside the agent's).
    Console(ConsoleArgs),
    /// Bridge a stdio MCP client to a plangate serving HTTP — a service of
    /// its own user (`plangate service install`): every message passes
    /// unchanged, PLANGATE_KEY goes as the bearer, and the data dir stays
    /// with the service.
    Connect {
        /// The service's MCP endpoint, e.g. http://127.0.0.1:7070/mcp.
        #[arg(long, value_name = "URL")]
        url: String,
    },
    /// Run plangate as a service of its own OS user, so an agent's user
    /// cannot reach its data dir (keys, log key, factor secrets).
    #[command(subcommand)]
    Service(ServiceCommand),
    /// Create, list and revoke API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Operators: the web console's tokens, and the people enrolled with a
    /// factor for their yes.
    #[command(subcommand)]
    Operator(OperatorCommand),
    /// What a yes needs (a factor only a person holds), kept in the store.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Check configuration and show every tool's effect class.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Run the demo website as an MCP server (the embedded demo upstream).
    DemoSite(DemoSiteArgs),
    /// Put plangate in front of the MCP servers a client (Claude Desktop,
    /// Cursor, Claude Code, VS Code) already has: they move into a plangate
    /// config, and the client's file gets one entry that starts plangate
    /// with a new key. `--dry-run` shows both changes first; `plangate
    /// unwrap` puts the file back.
    Wrap {
        #[command(flatten)]
        target: WrapTarget,
        /// The scope of the key the client gets.
        #[arg(long, value_enum, default_value = "plan")]
        scope: ScopeArg,
        /// The key's name (default: the client's, e.g. `cursor`).
        #[arg(long, value_name = "NAME")]
        key_name: Option<String>,
        /// Where the plangate config goes (default: DATA_DIR/wrapped/).
        #[arg(long, value_name = "FILE", conflicts_with = "service")]
        to: Option<PathBuf>,
        /// Move the servers into the plangate service at URL (`plangate
        /// service install`, e.g. http://127.0.0.1:7070) instead: its config
        /// gets them, the service makes the key, and the client's entry runs
        /// `plangate connect`. Run with sudo (the service's config is
        /// root's); needs an operator token (PLANGATE_OPERATOR_TOKEN, else
        /// asked).
        #[arg(long, value_name = "URL")]
        service: Option<String>,
        /// The service's config (default: the one `plangate service
        /// install` wrote, /etc/plangate/plangate.toml).
        #[arg(long, value_name = "FILE", requires = "service")]
        service_config: Option<PathBuf>,
        /// Print the diff of both files; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Take plangate out again: the client's file gets back exactly what
    /// `wrap` found (or, when the client changed the file since, its
    /// servers, keeping the rest), and the key wrap created is revoked
    /// (--keep-key keeps it). The plangate config stays.
    Unwrap {
        #[command(flatten)]
        target: WrapTarget,
        /// Restore the original even though the server map was changed
        /// since wrap (the current file is saved beside it first).
        #[arg(long)]
        force: bool,
        /// Keep the key wrap created (by default unwrap revokes it: nothing
        /// uses it once the client's file is back).
        #[arg(long)]
        keep_key: bool,
    },
    /// Print the shell completion script: `source <(plangate completions
    /// bash)`, or save it where your shell loads completions from.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one page per command into
    /// --dir: `plangate man | man -l -`.
    Man {
        /// Write plangate.1 and a page per subcommand here instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// A counting MCP server for race and crash trials: records every
    /// delivery of its `bump` tool in a log file (stdio only).
    #[command(hide = true)]
    CountingUpstream {
        /// The log file deliveries are appended to.
        #[arg(long, value_name = "FILE")]
        log: PathBuf,
    },
    /// Set a key's mode from outside the agent.
    #[command(subcommand)]
    Mode(ModeCommand),
    /// Look at and act on keys' plans as a person (operator).
    #[command(subcommand)]
    Plans(PlansCommand),
    /// Try the operator's rules (`[[rules]]`) on a call without making it.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Review pinned tool definitions: list, accept or reject quarantined ones.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Export the event log, check that nobody changed it (verify), and print the key that signs it.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Sign in to upstreams behind OAuth.
    #[command(subcommand)]
    Upstream(UpstreamCommand),
    /// Check a `[[notify]]` receiver (test) and see what was delivered (list).
    #[command(subcommand)]
    Notify(NotifyCommand),
    /// See plan mode work, start to finish, in one offline run (a temporary
    /// data dir and a fresh demo site; nothing of yours is touched).
    Demo {
        /// Print every answer as one JSON line instead of the narrated story.
        #[arg(long)]
        json: bool,
    },
    /// Print the credential-free MCP contract: capabilities, every gateway
    /// tool with its schema and `_meta`, the plan review view resource and
    /// digests (no key, data dir or upstream needed; deterministic).
    Catalog {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// Print the contract as canonical JSON.
        #[arg(long, conflicts_with = "html")]
        json: bool,
        /// Print an offline HTML review page (with the view's source, escaped).
        #[arg(long)]
        html: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum PlansCommand {
    /// Every key with a plan: mode, waiting/running/failed/in-doubt steps,
    /// expiry and digest.
    List {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One key's plan, step by step, as `get_plan` shows it.
    Show {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// What changed in a key's plan since a revision: steps planned since
    /// and steps whose status changed (by default since the revision the
    /// last recorded review saw). Needs only the data dir (or database).
    Diff {
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// The revision to compare from (`plans show` prints the current
        /// one); default: the one the last review saw, else 0 (the whole
        /// plan).
        #[arg(long, value_name = "REV")]
        since: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Say no to one waiting step, with a reason: it never runs, leaves the
    /// plan digest (approve the rest), and the agent reads the reason
    /// verbatim in get_plan and every apply answer. Needs only the data
    /// dir (or database).
    Reject(PlanReject),
    /// Change a waiting step's arguments: it keeps its id and position, is
    /// checked against the tool's schema and previewed again (so the
    /// upstreams are started), and an approval that covered it no longer
    /// does. `"[redacted]"` in the new arguments keeps the sealed value.
    Amend {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// The waiting step's id (from `plans show`).
        step: String,
        /// The new arguments, a JSON object (`plans show --json` prints the
        /// current ones).
        #[arg(long, value_name = "JSON")]
        arguments: String,
        /// The plan revision you looked at (`plans show`): refused
        /// (plan_changed) if someone amended the step after it.
        #[arg(long, value_name = "REV")]
        revision: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Discard the named steps (waiting, failed or in doubt), or every
    /// waiting step if none is named.
    Discard {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// Step ids (from `plans show`).
        steps: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run an in-doubt step again, now, exactly that step: a person's
    /// explicit retry (its request may have reached the server before).
    Retry {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// The in-doubt step's id.
        step: String,
        /// Print the receipt as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        factor: FactorArgs,
    },
    /// Plan the undo of applied steps: every step of the key's last apply,
    /// or the named applied steps. Each gets an inverse step in the key's
    /// plan (its server's own tools writing back what the step replaced),
    /// waiting for a person's yes like any step; a target changed since
    /// the apply gets none (the later change stays), and what the server's
    /// tools cannot undo (a file the step created) is said with why.
    Revert {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// Applied steps to revert (default: every step of the last apply).
        steps: Vec<String>,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Record a person's yes to waiting steps of a key's plan, without
    /// applying them: every waiting step, or only the named ones. The yes
    /// binds exactly those steps (their digest): it holds while they are
    /// unchanged, and the agent's apply_plan then runs them (a `plan`-scope
    /// key's plan runs only approved steps). As the operator, or — with
    /// PLANGATE_KEY set to a `write` key — as that key. Needs only the
    /// data dir (or database); the config, read as `plans show` reads it
    /// when it loads, says whether a lock holds the key.
    Approve(PlanYes),
    /// Say yes to a key's plan and apply it now (every waiting step, or
    /// the named waiting or failed ones); prints the receipt.
    Apply(PlanApply),
}

/// Where a `plans` verb acts: the data dir (default), or a running
/// plangate's operator API.
#[derive(Args, Debug, Default)]
pub(crate) struct RemoteArgs {
    /// Act through the operator API of the plangate running at URL (e.g.
    /// http://127.0.0.1:7070: `plangate serve --http`, or the service
    /// `plangate service install` set up) instead of the data dir, with an
    /// operator token from PLANGATE_OPERATOR_TOKEN (else asked on the
    /// terminal).
    #[arg(long, env = "PLANGATE_SERVER", value_name = "URL")]
    pub(crate) server: Option<String>,
}

impl PlansCommand {
    /// The server a verb acts through, when `--server` (or
    /// PLANGATE_SERVER) names one and the verb can.
    pub(crate) fn server(&self) -> Option<&str> {
        let remote = match self {
            PlansCommand::List { remote, .. }
            | PlansCommand::Show { remote, .. }
            | PlansCommand::Reject(PlanReject { remote, .. })
            | PlansCommand::Discard { remote, .. }
            | PlansCommand::Retry { remote, .. }
            | PlansCommand::Revert { remote, .. } => remote,
            PlansCommand::Approve(yes) | PlansCommand::Apply(PlanApply { yes, .. }) => &yes.remote,
            PlansCommand::Amend { .. } | PlansCommand::Diff { .. } => return None,
        };
        remote.server.as_deref()
    }
}

/// A person's yes to a key's plan (`plans approve`, `plans apply`): the
/// same flags, bound the same way to the plan the person saw.
#[derive(Args, Debug)]
pub(crate) struct PlanYes {
    #[command(flatten)]
    pub(crate) source: ConfigSourceArgs,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
    /// The key whose plan it is (name or id).
    #[arg(long)]
    pub(crate) key: String,
    /// The plan digest you reviewed (`plans show`); nothing is recorded or
    /// run if the plan changed since. Without it, the steps are shown and
    /// you are asked on the terminal (y/N); with no terminal, nothing is
    /// approved and nothing runs.
    #[arg(long, value_name = "DIGEST")]
    pub(crate) digest: Option<String>,
    /// Only these steps (ids from `plans show`): waiting ones to approve;
    /// waiting or failed ones to apply, in plan order.
    pub(crate) steps: Vec<String>,
    /// Print JSON instead of text (for apply, the receipt).
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) factor: FactorArgs,
}

/// `plans reject`: a person's no to one waiting step, with the reason
/// its agent reads.
#[derive(Args, Debug)]
pub(crate) struct PlanReject {
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
    /// The key's name or id.
    #[arg(long)]
    pub(crate) key: String,
    /// The waiting step's id (from `plans show`).
    pub(crate) step: String,
    /// Why, in words for the agent (at most 2000 characters).
    #[arg(long)]
    pub(crate) reason: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `plans apply`: a yes, and whether a partial apply is meant.
#[derive(Args, Debug)]
pub(crate) struct PlanApply {
    #[command(flatten)]
    pub(crate) yes: PlanYes,
    /// Go on when the steps this apply runs leave waiting steps tied to
    /// them (the same target, or a name they move or remove); without it
    /// such an apply is refused, listing them, and nothing runs.
    #[arg(long)]
    pub(crate) partial: bool,
    /// Run every step even when one fails or is stale (a revert's steps
    /// are independent of each other); without it the apply stops at the
    /// first failure and the steps after it stay waiting.
    #[arg(long = "continue")]
    pub(crate) go_on: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum UpstreamCommand {
    /// Sign plangate in to an upstream behind OAuth (`[upstreams.NAME.oauth]`):
    /// prints the URL to open in a browser, waits for the authorization
    /// server to send the browser back to a port on this machine, and
    /// seals the tokens into the data dir (or database), where every
    /// `plangate serve` of it finds them and refreshes them.
    Login {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// The upstream's name in the config.
        name: String,
        /// How long to wait for the browser to come back, e.g. "5m".
        #[arg(long, default_value = "5m", value_parser = parse_wait)]
        timeout: std::time::Duration,
        /// A scope to ask for besides the configured (or discovered) ones
        /// and those granted at the last sign-in — the step-up an upstream
        /// asked for with 403 insufficient_scope. Repeatable.
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
    },
    /// Print the Client ID Metadata Document to serve at URL, the
    /// `client_metadata_url` of `[upstreams.NAME.oauth]`: with it, an
    /// authorization server that supports such documents knows plangate
    /// by that URL, without registering a client at each sign-in.
    ClientMetadata {
        /// The https URL the document will be served at (its client id).
        url: String,
    },
    /// Forget an upstream's OAuth tokens (the authorization server may
    /// still hold its grant: revoke it there too).
    Logout {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// The upstream's name in the config.
        name: String,
    },
}

fn parse_wait(text: &str) -> Result<std::time::Duration, String> {
    plangate_config::parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration like \"5m\" or \"90s\""))
}

#[derive(Subcommand, Debug)]
pub(crate) enum PolicyCommand {
    /// What a call would come to — the rule that decides it (if any) and
    /// the decision — with the key's mode in force now; nothing is called.
    /// The tool's effect class is the gateway's: the upstreams are
    /// connected and list their tools (none is called), else the pinned
    /// definition, else `--effect`.
    Test {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// The key whose call it is (name or id).
        #[arg(long)]
        key: String,
        /// The tool as the agent calls it (`write_file`, or `fs__write_file`
        /// when tools are namespaced).
        #[arg(long)]
        tool: String,
        /// The call's arguments, a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        arguments: String,
        /// The tool's effect class (then no upstream is contacted).
        #[arg(long, value_parser = ["read", "write", "destructive"])]
        effect: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Ask the running gateway (its rules as it runs them, its
        /// connected upstreams) instead of reading the config file.
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ModeCommand {
    /// Set the mode of a key, and lock or unlock it; in force at the key's
    /// next call, and told to its agent once.
    ///
    /// A locked key's agent cannot change its mode, end its session or
    /// leave plan mode, and its plans run only after a person approves
    /// them (as for a `plan`-scope key).
    Set {
        #[command(flatten)]
        source: ConfigSourceArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// The mode: `default`, `plan` or one defined in the config. May be
        /// left out with --unlock (the key keeps its mode).
        #[arg(required_unless_present = "unlock")]
        mode: Option<String>,
        /// Lock the key in this mode: only an operator can change it.
        #[arg(long, conflicts_with = "unlock")]
        lock: bool,
        /// Unlock the key: its agent may change its mode again (also frees
        /// it from `[gateway] default_mode_locked`).
        #[arg(long)]
        unlock: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        factor: FactorArgs,
    },
}

/// Which client file `wrap` and `unwrap` work on.
#[derive(Args, Debug)]
pub(crate) struct WrapTarget {
    /// The client's config file.
    #[arg(long, value_name = "FILE")]
    pub(crate) from: Option<PathBuf>,
    /// The client, to find its file in its documented place:
    /// claude-desktop, cursor, claude-code or vscode (default: whichever
    /// one has servers).
    #[arg(long, value_name = "CLIENT", conflicts_with = "from", value_parser = ["claude-desktop", "cursor", "claude-code", "vscode"])]
    pub(crate) client: Option<String>,
    /// The project whose files (.mcp.json, .cursor/mcp.json,
    /// .vscode/mcp.json, or its entry in ~/.claude.json) are meant
    /// (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) project: Option<PathBuf>,
}

/// Where the upstream configuration comes from.
#[derive(Args, Debug, Clone)]
pub struct ConfigSourceArgs {
    /// plangate.toml to load (default: ./plangate.toml if present, else the
    /// embedded demo site).
    #[arg(
        long,
        env = "PLANGATE_CONFIG",
        value_name = "FILE",
        conflicts_with = "mcp_config"
    )]
    pub(crate) config: Option<PathBuf>,
    /// A Claude Desktop / Cursor `mcpServers` or VS Code `servers` JSON file,
    /// used as-is.
    #[arg(long, value_name = "FILE")]
    pub(crate) mcp_config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) source: ConfigSourceArgs,
    /// Serve over stdin/stdout (the default).
    #[arg(long, conflicts_with = "http")]
    pub(crate) stdio: bool,
    /// Serve Streamable HTTP at http://ADDR/mcp, e.g. 127.0.0.1:7070.
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<String>,
    /// Serve the operator MCP endpoint over stdin/stdout instead: for a
    /// person's own assistant (e.g. Claude Desktop) to read plans and ask
    /// them, in a form, for each yes. Acts as the holder of the operator
    /// token in PLANGATE_OPERATOR_TOKEN.
    #[arg(long, conflicts_with_all = ["http", "stdio"])]
    pub(crate) operator_stdio: bool,
    /// Reload the config whenever its file changes (checked every second),
    /// as `SIGHUP` always does: upstreams added, removed or changed are
    /// started, stopped or restarted; a file with mistakes is refused and
    /// the running config stays.
    #[arg(long)]
    pub(crate) watch_config: bool,
}

#[derive(Args, Debug)]
pub(crate) struct ConsoleArgs {
    #[command(flatten)]
    pub(crate) source: ConfigSourceArgs,
    /// Serve the console at http://ADDR/console.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7071")]
    pub(crate) http: String,
    /// Start the config's servers, so the console's Apply and Retry run
    /// steps here.
    #[arg(long)]
    pub(crate) apply: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ConfigCommand {
    /// Load the config, connect to every upstream and print each tool's
    /// effect class and where it came from.
    Check {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub(crate) struct DemoSiteArgs {
    /// The site's state file (created with demo content if missing).
    #[arg(long, value_name = "FILE")]
    pub(crate) state: Option<PathBuf>,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<String>,
}

/// `plangate service …`.
#[derive(Subcommand, Debug)]
pub(crate) enum ServiceCommand {
    /// Install plangate as a systemd service (Linux) or a LaunchDaemon
    /// (macOS) of its own user, serving HTTP on loopback: creates the user,
    /// an owner-only data dir, a starter config and the unit, and starts
    /// it. As root; --dry-run prints the unit and every command instead.
    Install {
        /// The service's OS user (created when missing).
        #[arg(long, default_value = "plangate")]
        user: String,
        /// Where it listens (loopback only).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7070")]
        listen: String,
        /// Print the unit and the commands; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Enable the unit but do not start it.
        #[arg(long)]
        no_start: bool,
    },
}
