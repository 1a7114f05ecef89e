use super::*;
use proptest::prelude::*;

fn response(raw: &str, head: bool) -> (Result<Option<ResponseHead>, WireError>, BytesMut) {
    let mut buf = BytesMut::from(raw);
    let expect = Expect {
        head,
        ..Expect::default()
    };
    let r = parse_response(&mut buf, &expect);
    (r, buf)
}

fn lean(raw: &str) -> Result<Option<HeadInfo>, WireError> {
    parse_head(raw.as_bytes(), &Expect::default())
}

#[test]
fn request_heads_forward_end_to_end_headers_only() {
    let mut map = HeaderMap::new();
    for (k, v) in [
        ("host", "example.test"),
        ("connection", "keep-alive, X-Secret"),
        ("keep-alive", "timeout=5"),
        ("x-secret", "s"),
        ("te", "trailers"),
        ("upgrade", "websocket"),
        ("content-length", "999"),
        ("expect", "100-continue"),
        ("accept", "*/*"),
    ] {
        map.append(k, HeaderValue::from_static(v));
    }
    let mut out = Vec::new();
    let mut w = RequestWriter::new(&mut out, "POST", "", "/a?b=1");
    let seen = w.forward(&map);
    w.content_length(5);
    w.finish();
    assert!(seen.host);
    let head = String::from_utf8(out).unwrap();
    // Parsed back by httparse, an independent reader.
    let mut slots = [httparse::EMPTY_HEADER; 16];
    let mut req = httparse::Request::new(&mut slots);
    assert_eq!(
        req.parse(head.as_bytes()).unwrap(),
        httparse::Status::Complete(head.len())
    );
    assert_eq!((req.method, req.path), (Some("POST"), Some("/a?b=1")));
    let names: Vec<_> = req
        .headers
        .iter()
        .map(|h| h.name.to_ascii_lowercase())
        .collect();
    assert_eq!(names, ["host", "accept", "content-length"], "{head}");
    assert_eq!(req.headers[2].value, b"5");
    assert!(sends_length(b"post", 0) && sends_length(b"GET", 1) && !sends_length(b"GET", 0));
}

#[test]
fn request_lines_join_prefix_and_target() {
    let mut out = Vec::new();
    RequestWriter::new(&mut out, "GET", "/base", "x").finish();
    assert_eq!(out, b"GET /base/x HTTP/1.1\r\n\r\n");
}

#[test]
fn response_heads_frame_the_body() {
    let (r, rest) = response(
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\n\r\nabc",
        false,
    );
    let h = r.unwrap().unwrap();
    assert_eq!(
        (h.status, h.framing, h.keep_alive),
        (StatusCode::OK, Framing::Length(3), true)
    );
    assert_eq!(h.headers["x-a"], "1");
    assert_eq!(h.headers["content-length"], "3");
    assert_eq!(&rest[..], b"abc", "the head is consumed, the body left");

    let (r, _) = response("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", true);
    assert_eq!(r.unwrap().unwrap().framing, Framing::Empty, "HEAD");
    for code in [204, 304] {
        let (r, _) = response(
            &format!("HTTP/1.1 {code} X\r\nContent-Length: 3\r\n\r\n"),
            false,
        );
        let h = r.unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Empty, true), "{code}");
    }
    let (r, _) = response("HTTP/1.1 200 OK\r\n\r\nuntil close", false);
    let h = r.unwrap().unwrap();
    assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
    let (r, _) = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false);
    assert_eq!(
        r.unwrap().unwrap().framing,
        Framing::Close,
        "not chunked last"
    );

    let (r, _) = response(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: timeout=5\r\n\r\n",
        false,
    );
    let h = r.unwrap().unwrap();
    assert!(!h.keep_alive);
    assert!(h.headers.get("x-drop").is_none() && h.headers.get("connection").is_none());
    assert!(h.headers.get("keep-alive").is_none());

    let (r, _) = response("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false);
    let h = r.unwrap().unwrap();
    assert!(!h.keep_alive, "HTTP/1.0 without keep-alive");
    assert_eq!(h.version, Version::HTTP_10);
    let (r, _) = response(
        "HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
        false,
    );
    assert!(r.unwrap().unwrap().keep_alive);
}

