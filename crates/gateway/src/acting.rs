//! Who is acting on a key's plan — the agent through its key, or a person
//! through the CLI or the console — and the events their acts append.

use plangate_core::{Actor, Channel, Event, EventKind};
use plangate_store::{ApiKey, now_ms};

/// Who is acting, and over which channel, for the events a call appends.
#[derive(Debug, Clone)]
pub struct Acting {
    /// The key whose log is written.
    pub key: ApiKey,
    /// How the call arrived.
    pub channel: Channel,
    /// The person acting on the key's plan from outside the agent (CLI,
    /// console), if it is one: then the events name the operator, and an
    /// apply needs no separate approval — the person's act is the approval.
    pub operator: Option<String>,
}

impl Acting {
    /// The event actor for the agent holding this key.
    pub fn actor(&self) -> Actor {
        match &self.operator {
            Some(name) => Actor::Operator { name: name.clone() },
            None => Actor::Agent {
                key_id: self.key.id.clone(),
                key_name: self.key.name.clone(),
                scope: Some(self.key.scope),
            },
        }
    }

    /// An event by this actor, now.
    pub fn event(&self, kind: EventKind) -> Event {
        Event {
            at_ms: now_ms(),
            key_id: self.key.id.clone(),
            actor: self.actor(),
            channel: self.channel,
            kind,
        }
    }
}
