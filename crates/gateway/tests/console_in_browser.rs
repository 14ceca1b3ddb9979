//! The web console in a real browser (headless Chromium, Debian's
//! `chromium`; `scripts/install-browser` installs it when missing), driven
//! over the DevTools protocol like a person at the keyboard.
//!
//! The gateway runs in process on the demo site and serves HTTP on a
//! loopback port; a real rmcp client plays the agent with a `plan`-scope
//! key. The browser logs in with an operator token (after a wrong one is
//! refused), sees the agent's plan — hostile strings in its arguments
//! rendered as text — and a new step appear without a reload, while a page
//! on another origin auto-submits a form to the approve endpoint and is
//! refused without a trace in the log. A click on "Approve" then lets the
//! agent's apply through, and the log names the operator. A screenshot
//! goes to `target/artifacts/console.png`.
//!
//! A second test checks the same boundaries without a browser, over plain
//! HTTP: API keys and operator tokens never stand in for each other,
//! approve binds the digest the person saw (`plan_changed`), a missing
//! CSRF header is refused, and a revoked token ends its session at once.
//!
//! Chromium runs in its own process group with a fresh profile, and the
//! whole group is killed when the test ends, however it ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::browser::{Browser, artifacts_dir};
use common::console_http::{get, get_json, http_client, login, mcp_status, post_login};
use common::*;
use plangate_core::Scope;
use plangate_gateway::Gateway;
use plangate_store::Store;
use rmcp::RoleClient;
use rmcp::service::RunningService;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

// Hostile strings: none may become markup, run, or leave the page.
const IMG: &str = "<img src=x onerror=\"window.__pwned='img'\">";
const SCRIPT: &str = "</script><script>window.__pwned='script'</script>";
const JS_LINK: &str = "javascript:window.__pwned='link'";
const ANCHOR: &str = "<a href=\"javascript:window.__pwned='anchor'\">click me</a>";

// === the gateway under test ===

struct Setup {
    _dir: tempfile::TempDir,
    gw: Arc<Gateway>,
    store: Arc<dyn Store>,
    base: String,
    shutdown: CancellationToken,
    key_id: String,
    agent_token: String,
    operator_token: String,
}

/// A gateway on the demo site, serving HTTP on a loopback port, with a
/// `plan`-scope key `planner` and an operator token `ana`.
async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path()).await;
    let key = store.create_key("planner", Scope::Plan).await.unwrap();
    let operator = store.create_operator_token("ana").await.unwrap();
    let (site, _) = in_process("site", demo(dir.path().join("site.json")));
    let gw = start(demo_site_config(), store.clone(), vec![("site", site)]).await;
    let (base, shutdown) = serve_http(&gw).await;
    Setup {
        _dir: dir,
        gw,
        store,
        base,
        shutdown,
        key_id: key.key.id,
        agent_token: key.token,
        operator_token: operator.token,
    }
}

/// Serves `gw` over HTTP on a loopback port: its base URL, and the token
/// that stops it.
async fn serve_http(gw: &Arc<Gateway>) -> (String, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let shutdown = CancellationToken::new();
    tokio::spawn(plangate_gateway::http::serve(
        gw.clone(),
        listener,
        shutdown.clone(),
    ));
    (base, shutdown)
}

impl Setup {
    async fn stop(self) {
        self.shutdown.cancel();
        self.gw.shutdown().await;
    }

    /// The key's events as stored: `(type, body)`.
    async fn events(&self) -> Vec<(String, Value)> {
        self.store
            .export_events(Some(&self.key_id), None)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.kind, e.body.value()))
            .collect()
    }

    async fn approvals(&self) -> Vec<Value> {
        self.events()
            .await
            .into_iter()
            .filter(|(kind, _)| kind == "review_answered")
            .map(|(_, body)| body)
            .collect()
    }
}

/// Runs blocking browser work without stalling the gateway's runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A second origin (another loopback port) whose page auto-submits a form
/// to the console's approve endpoint: the classic cross-site request.
async fn attacker(target: &str, key_id: &str, digest: &str) -> (String, CancellationToken) {
    let page = format!(
        "<!DOCTYPE html><html><body><form id=f method=post action=\"{target}/console/api/approve\" enctype=\"text/plain\"><input name='{{\"key_id\":\"{key_id}\",\"plan_digest\":\"{digest}\",\"x\":\"' value='\"}}'></form><script>document.getElementById('f').submit()</script></body></html>"
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let done = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(done.cancelled_owned())
            .await
    });
    (format!("http://{addr}/"), stop)
}

/// The agent's client: a `plan`-scope key's, over the in-process stdio.
type Agent = RunningService<RoleClient, Seen>;

/// The agent's client of `s`'s gateway, with the `plan`-scope key.
async fn agent(s: &Setup) -> Agent {
    client_of(s.gw.clone(), Some(s.agent_token.clone()), Seen::default()).await
}

