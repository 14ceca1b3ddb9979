//! What this session's agent knows of its key's mode: the mode it was last
//! told, a change made from outside told exactly once, and the client told
//! its tool list changed when plan mode went on or off (docs/design.md
//! §4). Apart from the handler because every request that reads the mode
//! goes through here, whatever it asked.

use plangate_core::{DEFAULT_MODE, Effect, InForce, ModeSpec, OverAccess};
use rmcp::RoleServer;
use rmcp::service::RequestContext;

use super::GatewayHandler;

/// What this session's agent was last told about the mode, so a change made
/// from outside is told exactly once (docs/design.md §4).
#[derive(Default)]
pub(super) struct SeenMode {
    pub(super) spec: Option<ModeSpec>,
    locked: bool,
    told_undefined: bool,
}

impl GatewayHandler {
    /// Notes the mode in force for this session. Returns what to tell the
    /// agent — only when what it can do changed since it last heard (the
    /// mode's caps, or its lock), or a recorded mode is no longer defined
    /// (once) — and whether the tool list changed (plan mode on or off).
    fn observe_mode(&self, in_force: &InForce) -> (Option<String>, bool) {
        let spec = &in_force.spec;
        let mut seen = self.seen.lock();
        let previous = seen.spec.replace(spec.clone());
        let was_locked = std::mem::replace(&mut seen.locked, in_force.locked());
        let mut notice = None;
        let mut list_changed = false;
        match &previous {
            None if spec.name != DEFAULT_MODE || in_force.locked() => {
                notice = Some(describe_mode(in_force, false));
            }
            Some(p) if (p.access, p.over_access) != (spec.access, spec.over_access) => {
                notice = Some(describe_mode(in_force, true));
                list_changed = p.plan_mode() != spec.plan_mode();
            }
            Some(_) if was_locked != in_force.locked() => {
                notice = Some(describe_mode(in_force, true));
            }
            _ => {}
        }
        if let Some(u) = &in_force.notice
            && !seen.told_undefined
        {
            seen.told_undefined = true;
            notice = Some(match notice {
                Some(n) => format!("{u}. {n}"),
                None => u.clone(),
            });
        }
        (notice, list_changed)
    }

    /// Whether the mode in force for key `key_id` is a plan-like mode.
    pub(super) async fn in_plan_mode(
        &self,
        key_id: &str,
    ) -> Result<bool, crate::key_log::LogError> {
        let state = self.gw.log().state(key_id).await?;
        Ok(self.gw.config().modes.in_force(&state).spec.plan_mode())
    }

    /// Records a mode this session set itself (nothing to tell).
    pub(super) fn set_seen_mode(&self, in_force: InForce) {
        let mut seen = self.seen.lock();
        seen.locked = in_force.locked();
        seen.spec = Some(in_force.spec);
    }

    /// The mode in force for this session's key (from
    /// [`Modes::in_force`]), noted ([`Self::observe_mode`]): tells the
    /// client its tool list changed when plan mode went on or off. Returns
    /// the mode and the notice for the agent.
    ///
    /// [`Modes::in_force`]: plangate_core::Modes::in_force
    pub(super) async fn tell_mode(
        &self,
        in_force: InForce,
        cx: &RequestContext<RoleServer>,
    ) -> (InForce, Option<String>) {
        let (notice, list_changed) = self.observe_mode(&in_force);
        if list_changed {
            // Boxed: see `call`'s note on the size of its task.
            let _ = Box::pin(cx.peer.notify_tool_list_changed()).await;
        }
        (in_force, notice)
    }
}

/// A sentence telling the agent what a mode lets it do.
fn describe_mode(in_force: &InForce, changed: bool) -> String {
    let spec = &in_force.spec;
    let verb = if changed { "is now" } else { "is" };
    let lock = match in_force.locked_by {
        Some(by) => format!(
            " It is locked: {}; you cannot change it, end the session or leave plan mode, and a person outside your key approves the plan before it runs.",
            by.describe()
        ),
        None => String::new(),
    };
    if spec.name == DEFAULT_MODE {
        return format!("The mode {verb} default: calls run as your API key allows.{lock}");
    }
    let above = match spec.over_access {
        OverAccess::Plan => "become plan steps for the person to review",
        OverAccess::Refuse => "are refused",
        OverAccess::Ask => "need the person's yes first",
    };
    let runs = match spec.access {
        Effect::Read => "reads run".to_owned(),
        Effect::Write => "reads and writes run".to_owned(),
        Effect::Destructive => "every call runs".to_owned(),
    };
    format!(
        "The mode {verb} {}: {runs}; calls above {} {above}.{lock}",
        spec.name, spec.access
    )
}
