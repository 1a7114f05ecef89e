use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Checked, HeadCheck, MAX_HEAD, Reject, sift};

// The table both services are tested against, read by the same code as the
// cross-service test.
#[path = "../../tests/service/util/heads.rs"]
mod heads;

use heads::HeadCase as Case;

const ID: &str = "u0123456789ab";

fn table() -> Vec<Case> {
    heads::request_heads(ID)
}

fn without_leading_empty_lines(raw: &[u8]) -> &[u8] {
    let mut r = raw;
    loop {
        if let Some(rest) = r.strip_prefix(b"\n") {
            r = rest;
        } else if let Some(rest) = r.strip_prefix(b"\r\n") {
            r = rest;
        } else {
            return r;
        }
    }
}

/// A socket that yields the given chunks, one per read, then the end of the stream; and
/// keeps what is written to it.
#[derive(Debug, Default)]
struct Script {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes of the front chunk already read.
    taken: usize,
    written: Vec<u8>,
}

impl AsyncRead for Script {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(chunk) = this.chunks.front() {
            let n = (chunk.len() - this.taken).min(buf.remaining());
            buf.put_slice(&chunk[this.taken..this.taken + n]);
            this.taken += n;
            if this.taken == chunk.len() {
                this.chunks.pop_front();
                this.taken = 0;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Script {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().written.extend_from_slice(b);
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What hyper would read through a [`Checked`] socket fed `chunks`, with reads of at
/// most `read_size` bytes, and what is written at shutdown.
fn through_checked(chunks: Vec<Vec<u8>>, read_size: usize) -> (Vec<u8>, Vec<u8>) {
    // An empty read is the end of the stream, not an empty chunk.
    let chunks = chunks.into_iter().filter(|c| !c.is_empty()).collect();
    let mut checked = Checked::new(Script {
        chunks,
        ..Script::default()
    });
    let mut cx = Context::from_waker(Waker::noop());
    let mut seen = Vec::new();
    let mut storage = vec![0u8; read_size];
    loop {
        let mut buf = ReadBuf::new(&mut storage);
        match Pin::new(&mut checked).poll_read(&mut cx, &mut buf) {
            Poll::Ready(Ok(())) => {}
            other => panic!("read: {other:?}"),
        }
        if buf.filled().is_empty() {
            break;
        }
        seen.extend_from_slice(buf.filled());
    }
    assert!(matches!(
        Pin::new(&mut checked).poll_shutdown(&mut cx),
        Poll::Ready(Ok(()))
    ));
    (seen, checked.io.written)
}

/// The one verdict for a case, whatever the chunking: the bytes passed and the answer
/// written at the end.
fn verdict(case: &Case) -> (Vec<u8>, Vec<u8>) {
    let whole = through_checked(vec![case.raw.clone()], 8192);
    // (chunks, the read sizes to try with them)
    let mut splits: Vec<(Vec<Vec<u8>>, &[usize])> = Vec::new();
    if case.raw.len() <= 400 {
        for at in 1..case.raw.len() {
            splits.push((
                vec![case.raw[..at].to_vec(), case.raw[at..].to_vec()],
                &[8192],
            ));
        }
        splits.push((case.raw.iter().map(|&b| vec![b]).collect(), &[8192, 5]));
    }
    for size in [7, 1000, 4096, 65_536] {
        splits.push((
            case.raw.chunks(size).map(<[u8]>::to_vec).collect(),
            &[8192, 5],
        ));
    }
    for (chunks, read_sizes) in splits {
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).take(4).collect();
        for &read_size in read_sizes {
            let got = through_checked(chunks.clone(), read_size);
            assert!(
                got == whole,
                "line {}: chunks {sizes:?}.., reads of {read_size}: a different verdict",
                case.line
            );
        }
    }
    whole
}

#[test]
fn every_case_of_the_table_gets_its_answer_however_the_bytes_arrive() {
    for case in table() {
        let (passed, answer) = verdict(&case);
        match &case.expect {
            None => {
                assert!(
                    passed == without_leading_empty_lines(&case.raw),
                    "line {}: the head was not passed on whole ({} of {} bytes)",
                    case.line,
                    passed.len(),
                    case.raw.len()
                );
                assert!(answer.is_empty(), "line {}: answered", case.line);
            }
            Some((status, code)) => {
                assert!(passed.is_empty(), "line {}: passed bytes on", case.line);
                let text = String::from_utf8(answer).unwrap();
                let head = format!("HTTP/1.1 {status} ");
                assert!(text.starts_with(&head), "line {}: {text}", case.line);
                let head_request = case.raw.starts_with(b"HEAD ");
                let body = format!(r#"{{"error":{{"code":"{code}","message":""#);
                assert_eq!(
                    !head_request,
                    text.contains(&body),
                    "line {}: want {code}: {text}",
                    case.line
                );
            }
        }
    }
}

#[test]
fn a_refusal_is_json_with_its_length_and_closes_the_connection() {
    assert_eq!(
        Reject::InvalidTarget.response(false),
        b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 115\r\n\
          connection: close\r\n\r\n{\"error\":{\"code\":\"invalid_target\",\"message\":\"request \
          target must be a path of URI characters, without a fragment\"}}"
            .to_vec()
    );
    // A HEAD gets the same head and no body.
    let head = Reject::TargetTooLong.response(true);
    assert!(head.ends_with(b"content-length: 90\r\nconnection: close\r\n\r\n"));
    for reject in [
        Reject::InvalidRequest,
        Reject::InvalidTarget,
        Reject::LengthRequired,
        Reject::TargetTooLong,
        Reject::ExpectationFailed,
        Reject::HeadersTooLarge,
    ] {
        let body = reject.body();
        assert!(body.starts_with(&format!(r#"{{"error":{{"code":"{}","#, reject.code())));
        let response = String::from_utf8(reject.response(false)).unwrap();
        assert!(response.contains(&format!("content-length: {}\r\n", body.len())));
        assert!(response.ends_with(body));
    }
}

#[test]
fn pipelined_requests_before_a_refused_head_are_passed_and_nothing_after_it() {
    let ok = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let body =
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\nGET /#x HTTP".to_vec();
    let bad = b"GET /#x HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let stream = [ok.clone(), body.clone(), ok.clone(), bad, ok.clone()].concat();
    for chunk in [stream.len(), 1, 3, 40] {
        let chunks = stream.chunks(chunk).map(<[u8]>::to_vec).collect();
        let (passed, answer) = through_checked(chunks, 8192);
        // The body bytes that look like a bad target are a body, not a head.
        assert_eq!(passed, [ok.clone(), body.clone(), ok.clone()].concat());
        assert!(answer.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
        assert!(answer.ends_with(br#""code":"invalid_target","message":"request target must be a path of URI characters, without a fragment"}}"#));
    }
}

#[test]
fn no_answer_when_hyper_stops_reading_before_the_refused_head() {
    let stream = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /#x HTTP/1.1\r\n\r\n".to_vec();
    let mut checked = Checked::new(Script {
        chunks: vec![stream].into(),
        ..Script::default()
    });
    let mut cx = Context::from_waker(Waker::noop());
    let mut storage = [0u8; 8192];
    let mut buf = ReadBuf::new(&mut storage);
    assert!(
        Pin::new(&mut checked)
            .poll_read(&mut cx, &mut buf)
            .is_ready()
    );
    assert_eq!(buf.filled().len(), 34);
    // hyper closes (say the first request asked for it) without reading on.
    assert!(Pin::new(&mut checked).poll_shutdown(&mut cx).is_ready());
    assert!(checked.io.written.is_empty());
}

#[test]
fn a_client_leaving_mid_head_gets_no_answer() {
    let (passed, answer) = through_checked(vec![b"GET /healthz HTTP/1.1\r\nHo".to_vec()], 8192);
    assert!(passed.is_empty() && answer.is_empty());
}

#[test]
fn a_large_body_passes_through_and_the_next_head_is_checked() {
    let body = vec![b'#'; 200_000];
    let head = format!(
        "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let next = b"GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n";
    let stream = [head.as_bytes(), &body, next].concat();
    let chunks = stream.chunks(9000).map(<[u8]>::to_vec).collect();
    let (passed, answer) = through_checked(chunks, 8192);
    assert_eq!(passed.len(), head.len() + body.len());
    assert!(answer.starts_with(b"HTTP/1.1 400 "));
}

#[test]
fn the_longest_head_is_checked_in_one_piece_or_many() {
    // Exactly MAX_HEAD bytes with the empty line, then one more header byte.
    let pad = MAX_HEAD - "GET / HTTP/1.1\r\nHost: x\r\nX: \r\n\r\n".len();
    for (extra, ok) in [(0, true), (1, false)] {
        let head = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
            "a".repeat(pad + extra)
        );
        let mut check = HeadCheck::new();
        let mut bytes = head.clone().into_bytes();
        let (pass, rest, refused) = sift(&mut check, &mut bytes);
        assert_eq!(
            (pass == head.len(), rest, refused.is_none()),
            (ok, head.len(), ok),
            "{} bytes",
            head.len()
        );
    }
}

/// A small deterministic generator (no dependency): xorshift.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Mutated heads never panic the check, and its verdict never depends on how the bytes
/// arrive.
#[test]
fn mutated_heads_get_one_verdict_and_never_panic() {
    let seeds: Vec<Vec<u8>> = table()
        .into_iter()
        .map(|c| c.raw)
        .filter(|r| r.len() < 300)
        .collect();
    let alphabet = b" \r\n\t:/?#%@[]HTTP/1.01GETxX-\x00\x80\xff";
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let mut raw = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            let at = rng.below(raw.len() + 1);
            match rng.below(3) {
                0 if at < raw.len() => raw[at] = alphabet[rng.below(alphabet.len())],
                1 if at < raw.len() => {
                    raw.remove(at);
                }
                _ => raw.insert(at, alphabet[rng.below(alphabet.len())]),
            }
        }
        let whole = through_checked(vec![raw.clone()], 8192);
        let split = rng.below(raw.len() + 1);
        let halves = through_checked(vec![raw[..split].to_vec(), raw[split..].to_vec()], 8192);
        let bytes = through_checked(raw.iter().map(|&b| vec![b]).collect(), 3);
        assert!(
            whole == halves && whole == bytes,
            "{:?}: a verdict that depends on the chunking",
            String::from_utf8_lossy(&raw)
        );
        // Either the whole (cleaned) stream passed, or a prefix and an answer.
        assert!(whole.1.is_empty() || whole.1.starts_with(b"HTTP/1.1 4"));
    }
}
