//! TLS and HTTP/2 peers answering plain text, for the connector's tests
//! (`crates/http/tests`) and `scalpel load`'s (`crates/cli/tests/cli/load_tls.rs`): nginx
//! on five ports with the certificates of [`certs`], and Node scripts given the good
//! certificate.

pub use super::Peer;
pub use crate::certs::{Certs, Pair, certs};

/// nginx on five ports: [0] TLS + h2 (good certificate, keep-alive 1 s, 20 requests per
/// connection), [1] TLS without h2, [2] h2c (prior knowledge), [3] TLS with the expired
/// certificate, [4] TLS with the wrong-name certificate. Every server answers `/` with
/// `hello from nginx`, `/big` with a few hundred bytes and `/echo` with the length of the
/// request body.
pub fn nginx(certs: &Certs) -> Peer {
    let routes = r#"
        location = / { return 200 "hello from nginx\n"; }
        location = /big { return 200 "$request_id$request_id$request_id$request_id"; }
        location = /echo { client_max_body_size 4m; client_body_buffer_size 4m; return 200 "got $content_length\n"; }
    "#;
    super::nginx(5, |p, _| {
        format!(
            r#"
    access_log off;
    keepalive_timeout 1s;
    keepalive_requests 20;
    server {{ listen 127.0.0.1:{p0} ssl http2; {good} {routes} }}
    server {{ listen 127.0.0.1:{p1} ssl; {good} {routes} }}
    server {{ listen 127.0.0.1:{p2} http2; {routes} }}
    server {{ listen 127.0.0.1:{p3} ssl; {expired} {routes} }}
    server {{ listen 127.0.0.1:{p4} ssl; {wrong} {routes} }}
"#,
            p0 = p[0],
            p1 = p[1],
            p2 = p[2],
            p3 = p[3],
            p4 = p[4],
            good = certs.good.nginx_directives(),
            expired = certs.expired.nginx_directives(),
            wrong = certs.wrong_name.nginx_directives(),
        )
    })
}

/// Runs a Node script given the good certificate's and key's paths as its arguments; it
/// prints `PORT n` for each server, then `READY` (see [`super::node_script`]).
pub fn node(script: &str, certs: &Certs) -> Peer {
    super::node_script(script, &[&certs.good.cert, &certs.good.key])
}
