//! Property tests: the redaction rules take any name, target, body or difference path a
//! user or a network can give without panicking, and never leave a named secret's value
//! in a JSON body.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use scalpel_diff::{DiffKind, Difference};
use scalpel_shadow::{REDACTED, Redactor};

fn grammar_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("$".to_string()),
        Just(".".to_string()),
        Just("[\"".to_string()),
        Just("\"]".to_string()),
        Just("\\".to_string()),
        Just("%".to_string()),
        Just("%7".to_string()),
        Just("=".to_string()),
        Just("&".to_string()),
        Just("?".to_string()),
        Just("+".to_string()),
        Just("é".to_string()),
        Just("header:".to_string()),
        Just("token".to_string()),
        "[a-z]{1,4}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn redaction_rules_never_panic(
        names in prop::collection::vec(grammar_string(), 0..3),
        target in grammar_string(),
        path in grammar_string(),
        body in prop::collection::vec(any::<u8>(), 0..64),
        form in any::<bool>(),
    ) {
        let r = Redactor::new(&names);
        let _ = r.target(&target);
        let mut h = HeaderMap::new();
        if form {
            h.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
        }
        let _ = r.body(&h, &Bytes::from(body));
        let _ = r.body(&h, &Bytes::from(target.clone()));
        let mut d = Difference::new(path, DiffKind::ValueChanged, Some(target.clone()), None);
        r.difference(&mut d);
        let _ = r.headers(&h);
    }

    #[test]
    fn a_named_json_field_never_keeps_its_value(
        name in "[a-zA-Z_][a-zA-Z0-9_]{0,8}",
        secret in "[a-z0-9]{12}",
        depth in 0usize..4,
    ) {
        let mut doc = serde_json::json!({ name.clone(): secret.clone(), "other": 1 });
        for _ in 0..depth {
            doc = serde_json::json!({ "wrap": [doc] });
        }
        let r = Redactor::new([name.to_uppercase()]);
        let out = r.body(&HeaderMap::new(), &Bytes::from(doc.to_string()));
        let text = String::from_utf8(out.to_vec()).unwrap();
        prop_assert!(!text.contains(&secret), "{}", text);
        prop_assert!(text.contains(REDACTED));
    }
}

/// A secret name as an application may spell it in a key: the name itself, another case,
/// an array or nested form (`password[]`, `user[password]`), a prefix or suffix word, a
/// dot path.
fn key_spelling(name: &str) -> impl Strategy<Value = String> + use<> {
    let n = name.to_string();
    let upper = name.to_uppercase();
    let camel = {
        let mut c = name.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect::<String>())
            .unwrap_or_default()
    };
    prop_oneof![
        Just(n.clone()),
        Just(upper),
        Just(format!("{n}[]")),
        Just(format!("user[{n}]")),
        Just(format!("new_{n}")),
        Just(format!("old{camel}")),
        Just(format!("{n}Confirm")),
        Just(format!("user.{n}")),
        Just(format!("x-{n}")),
    ]
}

