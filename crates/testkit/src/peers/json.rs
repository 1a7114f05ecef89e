//! TLS and HTTP/2 peers that all answer the same JSON document (so any two of them
//! compare equal), for the shadow tests (`crates/shadow/tests`) and `scalpel shadow`'s
//! (`crates/cli/tests/cli/shadow_cli.rs`): a Node server speaking https and h2 whose
//! certificate can be swapped for a wrong one while it runs, and nginx with TLS + h2, TLS
//! without h2, a wrong-name certificate, and a plain server that writes a combined access
//! log.

pub use super::Peer;
pub use crate::certs::{Certs, Pair, certs};

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

/// Starts the Node server above with the good and the wrong-name certificates.
pub fn node(certs: &Certs) -> Peer {
    let peer = super::node_script(
        NODE,
        &[
            &certs.good.cert,
            &certs.good.key,
            &certs.wrong_name.cert,
            &certs.wrong_name.key,
        ],
    );
    assert_eq!(peer.ports.len(), 3, "the node server did not start");
    peer
}

/// Tells the Node server to present the wrong-name certificate from now on.
pub fn swap_node_certificate(node: &Peer) {
    let (_, body) = crate::raw::http(node.ports[2], "GET", "/swap").expect("the control port");
    assert_eq!(body, "swapped");
}

/// nginx: [0] TLS + h2 (good certificate), [1] TLS without h2, [2] TLS with the
/// wrong-name certificate, [3] plain HTTP/1.1 writing `access.log` (combined format),
/// [4] TLS + h2 passing every request to [3] (`proxy_pass`: its h2 answers end with an
/// empty DATA frame after the last bytes, as a reverse proxy's do). [3] and [4] also
/// answer `/big/…` with a 4 KB document.
/// Every server answers the JSON document the Node server does (without a body).
pub fn nginx(certs: &Certs) -> Peer {
    let big = format!(
        r#"location /big/ {{ default_type application/json; return 200 '{{"path":"$request_uri","pad":"{}"}}'; }}"#,
        "x".repeat(4000)
    );
    let routes = r#"location / { default_type application/json; return 200 '{"path":"$request_uri","method":"$request_method","body":""}'; }"#;
    super::nginx(5, |p, dir| {
        let d = dir.display();
        format!(
            r#"
    access_log off;
    server {{ listen 127.0.0.1:{p0} ssl http2; {good} {routes} }}
    server {{ listen 127.0.0.1:{p1} ssl; {good} {routes} }}
    server {{ listen 127.0.0.1:{p2} ssl; {wrong} {routes} }}
    server {{ listen 127.0.0.1:{p3}; access_log {d}/access.log combined; {routes} {big} }}
    server {{ listen 127.0.0.1:{p4} ssl http2; {good} location / {{ proxy_pass http://127.0.0.1:{p3}; }} }}
"#,
            p0 = p[0],
            p1 = p[1],
            p2 = p[2],
            p3 = p[3],
            p4 = p[4],
            good = certs.good.nginx_directives(),
            wrong = certs.wrong_name.nginx_directives(),
        )
    })
}
