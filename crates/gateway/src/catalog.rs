//! The catalog: every upstream tool, prompt and resource as a client sees
//! it, and the way back from an exposed name to the upstream that owns it.
//!
//! Names follow the rule documented in [`plangate_core::names`]. Each
//! tool's effect class is fixed here, once, by
//! [`plangate_core::classify`]: the same value drives dispatch and
//! `plangate config check`, so an operator sees exactly what plan mode will
//! do. Upstream annotations, `_meta`, `outputSchema` and everything else in a
//! tool definition pass through untouched, except `_meta.ui.resourceUri`,
//! which is rewritten by the same rule as resource URIs so that it still
//! points at a resource the client can read through plangate.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use plangate_config::Config;
use plangate_config::profiles::{PlacementSpec, ToolProfile, path_pointers};
use plangate_core::{
    Code, Effect, EffectSource, QuarantineReason, Standing, ToolPins, assign_names, classify,
    expose_uri,
};
use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};
use serde_json::Value;

use crate::upstream::Upstream;

/// One upstream tool as plangate offers it.
#[derive(Debug, Clone)]
pub struct CatalogTool {
    /// The name clients call it by.
    pub exposed: String,
    /// The upstream that owns it.
    pub upstream: String,
    /// The upstream's own name for it.
    pub original: String,
    /// Its effect class (docs/design.md §3).
    pub effect: Effect,
    /// Where the effect class came from.
    pub effect_source: EffectSource,
    /// False when config disables it: not listed, calls refused.
    pub enabled: bool,
    /// Why plangate will not offer it although config enables it: not
    /// listed, calls refused, `config check` says why.
    pub withheld: Option<Withheld>,
    /// The definition clients see: the upstream's, renamed.
    pub tool: Tool,
    /// The compiled `inputSchema`, or `None` if the upstream's schema does
    /// not compile (then arguments are passed unchecked, and `config check`
    /// says so).
    pub validator: Option<Arc<jsonschema::Validator>>,
    /// [`plangate_core::schema_hash`] of `inputSchema`, computed once: a
    /// planned step records it and apply compares it (`None` if the schema
    /// cannot be canonicalised).
    pub schema_hash: Option<String>,
    /// [`plangate_core::definition_hash`] of the whole definition as the
    /// upstream listed it: what pins and planned steps bind.
    pub definition_hash: String,
    /// The built-in profile matched by the upstream's identity and the
    /// tool's schema, with its name ([`plangate_config::profiles`]).
    pub profile: Option<Arc<plangate_config::profiles::Matched>>,
    /// Which arguments are paths and how the server places them: what
    /// rules see as `paths` ([`crate::policy`]).
    pub paths: Arc<PathFacts>,
}

/// Why plangate withholds an upstream tool that config enables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withheld {
    /// Its exposed name could pass for one of the gateway's own tools
    /// ([`plangate_core::imitates_gateway_tool`]).
    Imitation,
    /// Its definition is new or changed since the upstream's tools were
    /// pinned (docs/design.md §9); `rejected` once an operator refused it.
    Quarantined {
        /// New since the first listing, or changed.
        reason: QuarantineReason,
        /// An operator rejected this definition.
        rejected: bool,
    },
    /// Its definition has not been checked against the pins yet (the
    /// store could not be read or written): held back, fail closed.
    Unverified,
    /// The log of tool pins does not verify: nothing in it is trusted.
    PinsTampered,
}

impl Withheld {
    /// The refusal code a call to the tool gets.
    pub fn code(&self) -> Code {
        match self {
            Withheld::Imitation => Code::Forbidden,
            Withheld::Quarantined { .. } | Withheld::Unverified | Withheld::PinsTampered => {
                Code::ToolQuarantined
            }
        }
    }

