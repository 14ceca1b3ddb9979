//! `plangate config check`: connects every upstream once and prints every
//! tool's exposed name, effect class, where the class came from, whether
//! it is offered and what its pin says. Apart from the other operator
//! commands, as only this one starts upstreams and builds a catalog.

use anyhow::Result;
use plangate_config::Config;
use serde_json::json;

use crate::commands::{describe_source, print_table};
use crate::output::outln;

/// `plangate config check`: connects every upstream and prints every
/// tool's exposed name, effect class and where the class came from.
pub async fn run(
    config: Config,
    (pins, enforcement): (
        Option<plangate_core::ToolPins>,
        Option<crate::enforcement::Enforcement>,
    ),
    vault: Option<plangate_gateway::upstream::oauth::Vault>,
    as_json: bool,
) -> Result<()> {
    let source = describe_source(&config.source);
    let (ups, sessions, errors) = connect_all(&config, vault.as_ref()).await;
    let catalog = plangate_gateway::Catalog::build(
        &config,
        &ups,
        &[],
        &plangate_gateway::reserved_names(&config),
        None,
    );
    let check = Checked {
        config: &config,
        catalog: &catalog,
        ups: &ups,
        pins: pins.as_ref(),
        enforcement: enforcement.as_ref(),
    };
    if as_json {
        check.print_json(&source, &errors)?;
    } else {
        check.print_text(&source, &errors);
    }
    for session in sessions {
        let _ = session.cancel().await;
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "{} upstream(s) could not be reached",
            errors.len()
        ))
    }
}

