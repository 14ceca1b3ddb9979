//! Apply in one process: at most once, leases, in-doubt steps, progress and
//! the real secret reaching the upstream — against an in-repo recording
//! upstream whose every call is visible to the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use plangate_config::{Config, Namespace};
use plangate_core::{Actor, Channel, EventKind, Scope};
use plangate_gateway::Gateway;
use plangate_store::{
    ApiKey, CreatedKey, CreatedOperatorToken, Credentials, EventLog, Identity, KeyEpoch, LogMark,
    NewEvent, OperatorToken, Store, StoreError, StoredEvent,
};
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};

/// A gateway on the recording upstream whose claims hold for `lease`,
/// adjusted further by `adjust`, and a write key.
async fn rig_with(lease: Duration, adjust: impl FnOnce(&mut Config)) -> Rig<Recorder> {
    rig_on(Scope::Write, "rec", Recorder::default(), |config| {
        config.gateway.lease = lease;
        adjust(config);
    })
    .await
}

/// A rig whose claims hold for `lease`, the config otherwise as usual.
async fn rig(lease: Duration) -> Rig<Recorder> {
    rig_with(lease, |_| {}).await
}

/// A second gateway process on the rig's store, with no upstream, whose
/// config `adjust` changes.
async fn other_process(r: &Rig<Recorder>, adjust: impl FnOnce(&mut Config)) -> Arc<Gateway> {
    let mut config = config(&["rec"], Namespace::Auto);
    adjust(&mut config);
    start(config, r.store.clone(), vec![]).await
}

/// `plangate_apply_plan` with the rig's key, through a client of its own,
/// in a task: the receipt's body when it ends.
fn apply_in_background(r: &Rig<Recorder>) -> tokio::task::JoinHandle<Value> {
    let gw = r.gw.clone();
    let token = r.token.clone();
    tokio::spawn(async move {
        let c = client_of(gw, Some(token), Seen::default()).await;
        body(&call(&c, "plangate_apply_plan", json!({})).await)
    })
}

