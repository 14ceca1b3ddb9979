//! What the CLI prints, on stdout and stderr: the one path every command's
//! output takes, so that nothing an agent or an upstream wrote reaches the
//! terminal unscreened.
//!
//! Each [`outln!`] is one line: whatever it holds is screened by
//! [`plangate_core::screen()`] (control characters, escape sequences and
//! invisible format characters shown as `\e`, `\r`, `\u{202e}`…, and the
//! line marked `[contains hidden characters]`), so a value can neither
//! rewrite what was printed before it nor forge a line of its own — a line
//! break inside a value shows as `\n`. The CLI's own line breaks are its
//! `outln!` calls; its own colours are painted after screening
//! ([`painted`]); JSON goes through [`json`] (hidden characters as
//! `\uXXXX`, the same JSON). Errors are screened the same way on stderr
//! ([`error`]).
//!
//! A reader that goes away (`plangate plans list | head -1`) ends the
//! command quietly with status 0 — the reader took what it wanted, so a
//! script under `set -o pipefail` does not fail — instead of a panic in
//! `println!` (Rust ignores `SIGPIPE`, so a write to a closed pipe is an
//! error to handle).

use std::fmt;
use std::io::{ErrorKind, Write};

use plangate_core::screen;

/// The exit status when stdout's reader went away: success, since the
/// reader chose to stop reading.
pub const BROKEN_PIPE_STATUS: u8 = 0;

/// Writes `bytes` and a line break to stdout, ending the process as the
/// module says when that fails.
fn emit(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let written = out.write_all(bytes).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(i32::from(BROKEN_PIPE_STATUS));
        }
        // Anything else (a full disk behind a redirect) is reported once.
        eprintln!("plangate: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes one line to stdout, screened and marked (module docs).
pub fn line(args: fmt::Arguments<'_>) {
    let text = match args.as_str() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(args.to_string()),
    };
    emit(screen(&text).marked().as_bytes());
}

/// Writes `text` — a diff, a file's lines — as lines of output, each
/// screened and marked on its own: its line breaks are real ones, while
/// anything hidden within a line still shows.
pub fn lines(text: &str) {
    for l in text.lines() {
        emit(screen(l).marked().as_bytes());
    }
}

/// Writes one line of content painted in the CLI's own colour `code` (an
/// SGR parameter such as `32`), or plain when `code` is `None`: the
/// content is screened first, so only plangate's colour reaches the
/// terminal, and the mark follows the reset.
pub fn painted(code: Option<&str>, content: &str) {
    let shown = screen(content);
    let mut text = match code {
        Some(code) => format!("\x1b[{code}m{}\x1b[0m", shown.text()),
        None => shown.text().to_owned(),
    };
    if shown.hidden() {
        text.push_str("  [");
        text.push_str(plangate_core::HIDDEN_MARK);
        text.push(']');
    }
    emit(text.as_bytes());
}

/// Writes `value` as pretty JSON on stdout, with every hidden character
/// as a `\uXXXX` escape ([`plangate_core::screen_json`]): the same JSON,
/// which no terminal interprets.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    emit(plangate_core::screen_json(&text).as_bytes());
    Ok(())
}

/// One error line on stderr, `plangate: MESSAGE`, screened and marked like
/// a line of output; a message made of several lines (every mistake in a
/// config) is screened line by line.
pub fn error(message: &str) {
    let mut out = std::io::stderr().lock();
    for (i, line) in message.split('\n').enumerate() {
        let prefix = if i == 0 { "plangate: " } else { "" };
        let _ = writeln!(out, "{prefix}{}", screen(line).marked());
    }
}

/// One line to stderr, screened and marked like a line of output: what a
/// person is shown beside a question on their terminal, so that stdout
/// keeps only the command's answer (`--json` stays JSON).
pub fn note(args: fmt::Arguments<'_>) {
    let text = args.to_string();
    let _ = writeln!(std::io::stderr().lock(), "{}", screen(&text).marked());
}

/// Asks `question` on stderr and reads the person's answer, one line, from
/// stdin: `true` only for `y` or `yes` (any case). No answer (end of
/// input) is a no.
pub fn ask_yes(question: &str) -> std::io::Result<bool> {
    {
        let mut err = std::io::stderr().lock();
        write!(err, "{} [y/N] ", screen(question).text())?;
        err.flush()?;
    }
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// Writes `bytes` to stdout as they are (a completion script, a manual
/// page: plangate's own text), ending quietly like [`line()`] when the
/// reader went away.
pub fn write_all(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            std::process::exit(i32::from(BROKEN_PIPE_STATUS))
        }
        other => Ok(other?),
    }
}

/// `println!` for the CLI's output: one screened line (see [`line()`]).
macro_rules! outln {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;