    /// One sentence for a person: why, and what to do.
    pub fn reason(&self, tool: &CatalogTool, prefix: &str) -> String {
        let up = &tool.upstream;
        match self {
            Withheld::Imitation => format!(
                "{} is not offered: its name reads like one of plangate's own tools (prefix {prefix:?}), so an agent or a person could take it for plangate's. Namespace the upstream ([gateway] namespace = \"always\") or change plangate's tool_prefix to offer it",
                tool.exposed
            ),
            Withheld::Quarantined { rejected: true, .. } => format!(
                "{} is quarantined: an operator rejected its current definition from upstream {up}; it is not offered until the upstream changes it and a person accepts the new one",
                tool.exposed
            ),
            Withheld::Quarantined {
                reason: QuarantineReason::New,
                ..
            } => format!(
                "{} is quarantined: upstream {up} added it after its tools were pinned, so nobody has reviewed it yet; it is offered once a person reviews and accepts it",
                tool.exposed
            ),
            Withheld::Quarantined {
                reason: QuarantineReason::Changed,
                ..
            } => format!(
                "{} is quarantined: upstream {up} changed its definition (description, schema or annotations) since it was pinned; it is offered again once a person reviews the change and accepts it",
                tool.exposed
            ),
            Withheld::Unverified => format!(
                "{} is held back: plangate could not check it against the pinned tool definitions (its store could not be read); it is offered once that works — try again shortly",
                tool.exposed
            ),
            Withheld::PinsTampered => format!(
                "{} is held back: the log of tool pins does not verify (it was changed outside plangate), so no tool is offered until a person looks (`plangate audit verify --key tools`)",
                tool.exposed
            ),
        }
    }

    /// A few words for a table.
    pub fn label(&self) -> &'static str {
        match self {
            Withheld::Imitation => "no (name imitates plangate's own tools)",
            Withheld::Quarantined { rejected: true, .. } => "no (quarantined: rejected)",
            Withheld::Quarantined {
                reason: QuarantineReason::New,
                ..
            } => "no (quarantined: new since pinned)",
            Withheld::Quarantined {
                reason: QuarantineReason::Changed,
                ..
            } => "no (quarantined: changed since pinned)",
            Withheld::Unverified => "no (not yet checked against the pins)",
            Withheld::PinsTampered => "no (the log of tool pins does not verify)",
        }
    }
}

impl CatalogTool {
    /// Whether clients see it and may call it.
    pub fn offered(&self) -> bool {
        self.enabled && self.withheld.is_none()
    }

