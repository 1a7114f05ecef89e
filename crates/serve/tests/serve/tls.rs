//! `[server.tls]`: serve terminates TLS in front of real Node workers. Real peers: curl
//! (HTTP/2 and HTTP/1.1), h2load, a rustls client that verifies the served certificate
//! (made here with rcgen), and a WebSocket-style upgrade through TLS.

use crate::util;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use util::*;

/// A self-signed certificate for `localhost` with common name `cn`, written to
/// `dir/cert.pem` and `dir/key.pem`; its DER, to compare with what a handshake shows.
fn write_cert(dir: &Path, cn: &str) -> CertificateDer<'static> {
    CertificateDer::from(scalpel_testkit::write_self_signed(dir, cn))
}

fn tls_server(dir: &Path) -> String {
    format!(
        "{SERVER}[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        dir.join("cert.pem").display(),
        dir.join("key.pem").display()
    )
}

/// A TLS client that trusts only `root` and offers `alpn`.
async fn connect(
    addr: std::net::SocketAddr,
    root: &CertificateDer<'static>,
    alpn: &[u8],
) -> TlsStream<tokio::net::TcpStream> {
    let mut store = rustls::RootCertStore::empty();
    store.add(root.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

/// One keep-alive GET on an open HTTP/1.1 connection; the whole response text.
async fn get_on<S: AsyncReadExt + AsyncWriteExt + Unpin>(s: &mut S, path: &str) -> String {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let read = scalpel_testkit::net::read_response(s);
    let (head, body) = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer within 10 s")
        .expect("a whole answer");
    format!("{head}\r\n\r\n{body}")
}

/// `curl ARGS` whose last output line is `-w`'s protocol version: (body, version).
fn curl(args: &[&str]) -> (String, String) {
    let text = scalpel_testkit::curl(args);
    let (body, version) = text.rsplit_once('\n').unwrap_or((&text, ""));
    (body.to_string(), version.to_string())
}

/// curl over HTTP/2 and HTTP/1.1 through TLS, verifying the certificate: the worker
/// sees `X-Forwarded-Proto: https` (a client's own claim is replaced) and the `Host` of
/// the `:authority`; h2load's 200 multiplexed requests all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http2_and_http1_to_curl_and_h2load() {
    let dir = tempfile::tempdir().unwrap();
    write_cert(dir.path(), "serve-one");
    let h = start(&format!(
        "{}{}",
        tls_server(dir.path()),
        node_app("web", 2, "least_conn", "")
    ))
    .await;
    let port = h.server.listen_addr().port();
    let url = format!("https://localhost:{port}/echo");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let ca = dir.path().join("cert.pem");
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let (body, got) = curl(&[
            flag,
            "--cacert",
            ca.to_str().unwrap(),
            "--resolve",
            &resolve,
            "-H",
            "x-forwarded-proto: http",
            "-w",
            "\n%{http_version}",
            &url,
        ]);
        assert_eq!(got, version, "{flag}: {body}");
        let echo: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            echo["headers"]["x-forwarded-proto"], "https",
            "{flag}: {body}"
        );
        assert_eq!(
            echo["headers"]["host"],
            format!("localhost:{port}"),
            "{flag}: {body}"
        );
    }
    let out = Command::new("h2load")
        .args(["-n", "200", "-c", "2", "-m", "8"])
        .arg(format!("https://127.0.0.1:{port}/"))
        .output()
        .expect("h2load runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Application protocol: h2"), "{text}");
    assert!(
        text.contains("200 succeeded, 0 failed, 0 errored"),
        "{text}"
    );
    assert!(text.contains("status codes: 200 2xx"), "{text}");
    h.server.shutdown().await;
}

/// A certificate reload (what SIGHUP does): a new handshake gets the new certificate,
/// a connection opened before keeps working with the old one; a bad file keeps the
/// certificate in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_reload_keeps_open_connections_and_serves_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_cert(dir.path(), "serve-one");
    let h = start(&format!(
        "{}{}",
        tls_server(dir.path()),
        node_app("web", 1, "least_conn", "")
    ))
    .await;
    let addr = h.server.listen_addr();
    let mut old = connect(addr, &first, b"http/1.1").await;
    assert_eq!(old.get_ref().1.peer_certificates().unwrap()[0], first);
    assert!(get_on(&mut old, "/").await.starts_with("HTTP/1.1 200"));

    let second = write_cert(dir.path(), "serve-two");
    h.server.reload_tls().expect("reload");
    let new = connect(addr, &second, b"http/1.1").await;
    assert_eq!(
        new.get_ref().1.peer_certificates().unwrap()[0],
        second,
        "a new handshake gets the new certificate"
    );
    // The connection opened before the reload goes on.
    for _ in 0..3 {
        assert!(get_on(&mut old, "/").await.starts_with("HTTP/1.1 200"));
    }

    // A key that does not match: the reload fails and the certificate stays.
    let other = tempfile::tempdir().unwrap();
    write_cert(other.path(), "stray");
    std::fs::copy(other.path().join("key.pem"), dir.path().join("key.pem")).unwrap();
    let err = h.server.reload_tls().unwrap_err().to_string();
    assert!(err.contains("does not belong to the certificate"), "{err}");
    let still = connect(addr, &second, b"h2").await;
    assert_eq!(still.get_ref().1.peer_certificates().unwrap()[0], second);
    assert_eq!(still.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    h.server.shutdown().await;
}

/// An HTTP/1.1 upgrade (the test app's "shout" protocol, as a WebSocket) through TLS:
/// the worker's 101, then bytes both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_through_tls_is_tunnelled() {
    let dir = tempfile::tempdir().unwrap();
    let cert = write_cert(dir.path(), "serve-one");
    let h = start(&format!(
        "{}{}",
        tls_server(dir.path()),
        node_app("web", 1, "least_conn", "")
    ))
    .await;
    let mut s = connect(h.server.listen_addr(), &cert, b"http/1.1").await;
    s.write_all(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: shout\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    read_until(&mut s, &mut got, "\r\n\r\nworker ").await;
    let text = String::from_utf8_lossy(&got).to_lowercase();
    assert!(text.starts_with("http/1.1 101 "), "{text}");
    s.write_all(b"hello tls").await.unwrap();
    read_until(&mut s, &mut got, "HELLO TLS").await;
    h.server.shutdown().await;
}

/// The admin address speaks TLS when `[server.admin_tls]` is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tls_serves_status_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let cert = write_cert(dir.path(), "admin");
    let toml = format!(
        "{SERVER}[server.admin_tls]\ncert = \"{}\"\nkey = \"{}\"\n{}",
        dir.path().join("cert.pem").display(),
        dir.path().join("key.pem").display(),
        node_app("web", 1, "least_conn", "")
    );
    let h = start(&toml).await;
    let admin = h.server.admin_addr().unwrap();
    let mut s = connect(admin, &cert, b"http/1.1").await;
    let reply = get_on(&mut s, "/status").await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"web\""), "{reply}");
    // The client listener stays plain HTTP.
    assert_eq!(h.get("/").await.unwrap().status, 200);
    h.server.shutdown().await;
}
