//! The hash chain that makes a key's log tamper-evident (docs/design.md §6).
//!
//! Each event's link is a SHA-256 over the link before it and the event as
//! stored (key, position, time, type, body text), so changing, inserting
//! or reordering a row changes every link after it. The gateway records
//! every event's link and signs the last link of each append with the
//! log's Ed25519 key (a signature covers every link before it, so one per
//! append is enough, and an append lands whole); a reader recomputes the
//! links and checks the signatures ([`Chain::follow`]), and a log that
//! ends in links no signature covers is broken ([`Chain::settle`]). A log written
//! before plangate signed it has unsigned rows at its start: they are taken
//! as they are until the first signed row, whose link covers them (the
//! signed checkpoint over what the key held); an unsigned row after a
//! signed one is a break.
//!
//! Pure: the signature check is passed in, so this module holds the rule
//! and the store holds the key.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why a recorded link is refused.
const BROKEN_LINK: &str =
    "its content or position is not what was linked (the hash chain breaks here)";

/// The link a key's first event follows.
pub const GENESIS: [u8; 32] = [0; 32];

/// One event's link: SHA-256 over a domain tag, the link before it, and
/// the event's stored fields, each length-prefixed so no two events share
/// an encoding.
pub fn link(
    prev: &[u8; 32],
    key_id: &str,
    key_seq: i64,
    at_ms: i64,
    kind: &str,
    body: &str,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"plangate-log/1\0");
    h.update(prev);
    for part in [key_id.as_bytes(), kind.as_bytes(), body.as_bytes()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.update(key_seq.to_be_bytes());
    h.update(at_ms.to_be_bytes());
    h.finalize().into()
}

/// What a stored event says about its own link: its hash (hex) and the
/// signature over it, both absent for a row written before signing.
#[derive(Debug, Clone, Copy)]
pub struct Sealed<'a> {
    /// The link as recorded (hex).
    pub hash: Option<&'a str>,
    /// The signature over the link as recorded (base64).
    pub sig: Option<&'a str>,
}

/// Why a key's log does not verify at one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Break {
    /// The key whose log breaks.
    pub key_id: String,
    /// The first event that does not verify.
    pub key_seq: i64,
    /// What is wrong with it, in words.
    pub reason: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "event {} of key {} does not verify: {}",
            self.key_seq, self.key_id, self.reason
        )
    }
}

/// Where a reader stands in a key's chain: the last link, whether any
/// signed row has been seen, and the first break.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Chain {
    /// The link of the last event followed ([`GENESIS`] before any).
    #[serde(with = "hex_32")]
    pub head: [u8; 32],
    /// Whether a signed event has been followed: from then on every event
    /// must be signed.
    pub signed: bool,
    /// Unsigned events followed before the first signed one (a log written
    /// before signing).
    pub unsigned: u64,
    /// The first event that did not verify; once set it stays.
    pub broken: Option<Break>,
    /// The first of the events followed since the last signature whose
    /// links are recorded but not yet covered by one (an append signs its
    /// last event only).
    #[serde(default)]
    pub pending: Option<i64>,
}

impl Chain {
    /// Follows one stored event: recomputes its link from the head, and
    /// checks its recorded hash and (with `verify`) its signature. The head
    /// moves to the recomputed link whatever the outcome, so a later event
    /// is judged on its own; the first failure is kept in
    /// [`Chain::broken`].
    #[allow(clippy::too_many_arguments)]
    pub fn follow(
        &mut self,
        key_id: &str,
        key_seq: i64,
        at_ms: i64,
        kind: &str,
        body: &str,
        sealed: Sealed<'_>,
        verify: impl FnOnce(&[u8; 32], &str) -> bool,
    ) {
        let computed = link(&self.head, key_id, key_seq, at_ms, kind, body);
        self.head = computed;
        let fault = match (sealed.hash, sealed.sig) {
            (None, None) if !self.signed => {
                self.unsigned += 1;
                None
            }
            (None, None) => Some("it is unsigned, after signed events".to_owned()),
            (None, Some(_)) => Some("it has a signature but no hash".to_owned()),
            (Some(hash), None) => {
                self.signed = true;
                if hash != hex::encode(computed) {
                    Some(BROKEN_LINK.to_owned())
                } else {
                    self.pending.get_or_insert(key_seq);
                    None
                }
            }
            (Some(hash), Some(sig)) => {
                self.signed = true;
                if hash != hex::encode(computed) {
                    Some(BROKEN_LINK.to_owned())
                } else if !verify(&computed, sig) {
                    Some("its signature is not the log key's".to_owned())
                } else {
                    self.pending = None;
                    None
                }
            }
        };
        if let Some(reason) = fault
            && self.broken.is_none()
        {
            self.broken = Some(Break {
                key_id: key_id.to_owned(),
                key_seq,
                reason,
            });
        }
    }

