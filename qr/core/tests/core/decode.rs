//! `qr_core::png` checked from the outside: PNG decoded by the `png` crate, QR decoded by
//! `rqrr` (an independent decoder), pixels compared with the module matrix.

use std::io::Cursor;

struct Decoded {
    width: u32,
    height: u32,
    color: png::ColorType,
    depth: png::BitDepth,
    pixels: Vec<u8>,
}

fn decode_png(bytes: &[u8]) -> Decoded {
    let decoder = png::Decoder::new(Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("valid PNG header");
    let mut pixels = vec![0; reader.output_buffer_size().expect("size fits")];
    let frame = reader.next_frame(&mut pixels).expect("valid PNG data");
    pixels.truncate(frame.buffer_size());
    Decoded {
        width: frame.width,
        height: frame.height,
        color: frame.color_type,
        depth: frame.bit_depth,
        pixels,
    }
}

fn decode_qr(img: &Decoded) -> String {
    let w = img.width as usize;
    let mut prepared =
        rqrr::PreparedImage::prepare_from_greyscale(w, img.height as usize, |x, y| {
            img.pixels[y * w + x]
        });
    let grids = prepared.detect_grids();
    assert_eq!(grids.len(), 1, "exactly one QR code in the image");
    let (_meta, content) = grids[0].decode().expect("rqrr decodes the symbol");
    content
}

/// Encodes, checks the PNG format and geometry, decodes, and returns the decoded text.
fn round_trip(text: &str) -> String {
    let bytes = qr_core::png(text).expect("encodes");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let img = decode_png(&bytes);
    assert_eq!(img.color, png::ColorType::Grayscale, "colour type 0");
    assert_eq!(img.depth, png::BitDepth::Eight);

    let modules = qr_core::modules(text).unwrap();
    let side = (modules.size() + 2 * qr_core::MARGIN_MODULES) * qr_core::PIXELS_PER_MODULE;
    assert_eq!((img.width as usize, img.height as usize), (side, side));
    // Every pixel is the module it belongs to (quiet zone light), nothing else.
    let scale = qr_core::PIXELS_PER_MODULE;
    for y in 0..side {
        for x in 0..side {
            let (mx, my) = (x / scale, y / scale);
            let dark = mx >= qr_core::MARGIN_MODULES
                && my >= qr_core::MARGIN_MODULES
                && modules.is_dark(mx - qr_core::MARGIN_MODULES, my - qr_core::MARGIN_MODULES);
            let want = if dark { 0 } else { 255 };
            assert_eq!(img.pixels[y * side + x], want, "pixel ({x},{y})");
        }
    }
    decode_qr(&img)
}

#[test]
fn ascii_url_round_trips() {
    let text = "https://example.com/qrcode?text=hello+world&n=42";
    assert_eq!(round_trip(text), text);
}

#[test]
fn non_ascii_round_trips_as_utf8() {
    let text = "zażółć gęślą jaźń 🚀";
    assert_eq!(round_trip(text), text);
}

#[test]
fn exactly_512_bytes_round_trips() {
    let text = "0123456789abcdef".repeat(32);
    assert_eq!(text.len(), qr_core::MAX_TEXT_BYTES);
    assert_eq!(round_trip(&text), text);
    // 512 bytes of 4-byte characters: 128 chars, the limit counts bytes.
    let rockets = "🚀".repeat(128);
    assert_eq!(round_trip(&rockets), rockets);
}

#[test]
fn single_byte_round_trips() {
    assert_eq!(round_trip("a"), "a");
}

#[test]
fn empty_is_an_error() {
    assert_eq!(qr_core::png(""), Err(qr_core::QrError::Empty));
}

#[test]
fn byte_513_is_an_error() {
    let text = "a".repeat(513);
    assert_eq!(
        qr_core::png(&text),
        Err(qr_core::QrError::TooLong { len: 513 })
    );
    // 511 ASCII + one 2-byte char = 513 bytes but only 512 chars.
    let text = format!("{}ż", "a".repeat(511));
    assert_eq!(
        qr_core::png(&text),
        Err(qr_core::QrError::TooLong { len: 513 })
    );
}

#[test]
fn same_text_gives_identical_bytes() {
    let a = qr_core::png("repeatable").unwrap();
    let b = qr_core::png("repeatable").unwrap();
    assert_eq!(a, b);
}

#[test]
fn version_is_the_smallest_that_fits_at_level_m() {
    // Cross-check with qrcodegen's own version choice (byte mode, level M, no boost).
    for len in [1usize, 14, 15, 26, 27, 100, 331, 332, 512] {
        let text = "q".repeat(len);
        let segs = [qrcodegen::QrSegment::make_bytes(text.as_bytes())];
        let reference = qrcodegen::QrCode::encode_segments_advanced(
            &segs,
            qrcodegen::QrCodeEcc::Medium,
            qrcodegen::Version::MIN,
            qrcodegen::Version::MAX,
            None,
            false,
        )
        .unwrap();
        assert_eq!(
            qr_core::modules(&text).unwrap().version(),
            reference.version().value(),
            "len {len}"
        );
    }
}
