//! The operator's rules (`[[rules]]`, [`plangate_policy`]) at the gateway's
//! edge: compiled once per config, and what a rule's path check needs from
//! the world — which arguments are paths, and where each lands: how the
//! server places `~` and relative paths (its profile, the directories it
//! lists), and, for a server that is a process on this machine, where
//! symlinks and Unicode spellings lead.
//!
//! Dispatch, apply's re-check and `plangate policy test` all judge a call
//! here ([`call_paths`], then [`judge`]), so they cannot disagree.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use plangate_config::profiles::{path_values, select};
use plangate_config::{Config, Transport};
use plangate_core::Effect;
use plangate_policy::paths::{nfc, place};
use plangate_policy::{Lexical, Matched, PathResolver, Placement, Policy, Unplaced};
use serde_json::Value;

pub use crate::catalog::PathFacts;
use crate::{CatalogTool, Ops};

/// Most symlinks followed while placing one path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Places paths on this machine as server-filesystem does, for an
/// upstream that is a local process (a path in its arguments names a file
/// here): lexically first ([`place`]); then, when the path exists, where
/// its symlinks lead (`realpath`); when it does not (a file about to be
/// written), component by component from the root — an entry of that very
/// name first, else the one entry whose NFC spelling is the component's
/// (two such entries: ambiguous, not placed), each symlink followed —
/// and the part that does not exist yet appended as it is. The result is
/// in NFC, as rules compare.
pub struct LocalFs(pub Placement);

impl PathResolver for LocalFs {
    fn resolve(&self, raw: &str) -> Result<String, Unplaced> {
        let placed = place(raw, &self.0)?;
        let unreadable = |e: std::io::Error| Unplaced::Unreadable {
            path: raw.to_owned(),
            error: e.to_string(),
        };
        match std::fs::canonicalize(&placed) {
            Ok(real) => return Ok(nfc(&real.to_string_lossy())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(unreadable(e)),
        }
        let mut current = PathBuf::from("/");
        let parts: Vec<&str> = placed.split('/').filter(|p| !p.is_empty()).collect();
        let mut links = 0;
        for (i, part) in parts.iter().enumerate() {
            let entry = match entry_named(&current, part).map_err(unreadable)? {
                Named::Exact => OsStr::new(part).to_owned(),
                Named::Equivalent(mut found) if found.len() == 1 => found.remove(0),
                Named::Equivalent(found) if found.is_empty() => {
                    let mut out = current;
                    out.extend(&parts[i..]);
                    return Ok(nfc(&out.to_string_lossy()));
                }
                Named::Equivalent(_) => {
                    return Err(Unplaced::Ambiguous {
                        path: raw.to_owned(),
                        component: (*part).to_owned(),
                    });
                }
            };
            let next = current.join(&entry);
            if next.is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Unplaced::Unreadable {
                        path: raw.to_owned(),
                        error: "too many levels of symbolic links".to_owned(),
                    });
                }
            }
            current = match std::fs::canonicalize(&next) {
                Ok(real) => real,
                // A link to nothing: what it names does not exist yet.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let target = std::fs::read_link(&next).map_err(unreadable)?;
                    let mut out = current.join(target);
                    out.extend(&parts[i + 1..]);
                    let again = out.to_string_lossy().into_owned();
                    return LocalFs(Placement::default()).resolve(&again);
                }
                Err(e) => return Err(unreadable(e)),
            };
        }
        Ok(nfc(&current.to_string_lossy()))
    }
}

/// How a directory holds a path component.
enum Named {
    /// An entry of exactly that name.
    Exact,
    /// The entries whose NFC spelling is the component's (none, one, or
    /// several: ambiguous).
    Equivalent(Vec<std::ffi::OsString>),
}

fn entry_named(dir: &Path, part: &str) -> std::io::Result<Named> {
    let exact = dir.join(part);
    if exact.symlink_metadata().is_ok() {
        return Ok(Named::Exact);
    }
    let want = nfc(part);
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // Not a directory, or gone: nothing below it exists.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound) => {
            return Ok(Named::Equivalent(found));
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Ok(Named::Equivalent(found));
        }
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name();
        if let Ok(text) = std::str::from_utf8(name.as_bytes())
            && nfc(text) == want
        {
            found.push(name);
        }
    }
    Ok(Named::Equivalent(found))
}

/// A call's paths, ready for the rules: their values, and the resolver
/// that places them.
pub struct CallPaths {
    /// The values of the call's path arguments (`paths` in a condition).
    pub values: Vec<String>,
    /// Places each path where the server will act on it.
    pub resolver: Arc<dyn PathResolver>,
}