/// One JSON document carrying `secret` under `key` somewhere, as text that a lenient
/// reader (Node, a framework) still reads: nested up to 200 levels, then maybe mangled.
fn hostile_json(key: String, secret: String) -> impl Strategy<Value = Vec<u8>> {
    (
        0usize..200,
        any::<bool>(),
        0u8..6,
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(move |(depth, arrays, mangle, escape_key, noise)| {
            let k = if escape_key && !key.is_empty() {
                // the first character as a JSON escape: the same key once decoded
                let mut c = key.chars();
                let first = c.next().unwrap();
                format!("\\u{:04x}{}", first as u32, c.as_str())
            } else {
                key.clone()
            };
            let mut doc = format!(r#"{{"{k}":"{secret}","n":1}}"#);
            for i in 0..depth {
                doc = if arrays && i % 2 == 0 {
                    format!("[{doc}]")
                } else {
                    format!(r#"{{"w":{doc}}}"#)
                };
            }
            let mut out = Vec::new();
            match mangle {
                1 => out.extend_from_slice(b"\xef\xbb\xbf"),
                2 => out.extend_from_slice(b"{\"a\":1}\n"),
                3 => out.extend_from_slice(&noise),
                _ => {}
            }
            out.extend_from_slice(doc.as_bytes());
            if mangle == 4 {
                // a trailing comma before the last brace
                if let Some(i) = out.iter().rposition(|&b| b == b'}') {
                    out.insert(i, b',');
                }
            }
            if mangle == 5 {
                out.extend_from_slice(&noise);
            }
            out
        })
}

/// A query or form text carrying `secret` under `key`, among other parameters, with `&`
/// or `;` between them and the key percent-encoded in part.
fn hostile_pairs(key: String, secret: String) -> impl Strategy<Value = String> {
    (
        prop::collection::vec("[a-z]{1,6}=[a-z0-9%]{0,6}", 0..4),
        0usize..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(move |(mut others, at, semicolons, encode, broken)| {
            let k = if encode {
                key.bytes().map(|b| format!("%{b:02X}")).collect()
            } else {
                key.clone()
            };
            let k = if broken { format!("{k}%zz") } else { k };
            others.insert(at.min(others.len()), format!("{k}={secret}"));
            others.join(if semicolons { ";" } else { "&" })
        })
}

fn content_type() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        Just(None),
        Just(Some("application/json")),
        Just(Some("application/x-www-form-urlencoded")),
        Just(Some("text/plain")),
        Just(Some("image/png")),
        Just(Some("application/x-ndjson")),
    ]
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("password".to_string()),
        Just("token".to_string()),
        Just("api_key".to_string()),
        Just("pin".to_string()),
        "[a-z]{3,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256), failure_persistence: None, ..ProptestConfig::default() })]

    /// Issue 31 item 3: whatever the body, query, header or difference, and however it is
    /// mangled, nothing a redactor with `--redact NAME` returns for storing (the sample's
    /// and the capture's target, headers and bodies, the differences shown) holds the
    /// value given to NAME.
    #[test]
    fn no_stored_output_holds_a_redacted_names_value(
        (name, _key, secret, json, pairs) in names().prop_flat_map(|name| {
            (Just(name.clone()), key_spelling(&name), "[A-Z]{4}[0-9]{8}")
        }).prop_flat_map(|(name, key, secret)| {
            (
                Just(name),
                Just(key.clone()),
                Just(secret.clone()),
                hostile_json(key.clone(), secret.clone()),
                hostile_pairs(key, secret),
            )
        }),
        ct in content_type(),
        path_params in any::<bool>(),
    ) {
        let r = Redactor::new([name.as_str()]);
        let mut headers = HeaderMap::new();
        if let Some(ct) = ct {
            headers.insert("content-type", HeaderValue::from_static(ct));
        }
        let clean = |what: &str, out: &[u8]| -> Result<(), TestCaseError> {
            let found = out.windows(secret.len()).any(|w| w == secret.as_bytes());
            prop_assert!(!found, "{} kept the secret: {}", what, String::from_utf8_lossy(out));
            Ok(())
        };
        // bodies: a JSON document, however mangled, and form text
        clean("json body", &r.body(&headers, &Bytes::from(json.clone())))?;
        clean("form body", &r.body(&headers, &Bytes::from(pairs.clone())))?;
        // the target: the pairs as a query or as `;path` parameters
        let target = if path_params {
            format!("/a;{pairs}/b?x=1")
        } else {
            format!("/a?{pairs}")
        };
        clean("target", r.target(&target).as_bytes())?;
        // headers: named so (header names are lower case on the wire, so no camelCase),
        // or a URL that carries the pairs
        let mut h = HeaderMap::new();
        for n in [name.clone(), format!("x-{name}"), format!("{name}-confirm")] {
            if let Ok(n) = http::HeaderName::from_bytes(n.as_bytes()) {
                h.insert(n, HeaderValue::from_str(&secret).unwrap());
            }
        }
        if let Ok(v) = HeaderValue::from_str(&format!("https://a.example/login?{pairs}")) {
            h.insert("referer", v);
        }
        for (n, v) in r.headers(&h).iter() {
            clean(n.as_str(), v.as_bytes())?;
        }
        // the differences a comparison of the bodies shows
        let other = Bytes::from_static(br#"{"n":2}"#);
        let json_body = Bytes::from(json);
        let diffs = scalpel_diff::Comparer::new().compare(
            &scalpel_diff::Response::new(200, &headers, &json_body),
            &scalpel_diff::Response::new(200, &headers, &other),
        );
        for d in r.differences(&diffs) {
            for shown in [d.primary(), d.candidate()].into_iter().flatten() {
                clean(d.path(), shown.as_bytes())?;
            }
        }
    }
}
