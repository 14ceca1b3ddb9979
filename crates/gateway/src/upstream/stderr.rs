//! What a stdio upstream writes to stderr: the last lines kept for the
//! errors a person reads when it fails to start, and the rest passed on to
//! plangate's log at a bounded rate. Apart from the connection code because
//! it is read by a task of its own for the life of the child process.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// How many of an upstream's last stderr lines are kept for its errors.
const TAIL_LINES: usize = 20;
/// The longest stderr line kept (in characters); longer ones are cut.
const TAIL_LINE_CHARS: usize = 500;
/// How many stderr lines of one upstream reach plangate's log per second;
/// the rest are counted and said once the flood stops.
const LOG_LINES_PER_SECOND: u32 = 10;

/// The last lines a stdio upstream wrote to stderr in its current (or
/// last) attempt: what a person needs to see when it fails to start
/// ("boom: missing API token"), kept bounded.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<parking_lot::Mutex<std::collections::VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: &str) {
        let mut lines = self.0.lock();
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.chars().take(TAIL_LINE_CHARS).collect());
    }

    /// The last `n` lines, oldest first, joined by ` | `; `None` if it
    /// wrote nothing.
    pub fn last(&self, n: usize) -> Option<String> {
        let lines = self.0.lock();
        let skip = lines.len().saturating_sub(n);
        let text: Vec<&str> = lines
            .iter()
            .skip(skip)
            .map(String::as_str)
            .filter(|l| !l.trim().is_empty())
            .collect();
        (!text.is_empty()).then(|| text.join(" | "))
    }
}

/// `reason`, followed by what the upstream last wrote to stderr, if
/// anything.
pub(super) fn with_stderr(reason: String, tail: Option<&StderrTail>) -> String {
    match tail.and_then(|t| t.last(5)) {
        Some(lines) => format!("{reason}; its stderr ended with: {lines}"),
        None => reason,
    }
}

/// Reads upstream `upstream`'s stderr until the process closes it: every
/// line into `tail`, and at most [`LOG_LINES_PER_SECOND`] a second into
/// plangate's log (the rest counted, and said once the flood stops).
pub(super) fn forward(
    upstream: String,
    stderr: tokio::process::ChildStderr,
    tail: StderrTail,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut window = std::time::Instant::now();
        let (mut shown, mut hidden) = (0u32, 0u32);
        while let Ok(Some(line)) = lines.next_line().await {
            tail.push(&line);
            if window.elapsed() >= Duration::from_secs(1) {
                if hidden > 0 {
                    tracing::info!(upstream = %upstream, "upstream stderr: {hidden} more line(s) not logged (over {LOG_LINES_PER_SECOND}/s)");
                }
                window = std::time::Instant::now();
                (shown, hidden) = (0, 0);
            }
            if shown < LOG_LINES_PER_SECOND {
                shown += 1;
                let line: String = line.chars().take(TAIL_LINE_CHARS).collect();
                tracing::info!(upstream = %upstream, "upstream stderr: {line}");
            } else {
                hidden += 1;
            }
        }
    })
}
