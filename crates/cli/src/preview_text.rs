//! A step's preview as `plangate plans show` prints it: the diff (coloured
//! on a terminal, plain when piped or with `NO_COLOR`) or the state. Its
//! text is the target's own, so every line is screened before plangate's
//! colours are painted around it (`output::painted`).

use plangate_core::preview::short_digest;

/// Whether `plans show` colours its diffs: only on a terminal, and never
/// with `NO_COLOR` set (<https://no-color.org>).
pub fn use_colour() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// One line of a preview: its text as the target has it, and the SGR
/// colour plangate paints it in on a terminal (added lines green, removed
/// red, hunks cyan, file names bold).
#[derive(Debug, PartialEq, Eq)]
pub struct PreviewLine {
    /// The colour, if the line has one.
    pub colour: Option<&'static str>,
    /// The line's text, unscreened.
    pub text: String,
}

impl PreviewLine {
    fn plain(text: String) -> PreviewLine {
        PreviewLine { colour: None, text }
    }
}

/// A step's preview as `plans show` prints it: a heading, then the diff
/// (a colour per line) or the state, one [`PreviewLine`] per line.
pub fn preview_lines(position: u32, preview: &plangate_core::Preview) -> Vec<PreviewLine> {
    use plangate_core::Preview;
    let mut out = Vec::new();
    match preview {
        Preview::Diff {
            target,
            diff,
            truncated,
            before_digest,
            ..
        } => {
            out.push(PreviewLine::plain(format!(
                "step {position}: {target} — {} (before {})",
                preview.summary(),
                short_digest(before_digest)
            )));
            // Split at LF only: a CR is part of its line, and shown.
            for line in diff.strip_suffix('\n').unwrap_or(diff).split('\n') {
                let colour = if line.starts_with("+++") || line.starts_with("---") {
                    Some("1")
                } else if line.starts_with('+') {
                    Some("32")
                } else if line.starts_with('-') {
                    Some("31")
                } else if line.starts_with("@@") {
                    Some("36")
                } else {
                    None
                };
                out.push(PreviewLine {
                    colour,
                    text: line.to_owned(),
                });
            }
            if *truncated {
                out.push(PreviewLine::plain(
                    "… (cut at [gateway] max_preview_bytes)".to_owned(),
                ));
            }
        }
        Preview::State {
            target,
            summary,
            state,
            before_digest,
        } => {
            out.push(PreviewLine::plain(format!(
                "step {position}: {target} — {summary} (before {})",
                short_digest(before_digest)
            )));
            let text = match state {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            if !text.is_empty() {
                out.extend(
                    text.strip_suffix('\n')
                        .unwrap_or(&text)
                        .split('\n')
                        .map(|l| PreviewLine::plain(format!("  {l}"))),
                );
            }
        }
        Preview::Unavailable { target, reason } => out.push(PreviewLine::plain(format!(
            "step {position}: {} — no preview: {reason}",
            target.as_deref().unwrap_or("the target")
        ))),
    }
    out
}