#[tokio::test]
async fn apply_delivers_the_real_secret_while_every_answer_shows_it_redacted() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let planned = body(
        &call(
            &client,
            "record",
            json!({"note": "hello", "api_key": "sk-canary-123"}),
        )
        .await,
    );
    assert_eq!(planned["arguments"]["api_key"], "[redacted]");
    assert!(
        !body(&call(&client, "plangate_get_plan", json!({})).await)
            .to_string()
            .contains("sk-canary-123")
    );
    assert!(r.calls_of("record").is_empty(), "planned, not run");

    let receipt = body(&call(&client, "plangate_apply_plan", json!({})).await);
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert!(!receipt.to_string().contains("sk-canary-123"));
    let delivered = r.calls_of("record");
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        delivered[0].0["api_key"], "sk-canary-123",
        "the upstream gets the real value"
    );
    assert_eq!(
        delivered[0].1["dev.plangate/operation_key"],
        planned["step_id"]
    );
    // Nowhere in the event log in plaintext.
    let events = r.store.export_events(None, None).await.unwrap();
    assert!(
        !serde_json::to_string(&events)
            .unwrap()
            .contains("sk-canary-123")
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn writes_that_can_be_planned_are_listed_without_output_schema() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.client(Seen::default()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let typed = tools.iter().find(|t| t.name == "typed").unwrap();
    assert!(typed.output_schema.is_none());
    let lookup = tools.iter().find(|t| t.name == "lookup").unwrap();
    assert!(lookup.output_schema.is_some(), "reads keep theirs");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_call_that_outlives_its_lease_keeps_it_renewed_and_is_not_in_doubt() {
    let r = rig(Duration::from_secs(1)).await;
    // A second gateway process on the same store sweeps while the call runs.
    let other = other_process(&r, |c| c.gateway.lease = Duration::from_secs(1)).await;
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    call(&client, "slow", json!({"ms": 2600})).await;
    let sweeping = tokio::spawn({
        let other = other.clone();
        let key = r.key_id.clone();
        async move {
            let mut marked = 0;
            for _ in 0..25 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                marked += other.sweep_leases(&key).await.unwrap();
            }
            marked
        }
    });
    let receipt = body(&call(&client, "plangate_apply_plan", json!({})).await);
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(receipt["in_doubt"], 0);
    assert_eq!(sweeping.await.unwrap(), 0, "no sweeper found a dead claim");
    assert_eq!(r.calls_of("slow").len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_dead_processes_claim_is_marked_in_doubt_by_another_process() {
    let r = rig(Duration::from_secs(1)).await;
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let step = body(&call(&client, "record", json!({"note": "x"})).await)["step_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A process starts applying, claims the step and dies: its lease is
    // never renewed.
    let started = EventKind::ApplyStarted {
        apply_id: "apply_dead".into(),
        step_ids: vec![step.clone()],
        plan_digest: None,
    };
    let dead = EventKind::StepStarted {
        step_id: step.clone(),
        apply_id: "apply_dead".into(),
        owner: "dead-process".into(),
        lease_until_ms: plangate_store::now_ms() + 1000,
    };
    let system = || (Actor::System, Channel::Stdio);
    record(
        &r.gw,
        &r.key_id,
        vec![(system(), started), (system(), dead)],
    )
    .await;
    // While the claim holds, applying runs nothing (one apply at a time).
    let busy = call(&client, "plangate_apply_plan", json!({})).await;
    assert_eq!(body(&busy)["code"], "apply_in_progress");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Another gateway on the same store finds it, not by starting up.
    let other = other_process(&r, |c| c.gateway.lease = Duration::from_secs(1)).await;
    // Its background sweep may find the claim first; either way the claim
    // is found by a process that did not make it.
    other.sweep_leases(&r.key_id).await.unwrap();
    let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
    assert_eq!(plan["steps"][0]["status"], "in_doubt", "{plan}");
    // The next apply does not re-run it…
    let receipt = body(&call(&client, "plangate_apply_plan", json!({})).await);
    assert_eq!(receipt["applied"], 0);
    assert!(r.calls_of("record").is_empty());
    // …nor does naming it: only a person's retry does.
    let named = call(&client, "plangate_apply_plan", json!({"step_ids": [step]})).await;
    assert_eq!(body(&named)["code"], "invalid_arguments");
    assert!(
        body(&named)["message"]
            .as_str()
            .unwrap()
            .contains("a person checks the target and retries or discards it")
    );
    let person = Actor::Operator {
        name: "person".into(),
    };
    let retried = EventKind::StepRetried {
        step_id: step.clone(),
    };
    record(&r.gw, &r.key_id, vec![((person, Channel::Cli), retried)]).await;
    let receipt = body(&call(&client, "plangate_apply_plan", json!({"step_ids": [step]})).await);
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(r.calls_of("record").len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_upstream_killed_during_a_call_leaves_the_step_in_doubt() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let hang = body(&call(&client, "hang", json!({})).await)["step_id"].clone();
    call(&client, "record", json!({"note": "after"})).await;
    let applying = apply_in_background(&r);
    eventually("the upstream to receive the call", || {
        !r.calls_of("hang").is_empty()
    })
    .await;
    r.sessions.lock().unwrap()[0].cancel();
    let receipt = tokio::time::timeout(Duration::from_secs(20), applying)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(receipt["in_doubt"], 1, "{receipt}");
    assert_eq!(receipt["not_run"], 1, "stops at the in-doubt step");
    assert_eq!(receipt["steps"][0]["step_id"], hang);
    assert_eq!(receipt["steps"][0]["outcome"], "in_doubt");
    assert!(r.calls_of("record").is_empty());
    // Once the upstream is back, the next apply runs only the waiting step.
    eventually("the upstream to come back", || {
        r.gw.upstream("rec").is_some() && r.sessions.lock().unwrap().len() >= 2
    })
    .await;
    let receipt = body(&call(&client, "plangate_apply_plan", json!({})).await);
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(
        r.calls_of("hang").len(),
        1,
        "the in-doubt step was not sent again"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn apply_reports_progress_step_by_step_when_asked() {
    let r = rig(Duration::from_secs(30)).await;
    let seen = Seen::default();
    let client = r.client(seen.clone()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    for i in 0..3 {
        call(&client, "record", json!({"note": i})).await;
    }
    let handle = client
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
                "plangate_apply_plan",
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let token = handle.progress_token.clone();
    handle.await_response().await.unwrap();
    eventually("progress", || seen.progress.lock().unwrap().len() >= 4).await;
    let progress = seen.progress.lock().unwrap().clone();
    assert!(
        progress
            .iter()
            .all(|p| p.progress_token == token && p.total == Some(3.0))
    );
    assert_eq!(
        progress.iter().map(|p| p.progress).collect::<Vec<_>>(),
        [0.0, 1.0, 2.0, 3.0]
    );
    assert!(
        progress[1]
            .message
            .as_deref()
            .unwrap()
            .starts_with("step 2 of 3")
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn two_applies_at_once_never_run_a_step_twice() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    for i in 0..5 {
        call(&client, "slow", json!({"ms": 50, "n": i})).await;
    }
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(apply_in_background(&r));
    }
    let mut applied = 0;
    let mut busy = 0;
    for t in tasks {
        let answer = t.await.unwrap();
        if answer["code"] == "apply_in_progress" {
            busy += 1;
        } else {
            applied += answer["applied"].as_i64().unwrap();
        }
    }
    assert_eq!(applied, 5);
    assert!(busy >= 1);
    assert_eq!(
        r.calls_of("slow").len(),
        5,
        "every step reached the upstream exactly once"
    );
    client.cancel().await.unwrap();
}

/// A key revoked by another process while an apply runs stops the steps
/// after it: each step's key check sees the revocation (the store's key
/// epoch moved), though the check of the step before it found the key
/// active and needs no query again while nothing was revoked.
#[tokio::test]
async fn a_key_revoked_by_another_process_mid_apply_stops_the_next_step_before_its_call() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    call(&client, "record", json!({"n": 1})).await;
    call(&client, "slow", json!({"ms": 600})).await;
    call(&client, "record", json!({"n": 3})).await;
    let applying = apply_in_background(&r);
    // Revoke once the slow step is under way, through a store of its own.
    while r.calls_of("slow").is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let other = open_store(r.dir.path()).await;
    other.revoke_key(&r.key_id).await.unwrap();
    let receipt = applying.await.unwrap();
    assert_eq!(receipt["applied"], 2, "{receipt}");
    assert_eq!(receipt["failed"], 1, "{receipt}");
    let failed = &receipt["steps"][2];
    assert_eq!(failed["outcome"], "failed", "{receipt}");
    assert_eq!(failed["error"]["code"], "forbidden", "{receipt}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revoked"),
        "{receipt}"
    );
    let recorded = r.calls_of("record");
    assert_eq!(
        recorded.len(),
        1,
        "the third step never reached the upstream"
    );
    assert_eq!(recorded[0].0["n"], 1);
    client.cancel().await.unwrap();
}

/// `gateway.cached_keys` bounds the folded states a gateway keeps; a key
/// pushed out is folded again from the store, whole.
#[tokio::test]
async fn the_gateway_keeps_at_most_cached_keys_states() {
    let r = rig(Duration::from_secs(30)).await;
    let mut ids = vec![r.key_id.clone()];
    let mut tokens = vec![r.token.clone()];
    for i in 0..4 {
        let key = r
            .store
            .create_key(&format!("k{i}"), Scope::Write)
            .await
            .unwrap();
        ids.push(key.key.id);
        tokens.push(key.token);
    }
    // Every key has a mode in the log.
    for token in tokens {
        let client = client_of(r.gw.clone(), Some(token), Seen::default()).await;
        call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
        client.cancel().await.unwrap();
    }
    let small = other_process(&r, |c| c.gateway.cached_keys = 2).await;
    for id in &ids {
        small.log().state(id).await.unwrap();
        assert!(small.log().cached_keys() <= 2);
    }
    assert_eq!(small.log().cached_keys(), 2);
    // The first key was pushed out; its mode comes back from the store.
    let state = small.log().state(&r.key_id).await.unwrap();
    assert_eq!(state.mode.as_deref(), Some("plan"));
}

/// The background sweep expires a plan whose life is over with no call to
/// prompt it: it looks at the key again when the plan is due (it skips
/// open plans that are not), and records the expiry as the sweeper.
#[tokio::test]
async fn the_background_sweep_expires_a_plan_when_it_is_due_with_no_call() {
    let r = rig_with(Duration::from_secs(30), |c| {
        c.gateway.plan_ttl = Duration::from_secs(2)
    })
    .await;
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let planned = body(&call(&client, "record", json!({"note": "x"})).await);
    assert_eq!(planned["planned"], true, "{planned}");
    let planned_at = std::time::Instant::now();

    let mut expired = None;
    for _ in 0..100 {
        let events = r.store.load_events(&r.key_id, 0).await.unwrap();
        if let Some(e) = events.iter().find(|e| e.kind == "plan_expired") {
            expired = Some(e.body.value());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let expired = expired.expect("the sweep expired the plan within 10 s");
    assert_eq!(expired["channel"], "sweeper", "{expired}");
    assert!(
        planned_at.elapsed() >= Duration::from_millis(1500),
        "not before the plan's life was over"
    );
    assert!(
        r.upstream.calls.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn a_hung_upstream_call_ends_with_an_error_within_call_timeout() {
    let r = rig_with(Duration::from_secs(30), |c| {
        c.upstreams.get_mut("rec").expect("rec").call_timeout = Duration::from_secs(1);
    })
    .await;
    let client = r.client(Seen::default()).await;
    // Run directly (a write key in default mode): the call ends, with an
    // error that says what happened and what to do.
    let started = std::time::Instant::now();
    let direct = call(&client, "hang", json!({})).await;
    let waited = started.elapsed();
    assert_eq!(direct.is_error, Some(true), "{direct:?}");
    assert_eq!(body(&direct)["code"], "upstream_unavailable");
    let text = format!("{direct:?}");
    assert!(
        text.contains("within 1s") && text.contains("call_timeout"),
        "{text}"
    );
    assert!(waited < Duration::from_secs(30), "waited {waited:?}");

    // As a step of an apply: in doubt (it may have reached the server),
    // and the plan is free again at once.
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    call(&client, "hang", json!({"again": true})).await;
    call(&client, "record", json!({"after": true})).await;
    let receipt = body(&call(&client, "plangate_apply_plan", json!({})).await);
    assert_eq!(receipt["in_doubt"], 1, "{receipt}");
    assert_eq!(receipt["not_run"], 1, "{receipt}");
    assert_eq!(receipt["steps"][0]["outcome"], "in_doubt", "{receipt}");
    let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
    let doubt = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["status"] == "in_doubt")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(
        doubt.to_string().contains("call_timeout"),
        "the step says why: {plan}"
    );
    // The rest of the plan can run: no apply is left in progress.
    let rest = body(&call(&client, "plangate_apply_plan", json!({})).await);
    assert_eq!(rest["applied"], 1, "{rest}");
    client.cancel().await.unwrap();
}

/// A write is decided on this process's last view of the key when it plans
/// (the append's compare-and-set confirms the view), never when it runs: a
/// mode another process set meanwhile counts for the very next write, in
/// either direction.
#[tokio::test]
async fn a_mode_another_process_set_counts_for_the_next_write_though_this_one_held_the_key() {
    let r = rig(Duration::from_secs(30)).await;
    let other = other_process(&r, |_| {}).await;
    a_mode_set_elsewhere_counts_for_the_next_write(r, other).await;
}

/// The same on PostgreSQL, where the key's state is known current only
/// when it is folded up to where the key's log stood as the statement that
/// authenticated the request saw it: the other replica's mode changes must
/// count though that statement is the only read before a write that runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mode_another_replica_set_counts_for_the_next_write_on_postgres() {
    let Some(schema) = PgSchema::fresh("mode_elsewhere") else {
        return;
    };
    let store = schema.open().await;
    let dir = tempfile::tempdir().unwrap();
    let r = rig_on_store(
        store,
        dir,
        Scope::Write,
        "rec",
        Recorder::default(),
        |config| {
            config.gateway.lease = Duration::from_secs(30);
        },
    )
    .await;
    // A replica: its own pool on the same database.
    let other = start(
        config(&["rec"], Namespace::Auto),
        schema.open().await,
        vec![],
    )
    .await;
    a_mode_set_elsewhere_counts_for_the_next_write(r, other).await;
}

/// A write key plans, another process puts it in the default mode (its
/// next write runs), then back into plan mode (its next write is planned).
async fn a_mode_set_elsewhere_counts_for_the_next_write(r: Rig<Recorder>, other: Arc<Gateway>) {
    let client = r.client(Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let first = body(&call(&client, "record", json!({"note": "one"})).await);
    assert_eq!(first["planned"], true, "{first}");

    // Another process (the CLI) puts the key back in the default mode,
    // where a write key's writes run.
    let person = || Actor::Operator {
        name: "ops".to_owned(),
    };
    let set = |mode: &str| EventKind::ModeSet {
        mode: mode.to_owned(),
    };
    record(
        &other,
        &r.key_id,
        vec![((person(), Channel::Cli), set("default"))],
    )
    .await;
    let second = call(&client, "record", json!({"note": "two"})).await;
    assert_ne!(body(&second)["planned"], true, "{:?}", second);
    let delivered = r.calls_of("record");
    assert_eq!(delivered.len(), 1, "the write ran: {delivered:?}");
    assert_eq!(delivered[0].0["note"], "two");
    // Nothing changed since: the next one runs on the state held.
    let again = call(&client, "record", json!({"note": "again"})).await;
    assert_ne!(body(&again)["planned"], true, "{:?}", again);
    assert_eq!(r.calls_of("record").len(), 2);

    // And back to plan mode from the other process: the next write is
    // planned, not run.
    record(
        &other,
        &r.key_id,
        vec![((person(), Channel::Cli), set("plan"))],
    )
    .await;
    let third = body(&call(&client, "record", json!({"note": "three"})).await);
    assert_eq!(third["planned"], true, "{third}");
    assert_eq!(r.calls_of("record").len(), 2, "planned, not run");
    let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
    assert_eq!(plan["steps"].as_array().map(Vec::len), Some(2), "{plan}");
    client.cancel().await.unwrap();
}

/// A store that counts what a gateway asks of it: authentications with
/// and without where the key's log stands, and reads of a key's events.
struct Counting {
    inner: Arc<dyn Store>,
    seen: AtomicUsize,
    plain: AtomicUsize,
    loads: AtomicUsize,
}

impl Counting {
    /// (authentications that read where the log stands, plain ones, loads)
    fn counts(&self) -> (usize, usize, usize) {
        let n = |a: &AtomicUsize| a.load(Ordering::SeqCst);
        (n(&self.seen), n(&self.plain), n(&self.loads))
    }
}

#[async_trait::async_trait]
impl Credentials for Counting {
    async fn create_key(&self, name: &str, scope: Scope) -> Result<CreatedKey, StoreError> {
        self.inner.create_key(name, scope).await
    }
    async fn ensure_identity(
        &self,
        identity: &Identity,
        scope: Scope,
    ) -> Result<ApiKey, StoreError> {
        self.inner.ensure_identity(identity, scope).await
    }
    async fn list_keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        self.inner.list_keys().await
    }
    async fn upstream_credentials(&self, name: &str) -> Result<Option<String>, StoreError> {
        self.inner.upstream_credentials(name).await
    }
    async fn save_upstream_credentials(&self, name: &str, sealed: &str) -> Result<(), StoreError> {
        self.inner.save_upstream_credentials(name, sealed).await
    }
    async fn clear_upstream_credentials(&self, name: &str) -> Result<(), StoreError> {
        self.inner.clear_upstream_credentials(name).await
    }
    async fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError> {
        self.inner.revoke_key(name_or_id).await
    }
    async fn authenticate(&self, token: &str) -> Result<Option<ApiKey>, StoreError> {
        self.plain.fetch_add(1, Ordering::SeqCst);
        self.inner.authenticate(token).await
    }
    async fn authenticate_seen(
        &self,
        token: &str,
    ) -> Result<Option<(ApiKey, Option<i64>)>, StoreError> {
        self.seen.fetch_add(1, Ordering::SeqCst);
        self.inner.authenticate_seen(token).await
    }
    fn key_epoch(&self) -> Option<KeyEpoch> {
        self.inner.key_epoch()
    }
    async fn find_key(&self, name_or_id: &str) -> Result<Option<ApiKey>, StoreError> {
        self.inner.find_key(name_or_id).await
    }
    async fn create_operator_token(&self, name: &str) -> Result<CreatedOperatorToken, StoreError> {
        self.inner.create_operator_token(name).await
    }
    async fn list_operator_tokens(&self) -> Result<Vec<OperatorToken>, StoreError> {
        self.inner.list_operator_tokens().await
    }
    async fn revoke_operator_token(&self, name_or_id: &str) -> Result<OperatorToken, StoreError> {
        self.inner.revoke_operator_token(name_or_id).await
    }
    async fn authenticate_operator(
        &self,
        token: &str,
    ) -> Result<Option<OperatorToken>, StoreError> {
        self.inner.authenticate_operator(token).await
    }
    async fn operator_token(&self, id: &str) -> Result<Option<OperatorToken>, StoreError> {
        self.inner.operator_token(id).await
    }
    async fn end_console_session(
        &self,
        session_sha256: &str,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        self.inner
            .end_console_session(session_sha256, expires_at_ms)
            .await
    }
    async fn console_session_ended(&self, session_sha256: &str) -> Result<bool, StoreError> {
        self.inner.console_session_ended(session_sha256).await
    }
}

impl Store for Counting {
    fn undo_states(&self) -> &dyn plangate_store::UndoStates {
        self.inner.undo_states()
    }
    fn outbox(&self) -> &dyn plangate_store::Outbox {
        self.inner.outbox()
    }
}

#[async_trait::async_trait]
impl EventLog for Counting {
    async fn load_events(
        &self,
        key_id: &str,
        after_key_seq: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        self.inner.load_events(key_id, after_key_seq).await
    }
    async fn last_key_seq(&self, key_id: &str) -> Result<i64, StoreError> {
        self.inner.last_key_seq(key_id).await
    }
    async fn keys_with_events(&self) -> Result<Vec<String>, StoreError> {
        self.inner.keys_with_events().await
    }
    async fn export_events(
        &self,
        key_id: Option<&str>,
        since_ms: Option<i64>,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.export_events(key_id, since_ms).await
    }
    async fn events_since(
        &self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.events_since(after_seq, limit).await
    }
    async fn last_seq(&self) -> Result<i64, StoreError> {
        self.inner.last_seq().await
    }
    fn log_mark(&self) -> Option<LogMark> {
        self.inner.log_mark()
    }
    async fn append_events_marked(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<(i64, Option<LogMark>), StoreError> {
        self.inner
            .append_events_marked(key_id, expected_key_seq, events)
            .await
    }
    async fn append_together(
        &self,
        parts: &[plangate_store::AppendPart],
    ) -> Result<Vec<i64>, StoreError> {
        self.inner.append_together(parts).await
    }
}

/// On PostgreSQL (no log mark) a write that runs on a held state is
/// decided without reading the key's events when the authenticating
/// statement saw the log where the held state is; a read and a write to
/// plan do not ask where the log stands (it costs the store on every
/// request and would spare them nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_authentication_tells_a_write_that_runs_its_held_state_is_current() {
    let Some(schema) = PgSchema::fresh("seen_counts") else {
        return;
    };
    let counting = Arc::new(Counting {
        inner: schema.open().await,
        seen: AtomicUsize::new(0),
        plain: AtomicUsize::new(0),
        loads: AtomicUsize::new(0),
    });
    let store: Arc<dyn Store> = counting.clone();
    let dir = tempfile::tempdir().unwrap();
    let r = rig_on_store(store, dir, Scope::Write, "rec", Recorder::default(), |_| {}).await;
    let client = r.client(Seen::default()).await;
    // The first write folds the key (nothing held yet).
    call_ok(&client, "record", json!({"note": "0"})).await;

    let (seen, plain, loads) = counting.counts();
    for i in 1..=4 {
        let ran = call_ok(&client, "record", json!({"note": i})).await;
        assert_ne!(body(&ran)["planned"], true, "{ran:?}");
    }
    call_ok(&client, "lookup", json!({})).await;
    assert_eq!(r.calls_of("record").len(), 5);
    assert_eq!(
        counting.counts(),
        (seen + 4, plain + 1, loads),
        "four writes that ran on the held state, one read: no load"
    );

    // Plan mode (a gateway tool: it asks), then writes to plan: they are
    // decided on the held state whatever the log says, so they do not ask.
    call_ok(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let (seen, plain, loads) = counting.counts();
    for i in 0..3 {
        let planned = call_ok(&client, "record", json!({"note": format!("p{i}")})).await;
        assert_eq!(body(&planned)["planned"], true, "{planned:?}");
    }
    assert_eq!(counting.counts(), (seen, plain + 3, loads));
    assert_eq!(r.calls_of("record").len(), 5, "planned, not run");

    // The key this token was last found to be is a hint of what to ask,
    // never the answer: revoked through another replica, the key's very
    // next write is refused, though its state is held and current.
    call_ok(&client, "plangate_discard_plan", json!({})).await;
    call_ok(
        &client,
        "plangate_begin_session",
        json!({"mode": "default"}),
    )
    .await;
    schema.open().await.revoke_key("agent").await.unwrap();
    let refused = client
        .peer()
        .call_tool(params("record", json!({"note": "after revoke"})))
        .await
        .expect_err("a revoked key's write must be refused");
    assert!(refused.to_string().contains("revoked"), "{refused}");
    assert_eq!(
        r.calls_of("record").len(),
        5,
        "nothing ran after the revocation"
    );
    client.cancel().await.unwrap();
}
