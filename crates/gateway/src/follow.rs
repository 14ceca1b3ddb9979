//! Following the shared event log: what other processes (replicas, the
//! CLI) record reaches this process's clients without waiting for their
//! next call.

use std::sync::Weak;
use std::time::Duration;

use plangate_core::TOOLS_LOG;

use crate::Gateway;

/// How often a gateway looks at the shared log for changes other processes
/// made.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Follows the shared event log so a mode set through another replica (or
/// the CLI) reaches this replica's clients of that key as
/// `notifications/tools/list_changed` — `exit_plan_mode` comes or goes —
/// without waiting for their next call.
pub(crate) async fn follow(gw: Weak<Gateway>) {
    let Some(g) = gw.upgrade() else { return };
    let shutdown = g.shutdown.clone();
    let mut after = match g.store().last_seq().await {
        Ok(seq) => seq,
        Err(e) => {
            tracing::warn!("cannot follow the event log: {e}");
            return;
        }
    };
    drop(g);
    loop {
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
        let Some(g) = gw.upgrade() else { return };
        loop {
            let page = match g.store().events_since(after, 500).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::debug!("following the event log: {e}");
                    break;
                }
            };
            let Some(last) = page.last() else { break };
            after = last.seq;
            g.watch
                .lock()
                .dirty
                .extend(page.iter().map(|e| e.key_id.clone()));
            let mut keys: Vec<&str> = page
                .iter()
                .filter(|e| {
                    use plangate_core::EventType::{ModeLocked, ModeSet, ModeUnlocked};
                    e.kind == ModeSet || e.kind == ModeLocked || e.kind == ModeUnlocked
                })
                .map(|e| e.key_id.as_str())
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                g.hub.notify_key_tools_changed(key, u64::MAX).await;
            }
            if page.iter().any(|e| e.key_id == TOOLS_LOG) {
                g.refresh_pins().await;
            }
            if page.len() < 500 {
                break;
            }
        }
    }
}