/// The digest of the agent's plan, as `plangate_get_plan` answers it.
async fn plan_digest(client: &Agent) -> String {
    let plan = call(client, "plangate_get_plan", json!({})).await;
    plan.structured_content.unwrap()["plan_digest"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The agent's plan and its step `id`, as `plangate_get_plan` answers it.
async fn plan_step(client: &Agent, id: &str) -> (Value, Value) {
    let plan = call(client, "plangate_get_plan", json!({})).await;
    let plan = plan.structured_content.unwrap();
    let step = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|st| st["step_id"] == id)
        .unwrap()
        .clone();
    (plan, step)
}

/// Opens the console, logs in with `s`'s operator token and waits for
/// `what` (`ready`, a script): the page's session.
fn open_console(b: &mut Browser, s: &Setup, what: &str, ready: &str) -> String {
    let page = b.open(&format!("{}/console", s.base));
    b.wait_for(&page, "the login form", "document.getElementById('token')");
    b.log_in(&page, &s.operator_token);
    b.wait_for(&page, what, ready);
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_approves_a_plan_in_the_console_and_only_then_the_agent_applies_it() {
    let s = setup().await;
    let client = agent(&s).await;

    // The agent (scope plan) plans a write full of hostile strings; its
    // apply is refused: nobody outside the key has approved.
    let hostile = json!({"id": 2, "title": IMG, "body": SCRIPT});
    let planned = call_ok(&client, "update_page", hostile).await;
    assert_eq!(
        planned.structured_content.as_ref().unwrap()["code"],
        "plan_step"
    );
    let digest = plan_digest(&client).await;
    let refused = call(
        &client,
        "plangate_apply_plan",
        json!({"plan_digest": digest}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(refused.structured_content.unwrap()["code"], "forbidden");

    let mut b = blocking(Browser::start);
    let page = blocking(|| log_in_past_the_wrong_tokens(&mut b, &s));
    blocking(|| the_page_shows_the_plan_as_text(&mut b, &page, &digest));

    // While the page stays open, the agent plans another step; the page
    // shows it without a reload (the marker set on this document survives).
    blocking(|| b.eval(&page, "window.__sameDocument = 'yes'"));
    let menu = json!({"menu": "main", "label": ANCHOR, "url": JS_LINK});
    call_ok(&client, "create_menu_item", menu).await;
    let digest = plan_digest(&client).await;
    blocking(|| {
        b.wait_for(
            &page,
            "the new step, live",
            "document.querySelectorAll('section.key[data-key=\"planner\"] li.step').length === 2",
        );
        b.wait_for(
            &page,
            "the new digest",
            &format!(
                "document.querySelector('section.key[data-key=\"planner\"] .digest').textContent === {}",
                serde_json::to_string(&digest).unwrap()
            ),
        );
        assert_eq!(b.eval(&page, "window.__sameDocument"), json!("yes"));
    });
    blocking(|| no_hostile_string_became_markup(&mut b, &page));
    a_forged_form_from_another_origin_is_refused(&mut b, &s, &digest).await;

    // The person clicks Approve, having read the step that came while the
    // page was open: the plan on screen is approved.
    blocking(|| approve_after_seeing_the_new_step(&mut b, &page));
    let approvals = s.approvals().await;
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(
        approvals[0]["actor"],
        json!({"kind": "operator", "name": "ana"})
    );
    assert_eq!(approvals[0]["channel"], "console");
    assert_eq!(approvals[0]["verdict"], "approve");
    assert_eq!(approvals[0]["plan_digest"], json!(digest));

    // Now the agent's apply of that digest goes through.
    let receipt = call_ok(
        &client,
        "plangate_apply_plan",
        json!({"plan_digest": digest}),
    )
    .await;
    let receipt = receipt.structured_content.unwrap();
    assert_eq!(receipt["applied"], 2, "{receipt}");

    // Nothing hostile ran at any point.
    let pwned = blocking(|| b.eval(&page, "window.__pwned === undefined"));
    assert_eq!(pwned, json!(true));
    drop(b);
    client.cancel().await.unwrap();
    s.stop().await;
}

/// A wrong token is refused with a clear message, and no session; an API
/// key too; the operator token opens the console, which shows the plan.
/// Returns the page.
fn log_in_past_the_wrong_tokens(b: &mut Browser, s: &Setup) -> String {
    let page = b.open(&format!("{}/console", s.base));
    b.wait_for(&page, "the login form", "document.getElementById('token')");
    b.log_in(&page, "pgo_not-a-real-operator-token");
    b.wait_for(
        &page,
        "the refusal",
        "document.body.innerText.includes('not a valid operator token')",
    );
    assert_eq!(
        b.eval(&page, "document.getElementById('keys') === null"),
        json!(true)
    );
    // An API key is not an operator token either.
    b.log_in(&page, &s.agent_token);
    b.wait_for(
        &page,
        "the refusal of an API key",
        "document.getElementById('token') && document.body.innerText.includes('not a valid operator token')",
    );
    // The operator token opens the console, which shows the plan.
    b.log_in(&page, &s.operator_token);
    b.wait_for(
        &page,
        "the planner's plan",
        "document.querySelector('section.key[data-key=\"planner\"] li.step')",
    );
    page
}

/// The planner's one step as the page shows it: digest `digest`, not
/// approved, by the operator ana, lands on a copy; its hostile arguments
/// shown as the exact text they are.
fn the_page_shows_the_plan_as_text(b: &mut Browser, page: &str, digest: &str) {
    let seen = b.eval(
        page,
        "(() => { const k = document.querySelector('section.key[data-key=\"planner\"]'); return { text: k.innerText, args: k.querySelector('pre.arguments').textContent, digest: k.querySelector('.digest').textContent, approved: k.querySelector('.approved').textContent, who: document.getElementById('who').textContent, steps: k.querySelectorAll('li.step').length }; })()",
    );
    assert_eq!(seen["digest"], json!(digest), "{seen}");
    assert_eq!(seen["approved"], "not approved");
    assert_eq!(seen["who"], "operator ana");
    assert_eq!(seen["steps"], 1);
    let text = seen["text"].as_str().unwrap();
    assert!(text.contains("update_page"), "{text}");
    assert!(text.contains("a copy of 2"), "lands_on is shown: {text}");
    // Hostile arguments are shown as the exact text they are.
    let args: Value = serde_json::from_str(seen["args"].as_str().unwrap()).unwrap();
    assert_eq!(args["title"], IMG);
    assert_eq!(args["body"], SCRIPT);
}

/// None of the hostile strings ran or became markup: each is on the page
/// as text.
fn no_hostile_string_became_markup(b: &mut Browser, page: &str) {
    let hostile = b.eval(
        page,
        "(() => { const k = document.getElementById('keys'); return { pwned: window.__pwned === undefined ? null : String(window.__pwned), markup: k.querySelectorAll('img, script, a, iframe, object, svg, form').length, text: k.textContent }; })()",
    );
    assert_eq!(hostile["pwned"], Value::Null, "hostile code ran: {hostile}");
    assert_eq!(
        hostile["markup"], 0,
        "hostile text became markup: {hostile}"
    );
    let text = hostile["text"].as_str().unwrap();
    for s in [IMG, SCRIPT, ANCHOR, JS_LINK] {
        let shown = serde_json::to_string(s).unwrap();
        assert!(
            text.contains(&shown[1..shown.len() - 1]),
            "{s} is not shown as text"
        );
    }
}

/// A page on another origin auto-submits a form to the approve endpoint
/// (the session cookie rides along: same site, other port). It is
/// refused, and nothing is recorded.
async fn a_forged_form_from_another_origin_is_refused(b: &mut Browser, s: &Setup, digest: &str) {
    let before = s.store.last_seq().await.unwrap();
    let (evil, stop_evil) = attacker(&s.base, &s.key_id, digest).await;
    let answer = blocking(|| {
        let evil_page = b.open(&evil);
        b.wait_for(
            &evil_page,
            "the console's answer to the forged form",
            "location.href.includes('/console/api/approve') && document.body && document.body.innerText.length > 0",
        );
        b.eval(&evil_page, "document.body.innerText")
    });
    stop_evil.cancel();
    assert!(
        answer.as_str().unwrap().contains("cross_site_request"),
        "{answer}"
    );
    assert_eq!(
        s.store.last_seq().await.unwrap(),
        before,
        "something was recorded"
    );
    assert!(s.approvals().await.is_empty());
}

/// Acknowledges the step that came while the page was open, approves the
/// plan on screen, and opens the first step's (redacted) arguments, as a
/// person would, for the screenshot.
fn approve_after_seeing_the_new_step(b: &mut Browser, page: &str) {
    b.click_then(
        page,
        "section.key[data-key=\"planner\"] button.ack-changes",
        "the new step, seen",
        "!document.querySelector('section.key[data-key=\"planner\"] li.step.unseen')",
    );
    b.click_then(
        page,
        "section.key[data-key=\"planner\"] button.approve",
        "the approval",
        "document.querySelector('section.key[data-key=\"planner\"] .approved').textContent === 'approved'",
    );
    // Show the first step's (redacted) arguments, as a person would.
    b.click_then(
        page,
        "section.key[data-key=\"planner\"] details.args > summary",
        "the arguments",
        "document.querySelector('details.args').open",
    );
    b.screenshot(page, &artifacts_dir().join("console.png"));
}

/// What an agent or an upstream wrote reaches the console screened: a
/// plugin slug that erases its own line (`\r\e[2K`) in a predicted
/// effect, and an option value with a right-to-left override and a
/// zero-width space (in the predicted effect the site's preview writes,
/// and in the arguments), show as visible escapes, each such line marked
/// `contains hidden characters`; nothing else is marked. A screenshot goes
/// to `target/artifacts/console-hidden.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hidden_characters_in_a_plan_show_as_escapes_and_are_marked_in_the_console() {
    let s = setup().await;
    let client = agent(&s).await;
    call_ok(
        &client,
        "set_plugin_active",
        json!({"slug": "seo\r\u{1b}[2Kok", "active": true}),
    )
    .await;
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "Fresh \u{202e}gnp.exe bread\u{200b}"}),
    )
    .await;

    let mut b = blocking(Browser::start);
    let seen = blocking(|| {
        let page = open_console(
            &mut b,
            &s,
            "two steps",
            "document.querySelectorAll('section.key[data-key=\"planner\"] li.step').length === 2",
        );
        b.click(
            &page,
            "section.key[data-key=\"planner\"] details.args > summary",
        );
        b.screenshot(&page, &artifacts_dir().join("console-hidden.png"));
        b.eval(
            &page,
            "(() => { const k = document.querySelector('section.key[data-key=\"planner\"]'); return { text: k.textContent, effects: Array.from(k.querySelectorAll('li.step .effect')).map((e) => e.textContent), marked: Array.from(k.querySelectorAll('mark.hidden-chars')).map((m) => ({ line: m.previousSibling ? m.previousSibling.textContent : '', mark: m.textContent })) }; })()",
        )
    });
    let text = seen["text"].as_str().unwrap();
    for raw in ['\u{1b}', '\r', '\u{202e}', '\u{200b}'] {
        assert!(!text.contains(raw), "{raw:?} reached the page: {text:?}");
    }
    let effects: Vec<&str> = seen["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        effects[0].starts_with("Set plugin seo\\r\\e[2Kok active: true.")
            && effects[0].ends_with("contains hidden characters"),
        "{effects:?}"
    );
    assert!(
        effects[1].contains("\\u{202e}gnp.exe bread\\u{200b}")
            && effects[1].ends_with("contains hidden characters"),
        "{effects:?}"
    );
    // Every mark follows a line that shows an escape: the two effects,
    // and the value in the second step's arguments.
    let marked = seen["marked"].as_array().unwrap();
    assert!(marked.len() >= 3, "{seen}");
    for m in marked {
        assert_eq!(m["mark"], "contains hidden characters");
        let line = m["line"].as_str().unwrap();
        assert!(line.contains("\\u{") || line.contains("\\e"), "{m}");
    }
    assert!(
        marked.iter().any(|m| m["line"]
            .as_str()
            .unwrap()
            .contains("\"value\": \"Fresh \\u{202e}gnp.exe")),
        "the arguments line is marked: {seen}"
    );
    drop(b);
    client.cancel().await.unwrap();
    s.stop().await;
}

/// The agent plans `update_option` of `name` to `value` (which must be
/// planned).
async fn set_option(client: &Agent, name: &str, value: Value) {
    call_ok(
        client,
        "update_option",
        json!({"name": name, "value": value}),
    )
    .await;
}

/// A notification's link (`/console#key=NAME&revision=N`, docs/design.md
/// §13) opened before logging in: the login keeps the link, and the
/// console opens on that key's plan, marked, saying the plan moved on
/// since the notification's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_notifications_link_opens_that_plan_after_the_login_and_says_if_it_changed() {
    let s = setup().await;
    let client = agent(&s).await;
    set_option(&client, "tagline", json!("Fresh bread")).await;
    set_option(&client, "site_title", json!("Bakery")).await;
    let mut b = blocking(Browser::start);
    let seen = blocking(|| {
        let page = b.open(&format!("{}/console#key=planner&revision=1", s.base));
        b.wait_for(&page, "the login form", "document.getElementById('token')");
        b.log_in(&page, &s.operator_token);
        b.wait_for(
            &page,
            "the linked plan",
            "document.querySelector('section.key.linked[data-key=\"planner\"]')",
        );
        b.eval(
            &page,
            "(() => { const k = document.querySelector('section.key.linked'); return { hash: window.location.hash, key: k.getAttribute('data-key'), said: k.querySelector('.head p.warning').textContent }; })()",
        )
    });
    assert_eq!(seen["hash"], "#key=planner&revision=1", "{seen}");
    assert_eq!(seen["key"], "planner");
    assert!(
        seen["said"].as_str().unwrap().starts_with(
            "Opened from a notification about revision 1; the plan is at revision 2 now"
        ),
        "{seen}"
    );
    drop(b);
    client.cancel().await.unwrap();
    s.stop().await;
}