/// Whether `upstream` is a process on this machine whose paths name files
/// here: a stdio upstream, unless it is started through a container
/// runner (`docker run`, `podman run`, …), whose files are the container's.
pub fn is_local(config: &Config, upstream: &str) -> bool {
    match config.upstreams.get(upstream).map(|u| &u.transport) {
        Some(Transport::Stdio { command, args, .. }) => !is_container_runner(command, args),
        _ => false,
    }
}

/// Container runners whose `run` (or `container run`) starts the server
/// inside a container.
const CONTAINER_RUNNERS: [&str; 6] = ["docker", "podman", "nerdctl", "finch", "lima", "ctr"];

fn is_container_runner(command: &str, args: &[String]) -> bool {
    let program = Path::new(command)
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or(command);
    let program = program.strip_suffix(".exe").unwrap_or(program);
    CONTAINER_RUNNERS.contains(&program) && args.iter().any(|a| a == "run")
}

/// The home directory of `upstream`'s process: `HOME` in its configured
/// environment, else plangate's own (the child inherits it); none for an
/// upstream that is not a local process.
fn home_of(config: &Config, upstream: &str) -> Option<String> {
    if !is_local(config, upstream) {
        return None;
    }
    match config.upstreams.get(upstream).map(|u| &u.transport) {
        Some(Transport::Stdio { env, .. }) => env
            .get("HOME")
            .cloned()
            .or_else(|| std::env::var("HOME").ok()),
        _ => None,
    }
    .filter(|h| h.starts_with('/'))
}

/// The paths of a call of `tool` (on `upstream`, with `facts`) with
/// `arguments`, and how they are placed. When a path is relative and the
/// server resolves relative paths against directories it lists, they are
/// listed now (through `gw`, when it has the upstream connected); a
/// listing that fails leaves such paths unplaced (rules fail closed).
pub async fn call_paths(
    gw: Option<Ops<'_>>,
    config: &Config,
    upstream: &str,
    facts: &PathFacts,
    arguments: &Value,
) -> CallPaths {
    let values = path_values(&facts.pointers, arguments);
    let spec = facts.placement.as_ref();
    let mut placement = Placement {
        home: spec
            .filter(|s| s.home)
            .and_then(|_| home_of(config, upstream)),
        bases: None,
        relative_to_bases: false,
    };
    if let Some(pointer) = &facts.relative_to_argument {
        // The tool's own base (a repository): itself placed first.
        let base = select(arguments, pointer)
            .first()
            .and_then(|v| v.as_str())
            .and_then(|b| place(b, &placement).ok());
        placement.relative_to_bases = true;
        placement.bases = Some(base.into_iter().collect());
    } else if let Some(lister) = spec.and_then(|s| s.relative_to.as_deref()) {
        placement.relative_to_bases = true;
        let needs = values
            .iter()
            .any(|v| !v.starts_with('/') && v != "~" && !v.starts_with("~/"));
        if needs && let Some(gw) = gw {
            placement.bases = list_directories(gw, upstream, lister).await;
        }
    }
    let resolver: Arc<dyn PathResolver> = if is_local(config, upstream) {
        Arc::new(LocalFs(placement))
    } else {
        Arc::new(Lexical(placement))
    };
    CallPaths { values, resolver }
}

/// The directories `upstream` lists with its read tool `lister`: every
/// line of its text answer that is an absolute path. `None` when it cannot
/// be asked or answers an error.
async fn list_directories(gw: Ops<'_>, upstream: &str, lister: &str) -> Option<Vec<String>> {
    let mut params = rmcp::model::CallToolRequestParams::new(lister.to_owned());
    params.arguments = Some(serde_json::Map::new());
    let result = match gw.read(upstream, params).await? {
        Ok(r) if r.is_error != Some(true) => r,
        Ok(_) | Err(_) => {
            tracing::warn!(
                upstream,
                lister,
                "listing the directories relative paths resolve against failed; relative paths are not placed"
            );
            return None;
        }
    };
    let dirs: Vec<String> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .flat_map(|t| {
            t.lines()
                .map(str::trim)
                .filter(|l| l.starts_with('/'))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    Some(dirs)
}

/// Who makes a call, as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    /// The key's name (`""` without a key).
    pub name: &'a str,
    /// The key's scope, or `anonymous`.
    pub scope: &'a str,
}

/// The rule that decides a call of `tool` with `arguments` by `who` in
/// `mode`, if one does — with `undeclared` the top-level arguments its
/// schema does not declare but allows, and `effect` the class the call is
/// judged at.
#[allow(clippy::too_many_arguments)]
pub fn judge<'p>(
    policy: &'p Policy,
    tool: ToolNames<'_>,
    effect: Effect,
    who: Who<'_>,
    mode: &str,
    arguments: &Value,
    undeclared: &[String],
    paths: &CallPaths,
) -> Option<Matched<'p>> {
    let call = plangate_policy::Call {
        key_name: who.name,
        scope: who.scope,
        upstream: tool.upstream,
        tool: tool.tool,
        exposed: tool.exposed,
        effect,
        mode,
        arguments,
        paths: &paths.values,
        undeclared,
    };
    policy.decide(&call, paths.resolver.clone())
}

