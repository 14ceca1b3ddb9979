//! What the CLI prints on stdout. A reader that goes away (`plangate plans
//! list | head -1`) ends the command quietly with status 0 — the reader
//! took what it wanted, so a script under `set -o pipefail` does not fail
//! — instead of a panic in `println!` (Rust ignores `SIGPIPE`, so a write
//! to a closed pipe is an error to handle).

use std::fmt;
use std::io::{ErrorKind, Write};

/// The exit status when stdout's reader went away: success, since the
/// reader chose to stop reading.
pub const BROKEN_PIPE_STATUS: u8 = 0;

/// Writes one line to stdout.
pub fn line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(i32::from(BROKEN_PIPE_STATUS));
        }
        // Anything else (a full disk behind a redirect) is reported once.
        eprintln!("plangate: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes `bytes` to stdout as they are (a completion script, a manual
/// page), ending quietly like [`line()`] when the reader went away.
pub fn write_all(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            std::process::exit(i32::from(BROKEN_PIPE_STATUS))
        }
        other => Ok(other?),
    }
}

/// `println!` for the CLI's output: see [`line()`].
macro_rules! outln {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;
