//! Real TLS and HTTP/2 peers for the shadow tests, started on loopback: certificates made
//! here with rcgen, a Node server speaking https and h2 (its certificate can be swapped
//! for a wrong one while it runs), and nginx with TLS + h2, TLS without h2, a wrong-name
//! certificate, and a plain server that writes a combined access log. Every answer is
//! the same JSON document whichever server gives it, so any two of them compare equal.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A test CA and the certificates it signed, in one temporary directory.
#[derive(Debug)]
pub struct Certs {
    pub dir: tempfile::TempDir,
    /// The test CA (PEM): what `--cacert` is given.
    pub ca: PathBuf,
    /// For `localhost` and 127.0.0.1.
    pub good: Pair,
    /// For `other.test` only.
    pub wrong_name: Pair,
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
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Scalpel Shadow Test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let good = write_pair(
        dir.path(),
        "good",
        p.signed_by(&key, &issuer).unwrap().pem(),
        &key,
    );
    let key = KeyPair::generate().unwrap();
    let p = CertificateParams::new(vec!["other.test".to_string()]).unwrap();
    let wrong_name = write_pair(
        dir.path(),
        "wrong",
        p.signed_by(&key, &issuer).unwrap().pem(),
        &key,
    );
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_cert.pem()).unwrap();
    Certs {
        dir,
        ca,
        good,
        wrong_name,
    }
}

/// A child process killed when the test ends, however it ends.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    pub ports: Vec<u16>,
    pub dir: tempfile::TempDir,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    /// The path of a file the peer writes in its directory (nginx's access log).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The Node server: [0] TLS with ALPN h2 and http/1.1 (`node:http2`, `allowHTTP1`),
/// [1] TLS with HTTP/1.1 only and no ALPN (`node:https`), [2] plain HTTP control: `GET
/// /swap` gives both TLS servers the wrong-name certificate for new connections.
const NODE: &str = r#"
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import fs from 'node:fs';
const [cert, key, wrongCert, wrongKey] = process.argv.slice(2).map((p) => fs.readFileSync(p));
const answer = (req, res) => {
  let body = [];
  req.on('data', (c) => body.push(c));
  req.on('end', () => {
    const text = Buffer.concat(body).toString('utf8');
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ path: req.url, method: req.method, body: text }));
  });
};
const both = http2.createSecureServer({ cert, key, allowHTTP1: true }, answer);
const h1 = https.createServer({ cert, key }, answer);
const control = http.createServer((req, res) => {
  both.setSecureContext({ cert: wrongCert, key: wrongKey });
  h1.setSecureContext({ cert: wrongCert, key: wrongKey });
  res.end('swapped');
});
both.listen(0, '127.0.0.1', () => h1.listen(0, '127.0.0.1', () => control.listen(0, '127.0.0.1', () => {
  for (const s of [both, h1, control]) console.log('PORT ' + s.address().port);
  console.log('READY');
})));
"#;

pub fn node(certs: &Certs) -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.mjs");
    std::fs::write(&path, NODE).unwrap();
    let mut child = Command::new("node")
        .arg(&path)
        .args([
            &certs.good.cert,
            &certs.good.key,
            &certs.wrong_name.cert,
            &certs.wrong_name.key,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node is not installed: run scripts/setup.sh");
    let stdout = child.stdout.take().unwrap();
    let mut ports = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        match line.strip_prefix("PORT ") {
            Some(p) => ports.push(p.trim().parse().unwrap()),
            None if line == "READY" => break,
            None => {}
        }
    }
    assert_eq!(ports.len(), 3, "the node server did not start");
    Peer { child, ports, dir }
}

/// Tells the Node server to present the wrong-name certificate from now on.
pub fn swap_node_certificate(node: &Peer) {
    let out = Command::new("curl")
        .args(["-sS", &format!("http://127.0.0.1:{}/swap", node.ports[2])])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "swapped");
}

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// nginx: [0] TLS + h2 (good certificate), [1] TLS without h2, [2] TLS with the
/// wrong-name certificate, [3] plain HTTP/1.1 writing `access.log` (combined format),
/// [4] TLS + h2 passing every request to [3] (`proxy_pass`: its h2 answers end with an
/// empty DATA frame after the last bytes, as a reverse proxy's do). [3] and [4] also
/// answer `/big/…` with a 4 KB document.
/// Every server answers the JSON document the Node server does (without a body).
pub fn nginx(certs: &Certs) -> Peer {
    let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nginx is not installed: run scripts/setup.sh");
    for _ in 0..5 {
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
        let big = format!(
            r#"location /big/ {{ default_type application/json; return 200 '{{"path":"$request_uri","pad":"{}"}}'; }}"#,
            "x".repeat(4000)
        );
        let routes = r#"location / { default_type application/json; return 200 '{"path":"$request_uri","method":"$request_method","body":""}'; }"#;
        let conf = format!(
            r#"daemon off;
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
    server {{ listen 127.0.0.1:{p0} ssl http2; {good} {routes} }}
    server {{ listen 127.0.0.1:{p1} ssl; {good} {routes} }}
    server {{ listen 127.0.0.1:{p2} ssl; {wrong} {routes} }}
    server {{ listen 127.0.0.1:{p3}; access_log {d}/access.log combined; {routes} {big} }}
    server {{ listen 127.0.0.1:{p4} ssl http2; {good} location / {{ proxy_pass http://127.0.0.1:{p3}; }} }}
}}
"#,
            p0 = ports[0],
            p1 = ports[1],
            p2 = ports[2],
            p3 = ports[3],
            p4 = ports[4],
            big = big,
            good = tls(&certs.good),
            wrong = tls(&certs.wrong_name),
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut child = Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx");
        let deadline = Instant::now() + Duration::from_secs(20);
        let up = ports.iter().all(|&p| {
            loop {
                if std::net::TcpStream::connect(("127.0.0.1", p)).is_ok() {
                    break true;
                }
                if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        if up {
            return Peer { child, ports, dir };
        }
        // Most likely a port taken between choosing and binding: again, on new ports.
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("nginx did not start in five tries");
}
