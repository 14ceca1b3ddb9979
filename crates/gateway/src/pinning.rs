//! The gateway's side of tool pinning (docs/design.md §9): judging each
//! upstream's listing against the pins, and reading the pins again when
//! another process changed them. Apart from the crate root because it is
//! one concern, with its own log ([`plangate_core::TOOLS_LOG`]).

use std::sync::Arc;

use plangate_core::{Actor, Channel, Event, PinnedDefinition, TOOLS_LOG, ToolPins};

use crate::{Gateway, Upstream, key_log, read, write};

impl Gateway {
    /// The tool pins as last read.
    pub fn pins(&self) -> Arc<ToolPins> {
        read(&self.pinned)
    }

    pub(crate) async fn reload_pins(&self) -> Result<(), key_log::LogError> {
        let pins = self.pins_log().state(TOOLS_LOG).await?;
        write(&self.pinned, Arc::new(pins));
        Ok(())
    }

    /// Reads the pins again (another process accepted, rejected or
    /// quarantined a tool), rebuilds the catalog and tells every client.
    pub async fn refresh_pins(&self) {
        match self.reload_pins().await {
            Ok(()) => {
                self.rebuild_catalog();
                self.hub.notify_tools_changed().await;
            }
            Err(e) => tracing::warn!("cannot read the tool pins: {e}"),
        }
    }

    /// Judges an upstream's listing against the pins and records what it
    /// calls for (docs/design.md §9): its first listing is pinned; a tool new or
    /// changed since is quarantined. When the store cannot be written, the
    /// tools not yet judged stay held back (the catalog offers only
    /// accepted definitions).
    pub(crate) async fn judge_tools(&self, upstream: &Upstream) {
        let server = upstream.name().to_owned();
        let listing: Vec<PinnedDefinition> = upstream
            .tools
            .iter()
            .map(|t| {
                PinnedDefinition::of(
                    &t.name,
                    &serde_json::to_value(t).unwrap_or(serde_json::Value::Null),
                )
            })
            .collect();
        let judged = self
            .pins_log()
            .transact(TOOLS_LOG, |pins| {
                let now = plangate_store::now_ms();
                let events: Vec<Event> = pins
                    .judge_listing(&server, &listing)
                    .into_iter()
                    .map(|kind| Event {
                        at_ms: now,
                        key_id: TOOLS_LOG.to_owned(),
                        actor: Actor::System,
                        channel: Channel::Gateway,
                        kind,
                    })
                    .collect();
                let held: Vec<String> = events
                    .iter()
                    .filter_map(|e| match &e.kind {
                        plangate_core::EventKind::ToolQuarantined {
                            definition, reason, ..
                        } => Some(format!("{} ({})", definition.tool, reason.as_str())),
                        _ => None,
                    })
                    .collect();
                Ok::<_, std::convert::Infallible>((events, held))
            })
            .await;
        match judged {
            Ok(Ok((pins, held))) => {
                if !held.is_empty() {
                    tracing::warn!(upstream = %server, tools = %held.join(", "), "tool definitions quarantined: new or changed since this upstream's tools were pinned; an operator must accept them (plangate tools list)");
                }
                write(&self.pinned, Arc::new(pins));
            }
            Ok(Err(never)) => match never {},
            Err(e) => {
                tracing::error!(upstream = %server, "cannot record its tool pins: {e}; its tools not yet accepted stay held back")
            }
        }
    }
}
