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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        matches!(self, Undo::Kept { .. })
    }

    /// In a few words, for a receipt or a plan.
    pub fn said(&self) -> String {
        match self {
            Undo::Kept { bytes, .. } => format!("undo kept ({bytes} bytes)"),
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

/// The call that undoes an applied step, through its own server's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Inverse {
    /// The upstream's own tool name.
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Map<String, Value>,
}

/// The call that undoes a step of `tool` (on a server of `profile`) whose
/// arguments were `arguments` and which replaced `replaced`, or why this
/// server's tools cannot express one. server-filesystem: a written or
/// edited file gets its old text back (`write_file`), a moved file is
/// moved back; a file or directory the step created stays (the server has
/// no tool to delete one).
pub fn inverse(
    profile: &str,
    tool: &str,
    arguments: &Value,
    replaced: &Replaced,
) -> Result<Inverse, String> {
    let arg = |name: &str| arguments.get(name).cloned();
    let call = |tool: &str, pairs: Vec<(&str, Option<Value>)>| -> Result<Inverse, String> {
        let mut arguments = serde_json::Map::new();
        for (name, value) in pairs {
            let value = value.ok_or_else(|| format!("the step's {name} is not known"))?;
            arguments.insert(name.to_owned(), value);
        }
        Ok(Inverse {
            tool: tool.to_owned(),
            arguments,
        })
    };
    match (profile, tool, &replaced.before) {
        ("server-filesystem", "write_file" | "edit_file", KeptState::Text { text }) => call(
            "write_file",
            vec![("path", arg("path")), ("content", Some(Value::String(text.clone())))],
        ),
        ("server-filesystem", "write_file" | "create_directory", KeptState::Missing) => Err(
            "the step created it, and server-filesystem has no tool to delete a file or directory, so it stays".to_owned(),
        ),
        ("server-filesystem", "move_file", _) => call(
            "move_file",
            vec![("source", arg("destination")), ("destination", arg("source"))],
        ),
        ("server-filesystem", "create_directory", _) => {
            Err("the directory was there already: nothing to undo".to_owned())
        }
        (profile, tool, _) => Err(format!(
            "plangate does not know how to undo {tool} with {profile}'s own tools"
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
        };
        let bytes = replaced.plaintext();
        let back: Replaced = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, replaced);
        let mut reordered = replaced.clone();
        reordered.read_arguments = json!({"head": null, "path": "/w/a.txt"});
        assert_eq!(reordered.plaintext(), bytes);
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
        .unwrap();
        assert_eq!(
            Value::Object(moved.arguments),
            json!({"source": "/w/b", "destination": "/w/a"})
        );
        assert!(
            inverse("git", "git_commit", &args, &replaced(KeptState::Missing))
                .unwrap_err()
                .contains("does not know how to undo git_commit")
        );
    }
}