/// The set-up of the batch tests: the `planner` agent and a second
/// `plan`-scope key `helper` with its own agent.
async fn two_planners() -> (Setup, Agent, plangate_store::CreatedKey, Agent) {
    let s = setup().await;
    let planner = agent(&s).await;
    let helper_key = s.store.create_key("helper", Scope::Plan).await.unwrap();
    let helper = client_of(
        s.gw.clone(),
        Some(helper_key.token.clone()),
        Seen::default(),
    )
    .await;
    (s, planner, helper_key, helper)
}

/// POSTs `plans` to the console's batch endpoint `path` with a session's
/// cookie and CSRF token.
async fn post_plans(
    http: &reqwest::Client,
    (base, cookie, csrf): (&str, &str, &str),
    path: &str,
    plans: Value,
) -> reqwest::Response {
    http.post(format!("{base}{path}"))
        .header("cookie", cookie)
        .header("x-plangate-csrf", csrf)
        .json(&json!({ "plans": plans }))
        .send()
        .await
        .unwrap()
}

/// Several keys' plans approved in one act (docs/console.md, "Several
/// plans at once"): all or nothing. Through the API, one plan that moved
/// on since it was shown refuses the whole act — the answer names it and
/// neither key's log records a yes. On the page, the person picks both
/// plans and approves them with one click; each yes binds the digest on
/// screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_plans_are_approved_together_or_not_at_all() {
    let (s, planner, helper_key, helper) = two_planners().await;
    set_option(&planner, "tagline", json!("Fresh bread")).await;
    set_option(&helper, "site_title", json!("Bakery")).await;
    let helper_shown = plan_digest(&helper).await;
    // The helper's plan moves on after the person's screen showed it.
    set_option(&helper, "posts_per_page", json!(5)).await;

    let http = http_client();
    let (cookie, csrf) = login(&http, &s.base, &s.operator_token).await.unwrap();
    let plans = json!([
        {"key_id": s.key_id, "plan_digest": plan_digest(&planner).await},
        {"key_id": helper_key.key.id, "plan_digest": helper_shown},
    ]);
    let session = (s.base.as_str(), cookie.as_str(), csrf.as_str());
    let r = post_plans(&http, session, "/console/api/plans/approve", plans).await;
    assert_eq!(r.status(), 409);
    let err: Value = r.json().await.unwrap();
    assert_eq!(
        (err["error"].as_str(), err["key"].as_str()),
        (Some("plan_changed"), Some("helper")),
        "{err}"
    );
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .ends_with("Nothing was recorded for any of the plans."),
        "{err}"
    );
    let yes_of = |key_id: String| {
        let store = s.store.clone();
        async move {
            store
                .export_events(Some(&key_id), None)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.kind == "review_answered")
                .count()
        }
    };
    assert_eq!(yes_of(s.key_id.clone()).await, 0);
    assert_eq!(yes_of(helper_key.key.id.clone()).await, 0);

    // In the console: pick both plans, one click.
    let mut b = blocking(Browser::start);
    let said = blocking(|| {
        let page = open_console(
            &mut b,
            &s,
            "two plans to pick",
            "document.querySelectorAll('input.pick-plan').length === 2",
        );
        b.click(&page, "section.key[data-key=\"planner\"] input.pick-plan");
        b.click(&page, "section.key[data-key=\"helper\"] input.pick-plan");
        b.wait_for(&page, "both picked", "document.querySelector('button.approve-plans').textContent === 'Approve picked plans (2)' && !document.querySelector('button.approve-plans').disabled");
        b.click(&page, "button.approve-plans");
        b.wait_for(
            &page,
            "the answer",
            "/Approved the plans of/.test(document.getElementById('status').textContent)",
        );
        b.eval(&page, "document.getElementById('status').textContent")
    });
    assert!(
        said.as_str().unwrap().contains("planner, helper")
            || said.as_str().unwrap().contains("helper, planner"),
        "{said}"
    );
    assert_eq!(yes_of(s.key_id.clone()).await, 1);
    assert_eq!(yes_of(helper_key.key.id.clone()).await, 1);
    drop(b);
    planner.cancel().await.unwrap();
    helper.cancel().await.unwrap();
    s.stop().await;
}