/// Connects every enabled upstream once, at the same time: those that
/// answered, their sessions (to end), and why each other one did not.
async fn connect_all(
    config: &Config,
    vault: Option<&plangate_gateway::upstream::oauth::Vault>,
) -> (
    Vec<std::sync::Arc<plangate_gateway::Upstream>>,
    Vec<plangate_gateway::upstream::Session>,
    Vec<String>,
) {
    use plangate_gateway::upstream::{UpstreamClient, connect_once, connector_for};
    let attempts = config.enabled_upstreams().map(|u| {
        // Upstreams behind OAuth connect with the tokens in the store.
        let client = match vault {
            Some(v) => UpstreamClient::detached_with(&u.name, v.clone()),
            None => UpstreamClient::detached(&u.name),
        };
        async move { connect_once(u, &connector_for(u), client).await }
    });
    let mut ups = Vec::new();
    let mut sessions = Vec::new();
    let mut errors = Vec::new();
    for attempt in futures::future::join_all(attempts).await {
        match attempt {
            Ok((upstream, session)) => {
                ups.push(std::sync::Arc::new(upstream));
                sessions.push(session);
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    (ups, sessions, errors)
}

/// What `config check` found: the catalog the connected upstreams make,
/// and the pins to compare their definitions with.
struct Checked<'a> {
    config: &'a Config,
    catalog: &'a plangate_gateway::Catalog,
    ups: &'a [std::sync::Arc<plangate_gateway::Upstream>],
    pins: Option<&'a plangate_core::ToolPins>,
    enforcement: Option<&'a crate::enforcement::Enforcement>,
}

impl Checked<'_> {
    /// What the pins say of a tool's listed definition: changes since
    /// pinned (annotations included) are flagged before a gateway
    /// quarantines them.
    fn pin_note(&self, t: &plangate_gateway::CatalogTool) -> String {
        let Some(pins) = self.pins else {
            return "unknown (store not readable)".to_owned();
        };
        let listed = self
            .ups
            .iter()
            .find(|u| u.name() == t.upstream)
            .and_then(|u| u.tools.iter().find(|d| d.name == t.original))
            .map(|d| {
                plangate_core::PinnedDefinition::of(
                    &t.original,
                    &serde_json::to_value(d).unwrap_or_default(),
                )
            });
        match listed {
            Some(listed) => plangate_gateway::tool_pins::pin_note(pins, &t.upstream, &listed),
            None => String::new(),
        }
    }

    /// The MCP revision a connected upstream negotiated.
    fn protocol_of(&self, name: &str) -> Option<String> {
        self.ups
            .iter()
            .find(|u| u.name() == name)
            .and_then(|u| u.protocol_version())
    }

    /// `config check --json`.
    fn print_json(&self, source: &str, errors: &[String]) -> Result<()> {
        let (config, catalog) = (self.config, self.catalog);
        let tools: Vec<_> = catalog
            .tools
            .iter()
            .map(|t| {
                json!({
                    "exposed_as": t.exposed,
                    "server": t.upstream,
                    "tool": t.original,
                    "effect": t.effect,
                    "effect_source": t.effect_source,
                    "enabled": t.enabled,
                    "offered": t.offered(),
                    "withheld": t.withheld.as_ref().map(|w| w.reason(t, &config.gateway.tool_prefix)),
                    "pin": self.pin_note(t),
                    "profile": t.profile.as_ref().map(|m| m.name.clone()),
                })
            })
            .collect();
        let mut upstreams: Vec<_> = config
            .upstreams
            .values()
            .map(|u| {
                json!({
                    "name": u.name,
                    "transport": u.transport.kind(),
                    "trust_annotations": u.trust_annotations,
                    "enabled": u.enabled,
                    "connected": catalog.upstream_names.contains(&u.name),
                    "protocol": self.protocol_of(&u.name),
                })
            })
            .collect();
        upstreams.extend(config.down.iter().map(
            |(name, why)| json!({"name": name, "enabled": true, "connected": false, "down": why}),
        ));
        crate::output::json(&json!({
            "config": source,
            "namespaced": catalog.namespaced,
            "upstreams": upstreams,
            "tools": tools,
            "errors": errors,
            "enforcement": self.enforcement,
            "rules": config.rules.iter().map(|r| &r.name).collect::<Vec<_>>(),
            "warnings": self.rule_warnings(),
        }))?;
        Ok(())
    }

    /// The operator's rules, and each `modes` list that leaves out the mode
    /// a key is in when nothing set one: a key in that mode is not judged
    /// by the rule — a `plan`-scope key too, whose writes are still
    /// planned, and then applied without the rule.
    fn print_rules(&self) {
        let rules = &self.config.rules;
        let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        outln!(
            "rules: {}{}",
            rules.len(),
            if names.is_empty() {
                String::new()
            } else {
                format!(" ({})", names.join(", "))
            }
        );
        for warning in self.rule_warnings() {
            outln!("warning: {warning}");
        }
    }

    /// Each rule whose `modes` list leaves out the default mode, said.
    fn rule_warnings(&self) -> Vec<String> {
        let default = self.config.modes.default_name();
        self.config
            .rules
            .iter()
            .filter_map(|rule| {
                let modes = rule.modes.as_ref()?;
                (!modes.iter().any(|m| m == default)).then(|| format!(
                    "rule {} applies only in mode(s) {}: a key in mode {default} (where every key starts) is not judged by it — a plan-scope key's writes are planned and later applied without it; add {default:?} to its modes if it should hold there",
                    rule.name,
                    modes.join(", ")
                ))
            })
            .collect()
    }

    /// `config check` as text: each upstream, then the tools as a table.
    fn print_text(&self, source: &str, errors: &[String]) {
        let (config, catalog) = (self.config, self.catalog);
        outln!("config: {source}");
        if let Some(enforcement) = self.enforcement {
            outln!("enforcement: {}", enforcement.text);
        }
        for u in config.upstreams.values() {
            let state = if !u.enabled {
                "disabled".to_owned()
            } else if catalog.upstream_names.contains(&u.name) {
                match self.protocol_of(&u.name) {
                    Some(v) => format!("connected (MCP {v})"),
                    None => "connected".to_owned(),
                }
            } else {
                "NOT CONNECTED".to_owned()
            };
            outln!(
                "upstream {} ({}, trust_annotations = {}): {state}",
                u.name,
                u.transport.kind(),
                u.trust_annotations
            );
        }
        let others = if config.enabled_upstreams().count() > config.down.len() {
            "; the others serve"
        } else {
            ""
        };
        for (name, why) in &config.down {
            outln!("upstream {name}: DOWN, not started: {why}{others}");
        }
        self.print_rules();
        let rows: Vec<[String; 6]> = catalog
            .tools
            .iter()
            .map(|t| {
                [
                    t.exposed.clone(),
                    t.effect.to_string(),
                    t.effect_source.to_string(),
                    match (&t.withheld, t.enabled) {
                        (_, false) => "no (disabled)".into(),
                        (Some(w), true) => w.label().into(),
                        (None, true) => "yes".into(),
                    },
                    self.pin_note(t),
                    match t.profile.as_deref() {
                        Some(m) if m.tool.preview.is_some() => format!("{} (preview)", m.name),
                        Some(m) => m.name.clone(),
                        None => "-".to_owned(),
                    },
                ]
            })
            .collect();
        outln!();
        print_table(
            &["TOOL", "EFFECT", "FROM", "OFFERED", "PIN", "PROFILE"],
            &rows,
        );
        for t in &catalog.tools {
            if let Some(why) = &t.withheld {
                outln!("{}", why.reason(t, &config.gateway.tool_prefix));
            }
        }
        for e in errors {
            crate::output::error(&format!("error: {e}"));
        }
    }
}
