//! HAR files as browsers export them: pretty-printed, pages before entries, HTTP/2
//! pseudo-headers, large response bodies, POST bodies as text, base64 and form params.

use std::time::Duration;

use scalpel_requests::{RecordedSource, RenderedRequest, SkipReason, SourceFormat, SourceOptions};
use serde_json::json;

fn header(name: &str, value: &str) -> serde_json::Value {
    json!({ "name": name, "value": value })
}

fn entry(started: &str, request: serde_json::Value) -> serde_json::Value {
    json!({
        "pageref": "page_1",
        "startedDateTime": started,
        "time": 12.5,
        "request": request,
        // A big response, as browsers record images: never held by the reader.
        "response": {
            "status": 200, "statusText": "OK", "httpVersion": "h2",
            "headers": [header("content-type", "image/png")],
            "content": { "size": 375_000, "mimeType": "image/png",
                         "text": "A".repeat(500_000), "encoding": "base64" },
            "redirectURL": "", "headersSize": -1, "bodySize": 375_000
        },
        "cache": {},
        "timings": { "send": 0.1, "wait": 10.0, "receive": 2.4 }
    })
}

fn request(method: &str, url: &str, headers: Vec<serde_json::Value>) -> serde_json::Value {
    json!({ "method": method, "url": url, "httpVersion": "h2", "headers": headers,
            "queryString": [], "cookies": [], "headersSize": -1, "bodySize": 0 })
}

fn with_post(mut request: serde_json::Value, post: serde_json::Value) -> serde_json::Value {
    request["postData"] = post;
    request
}

/// The binary body of the upload entry: every byte value once.
fn binary() -> Vec<u8> {
    (0..=255u8).collect()
}

fn write_har(dir: &tempfile::TempDir) -> (std::path::PathBuf, u64) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(binary());
    let entries = vec![
        entry(
            "2024-05-01T10:00:00.000+02:00",
            request(
                "GET",
                "https://shop.example.com/v1/items?page=2#top",
                vec![
                    header(":authority", "shop.example.com"),
                    header(":method", "GET"),
                    header("Host", "shop.example.com"),
                    header("Accept", "application/json"),
                    header("Cookie", "session=abc"),
                    header("Connection", "keep-alive, X-Hop"),
                    header("X-Hop", "1"),
                    header("Content-Length", "0"),
                ],
            ),
        ),
        entry(
            "2024-05-01T08:00:00.250Z",
            with_post(
                request(
                    "POST",
                    "https://shop.example.com/v1/orders",
                    vec![header("Content-Type", "application/json")],
                ),
                json!({ "mimeType": "application/json", "text": "{\"sku\":\"a-1\",\"qty\":2}" }),
            ),
        ),
        entry(
            "2024-05-01T08:00:01.5Z",
            with_post(
                request("POST", "https://shop.example.com/v1/upload", vec![]),
                json!({ "mimeType": "application/octet-stream", "text": b64, "encoding": "base64" }),
            ),
        ),
        entry(
            "2024-05-01T08:00:01.600Z",
            with_post(
                request("POST", "https://shop.example.com/login?next=%2F", vec![]),
                json!({ "mimeType": "application/x-www-form-urlencoded",
                        "params": [ { "name": "user", "value": "ann" },
                                    { "name": "pass", "value": "p w&d" } ] }),
            ),
        ),
        entry(
            "2024-05-01T08:00:01.700Z",
            request("GET", "data:image/png;base64,iVBORw0KGgo=", vec![]),
        ),
        entry(
            "2024-05-01T08:00:01.800Z",
            json!({ "method": "GET", "headers": [] }),
        ),
        // Stamped before the entry above it: sent right after it, never earlier.
        entry(
            "2024-05-01T08:00:01.000Z",
            request("GET", "http://shop.example.com/late", vec![]),
        ),
        entry(
            "2024-05-01T08:00:02.000Z",
            with_post(
                request("PUT", "https://shop.example.com/v1/items/7", vec![]),
                json!({ "mimeType": "text/plain", "text": "qty=3" }),
            ),
        ),
    ];
    let har = json!({
        "log": {
            "version": "1.2",
            "creator": { "name": "WebInspector", "version": "537.36" },
            "pages": [ { "id": "page_1", "title": "shop", "startedDateTime": "2024-05-01T08:00:00Z",
                         "pageTimings": {} } ],
            "entries": entries
        }
    });
    let text = serde_json::to_string_pretty(&har).unwrap();
    // The line where the sixth entry (no url) starts, as the reader should report it:
    // entries are the elements of log.entries, opened at an indent of six spaces (keys are
    // sorted, so "entries" comes before "pages").
    let mut starts = text
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "      {")
        .map(|(i, _)| i as u64 + 1);
    let sixth = starts.nth(5).unwrap_or(0);
    let path = dir.path().join("shop.har");
    std::fs::write(&path, text).unwrap();
    (path, sixth)
}

