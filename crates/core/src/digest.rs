//! Digests (docs/design.md §5 "Digest", §7): what binds an approval to exactly the
//! plan a person saw, what tells two identical writes apart from two
//! different ones, and what notices a tool's schema changed.
//!
//! Everything hashed is RFC 8785 canonical JSON ([`crate::canonical`]), so
//! key order and number spelling never matter. Secrets are hashed only as
//! HMAC-SHA256 under the deployment's signing key ([`keyed_arguments`]): a
//! digest differs when a secret differs, yet nobody without the key can
//! test a guess against it. The key comes in as a parameter; the core never
//! reads or makes one.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{CanonicalError, Step, StepRecord, canonical_json};

pub(crate) use crate::hash::sha256_hex;
pub use crate::hash::{HMAC_PREFIX, SHA256_PREFIX, hmac_hex};

/// A copy of `args` in which every secret, by the built-in rules, is
/// replaced by `"hmac-sha256:" + hmac_hex(key, canonical_json(value))` —
/// see [`crate::Redactor::keyed`], which a gateway with configured rules
/// calls instead. Fails, naming the path, if `args` holds an integer beyond
/// ±(2^53−1).
pub fn keyed_arguments(args: &Value, signing_key: &[u8; 32]) -> Result<Value, CanonicalError> {
    crate::Redactor::builtin().keyed(args, signing_key)
}

/// `"sha256:"` + hex SHA-256 of a tool's canonical `inputSchema`: recorded
/// with each step and compared at apply, so a changed tool is `stale_target`.
pub fn schema_hash(input_schema: &Value) -> Result<String, CanonicalError> {
    let text = canonical_json(input_schema)?;
    Ok(format!("{SHA256_PREFIX}{}", sha256_hex(text.as_bytes())))
}

/// Hex SHA-256 of canonical `{"server", "tool", "arguments"}`: two calls
/// with the same fingerprint are the same write, so planning it again
/// answers the existing step (`deduplicated: true`). Pass keyed arguments,
/// so a different secret is a different write.
pub fn arguments_fingerprint(
    server: &str,
    tool: &str,
    keyed_args: &Value,
) -> Result<String, CanonicalError> {
    let text = canonical_json(&json!({
        "server": server,
        "tool": tool,
        "arguments": keyed_args,
    }))?;
    Ok(sha256_hex(text.as_bytes()))
}

/// The JSON a plan digest covers for one step (docs/design.md §5), as a value:
/// the definition [`write_digest_entry`] writes the text of, kept to test
/// that text against.
#[cfg(test)]
fn digest_entry(step: &StepRecord) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("step_id".into(), Value::from(step.step_id.as_str()));
    m.insert("position".into(), Value::from(step.position));
    m.insert("server".into(), Value::from(step.server.as_str()));
    m.insert("tool".into(), Value::from(step.tool.as_str()));
    m.insert("arguments".into(), step.keyed_arguments().value());
    m.insert("effect".into(), Value::from(step.effect.as_str()));
    m.insert("schema_hash".into(), Value::from(step.schema_hash.as_str()));
    // docs/design.md §9: the definition it was planned against is covered too;
    // a step planned before pinning has none, and its digest is unchanged.
    if let Some(hash) = &step.definition_hash {
        m.insert("definition_hash".into(), Value::from(hash.as_str()));
    }
    // docs/design.md §9: what the person saw of the target is covered too; a step
    // without a preview (or whose preview failed) has no before_digest.
    if let Some(d) = step.preview.as_ref().and_then(|p| p.before_digest()) {
        m.insert("before_digest".into(), Value::from(d));
    }
    Value::Object(m)
}

/// `"sha256:"` + hex SHA-256 of the canonical JSON array of the given
/// steps, in position order, each as `{step_id, position, server, tool,
/// arguments, effect, schema_hash}` (plus `definition_hash` and the
/// preview's `before_digest` when the step has them) with the keyed
/// arguments. Pass only the
/// `planned` steps; they are sorted by position (then id) here, so the
/// caller's order does not matter. An empty plan has a digest too.
///
/// Cannot fail: keyed arguments were checked when made; should one hold an
/// unsafe integer anyway, its exact digits are hashed.
///
/// Written straight into the hash, entry by entry, with each entry's keys
/// in their canonical order, instead of building the array as a `Value`
/// and canonicalising it: every planned write and every `get_plan` answers
/// with the plan's digest, so this runs on the hot path, for plans of up
/// to `max_steps` steps. The text hashed is the same (a test compares it with
/// the canonical text of `digest_entry`'s array).
pub fn plan_digest<'a>(planned: impl IntoIterator<Item = &'a StepRecord>) -> String {
    let mut steps: Vec<&StepRecord> = planned.into_iter().collect();
    steps.sort_by(|a, b| digest_order(a, b));
    let mut hash = Sha256::new();
    hash.update(b"[");
    hash_entries(&mut hash, 0, steps);
    finish(hash)
}

