//! The request → response mapping of the QR contract (docs/qr.md).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

type Reply = Response<Full<Bytes>>;

/// Serves one request. Never fails: every problem is a JSON error response.
///
/// Texts of at most `inline_max` UTF-8 bytes are rendered right here, on the connection's
/// thread; longer ones on the blocking pool (see `main.rs` for why, and docs/qr.md for the
/// measurement).
pub(crate) async fn handle(req: Request<Incoming>, inline_max: usize) -> Result<Reply, Infallible> {
    Ok(match req.uri().path() {
        "/qrcode" if req.method() == Method::GET => qrcode(req.uri().query(), inline_max).await,
        "/healthz" if req.method() == Method::GET => {
            json(StatusCode::OK, r#"{"status":"ok"}"#.into())
        }
        "/qrcode" | "/healthz" => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed; use GET",
        ),
        _ => error(StatusCode::NOT_FOUND, "not found"),
    })
}

async fn qrcode(query: Option<&str>, inline_max: usize) -> Reply {
    let text = match text_param(query.unwrap_or("")) {
        Err(()) => return error(StatusCode::BAD_REQUEST, "text is not valid UTF-8"),
        Ok(None) => return error(StatusCode::BAD_REQUEST, "text is missing or empty"),
        Ok(Some(text)) => text,
    };
    if text.is_empty() {
        return error(StatusCode::BAD_REQUEST, "text is missing or empty");
    }
    if text.len() > qr_core::MAX_TEXT_BYTES {
        let msg = format!(
            "text is {} UTF-8 bytes; the limit is {}",
            text.len(),
            qr_core::MAX_TEXT_BYTES
        );
        return error(StatusCode::PAYLOAD_TOO_LARGE, &msg);
    }
    let rendered = if text.len() <= inline_max {
        // A short render costs less than handing it to another thread and back: on one
        // core the hand-off was most of the request's cost (docs/qr.md, "Tier 4").
        Ok(qr_core::png(&text))
    } else {
        // A long render would hold up every other connection of this thread.
        tokio::task::spawn_blocking(move || qr_core::png(&text)).await
    };
    match rendered {
        Ok(Ok(png)) => {
            let mut resp = Response::new(Full::new(Bytes::from(png)));
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("image/png"));
            resp
        }
        Ok(Err(qr_core::QrError::Empty)) => {
            error(StatusCode::BAD_REQUEST, "text is missing or empty")
        }
        Ok(Err(qr_core::QrError::TooLong { .. })) => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "text is longer than 512 UTF-8 bytes",
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "render task failed"),
    }
}

/// The first `text` parameter, decoded like URLSearchParams (`+` is a space, `%XX` a
/// byte, a malformed `%` stays literal). `Err` when the decoded bytes are not UTF-8.
fn text_param(query: &str) -> Result<Option<String>, ()> {
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(key).as_deref() == Ok("text") {
            return decode(value).map(Some);
        }
    }
    Ok(None)
}

fn decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len()
                && hex(bytes[i + 1]).is_some()
                && hex(bytes[i + 2]).is_some() =>
            {
                out.push(hex(bytes[i + 1]).unwrap_or(0) << 4 | hex(bytes[i + 2]).unwrap_or(0));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ())
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

fn json(status: StatusCode, body: String) -> Reply {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn error(status: StatusCode, message: &str) -> Reply {
    // Messages are ASCII without quotes or backslashes, except the length figure: escape anyway.
    let escaped: String = message
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect();
    json(status, format!(r#"{{"error":"{escaped}"}}"#))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_urlsearchparams() {
        assert_eq!(text_param("text=a+b%20c"), Ok(Some("a b c".into())));
        assert_eq!(text_param("x=1&text=%C5%BC&text=2"), Ok(Some("ż".into())));
        assert_eq!(text_param("text=100%"), Ok(Some("100%".into())));
        assert_eq!(text_param("text=%zz"), Ok(Some("%zz".into())));
        assert_eq!(text_param("te%78t=k"), Ok(Some("k".into())));
        assert_eq!(text_param("text"), Ok(Some(String::new())));
        assert_eq!(text_param("other=1"), Ok(None));
        assert_eq!(text_param("text=%FF"), Err(()));
    }
}
