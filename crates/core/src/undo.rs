//! What an applied step replaced, kept so the step can be undone
//! (docs/design.md §5, "Undo"). When a step runs on a profiled target, the
//! read its preview makes — the same read that decides `stale_target` just
//! before the call — finds the state the step is about to replace: a
//! file's text, the knowledge-graph entities it touches. That state
//! ([`Replaced`]) is sealed and kept beside the log, in the store's undo
//! states, referenced from the log by its digest ([`Undo::Kept`]): not
//! inside the signed event, so it can be dropped (past `undo_ttl`)
//! without breaking the log's chain. What the step left behind is read
//! again once it applied and bound as `after_digest`, so an undo later
//! overwrites nothing that changed since.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a step's apply replaced, as the kept plaintext (sealed at rest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replaced {
    /// The upstream the step ran on.
    pub server: String,
    /// Its tool.
    pub tool: String,
    /// The target as the step names it (a path, entity names).
    pub target: Option<String>,
    /// The upstream's read that found the state.
    pub read: String,
    /// That read's arguments.
    pub read_arguments: Value,
    /// What it found.
    pub before: KeptState,
    /// What the same read found once the step had applied (what a stale
    /// revert shows as the applied version), when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<KeptState>,
}

/// A target's state as its read answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KeptState {
    /// It did not exist (the step created it).
    Missing,
    /// Its text (a file's content).
    Text {
        /// The text.
        text: String,
    },
    /// Its structured state (entities and relations).
    State {
        /// The state.
        state: Value,
    },
}

/// What the log says of a step's undo (`undo_recorded`, in the same append
/// as the step's `step_applied`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Undo {
    /// The replaced state is kept: the digest of its plaintext
    /// ([`Replaced`] as canonical JSON), its size, and the digest the
    /// target's read gave once the step had applied (what an undo must
    /// find there to write), when it could be read.
    Kept {
        /// `sha256:` of the kept plaintext.
        digest: String,
        /// Its size in bytes.
        bytes: u64,
        /// The target's bound digest right after the step applied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_digest: Option<String>,
    },
    /// The server kept what the step replaced (its own snapshot, as the
    /// demo site's `delete_page` does): undone by calling its `tool` once
    /// with each of `calls`' arguments.
    Snapshot {
        /// The upstream's own restoring tool.
        tool: String,
        /// Its arguments, one call per snapshot.
        calls: Vec<serde_json::Map<String, Value>>,
        /// The target's version each restore's preview gave right after
        /// the step applied (a restore must find it so), when it gave one.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        after_versions: Vec<Option<Value>>,
    },
    /// Nothing is kept, and why (no profile reads this target, the state
    /// is over `max_undo_bytes`, the read failed).
    Unavailable {
        /// Why, in words.
        reason: String,
    },
    /// It was kept and has been dropped (past `undo_ttl`).
    Dropped {
        /// Why, in words.
        reason: String,
    },
}

impl Undo {
    /// Whether an undo can be built from what is kept.
    pub fn available(&self) -> bool {
        matches!(self, Undo::Kept { .. } | Undo::Snapshot { .. })
    }

    /// In a few words, for a receipt or a plan.
    pub fn said(&self) -> String {
        match self {
            Undo::Kept { bytes, .. } => format!("undo kept ({bytes} bytes)"),
            Undo::Snapshot { tool, calls, .. } => format!(
                "undo by {tool} ({} snapshot(s) kept by the server)",
                calls.len()
            ),
            Undo::Unavailable { reason } => format!("no undo: {reason}"),
            Undo::Dropped { reason } => format!("undo dropped: {reason}"),
        }
    }
}

impl Replaced {
    /// The kept plaintext: canonical JSON (RFC 8785), so its digest does
    /// not depend on how a read ordered its keys; plain JSON for a state
    /// canonical JSON cannot hold (an integer past 2^53).
    pub fn plaintext(&self) -> Vec<u8> {
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        match crate::canonical::canonical_json(&value) {
            Ok(text) => text.into_bytes(),
            Err(_) => value.to_string().into_bytes(),
        }
    }

    /// The digest the log keeps for this plaintext (`sha256:` + hex).
    pub fn digest_of(plaintext: &[u8]) -> String {
        format!(
            "{}{}",
            crate::hash::SHA256_PREFIX,
            crate::hash::sha256_hex(plaintext)
        )
    }
}

