//! Entry points for fuzzers: each takes arbitrary bytes, runs a parser that faces the
//! network, and panics only when an invariant breaks (never on bad input). The property
//! tests call them; a coverage-guided fuzzer (`cargo fuzz`, on nightly) can call them
//! from a target as `scalpel_http::fuzz::response_bytes(data, false, false)`.

use bytes::BytesMut;

use crate::h1::{ChunkedDecoder, Expect, parse_head, parse_response};

/// Feeds `data` as a server's answer to the HTTP/1 head parsers (both must agree on
/// status, framing, reuse and length) and as a chunked body to the decoder (decoding and
/// skipping, whole and split in two, must agree on the data).
pub fn response_bytes(data: &[u8], head: bool, upgrade: bool) {
    let expect = Expect {
        head,
        upgrade,
        max_head_bytes: 1024,
    };
    let lean = parse_head(data, &expect);
    let mut buf = BytesMut::from(data);
    let full = parse_response(&mut buf, &expect);
    match (&lean, &full) {
        (Ok(Some(l)), Ok(Some(f))) => {
            assert_eq!(l.status, f.status.as_u16());
            assert_eq!(
                (l.framing, l.keep_alive, l.reframed),
                (f.framing, f.keep_alive, f.reframed)
            );
            assert_eq!(buf.len(), data.len() - l.len, "consumed exactly the head");
        }
        (Ok(None), Ok(None)) => assert_eq!(buf.len(), data.len(), "nothing consumed"),
        (Err(a), Err(b)) => assert_eq!(a, b),
        // The map refuses a few values httparse lets through (header value rules).
        (Ok(Some(_)), Err(crate::h1::WireError::Head(_))) => {}
        (l, f) => panic!("the two head parsers disagree: {l:?} vs {f:?}"),
    }

    let whole = chunked(data, data.len());
    let split = chunked(data, data.len() / 2);
    if let (Ok(a), Ok(b)) = (&whole, &split) {
        assert_eq!(a, b, "a read boundary changed the body");
    }
    // Skipping sees the same data as decoding.
    let mut dec = ChunkedDecoder::new();
    let mut buf = BytesMut::from(data);
    if let (Ok(skipped), Ok((body, done))) = (dec.skip(&mut buf), &whole) {
        assert_eq!(skipped as usize, body.len());
        assert_eq!(dec.is_done(), *done);
    }
}

/// Decodes `data` as a chunked body fed in two pieces split at `cut`.
fn chunked(data: &[u8], cut: usize) -> Result<(Vec<u8>, bool), crate::h1::WireError> {
    let mut dec = ChunkedDecoder::new();
    let mut buf = BytesMut::from(&data[..cut]);
    let mut out = Vec::new();
    while let Some(d) = dec.decode(&mut buf)? {
        assert!(!d.is_empty(), "no empty data pieces");
        out.extend_from_slice(&d);
    }
    buf.extend_from_slice(&data[cut..]);
    while let Some(d) = dec.decode(&mut buf)? {
        out.extend_from_slice(&d);
    }
    assert!(out.len() <= data.len());
    Ok((out, dec.is_done()))
}
