//! Real peers for the tests, started on loopback ephemeral ports: nginx with TLS and
//! HTTP/2, Node https/h2 servers, and certificates made here with rcgen.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType, date_time_ymd,
};
use scalpel_http::{Connector, HttpVersion, Peer, PeerOptions};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Everything a TLS test needs, in one temporary directory.
#[derive(Debug)]
pub struct Certs {
    pub dir: tempfile::TempDir,
    /// The test CA (PEM).
    pub ca: PathBuf,
    /// Another CA, then the test CA: a bundle of several certificates.
    pub bundle: PathBuf,
    /// Only the other CA: does not lead to the servers' certificates.
    pub other_ca: PathBuf,
    /// For `localhost`, `scalpel.test` and 127.0.0.1, signed by the test CA.
    pub good: Pair,
    /// As `good`, but its validity ended in 2021.
    pub expired: Pair,
    /// For `other.test` only.
    pub wrong_name: Pair,
    /// For `localhost`, self-signed (no CA knows it).
    pub self_signed: Pair,
}

fn ca(name: &str) -> (CertificateParams, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    (params, key)
}

fn write_pair(dir: &Path, name: &str, cert_pem: String, key: &KeyPair) -> Pair {
    let cert = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert, cert_pem).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    Pair {
        cert,
        key: key_path,
    }
}

pub fn certs() -> Certs {
    let dir = tempfile::tempdir().unwrap();
    let (ca_params, ca_key) = ca("Scalpel Test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let (other_params, other_key) = ca("Some Other CA");
    let other_cert = other_params.self_signed(&other_key).unwrap();

    let leaf = |names: &[&str], expired: bool| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        p.distinguished_name.push(DnType::CommonName, names[0]);
        if expired {
            p.not_before = date_time_ymd(2020, 1, 1);
            p.not_after = date_time_ymd(2021, 1, 1);
        }
        (p, key)
    };
    let (p, k) = leaf(&["localhost", "scalpel.test"], false);
    let good = write_pair(
        dir.path(),
        "good",
        p.signed_by(&k, &issuer).unwrap().pem(),
        &k,
    );
    let (p, k) = leaf(&["localhost", "scalpel.test"], true);
    let expired = write_pair(
        dir.path(),
        "expired",
        p.signed_by(&k, &issuer).unwrap().pem(),
        &k,
    );
    let key = KeyPair::generate().unwrap();
    let p = CertificateParams::new(vec!["other.test".to_string()]).unwrap();
    let wrong_name = write_pair(
        dir.path(),
        "wrong",
        p.signed_by(&key, &issuer).unwrap().pem(),
        &key,
    );
    let (p, k) = leaf(&["localhost"], false);
    let self_signed = write_pair(dir.path(), "self", p.self_signed(&k).unwrap().pem(), &k);

    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_cert.pem()).unwrap();
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, other_cert.pem()).unwrap();
    let bundle = dir.path().join("bundle.pem");
    std::fs::write(&bundle, format!("{}{}", other_cert.pem(), ca_cert.pem())).unwrap();
    Certs {
        dir,
        ca,
        bundle,
        other_ca,
        good,
        expired,
        wrong_name,
        self_signed,
    }
}

/// Free loopback ports (bound, read, released; the servers bind them next).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<StdListener> = (0..n)
        .map(|_| StdListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// Waits until something accepts on `port`.
pub fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on port {port} within 20 s");
}

/// A child process killed when the test ends.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pub ports: Vec<u16>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx on five ports (started again on new ports if a port was taken meanwhile): [0] TLS + h2 (good cert, keep-alive 1 s, 20 requests per
/// connection), [1] TLS without h2, [2] h2c (prior knowledge), [3] TLS with the expired
/// certificate, [4] TLS with the wrong-name certificate.
pub fn nginx(certs: &Certs) -> Server {
    for _ in 0..3 {
        if let Some(server) = try_nginx(certs) {
            return server;
        }
    }
    panic!("nginx did not start in three tries (see its errors above)");
}

fn try_nginx(certs: &Certs) -> Option<Server> {
    let nginx = ["/usr/sbin/nginx", "nginx"]
        .into_iter()
        .find(|n| Command::new(n).arg("-v").output().is_ok())
        .expect("nginx is not installed: run scripts/setup.sh");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let ports = free_ports(5);
    let tls = |p: &Pair| {
        format!(
            "ssl_certificate {}; ssl_certificate_key {};",
            p.cert.display(),
            p.key.display()
        )
    };
    let routes = r#"
        location = / { return 200 "hello from nginx\n"; }
        location = /big { return 200 "$request_id$request_id$request_id$request_id"; }
        location = /echo { client_max_body_size 4m; client_body_buffer_size 4m; return 200 "got $content_length\n"; }
    "#;
    let conf = format!(
        r#"
daemon off;
master_process off;
worker_processes 1;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_timeout 1s;
    keepalive_requests 20;
    server {{ listen 127.0.0.1:{p0} ssl http2; {good} {routes} }}
    server {{ listen 127.0.0.1:{p1} ssl; {good} {routes} }}
    server {{ listen 127.0.0.1:{p2} http2; {routes} }}
    server {{ listen 127.0.0.1:{p3} ssl; {expired} {routes} }}
    server {{ listen 127.0.0.1:{p4} ssl; {wrong} {routes} }}
}}
"#,
        p0 = ports[0],
        p1 = ports[1],
        p2 = ports[2],
        p3 = ports[3],
        p4 = ports[4],
        good = tls(&certs.good),
        expired = tls(&certs.expired),
        wrong = tls(&certs.wrong_name),
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut child = Command::new(nginx)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nginx");
    let deadline = Instant::now() + Duration::from_secs(20);
    for &p in &ports {
        while std::net::TcpStream::connect(("127.0.0.1", p)).is_err() {
            if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None; // most likely a port taken between choosing and binding
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Some(Server {
        child,
        ports,
        _dir: Some(dir),
    })
}

/// Runs a Node script (given the certificate paths as argv) that prints `PORT n` once
/// listening.
pub fn node(script: &str, certs: &Certs) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.mjs");
    std::fs::write(&path, script).unwrap();
    let mut child = Command::new("node")
        .arg(&path)
        .arg(&certs.good.cert)
        .arg(&certs.good.key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node is not installed: run scripts/setup.sh");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut ports = Vec::new();
    while let Some(Ok(line)) = lines.next() {
        match line.strip_prefix("PORT ") {
            Some(p) => ports.push(p.trim().parse().unwrap()),
            None if line == "READY" => break,
            None => {}
        }
    }
    assert!(!ports.is_empty(), "the node server did not start");
    Server {
        child,
        ports,
        _dir: Some(dir),
    }
}

/// A connector to `url` with the options `set` changes from the defaults.
pub async fn connector(
    url: &str,
    set: impl FnOnce(&mut PeerOptions),
) -> Result<Connector, scalpel_http::Error> {
    let mut options = PeerOptions::default();
    options.connect_timeout = Duration::from_secs(10);
    options.read_timeout = Some(Duration::from_secs(10));
    set(&mut options);
    Connector::new(Peer::parse(url).unwrap().with_options(options)).await
}

pub fn trust(ca: &Path) -> impl FnOnce(&mut PeerOptions) + '_ {
    move |o| o.ca_file = Some(ca.to_path_buf())
}

pub fn h2_with(ca: &Path) -> impl FnOnce(&mut PeerOptions) + '_ {
    move |o| {
        o.ca_file = Some(ca.to_path_buf());
        o.version = HttpVersion::Http2;
    }
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
