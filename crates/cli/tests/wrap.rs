//! `plangate wrap` and `unwrap` on real client files in a scratch home
//! directory — Claude Desktop, Cursor, Claude Code (`.mcp.json` and
//! `~/.claude.json`), VS Code (JSONC) — each with fields plangate does not
//! know: the dry run shows both diffs and changes nothing; after `wrap`
//! the official Python SDK, started from the rewritten entry as the client
//! would start it, reaches server-filesystem through plangate (a write is
//! planned); `unwrap` puts the file back byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

/// A scratch home with a project directory; every command runs with HOME
/// pointing here and the project as its directory.
struct Home {
    scratch: Scratch,
}

impl Home {
    fn new() -> Home {
        let scratch = Scratch::new();
        std::fs::create_dir_all(scratch.path().join("home")).unwrap();
        std::fs::create_dir_all(scratch.path().join("project/files")).unwrap();
        Home { scratch }
    }
    fn home(&self) -> PathBuf {
        self.scratch.path().join("home")
    }
    fn project(&self) -> PathBuf {
        self.scratch.path().join("project")
    }
    fn data_dir(&self) -> PathBuf {
        self.scratch.data_dir()
    }
    /// Writes `text` at `rel` (under the scratch dir), making directories.
    fn file(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.scratch.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
    /// Writes `template` at `rel` with `{fs}` in it replaced by
    /// server-filesystem's entry on the project's `files`.
    fn fs_file(&self, rel: &str, template: &str) -> PathBuf {
        let entry = filesystem_entry(&self.project().join("files"));
        self.file(rel, &template.replace("{fs}", &entry))
    }
    /// `wrap --client CLIENT --dry-run`, which must find the client's file
    /// in its documented place (no `--from`) and succeed: what it shows.
    fn dry_run(&self, client: &str) -> String {
        let out = self.plangate(&["wrap", "--client", client, "--dry-run"]);
        assert!(out.status.success(), "{}", stderr(&out));
        // The diffs are lines of their own, not one screened line.
        let shown = stdout(&out);
        assert!(
            shown.lines().count() > 3 && !shown.contains("hidden characters"),
            "{shown}"
        );
        shown
    }
    fn plangate(&self, args: &[&str]) -> Output {
        Command::new(plangate())
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(args)
            .current_dir(self.project())
            .env("HOME", self.home())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("PLANGATE_CONFIG")
            .env_remove("PLANGATE_KEY")
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let out = self.plangate(args);
        assert!(
            out.status.success(),
            "plangate {args:?}:\n{}\n{}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    }
}

/// A file's permission bits.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Sets a file's permission bits.
fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// server-filesystem's entry as a client file writes it, on `dir`.
fn filesystem_entry(dir: &Path) -> String {
    let js = peers().js("@modelcontextprotocol/server-filesystem/dist/index.js");
    format!(
        r#"{{"command": "node", "args": [{:?}, {:?}], "env": {{"LOG_LEVEL": "${{LOG_LEVEL:-info}}"}}, "autoApprove": ["read_file"]}}"#,
        js.display().to_string(),
        dir.display().to_string()
    )
}

/// Starts the client file's plangate entry (at `key_path`) with the Python
/// SDK, as the client would, lists tools and asks to write a file.
fn agent_through_entry(file: &Path, key_path: &[&str], target: &Path) -> Value {
    let script = peers().interop.join("client_entry.py");
    let arguments = serde_json::json!({"path": target.display().to_string(), "content": "hello"});
    let out = Command::new(&peers().python)
        .arg(script)
        .arg(file)
        .arg(serde_json::to_string(key_path).unwrap())
        .arg("write_file")
        .arg(arguments.to_string())
        .env_remove("PLANGATE_CONFIG")
        .env_remove("PLANGATE_DATA_DIR")
        // What the client's own environment would hold for `${env:…}`.
        .env("DOCS_TOKEN", "docs-token-value")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    serde_json::from_str(stdout(&out).trim()).unwrap()
}

/// The whole round on one file: dry run, wrap, an agent through the
/// rewritten entry, unwrap to the same bytes.
fn round_trip(home: &Home, file: &Path, key_path: &[&str], extra: &[&str]) -> String {
    set_mode(file, 0o644);
    let before = std::fs::read(file).unwrap();
    let from = file.to_str().unwrap();

    let mut args = vec!["wrap", "--from", from, "--dry-run"];
    args.extend_from_slice(extra);
    let out = home.plangate(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let diff = stdout(&out);
    assert!(diff.contains(&format!("--- {from}")), "{diff}");
    assert!(
        diff.contains("+++ /dev/null") || diff.contains("--- /dev/null"),
        "{diff}"
    );
    assert!(diff.contains("+[upstreams.fs]"), "{diff}");
    assert!(diff.contains("<a new plan key, made by wrap>"), "{diff}");
    assert!(stderr(&out).contains("dry run: nothing was changed"));
    assert_eq!(
        std::fs::read(file).unwrap(),
        before,
        "the dry run changed nothing"
    );
    assert!(!home.data_dir().join("wrapped").exists());

    let mut args = vec!["wrap", "--from", from];
    args.extend_from_slice(extra);
    let said = home.ok(&args);
    assert!(said.contains("now run behind plangate"), "{said}");
    assert_eq!(mode(file), 0o600, "the file holds a key now");
    assert!(
        said.contains("only its owner may read it (0600; it was 0644"),
        "{said}"
    );
    let config = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("plangate config: "))
        .unwrap()
        .to_owned();
    let toml = std::fs::read_to_string(&config).unwrap();
    assert!(
        toml.contains("LOG_LEVEL = \"${LOG_LEVEL:-info}\""),
        "references stay: {toml}"
    );

    let target = home.project().join("files/new.txt");
    let seen = agent_through_entry(file, key_path, &target);
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"write_file") && tools.contains(&"read_text_file"),
        "{seen}"
    );
    assert!(tools.contains(&"plangate_get_plan"), "{seen}");
    assert!(
        seen["text"].as_str().unwrap().contains("Planned, not run"),
        "{seen}"
    );
    assert!(!target.exists(), "a plan key's write waits for a person");

    let again = home.plangate(&["wrap", "--from", from]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("plangate does not wrap itself"),
        "{}",
        stderr(&again)
    );

    let said = home.ok(&["unwrap", "--from", from]);
    assert!(said.contains("byte for byte"), "{said}");
    assert!(said.contains("wrap created is revoked"), "{said}");
    assert_eq!(
        std::fs::read(file).unwrap(),
        before,
        "unwrap restores the bytes"
    );
    assert_eq!(mode(file), 0o644, "and the permissions");
    config
}

#[test]
fn claude_desktop_round_trips_with_unknown_fields_kept() {
    let home = Home::new();
    let file = home.fs_file(
        "home/.config/Claude/claude_desktop_config.json",
        "{\n  \"mcpServers\": {\n    \"fs\": {fs}\n  },\n  \"globalShortcut\": \"Ctrl+Space\"\n}\n",
    );
    // Found in its documented place without --from too.
    home.dry_run("claude-desktop");
    round_trip(&home, &file, &["mcpServers", "plangate"], &[]);
}

#[test]
fn a_cursor_project_file_keeps_references_to_secrets_as_references() {
    let home = Home::new();
    let file = home.fs_file(
        "project/.cursor/mcp.json",
        r#"{
  "mcpServers": {
    "fs": {fs},
    "docs": {"url": "https://docs.example.com/mcp", "headers": {"Authorization": "Bearer ${env:DOCS_TOKEN}"}, "disabled": true}
  }
}
"#,
    );
    let config = round_trip(&home, &file, &["mcpServers", "plangate"], &[]);
    let toml = std::fs::read_to_string(config).unwrap();
    assert!(
        toml.contains("Authorization = \"Bearer ${env:DOCS_TOKEN}\""),
        "{toml}"
    );
    assert!(toml.contains("enabled = false"), "{toml}");
}

