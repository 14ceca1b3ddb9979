//! A step's preview as `plangate plans show` prints it: the diff (coloured
//! on a terminal, plain when piped or with `NO_COLOR`) or the state.

use plangate_core::preview::short_digest;

/// Whether `plans show` colours its diffs: only on a terminal, and never
/// with `NO_COLOR` set (<https://no-color.org>).
pub fn use_colour() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// A step's preview as `plans show` prints it: a heading, then the diff
/// (added lines green, removed red, hunks cyan when `colour`) or the state.
pub fn preview_lines(position: u32, preview: &plangate_core::Preview, colour: bool) -> Vec<String> {
    use plangate_core::Preview;
    let paint = |code: &str, line: &str| {
        if colour {
            format!("\x1b[{code}m{line}\x1b[0m")
        } else {
            line.to_owned()
        }
    };
    let mut out = Vec::new();
    match preview {
        Preview::Diff {
            target,
            diff,
            truncated,
            before_digest,
            ..
        } => {
            out.push(format!(
                "step {position}: {target} — {} (before {})",
                preview.summary(),
                short_digest(before_digest)
            ));
            for line in diff.lines() {
                out.push(if line.starts_with("+++") || line.starts_with("---") {
                    paint("1", line)
                } else if line.starts_with('+') {
                    paint("32", line)
                } else if line.starts_with('-') {
                    paint("31", line)
                } else if line.starts_with("@@") {
                    paint("36", line)
                } else {
                    line.to_owned()
                });
            }
            if *truncated {
                out.push("… (cut at [gateway] max_preview_bytes)".to_owned());
            }
        }
        Preview::State {
            target,
            summary,
            state,
            before_digest,
        } => {
            out.push(format!(
                "step {position}: {target} — {summary} (before {})",
                short_digest(before_digest)
            ));
            let text = match state {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            out.extend(text.lines().map(|l| format!("  {l}")));
        }
        Preview::Unavailable { target, reason } => out.push(format!(
            "step {position}: {} — no preview: {reason}",
            target.as_deref().unwrap_or("the target")
        )),
    }
    out
}
