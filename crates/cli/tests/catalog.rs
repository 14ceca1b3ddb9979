//! `plangate catalog`: the credential-free contract, byte-identical on every
//! run, equal to what the gateway library publishes, with digests that
//! recompute from the bytes it prints. Needs no key and touches no data dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use plangate_gateway::apps::{self, VIEW_HTML};
use serde_json::{Value, json};

fn catalog(cwd: &Path, data_dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_plangate"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("catalog")
        .args(args)
        .current_dir(cwd)
        .env_remove("PLANGATE_CONFIG")
        .env_remove("PLANGATE_KEY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "plangate catalog {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn the_catalog_is_deterministic_and_its_digests_recompute() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("never-created");

    let json_a = catalog(dir.path(), &data_dir, &["--json"]);
    let json_b = catalog(dir.path(), &data_dir, &["--json"]);
    assert_eq!(json_a, json_b, "--json differs between runs");
    let text = String::from_utf8(json_a).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    // Exactly the library's contract for the default prefix and modes.
    let config = plangate_config::Config::new(
        plangate_config::ConfigSource::Builtin("test"),
        Default::default(),
    );
    assert_eq!(text, apps::catalog_json(&config));
    // Canonical JSON: printing it canonically changes nothing.
    assert_eq!(text.trim_end(), apps::canonical(&doc));

    let c = &doc["contract"];
    let d = &doc["digests"];
    assert_eq!(d["html"], json!(apps::sha256(VIEW_HTML.as_bytes())));
    let response = &c["resource_reads"]["ui://plangate/plan-review"];
    assert_eq!(response["contents"][0]["text"], json!(VIEW_HTML));
    assert_eq!(
        d["resource_response"],
        json!(apps::sha256(apps::canonical(response).as_bytes()))
    );
    assert_eq!(
        d["contract"],
        json!(apps::sha256(apps::canonical(c).as_bytes()))
    );
    assert_eq!(
        c["capabilities"]["extensions"],
        json!({"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}})
    );
    let linked: Vec<&str> = c["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            let visibility = if t["name"] == "plangate_get_plan" {
                json!(["model", "app"])
            } else {
                json!(["model"])
            };
            t["_meta"]
                == json!({"ui": {"resourceUri": "ui://plangate/plan-review", "visibility": visibility}})
        })
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        linked,
        [
            "plangate_get_plan",
            "plangate_apply_plan",
            "plangate_exit_plan_mode"
        ]
    );
    for t in c["tools"].as_array().unwrap() {
        assert!(t["inputSchema"].is_object(), "{t}");
    }

    let html_a = catalog(dir.path(), &data_dir, &["--html"]);
    let html_b = catalog(dir.path(), &data_dir, &["--html"]);
    assert_eq!(html_a, html_b, "--html differs between runs");
    let html = String::from_utf8(html_a).unwrap();
    assert!(
        html.contains(&apps::escape_html(VIEW_HTML)),
        "escaped view source"
    );
    assert!(!html.contains("<script"), "the review page runs nothing");
    for key in ["html", "resource_response", "contract"] {
        assert!(html.contains(d[key].as_str().unwrap()), "digest {key}");
    }

    let table_a = catalog(dir.path(), &data_dir, &[]);
    assert_eq!(table_a, catalog(dir.path(), &data_dir, &[]));
    let table = String::from_utf8(table_a).unwrap();
    assert!(table.contains(d["contract"].as_str().unwrap()));
    assert!(table.contains("plangate_get_plan"));

    assert!(!data_dir.exists(), "catalog must not touch the data dir");
}