/// Several plans discarded in one act: a revision that moved on refuses
/// the whole act and discards nothing; as shown, every waiting step of
/// both plans goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_plans_are_discarded_together_or_not_at_all() {
    let (s, planner, _, helper) = two_planners().await;
    let first = json!({"name": "tagline", "value": "Fresh bread"});
    call_ok(&planner, "update_option", first.clone()).await;
    set_option(&helper, "site_title", json!("Bakery")).await;
    let http = http_client();
    let (cookie, csrf) = login(&http, &s.base, &s.operator_token).await.unwrap();
    let shown = |state: &Value, key: &str| {
        let k = state["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == key)
            .unwrap();
        json!({"key_id": k["key_id"], "plan_digest": k["plan_digest"], "revision": k["revision"]})
    };
    let state = get_json(&http, &format!("{}/console/api/state", s.base), &cookie).await;
    let before = [shown(&state, "planner"), shown(&state, "helper")];
    // The same write again: the digest stays, the revision moves.
    call_ok(&planner, "update_option", first).await;
    let session = (s.base.as_str(), cookie.as_str(), csrf.as_str());
    let discard = "/console/api/plans/discard";
    let r = post_plans(&http, session, discard, json!(before)).await;
    assert_eq!(r.status(), 409);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["key"], "planner", "{err}");
    let state = get_json(&http, &format!("{}/console/api/state", s.base), &cookie).await;
    for key in ["planner", "helper"] {
        let k = state["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == key)
            .unwrap();
        assert_eq!(k["pending_steps"], 1, "{key}: nothing discarded");
    }
    let now = [shown(&state, "planner"), shown(&state, "helper")];
    let r = post_plans(&http, session, discard, json!(now)).await;
    assert_eq!(r.status(), 200);
    let done: Value = r.json().await.unwrap();
    assert_eq!(done["discarded"].as_array().unwrap().len(), 2, "{done}");
    assert!(
        done["discarded"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["discarded"].as_array().unwrap().len() == 1),
        "{done}"
    );
    planner.cancel().await.unwrap();
    helper.cancel().await.unwrap();
    s.stop().await;
}

/// A step planned while the page is open is highlighted as new, and the
/// next Approve (and Apply) is refused on the page — nothing is sent —
/// until the person says they have seen it; the yes then carries the
/// digest and revision on screen, and the gateway itself refuses
/// `plan_changed` for a revision the plan moved on from, even at the same
/// digest. A screenshot goes to `target/artifacts/console-changed.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_added_while_the_page_is_open_is_highlighted_and_approve_waits_until_it_is_seen() {
    let s = setup().await;
    let client = agent(&s).await;
    let tagline = json!({"name": "tagline", "value": "Fresh bread"});
    call_ok(&client, "update_option", tagline.clone()).await;
    let section = "section.key[data-key=\"planner\"]";

    let mut b = blocking(Browser::start);
    let page = blocking(|| {
        let page = open_console(
            &mut b,
            &s,
            "the plan",
            &format!("document.querySelectorAll('{section} li.step').length === 1"),
        );
        // What was there when the page opened is what the person sees.
        assert_eq!(
            b.eval(
                &page,
                &format!("document.querySelectorAll('{section} li.step.unseen, {section} .unseen-banner').length")
            ),
            json!(0)
        );
        page
    });

    // The agent plans another step while the page is open.
    let added = call_ok(
        &client,
        "create_menu_item",
        json!({"menu": "main", "label": "Hours", "url": "/hours"}),
    )
    .await;
    let added_id = added.structured_content.unwrap()["step_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let seen = blocking(|| {
        b.wait_for(
            &page,
            "the new step, highlighted",
            &format!("document.querySelectorAll('{section} li.step').length === 2 && document.querySelector('{section} li.step.unseen')"),
        );
        b.screenshot(&page, &artifacts_dir().join("console-changed.png"));
        b.eval(
            &page,
            &format!("(() => {{ const k = document.querySelector('{section}'); return {{ unseen: Array.from(k.querySelectorAll('li.step.unseen')).map((li) => [li.getAttribute('data-step-id'), li.querySelector('.unseen-badge').textContent]), banner: k.querySelector('.unseen-banner').textContent }}; }})()"),
        )
    });
    assert_eq!(
        seen["unseen"],
        json!([[added_id, "new since you looked"]]),
        "{seen}"
    );
    assert!(
        seen["banner"]
            .as_str()
            .unwrap()
            .contains("1 new waiting step(s)"),
        "{seen}"
    );

    // Approve, Approve selected and Apply are refused on the page: nothing
    // reaches the gateway, nothing is recorded.
    let before = s.store.last_seq().await.unwrap();
    blocking(|| {
        for button in ["button.approve", "button.apply"] {
            b.click_then(
                &page,
                &format!("{section} {button}"),
                "the refusal",
                "document.getElementById('status').textContent.includes('changed while you were looking')",
            );
            b.eval(&page, "document.getElementById('status').textContent = ''");
        }
        // The refusal hands the person the acknowledgement.
        assert_eq!(
            b.eval(&page, "document.activeElement.className"),
            json!("ack-changes")
        );
    });
    assert_eq!(
        s.store.last_seq().await.unwrap(),
        before,
        "something was recorded"
    );
    assert!(s.approvals().await.is_empty());

    let now = the_gateway_refuses_a_revision_the_plan_moved_on_from(&s, &client, tagline).await;

    // Seen, once the page shows the plan as it is now: the highlight goes,
    // and Approve records the plan on screen.
    let shown = blocking(|| acknowledge_and_approve(&mut b, &page, section, now));
    let approvals = s.approvals().await;
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["plan_digest"], shown);
    assert_eq!(approvals[0]["step_ids"].as_array().unwrap().len(), 2);
    drop(b);
    client.cancel().await.unwrap();
    s.stop().await;
}