/// The order of a plan digest's entries: by position, then step id.
pub(crate) fn digest_order(a: &StepRecord, b: &StepRecord) -> std::cmp::Ordering {
    (a.position, &a.step_id).cmp(&(b.position, &b.step_id))
}

/// Hashes each step's entry, comma-separated, the first being entry
/// number `first` of the array (so a comma leads unless it is 0).
fn hash_entries<'a>(
    hash: &mut Sha256,
    first: usize,
    steps: impl IntoIterator<Item = &'a StepRecord>,
) {
    let mut text = String::with_capacity(512);
    for (i, step) in steps.into_iter().enumerate() {
        text.clear();
        if first + i > 0 {
            text.push(',');
        }
        write_digest_entry(&mut text, step);
        hash.update(text.as_bytes());
    }
}

/// Closes the array and spells the digest.
fn finish(mut hash: Sha256) -> String {
    hash.update(b"]");
    format!("{SHA256_PREFIX}{}", hex::encode(hash.finalize()))
}

/// The plan digest's hash state after its opening `[` and the entries of
/// some waiting steps, kept with those steps, shared by every copy of one
/// key's state ([`crate::KeyState::plan_digest`]).
///
/// Why: every planned write and every `get_plan` answers with the digest
/// of the whole plan, and a plan mostly changes by a step planned at its
/// end. Rehashing every step each time made a write's cost grow with the
/// plan (up to `max_steps` entries of canonical JSON through SHA-256);
/// with this, a plan that only grew hashes only the new entries. Whatever
/// else changed (a step applied, discarded, edited or moved), the kept
/// prefix no longer matches and the digest is computed afresh, so the
/// answer is always exactly [`plan_digest`]'s.
///
/// Not part of the state: never serialised, always equal, and a fresh
/// (empty) one after deserialising.
#[derive(Default, Clone)]
pub(crate) struct DigestMemo(Arc<Mutex<Option<DigestPrefix>>>);

/// See [`DigestMemo`].
struct DigestPrefix {
    /// The steps hashed, in digest order.
    steps: Vec<Arc<Step>>,
    /// SHA-256 after `[` and their entries.
    hash: Sha256,
}

impl PartialEq for DigestMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for DigestMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestMemo")
    }
}

impl DigestMemo {
    /// [`plan_digest`] of `planned` — the waiting steps, already in digest
    /// order (position, then id) — extending the kept hash when the steps
    /// it covers are still the first ones of `planned`, unchanged.
    pub(crate) fn plan_digest(&self, planned: &[&Arc<Step>]) -> String {
        // A poisoned lock only means another thread panicked mid-update;
        // the prefix is checked before use, so start afresh.
        let mut kept = match self.0.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                let mut guard = poisoned.into_inner();
                *guard = None;
                guard
            }
        };
        let still_prefix = kept.as_ref().is_some_and(|p| {
            p.steps.len() <= planned.len()
                && p.steps
                    .iter()
                    .zip(planned)
                    .all(|(was, is)| Arc::ptr_eq(was, is) || was.record == is.record)
        });
        if !still_prefix {
            let mut hash = Sha256::new();
            hash.update(b"[");
            *kept = Some(DigestPrefix {
                steps: Vec::with_capacity(planned.len()),
                hash,
            });
        }
        let prefix = kept.as_mut().expect("set just above");
        let done = prefix.steps.len();
        let rest = &planned[done..];
        if !rest.is_empty() {
            hash_entries(&mut prefix.hash, done, rest.iter().map(|s| &s.record));
            prefix.steps.extend(rest.iter().map(|s| Arc::clone(s)));
        }
        finish(prefix.hash.clone())
    }
}