struct Got {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    at: Duration,
}

fn read(source: &RecordedSource) -> Vec<Got> {
    let mut reader = source.reader();
    let mut out = RenderedRequest::default();
    let mut got = Vec::new();
    while let Some(r) = reader.next_into(&mut out).unwrap() {
        got.push(Got {
            method: out.method.to_string(),
            path: out.path_and_query.clone(),
            headers: out
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("?").to_owned()))
                .collect(),
            body: out.body.to_vec(),
            at: r.at,
        });
    }
    got
}

#[test]
fn a_browser_har_with_post_bodies_replays_its_requests() {
    let dir = tempfile::tempdir().unwrap();
    let (path, sixth_line) = write_har(&dir);
    let source = RecordedSource::open(&path, SourceOptions::new().allow_unsafe(true)).unwrap();
    assert_eq!(source.format(), SourceFormat::Har);
    let s = source.summary();
    assert_eq!((s.read, s.usable), (8, 6), "{}", s.describe());
    assert_eq!(s.skipped.get(SkipReason::NotReplayable), 1, "the data: URL");
    assert_eq!(
        s.skipped.get(SkipReason::Malformed),
        1,
        "the entry without url"
    );
    assert_eq!(
        s.first_malformed[0].line, sixth_line,
        "{:?}",
        s.first_malformed
    );
    assert!(
        s.first_malformed[0].message.contains("url"),
        "{:?}",
        s.first_malformed
    );

    let got = read(&source);
    let summary: Vec<(&str, &str)> = got
        .iter()
        .map(|g| (g.method.as_str(), g.path.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("GET", "/v1/items?page=2"),
            ("POST", "/v1/orders"),
            ("POST", "/v1/upload"),
            ("POST", "/login?next=%2F"),
            ("GET", "/late"),
            ("PUT", "/v1/items/7"),
        ]
    );
    // Pseudo-headers, Host, Content-Length and the hop-by-hop headers (Connection and
    // the X-Hop it names) are not copied.
    assert_eq!(
        got[0].headers,
        [
            ("accept".to_owned(), "application/json".to_owned()),
            ("cookie".to_owned(), "session=abc".to_owned())
        ]
    );
    assert_eq!(got[1].body, b"{\"sku\":\"a-1\",\"qty\":2}");
    assert_eq!(
        got[1].headers,
        [("content-type".to_owned(), "application/json".to_owned())]
    );
    assert_eq!(got[2].body, binary(), "base64 postData decoded");
    assert_eq!(
        got[2].headers,
        [(
            "content-type".to_owned(),
            "application/octet-stream".to_owned()
        )],
        "the mime type stands in for a missing Content-Type"
    );
    assert_eq!(
        got[3].body, b"user=ann&pass=p%20w%26d",
        "params form-encoded"
    );
    assert_eq!(got[5].body, b"qty=3");

    let ms: Vec<u128> = got.iter().map(|g| g.at.as_millis()).collect();
    // 10:00+02:00 is 08:00Z; /late (stamped 1.000) follows /login (1.600).
    assert_eq!(ms, [0, 250, 1500, 1600, 1600, 2000]);
    assert_eq!(s.span, Duration::from_secs(2));

    // By default the unsafe ones are skipped and counted.
    let safe = RecordedSource::open(&path, SourceOptions::new()).unwrap();
    assert_eq!(safe.summary().usable, 2);
    assert_eq!(safe.summary().skipped.get(SkipReason::Unsafe), 4);
    let paths: Vec<String> = read(&safe).into_iter().map(|g| g.path).collect();
    assert_eq!(paths, ["/v1/items?page=2", "/late"]);
}

#[test]
fn a_truncated_har_keeps_the_entries_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_har(&dir);
    let text = std::fs::read(&path).unwrap();
    // Cut inside the third entry's response.
    let cut = text
        .windows(12)
        .enumerate()
        .filter(|(_, w)| w == b"\"response\": ")
        .nth(2)
        .unwrap()
        .0
        + 100;
    let short = dir.path().join("short.har");
    std::fs::write(&short, &text[..cut]).unwrap();
    let source = RecordedSource::open(&short, SourceOptions::new().allow_unsafe(true)).unwrap();
    let s = source.summary();
    assert_eq!(s.usable, 2, "{}", s.describe());
    assert_eq!(s.skipped.get(SkipReason::Malformed), 1);
    assert!(
        s.first_malformed[0].message.contains("invalid JSON"),
        "{:?}",
        s.first_malformed
    );
    assert_eq!(read(&source).len(), 2);
}
