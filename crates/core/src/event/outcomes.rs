//! What a review and a step's run answered: a person's [`Verdict`], and
//! why a step failed ([`StepError`], with its stable [`StepErrorCode`]).
//!
//! Apart from the event kinds that carry them: each is a payload with its
//! own stable strings in the log and in answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Code;

/// A person's answer to a review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Yes: apply the plan with this digest.
    Approve,
    /// Not yet: the agent should keep planning.
    KeepPlanning,
    /// No.
    Decline,
    /// The question was dismissed.
    Cancel,
}

impl Verdict {
    /// The snake_case name used in answers and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::KeepPlanning => "keep_planning",
            Verdict::Decline => "decline",
            Verdict::Cancel => "cancel",
        }
    }
}

/// Why a step failed, as carried in a receipt's `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepError {
    /// A stable code (`stale_target`, `forbidden`, `upstream_error`, …).
    pub code: StepErrorCode,
    /// What happened, for a person.
    pub message: String,
    /// The upstream's own error, when it sent one.
    pub upstream: Option<Value>,
}

/// The code of a step's error: a refusal [`Code`] when a check before the
/// call stopped it, else what the upstream's answer was. Written to the log
/// and to receipts as its stable string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepErrorCode {
    /// A check refused the step before its call (`stale_target`,
    /// `forbidden`, `upstream_unavailable`, …); nothing was sent.
    Refused(Code),
    /// The upstream answered with an error: a JSON-RPC error or a tool
    /// result with `isError`.
    UpstreamError,
    /// The upstream answered with something other than a tool result.
    UnexpectedResult,
    /// The call may or may not have reached the upstream (its claim's
    /// lease ran out, or the connection was lost mid-call).
    InDoubt,
    /// A code this build does not know, read from a log a newer plangate
    /// wrote: kept as written, since nothing recorded may be lost.
    Unrecognised(String),
}

impl StepErrorCode {
    /// The stable string.
    pub fn as_str(&self) -> &str {
        match self {
            StepErrorCode::Refused(code) => code.as_str(),
            StepErrorCode::UpstreamError => "upstream_error",
            StepErrorCode::UnexpectedResult => "unexpected_result",
            StepErrorCode::InDoubt => "in_doubt",
            StepErrorCode::Unrecognised(s) => s,
        }
    }

    /// The code a stable string names; never fails (see
    /// [`StepErrorCode::Unrecognised`]).
    pub fn parse(s: &str) -> StepErrorCode {
        match s {
            "upstream_error" => StepErrorCode::UpstreamError,
            "unexpected_result" => StepErrorCode::UnexpectedResult,
            "in_doubt" => StepErrorCode::InDoubt,
            other => match other.parse::<Code>() {
                Ok(code) => StepErrorCode::Refused(code),
                Err(_) => StepErrorCode::Unrecognised(other.to_owned()),
            },
        }
    }
}

impl From<Code> for StepErrorCode {
    fn from(code: Code) -> Self {
        StepErrorCode::Refused(code)
    }
}

impl std::fmt::Display for StepErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for StepErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Its stable string (a code a newer plangate wrote may be any string).
impl schemars::JsonSchema for StepErrorCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StepErrorCode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A stable code: a refusal's (stale_target, forbidden, upstream_down, …), upstream_error, unexpected_result or in_doubt."
        })
    }
}

impl Serialize for StepErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StepErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(StepErrorCode::parse(&s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_step_error_code_is_its_stable_string_and_keeps_unknown_ones() {
        for (code, text) in [
            (StepErrorCode::UpstreamError, "upstream_error"),
            (StepErrorCode::UnexpectedResult, "unexpected_result"),
            (StepErrorCode::InDoubt, "in_doubt"),
            (Code::StaleTarget.into(), "stale_target"),
            (
                StepErrorCode::Unrecognised("from_the_future".into()),
                "from_the_future",
            ),
        ] {
            assert_eq!(serde_json::to_value(&code).unwrap(), json!(text));
            assert_eq!(
                serde_json::from_value::<StepErrorCode>(json!(text)).unwrap(),
                code
            );
        }
    }
}
