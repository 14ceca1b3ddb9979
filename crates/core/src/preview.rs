//! Previews (docs/design.md §9): what a planned write would change, as the
//! upstream's own read tools (or its own dry run) showed it when the step
//! was planned, and the digest of the state it would change.
//!
//! The person approves what they saw. So the state before the write is
//! hashed (`before_digest`), the digest is part of the step's canonical
//! object (hence of the plan digest an approval binds), and apply takes the
//! same reading again before it runs the step: a different digest means
//! the target moved since review, and the step fails `stale_target`
//! instead of overwriting what the person never saw.
//!
//! Everything here is pure: the edge reads the state through the
//! upstream, scrubs secrets, and hands the texts in.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::canonical::canonical_lossless;
use crate::hash::{HMAC_PREFIX, SHA256_PREFIX, hmac_hex, sha256_hex};

/// What a step's preview showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Preview {
    /// A text target: the unified diff of the write against it.
    Diff {
        /// What is changed (a path, a URL).
        target: String,
        /// The digest of the state before ([`before_digest`]).
        before_digest: String,
        /// The unified diff (secrets scrubbed; cut at the preview cap).
        diff: String,
        /// Whether the write creates the target (it did not exist).
        creates: bool,
        /// Lines added.
        added: u32,
        /// Lines removed.
        removed: u32,
        /// Whether `diff` was cut at the cap (the digest covers it all).
        truncated: bool,
    },
    /// A structured target: its state as the upstream's read returned it.
    State {
        /// What is changed.
        target: String,
        /// The digest of the state before.
        before_digest: String,
        /// The state in a sentence.
        summary: String,
        /// The state read (secrets scrubbed; `null` past the cap).
        state: Value,
    },
    /// The preview could not be taken, or was too big to keep: said so,
    /// never silently dropped. Apply has nothing to compare against.
    Unavailable {
        /// What would be changed, when known.
        target: Option<String>,
        /// Why.
        reason: String,
    },
}

impl Preview {
    /// The digest of the state the person saw, when there is one.
    pub fn before_digest(&self) -> Option<&str> {
        match self {
            Preview::Diff { before_digest, .. } | Preview::State { before_digest, .. } => {
                Some(before_digest)
            }
            Preview::Unavailable { .. } => None,
        }
    }