/// The gateway checks it too: the revision on screen, even where the
/// digest is the same (the agent sends its first write, `first`, again).
/// Returns the plan's revision now.
async fn the_gateway_refuses_a_revision_the_plan_moved_on_from(
    s: &Setup,
    client: &Agent,
    first: Value,
) -> u64 {
    let http = http_client();
    let (cookie, csrf) = login(&http, &s.base, &s.operator_token).await.unwrap();
    let state = get_json(&http, &format!("{}/console/api/state", s.base), &cookie).await;
    let (digest, revision) = (
        state["keys"][0]["plan_digest"].clone(),
        state["keys"][0]["revision"].as_u64().unwrap(),
    );
    let again = call_ok(client, "update_option", first).await;
    assert_eq!(again.structured_content.unwrap()["deduplicated"], true);
    let state = get_json(&http, &format!("{}/console/api/state", s.base), &cookie).await;
    assert_eq!(state["keys"][0]["plan_digest"], digest);
    let now = state["keys"][0]["revision"].as_u64().unwrap();
    assert!(now > revision);
    let r = http
        .post(format!("{}/console/api/approve", s.base))
        .header("cookie", &cookie)
        .header("x-plangate-csrf", &csrf)
        .json(&json!({"key_id": s.key_id, "plan_digest": digest, "revision": revision}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"], "plan_changed", "{err}");
    assert!(s.approvals().await.is_empty());
    now
}

/// Once the page shows revision `now`: says the new step was seen (the
/// highlight goes) and approves; returns the digest on screen.
fn acknowledge_and_approve(b: &mut Browser, page: &str, section: &str, now: u64) -> Value {
    b.wait_for(
        page,
        "the revision now",
        &format!("Array.from(document.querySelectorAll('{section} dl.facts dt')).some((dt) => dt.textContent === 'revision' && dt.nextElementSibling.textContent.startsWith('{now}'))"),
    );
    b.click_then(
        page,
        &format!("{section} button.ack-changes"),
        "no highlight",
        &format!("!document.querySelector('{section} li.step.unseen') && !document.querySelector('{section} .unseen-banner')"),
    );
    let shown = b.eval(
        page,
        &format!("document.querySelector('{section} .digest').textContent"),
    );
    b.click_then(
        page,
        &format!("{section} button.approve"),
        "the approval",
        &format!("document.querySelector('{section} .approved').textContent === 'approved'"),
    );
    shown
}

/// The demo site's state as it holds it.
fn site_state(s: &Setup) -> Value {
    let text = std::fs::read_to_string(s._dir.path().join("site.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// In `section` of the page, the step with `id`: a CSS selector.
fn step_sel(id: &str) -> String {
    format!("section.key[data-key=\"planner\"] li.step[data-step-id=\"{id}\"]")
}

/// A person shapes the plan in the console: approves two steps, amends one
/// of them (which ends that approval, hostile strings in the new arguments
/// staying text in the diff), approves the other again, rejects the third
/// with a reason, and clicks Apply: exactly the approved step runs, the
/// rest are reported not approved, the agent reads the reason, and the
/// history names every act and its actor. Screenshots of the diff and the
/// history go to `target/artifacts/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_approves_part_amends_rejects_and_applies_in_the_console() {
    let s = setup().await;
    let client = agent(&s).await;
    let mut ids = Vec::new();
    for (tool, args) in [
        (
            "update_option",
            json!({"name": "tagline", "value": "Fresh bread"}),
        ),
        (
            "create_menu_item",
            json!({"menu": "main", "label": "Hours", "url": "/hours"}),
        ),
        (
            "update_option",
            json!({"name": "site_title", "value": "Bakery"}),
        ),
    ] {
        let planned = call_ok(&client, tool, args).await;
        let body = planned.structured_content.unwrap();
        ids.push(body["step_id"].as_str().unwrap().to_owned());
    }
    let [tagline, menu, title] = <[String; 3]>::try_from(ids).unwrap();

    let mut b = blocking(Browser::start);
    let page = blocking(|| approve_two_by_keyboard(&mut b, &s, [&tagline, &menu]));
    let approvals = s.approvals().await;
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0]["step_ids"], json!([tagline, menu]));

    // Amend the menu item through the form built from the tool's schema,
    // with hostile strings: the approval of the pair no longer covers it.
    blocking(|| amend_the_menu_item(&mut b, &page, &menu));
    let (plan, amended) = plan_step(&client, &menu).await;
    assert_eq!(amended["arguments"]["label"], ANCHOR, "the agent sees it");
    assert_eq!(amended["amendment"]["by"], "ana");
    assert_eq!(amended["amendment"]["previous_arguments"]["label"], "Hours");
    assert_eq!(plan["approved"], false);

    blocking(|| the_diff_shows_the_change_as_text(&mut b, &page));
    blocking(|| approve_reject_and_apply(&mut b, &page, &tagline, &title));
    let site = site_state(&s);
    assert_eq!(site["options"]["tagline"]["value"], "Fresh bread");
    let labels: Vec<&str> = site["menus"]["main"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap())
        .collect();
    assert!(
        !labels.contains(&ANCHOR),
        "the amended step was not approved: {labels:?}"
    );
    assert_ne!(site["options"]["site_title"]["value"], "Bakery");
    let (_, rejected) = plan_step(&client, &title).await;
    assert_eq!(
        rejected["rejection"]["reason"],
        "keep the title: <b>Bakery</b> is wrong"
    );

    blocking(|| the_history_names_every_act_and_filters(&mut b, &page));
    drop(b);
    client.cancel().await.unwrap();
    s.stop().await;
}

/// Opens the console on three steps, ticks `steps` and approves them, by
/// keyboard: focus, Space on each box, Enter on the button. Returns the
/// page.
fn approve_two_by_keyboard(b: &mut Browser, s: &Setup, steps: [&String; 2]) -> String {
    let page = open_console(
        b,
        s,
        "three steps",
        "document.querySelectorAll('section.key[data-key=\"planner\"] li.step').length === 3",
    );
    for id in steps {
        b.press(&page, &format!("{} input.pick", step_sel(id)), " ");
    }
    b.wait_for(
        &page,
        "the approve-selected button",
        "document.querySelector('button.approve-picked').textContent === 'Approve selected (2)'",
    );
    b.press(&page, "button.approve-picked", "Enter");
    b.wait_for(
        &page,
        "two approved steps",
        "document.querySelectorAll('section.key[data-key=\"planner\"] .step-approved').length === 2",
    );
    page
}

/// Amends the step `menu` with hostile strings through the form; the
/// pair's approval no longer covers it.
fn amend_the_menu_item(b: &mut Browser, page: &str, menu: &str) {
    b.click_then(
        page,
        &format!("{} button.amend-step", step_sel(menu)),
        "the amend form",
        "document.querySelector('.amend-form input[name=\"label\"]')",
    );
    b.type_into(page, ".amend-form input[name=\"label\"]", ANCHOR);
    b.type_into(page, ".amend-form input[name=\"url\"]", JS_LINK);
    b.click_then(
        page,
        "button.confirm-amend",
        "the amended step, no longer approved",
        &format!(
            "document.querySelector('{} .step-amended') && document.querySelectorAll('section.key[data-key=\"planner\"] .step-approved').length === 0",
            step_sel(menu).replace('\'', "\\'")
        ),
    );
}

/// The diff since the review shows the change as text (a screenshot).
fn the_diff_shows_the_change_as_text(b: &mut Browser, page: &str) {
    b.click_then(
        page,
        "section.key[data-key=\"planner\"] button.show-diff",
        "the diff",
        "document.querySelector('pre.diff')",
    );
    let shown = b.eval(
        page,
        "(() => { const d = document.querySelector('pre.diff'); return { text: d.textContent, markup: document.getElementById('keys').querySelectorAll('img, script, a, iframe, object, svg, form').length, pwned: window.__pwned === undefined ? null : String(window.__pwned) }; })()",
    );
    let text = shown["text"].as_str().unwrap();
    assert!(text.contains("amended by ana"), "{text}");
    assert!(
        text.contains(&format!(
            "/label: {}",
            serde_json::to_string(ANCHOR).unwrap()
        )),
        "{text}"
    );
    assert!(text.contains("/label: \"Hours\""), "{text}");
    assert_eq!(shown["markup"], 0, "hostile text became markup: {shown}");
    assert_eq!(shown["pwned"], Value::Null, "hostile code ran: {shown}");
    b.screenshot(page, &artifacts_dir().join("console-diff.png"));
}

/// Approves the tagline alone again, rejects the title with a reason, and
/// clicks Apply: exactly the approved step runs.
fn approve_reject_and_apply(b: &mut Browser, page: &str, tagline: &str, title: &str) {
    b.click(page, &format!("{} input.pick", step_sel(tagline)));
    b.click_then(
        page,
        "button.approve-picked",
        "the tagline approved",
        &format!(
            "document.querySelector('{} .step-approved')",
            step_sel(tagline).replace('\'', "\\'")
        ),
    );
    b.reject_step(
        page,
        &step_sel(title),
        "keep the title: <b>Bakery</b> is wrong",
    );
    // Apply: exactly the approved step runs.
    b.click_then(
        page,
        "section.key[data-key=\"planner\"] button.apply",
        "the receipt",
        "document.querySelector('.receipt') && document.querySelector('.receipt').textContent.includes('not_approved')",
    );
}

/// The history: every act with its actor, newest first, filterable by
/// kind (a screenshot); nothing hostile ran.
fn the_history_names_every_act_and_filters(b: &mut Browser, page: &str) {
    b.click_then(
        page,
        "section.key[data-key=\"planner\"] button.show-history",
        "the history",
        "document.querySelectorAll('ol.history li.event').length > 5",
    );
    let acts = b.history_acts(page);
    for expected in [
        "step_amended | ana (operator) over console",
        "step_rejected | ana (operator) over console",
        "review_answered | ana (operator) over console",
        "step_applied | ana (operator) over console",
        "step_planned | planner (agent) over stdio",
    ] {
        assert!(
            acts.iter().any(|a| a == expected),
            "{expected} not in {acts:?}"
        );
    }
    assert_eq!(
        acts[0].split(" | ").next(),
        Some("apply_finished"),
        "newest first: {acts:?}"
    );
    b.eval(
        page,
        "(() => { const s = document.querySelector('select.history-kind'); s.value = 'step_amended'; s.dispatchEvent(new Event('change')); })()",
    );
    b.wait_for(
        page,
        "only the amendment",
        "document.querySelectorAll('ol.history li.event').length === 1 && document.querySelector('ol.history li.event').getAttribute('data-type') === 'step_amended'",
    );
    b.screenshot(page, &artifacts_dir().join("console-history.png"));
    let pwned = b.eval(page, "window.__pwned === undefined");
    assert_eq!(pwned, json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_cross_over_approve_binds_the_digest_and_revocation_is_immediate() {
    let s = setup().await;
    let http = http_client();
    let client = agent(&s).await;
    let planned = call_ok(
        &client,
        "update_page",
        json!({"id": 2, "title": "About us"}),
    )
    .await;

    tokens_never_stand_in_for_each_other(&http, &s).await;

    let (cookie, csrf) = login(&http, &s.base, &s.operator_token).await.unwrap();
    let page = get(&http, &format!("{}/console", s.base), &cookie).await;
    let h = page.headers();
    let csp = h["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("form-action 'self'"));
    assert!(csp.contains("script-src 'sha256-"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert_eq!(h["cache-control"], "no-store");
    let state = get_json(&http, &format!("{}/console/api/state", s.base), &cookie).await;
    let digest = state["keys"][0]["plan_digest"].as_str().unwrap().to_owned();
    // Nothing changed since: the poll is answered without the plans.
    let after = format!("{}/console/api/state?after={}", s.base, state["seq"]);
    let again = get_json(&http, &after, &cookie).await;
    assert_eq!(again["changed"], false, "{again}");
    assert!(again.get("keys").is_none());

    let approve = |csrf: Option<&str>, digest: &str| {
        let mut r = http
            .post(format!("{}/console/api/approve", s.base))
            .header("cookie", &cookie)
            .json(&json!({"key_id": s.key_id, "plan_digest": digest}));
        if let Some(c) = csrf {
            r = r.header("x-plangate-csrf", c);
        }
        r.send()
    };
    // Without the CSRF header, or with another session's: refused.
    let r = approve(None, &digest).await.unwrap();
    assert_eq!(r.status(), 403);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"], "csrf_token_invalid");
    let r = approve(Some(&"0".repeat(64)), &digest).await.unwrap();
    assert_eq!(r.status(), 403);

    // The plan changes after the person looked: plan_changed, nothing
    // recorded.
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "hi"}),
    )
    .await;
    let r = approve(Some(&csrf), &digest).await.unwrap();
    assert_eq!(r.status(), 409);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"], "plan_changed", "{err}");
    assert!(s.approvals().await.is_empty());

    let step_id = planned.structured_content.as_ref().unwrap()["step_id"]
        .as_str()
        .unwrap()
        .to_owned();
    retry_is_for_in_doubt_steps_and_discard_is_recorded(&http, &s, (&cookie, &csrf), &step_id)
        .await;

    // Revoked: the very next request is refused.
    s.store.revoke_operator_token("ana").await.unwrap();
    let r = get(&http, &format!("{}/console/api/state", s.base), &cookie).await;
    assert_eq!(r.status(), 401);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"], "unauthorized");
    let r = approve(Some(&csrf), &digest).await.unwrap();
    assert_eq!(r.status(), 401);
    // A forged cookie for the same id is refused too.
    let forged = cookie.replace(&cookie[cookie.len() - 8..], "00000000");
    let r = get(&http, &format!("{}/console/api/state", s.base), &forged).await;
    assert_eq!(r.status(), 401);
    assert!(s.approvals().await.is_empty());

    client.cancel().await.unwrap();
    s.stop().await;
}

/// A wrong token: 401, a clear message, no cookie, nothing else. An API
/// key never opens the console; an operator token never opens /mcp.
async fn tokens_never_stand_in_for_each_other(http: &reqwest::Client, s: &Setup) {
    let r = post_login(http, &s.base, "pgo_wrong").await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    let body = r.text().await.unwrap();
    assert!(body.contains("not a valid operator token"), "{body}");
    // An API key never opens the console; an operator token never opens /mcp.
    assert!(login(http, &s.base, &s.agent_token).await.is_none());
    assert_eq!(mcp_status(http, &s.base, &s.operator_token).await, 401);
}

/// Retry is for in-doubt steps only (`step_id` is not); discard records
/// the operator, and of an unknown key is 404; both in the operator's
/// session (its cookie and CSRF token).
async fn retry_is_for_in_doubt_steps_and_discard_is_recorded(
    http: &reqwest::Client,
    s: &Setup,
    (cookie, csrf): (&str, &str),
    step_id: &str,
) {
    let post = |path: &str, body: Value| {
        http.post(format!("{}/console/api/{path}", s.base))
            .header("cookie", cookie)
            .header("x-plangate-csrf", csrf)
            .json(&body)
            .send()
    };
    let r = post("retry", json!({"key_id": s.key_id, "step_id": step_id}))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"], "invalid_arguments");
    assert!(
        err["message"].as_str().unwrap().contains("not in doubt"),
        "{err}"
    );
    let r = post(
        "discard",
        json!({"key_id": s.key_id, "step_ids": [step_id]}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let done: Value = r.json().await.unwrap();
    assert_eq!(done["discarded"], json!([step_id]));
    let discards: Vec<Value> = s
        .events()
        .await
        .into_iter()
        .filter(|(kind, _)| kind == "steps_discarded")
        .map(|(_, body)| body)
        .collect();
    assert_eq!(discards.len(), 1);
    assert_eq!(
        discards[0]["actor"],
        json!({"kind": "operator", "name": "ana"})
    );
    assert_eq!(discards[0]["channel"], "console");
    let r = post("discard", json!({"key_id": "key_0000000000000000"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// Undo from the console: the agent's page deletion is applied there; the
/// Last apply says the site kept a snapshot; "Revert the last apply…"
/// plans the site's own restore_snapshot as a step that names what it
/// reverts and waits for the person; their Apply brings the page back as
/// it was, the original then says what reverted it, and the key leaves
/// the list (nothing of that apply can be undone). A screenshot goes to
/// `target/artifacts/console-revert.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_reverts_the_last_apply_from_the_console_and_the_page_comes_back() {
    let s = setup().await;
    let client = agent(&s).await;
    let before = site_state(&s)["pages"][2].clone();
    assert_eq!(before["id"], 3);
    let planned = call_ok(&client, "delete_page", json!({"id": 3})).await;
    let delete = planned.structured_content.unwrap()["step_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut b = blocking(Browser::start);
    let key = "section.key[data-key=\"planner\"]";
    let page = blocking(|| {
        let page = open_console(
            &mut b,
            &s,
            "the deletion",
            &format!("document.querySelector('{key} li.step')"),
        );
        b.click_then(
            &page,
            &format!("{key} button.apply"),
            "the deletion applied, its undo said",
            &format!("document.querySelector('{key} .last-apply') && document.querySelector('{key} .last-apply').textContent.includes('undo by restore_snapshot')"),
        );
        page
    });
    assert_eq!(site_state(&s)["pages"][2]["status"], "trash");

    // The person reverts: one inverse step, waiting for their yes.
    let restore = blocking(|| {
        b.eval(&page, "window.confirm = function () { return true; }");
        b.click_then(
            &page,
            &format!("{key} button.revert-last"),
            "the restore planned",
            &format!("document.querySelector('{key} .revert') && document.querySelectorAll('{key} li.step').length === 1"),
        );
        b.eval(
            &page,
            &format!("document.querySelector('{key} li.step').getAttribute('data-step-id')"),
        )
    });
    let restore = restore.as_str().unwrap().to_owned();
    let said = blocking(|| {
        b.eval(
            &page,
            &format!("document.querySelector('{key} li.step').innerText"),
        )
    });
    assert!(
        said.as_str()
            .unwrap()
            .contains(&format!("the applied step {delete}")),
        "{said}"
    );
    let (_, step) = plan_step(&client, &restore).await;
    assert_eq!(step["tool"], "restore_snapshot");
    assert_eq!(step["reverts"], delete.as_str());
    assert_eq!(step["status"], "planned");
    assert!(
        step["predicted_effect"]
            .as_str()
            .unwrap()
            .starts_with("Restore page 3 from snapshot snap_3_1: now"),
        "{step}"
    );
    assert_eq!(
        site_state(&s)["pages"][2]["status"],
        "trash",
        "nothing ran yet"
    );

    blocking(|| {
        b.screenshot(&page, &artifacts_dir().join("console-revert.png"));
        // The inverse step is new to the page like any step: read, then
        // applied. Once it ran, nothing of that apply can be undone: the
        // key leaves the list (no plan, nothing to revert).
        b.click_then(
            &page,
            &format!("{key} button.ack-changes"),
            "the new step seen",
            &format!("!document.querySelector('{key} li.step.unseen')"),
        );
        b.click_then(
            &page,
            &format!("{key} button.apply"),
            "the restore applied",
            &format!("!document.querySelector('{key}') && document.body.innerText.includes('Applied 1 step(s)')"),
        );
    });
    let mut after = site_state(&s)["pages"][2].clone();
    assert_eq!(after["version"], 3);
    after["version"] = before["version"].clone();
    assert_eq!(after, before, "the page is back as it was");
    let (_, original) = plan_step_any(&client, &delete).await;
    assert_eq!(original["reverted_by"], json!([restore]));
    drop(b);
    client.cancel().await.unwrap();
    s.stop().await;
}

/// Step `id` of the agent's log, whole (any status), as
/// `plangate_get_plan {step_id}` answers it.
async fn plan_step_any(client: &Agent, id: &str) -> (Value, Value) {
    let plan = call(client, "plangate_get_plan", json!({"step_id": id})).await;
    let plan = plan.structured_content.unwrap();
    let step = plan["steps"][0].clone();
    (plan, step)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_tool_is_shown_and_accepted_in_the_console_bound_to_its_definition() {
    // The demo site's tools were pinned before, when update_option read
    // differently: at start it is quarantined as changed.
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path()).await;
    let key = store.create_key("agent", Scope::Write).await.unwrap();
    let operator = store.create_operator_token("ana").await.unwrap();
    // The real listing, learnt through a first gateway on a scratch store,
    // with update_option's description as it used to be.
    let scratch = plangate_store::open_sqlite(&dir.path().join("scratch.db"))
        .await
        .unwrap();
    let (first, _) = in_process("site", demo(dir.path().join("site.json")));
    let learn = start_on(scratch, vec![("site", first)]).await;
    let mut listing: Vec<plangate_core::PinnedDefinition> = learn.pins().tools["site"]
        .values()
        .map(|p| p.accepted.clone().unwrap())
        .collect();
    learn.shutdown().await;
    for d in &mut listing {
        if d.tool == "update_option" {
            let mut old = d.definition.value();
            old["description"] = json!("an older definition");
            *d = plangate_core::PinnedDefinition::of("update_option", &old);
        }
    }
    let pinned = plangate_core::testing::tools_pinned("site", listing);
    store
        .append_events(
            plangate_core::TOOLS_LOG,
            0,
            &[plangate_store::NewEvent {
                at_ms: 1,
                kind: "tools_pinned".into(),
                body: serde_json::to_value(&pinned).unwrap(),
                seal: None,
            }],
        )
        .await
        .unwrap();
    let (site, _) = in_process("site", demo(dir.path().join("site.json")));
    let gw = start_on(store.clone(), vec![("site", site)]).await;
    let (base, shutdown) = serve_http(&gw).await;
    let client = client_of(gw.clone(), Some(key.token.clone()), Seen::default()).await;
    let refused = call(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "x"}),
    )
    .await;
    assert_eq!(
        refused.structured_content.unwrap()["code"],
        "tool_quarantined"
    );

    let http = http_client();
    let (cookie, csrf) = login(&http, &base, &operator.token).await.unwrap();
    let state = get_json(&http, &format!("{base}/console/api/state"), &cookie).await;
    let tools = state["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{state}");
    let held = &tools[0];
    assert_eq!(
        (held["tool"].as_str(), held["reason"].as_str()),
        (Some("update_option"), Some("changed")),
        "{held}"
    );
    assert!(
        held["changed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "description"),
        "{held}"
    );
    let post = |body: Value| {
        http.post(format!("{base}/console/api/tool"))
            .header("cookie", &cookie)
            .header("x-plangate-csrf", &csrf)
            .json(&body)
            .send()
    };
    // Bound to the definition the person saw: another hash records nothing.
    let stale = post(json!({"server": "site", "tool": "update_option", "definition_hash": "sha256:00", "decision": "accept"}))
        .await
        .unwrap();
    assert_eq!(stale.status(), 409);
    assert!(
        stale
            .text()
            .await
            .unwrap()
            .contains("changed again since you looked")
    );
    let ok = post(json!({"server": "site", "tool": "update_option", "definition_hash": held["held_hash"], "decision": "accept"}))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200, "{}", ok.text().await.unwrap());
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "x"}),
    )
    .await;
    let accepted = store
        .export_events(Some(plangate_core::TOOLS_LOG), None)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "tool_accepted")
        .expect("the accept is on the record");
    assert_eq!(accepted.body.value()["actor"]["name"], "ana");
    assert_eq!(accepted.body.value()["channel"], "console");
    client.cancel().await.unwrap();
    shutdown.cancel();
    gw.shutdown().await;
}

/// With a factor required (`approvals require totp`), Approve in the
/// console records nothing until the person types their authenticator's
/// code: the first click is refused `factor_required` and the code field
/// appears; with the code the yes is recorded, naming the operator, and
/// the operators log records the factor used over the console. The same
/// code is not taken twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_factor_required_approve_waits_for_the_code_typed_in_the_console() {
    use plangate_core::Channel;
    use plangate_core::factor::{Requirement, from_base32, hotp, step_at};
    use plangate_gateway::operator::factor;

    let s = setup().await;
    let enrolment = factor::enroll(
        s.gw.operators(),
        s.gw.material(),
        factor::Enrolling {
            name: "ana",
            proof: factor::Proof::default(),
            channel: Channel::Cli,
        },
    )
    .await
    .unwrap();
    factor::require(
        s.gw.operators(),
        s.gw.material(),
        Requirement::Totp,
        factor::Proof::default(),
        (Channel::Cli, None),
    )
    .await
    .unwrap();
    let client = agent(&s).await;
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "coded"}),
    )
    .await;

    let mut b = blocking(Browser::start);
    let key = "section.key[data-key=\"planner\"]";
    let page = blocking(|| {
        open_console(
            &mut b,
            &s,
            "the plan",
            &format!("document.querySelector('{key} button.approve')"),
        )
    });
    blocking(|| {
        b.click_then(
            &page,
            &format!("{key} button.approve"),
            "the refusal and the code field",
            "!document.getElementById('factor').hidden && /factor_required/.test(document.getElementById('status').textContent)",
        )
    });
    assert!(s.approvals().await.is_empty(), "a yes without a code");

    let secret = from_base32(&enrolment.secret_base32).unwrap();
    let code = format!("{:06}", hotp(&secret, step_at(plangate_store::now_ms())));
    blocking(|| {
        b.type_into(&page, "#factor-code", &code);
        b.click_then(
            &page,
            &format!("{key} button.approve"),
            "the approval",
            &format!("document.querySelector('{key} .approved').textContent === 'approved'"),
        );
        assert_eq!(
            b.eval(&page, "document.getElementById('factor').hidden"),
            json!(true)
        );
        assert_eq!(
            b.eval(&page, "document.getElementById('factor-code').value"),
            json!("")
        );
    });
    let approvals = s.approvals().await;
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(
        approvals[0]["actor"],
        json!({"kind": "operator", "name": "ana"})
    );
    let trail = s
        .store
        .export_events(Some(plangate_core::operators::OPERATORS_LOG), None)
        .await
        .unwrap();
    let used: Vec<Value> = trail
        .iter()
        .filter(|e| e.kind == "factor_used")
        .map(|e| e.body.value())
        .collect();
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0]["channel"], "console");
    assert_eq!(used[0]["act"], "approve key planner's plan");

    // The same code again, straight at the API: refused, nothing recorded.
    let http = http_client();
    let (cookie, csrf) = login(&http, &s.base, &s.operator_token).await.unwrap();
    let digest = plan_digest(&client).await;
    let r = http
        .post(format!("{}/console/api/approve", s.base))
        .header("cookie", &cookie)
        .header("x-plangate-csrf", &csrf)
        .json(&json!({"key_id": s.key_id, "plan_digest": digest, "code": code}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"], "factor_required", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("used already"),
        "{err}"
    );
    assert_eq!(s.approvals().await.len(), 1);
    drop(b);
    client.cancel().await.unwrap();
    s.stop().await;
}