/// RFC 9112 §6.3: Transfer-Encoding overrides Content-Length — the body is read as
/// chunked, the stale length is not forwarded, and the connection is not reused (the two
/// framings disagree about where the next response starts: a smuggling vector).
#[test]
fn content_length_with_transfer_encoding_is_reframed_and_not_reused() {
    let raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n";
    let (r, _) = response(raw, false);
    let h = r.unwrap().unwrap();
    assert_eq!(h.framing, Framing::Chunked);
    assert!(h.reframed);
    assert!(
        !h.keep_alive,
        "a re-framed connection must not go back to a pool"
    );
    assert!(h.headers.get("transfer-encoding").is_none());
    assert!(
        h.headers.get("content-length").is_none(),
        "chunked wins, the length goes"
    );
    let l = lean(raw).unwrap().unwrap();
    assert_eq!(
        (l.framing, l.keep_alive, l.reframed),
        (Framing::Chunked, false, true)
    );
}

#[test]
fn response_heads_skip_interim_answers_and_reject_bad_ones() {
    let raw = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
    let (r, rest) = response(raw, false);
    assert_eq!(r.unwrap().unwrap().status, StatusCode::CREATED);
    assert!(rest.is_empty());
    assert_eq!(lean(raw).unwrap().unwrap().len, raw.len());
    let (r, _) = response("HTTP/1.1 200 OK\r\nContent-Len", false);
    assert!(r.unwrap().is_none(), "incomplete");
    let (r, _) = response("HTTP/1.1 101 Switching Protocols\r\n\r\n", false);
    assert_eq!(r.unwrap_err(), WireError::Upgrade);
    for bad_length in [
        "Content-Length: 3\r\nContent-Length: 4",
        "Content-Length: x",
        "Content-Length: +3",
        "Content-Length: ",
        "Content-Length: 3 4",
        "Content-Length: -1",
        "Content-Length: 18446744073709551616",
    ] {
        let (r, _) = response(&format!("HTTP/1.1 200 OK\r\n{bad_length}\r\n\r\n"), false);
        assert_eq!(r.unwrap_err(), WireError::ContentLength, "{bad_length}");
    }
    let (r, _) = response(
        "HTTP/1.1 200 OK\r\nContent-Length:  18446744073709551615 \r\n\r\n",
        false,
    );
    assert_eq!(r.unwrap().unwrap().framing, Framing::Length(u64::MAX));
    let (r, _) = response("HTTP/1.1 2000 OK\r\n\r\n", false);
    assert!(matches!(r.unwrap_err(), WireError::Head(_)));
    let big = format!(
        "HTTP/1.1 200 OK\r\nX-Big: {}",
        "a".repeat(DEFAULT_MAX_HEAD_BYTES)
    );
    let (r, _) = response(&big, false);
    assert!(matches!(r.unwrap_err(), WireError::HeadTooLarge { .. }));
}

/// The head limit is in bytes and configurable: a complete head over it is refused too
/// (not only one still arriving).
#[test]
fn the_head_limit_counts_bytes() {
    let raw = format!(
        "HTTP/1.1 200 OK\r\nX-A: {}\r\nContent-Length: 0\r\n\r\n",
        "a".repeat(200)
    );
    let small = Expect {
        max_head_bytes: 128,
        ..Expect::default()
    };
    assert_eq!(
        parse_head(raw.as_bytes(), &small).unwrap_err(),
        WireError::HeadTooLarge { limit: 128 }
    );
    assert!(
        parse_head(raw.as_bytes(), &Expect::default())
            .unwrap()
            .is_some()
    );
    // Many headers past the byte limit are too large, however they are counted.
    let many: String = (0..2000)
        .map(|i| format!("X-{i}: vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\r\n"))
        .collect();
    let raw = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
    assert!(raw.len() > DEFAULT_MAX_HEAD_BYTES);
    assert!(matches!(
        lean(&raw).unwrap_err(),
        WireError::HeadTooLarge { .. }
    ));
}

/// Issue #12: 129 headers were "over the limit" though the head was 2 KiB; the limit is
/// the head's size in bytes, any number of headers (both parsers, and a head split
/// wherever the reads fall).
#[test]
fn heads_are_limited_by_bytes_not_by_header_count() {
    for count in [MAX_HEADERS - 1, MAX_HEADERS, MAX_HEADERS + 1, 129, 3000] {
        let many: String = (0..count).map(|i| format!("X-{i}: v\r\n")).collect();
        let raw = format!("HTTP/1.1 200 OK\r\n{many}Content-Length: 2\r\n\r\nok");
        assert!(raw.len() < DEFAULT_MAX_HEAD_BYTES, "{count}");
        let info = lean(&raw).unwrap().expect("complete");
        assert_eq!(
            (info.status, info.framing),
            (200, Framing::Length(2)),
            "{count}"
        );
        assert_eq!(info.len, raw.len() - 2);
        let mut buf = BytesMut::from(raw.as_str());
        let head = parse_response(&mut buf, &Expect::default())
            .unwrap()
            .unwrap();
        assert_eq!(head.headers.len(), count + 1, "{count}");
        assert_eq!(head.headers["x-0"], "v");
        assert_eq!(&buf[..], b"ok");
        // Cut short: not complete yet, never an error.
        let cut = &raw.as_bytes()[..raw.len() / 2];
        assert_eq!(parse_head(cut, &Expect::default()), Ok(None), "{count}");
    }
}

