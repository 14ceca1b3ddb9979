//! Which of the gateway's own tools (docs/design.md §5) a name calls
//! ([`GatewayTool`]). Apart from their definitions ([`crate::tools`]) and
//! below them: telling a gateway tool's call from an upstream's is asked
//! before anything runs — by the key check, which reads a call's key state
//! only for calls decided on it ([`crate::auth`]), and by the server.

/// Which gateway tool a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayTool {
    /// `begin_session {mode}`.
    BeginSession,
    /// `get_plan`.
    GetPlan,
    /// `discard_plan {step_ids?}`.
    DiscardPlan,
    /// `apply_plan {step_ids?, plan_digest?, continue_on_error?}`.
    ApplyPlan,
    /// `exit_plan_mode {plan}`.
    ExitPlanMode,
    /// `end_session`.
    EndSession,
    /// `revert {step_ids?}`: the agent proposes undoing applied steps.
    Revert,
}

impl GatewayTool {
    const ALL: [GatewayTool; 7] = [
        GatewayTool::BeginSession,
        GatewayTool::GetPlan,
        GatewayTool::DiscardPlan,
        GatewayTool::ApplyPlan,
        GatewayTool::ExitPlanMode,
        GatewayTool::EndSession,
        GatewayTool::Revert,
    ];

    /// Its name without the configured prefix.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            GatewayTool::BeginSession => "begin_session",
            GatewayTool::GetPlan => "get_plan",
            GatewayTool::DiscardPlan => "discard_plan",
            GatewayTool::ApplyPlan => "apply_plan",
            GatewayTool::ExitPlanMode => "exit_plan_mode",
            GatewayTool::EndSession => "end_session",
            GatewayTool::Revert => "revert",
        }
    }

    /// The gateway tool called `name` under `prefix`, if any.
    pub fn parse(prefix: &str, name: &str) -> Option<GatewayTool> {
        let suffix = name.strip_prefix(prefix)?;
        Self::ALL.into_iter().find(|t| t.suffix() == suffix)
    }
}