/// The canonical text of `step`'s digest entry (`digest_entry`, the value
/// form kept for tests), written directly: the keys are ASCII, so their
/// canonical (UTF-16) order is their byte order —
/// arguments, before_digest, definition_hash, effect, position,
/// schema_hash, server, step_id, tool.
fn write_digest_entry(out: &mut String, step: &StepRecord) {
    use crate::canonical::{write_string, write_value};
    out.push_str("{\"arguments\":");
    write_value(out, &step.keyed_arguments().value());
    if let Some(d) = step.preview.as_ref().and_then(|p| p.before_digest()) {
        out.push_str(",\"before_digest\":");
        write_string(out, d);
    }
    if let Some(hash) = &step.definition_hash {
        out.push_str(",\"definition_hash\":");
        write_string(out, hash);
    }
    out.push_str(",\"effect\":");
    write_string(out, step.effect.as_str());
    out.push_str(",\"position\":");
    out.push_str(&step.position.to_string());
    out.push_str(",\"schema_hash\":");
    write_string(out, &step.schema_hash);
    out.push_str(",\"server\":");
    write_string(out, &step.server);
    out.push_str(",\"step_id\":");
    write_string(out, &step.step_id);
    out.push_str(",\"tool\":");
    write_string(out, &step.tool);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Effect;
    use crate::canonical::canonical_lossless;
    use crate::event::tests::record;

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn hmac_matches_known_answers() {
        // Computed independently with Python's hmac module.
        assert_eq!(
            hmac_hex(&[0x0b; 32], b"Hi There"),
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"
        );
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        assert_eq!(
            hmac_hex(&key, b"plangate"),
            "5a4908021dd7a7c887120d772d714edb47e3f378a159d2e549be4da370ec273d"
        );
    }

    #[test]
    fn secrets_are_keyed_at_any_depth_and_nothing_else_changes() {
        let args = json!({"id": 42, "headers": [{"Token": {"v": "s3cr3t"}}], "title": "t"});
        let keyed = keyed_arguments(&args, &KEY).unwrap();
        let mac = keyed["headers"][0]["Token"].as_str().unwrap();
        assert_eq!(
            mac,
            format!("hmac-sha256:{}", hmac_hex(&KEY, br#"{"v":"s3cr3t"}"#))
        );
        assert_eq!(keyed["id"], 42);
        assert_eq!(keyed["title"], "t");
        assert!(!keyed.to_string().contains("s3cr3t"));
    }

    #[test]
    fn unsafe_integers_are_refused_before_keying() {
        let err = keyed_arguments(&json!({"password": 9007199254740993u64}), &KEY).unwrap_err();
        assert_eq!(
            err,
            CanonicalError::UnsafeInteger {
                path: "/password".into()
            }
        );
        assert!(schema_hash(&json!({"maximum": u64::MAX})).is_err());
    }

    #[test]
    fn schema_hash_and_fingerprint_ignore_key_order() {
        let a: Value =
            serde_json::from_str(r#"{"type":"object","properties":{"b":{},"a":{}}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"properties":{"a":{},"b":{}},"type":"object"}"#).unwrap();
        assert_eq!(schema_hash(&a).unwrap(), schema_hash(&b).unwrap());
        assert!(schema_hash(&a).unwrap().starts_with("sha256:"));
        assert_eq!(
            arguments_fingerprint("site", "t", &a).unwrap(),
            arguments_fingerprint("site", "t", &b).unwrap()
        );
        assert_ne!(
            arguments_fingerprint("site", "t", &a).unwrap(),
            arguments_fingerprint("site", "u", &a).unwrap()
        );
        assert_ne!(
            arguments_fingerprint("site", "t", &a).unwrap(),
            arguments_fingerprint("other", "t", &a).unwrap()
        );
    }

    #[test]
    fn the_digest_is_stable_under_argument_key_order_and_input_order() {
        let a = record(
            "s1",
            1,
            "update",
            serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap(),
        );
        let b = record(
            "s1",
            1,
            "update",
            serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap(),
        );
        let c = record("s2", 2, "delete", json!({"id": 3}));
        assert_eq!(plan_digest([&a, &c]), plan_digest([&b, &c]));
        assert_eq!(plan_digest([&a, &c]), plan_digest([&c, &a]));
        assert!(plan_digest([]).starts_with("sha256:"));
        assert_ne!(plan_digest([]), plan_digest([&a]));
    }

    #[test]
    fn the_digest_changes_when_any_covered_field_changes() {
        let base = record("s1", 1, "update", json!({"id": 1, "title": "x"}));
        let d = plan_digest([&base]);
        let mut changes: Vec<StepRecord> = Vec::new();
        let mut r = base.clone();
        r.keyed_arguments = Some(crate::JsonText::from_value(
            &keyed_arguments(&json!({"id": 1, "title": "y"}), &KEY).unwrap(),
        ));
        changes.push(r);
        let mut r = base.clone();
        r.position = 2;
        changes.push(r);
        let mut r = base.clone();
        r.tool = "update2".into();
        changes.push(r);
        let mut r = base.clone();
        r.server = "other".into();
        changes.push(r);
        let mut r = base.clone();
        r.effect = Effect::Destructive;
        changes.push(r);
        let mut r = base.clone();
        r.schema_hash = "sha256:01".into();
        changes.push(r);
        let mut r = base.clone();
        r.step_id = "s9".into();
        changes.push(r);
        for changed in &changes {
            assert_ne!(plan_digest([changed]), d, "{changed:?}");
        }
        // Fields outside the digest do not move it.
        let mut r = base.clone();
        r.predicted_effect = "something else".into();
        r.planned_at_ms += 5;
        assert_eq!(plan_digest([&r]), d);
    }

    #[test]
    fn different_secrets_give_different_digests_and_never_appear_in_the_input() {
        let one = record(
            "s1",
            1,
            "login",
            json!({"user": "u", "password": "hunter2"}),
        );
        let two = record(
            "s1",
            1,
            "login",
            json!({"user": "u", "password": "hunter3"}),
        );
        assert_eq!(one.arguments, two.arguments, "redacted alike");
        assert_ne!(plan_digest([&one]), plan_digest([&two]));
        let input = canonical_lossless(&digest_entry(&one));
        assert!(!input.contains("hunter2"), "{input}");
        assert!(input.contains("hmac-sha256:"), "{input}");
    }

    /// The digest is written straight into the hash; what it hashes must
    /// stay the canonical text of the entries as values, with and without
    /// the optional fields, whatever the strings and numbers hold.
    #[test]
    fn the_streamed_text_is_the_canonical_text_of_the_entries() {
        let mut a = record(
            "step_\"a\u{1}",
            7,
            "update_page",
            json!({"b": [1, 2.5e-7, -0.0, null], "a": {"é": "\u{1F600}\n"}, "n": 9007199254740991u64}),
        );
        a.definition_hash = Some("sha256:def".into());
        a.preview = Some(crate::Preview::State {
            target: "t".into(),
            before_digest: "sha256:before".into(),
            summary: "s".into(),
            state: json!({}),
        });
        let b = record("s2", 2, "delete", json!({"id": 3}));
        let mut c = record("s3", 3, "x", json!({}));
        c.definition_hash = Some("sha256:d2".into());
        for steps in [vec![], vec![&b], vec![&b, &a], vec![&a, &b, &c]] {
            let mut sorted = steps.clone();
            sorted.sort_by(|x, y| (x.position, &x.step_id).cmp(&(y.position, &y.step_id)));
            let array = Value::Array(sorted.iter().map(|r| digest_entry(r)).collect());
            let expected = format!(
                "{SHA256_PREFIX}{}",
                sha256_hex(canonical_lossless(&array).as_bytes())
            );
            assert_eq!(plan_digest(steps.iter().copied()), expected);
        }
    }

    /// Approvals in the log are bound to plan digests, so how steps are
    /// held in memory must never move one. The value was computed by
    /// plangate before arguments were held as text (commit `b2369e3`),
    /// from the same records, directly and read back from their JSON. (When
    /// `auth` became a secret name, the container key of the second record
    /// was renamed `account`, and the value recomputed by the code before
    /// that change: keying by the new rules moves no digest of this plan.)
    #[test]
    fn the_digest_of_a_known_plan_is_pinned() {
        let a = record(
            "step_a",
            1,
            "update_page",
            json!({
                "id": 9007199254740991u64,
                "title": "Grüße \"quoted\" \u{1F600} \u{7f}",
                "ratio": 0.1,
                "big": 1e300,
                "neg": -0.0,
                "small": -12,
                "nested": {"z": [1, 2.5, null, true], "a": {}}
            }),
        );
        let b = record(
            "step_b",
            2,
            "login",
            json!({"user": "u", "password": "hunter2", "account": {"api_key": "k"}}),
        );
        let read_back: Vec<StepRecord> = [&a, &b]
            .iter()
            .map(|r| serde_json::from_str(&serde_json::to_string(r).unwrap()).unwrap())
            .collect();
        let digest = plan_digest([&a, &b]);
        assert_eq!(plan_digest(read_back.iter()), digest);
        assert_eq!(
            digest,
            "sha256:0c4e69683a1ae359b3b1b7e6ba07e8c0e3ed5c3b499909cf12eeb92973a6ce8a"
        );
    }
}
