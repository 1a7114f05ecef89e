use super::*;
use scalpel_diff::DiffKind;

fn json_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h
}

fn form_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    h
}

fn text(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn default_and_named_secrets_are_replaced_everywhere() {
    let r = Redactor::new(["X-Api-Key", "password", "token"]);
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
    h.insert("x-api-key", HeaderValue::from_static("k3y"));
    h.insert("accept", HeaderValue::from_static("*/*"));
    let red = r.headers(&h);
    assert_eq!(red[AUTHORIZATION], REDACTED);
    assert_eq!(red["x-api-key"], REDACTED);
    assert_eq!(red["accept"], "*/*");

    assert_eq!(r.target("/a?token=abc&x=1"), "/a?token=[REDACTED]&x=1");
    assert_eq!(r.target("/a?%74oken=abc"), "/a?%74oken=[REDACTED]");

    let body =
        Bytes::from_static(br#"{"user":{"Password":"hunter2","name":"a"},"list":[{"token":"t"}]}"#);
    let out = text(&r.body(&HeaderMap::new(), &body));
    assert!(!out.contains("hunter2") && !out.contains("\"t\""), "{out}");
    assert!(out.contains("\"name\":\"a\""));

    let out = r.body(
        &form_headers(),
        &Bytes::from_static(b"user=a&password=hunter2"),
    );
    assert_eq!(&out[..], b"user=a&password=[REDACTED]");

    let mut d = Difference::new(
        r#"$.user["password"]"#,
        DiffKind::ValueChanged,
        Some("\"a\"".into()),
        Some("\"b\"".into()),
    );
    r.difference(&mut d);
    assert_eq!(d.primary(), Some(REDACTED));
    let mut d = Difference::new(
        "header:authorization",
        DiffKind::Header,
        Some("x".into()),
        None,
    );
    r.difference(&mut d);
    assert_eq!(d.primary(), Some(REDACTED));
    let mut d = Difference::new(
        "$.user.name",
        DiffKind::ValueChanged,
        Some("1".into()),
        Some("2".into()),
    );
    r.difference(&mut d);
    assert_eq!(d.primary(), Some("1"));
}

/// Each body of issue 31 item 3 that Node or a framework reads, but serde_json did not:
/// before, stored as it came, secret included.
#[test]
fn bodies_the_redactor_cannot_read_whole_are_withheld_never_stored_in_clear() {
    let r = Redactor::new(["password"]);
    let mut deep = String::new();
    for _ in 0..141 {
        deep.push_str("{\"a\":");
    }
    deep.push_str("{\"password\":\"hunter2\"}");
    deep.push_str(&"}".repeat(141));
    let bodies: Vec<(&str, Vec<u8>)> =
        vec![
        ("nested 141 levels", deep.into_bytes()),
        ("trailing comma", br#"{"password":"hunter2",}"#.to_vec()),
        ("byte order mark", b"\xef\xbb\xbf{\"password\":\"hunter2\"}".to_vec()),
        ("ndjson", b"{\"a\":1}\n{\"password\":\"hunter2\"}\n".to_vec()),
        ("xml", b"<login><password>hunter2</password></login>".to_vec()),
        (
            "multipart",
            b"--x\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nhunter2\r\n--x--\r\n"
                .to_vec(),
        ),
        ("binary", b"\x1f\x8b\x08\0hunter2".to_vec()),
    ];
    for (what, body) in bodies {
        for headers in [json_headers(), HeaderMap::new()] {
            let out = r.redact_body(&headers, &Bytes::from(body.clone()));
            assert!(out.withheld, "{what}: not withheld");
            assert_eq!(&out.value[..], REDACTED.as_bytes(), "{what}");
        }
    }
    // A form body that is not UTF-8 cannot be read either.
    let out = r.redact_body(
        &form_headers(),
        &Bytes::from_static(b"password=hunter2\xff"),
    );
    assert!(out.withheld && !text(&out.value).contains("hunter2"));
    // What it reads whole is redacted field by field and not counted.
    let out = r.redact_body(
        &json_headers(),
        &Bytes::from_static(br#"{"password":"x","n":1}"#),
    );
    assert!(!out.withheld);
    assert_eq!(text(&out.value), r#"{"n":1,"password":"[REDACTED]"}"#);
    let empty = r.redact_body(&json_headers(), &Bytes::new());
    assert!(!empty.withheld && empty.value.is_empty());
    // Without names of the user's own, bodies are stored as they came.
    let plain = Redactor::default();
    let out = plain.redact_body(&HeaderMap::new(), &Bytes::from_static(b"<a>1</a>"));
    assert!(!out.withheld && &out.value[..] == b"<a>1</a>");
}

/// Names hiding in the spellings frameworks read as the same name: before, only the
/// exact name was matched.
#[test]
fn a_name_is_found_in_every_spelling_an_application_reads() {
    let r = Redactor::new(["password"]);
    for (target, want) in [
        ("/a?password%5B%5D=hunter2", "/a?password%5B%5D=[REDACTED]"),
        (
            "/a?user[password]=hunter2&x=1",
            "/a?user[password]=[REDACTED]&x=1",
        ),
        ("/a?x=1;password=hunter2", "/a?x=1;password=[REDACTED]"),
        ("/a?new_password=hunter2", "/a?new_password=[REDACTED]"),
        (
            "/a?passwordConfirm=hunter2",
            "/a?passwordConfirm=[REDACTED]",
        ),
        ("/a?PASSWORD=hunter2", "/a?PASSWORD=[REDACTED]"),
        ("/a?pass+word=hunter2", "/a?pass+word=[REDACTED]"),
        ("/a;password=hunter2/b?x=1", "/a;password=[REDACTED]/b?x=1"),
        // a value that mentions the name may be a URL that carries it
        (
            "/login?next=%2Fa%3Fpassword%3Dhunter2",
            "/login?next=[REDACTED]",
        ),
        // not the name: kept
        (
            "/a?passwords=1&passwordhash=2",
            "/a?passwords=1&passwordhash=2",
        ),
    ] {
        assert_eq!(r.target(target), want, "{target}");
    }
    let out = text(&r.body(
        &form_headers(),
        &Bytes::from_static(b"a=1;password=hunter2&b[password]=x&password"),
    ));
    assert_eq!(
        out,
        "a=1;password=[REDACTED]&b[password]=[REDACTED]&[REDACTED]"
    );
    // A document sent as a form is no parameter: withheld whole.
    let out = r.redact_body(
        &form_headers(),
        &Bytes::from_static(br#"{"\u0070assword":"hunter2",}"#),
    );
    assert!(out.withheld && !text(&out.value).contains("hunter2"));
    // JSON is read as JSON whatever the type says (`curl -d`).
    let out = text(&r.body(&form_headers(), &Bytes::from_static(br#"{"password":"x"}"#)));
    assert_eq!(out, r#"{"password":"[REDACTED]"}"#);
    let out = text(&r.body(
        &json_headers(),
        &Bytes::from_static(
            br#"{"user":{"new-password":"a","passWORD":"b","p\u0061ssword":"c"},"doc":"{\"password\":\"d\"}","k":"keep"}"#,
        ),
    ));
    for s in ["\"a\"", "\"b\"", "\"c\"", "\\\"d\\\""] {
        assert!(!out.contains(s), "{s} in {out}");
    }
    assert!(out.contains("\"k\":\"keep\""), "{out}");
}

/// A query whose parameter names do not decode cannot be read as the application reads
/// it: withheld whole, and counted.
#[test]
fn an_undecodable_query_is_withheld_whole() {
    let r = Redactor::new(["password"]);
    for target in [
        "/a?%é=1&%",
        "/a?pass%zzword=hunter2",
        "/a?password%ff=hunter2",
    ] {
        let out = r.redact_target(target);
        assert!(out.withheld, "{target}");
        assert_eq!(out.value, "/a?[REDACTED]");
    }
    let out = r.redact_target("/a?x=%zz");
    assert!(!out.withheld, "a value that does not decode is not a name");
    // Without the user's names, as before.
    assert_eq!(Redactor::default().target("/a?%é=1&%"), "/a?%é=1&%");
}

#[test]
fn headers_that_mention_a_name_are_replaced() {
    let r = Redactor::new(["password"]);
    let mut h = HeaderMap::new();
    h.insert(
        "referer",
        HeaderValue::from_static("https://a.example/login?password=hunter2"),
    );
    h.insert("x-new-password", HeaderValue::from_static("hunter2"));
    h.insert("accept", HeaderValue::from_static("*/*"));
    let red = r.headers(&h);
    assert_eq!(red["referer"], REDACTED);
    assert_eq!(red["x-new-password"], REDACTED);
    assert_eq!(red["accept"], "*/*");
}

/// A difference's shown value can be a subtree holding the secret (`$.user` changed from
/// an object to a string), or be cut short: before, only the path's keys were checked.
#[test]
fn differences_holding_a_secret_or_unreadable_are_hidden() {
    let r = Redactor::new(["password"]);
    let hidden = |path: &str, p: &str, c: &str| {
        let mut d = Difference::new(path, DiffKind::TypeChanged, Some(p.into()), Some(c.into()));
        r.difference(&mut d);
        d.primary() == Some(REDACTED) && d.candidate() == Some(REDACTED)
    };
    assert!(hidden("$.user", r#"{"password":"hunter2"}"#, "null"));
    assert!(hidden("$.note", r#""my password is hunter2""#, "null"));
    assert!(hidden("$.doc", r#"{"a":"aaaa…"#, "null"));
    assert!(hidden("body", "<p>hunter2</p>", "<p>x</p>"));
    assert!(hidden("header:set-cookie", "a", "b"));
    assert!(!hidden("$.user", r#"{"name":"a"}"#, "null"));
    assert!(!hidden("status", "200", "500"));
}

#[test]
fn words_cut_where_names_are_cut() {
    let w = |s: &str| words(s).join(" ");
    assert_eq!(w("apiKey"), "api key");
    assert_eq!(w("APIKey"), "api key");
    assert_eq!(w("user[password][]"), "user password");
    assert_eq!(w("token2"), "token 2");
    assert_eq!(w("X-Api-Key"), "x api key");
    assert_eq!(w("passWORD"), "pass word");
    let r = Redactor::new(["api_key", "pin"]);
    for k in ["apiKey", "APIKey", "x-api-key", "apikey", "pin", "PIN_code"] {
        assert!(r.is_secret(k), "{k}");
    }
    for k in ["shipping", "spinner", "api", "keys"] {
        assert!(!r.is_secret(k), "{k}");
    }
    // A name without letters or digits matches only itself; a blank one nothing.
    let odd = Redactor::new(["_"]);
    assert!(odd.is_secret("_") && !odd.is_secret("a_b") && odd.fail_closed);
    assert!(!Redactor::new([" "]).fail_closed);
}
