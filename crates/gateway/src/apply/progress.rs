//! Who hears an apply as it runs: the agent's client when it asked for
//! progress (a notification as each step starts, and as the upstream
//! reports on the running step), or the person's terminal for `plangate
//! plans apply` run in this process ([`ApplyProgress`] on a channel).
//! Apart from the apply itself, which only says where it is.

use parking_lot::Mutex;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc;

/// Where an apply's progress goes.
pub enum Progress {
    /// The agent's client, under its progress token. Each value sent is
    /// above the last, as MCP requires.
    Client {
        /// The client.
        peer: Peer<RoleServer>,
        /// Its progress token.
        token: ProgressToken,
        /// The values sent so far, above the base.
        rising: Mutex<Rising>,
    },
    /// A person's apply in this process: each event on the channel.
    Local(mpsc::UnboundedSender<ApplyProgress>),
}

/// What a person's apply hears as it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyProgress {
    /// Step `at` (from 0) of `total` starts; `at == total` once all ran.
    Step {
        /// Steps behind it.
        at: usize,
        /// Steps the apply runs.
        total: usize,
    },
    /// The upstream reported on step `at` (from 0) of `total`: `progress`
    /// of `of` (if it said), with its message.
    Upstream {
        /// The running step.
        at: usize,
        /// Steps the apply runs.
        total: usize,
        /// How far, in the upstream's units.
        progress: f64,
        /// Of how much, if it said.
        of: Option<f64>,
        /// Its words, if any.
        message: Option<String>,
    },
}

impl Progress {
    /// Progress for the agent's client under `token`.
    pub fn client(peer: Peer<RoleServer>, token: ProgressToken) -> Progress {
        Progress::client_after(peer, token, 0.0)
    }

    /// Progress for the agent's client under `token`, going on above
    /// `base`, the last value the call already sent under it.
    pub fn client_after(peer: Peer<RoleServer>, token: ProgressToken, base: f64) -> Progress {
        Progress::Client {
            peer,
            token,
            rising: Mutex::new(Rising::after(base)),
        }
    }

    /// Progress on a channel, and its receiving end.
    pub fn local() -> (Progress, mpsc::UnboundedReceiver<ApplyProgress>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Progress::Local(tx), rx)
    }

    /// `at` of `total` steps are behind the apply; `message` says what
    /// comes next.
    pub(super) async fn step(&self, at: usize, total: usize, message: String) {
        match self {
            Progress::Client { .. } => self.tell(at as f64, total, message).await,
            Progress::Local(tx) => {
                let _ = tx.send(ApplyProgress::Step { at, total });
            }
        }
    }

    /// The upstream reported `heard` on step `at` of `total`.
    pub(super) async fn upstream(&self, at: usize, total: usize, heard: ProgressNotificationParam) {
        match self {
            Progress::Client { .. } => {
                // Within the step: how far the upstream says, short of the
                // next step's start.
                let part = match heard.total {
                    Some(of) if of > 0.0 => (heard.progress / of).clamp(0.0, 0.99),
                    _ => 0.5,
                };
                let words = match (&heard.message, heard.total) {
                    (Some(m), _) => m.clone(),
                    (None, Some(of)) => format!("{} of {of}", heard.progress),
                    (None, None) => format!("{}", heard.progress),
                };
                let message = format!("step {} of {total}: {words}", at + 1);
                self.tell(at as f64 + part, total, message).await;
            }
            Progress::Local(tx) => {
                let _ = tx.send(ApplyProgress::Upstream {
                    at,
                    total,
                    progress: heard.progress,
                    of: heard.total,
                    message: heard.message,
                });
            }
        }
    }

    /// Tells the client `value` of `total`, when it is above the last
    /// value told.
    async fn tell(&self, value: f64, total: usize, message: String) {
        let Progress::Client {
            peer,
            token,
            rising,
        } = self
        else {
            return;
        };
        let Some((value, total)) = rising.lock().next(value, Some(total as f64)) else {
            return;
        };
        let mut note = ProgressNotificationParam::new(token.clone(), value).with_message(message);
        note.total = total;
        let _ = peer.notify_progress(note).await;
    }
}

/// The progress values one request sends under its client's token: above
/// what the token carried before (`base`, a question's heartbeat), so the
/// first comes after the last heartbeat, and each above the last, as MCP
/// requires. An apply's steps and an asked call's upstream progress both
/// count this way.
#[derive(Debug)]
pub struct Rising {
    shift: f64,
    last: Option<f64>,
}

impl Rising {
    /// Values going on above `base` (0: nothing was sent before).
    pub fn after(base: f64) -> Rising {
        Rising {
            shift: if base > 0.0 { base + 1.0 } else { 0.0 },
            last: None,
        }
    }

    /// `value` of `total` as sent under the token, or `None` when it is
    /// not above the last: that one is not sent.
    pub fn next(&mut self, value: f64, total: Option<f64>) -> Option<(f64, Option<f64>)> {
        if self.last.is_some_and(|last| value <= last) {
            return None;
        }
        self.last = Some(value);
        Some((self.shift + value, total.map(|t| self.shift + t)))
    }
}
