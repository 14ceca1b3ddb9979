//! `https://` upstreams end to end: the demo site's Streamable HTTP router
//! served over TLS on loopback with a certificate from a CA the test makes,
//! a `plangate.toml` pointing at it (with and without `ca_file`), the real
//! `Gateway::build` connector, and an MCP client talking to the gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{all_names, call, client_of, material, open_store};
use plangate_core::Scope;
use plangate_gateway::Gateway;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use rmcp::model::CallToolResult;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_util::sync::CancellationToken;

/// A CA made for this test and a server certificate it issued for
/// `127.0.0.1` and `localhost`.
struct Pki {
    ca_pem: String,
    server: rustls::ServerConfig,
}

fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "plangate test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

    let server_key = KeyPair::generate().unwrap();
    let server_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let server_cert = server_params.signed_by(&server_key, &ca).unwrap();

    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        server,
    }
}

/// A TCP listener that completes a TLS handshake before handing a
/// connection to axum; failed handshakes (a client that does not trust the
/// certificate) are counted and skipped.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    refused: Arc<std::sync::atomic::AtomicUsize>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let handshake = self.acceptor.accept(tcp);
            match tokio::time::timeout(Duration::from_secs(10), handshake).await {
                Ok(Ok(tls)) => return (tls, addr),
                _ => {
                    self.refused
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// The demo site served over TLS on `127.0.0.1:0`, stopped on drop.
struct TlsSite {
    url: String,
    ca_pem: String,
    refused: Arc<std::sync::atomic::AtomicUsize>,
    stop: CancellationToken,
}

impl Drop for TlsSite {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn tls_site(dir: &Path) -> TlsSite {
    let pki = pki();
    let stop = CancellationToken::new();
    let router = plangate_demo_site::http_router(dir.join("site.json"), stop.clone()).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(pki.server)),
        refused: refused.clone(),
    };
    let shutdown = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .unwrap();
    });
    TlsSite {
        url: format!("https://127.0.0.1:{port}/mcp"),
        ca_pem: pki.ca_pem,
        refused,
        stop,
    }
}

/// Loads `text` as `dir/plangate.toml`, through the real config stage (so a
/// relative `ca_file` resolves next to it).
fn load(dir: &Path, text: &str) -> plangate_config::Config {
    let path = dir.join("plangate.toml");
    std::fs::write(&path, text).unwrap();
    plangate_config::load_toml(&path, &HashMap::<String, String>::new()).unwrap()
}

async fn gateway(dir: &Path, config: plangate_config::Config) -> (Arc<Gateway>, String) {
    let store = open_store(dir).await;
    let key = store.create_key("agent", Scope::Write).await.unwrap();
    (Gateway::build(config, store, material()).await, key.token)
}

fn text_of(result: &CallToolResult) -> String {
    serde_json::to_string(result).unwrap()
}

#[tokio::test]
async fn an_https_upstream_with_its_ca_file_lists_and_calls_tools() {
    let dir = tempfile::tempdir().unwrap();
    let site = tls_site(dir.path()).await;
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::write(dir.path().join("certs/ca.pem"), &site.ca_pem).unwrap();
    let config = load(
        dir.path(),
        &format!(
            "[upstreams.site]\nurl = \"{}\"\nca_file = \"certs/ca.pem\"\n",
            site.url
        ),
    );
    let (gw, token) = gateway(dir.path(), config).await;
    assert!(gw.down_upstreams().is_empty(), "{:?}", gw.down_upstreams());
    assert_eq!(gw.up_upstreams(), ["site"]);

    let client = client_of(gw.clone(), Some(token), ()).await;
    let names = all_names(&client).await;
    for tool in ["list_pages", "get_page", "update_page"] {
        assert!(names.iter().any(|n| n == tool), "{tool} missing: {names:?}");
    }

    let pages = call(&client, "list_pages", json!({})).await;
    assert_ne!(pages.is_error, Some(true), "{pages:?}");
    let text = text_of(&pages);
    assert!(text.contains("About") && text.contains("Contact"), "{text}");

    let about = call(&client, "get_page", json!({"id": 2})).await;
    assert_ne!(about.is_error, Some(true), "{about:?}");
    assert!(
        text_of(&about).contains("We are a small team."),
        "{about:?}"
    );
    assert_eq!(
        site.refused.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every TLS handshake succeeded"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_https_upstream_signed_by_an_unknown_ca_is_down_with_a_certificate_error() {
    let dir = tempfile::tempdir().unwrap();
    let site = tls_site(dir.path()).await;
    // The same server, trusted through the system's roots only: the test's
    // CA is not among them.
    let config = load(
        dir.path(),
        &format!("[upstreams.site]\nurl = \"{}\"\n", site.url),
    );
    let (gw, token) = gateway(dir.path(), config).await;
    let down = gw.down_upstreams();
    let reason = down.get("site").expect("site is down");
    assert!(
        reason.contains("upstream site")
            && reason.contains("invalid peer certificate: UnknownIssuer")
            && reason.contains("set the upstream's ca_file"),
        "not a certificate error: {reason}"
    );
    // The server sees the handshake fail once the client's alert arrives.
    let mut refused = 0;
    for _ in 0..500 {
        refused = site.refused.load(std::sync::atomic::Ordering::SeqCst);
        if refused > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused >= 1, "the server never saw the refused handshake");

    // The gateway keeps serving: its own tools are there, the site's not.
    let client = client_of(gw.clone(), Some(token), ()).await;
    let names = all_names(&client).await;
    assert!(
        names.iter().any(|n| n.starts_with("plangate_")),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n == "list_pages"), "{names:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_missing_or_unusable_ca_file_names_the_upstream_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let site = tls_site(dir.path()).await;
    std::fs::write(dir.path().join("notes.txt"), "not a certificate\n").unwrap();
    std::fs::write(
        dir.path().join("broken.pem"),
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let config = load(
        dir.path(),
        &format!(
            "[upstreams.missing]\nurl = \"{url}\"\nca_file = \"nope/ca.pem\"\n\
             [upstreams.text]\nurl = \"{url}\"\nca_file = \"notes.txt\"\n\
             [upstreams.broken]\nurl = \"{url}\"\nca_file = \"broken.pem\"\n",
            url = site.url
        ),
    );
    let (gw, _token) = gateway(dir.path(), config).await;
    let down = gw.down_upstreams();
    let reason = |name: &str| down.get(name).cloned().unwrap_or_default();
    let missing = dir.path().join("nope/ca.pem");
    assert!(
        reason("missing").starts_with(&format!(
            "upstream missing: ca_file {}: cannot read it",
            missing.display()
        )),
        "{}",
        reason("missing")
    );
    for (name, file, says) in [
        ("text", "notes.txt", "holds no PEM certificate"),
        ("broken", "broken.pem", "not usable as a CA certificate"),
    ] {
        let why = reason(name);
        assert!(
            why.contains(&format!("upstream {name}"))
                && why.contains(&dir.path().join(file).display().to_string())
                && why.contains(says),
            "{why}"
        );
    }
    assert_eq!(
        site.refused.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no connection was attempted without a usable CA"
    );
}
