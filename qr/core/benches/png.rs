//! Criterion benches (see below).
//!
//! Benches of the QR ladder's hot function and of the choices behind it:
//! `qr_core::png` itself, before and after issue #27 in the same run (`png/before/*` is
//! main's render at 9491f26, kept in `baseline/`; both give the same bytes, checked first),
//! the candidate encoders (module matrix only), and PNG filter × deflate settings on the
//! same matrix (the PNG size of each is printed once).
//!
//! Run: `CARGO_TARGET_DIR=... cargo bench -p qr-core --bench png`; only the function,
//! before and after: `cargo bench -p qr-core --bench png -- '^png/'`.

mod baseline;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// (label, text): a typical URL, a medium text, the 512-byte maximum.
fn texts() -> Vec<(&'static str, String)> {
    vec![
        ("url37", "https://example.com/some/path?q=hello".to_string()),
        (
            "text100",
            "The quick brown fox jumps over the lazy dog. ".repeat(3)[..100].to_string(),
        ),
        ("max512", "0123456789abcdef".repeat(32)),
    ]
}

/// The ladder's texts (qr/node/bench/texts.js and scripts/bench-serve.sh's URL).
fn ladder_texts() -> Vec<(&'static str, String)> {
    let utf8 = "Zażółć gęślą jaźń — 日本語のテキスト — ";
    let pad = 96 - utf8.chars().count();
    vec![
        ("hello11", "hello world".to_string()),
        (
            "url43",
            "https://example.com/orders/12345?ref=qr&x=1".to_string(),
        ),
        (
            "url52",
            "https://example.com/some/fairly/long/path?with=query".to_string(),
        ),
        ("utf8_96", format!("{utf8}{}", "·".repeat(pad))),
        ("k256", "k".repeat(256)),
        ("z512", "z".repeat(512)),
    ]
}

fn bench_png(c: &mut Criterion) {
    let mut g = c.benchmark_group("png");
    let texts = ladder_texts().into_iter().chain(texts());
    for (label, text) in texts {
        let after = qr_core::png(&text).unwrap();
        let before = baseline::png(&text).unwrap();
        assert!(after == before, "{label}: the two renders differ");
        // Alternating within one run: before and after of a text back to back.
        g.bench_with_input(BenchmarkId::new("before", label), &text, |b, t| {
            b.iter(|| baseline::png(black_box(t)).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("after", label), &text, |b, t| {
            b.iter(|| qr_core::png(black_box(t)).unwrap())
        });
    }
    g.finish();
}

fn bench_encoders(c: &mut Criterion) {
    let mut g = c.benchmark_group("encoder");
    for (label, text) in texts() {
        let bytes = text.as_bytes();
        g.bench_with_input(BenchmarkId::new("qr_core_modules", label), &text, |b, t| {
            b.iter(|| qr_core::modules(black_box(t)).unwrap())
        });
        g.bench_with_input(
            BenchmarkId::new("qrcodegen_auto_mask", label),
            &bytes,
            |b, t| {
                b.iter(|| {
                    let segs = [qrcodegen::QrSegment::make_bytes(black_box(t))];
                    qrcodegen::QrCode::encode_segments_advanced(
                        &segs,
                        qrcodegen::QrCodeEcc::Medium,
                        qrcodegen::Version::MIN,
                        qrcodegen::Version::MAX,
                        None,
                        false,
                    )
                    .unwrap()
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("fast_qr", label), &bytes, |b, t| {
            b.iter(|| {
                fast_qr::QRBuilder::new(black_box(*t))
                    .mode(fast_qr::Mode::Byte)
                    .ecl(fast_qr::ECL::M)
                    .build()
                    .unwrap()
                    .size
            })
        });
        g.bench_with_input(BenchmarkId::new("qrcode", label), &bytes, |b, t| {
            b.iter(|| {
                // Byte mode forced, smallest version at M (what the contract needs).
                (1..=40)
                    .find_map(|v| {
                        let mut bits = qrcode::bits::Bits::new(qrcode::Version::Normal(v));
                        (bits.push_byte_data(black_box(t)).is_ok()
                            && bits.push_terminator(qrcode::EcLevel::M).is_ok())
                        .then(|| qrcode::QrCode::with_bits(bits, qrcode::EcLevel::M).unwrap())
                    })
                    .unwrap()
                    .width()
            })
        });
    }
    g.finish();
}

/// The pixels qr_core draws, rendered with another filter/deflate (same IHDR).
fn render(m: &qr_core::Modules, filter: png::Filter, deflate: png::DeflateCompression) -> Vec<u8> {
    let side = qr_core::image_side(m.size());
    let (scale, margin) = (qr_core::PIXELS_PER_MODULE, qr_core::MARGIN_MODULES);
    let mut img = vec![255u8; side * side];
    for y in 0..side {
        for x in 0..side {
            let (mx, my) = (x / scale, y / scale);
            if mx >= margin && my >= margin && m.is_dark(mx - margin, my - margin) {
                img[y * side + x] = 0;
            }
        }
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, side as u32, side as u32);
    enc.set_color(png::ColorType::Grayscale);
    enc.set_depth(png::BitDepth::Eight);
    // Deflate first: `set_compression` would reset the filter.
    enc.set_deflate_compression(deflate);
    enc.set_filter(filter);
    let mut w = enc.write_header().unwrap();
    w.write_image_data(&img).unwrap();
    w.finish().unwrap();
    out
}

fn bench_png_settings(c: &mut Criterion) {
    let filters = [
        ("none", png::Filter::NoFilter),
        ("sub", png::Filter::Sub),
        ("up", png::Filter::Up),
        ("adaptive", png::Filter::Adaptive),
    ];
    let compressions = [
        ("fdeflate", png::DeflateCompression::FdeflateUltraFast),
        ("zlib1", png::DeflateCompression::Level(1)),
        ("zlib6", png::DeflateCompression::Level(6)),
    ];
    let mut g = c.benchmark_group("png_settings");
    for (label, text) in texts() {
        let m = qr_core::modules(&text).unwrap();
        for (fname, filter) in filters {
            for (cname, compression) in compressions {
                let id = format!("{fname}+{cname}/{label}");
                eprintln!("size {id}: {} bytes", render(&m, filter, compression).len());
                g.bench_function(&id, |b| {
                    b.iter(|| render(black_box(&m), filter, compression))
                });
            }
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the box is shared; spread is reported by criterion.
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = bench_png, bench_encoders, bench_png_settings
}
criterion_main!(benches);
