//! The demo site's planning settings, shipped as a real `plangate.toml`
//! (`demo.toml`) so that the zero-config demo and a copied file mean the
//! same thing and pass the same checks.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::model::ToolOverride;
use crate::toml_file::parse_toml;

/// A `plangate.toml` for the demo site (`plangate demo-site`): one stdio
/// upstream, `site`, with per-tool previews, templates, landing places and
/// receipt pointers for every write tool it has.
pub const DEMO_TOML: &str = include_str!("demo.toml");

/// The per-tool settings of [`DEMO_TOML`]'s `site` upstream, keyed by the
/// demo site's own tool names, for the CLI's zero-config demo (which runs
/// its own binary as the upstream and so builds the transport itself).
pub fn demo_tool_overrides() -> BTreeMap<String, ToolOverride> {
    // The file uses no variables, so an empty environment is exact.
    let env: HashMap<String, String> = HashMap::new();
    match parse_toml(DEMO_TOML, Path::new("demo.toml"), &env) {
        Ok(mut config) => config
            .upstreams
            .remove("site")
            .map(|site| site.tools)
            .unwrap_or_default(),
        // Fixed text checked by this crate's tests; never reached.
        Err(e) => panic!("the embedded demo.toml is not valid:\n{e}"),
    }
}
