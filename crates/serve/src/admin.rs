//! The admin address: the live page at `/`, `/status`, `/metrics`, `/mirror`,
//! `POST /reload`, behind the bearer token when one is set (`admin_token`), on a bounded
//! number of HTTP/1.1 connections (TLS with `[server.admin_tls]`). Every check of an
//! admin request sits in [`admin`], before the endpoint: first the toolkit's
//! [`AdminGuard`] (the shadow proxy's admin has the same: a `Host` that is not the
//! admin's own or one of `admin_hosts` gets 421 against DNS rebinding; a `POST` from
//! another site, or not typed `application/json`, gets 403 or 415), then the token.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use scalpel_http::AdminGuard;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::error::ServeError;
use crate::live::Live;
use crate::metrics;
use crate::proxy::{ProxyBody, json_error};
use crate::reload::reload;
use crate::state::Shared;
use crate::status::{mirror_reports, status};

/// Admin connections open at once; more are closed at once.
const ADMIN_CONNECTIONS: usize = 64;

/// Serves the admin address until `stop`.
pub(crate) async fn admin_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    live: Arc<Live>,
    reload_lock: Arc<tokio::sync::Mutex<()>>,
    mut stop: watch::Receiver<bool>,
) {
    let admin_slots = Arc::new(tokio::sync::Semaphore::new(ADMIN_CONNECTIONS));
    // The names were checked with the config; the bound address is the one to name.
    let Ok(local) = listener.local_addr() else {
        return;
    };
    let guard = AdminGuard::new(local)
        .with_names(&shared.cfg.admin_hosts)
        .unwrap_or_else(|_| AdminGuard::new(local));
    let guard = Arc::new(guard);
    let tls = shared
        .admin_tls
        .as_ref()
        .map(|t| TlsAcceptor::from(t.config.clone()));
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => { tokio::time::sleep(Duration::from_millis(50)).await; continue; }
            },
            _ = stop.changed() => return,
        };
        // A bounded number of admin connections: slow or idle clients cannot take the
        // control plane's file descriptors (the head time-out frees them in 10 s).
        let Ok(permit) = admin_slots.clone().try_acquire_owned() else {
            continue;
        };
        let shared = shared.clone();
        let live = live.clone();
        let lock = reload_lock.clone();
        let tls = tls.clone();
        let guard = guard.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req: Request<Incoming>| {
                let shared = shared.clone();
                let live = live.clone();
                let lock = lock.clone();
                let guard = guard.clone();
                async move { Ok::<_, Infallible>(admin(&shared, &live, &lock, &guard, req).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10));
            match tls {
                None => {
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                }
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
                    if let Ok(Ok(stream)) = handshake.await {
                        let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                    }
                }
            }
        });
    }
}

fn json_response(status: StatusCode, value: &impl Serialize) -> Response<ProxyBody> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut res = Response::new(ProxyBody::Full(Some(Bytes::from(body))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    res
}

fn token_ok(expected: &str, req: &Request<Incoming>) -> bool {
    // The scheme name is case-insensitive (RFC 9110 §11.1): `bearer` is `Bearer`.
    let got = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .unwrap_or_default()
        .as_bytes();
    // Compare without an early exit on the first differing byte.
    got.len() == expected.len()
        && got
            .iter()
            .zip(expected.as_bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A reply of the live page as a response.
fn live_response(reply: scalpel_live::Reply) -> Response<ProxyBody> {
    let headers = reply.headers();
    let mut res = Response::new(ProxyBody::Full(Some(Bytes::from(reply.body.into_owned()))));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    for (name, value) in headers {
        res.headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
    res
}

/// One admin request: the guard (every path), the live page's own files (no token), then
/// the bearer token, then the endpoint.
async fn admin(
    shared: &Shared,
    live: &Live,
    lock: &tokio::sync::Mutex<()>,
    guard: &AdminGuard,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    if let Err(refused) = guard.check(req.method(), req.version(), req.uri(), req.headers()) {
        return json_error(refused.status(), refused.kind(), refused.detail());
    }
    // The live page's own files hold no data: served without the token, which the page
    // then asks for and sends with its data requests and the reload.
    if let Some(reply) = live.page().asset(req.method().as_str(), req.uri().path()) {
        return live_response(reply);
    }
    if let Some(t) = &shared.cfg.admin_token
        && !token_ok(t, &req)
    {
        let mut res = json_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
        res.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return res;
    }
    // HEAD is GET without the body (hyper leaves the body out).
    let method = if req.method() == Method::HEAD {
        &Method::GET
    } else {
        req.method()
    };
    match (method, req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let mut res = Response::new(ProxyBody::Full(Some(Bytes::from(metrics::text(shared)))));
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            res
        }
        (&Method::GET, "/status") => json_response(StatusCode::OK, &status(shared)),
        (&Method::GET, scalpel_live::SNAPSHOT_PATH) => {
            let snapshot = live.snapshot(shared, status(shared), mirror_reports(shared));
            live_response(live.page().snapshot(&snapshot))
        }
        (&Method::GET, "/mirror") => json_response(
            StatusCode::OK,
            &serde_json::json!({ "routes": mirror_reports(shared) }),
        ),
        (&Method::POST, "/reload") => reload_response(reload(shared, lock).await),
        (_, "/metrics" | "/status" | "/reload" | "/mirror" | scalpel_live::SNAPSHOT_PATH) => {
            json_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed",
            )
        }
        (_, path) => json_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!(
                "no admin endpoint {path} (try / for the live page, /status, /metrics, /mirror, POST /reload)"
            ),
        ),
    }
}

/// `POST /reload`'s answer: the error body's grammar, with what each worker slot said
/// beside it.
fn reload_response(result: Result<(), ServeError>) -> Response<ProxyBody> {
    match result {
        Ok(()) => json_response(StatusCode::OK, &serde_json::json!({ "reloaded": true })),
        Err(ServeError::Reload(errors)) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &serde_json::json!({
                "error": "reload_failed",
                "detail": format!("{} worker(s) did not come up; the old ones keep serving", errors.len()),
                "reloaded": false,
                "errors": errors,
            }),
        ),
        // The running config stays in these: the new one did not parse or check (422,
        // with its file and line), or asks for what cannot change live (409).
        Err(ServeError::Config(e)) => json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            &serde_json::json!({
                "error": "config_invalid",
                "detail": format!("reload refused: {e}"),
                "reloaded": false,
                "file": e.path(),
                "line": e.line(),
            }),
        ),
        Err(e @ ServeError::Refused(_)) => json_response(
            StatusCode::CONFLICT,
            &serde_json::json!({
                "error": "reload_refused",
                "detail": e.to_string(),
                "reloaded": false,
            }),
        ),
        Err(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reload_failed",
            &e.to_string(),
        ),
    }
}
