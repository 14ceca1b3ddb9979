//! Bounded fuzzing on stable (`cargo test`): hostile and random input to
//! every parser and fold of the core — canonicalisation, stored events,
//! redaction of text, the tool pins — must never panic and must keep its
//! promises. `PROPTEST_CASES=100000 cargo test -p plangate-core fuzz`
//! runs longer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::{
    Actor, Channel, Event, EventKind, KeyState, PinnedDefinition, QuarantineReason, REDACTED,
    Standing, TOOLS_LOG, ToolPins, canonical_json, check_safe_integers, redact_text,
};

/// Any JSON at all: big and odd numbers, any unicode, deep nesting.
fn wild_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(crate::testing::proptest_cases(512))
}

fn pin_event(kind: u8, server: u8, tool: u8, version: u8) -> Event {
    let server = format!("s{}", server % 2);
    let tool = format!("t{}", tool % 3);
    let def = PinnedDefinition::of(&tool, &json!({"name": tool, "v": version % 3}));
    let kind = match kind % 4 {
        0 => EventKind::ToolsPinned {
            server,
            tools: vec![def],
        },
        1 => EventKind::ToolQuarantined {
            server,
            definition: def,
            reason: if version.is_multiple_of(2) {
                QuarantineReason::New
            } else {
                QuarantineReason::Changed
            },
        },
        2 => EventKind::ToolAccepted {
            server,
            tool,
            definition_hash: def.definition_hash,
        },
        _ => EventKind::ToolRejected {
            server,
            tool,
            definition_hash: def.definition_hash,
        },
    };
    Event {
        at_ms: 1,
        key_id: TOOLS_LOG.to_owned(),
        actor: Actor::Operator { name: "o".into() },
        channel: Channel::Cli,
        kind,
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn canonicalisation_never_panics_and_round_trips(v in wild_json()) {
        match canonical_json(&v) {
            Ok(text) => {
                // Read back (a large float may come back as an integer: it
                // is written without a fraction), it is written the same.
                let back: Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(crate::canonical::canonical_lossless(&back), text);
            }
            // Only integers beyond ±2^53 are refused.
            Err(_) => prop_assert!(check_safe_integers(&v).is_err()),
        }
    }

    #[test]
    fn any_stored_text_reads_as_an_event_or_an_error_never_a_panic(
        text in ".{0,200}",
        v in wild_json(),
    ) {
        let _ = serde_json::from_str::<Event>(&text);
        let _ = serde_json::from_value::<Event>(v.clone());
        // And an event read from anything folds without panicking.
        if let Ok(event) = serde_json::from_value::<Event>(v) {
            let mut state = KeyState::default();
            state.apply(1, &event);
            let mut pins = ToolPins::default();
            pins.apply(1, &event);
        }
    }

    #[test]
    fn a_named_secret_never_survives_text_redaction(
        before in ".{0,40}",
        after in ".{0,40}",
        secret in "[A-Za-z0-9]{8,20}",
        quoted in any::<bool>(),
    ) {
        prop_assume!(!before.contains(&secret) && !after.contains(&secret));
        let pair = if quoted {
            format!(r#"{{"password": "{secret}"}}"#)
        } else {
            format!("api_key={secret}")
        };
        let text = format!("{before} {pair} {after}");
        let out = redact_text(&text);
        prop_assert!(!out.contains(&secret), "{} -> {}", text, out);
        prop_assert!(out.contains(REDACTED));
    }

    #[test]
    fn text_redaction_never_panics(text in "\\PC{0,300}") {
        let _ = redact_text(&text);
    }

    #[test]
    fn the_pins_fold_keeps_its_promises(
        events in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()), 0..40)
    ) {
        let mut pins = ToolPins::default();
        for (seq, (k, s, t, v)) in events.into_iter().enumerate() {
            let event = pin_event(k, s, t, v);
            let before = pins.clone();
            pins.apply(seq as i64 + 1, &event);
            for (server, tools) in &pins.tools {
                for (tool, pin) in tools {
                    // A held definition is never the accepted one.
                    if let (Some(a), Some(h)) = (&pin.accepted, &pin.held) {
                        prop_assert_ne!(&a.definition_hash, &h.definition.definition_hash);
                    }
                    // Trust changes only by an operator's accept or the
                    // first pinning of an upstream.
                    let was = before.pin(server, tool).and_then(|p| p.accepted.clone());
                    if was.is_some() && was != pin.accepted {
                        let accepted = matches!(event.kind, EventKind::ToolAccepted { .. });
                        prop_assert!(accepted, "trust moved on {}", event.kind.name());
                    }
                    if let Some(a) = &pin.accepted {
                        prop_assert_eq!(pins.standing(server, tool, &a.definition_hash), Standing::Accepted);
                    }
                }
            }
        }
    }
}