    /// Ends a read of the log: links no signature covers at its end (rows
    /// added after the last signed one) break it at the first of them.
    pub fn settle(&mut self, key_id: &str) {
        if let Some(key_seq) = self.pending.take()
            && self.broken.is_none()
        {
            self.broken = Some(Break {
                key_id: key_id.to_owned(),
                key_seq,
                reason: "no signature covers it: the log ends in rows added without the log key"
                    .to_owned(),
            });
        }
    }

    /// Notes an event this process appended itself (its append's last
    /// event signed): the head moves to its link.
    pub fn extend(&mut self, link: [u8; 32]) {
        self.head = link;
        self.pending = None;
        self.signed = true;
    }
}

/// A 32-byte link as 64 hex digits, for serialized states.
mod hex_32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(d)?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(&text, &mut out).map_err(serde::de::Error::custom)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed_chain(events: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut head = GENESIS;
        let mut out = Vec::new();
        for (i, (kind, body)) in events.iter().enumerate() {
            head = link(&head, "k", i as i64 + 1, 10, kind, body);
            out.push((hex::encode(head), format!("sig-{}", hex::encode(head))));
        }
        out
    }

    fn check(hash: &[u8; 32], sig: &str) -> bool {
        sig == format!("sig-{}", hex::encode(hash))
    }

    #[test]
    fn an_untouched_chain_verifies_and_any_changed_field_breaks_it_there() {
        let events = [
            ("mode_set", "{}"),
            ("step_planned", "{\"a\":1}"),
            ("x", "{}"),
        ];
        let seals = sealed_chain(&events);
        let follow = |bodies: &[(&str, &str)], at: i64| {
            let mut chain = Chain::default();
            for (i, ((kind, body), (hash, sig))) in bodies.iter().zip(&seals).enumerate() {
                let sealed = Sealed {
                    hash: Some(hash),
                    sig: Some(sig),
                };
                chain.follow("k", i as i64 + 1, at, kind, body, sealed, check);
            }
            chain.broken
        };
        assert_eq!(follow(&events, 10), None);
        let mut forged = events;
        forged[1].1 = "{\"a\":2}";
        assert_eq!(follow(&forged, 10).map(|b| b.key_seq), Some(2));
        assert_eq!(follow(&events, 11).map(|b| b.key_seq), Some(1));
    }

    #[test]
    fn unsigned_rows_pass_only_before_the_first_signed_one() {
        let mut chain = Chain::default();
        let none = Sealed {
            hash: None,
            sig: None,
        };
        chain.follow("k", 1, 1, "a", "{}", none, |_, _| true);
        assert_eq!((chain.unsigned, chain.broken.is_none()), (1, true));
        let head = link(&chain.head, "k", 2, 1, "b", "{}");
        let hash = hex::encode(head);
        let sealed = Sealed {
            hash: Some(&hash),
            sig: Some("ok"),
        };
        chain.follow("k", 2, 1, "b", "{}", sealed, |_, s| s == "ok");
        assert!(chain.broken.is_none() && chain.signed);
        chain.follow("k", 3, 1, "review_answered", "{}", none, |_, _| true);
        assert_eq!(chain.broken.map(|b| b.key_seq), Some(3));
    }

    #[test]
    fn links_a_later_signature_covers_pass_and_links_none_covers_break() {
        let ok = |_: &[u8; 32], s: &str| s == "ok";
        let first = link(&GENESIS, "k", 1, 1, "a", "{}");
        let second = link(&first, "k", 2, 1, "b", "{}");
        let (h1, h2) = (hex::encode(first), hex::encode(second));
        let only_hash = |h| Sealed {
            hash: Some(h),
            sig: None,
        };
        let mut chain = Chain::default();
        chain.follow("k", 1, 1, "a", "{}", only_hash(&h1), ok);
        let signed = Sealed {
            hash: Some(&h2),
            sig: Some("ok"),
        };
        chain.follow("k", 2, 1, "b", "{}", signed, ok);
        chain.settle("k");
        assert_eq!(chain.broken, None);

        // A row with a well-formed link, added after the signed one.
        let third = link(&second, "k", 3, 1, "review_answered", "{}");
        let h3 = hex::encode(third);
        chain.follow("k", 3, 1, "review_answered", "{}", only_hash(&h3), ok);
        assert_eq!(chain.broken, None, "pending until the read ends");
        chain.settle("k");
        assert_eq!(chain.broken.map(|b| b.key_seq), Some(3));
    }

    #[test]
    fn a_signature_that_is_not_the_keys_breaks_the_chain() {
        let mut chain = Chain::default();
        let head = link(&GENESIS, "k", 1, 1, "a", "{}");
        let hash = hex::encode(head);
        let sealed = Sealed {
            hash: Some(&hash),
            sig: Some("forged"),
        };
        chain.follow("k", 1, 1, "a", "{}", sealed, |_, s| s == "ok");
        let broken = chain.broken.expect("broken");
        assert!(broken.reason.contains("signature"), "{broken}");
    }
}
