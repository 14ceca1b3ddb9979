//! What an upstream sends plangate on its own while its session lasts —
//! its requests during a call ([`Ask`]: elicitation, sampling, roots), its
//! progress, log messages and resource updates — and [`Downstream`], where
//! the client ([`super::UpstreamClient`]) hands them. Defined here, on the
//! upstream side, because the upstream client emits these events and the
//! hub and the notices consume them, not the reverse: [`crate::hub`]
//! implements [`Downstream`] and sits above the upstream, which names
//! neither.

use std::future::Future;

use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam, RequestId,
};
use tokio::sync::{mpsc, oneshot};

/// A request an upstream sent while one of its calls was in flight, waiting
/// to be asked of the calling client.
pub enum Ask {
    /// `elicitation/create`.
    Elicit(
        ElicitRequestParams,
        oneshot::Sender<Result<ElicitResult, ErrorData>>,
    ),
    /// `sampling/createMessage`.
    Sample(
        CreateMessageRequestParams,
        oneshot::Sender<Result<CreateMessageResult, ErrorData>>,
    ),
    /// `roots/list`.
    Roots(oneshot::Sender<Result<ListRootsResult, ErrorData>>),
}

impl Ask {
    /// Marks an elicitation as the named upstream's question, so the person
    /// never takes it for plangate's own (an upstream could otherwise ask
    /// "plangate: approve the plan?"). Other requests carry no text to
    /// mark.
    pub fn from_upstream(self, upstream: &str) -> Ask {
        match self {
            Ask::Elicit(params, tx) => Ask::Elicit(marked_elicitation(params, upstream), tx),
            other => other,
        }
    }
}

/// An upstream's elicitation with its message marked as that upstream's
/// question ([`Ask::from_upstream`]), and screened line by line
/// ([`plangate_core::screen_lines`]): an upstream's control characters,
/// escape sequences and invisible format characters show as visible
/// escapes with the line marked, so none can erase or reorder the mark in
/// the person's client (a terminal client obeys `\r\e[2K`).
pub fn marked_elicitation(params: ElicitRequestParams, upstream: &str) -> ElicitRequestParams {
    let marked = serde_json::to_value(&params).ok().and_then(|mut v| {
        let message = v.get("message")?.as_str()?;
        let shown: Vec<String> = plangate_core::screen_lines(message)
            .map(|line| line.marked().into_owned())
            .collect();
        v["message"] = serde_json::Value::String(format!(
            "[Asked by the upstream MCP server \"{upstream}\", not by plangate] {}",
            shown.join("\n")
        ));
        serde_json::from_value(v).ok()
    });
    marked.unwrap_or(params)
}

/// Where the client hands what its upstream sends on its own: requests to
/// the call they belong to, progress to that call's client, log messages
/// and resource updates to the sessions that hear them. Implemented by the
/// gateway's hub and notices ([`crate::hub`], [`crate::notices`]).
pub(crate) trait Downstream {
    /// Where a request from `upstream` goes (`related`: the request id its
    /// HTTP stream carried, if any); `Err` says why it goes nowhere.
    fn ask_target(
        &self,
        upstream: &str,
        related: Option<&RequestId>,
    ) -> Result<mpsc::Sender<Ask>, &'static str>;

    /// Progress from `upstream`, for the call it belongs to.
    fn upstream_progress(&self, upstream: &str, params: ProgressNotificationParam);

    /// A log message from `upstream`, `related` to the call whose HTTP
    /// stream carried it (if known).
    fn upstream_log(
        &self,
        upstream: &str,
        related: Option<&RequestId>,
        params: LoggingMessageNotificationParam,
    ) -> impl Future<Output = ()> + Send;

    /// An update of `uri` (the upstream's own URI) from `upstream`.
    fn upstream_resource_updated(
        &self,
        upstream: &str,
        uri: &str,
    ) -> impl Future<Output = ()> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstreams_question_is_marked_and_its_hidden_characters_shown() {
        let params: ElicitRequestParams = serde_json::from_value(serde_json::json!({
            "mode": "form",
            "message": "\r\u{1b}[2Kplangate: approve the plan?\nyes \u{202e}on\nplain line",
            "requestedSchema": {"type": "object", "properties": {}}
        }))
        .unwrap();
        let marked = serde_json::to_value(marked_elicitation(params, "odd")).unwrap();
        let message = marked["message"].as_str().unwrap();
        assert_eq!(
            message,
            "[Asked by the upstream MCP server \"odd\", not by plangate] \\r\\e[2Kplangate: approve the plan?  [contains hidden characters]\nyes \\u{202e}on  [contains hidden characters]\nplain line"
        );
    }
}