#[test]
fn upgrades_keep_their_header_and_bytes_after_a_101() {
    let raw = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x01\x02hi";
    let mut buf = BytesMut::from(raw);
    let expect = Expect {
        upgrade: true,
        ..Expect::default()
    };
    let h = parse_response(&mut buf, &expect).unwrap().unwrap();
    assert_eq!(h.status, StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!((h.framing, h.keep_alive), (Framing::Empty, false));
    assert_eq!(h.headers["upgrade"], "websocket");
    assert!(h.headers.get("connection").is_none());
    assert_eq!(&buf[..], b"\x01\x02hi", "the new protocol's bytes stay");
}

const CHUNKED: &[u8] = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";

fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> (Vec<u8>, bool, BytesMut) {
    let mut dec = ChunkedDecoder::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&wire.len())) {
        buf.extend_from_slice(&wire[from..cut]);
        from = cut;
        while let Some(d) = dec.decode(&mut buf).unwrap() {
            out.extend_from_slice(&d);
        }
    }
    (out, dec.is_done(), buf)
}

#[test]
fn chunked_bodies_decode_across_every_split_point() {
    for cut in 0..=CHUNKED.len() {
        let (out, done, rest) = decode_in_pieces(CHUNKED, &[cut]);
        assert!(done, "cut at {cut}");
        assert_eq!(out, b"hello, world", "cut at {cut}");
        assert_eq!(
            &rest[..],
            b"NEXT",
            "bytes after the body stay (cut at {cut})"
        );
    }
    // Every pair of split points, too: three pieces.
    for a in 0..=CHUNKED.len() {
        for b in a..=CHUNKED.len() {
            let (out, done, rest) = decode_in_pieces(CHUNKED, &[a, b]);
            assert!(
                done && out == b"hello, world" && &rest[..] == b"NEXT",
                "cuts {a},{b}"
            );
        }
    }
}

#[test]
fn trailers_are_kept_by_decode_at_every_split_point_and_dropped_by_skip() {
    let wire = b"2\r\nhi\r\n0\r\nX-Sum: abc\r\nconnection: x\r\nX-Two: 2\r\n\r\nNEXT";
    for cut in 0..=wire.len() {
        let mut dec = ChunkedDecoder::new();
        let mut buf = BytesMut::new();
        for piece in [&wire[..cut], &wire[cut..]] {
            buf.extend_from_slice(piece);
            while dec.decode(&mut buf).unwrap().is_some() {}
        }
        let t = dec.take_trailers().expect("trailers kept");
        assert_eq!(t["x-sum"], "abc", "cut at {cut}");
        assert_eq!(t["x-two"], "2", "cut at {cut}");
        assert!(t.get("connection").is_none(), "hop-by-hop dropped");
        assert_eq!(&buf[..], b"NEXT");
        assert!(dec.take_trailers().is_none(), "taken once");
    }
    let mut dec = ChunkedDecoder::new();
    let mut buf = BytesMut::from(&wire[..]);
    dec.skip(&mut buf).unwrap();
    assert!(dec.is_done() && dec.take_trailers().is_none());
    let mut dec = ChunkedDecoder::new();
    let mut buf = BytesMut::from(&b"0\r\n\r\n"[..]);
    assert!(dec.decode(&mut buf).unwrap().is_none());
    assert!(
        dec.is_done() && dec.take_trailers().is_none(),
        "no trailers"
    );
}

#[test]
fn declared_trailers_are_reported_apart_from_the_forwarded_headers() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 200 OK\r\ntrailer: x-sum\r\nTrailer: x-two\r\ntransfer-encoding: chunked\r\n\r\n"[..],
    );
    let (head, _, trailer) = super::parse_response_counted(&mut buf, &Expect::default())
        .unwrap()
        .unwrap();
    assert!(
        head.headers.get("trailer").is_none(),
        "hop-by-hop in the map"
    );
    assert_eq!(trailer, ["x-sum", "x-two"]);
}

#[test]
fn interim_answers_are_counted_for_a_proxy() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
    );
    let (head, interim, _) = super::parse_response_counted(&mut buf, &Expect::default())
        .unwrap()
        .unwrap();
    assert_eq!((head.status.as_u16(), interim), (200, 2));
    assert!(buf.is_empty());
}

