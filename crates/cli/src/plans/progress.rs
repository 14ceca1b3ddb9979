//! What a person sees while `plans apply` runs, on stderr (stdout keeps
//! the receipt): each step as it starts and ends, read from the key's log
//! — the same events the console's live view shows — and the upstream's
//! own progress on the running step, heard through the apply
//! ([`ApplyProgress`]). On a terminal the upstream's progress is one bar,
//! redrawn in place; otherwise a line each.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};

use plangate_core::{KeyState, StepStatus};
use plangate_gateway::apply::ApplyProgress;
use plangate_gateway::key_log::KeyLog;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

/// Says each step of `run` as its status moves from `said` (the statuses
/// before the apply), and the upstream's progress as `heard` brings it,
/// until the apply is `over` (then once more, for the last step's end).
pub(super) async fn show_progress(
    log: KeyLog<KeyState>,
    (key_id, run): (String, Vec<String>),
    mut said: BTreeMap<String, StepStatus>,
    (mut heard, over): (UnboundedReceiver<ApplyProgress>, CancellationToken),
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    let mut bar = Bar::new();
    let total = run.len();
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            Some(p) = heard.recv() => {
                bar.show(&p);
                continue;
            }
            () = over.cancelled() => true,
        };
        let Ok(state) = log.state(&key_id).await else {
            if last {
                break;
            }
            continue;
        };
        for (n, id) in run.iter().enumerate() {
            let Some(step) = state.step(id) else { continue };
            if said.get(id) != Some(&step.status) {
                bar.clear();
                crate::output::note(format_args!(
                    "[{}/{total}] step {} {}: {}",
                    n + 1,
                    step.record.position,
                    step.status,
                    step.record.predicted_effect
                ));
                said.insert(id.clone(), step.status);
            }
        }
        if last {
            break;
        }
    }
    bar.clear();
}

/// The upstream's progress on the running step: a bar redrawn in place on
/// a terminal, else a line each.
struct Bar {
    terminal: bool,
    drawn: bool,
}

/// The bar's width in cells.
const WIDTH: usize = 24;

impl Bar {
    fn new() -> Bar {
        Bar {
            terminal: std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    fn show(&mut self, p: &ApplyProgress) {
        let ApplyProgress::Upstream {
            at,
            total,
            progress,
            of,
            message,
        } = p
        else {
            return;
        };
        let words = message
            .as_deref()
            .map(|m| format!(" {}", plangate_core::screen(m).text()))
            .unwrap_or_default();
        let amount = match of {
            Some(of) => format!("{progress} of {of}"),
            None => format!("{progress}"),
        };
        if !self.terminal {
            crate::output::note(format_args!(
                "[{}/{total}]   the server says: {amount}{words}",
                at + 1
            ));
            return;
        }
        let filled = match of {
            Some(of) if *of > 0.0 => ((progress / of).clamp(0.0, 1.0) * WIDTH as f64) as usize,
            _ => 0,
        };
        let cells = format!("{}{}", "#".repeat(filled), ".".repeat(WIDTH - filled));
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K[{}/{total}] [{cells}] {amount}{words}",
            at + 1
        );
        let _ = err.flush();
        self.drawn = true;
    }

    /// Takes the bar off the line before a line is written.
    fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}