/// A passkey (WebAuthn, with user verification) registered from the
/// one-time link proves an approval in the console, in a real browser
/// with Chromium's virtual authenticator: the link works once; with
/// `approvals require passkey` Approve is refused `factor_required` until
/// the person answers the passkey prompt; the yes names the operator; the
/// operators log keeps the assertion, which verifies again against the
/// registered key; the same answer is not taken twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_passkey_registered_from_the_link_proves_an_approval_in_the_console() {
    use plangate_core::Channel;
    use plangate_core::factor::Requirement;
    use plangate_gateway::operator::factor::{self, passkey};

    let s = setup().await;
    // Browsers take passkeys on a domain or `localhost`, not an IP address.
    let base = s.base.replace("127.0.0.1", "localhost");
    let invite = passkey::invite(
        s.gw.operators(),
        s.gw.material(),
        factor::Enrolling {
            name: "ana",
            proof: factor::Proof::default(),
            channel: Channel::Cli,
        },
    )
    .await
    .unwrap();
    let mut b = blocking(Browser::start);
    let page = blocking(|| register_passkey(&mut b, &base, &invite));
    // The link works once.
    let again = reqwest::Client::new()
        .post(format!("{base}/console/api/passkey/options"))
        .json(&json!({"invite": invite}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 403, "{}", again.text().await.unwrap());
    factor::require(
        s.gw.operators(),
        s.gw.material(),
        Requirement::Passkey,
        factor::Proof::default(),
        (Channel::Cli, None),
    )
    .await
    .unwrap();

    let client = agent(&s).await;
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "by passkey"}),
    )
    .await;
    let key = "section.key[data-key=\"planner\"]";
    blocking(|| {
        b.call(
            Some(&page),
            "Page.navigate",
            json!({"url": format!("{base}/console")}),
        );
        b.wait_for(&page, "the login form", "document.getElementById('token')");
        b.log_in(&page, &s.operator_token);
        b.wait_for(
            &page,
            "the plan",
            &format!("document.querySelector('{key} button.approve')"),
        );
        b.click_then(
            &page,
            &format!("{key} button.approve"),
            "the refusal and the passkey button",
            "!document.getElementById('factor').hidden && /factor_required/.test(document.getElementById('status').textContent)",
        );
    });
    assert!(s.approvals().await.is_empty(), "a yes without the passkey");
    blocking(|| {
        b.click_then(
            &page,
            "#factor-passkey",
            "the approval",
            &format!("document.querySelector('{key} .approved').textContent === 'approved'"),
        )
    });
    let approvals = s.approvals().await;
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(
        approvals[0]["actor"],
        json!({"kind": "operator", "name": "ana"})
    );

    let replay = assertion_kept_and_spent(&s, &base).await;
    assert!(replay.contains("answered already"), "{replay}");
    client.cancel().await.unwrap();
    s.shutdown.cancel();
    s.gw.shutdown().await;
}

