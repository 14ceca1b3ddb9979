//! A minimal HTTP/1.1 client connection: one keep-alive TCP connection,
//! one request at a time, `Content-Length`, chunked and read-to-close
//! bodies. Hand-written so the timing client adds as little as possible
//! (no pool, no redirects, no decompression) and so every client transport
//! of the benchmark pays exactly the same costs.

use std::io;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// An answer: status, headers (names lowercased) and the whole body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header with that (lowercase) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One connection to `host:port`, reopened when the server closes it.
pub struct HttpConn {
    addr: String,
    io: Option<(BufReader<OwnedReadHalf>, OwnedWriteHalf)>,
    line: String,
    out: Vec<u8>,
}

impl HttpConn {
    /// A connection to `addr` (`127.0.0.1:PORT`), opened on first use.
    pub fn new(addr: &str) -> HttpConn {
        HttpConn {
            addr: addr.to_owned(),
            io: None,
            line: String::new(),
            out: Vec::with_capacity(1024),
        }
    }

    async fn connect(&mut self) -> io::Result<()> {
        let stream = TcpStream::connect(&self.addr).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        self.io = Some((BufReader::with_capacity(64 * 1024, r), w));
        Ok(())
    }

    /// Sends one request and reads the whole answer. A connection the
    /// server closed since the last answer is reopened once.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        self.out.clear();
        self.out.extend_from_slice(method.as_bytes());
        self.out.push(b' ');
        self.out.extend_from_slice(path.as_bytes());
        self.out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        self.out.extend_from_slice(self.addr.as_bytes());
        self.out.extend_from_slice(b"\r\n");
        for (name, value) in headers {
            self.out.extend_from_slice(name.as_bytes());
            self.out.extend_from_slice(b": ");
            self.out.extend_from_slice(value.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        }
        self.out.extend_from_slice(b"Content-Length: ");
        self.out
            .extend_from_slice(body.len().to_string().as_bytes());
        self.out.extend_from_slice(b"\r\n\r\n");
        self.out.extend_from_slice(body);

        let fresh = self.io.is_none();
        if fresh {
            self.connect().await?;
        }
        match self.exchange().await {
            Ok(r) => Ok(r),
            // A kept-alive connection the server had closed: once more on a
            // new one (the request was never read by the server).
            Err(e) if !fresh && is_reset(&e) => {
                self.connect().await?;
                self.exchange().await
            }
            Err(e) => {
                self.io = None;
                Err(e)
            }
        }
    }

    async fn exchange(&mut self) -> io::Result<Response> {
        let Some((reader, writer)) = self.io.as_mut() else {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "not connected"));
        };
        writer.write_all(&self.out).await?;

        self.line.clear();
        if reader.read_line(&mut self.line).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection closed before the status line",
            ));
        }
        let status = self
            .line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| bad(format!("bad status line {:?}", self.line.trim_end())))?;
        let mut headers = Vec::new();
        loop {
            self.line.clear();
            if reader.read_line(&mut self.line).await? == 0 {
                return Err(bad("connection closed in the headers".into()));
            }
            let l = self.line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((n, v)) = l.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let chunked = find("transfer-encoding").is_some_and(|v| v.contains("chunked"));
        let length = find("content-length").and_then(|v| v.parse::<usize>().ok());
        let close = find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let mut body = Vec::new();
        if chunked {
            loop {
                self.line.clear();
                if reader.read_line(&mut self.line).await? == 0 {
                    return Err(bad("connection closed in a chunked body".into()));
                }
                let size_hex = self.line.trim_end().split(';').next().unwrap_or("");
                let size = usize::from_str_radix(size_hex.trim(), 16)
                    .map_err(|_| bad(format!("bad chunk size {size_hex:?}")))?;
                if size == 0 {
                    // Trailers, then the empty line.
                    loop {
                        self.line.clear();
                        if reader.read_line(&mut self.line).await? == 0
                            || self.line.trim_end().is_empty()
                        {
                            break;
                        }
                    }
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                reader.read_exact(&mut body[start..]).await?;
                let mut crlf = [0u8; 2];
                reader.read_exact(&mut crlf).await?;
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            reader.read_exact(&mut body).await?;
        } else if status != 204 && status != 304 && !(100..200).contains(&status) {
            reader.read_to_end(&mut body).await?;
            self.io = None;
        }
        if close {
            self.io = None;
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof
    )
}
