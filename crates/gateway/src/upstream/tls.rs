//! An HTTP upstream's client: rustls verifying `https://` against the
//! system's CA certificates plus the upstream's own `ca_file`, and errors
//! that name the innermost cause (an unknown issuer, a bad PEM file).

use super::UpstreamError;

/// The HTTP client of upstream `name`: rustls, verifying `https://` against
/// the system's CA certificates (the OpenSSL store, e.g. Debian's
/// `/etc/ssl/certs`; `SSL_CERT_FILE` / `SSL_CERT_DIR` override it) plus the
/// certificates in `ca_file`. An `https://` upstream is never followed to
/// plain `http://`.
pub(super) fn http_client(
    name: &str,
    url: &str,
    ca_file: Option<&std::path::Path>,
) -> Result<reqwest::Client, UpstreamError> {
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    let extra = match ca_file {
        Some(path) => {
            let bad = |reason: String| UpstreamError::CaFile {
                name: name.to_owned(),
                path: path.to_path_buf(),
                reason,
            };
            let pem = std::fs::read(path)
                .map_err(|e| bad(format!("cannot read it: {}", e.to_string().to_lowercase())))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| bad(format!("not a PEM file: {}", error_chain(&e))))?;
            if certs.is_empty() {
                return Err(bad(
                    "holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")".to_owned(),
                ));
            }
            certs
        }
        None => Vec::new(),
    };
    let builder = |only_extra: bool| {
        let b = reqwest::Client::builder().https_only(https);
        if only_extra {
            b.tls_certs_only(extra.clone())
        } else {
            b.tls_certs_merge(extra.clone())
        }
    };
    match builder(false).build() {
        Ok(client) => Ok(client),
        // A plain-http upstream must not need the system's CA
        // certificates (a minimal container may have none).
        Err(_) if !https && ca_file.is_none() => {
            builder(true)
                .build()
                .map_err(|e| UpstreamError::HttpClient {
                    name: name.to_owned(),
                    reason: error_chain(&e),
                })
        }
        Err(e) => {
            let reason = error_chain(&e);
            Err(match ca_file {
                Some(path) => UpstreamError::CaFile {
                    name: name.to_owned(),
                    path: path.to_path_buf(),
                    reason: format!("not usable as a CA certificate: {reason}"),
                },
                None => UpstreamError::HttpClient {
                    name: name.to_owned(),
                    reason: format!(
                        "{reason} (install the system's CA certificates, e.g. Debian's ca-certificates, set SSL_CERT_FILE, or give the upstream a ca_file)"
                    ),
                },
            })
        }
    }
}

/// An error and every source under it, `outer: inner: …`, skipping a source
/// whose text its parent already shows.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    push_sources(&mut text, e);
    text
}

/// Appends the sources under `e` to `text` as [`error_chain`] does.
pub(super) fn push_sources(text: &mut String, e: &dyn std::error::Error) {
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
}