impl KeptState {
    /// The state as text a diff can compare: a file's text, a structured
    /// state as indented JSON; `None` for a target that did not exist.
    pub fn as_text(&self) -> Option<String> {
        match self {
            KeptState::Missing => None,
            KeptState::Text { text } => Some(text.clone()),
            KeptState::State { state } => {
                let parsed = match state {
                    Value::String(text) => serde_json::from_str(text).unwrap_or(state.clone()),
                    other => other.clone(),
                };
                Some(match parsed {
                    Value::String(text) => text,
                    other => serde_json::to_string_pretty(&other).unwrap_or_default() + "\n",
                })
            }
        }
    }
}

/// A target changed since a step applied, in the three versions a person
/// compares before re-planning its revert: what the step changed (from
/// the state before it to the state it left) and what changed since (from
/// the state it left to the state now), as unified diffs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Versions {
    /// The step's own change: before → applied.
    pub applied: String,
    /// The later change a revert would overwrite: applied → now.
    pub since: String,
}

impl Versions {
    /// The two diffs over `label` (a path, entity names) from what was
    /// kept and what a read finds `now`, each cut at `max_bytes`; `None`
    /// when what the step left was not kept.
    pub fn of(
        replaced: &Replaced,
        now: &KeptState,
        label: &str,
        max_bytes: usize,
    ) -> Option<Versions> {
        let after = replaced.after.as_ref()?.as_text();
        let diff = |from: Option<String>, to: Option<String>| {
            crate::preview::unified_diff(
                from.as_deref(),
                to.as_deref().unwrap_or(""),
                label,
                max_bytes,
            )
            .0
        };
        Some(Versions {
            applied: diff(replaced.before.as_text(), after.clone()),
            since: diff(after, now.as_text()),
        })
    }
}

/// The call that undoes an applied step, through its own server's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Inverse {
    /// The upstream's own tool name.
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Map<String, Value>,
}

/// The calls that undo a step of `tool` (on a server of `profile`) whose
/// arguments were `arguments` and which replaced `replaced`, in order, or
/// why this server's tools cannot express them. server-filesystem: a
/// written or edited file gets its old text back (`write_file`), a moved
/// file is moved back; a file or directory the step created stays (the
/// server has no tool to delete one). server-memory: what a step created
/// (entities, relations, observations) is deleted — only what was not
/// there before —, and what it deleted is created again with its
/// observations and relations.
pub fn inverse(
    profile: &str,
    tool: &str,
    arguments: &Value,
    replaced: &Replaced,
) -> Result<Vec<Inverse>, String> {
    match profile {
        "server-filesystem" => filesystem(tool, arguments, &replaced.before).map(|i| vec![i]),
        "server-memory" => memory(tool, arguments, &replaced.before),
        "git" => git(tool, arguments, &replaced.before).map(|i| vec![i]),
        _ => Err(format!(
            "plangate does not know how to undo {tool} with {}'s own tools",
            if profile.is_empty() {
                "this server"
            } else {
                profile
            }
        )),
    }
}

/// One call of `tool` with `pairs`; an argument not known is an error.
fn call(tool: &str, pairs: Vec<(&str, Option<Value>)>) -> Result<Inverse, String> {
    let mut arguments = serde_json::Map::new();
    for (name, value) in pairs {
        let value = value.ok_or_else(|| format!("the step's {name} is not known"))?;
        arguments.insert(name.to_owned(), value);
    }
    Ok(Inverse {
        tool: tool.to_owned(),
        arguments,
    })
}

fn filesystem(tool: &str, arguments: &Value, before: &KeptState) -> Result<Inverse, String> {
    let arg = |name: &str| arguments.get(name).cloned();
    match (tool, before) {
        ("write_file" | "edit_file", KeptState::Text { text }) => call(
            "write_file",
            vec![("path", arg("path")), ("content", Some(Value::String(text.clone())))],
        ),
        ("write_file" | "create_directory", KeptState::Missing) => Err(
            "the step created it, and server-filesystem has no tool to delete a file or directory, so it stays".to_owned(),
        ),
        ("move_file", _) => call(
            "move_file",
            vec![("source", arg("destination")), ("destination", arg("source"))],
        ),
        ("create_directory", _) => Err("the directory was there already: nothing to undo".to_owned()),
        (tool, _) => Err(format!(
            "plangate does not know how to undo {tool} with server-filesystem's own tools"
        )),
    }
}