    /// The preview in a few words, for the end of a step's sentence:
    /// "creates it (3 lines)", "changes 2 lines (+1 −1)".
    pub fn summary(&self) -> String {
        match self {
            Preview::Diff {
                creates: true,
                added,
                ..
            } => format!("creates it ({added} line{})", plural(*added)),
            Preview::Diff {
                added: 0,
                removed: 0,
                ..
            } => "leaves its content as it is".to_owned(),
            Preview::Diff { added, removed, .. } => {
                let changed = (*added).max(*removed);
                format!(
                    "changes {changed} line{} (+{added} −{removed})",
                    plural(changed)
                )
            }
            Preview::State { summary, .. } => summary.clone(),
            Preview::Unavailable { reason, .. } => format!("no preview: {reason}"),
        }
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// What a target was before a write: its text, structured state, or
/// nothing (it did not exist).
#[derive(Debug, Clone, PartialEq)]
pub enum Before<'a> {
    /// It does not exist.
    Missing,
    /// Its text.
    Text(&'a str),
    /// Its state.
    State(&'a Value),
}

/// `"sha256:"` + hex SHA-256 of the canonical JSON of the state before:
/// `{"missing": true}`, `{"text": …}` or `{"state": …}` — so a missing file
/// and an empty one differ, and the same state always has the same digest.
pub fn before_digest(before: &Before<'_>) -> String {
    bound_digest(before, &[], None)
}

/// The digest a step binds ([`before_digest`]) with where the target is:
/// `at`, the paths the write acts on as placed on this machine (a local
/// upstream's, symlinks followed; empty otherwise), is part of what is
/// hashed (`"at": […]`), so a target swapped for a link to another file
/// with the same content is not the one reviewed. With `key` (a preview
/// withheld from the agent, whose plan digest covers this digest) it is
/// an HMAC under the signing key, `"hmac-sha256:"` + hex: the agent then
/// cannot test guesses of what it may not read against the digest.
pub fn bound_digest(before: &Before<'_>, at: &[String], key: Option<&[u8; 32]>) -> String {
    let mut v = match before {
        Before::Missing => json!({"missing": true}),
        Before::Text(t) => json!({"text": t}),
        Before::State(s) => json!({"state": s}),
    };
    if !at.is_empty()
        && let Some(object) = v.as_object_mut()
    {
        object.insert("at".to_owned(), json!(at));
    }
    let canonical = canonical_lossless(&v);
    match key {
        Some(key) => format!("{HMAC_PREFIX}{}", hmac_hex(key, canonical.as_bytes())),
        None => format!("{SHA256_PREFIX}{}", sha256_hex(canonical.as_bytes())),
    }
}

/// The words every answer the agent can read says in place of a preview
/// it may not see.
pub const WITHHELD: &str = "preview withheld: this key may not read the target";

/// The unified diff of `after` against `before` (`None`: the target does
/// not exist, so the diff is from `/dev/null`), three lines of context,
/// headed by `label`, cut at `max_bytes`. Returns the diff, lines added and
/// removed, and whether it was cut.
pub fn unified_diff(
    before: Option<&str>,
    after: &str,
    label: &str,
    max_bytes: usize,
) -> (String, u32, u32, bool) {
    let old = before.unwrap_or("");
    let diff = similar::TextDiff::from_lines(old, after);
    let (mut added, mut removed) = (0u32, 0u32);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added = added.saturating_add(1),
            similar::ChangeTag::Delete => removed = removed.saturating_add(1),
            similar::ChangeTag::Equal => {}
        }
    }
    let from = if before.is_some() { label } else { "/dev/null" };
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(from, label)
        .to_string();
    let (text, truncated) = cut(text, max_bytes);
    (text, added, removed, truncated)
}

/// A digest shortened for people: its prefix (`sha256:`, `hmac-sha256:`)
/// and its first 12 hex digits (enough to tell two apart at a glance; the
/// whole one is in the JSON).
pub fn short_digest(d: &str) -> &str {
    let head = d.find(':').map_or(0, |i| i + 1);
    d.get(..head + 12).unwrap_or(d)
}

/// `text` cut at a line end at most `max_bytes` long.
pub fn cut(text: String, max_bytes: usize) -> (String, bool) {
    if text.len() <= max_bytes {
        return (text, false);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').map(|i| i + 1).unwrap_or(end);
    (text[..end].to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_shows_exactly_the_lines_that_change() {
        let before = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n";
        let after = "one\ntwo\nthree\nfour\nFIVE\nsix\nseven\neight\n";
        let (diff, added, removed, truncated) =
            unified_diff(Some(before), after, "notes/a.txt", 1 << 16);
        assert_eq!((added, removed, truncated), (1, 1, false));
        assert!(
            diff.starts_with("--- notes/a.txt\n+++ notes/a.txt\n"),
            "{diff}"
        );
        assert!(diff.contains("\n-five\n+FIVE\n"), "{diff}");
        // Three lines of context, not the whole file.
        assert!(!diff.contains("one"), "{diff}");
        assert!(
            diff.contains(" two\n") && diff.contains(" eight\n"),
            "{diff}"
        );
    }

    #[test]
    fn a_new_file_diffs_against_nothing_and_says_it_creates_it() {
        let (diff, added, removed, _) = unified_diff(None, "a\nb\n", "n.md", 1 << 16);
        assert!(diff.starts_with("--- /dev/null\n+++ n.md\n"), "{diff}");
        assert_eq!((added, removed), (2, 0));
        let p = Preview::Diff {
            target: "n.md".into(),
            before_digest: before_digest(&Before::Missing),
            diff,
            creates: true,
            added,
            removed,
            truncated: false,
        };
        assert_eq!(p.summary(), "creates it (2 lines)");
    }

    #[test]
    fn the_digest_tells_missing_empty_and_changed_apart() {
        let missing = before_digest(&Before::Missing);
        let empty = before_digest(&Before::Text(""));
        let a = before_digest(&Before::Text("a"));
        assert!(missing.starts_with("sha256:"));
        assert_ne!(missing, empty);
        assert_ne!(empty, a);
        assert_eq!(a, before_digest(&Before::Text("a")));
        let s1 = json!({"b": 1, "a": [1, 2]});
        let s2 = json!({"a": [1, 2], "b": 1});
        assert_eq!(
            before_digest(&Before::State(&s1)),
            before_digest(&Before::State(&s2))
        );
    }

    #[test]
    fn the_bound_digest_binds_where_the_target_is_and_is_keyed_when_withheld() {
        let text = Before::Text("salary 250000");
        let plain = before_digest(&text);
        assert_eq!(bound_digest(&text, &[], None), plain);
        let here = bound_digest(&text, &["/ws/a.txt".into()], None);
        let there = bound_digest(&text, &["/etc/a.txt".into()], None);
        assert_ne!(here, plain);
        assert_ne!(here, there, "same content, another file");
        let keyed = bound_digest(&text, &[], Some(&[7; 32]));
        assert!(keyed.starts_with("hmac-sha256:"), "{keyed}");
        assert_ne!(keyed, bound_digest(&text, &[], Some(&[8; 32])));
        assert_eq!(keyed, bound_digest(&text, &[], Some(&[7; 32])));
    }

    #[test]
    fn a_long_diff_is_cut_at_a_line_end_and_says_so() {
        let after: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let (diff, added, _, truncated) = unified_diff(None, &after, "big", 200);
        assert!(truncated);
        assert!(diff.len() <= 200 && diff.ends_with('\n'), "{diff}");
        assert_eq!(added, 1000);
    }

    #[test]
    fn summaries_read_as_words() {
        let d = |added, removed| Preview::Diff {
            target: "t".into(),
            before_digest: "sha256:0".into(),
            diff: String::new(),
            creates: false,
            added,
            removed,
            truncated: false,
        };
        assert_eq!(d(1, 1).summary(), "changes 1 line (+1 −1)");
        assert_eq!(d(3, 1).summary(), "changes 3 lines (+3 −1)");
        assert_eq!(d(0, 0).summary(), "leaves its content as it is");
        let json = serde_json::to_value(d(1, 1)).unwrap();
        assert_eq!(json["kind"], "diff");
        assert_eq!(json["before_digest"], "sha256:0");
    }
}