/// Opens the one-time link in a tab with Chromium's virtual authenticator
/// (user verification on) and registers a passkey: the tab.
fn register_passkey(b: &mut Browser, base: &str, invite: &str) -> String {
    let page = b.open(&format!("{base}/console/passkey#invite={invite}"));
    b.call(Some(&page), "WebAuthn.enable", json!({}));
    b.call(
        Some(&page),
        "WebAuthn.addVirtualAuthenticator",
        json!({"options": {
            "protocol": "ctap2", "transport": "internal",
            "hasResidentKey": true, "hasUserVerification": true,
            "isUserVerified": true, "automaticPresenceSimulation": true
        }}),
    );
    b.wait_for(
        &page,
        "the operator's name",
        "/ana/.test(document.getElementById('who').textContent)",
    );
    b.click_then(
        &page,
        "#register",
        "the registration",
        "/Registered/.test(document.getElementById('status').textContent)",
    );
    page
}

/// The operators log keeps the passkey's assertion, and it verifies
/// again against the registered key; the same answer sent again for the
/// same act is refused: what the refusal says.
async fn assertion_kept_and_spent(s: &Setup, base: &str) -> String {
    use plangate_core::Channel;
    use plangate_core::operators::OPERATORS_LOG;
    use plangate_gateway::operator::factor::{self, passkey};
    let trail = s
        .store
        .export_events(Some(OPERATORS_LOG), None)
        .await
        .unwrap();
    let added = trail.iter().find(|e| e.kind == "passkey_added").unwrap();
    let public_key = added.body.value()["passkey"]["public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let used = trail
        .iter()
        .find(|e| e.kind == "factor_used")
        .expect("the passkey's use is on the record");
    let used = used.body.value();
    assert_eq!(used["factor"], "passkey", "{used}");
    assert!(
        used["act"]
            .as_str()
            .unwrap()
            .starts_with("approve key planner's plan at sha256:"),
        "{used}"
    );
    let assertion = &used["passkey"];
    let signed = plangate_core::passkey::signed_bytes(
        &hex::decode(assertion["authenticator_data"].as_str().unwrap()).unwrap(),
        assertion["client_data_json"].as_str().unwrap(),
    );
    assert!(plangate_store::verify_p256(
        &hex::decode(&public_key).unwrap(),
        &signed,
        &hex::decode(assertion["signature"].as_str().unwrap()).unwrap(),
    ));
    // The same answer, sent again for the same act: refused, its nonce is
    // spent.
    use base64::Engine as _;
    let b64 = |hex_text: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hex::decode(hex_text).unwrap())
    };
    let fields = passkey::AssertionFields {
        credential_id: b64(assertion["credential_id"].as_str().unwrap()),
        client_data_json: base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(assertion["client_data_json"].as_str().unwrap()),
        authenticator_data: b64(assertion["authenticator_data"].as_str().unwrap()),
        signature: b64(assertion["signature"].as_str().unwrap()),
    };
    let act_text = used["act"].as_str().unwrap();
    let seen = act_text.trim_start_matches("approve key planner's plan ");
    let origin = base.to_owned();
    let replay = factor::confirm(
        s.gw.operators(),
        s.gw.material(),
        &factor::Act::Approve { key: "planner" },
        factor::Proof {
            passkey: Some(passkey::PasskeyProof {
                fields: &fields,
                party: plangate_core::passkey::Party {
                    rp_id: "localhost",
                    origin: &origin,
                },
                seen,
            }),
            ..factor::Proof::default()
        },
        Channel::Console,
    )
    .await
    .unwrap_err();
    replay.to_string()
}