/// The reference git server (mcp-server-git): a checkout goes back to
/// the branch its status read named; nothing else it does can be undone
/// with its own tools, and each says why.
fn git(tool: &str, arguments: &Value, before: &KeptState) -> Result<Inverse, String> {
    match tool {
        "git_checkout" => {
            let status = match before {
                KeptState::Text { text } => text.clone(),
                KeptState::State {
                    state: Value::String(text),
                } => text.clone(),
                _ => return Err("the repository's status was not read before the step".to_owned()),
            };
            let branch = status
                .lines()
                .find_map(|l| l.trim().strip_prefix("On branch "))
                .map(str::trim)
                .filter(|b| !b.is_empty())
                .ok_or_else(|| {
                    "the repository was on no branch before (a detached HEAD), so there is no branch to go back to".to_owned()
                })?;
            call(
                "git_checkout",
                vec![
                    ("repo_path", arguments.get("repo_path").cloned()),
                    ("branch_name", Some(Value::String(branch.to_owned()))),
                ],
            )
        }
        "git_commit" => Err(
            "mcp-server-git has no tool to undo a commit: it cannot move a branch back, so the commit stays".to_owned(),
        ),
        "git_create_branch" => Err(
            "mcp-server-git has no tool to delete a branch, so the branch stays".to_owned(),
        ),
        "git_add" | "git_reset" => Err(format!(
            "mcp-server-git can only stage or unstage every change at once (git_reset), not exactly what {tool} changed, so plangate offers no undo"
        )),
        tool => Err(format!(
            "plangate does not know how to undo {tool} with mcp-server-git's own tools"
        )),
    }
}

