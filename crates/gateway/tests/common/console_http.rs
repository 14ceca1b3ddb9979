//! The web console over plain HTTP (no browser, so no `Origin`): a client
//! that shows redirects, the login, the session's GETs, and `/mcp` asked
//! with a bearer. Apart from the in-process harness because plangate's own
//! tests (crates/cli/tests) include this file too, against a running
//! `plangate serve --http`.

use serde_json::Value;

/// A plain HTTP client that shows redirects rather than following them.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Submits the console's login form at `base` with `token`: the answer,
/// whatever it is.
pub async fn post_login(http: &reqwest::Client, base: &str, token: &str) -> reqwest::Response {
    http.post(format!("{base}/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap()
}

/// Logs in at `base` with `token`: the session cookie and the CSRF token,
/// or `None` when no session was opened.
pub async fn login(http: &reqwest::Client, base: &str, token: &str) -> Option<(String, String)> {
    let r = post_login(http, base, token).await;
    let cookie = r
        .headers()
        .get("set-cookie")?
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let state = get_json(http, &format!("{base}/console/api/state"), &cookie).await;
    Some((cookie, state["csrf"].as_str()?.to_owned()))
}

/// GETs `url` in the session of `cookie`.
pub async fn get(http: &reqwest::Client, url: &str, cookie: &str) -> reqwest::Response {
    http.get(url).header("cookie", cookie).send().await.unwrap()
}

/// Like [`get`]; the answer must be JSON.
pub async fn get_json(http: &reqwest::Client, url: &str, cookie: &str) -> Value {
    get(http, url, cookie).await.json().await.unwrap()
}

/// The status of a `tools/list` POSTed to `base`'s `/mcp` with `bearer`:
/// how a test shows an operator token is no API key.
pub async fn mcp_status(http: &reqwest::Client, base: &str, bearer: &str) -> reqwest::StatusCode {
    http.post(format!("{base}/mcp"))
        .bearer_auth(bearer)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap()
        .status()
}
