//! stdin and stdout for `plangate serve --stdio`, read and written through
//! the runtime's event loop when they are pipes or sockets.
//!
//! tokio's `Stdin` and `Stdout` hand every read and write to a thread of
//! the blocking pool: two thread wake-ups on every call, which on a small
//! machine cost about as much as everything else plangate does for a read.
//! MCP clients start their servers with pipes (or, from Node, socket
//! pairs), which epoll can watch, so plangate registers those directly and
//! keeps tokio's blocking stdio only for anything else (a terminal, a
//! file).
//!
//! Registering a descriptor sets `O_NONBLOCK` on its open file
//! description; the end of a pipe or socket pair a client creates for its
//! server is held by the server alone, so nobody else sees the flag.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;

use tokio::io::{AsyncRead, AsyncWrite};

/// The read half rmcp's transport reads messages from.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The write half rmcp's transport writes messages to.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// This process's stdin and stdout as an rmcp transport: event-driven when
/// they are pipes or sockets, tokio's blocking stdio otherwise.
pub fn transport() -> (Reader, Writer) {
    let reader = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(event_reader)
        .unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let writer = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(event_writer)
        .unwrap_or_else(|| Box::new(tokio::io::stdout()));
    (reader, writer)
}

/// What a descriptor is, as far as registering it goes.
enum Kind {
    Pipe,
    Socket,
    Other,
}

fn kind(file: &std::fs::File) -> Kind {
    match file.metadata().map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() => Kind::Pipe,
        Ok(t) if t.is_socket() => Kind::Socket,
        _ => Kind::Other,
    }
}

fn socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(stream).ok()
}

fn event_reader(fd: OwnedFd) -> Option<Reader> {
    let file = std::fs::File::from(fd);
    match kind(&file) {
        Kind::Pipe => tokio::net::unix::pipe::Receiver::from_file(file)
            .ok()
            .map(|r| Box::new(r) as Reader),
        Kind::Socket => socket(file.into()).map(|s| Box::new(s) as Reader),
        Kind::Other => None,
    }
}

fn event_writer(fd: OwnedFd) -> Option<Writer> {
    let file = std::fs::File::from(fd);
    match kind(&file) {
        Kind::Pipe => tokio::net::unix::pipe::Sender::from_file(file)
            .ok()
            .map(|w| Box::new(w) as Writer),
        Kind::Socket => socket(file.into()).map(|s| Box::new(s) as Writer),
        Kind::Other => None,
    }
}