#[test]
fn chunked_skip_drops_the_same_bytes_at_every_split_point() {
    for cut in 0..=CHUNKED.len() {
        let mut dec = ChunkedDecoder::new();
        let mut buf = BytesMut::from(&CHUNKED[..cut]);
        let mut data = dec.skip(&mut buf).unwrap();
        buf.extend_from_slice(&CHUNKED[cut..]);
        data += dec.skip(&mut buf).unwrap();
        assert!(dec.is_done(), "cut at {cut}");
        assert_eq!(data, 12, "cut at {cut}");
        assert_eq!(&buf[..], b"NEXT", "cut at {cut}");
    }
}

#[test]
fn bad_chunked_bodies_are_errors() {
    for wire in [
        &b"zz\r\n"[..],
        b"3\r\nabcX\r\n",
        b"\r\n",
        b"1234567890abcdef0\r\n",
        b"+5\r\nhello\r\n",
        b"0\r\nX: 1\r\n",
    ] {
        let mut dec = ChunkedDecoder::new();
        let mut buf = BytesMut::from(wire);
        let mut r = Ok(None);
        for _ in 0..4 {
            r = dec.decode(&mut buf);
            if !matches!(r, Ok(Some(_))) {
                break;
            }
        }
        let incomplete_trailer = wire.starts_with(b"0\r\n");
        if incomplete_trailer {
            assert!(matches!(r, Ok(None)) && !dec.is_done(), "waits for the end");
        } else {
            assert!(r.is_err(), "{:?}", String::from_utf8_lossy(wire));
        }
    }
    let mut dec = ChunkedDecoder::new();
    let mut buf = BytesMut::from(&[b'1'; MAX_CHUNK_LINE + 1][..]);
    assert!(dec.decode(&mut buf).is_err(), "endless size line");
    let mut dec = ChunkedDecoder::new();
    let mut buf = BytesMut::from("0\r\n");
    buf.extend_from_slice(&[b'x'; MAX_TRAILERS + 1]);
    assert!(dec.decode(&mut buf).is_err(), "endless trailers");
}

/// Whatever a server sends, parsing answers Ok or Err — never a panic — and never
/// consumes more than it was given. Inputs: mutations of valid heads and chunked bodies
/// (bytes replaced, cut, inserted, duplicated), from a fixed seed.
#[test]
fn arbitrary_server_bytes_never_panic() {
    let seeds: [&[u8]; 4] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close, x\r\nTransfer-Encoding: chunked\r\n\r\nhello",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 204 No\r\nKeep-Alive: 1\r\n\r\n",
        b"5;a=b\r\nhello\r\n0\r\nT: 1\r\n\r\n",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let mut input = seeds[(next() % 4) as usize].to_vec();
        for _ in 0..(next() % 6) {
            let at = (next() as usize) % (input.len() + 1);
            match next() % 4 {
                0 if at < input.len() => input[at] = next() as u8,
                1 => input.truncate(at),
                2 => input.insert(
                    at.min(input.len()),
                    b"\r\n:;0 \x00\xff"[(next() % 8) as usize],
                ),
                _ => {
                    let tail = input[at.min(input.len())..].to_vec();
                    input.extend_from_slice(&tail);
                }
            }
        }
        crate::fuzz::response_bytes(&input, next() % 2 == 0, next() % 2 == 0);
    }
}

proptest! {
    // The long run: `PROPTEST_CASES=1000000 cargo test -p scalpel-http --release fuzz_`.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
    ))]

    #[test]
    fn fuzz_response_heads_and_bodies(data in proptest::collection::vec(any::<u8>(), 0..512),
                                      head in any::<bool>(), upgrade in any::<bool>()) {
        crate::fuzz::response_bytes(&data, head, upgrade);
    }

    #[test]
    fn fuzz_structured_heads(status in 100u16..=999,
                             headers in proptest::collection::vec(("[A-Za-z-]{1,12}", "[ -~]{0,20}"), 0..8),
                             body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut raw = format!("HTTP/1.1 {status} X\r\n").into_bytes();
        for (k, v) in &headers {
            raw.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        raw.extend_from_slice(&body);
        crate::fuzz::response_bytes(&raw, false, false);
    }

    #[test]
    fn fuzz_chunked_round_trip(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..6),
                               cut in any::<proptest::sample::Index>()) {
        let mut wire = Vec::new();
        let mut plain = Vec::new();
        for c in &chunks {
            wire.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            wire.extend_from_slice(c);
            wire.extend_from_slice(b"\r\n");
            plain.extend_from_slice(c);
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        let (out, done, rest) = decode_in_pieces(&wire, &[cut.index(wire.len() + 1)]);
        prop_assert!(done);
        prop_assert_eq!(out, plain);
        prop_assert!(rest.is_empty());
    }
}
