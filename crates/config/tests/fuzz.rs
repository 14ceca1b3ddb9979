//! Bounded fuzzing of config parsing on stable: any text, and valid files
//! with random damage, give a config or a list of errors — never a panic.
//! `PROPTEST_CASES=100000 cargo test -p plangate-config --test fuzz` runs
//! longer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use plangate_config::{Env, parse_mcp_json, parse_toml};
use proptest::prelude::*;

struct NoEnv;

impl Env for NoEnv {
    fn var(&self, name: &str) -> Option<String> {
        BTreeMap::from([("HOME", "/home/me")])
            .get(name)
            .map(|v| (*v).to_owned())
    }
}

const VALID: &str = r#"
[gateway]
anonymous = "read"
max_steps = 10
plan_ttl = "1h"
rate_limit = "60/min"

[modes.careful]
access = "write"
over_access = "ask"

[redaction]
names = ["ssn"]

[upstreams.site]
command = "node"
args = ["server.js", "${HOME}/x"]
call_timeout = "30s"

[upstreams.site.tools.update_page]
effect = "write"
preview = "preview_update_page"
target = "/id"
"#;

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(plangate_core::testing::proptest_cases(512))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_text_is_a_config_or_errors(text in "\\PC{0,400}") {
        let _ = parse_toml(&text, Path::new("/x/plangate.toml"), &NoEnv);
        let _ = parse_mcp_json(&text, Path::new("/x/mcp.json"), &NoEnv);
    }

    #[test]
    fn a_damaged_valid_file_is_a_config_or_errors(
        cut in 0usize..400,
        insert in "\\PC{0,20}",
        at in 0usize..400,
    ) {
        let mut text = VALID.to_owned();
        let at = at.min(text.len());
        if text.is_char_boundary(at) {
            text.insert_str(at, &insert);
        }
        let cut = cut.max(text.len() / 2).min(text.len());
        if text.is_char_boundary(cut) {
            text.truncate(cut);
        }
        if let Err(errors) = parse_toml(&text, Path::new("/x/plangate.toml"), &NoEnv) {
            // Every error names the file and says something.
            for line in errors.to_string().lines().filter(|l| !l.ends_with("in configuration")) {
                prop_assert!(line.starts_with("/x/plangate.toml"), "{}", line);
            }
        }
    }

    #[test]
    fn any_json_is_a_client_config_or_errors(
        servers in prop::collection::btree_map("[a-z_ -]{0,8}", "\\PC{0,30}", 0..4)
    ) {
        let entries: Vec<String> = servers
            .iter()
            .map(|(k, v)| format!("{:?}: {{\"command\": {:?}, \"args\": [{:?}]}}", k, v, v))
            .collect();
        let text = format!("{{\"mcpServers\": {{{}}}}}", entries.join(","));
        let _ = parse_mcp_json(&text, Path::new("/x/mcp.json"), &NoEnv);
    }
}