/// Whether the operator's rules may decide calls of `tool`: rules about
/// other tools (a guard says so) cost nothing.
pub(crate) fn may_rule(gw: Ops<'_>, tool: &CatalogTool) -> bool {
    !gw.policy().is_empty()
        && gw.policy().may_decide(&plangate_policy::Tool {
            upstream: &tool.upstream,
            tool: &tool.original,
            exposed: &tool.exposed,
            effect: tool.effect,
        })
}

/// A tool's three names.
#[derive(Debug, Clone, Copy)]
pub struct ToolNames<'a> {
    /// The upstream.
    pub upstream: &'a str,
    /// The upstream's own name.
    pub tool: &'a str,
    /// The name the agent calls.
    pub exposed: &'a str,
}

impl<'a> From<&'a CatalogTool> for ToolNames<'a> {
    fn from(t: &'a CatalogTool) -> Self {
        ToolNames {
            upstream: &t.upstream,
            tool: &t.original,
            exposed: &t.exposed,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn local() -> LocalFs {
        LocalFs(Placement::default())
    }

    #[test]
    fn a_symlink_is_followed_and_what_does_not_exist_yet_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("scratch")).unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::os::unix::fs::symlink(root.join("secrets"), root.join("scratch/link")).unwrap();
        let r = |p: &str| local().resolve(&format!("{}{p}", root.display())).unwrap();
        assert_eq!(
            r("/scratch/new.txt"),
            format!("{}/scratch/new.txt", root.display())
        );
        assert_eq!(
            r("/scratch/link/key.pem"),
            format!("{}/secrets/key.pem", root.display())
        );
        assert_eq!(
            r("/scratch/link/deeper/not/there"),
            format!("{}/secrets/deeper/not/there", root.display())
        );
        assert!(matches!(
            local().resolve("relative/x"),
            Err(Unplaced::Relative(_))
        ));
    }

    #[test]
    fn another_unicode_spelling_of_a_linked_directory_leads_where_the_link_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("scratch")).unwrap();
        std::fs::create_dir_all(root.join("protected")).unwrap();
        // `café` spelled NFC on disk, a link to protected/.
        std::os::unix::fs::symlink(root.join("protected"), root.join("scratch/caf\u{e9}")).unwrap();
        let nfd = format!("{}/scratch/cafe\u{301}/pwned.txt", root.display());
        assert!(
            !Path::new(&nfd).exists(),
            "the kernel does not take the NFD name"
        );
        assert_eq!(
            local().resolve(&nfd).unwrap(),
            nfc(&format!("{}/protected/pwned.txt", root.display()))
        );
        // A name that exists as sent is taken as it is.
        std::fs::create_dir_all(root.join("scratch/plain")).unwrap();
        assert_eq!(
            local()
                .resolve(&format!("{}/scratch/plain/x", root.display()))
                .unwrap(),
            format!("{}/scratch/plain/x", root.display())
        );
    }

    #[test]
    fn two_spellings_of_one_name_on_disk_make_the_path_ambiguous() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        // Two entries, one name in NFC: its composed and decomposed forms.
        let decomposed = "a\u{323}\u{301}";
        let composed = nfc(decomposed);
        assert_ne!(composed, decomposed);
        std::fs::create_dir_all(root.join(&composed)).unwrap();
        std::fs::create_dir_all(root.join(decomposed)).unwrap();
        // A third spelling (the marks in the other order), equivalent to
        // both and byte-equal to neither: which would the server take?
        let third = "a\u{301}\u{323}";
        assert_eq!(nfc(third), composed);
        let sent = format!("{}/{third}/new.txt", root.display());
        assert!(matches!(
            local().resolve(&sent),
            Err(Unplaced::Ambiguous { .. })
        ));
        // An exact entry wins over equivalent ones, as the server takes it.
        let exact = format!("{}/{decomposed}/new.txt", root.display());
        assert_eq!(local().resolve(&exact).unwrap(), nfc(&exact));
    }

    #[test]
    fn container_runners_are_not_local() {
        assert!(is_container_runner(
            "docker",
            &["run".into(), "-i".into(), "mcp/filesystem".into()]
        ));
        assert!(is_container_runner(
            "/usr/bin/podman",
            &["run".into(), "img".into()]
        ));
        assert!(!is_container_runner("docker", &["ps".into()]));
        assert!(!is_container_runner("npx", &["run".into()]));
    }
}
