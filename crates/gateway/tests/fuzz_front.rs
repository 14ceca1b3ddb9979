//! Bounded fuzzing of the JSON-RPC front on stable: random and damaged
//! messages of every method, sent to a gateway in process (over a duplex,
//! through the same stdin size cap as `serve --stdio`), never crash it —
//! after each batch it still answers a ping, and nothing reaches the
//! upstream unless it was a call the key may run. `PROPTEST_CASES=2000
//! cargo test -p plangate-gateway --test fuzz_front` runs longer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use plangate_core::Scope;
use proptest::prelude::*;
use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const METHODS: [&str; 16] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/initialized",
    "logging/setLevel",
    "completion/complete",
    "server/discover",
    "no/such",
];

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        prop_oneof![
            Just("plangate_apply_plan"),
            Just("plangate_get_plan"),
            Just("plangate_begin_session"),
            Just("plangate_exit_plan_mode"),
            Just("record"),
            Just("lookup"),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_owned()),
                    Just("arguments".to_owned()),
                    Just("uri".to_owned()),
                    Just("mode".to_owned()),
                    Just("step_ids".to_owned()),
                    Just("_meta".to_owned()),
                    "[a-z]{1,6}".prop_map(|s| s)
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One line: a JSON-RPC message with random parts, or damaged text.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (prop::sample::select(METHODS.to_vec()), value(), prop::option::of(any::<i32>()))
            .prop_map(|(method, params, id)| {
                let mut m = json!({"jsonrpc": "2.0", "method": method, "params": params});
                if let Some(id) = id {
                    m["id"] = json!(id);
                }
                m.to_string()
            }),
        1 => "\\PC{0,80}",
        1 => (value(), any::<i32>()).prop_map(|(result, id)| json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()),
    ]
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(48),
    )
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn random_messages_never_stop_the_front(batch in prop::collection::vec(line(), 1..24)) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let r = rig_on(Scope::Plan, "rec", Recorder::default(), |_| {}).await;
            let (gw, token, calls) = (r.gw.clone(), r.token.clone(), &r.upstream.calls);
            let (client_io, server_io) = tokio::io::duplex(1 << 20);
            let (server_read, server_write) = tokio::io::split(server_io);
            let limit = gw.config().gateway.max_request_bytes;
            let handler = plangate_gateway::GatewayHandler::stdio(gw.clone(), Some(token));
            tokio::spawn(async move {
                let capped = plangate_gateway::limits::LineCap::new(server_read, limit);
                if let Ok(running) = handler.serve((capped, server_write)).await {
                    let _ = running.waiting().await;
                }
            });
            let (read, mut write) = tokio::io::split(client_io);
            let mut lines = BufReader::new(read).lines();
            let init = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"0"}}}"#;
            for l in std::iter::once(init.to_owned()).chain(batch.iter().cloned()) {
                write.write_all(l.as_bytes()).await.unwrap();
                write.write_all(b"\n").await.unwrap();
            }
            write
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"last\",\"method\":\"ping\"}\n")
                .await
                .unwrap();
            let answered = tokio::time::timeout(std::time::Duration::from_secs(20), async {
                while let Ok(Some(l)) = lines.next_line().await {
                    if let Ok(v) = serde_json::from_str::<Value>(&l)
                        && v["id"] == "last"
                    {
                        return true;
                    }
                }
                false
            })
            .await;
            assert_eq!(answered, Ok(true), "the front stopped answering after {batch:?}");
            // A plan key never runs a write: the recorder's writes got nothing.
            assert!(calls_of(calls, "record").is_empty(), "a plan key's write ran: {batch:?}");
            gw.shutdown().await;
        });
    }
}
