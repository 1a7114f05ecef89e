//! Undoing `Content-Encoding` (gzip, deflate, br, zstd) before bodies are compared, with
//! a cap on the decoded size so that a small compressed body cannot become gigabytes.

use std::borrow::Cow;
use std::io::Read;

use http::HeaderMap;
use http::header::CONTENT_ENCODING;

/// Largest zstd window accepted: 8 MiB (`2^23`), the limit RFC 9659 sets for the `zstd`
/// content coding. A frame that asks for more is refused instead of allocated.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The decoded body would be larger than the cap (a "zip bomb", or just a big body).
    #[error("decoded body over {limit} bytes")]
    TooLarge {
        /// The cap that was hit.
        limit: usize,
    },
    /// A coding this crate does not know (`compress`, `x-custom`…): the bytes are compared
    /// as they came.
    #[error("unsupported content-encoding `{0}`")]
    Unsupported(String),
    /// The bytes are not valid for the coding the header names.
    #[error("corrupt {encoding} body: {reason}")]
    Corrupt {
        /// The coding (`gzip`, `br`…).
        encoding: String,
        /// What the decoder said.
        reason: String,
    },
}

/// The codings listed in `Content-Encoding`, in the order they were applied (`identity`
/// and empty items left out, names lower-cased).
pub fn content_codings(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty() && s != "identity")
        .collect()
}

/// The body with every coding of `headers`' `Content-Encoding` undone, last applied first.
/// A body without one is returned as it is (borrowed). The result is never longer than
/// `max_decoded` bytes: past that, [`DecodeError::TooLarge`] — decoding stops there, so
/// memory stays bounded by the cap whatever the compressed input claims.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use scalpel_diff::{DecodeError, decode_body};
/// use std::io::Write;
///
/// let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
/// gz.write_all(br#"{"a":1}"#).unwrap();
/// let body = gz.finish().unwrap();
/// let mut h = HeaderMap::new();
/// h.insert("content-encoding", HeaderValue::from_static("gzip"));
/// assert_eq!(&decode_body(&h, &body, 1024).unwrap()[..], br#"{"a":1}"#);
/// assert_eq!(decode_body(&h, &body, 3), Err(DecodeError::TooLarge { limit: 3 }));
/// ```
pub fn decode_body<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
    max_decoded: usize,
) -> Result<Cow<'a, [u8]>, DecodeError> {
    let codings = content_codings(headers);
    let mut out: Cow<'a, [u8]> = Cow::Borrowed(body);
    for coding in codings.iter().rev() {
        out = Cow::Owned(decode_one(coding, &out, max_decoded)?);
    }
    if out.len() > max_decoded {
        return Err(DecodeError::TooLarge { limit: max_decoded });
    }
    Ok(out)
}

fn decode_one(coding: &str, input: &[u8], max: usize) -> Result<Vec<u8>, DecodeError> {
    let corrupt = |e: std::io::Error| DecodeError::Corrupt {
        encoding: coding.to_string(),
        reason: e.to_string(),
    };
    match coding {
        "gzip" | "x-gzip" => {
            read_capped(flate2::read::MultiGzDecoder::new(input), max).map_err(corrupt)?
        }
        // HTTP's "deflate" is the zlib format (RFC 9110 §8.4.1.2), but some servers send
        // raw deflate: try zlib, then raw.
        "deflate" => match read_capped(flate2::read::ZlibDecoder::new(input), max) {
            Ok(r) => r,
            Err(_) => {
                read_capped(flate2::read::DeflateDecoder::new(input), max).map_err(corrupt)?
            }
        },
        "br" => read_capped(brotli::Decompressor::new(input, 4096), max).map_err(corrupt)?,
        "zstd" => {
            let mut d = zstd::stream::read::Decoder::with_buffer(input).map_err(corrupt)?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(corrupt)?;
            read_capped(d, max).map_err(corrupt)?
        }
        other => return Err(DecodeError::Unsupported(other.to_string())),
    }
    .ok_or(DecodeError::TooLarge { limit: max })
}

/// Reads at most `max` bytes; `None` when there were more.
fn read_capped(r: impl Read, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let cap = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    r.take(cap).read_to_end(&mut out)?;
    Ok((out.len() <= max).then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::io::Write;

    fn headers(enc: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_ENCODING, HeaderValue::from_str(enc).unwrap());
        h
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    const DOC: &[u8] = br#"{"user":7,"balance":100}"#;

    #[test]
    fn every_coding_decodes_to_the_same_document() {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(DOC).unwrap();
        let zlib = z.finish().unwrap();
        let mut r = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        r.write_all(DOC).unwrap();
        let raw = r.finish().unwrap();
        let mut br = Vec::new();
        brotli::BrotliCompress(&mut &DOC[..], &mut br, &Default::default()).unwrap();
        let zst = zstd::stream::encode_all(DOC, 3).unwrap();
        for (enc, body) in [
            ("gzip", gzip(DOC)),
            ("x-gzip", gzip(DOC)),
            ("deflate", zlib),
            ("deflate", raw),
            ("br", br),
            ("zstd", zst),
            ("identity", DOC.to_vec()),
            ("GZIP, identity", gzip(DOC)),
        ] {
            assert_eq!(
                decode_body(&headers(enc), &body, 1 << 20).unwrap(),
                DOC,
                "{enc}"
            );
        }
        // Two codings: applied gzip then br, undone br then gzip.
        let mut br = Vec::new();
        brotli::BrotliCompress(&mut &gzip(DOC)[..], &mut br, &Default::default()).unwrap();
        assert_eq!(
            decode_body(&headers("gzip, br"), &br, 1 << 20).unwrap(),
            DOC
        );
        // No header: borrowed as it is.
        assert!(matches!(
            decode_body(&HeaderMap::new(), DOC, 1),
            Err(DecodeError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_body(&HeaderMap::new(), DOC, 100).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_zip_bomb_stops_at_the_cap() {
        // 64 MiB of zeros compress to ~64 KiB; decoding stops after 1 MiB + 1 byte.
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            e.write_all(&zeros).unwrap();
        }
        let bomb = e.finish().unwrap();
        assert!(bomb.len() < 1 << 17);
        assert_eq!(
            decode_body(&headers("gzip"), &bomb, 1 << 20),
            Err(DecodeError::TooLarge { limit: 1 << 20 })
        );
        let zst = zstd::stream::encode_all(&vec![0u8; 4 << 20][..], 19).unwrap();
        assert_eq!(
            decode_body(&headers("zstd"), &zst, 1 << 20),
            Err(DecodeError::TooLarge { limit: 1 << 20 })
        );
    }

    #[test]
    fn garbage_and_unknown_codings_are_errors_not_panics() {
        assert!(matches!(
            decode_body(&headers("gzip"), b"not gzip", 100),
            Err(DecodeError::Corrupt { .. })
        ));
        assert!(matches!(
            decode_body(&headers("br"), b"\xff\xff\xff", 100),
            Err(DecodeError::Corrupt { .. })
        ));
        assert_eq!(
            decode_body(&headers("compress"), b"x", 100),
            Err(DecodeError::Unsupported("compress".into()))
        );
    }
}