#[test]
fn a_vs_code_file_with_comments_keeps_them_and_its_inputs() {
    let home = Home::new();
    let text = format!(
        "{{\n\t// the workspace's servers\n\t\"inputs\": [],\n\t\"servers\": {{\n\t\t\"fs\": {},\n\t}}, /* trailing comma above */\n}}\n",
        filesystem_entry(&home.project().join("files"))
            .replace(&home.project().display().to_string(), "${workspaceFolder}")
            .replace("\"command\"", "\"type\": \"stdio\", \"command\"")
    );
    let file = home.file("project/.vscode/mcp.json", &text);
    let out = home.plangate(&["wrap", "--client", "vscode", "--dry-run"]);
    let diff = stdout(&out);
    assert!(
        !diff.contains("-\t// the workspace's servers"),
        "comments stay: {diff}"
    );
    assert!(
        diff.contains(&home.project().join("files").display().to_string()),
        "${{workspaceFolder}} is the workspace: {diff}"
    );
    round_trip(&home, &file, &["servers", "plangate"], &[]);
}

#[test]
fn the_vs_code_user_file_is_found_in_its_place_and_round_trips() {
    let home = Home::new();
    let file = home.fs_file(
        "home/.config/Code/User/mcp.json",
        "{\n  \"servers\": {\n    \"fs\": {fs}\n  }\n}\n",
    );
    let diff = home.dry_run("vscode");
    assert!(diff.contains(&format!("--- {}", file.display())));
    round_trip(&home, &file, &["servers", "plangate"], &[]);
}

