//! `plangate connect`: a stdio client reaches a plangate serving HTTP (a
//! service of its own user) through the bridge, with its `plan` key as the
//! bearer — the agent plans, its writes wait, nothing of the data dir is
//! needed on the client's side — and a client without a key is refused by
//! the service, with the service's own answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;

use common::*;
use rmcp::ServiceExt as _;
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};

/// An rmcp client that starts `plangate connect --url URL` with `key`, from
/// a working directory with no data dir at all.
async fn connected(url: &str, key: Option<&str>) -> Result<Client, String> {
    let elsewhere = tempfile::tempdir().unwrap();
    let cwd = elsewhere.path().to_owned();
    let (url, key) = (url.to_owned(), key.map(str::to_owned));
    let cmd = tokio::process::Command::new(plangate()).configure(move |c| {
        c.args(["connect", "--url", &url])
            .current_dir(&cwd)
            .env("PLANGATE_DATA_DIR", cwd.join("not-the-service's"))
            .env_remove("PLANGATE_KEY");
        if let Some(k) = &key {
            c.env("PLANGATE_KEY", k);
        }
    });
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = client_info()
        .serve(transport)
        .await
        .map_err(|e| e.to_string());
    drop(elsewhere);
    client
}

#[tokio::test]
async fn a_stdio_client_plans_through_connect_and_the_service_keeps_the_state() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "plan");
    let service = serve_http(&scratch, &[]);
    let url = service.url();
    let agent = connected(&url, Some(&token)).await.unwrap();
    let tools = tool_names(&agent).await;
    assert!(tools.contains(&"update_option".to_owned()), "{tools:?}");
    let planned = ok(&agent, "update_option", tagline("Through the bridge")).await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    let plan = get_plan(&agent).await;
    assert_eq!(plan["pending_steps"], 1, "{plan}");
    // The plan lives with the service, in its data dir.
    let args = ["plans", "list", "--json"];
    let listed = succeeded(&args, &scratch.run(&args));
    assert!(listed.contains("\"agent\""), "{listed}");
    let site = scratch.data_dir().join("demo-site.json");
    if site.exists() {
        assert_eq!(
            site_state(&site)["options"]["tagline"]["value"],
            "Just another demo site"
        );
    }
    agent.cancel().await.unwrap();

    // No key: the service refuses, and the client hears why.
    let refused = match connected(&url, None).await {
        Ok(client) => {
            let err = client
                .peer()
                .list_all_tools()
                .await
                .unwrap_err()
                .to_string();
            client.cancel().await.unwrap();
            err
        }
        Err(e) => e,
    };
    assert!(refused.contains("refused this client's key"), "{refused}");
}
