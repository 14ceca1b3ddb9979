//! Progress while a person reviews (docs/design.md §7): a question to the
//! person can take minutes, and many clients give up on a tool call after
//! about 60 s unless they hear progress on it. So while a review question
//! is open, the waiting call sends a progress notification every
//! [`EVERY`] under the progress token its client gave (none without one),
//! up to `review_timeout`; SDKs that restart their timeout on progress
//! keep waiting for the person's answer.

use std::future::Future;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;

/// How often a waiting call says it is still waiting.
pub const EVERY: Duration = Duration::from_secs(10);

/// Runs `waiting` (a question to the person), telling the client of
/// `cx` every [`EVERY`] that the call is still waiting for the person,
/// when it gave a progress token; answers what `waiting` did and the last
/// progress value sent (0 if none), above which whatever the call reports
/// next must go (MCP wants each value above the last). A notification
/// that cannot be sent is let go: the answer still comes back on the call.
pub async fn while_reviewing<F: Future>(
    cx: &RequestContext<RoleServer>,
    waiting: F,
) -> (F::Output, f64) {
    let Some(token) = cx.meta.get_progress_token() else {
        return (waiting.await, 0.0);
    };
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(start + EVERY, EVERY);
    tokio::pin!(waiting);
    let mut beats = 0u32;
    loop {
        tokio::select! {
            answer = &mut waiting => return (answer, f64::from(beats)),
            _ = tick.tick() => {
                beats = beats.saturating_add(1);
                let note = ProgressNotificationParam::new(token.clone(), f64::from(beats))
                    .with_message(format!(
                        "waiting for the person's review ({} s so far)",
                        start.elapsed().as_secs()
                    ));
                let _ = cx.peer.notify_progress(note).await;
            }
        }
    }
}