#[test]
fn claude_code_project_servers_in_the_home_file_come_back_with_the_clients_own_changes_kept() {
    let home = Home::new();
    let project = home.project().display().to_string();
    let file = home.file(
        "home/.claude.json",
        &format!(
            r#"{{"numStartups": 3, "projects": {{{:?}: {{"allowedTools": [], "mcpServers": {{"fs": {}}}}}}}, "userID": "u"}}"#,
            project,
            filesystem_entry(&home.project().join("files"))
        ),
    );
    round_trip(
        &home,
        &file,
        &["projects", &project, "mcpServers", "plangate"],
        &["--project", &project],
    );

    // Claude Code rewrites its file all the time: after wrap, it did.
    let before = std::fs::read_to_string(&file).unwrap();
    home.ok(&["wrap", "--client", "claude-code"]);
    let wrapped = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        wrapped.replace("\"numStartups\": 3", "\"numStartups\": 4"),
    )
    .unwrap();
    let said = home.ok(&["unwrap", "--client", "claude-code"]);
    assert!(said.contains("other changes since are kept"), "{said}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        before.replace("\"numStartups\": 3", "\"numStartups\": 4")
    );
}

#[test]
fn unwrap_refuses_to_lose_a_changed_server_map_and_force_saves_it_first() {
    let home = Home::new();
    let file = home.fs_file("project/.mcp.json", "{\"mcpServers\": {\"fs\": {fs}}}\n");
    let before = std::fs::read(&file).unwrap();
    home.ok(&["wrap", "--client", "claude-code", "--scope", "write"]);
    let wrapped = std::fs::read_to_string(&file).unwrap();
    assert!(wrapped.contains("\"type\": \"stdio\""), "{wrapped}");
    let edited = wrapped.replace(
        "\"plangate\": {",
        "\"mine\": {\"command\": \"x\"}, \"plangate\": {",
    );
    std::fs::write(&file, &edited).unwrap();

    let out = home.plangate(&["unwrap", "--from", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("changed since wrap"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), edited, "untouched");

    home.ok(&["unwrap", "--from", file.to_str().unwrap(), "--force"]);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    let saved = PathBuf::from(format!("{}.plangate-unwrap-saved", file.display()));
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), edited);
    assert_eq!(mode(&saved), 0o600, "the saved copy holds the key");
}