    /// Checks arguments against the tool's `inputSchema`. The messages name
    /// the argument's path and the rule it breaks, never its value (which
    /// may be a secret).
    pub fn check_arguments(&self, arguments: &serde_json::Value) -> Result<(), Vec<String>> {
        let Some(validator) = &self.validator else {
            return Ok(());
        };
        let errors: Vec<String> = validator
            .iter_errors(arguments)
            .take(10)
            .map(|e| {
                let path = e.instance_path().to_string();
                let at = if path.is_empty() {
                    "arguments".to_owned()
                } else {
                    format!("argument {path}")
                };
                format!("{at}: {}", e.masked())
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// One upstream prompt as plangate offers it.
#[derive(Debug, Clone)]
pub struct CatalogPrompt {
    /// The upstream that owns it.
    pub upstream: String,
    /// The upstream's own name for it.
    pub original: String,
    /// The definition clients see: the upstream's, renamed.
    pub prompt: Prompt,
}

/// Everything the connected upstreams offer, under exposed names.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Whether names are namespaced (`NAME__tool`).
    pub namespaced: bool,
    /// Tools in upstream-name order, then each upstream's own order.
    pub tools: Vec<CatalogTool>,
    by_tool: HashMap<String, usize>,
    /// Prompts, ordered like tools.
    pub prompts: Vec<CatalogPrompt>,
    by_prompt: HashMap<String, usize>,
    /// Resources with exposed URIs.
    pub resources: Vec<Resource>,
    /// Resource templates with exposed URI templates.
    pub resource_templates: Vec<ResourceTemplate>,
    /// Upstream names, so an exposed URI can be routed.
    pub upstream_names: BTreeSet<String>,
    /// Tools of upstreams that are down, by exposed name: calls to them
    /// fail fast with `upstream_unavailable` rather than "unknown tool".
    gone: HashMap<String, String>,
}

impl Catalog {
    /// Builds the catalog from connected upstreams. `reserved` holds names
    /// that upstream tools must not take (the gateway's own tools). `down`
    /// holds the last known lists of upstreams that are not connected now:
    /// their names are kept out of the way so exposed names do not shift
    /// while an upstream restarts. With `pins`, a tool whose definition is
    /// not the accepted one is withheld (docs/design.md §9); without (`config
    /// check` with no store), definitions are not checked.
    pub fn build(
        config: &Config,
        upstreams: &[Arc<Upstream>],
        down: &[Arc<Upstream>],
        reserved: &BTreeSet<String>,
        pins: Option<&ToolPins>,
    ) -> Catalog {
        let namespaced = config.namespaced();
        let mut sorted: Vec<(&Arc<Upstream>, bool)> = upstreams
            .iter()
            .map(|u| (u, true))
            .chain(down.iter().map(|u| (u, false)))
            .collect();
        sorted.sort_by(|a, b| a.0.name().cmp(b.0.name()));

        let mut cat = Catalog {
            namespaced,
            ..Catalog::default()
        };
        let mut taken_tools = reserved.clone();
        let mut taken_prompts = BTreeSet::new();
        for (up, is_up) in sorted {
            let name = up.name().to_owned();
            let ns = namespaced.then_some(name.as_str());
            let originals: Vec<&str> = up.tools.iter().map(|t| t.name.as_ref()).collect();
            let exposed = assign_names(ns, &originals, &mut taken_tools);
            if !is_up {
                for e in exposed {
                    cat.gone.insert(e, name.clone());
                }
                continue;
            }
            cat.upstream_names.insert(name.clone());
            for (tool, exposed) in up.tools.iter().zip(exposed) {
                let entry = catalog_tool(config, up, tool, exposed, ns, pins);
                cat.by_tool.insert(entry.exposed.clone(), cat.tools.len());
                cat.tools.push(entry);
            }
            cat.add_prompts(up, ns, &mut taken_prompts);
            cat.add_resources(up, ns);
        }
        cat
    }

    /// Adds upstream `up`'s prompts under names not yet in `taken`.
    fn add_prompts(&mut self, up: &Upstream, ns: Option<&str>, taken: &mut BTreeSet<String>) {
        let name = up.name();
        let originals: Vec<&str> = up.prompts.iter().map(|p| p.name.as_str()).collect();
        let exposed = assign_names(ns, &originals, taken);
        for (prompt, exposed) in up.prompts.iter().zip(exposed) {
            let mut shown = prompt.clone();
            shown.name = exposed.clone();
            self.by_prompt.insert(exposed, self.prompts.len());
            self.prompts.push(CatalogPrompt {
                upstream: name.to_owned(),
                original: prompt.name.clone(),
                prompt: shown,
            });
        }
    }

    /// Adds upstream `up`'s resources and templates, with exposed URIs.
    fn add_resources(&mut self, up: &Upstream, ns: Option<&str>) {
        for r in &up.resources {
            let mut shown = r.clone();
            shown.uri = expose_uri(ns, &r.uri);
            if let Some(meta) = shown.meta.as_mut() {
                rewrite_ui_resource_uri(&mut meta.0, ns);
            }
            self.resources.push(shown);
        }
        for t in &up.resource_templates {
            let mut shown = t.clone();
            shown.uri_template = expose_uri(ns, &t.uri_template);
            self.resource_templates.push(shown);
        }
    }

    /// The tool a client calls by `exposed`, if any.
    pub fn tool(&self, exposed: &str) -> Option<&CatalogTool> {
        self.by_tool.get(exposed).map(|&i| &self.tools[i])
    }

    /// Offered tools a name nobody offers most likely meant: the same tool
    /// under another upstream prefix or none (`files__write_file` when the
    /// one upstream's tools are not namespaced, `write_file` when they
    /// are). At most three, in catalog order; for the "unknown tool"
    /// answer, so the agent's next call can be right.
    pub fn near_names(&self, name: &str) -> Vec<&str> {
        let bare = name.rsplit("__").next().unwrap_or(name);
        self.tools
            .iter()
            .filter(|t| t.offered() && t.exposed != name)
            .filter(|t| t.original == bare || t.exposed == bare)
            .map(|t| t.exposed.as_str())
            .take(3)
            .collect()
    }

    /// The upstream of a tool that exists but whose upstream is down.
    pub fn gone_tool(&self, exposed: &str) -> Option<&str> {
        self.gone.get(exposed).map(String::as_str)
    }

    /// The prompt a client asks for by `exposed`, if any.
    pub fn prompt(&self, exposed: &str) -> Option<&CatalogPrompt> {
        self.by_prompt.get(exposed).map(|&i| &self.prompts[i])
    }

    /// The upstream owning an exposed resource URI, and the upstream's own
    /// URI. With one upstream and no namespacing, that upstream owns all.
    pub fn route_uri(&self, exposed: &str) -> Option<(String, String)> {
        if self.namespaced {
            let (up, original) = plangate_core::split_exposed_uri(exposed)?;
            self.upstream_names
                .contains(up)
                .then(|| (up.to_owned(), original))
        } else {
            let up = self.upstream_names.iter().next()?;
            Some((up.clone(), exposed.to_owned()))
        }
    }
}

/// One upstream tool as offered under `exposed`: its effect class, the
/// definition clients see, its compiled schema and hashes, and whether it
/// is withheld (docs/design.md §9).
fn catalog_tool(
    config: &Config,
    up: &Upstream,
    tool: &Tool,
    exposed: String,
    ns: Option<&str>,
    pins: Option<&ToolPins>,
) -> CatalogTool {
    let name = up.name();
    let over = up.config.tools.get(tool.name.as_ref());
    let ann = tool.annotations.as_ref();
    let (effect, effect_source) = classify(
        over.and_then(|o| o.effect),
        up.config.trust_annotations,
        ann.and_then(|a| a.read_only_hint),
        ann.and_then(|a| a.destructive_hint),
    );
    let mut shown = tool.clone();
    shown.name = exposed.clone().into();
    // A tool that can be planned is listed without outputSchema:
    // a plan-step answer would violate it (docs/design.md §3).
    if effect > Effect::Read {
        shown.output_schema = None;
    }
    let schema = serde_json::Value::Object((*tool.input_schema).clone());
    let validator = match jsonschema::validator_for(&schema) {
        Ok(v) => Some(Arc::new(v)),
        Err(e) => {
            tracing::warn!(upstream = %name, tool = %tool.name, "input schema does not compile; arguments pass unchecked: {}", e.masked());
            None
        }
    };
    let schema_hash = plangate_core::schema_hash(&schema).ok();
    if let Some(meta) = shown.meta.as_mut() {
        rewrite_ui_resource_uri(&mut meta.0, ns);
    }
    let definition_hash =
        plangate_core::definition_hash(&serde_json::to_value(tool).unwrap_or(Value::Null));
    let pinned = pins.map(|p| p.standing(name, &tool.name, &definition_hash));
    let withheld = withheld_of(config, name, tool, &exposed, pinned);
    let profile = plangate_config::profiles::profile_for(
        &config.profiles,
        up.server_name.as_deref(),
        &tool.name,
        &tool.input_schema,
    )
    .map(Arc::new);
    let paths = Arc::new(PathFacts::of(
        config,
        name,
        &tool.name,
        up.server_name.as_deref(),
        profile.as_deref().map(|m| &m.tool),
        &tool.input_schema,
    ));
    CatalogTool {
        withheld,
        exposed,
        upstream: name.to_owned(),
        original: tool.name.to_string(),
        effect,
        effect_source,
        enabled: over.is_none_or(|o| o.enabled),
        tool: shown,
        validator,
        schema_hash,
        definition_hash,
        profile,
        paths,
    }
}

/// Why tool `tool` of upstream `name`, exposed as `exposed`, is not
/// offered: its name imitates one of plangate's own, or its definition is
/// not the accepted one (`pinned`; `None` when pins are not checked).
fn withheld_of(
    config: &Config,
    name: &str,
    tool: &Tool,
    exposed: &str,
    pinned: Option<Standing>,
) -> Option<Withheld> {
    let withheld = if plangate_core::imitates_gateway_tool(exposed, &config.gateway.tool_prefix) {
        Some(Withheld::Imitation)
    } else {
        match pinned {
            None | Some(Standing::Accepted) => None,
            Some(Standing::Held { reason, rejected }) => {
                Some(Withheld::Quarantined { reason, rejected })
            }
            Some(Standing::Unjudged) => Some(Withheld::Unverified),
            Some(Standing::LogBroken) => Some(Withheld::PinsTampered),
        }
    };
    if withheld == Some(Withheld::Imitation) {
        tracing::warn!(upstream = %name, tool = %tool.name, "tool withheld: its name reads like one of plangate's own tools");
    }
    withheld
}

/// Rewrites `_meta.ui.resourceUri` (and the deprecated flat
/// `_meta["ui/resourceUri"]`) by the resource URI rule.
fn rewrite_ui_resource_uri(meta: &mut serde_json::Map<String, Value>, ns: Option<&str>) {
    if ns.is_none() {
        return;
    }
    if let Some(Value::Object(ui)) = meta.get_mut("ui")
        && let Some(Value::String(uri)) = ui.get_mut("resourceUri")
    {
        *uri = expose_uri(ns, uri);
    }
    if let Some(Value::String(uri)) = meta.get_mut("ui/resourceUri") {
        *uri = expose_uri(ns, uri);
    }
}

/// What the rules need to know about one tool's paths: which arguments
/// are paths, and how its server places them. Fixed when the catalog is
/// built, so it is defined here, below the rules that read it
/// ([`crate::policy::call_paths`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathFacts {
    /// JSON pointers to its path arguments ([`path_pointers`]).
    pub pointers: Vec<String>,
    /// How its server places `~` and relative paths (its profile).
    pub placement: Option<PlacementSpec>,
    /// The argument its relative paths resolve against (its profile).
    pub relative_to_argument: Option<String>,
}

impl PathFacts {
    /// The facts of `upstream`'s tool `tool` with `input_schema`, for a
    /// server that says it is `server_name`.
    pub fn of(
        config: &Config,
        upstream: &str,
        tool: &str,
        server_name: Option<&str>,
        profile: Option<&ToolProfile>,
        input_schema: &serde_json::Map<String, Value>,
    ) -> PathFacts {
        let placement = plangate_config::profiles::server_profile(&config.profiles, server_name)
            .and_then(|(_, p)| p.placement.clone());
        let configured = config
            .tool_settings(upstream, tool)
            .and_then(|s| s.paths.as_deref());
        PathFacts {
            pointers: path_pointers(configured, profile, placement.as_ref(), input_schema),
            placement,
            relative_to_argument: profile.and_then(|p| p.relative_to.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ui_resource_uri_follows_the_resource_rule() {
        let mut meta = json!({"ui": {"resourceUri": "ui://widget/a.html", "visibility": ["model"]}, "other": 1})
            .as_object()
            .cloned()
            .unwrap();
        rewrite_ui_resource_uri(&mut meta, Some("site"));
        assert_eq!(meta["ui"]["resourceUri"], "ui://site__widget/a.html");
        assert_eq!(meta["ui"]["visibility"], json!(["model"]));
        assert_eq!(meta["other"], 1);
    }
}