/// The entities and relations a server-memory read (`open_nodes`) found.
fn graph(before: &KeptState) -> Result<(Vec<Value>, Vec<Value>), String> {
    let state = match before {
        KeptState::State {
            state: Value::String(text),
        } => serde_json::from_str(text).map_err(|_| "the graph read is not JSON".to_owned())?,
        KeptState::State { state } => state.clone(),
        _ => return Err("the graph was not read before the step".to_owned()),
    };
    let list = |name: &str| {
        state
            .get(name)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    Ok((list("entities"), list("relations")))
}

/// The items of `arguments[name]`.
fn items(arguments: &Value, name: &str) -> Vec<Value> {
    arguments
        .get(name)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The same relation: `from`, `to` and `relationType` alike.
fn same_relation(a: &Value, b: &Value) -> bool {
    ["from", "to", "relationType"]
        .iter()
        .all(|k| a.get(k) == b.get(k))
}

fn memory(tool: &str, arguments: &Value, before: &KeptState) -> Result<Vec<Inverse>, String> {
    let (entities, relations) = graph(before)?;
    let named = |name: &Value| {
        entities
            .iter()
            .find(|e| e.get("name") == Some(name))
            .cloned()
    };
    let nothing = |what: &str| Err(format!("{what} were there already: nothing to undo"));
    match tool {
        "create_entities" => {
            let created: Vec<Value> = items(arguments, "entities")
                .iter()
                .filter_map(|e| e.get("name").filter(|n| named(n).is_none()).cloned())
                .collect();
            if created.is_empty() {
                return nothing("all its entities");
            }
            Ok(vec![call(
                "delete_entities",
                vec![("entityNames", Some(Value::Array(created)))],
            )?])
        }
        "create_relations" => {
            let created: Vec<Value> = items(arguments, "relations")
                .into_iter()
                .filter(|r| !relations.iter().any(|b| same_relation(r, b)))
                .collect();
            if created.is_empty() {
                return nothing("all its relations");
            }
            Ok(vec![call(
                "delete_relations",
                vec![("relations", Some(Value::Array(created)))],
            )?])
        }
        "add_observations" => {
            let deletions: Vec<Value> = items(arguments, "observations")
                .iter()
                .filter_map(|o| {
                    let name = o.get("entityName")?;
                    let had = named(name)
                        .and_then(|e| e.get("observations").cloned())
                        .unwrap_or(Value::Array(Vec::new()));
                    let had = had.as_array().cloned().unwrap_or_default();
                    let added: Vec<Value> = items(o, "contents")
                        .into_iter()
                        .filter(|c| !had.contains(c))
                        .collect();
                    (!added.is_empty())
                        .then(|| serde_json::json!({"entityName": name, "observations": added}))
                })
                .collect();
            if deletions.is_empty() {
                return nothing("all its observations");
            }
            Ok(vec![call(
                "delete_observations",
                vec![("deletions", Some(Value::Array(deletions)))],
            )?])
        }
        "delete_entities" => {
            let names = items(arguments, "entityNames");
            let gone: Vec<Value> = names.iter().filter_map(&named).collect();
            if gone.is_empty() {
                return Err("none of its entities existed: nothing to undo".to_owned());
            }
            let mut calls = vec![call(
                "create_entities",
                vec![("entities", Some(Value::Array(gone)))],
            )?];
            if !relations.is_empty() {
                calls.push(call(
                    "create_relations",
                    vec![("relations", Some(Value::Array(relations)))],
                )?);
            }
            Ok(calls)
        }
        "delete_relations" => {
            let gone: Vec<Value> = items(arguments, "relations")
                .into_iter()
                .filter(|r| relations.iter().any(|b| same_relation(r, b)))
                .collect();
            if gone.is_empty() {
                return Err("none of its relations existed: nothing to undo".to_owned());
            }
            Ok(vec![call(
                "create_relations",
                vec![("relations", Some(Value::Array(gone)))],
            )?])
        }
        "delete_observations" => {
            let back: Vec<Value> = items(arguments, "deletions")
                .iter()
                .filter_map(|d| {
                    let name = d.get("entityName")?;
                    let had = named(name)?.get("observations")?.as_array()?.clone();
                    let gone: Vec<Value> = items(d, "observations")
                        .into_iter()
                        .filter(|o| had.contains(o))
                        .collect();
                    (!gone.is_empty())
                        .then(|| serde_json::json!({"entityName": name, "contents": gone}))
                })
                .collect();
            if back.is_empty() {
                return Err("none of its observations existed: nothing to undo".to_owned());
            }
            Ok(vec![call(
                "add_observations",
                vec![("observations", Some(Value::Array(back)))],
            )?])
        }
        tool => Err(format!(
            "plangate does not know how to undo {tool} with server-memory's own tools"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_is_kept_reads_back_and_its_bytes_do_not_depend_on_key_order() {
        let replaced = Replaced {
            server: "fs".into(),
            tool: "write_file".into(),
            target: Some("/w/a.txt".into()),
            read: "read_text_file".into(),
            read_arguments: json!({"path": "/w/a.txt", "head": null}),
            before: KeptState::Text {
                text: "old\n".into(),
            },
            after: Some(KeptState::Text {
                text: "new\n".into(),
            }),
        };
        let bytes = replaced.plaintext();
        let back: Replaced = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, replaced);
        let mut reordered = replaced.clone();
        reordered.read_arguments = json!({"head": null, "path": "/w/a.txt"});
        assert_eq!(reordered.plaintext(), bytes);
    }

    #[test]
    fn a_stale_revert_shows_what_the_step_changed_and_what_changed_since() {
        let replaced = Replaced {
            server: "fs".into(),
            tool: "write_file".into(),
            target: Some("/w/a.txt".into()),
            read: "read_text_file".into(),
            read_arguments: json!({"path": "/w/a.txt"}),
            before: KeptState::Text {
                text: "one\ntwo\n".into(),
            },
            after: Some(KeptState::Text {
                text: "one\nTWO\n".into(),
            }),
        };
        let now = KeptState::Text {
            text: "one\nTWO\nthree\n".into(),
        };
        let v = Versions::of(&replaced, &now, "/w/a.txt", 1 << 16).unwrap();
        assert!(v.applied.contains("\n-two\n+TWO\n"), "{}", v.applied);
        assert!(v.since.contains("\n+three\n"), "{}", v.since);
        assert!(!v.since.contains("-two"), "{}", v.since);
        // A graph compares as indented JSON; a removed file as empty.
        let graph = KeptState::State {
            state: json!("{\"entities\":[{\"name\":\"ada\"}]}"),
        };
        assert!(graph.as_text().unwrap().contains("\"name\": \"ada\""));
        assert_eq!(KeptState::Missing.as_text(), None);
        // Without what the step left, there are no versions to show.
        let mut old = replaced;
        old.after = None;
        assert_eq!(Versions::of(&old, &now, "/w/a.txt", 1 << 16), None);
    }

    #[test]
    fn a_git_checkout_goes_back_to_its_branch_and_a_commit_says_why_not() {
        let replaced = |before: KeptState| Replaced {
            server: "git".into(),
            tool: "git_checkout".into(),
            target: Some("/r".into()),
            read: "git_status".into(),
            read_arguments: json!({"repo_path": "/r"}),
            before,
            after: None,
        };
        let status = KeptState::State {
            state: json!("Repository status:\nOn branch main\nnothing to commit"),
        };
        let back = inverse(
            "git",
            "git_checkout",
            &json!({"repo_path": "/r", "branch_name": "feature"}),
            &replaced(status.clone()),
        )
        .unwrap();
        assert_eq!(back[0].tool, "git_checkout");
        assert_eq!(back[0].arguments["branch_name"], "main");
        assert_eq!(back[0].arguments["repo_path"], "/r");
        let detached = KeptState::Text {
            text: "HEAD detached at 1a2b3c\n".into(),
        };
        let why = inverse(
            "git",
            "git_checkout",
            &json!({"repo_path": "/r"}),
            &replaced(detached),
        );
        assert!(why.unwrap_err().contains("detached"));
        let why = inverse("git", "git_commit", &json!({}), &replaced(status)).unwrap_err();
        assert!(why.contains("cannot move a branch back"), "{why}");
    }

    #[test]
    fn the_log_says_undo_in_a_few_words() {
        let kept = Undo::Kept {
            digest: "sha256:ab".into(),
            bytes: 4,
            after_digest: None,
        };
        assert!(kept.available());
        assert_eq!(kept.said(), "undo kept (4 bytes)");
        let json = serde_json::to_value(&kept).unwrap();
        assert_eq!(
            json,
            json!({"state": "kept", "digest": "sha256:ab", "bytes": 4})
        );
        let none = Undo::Unavailable {
            reason: "over max_undo_bytes".into(),
        };
        assert!(!none.available());
        assert_eq!(none.said(), "no undo: over max_undo_bytes");
    }

    #[test]
    fn a_written_file_gets_its_old_text_back_and_a_created_one_stays() {
        let replaced = |before: KeptState| Replaced {
            server: "fs".into(),
            tool: "edit_file".into(),
            target: Some("/w/a.txt".into()),
            read: "read_text_file".into(),
            read_arguments: json!({"path": "/w/a.txt"}),
            before,
            after: None,
        };
        let args = json!({"path": "/w/a.txt", "edits": []});
        let back = inverse(
            "server-filesystem",
            "edit_file",
            &args,
            &replaced(KeptState::Text {
                text: "old\n".into(),
            }),
        )
        .unwrap();
        assert_eq!(back.len(), 1);
        let back = back.into_iter().next().unwrap();
        assert_eq!(back.tool, "write_file");
        assert_eq!(
            Value::Object(back.arguments),
            json!({"path": "/w/a.txt", "content": "old\n"})
        );
        let created = inverse(
            "server-filesystem",
            "write_file",
            &args,
            &replaced(KeptState::Missing),
        );
        assert!(created.unwrap_err().contains("no tool to delete"));
        let moved = inverse(
            "server-filesystem",
            "move_file",
            &json!({"source": "/w/a", "destination": "/w/b"}),
            &replaced(KeptState::State {
                state: json!("size: 1"),
            }),
        )
        .unwrap()
        .remove(0);
        assert_eq!(
            Value::Object(moved.arguments),
            json!({"source": "/w/b", "destination": "/w/a"})
        );
        assert!(
            inverse(
                "github",
                "merge_pull_request",
                &args,
                &replaced(KeptState::Missing)
            )
            .unwrap_err()
            .contains("does not know how to undo merge_pull_request with github")
        );
    }

    #[test]
    fn a_memory_step_is_undone_only_for_what_it_changed() {
        let before = |state: Value| Replaced {
            server: "memory".into(),
            tool: "t".into(),
            target: None,
            read: "open_nodes".into(),
            read_arguments: json!({}),
            before: KeptState::State { state },
            after: None,
        };
        let graph = json!({
            "entities": [{"name": "ada", "entityType": "person", "observations": ["math"]}],
            "relations": [{"from": "ada", "to": "bob", "relationType": "knows"}]
        });
        let created = inverse(
            "server-memory",
            "create_entities",
            &json!({"entities": [{"name": "ada"}, {"name": "cy"}]}),
            &before(graph.clone()),
        )
        .unwrap();
        assert_eq!(created[0].tool, "delete_entities");
        assert_eq!(
            Value::Object(created[0].arguments.clone()),
            json!({"entityNames": ["cy"]})
        );
        let added = inverse(
            "server-memory",
            "add_observations",
            &json!({"observations": [{"entityName": "ada", "contents": ["math", "poetry"]}]}),
            &before(Value::String(graph.to_string())),
        )
        .unwrap();
        assert_eq!(
            Value::Object(added[0].arguments.clone()),
            json!({"deletions": [{"entityName": "ada", "observations": ["poetry"]}]})
        );
        let deleted = inverse(
            "server-memory",
            "delete_entities",
            &json!({"entityNames": ["ada"]}),
            &before(graph.clone()),
        )
        .unwrap();
        assert_eq!(
            deleted.iter().map(|c| c.tool.as_str()).collect::<Vec<_>>(),
            ["create_entities", "create_relations"]
        );
        assert!(
            inverse(
                "server-memory",
                "create_entities",
                &json!({"entities": [{"name": "ada"}]}),
                &before(graph)
            )
            .unwrap_err()
            .contains("there already")
        );
    }
}