#[test]
fn servers_plangate_cannot_run_are_refused_with_nothing_changed() {
    let home = Home::new();
    let text = "{\"servers\": {\"gh\": {\"command\": \"npx\", \"env\": {\"T\": \"${input:token}\"}}, \"old\": {\"url\": \"https://x.example/sse\"}}}\n";
    let file = home.file("project/.vscode/mcp.json", text);
    let out = home.plangate(&["wrap", "--from", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(err.contains("servers.gh.env.T"), "{err}");
    assert!(err.contains("servers.old.url"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    assert!(!home.data_dir().join("wrapped").exists());
}

#[test]
fn a_dry_run_shows_env_and_headers_by_name_never_their_values() {
    let home = Home::new();
    let file = home.file(
        "project/.mcp.json",
        r#"{"mcpServers": {
  "gh": {"command": "npx", "args": ["-y", "gh"], "env": {"GITHUB_TOKEN": "ghp_dryRunLiteral0123456789", "LEVEL": "level-seven"}},
  "docs": {"type": "http", "url": "https://docs.example.com/mcp", "headers": {"Authorization": "Bearer docs-literal-secret"}}
}}
"#,
    );
    let out = home.plangate(&["wrap", "--from", file.to_str().unwrap(), "--dry-run"]);
    let (shown, said) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{said}");
    for secret in ["ghp_dryRunLiteral", "docs-literal-secret", "level-seven"] {
        assert!(
            !shown.contains(secret) && !said.contains(secret),
            "{secret} shown:\n{shown}\n{said}"
        );
    }
    assert!(
        shown.contains(r#"-  "gh": {"command": "npx", "args": ["-y", "gh"], "env": {"GITHUB_TOKEN": "[redacted]", "LEVEL": "[redacted]"}},"#),
        "the file's side names the variables: {shown}"
    );
    assert!(
        shown.contains("+GITHUB_TOKEN = \"[redacted]\"")
            && shown.contains("+Authorization = \"[redacted]\""),
        "the config's side too: {shown}"
    );
    assert!(said.contains("written as they are"), "{said}");

    // The wrap itself moves the values as they are.
    let said = home.ok(&["wrap", "--from", file.to_str().unwrap()]);
    let config = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("plangate config: "))
        .unwrap();
    let toml = std::fs::read_to_string(config).unwrap();
    assert!(
        toml.contains("GITHUB_TOKEN = \"ghp_dryRunLiteral0123456789\"")
            && toml.contains("Authorization = \"Bearer docs-literal-secret\""),
        "{toml}"
    );
    assert_eq!(mode(Path::new(config)), 0o600);
}

#[test]
fn a_wrap_that_fails_after_making_its_key_takes_back_the_key_and_the_config() {
    let home = Home::new();
    let file = home.fs_file("project/.mcp.json", "{\"mcpServers\": {\"fs\": {fs}}}\n");
    set_mode(&file, 0o644);
    let before = std::fs::read(&file).unwrap();
    // The data dir exists, but where wrap keeps its records is a file:
    // wrap fails after it has made its key and written its config.
    home.ok(&["keys", "list"]);
    std::fs::write(home.data_dir().join("wrapped"), "not a directory").unwrap();
    let config = home.project().join("plangate.toml");

    let out = home.plangate(&[
        "wrap",
        "--from",
        file.to_str().unwrap(),
        "--to",
        config.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(err.contains("wrap failed, so it was undone"), "{err}");
    assert!(
        err.contains(&format!("{} removed", config.display())),
        "{err}"
    );
    assert!(err.contains("the key \"claude-code\" revoked"), "{err}");
    assert!(!config.exists(), "the config is gone");
    assert_eq!(std::fs::read(&file).unwrap(), before, "the file untouched");
    assert_eq!(mode(&file), 0o644);
    let beside: Vec<_> = std::fs::read_dir(home.project())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("before-plangate"))
        .collect();
    assert!(beside.is_empty(), "no backup left: {beside:?}");
    let keys: Value = serde_json::from_str(&home.ok(&["keys", "list", "--json"])).unwrap();
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        !keys[0]["revoked_at"].is_null(),
        "the key is revoked: {keys:?}"
    );
}
