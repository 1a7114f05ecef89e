//! The QR ladder's one hot function: text to PNG bytes, with fixed output parameters.
//!
//! Every tier of the ladder (CLI, Wasm, napi addon, Rust server) calls [`png`] and
//! nothing else, so all Rust tiers return byte-identical PNGs for the same text, and the
//! QR modules are identical to tier 0 (npm `qrcode`, configured as in `docs/qr.md`).
//!
//! This crate must NOT do I/O, logging, allocation of shared/static buffers, or anything
//! that differs between calls with the same text: it is a pure function.
//!
//! # Output contract
//!
//! | what | value |
//! |---|---|
//! | input | UTF-8 text, 1..=[`MAX_TEXT_BYTES`] (512) bytes |
//! | mode | one byte-mode segment holding the UTF-8 bytes, no ECI |
//! | error correction | level M, never boosted |
//! | version | the smallest (1..=40) that holds the bytes at level M |
//! | mask | lowest penalty by npm `qrcode`'s rule (N1+N2+N3+N4), ties → lowest mask number |
//! | scale | [`PIXELS_PER_MODULE`] (4) pixels per module |
//! | quiet zone | [`MARGIN_MODULES`] (4) modules on each side |
//! | image | `(modules + 8) * 4` pixels square, 8-bit grayscale (colour type 0), 0 = dark, 255 = light |
//! | PNG filter / deflate | the bytes the `png` crate 0.18 writes with `Filter::Adaptive` (per row) and `DeflateCompression::FdeflateUltraFast` |
//!
//! [`PARAMS`] holds the same values for code that wants to print or check them.
//!
//! # Choices, measured (details and commands in `docs/qr.md`)
//!
//! * **Encoder**: the codewords (version, byte segment, Reed–Solomon, interleaving) and
//!   the unmasked symbol are computed here as qrcodegen 1.8 (Nayuki's reference) computes
//!   them, then the mask is our own choice. qrcodegen was the encoder until issue #27:
//!   with a fixed mask it was cheap next to scoring eight masks module by module, but
//!   once the scoring was bit lines its `Vec<bool>` bit buffers, shift-and-add GF(256)
//!   multiply and per-module loops were a third of the call. It stays the tests' oracle:
//!   every mask's candidate of every version 1..=27 equals qrcodegen's drawing. Measured
//!   earlier with the library's own mask choice, per call: `fast_qr` 50 µs / 423 µs
//!   (37 B / 512 B), `qrcodegen` 93 µs / 1057 µs, `qrcode` 247 µs / 3313 µs; only ours
//!   reproduces tier 0's mask choice (on 309 test texts the library choices matched npm
//!   `qrcode` in 54 % / 71 % / 66 % of cases).
//! * **Mask scoring on bit lines**: each candidate's rows and columns are machine words
//!   (`u64` up to 64 modules, else `u128`) and the penalty is shifts, ANDs and popcounts
//!   (POPCNT chosen at run time where the CPU has it); module by module it was 58 % of
//!   tier 4's time. The module-by-module rule stays as the tests' oracle (`docs/qr.md`).
//! * **Filter and deflate**: adaptive filter + fdeflate. zlib (levels 1 and 6) costs
//!   4–10x the render time for at most 2x smaller files; among the fdeflate runs,
//!   adaptive is about as fast as `Up` and 25–30 % smaller (37-byte URL: 1313 vs 1725
//!   bytes; 512 bytes: 8117 vs 11764), `None`/`Sub` are 2–5x larger. Table and
//!   commands in `docs/qr.md`.
//! * **The PNG written here, not by the png crate** (issue #27): the png crate filters and
//!   deflates every pixel of an image that is 4x4 copies of each module. The same bytes
//!   come from one filter choice per module row on bit lines, the three repeated pixel
//!   rows appended as recorded bits, and fdeflate's compressor reproduced bit for bit
//!   (`render.rs`, `deflate.rs`; the png crate and fdeflate are the tests' oracles, and a
//!   golden corpus of 834 texts pins today's bytes). With the encoder above: 2.6–4.2x
//!   faster per call than main's png crate path on the ladder's texts, three runs (`docs/qr.md`).
//!
//! # Example
//!
//! ```
//! let png = qr_core::png("https://example.com/").unwrap();
//! assert_eq!(&png[1..4], b"PNG");
//! assert!(matches!(qr_core::png(""), Err(qr_core::QrError::Empty)));
//! ```

mod codewords;
mod deflate;
mod render;
mod symbol;

pub use symbol::Modules;

/// Longest accepted text, in UTF-8 bytes (not characters, not UTF-16 units).
pub const MAX_TEXT_BYTES: usize = 512;
/// Pixels per module edge.
pub const PIXELS_PER_MODULE: usize = 4;
/// Quiet zone width in modules, on each of the four sides.
pub const MARGIN_MODULES: usize = 4;

/// The fixed output parameters as one value, for printing or checking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Params {
    /// Error-correction level letter (`'M'`).
    pub ec_level: char,
    /// Pixels per module edge.
    pub scale: usize,
    /// Quiet zone in modules per side.
    pub margin: usize,
    /// PNG colour type (0 = grayscale).
    pub png_color_type: u8,
    /// PNG bit depth.
    pub png_bit_depth: u8,
    /// Longest text in UTF-8 bytes.
    pub max_text_bytes: usize,
}

/// The one parameter set every tier uses.
pub const PARAMS: Params = Params {
    ec_level: 'M',
    scale: PIXELS_PER_MODULE,
    margin: MARGIN_MODULES,
    png_color_type: 0,
    png_bit_depth: 8,
    max_text_bytes: MAX_TEXT_BYTES,
};

/// Why a text could not be turned into a PNG.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum QrError {
    /// The text is empty.
    #[error("empty")]
    Empty,
    /// The text is longer than [`MAX_TEXT_BYTES`] UTF-8 bytes.
    #[error("too_long")]
    TooLong {
        /// The text's length in UTF-8 bytes.
        len: usize,
    },
    /// The encoder or the PNG writer failed (not expected for valid input).
    #[error("encode: {0}")]
    Encode(String),
}

/// Checks the length rules shared by every tier.
fn check(text: &str) -> Result<(), QrError> {
    match text.len() {
        0 => Err(QrError::Empty),
        len if len > MAX_TEXT_BYTES => Err(QrError::TooLong { len }),
        _ => Ok(()),
    }
}

/// The QR module matrix for `text` (no quiet zone), as drawn into the PNG.
///
/// # Errors
/// [`QrError::Empty`], [`QrError::TooLong`], or [`QrError::Encode`].
pub fn modules(text: &str) -> Result<Modules, QrError> {
    check(text)?;
    symbol::encode(text)
}

/// Renders `text` as the contract's PNG (see the crate docs).
///
/// # Errors
/// [`QrError::Empty`] for `""`, [`QrError::TooLong`] above [`MAX_TEXT_BYTES`] UTF-8
/// bytes, [`QrError::Encode`] if encoding fails.
pub fn png(text: &str) -> Result<Vec<u8>, QrError> {
    check(text)?;
    render::encode_png(symbol::symbol(text)?.rows())
}

/// Side of the PNG in pixels for a symbol `modules` modules wide.
pub fn image_side(modules: usize) -> usize {
    render::image_side(modules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_rules_count_utf8_bytes() {
        assert_eq!(png(""), Err(QrError::Empty));
        // 128 four-byte characters: 128 UTF-16 pairs, 512 bytes: accepted.
        assert!(png(&"🚀".repeat(128)).is_ok());
        assert_eq!(
            png(&format!("{}a", "🚀".repeat(128))),
            Err(QrError::TooLong { len: 513 })
        );
    }

    #[test]
    fn error_messages_are_the_wire_codes() {
        assert_eq!(QrError::Empty.to_string(), "empty");
        assert_eq!(QrError::TooLong { len: 600 }.to_string(), "too_long");
        assert_eq!(QrError::Encode("x".into()).to_string(), "encode: x");
    }

    #[test]
    fn side_follows_version() {
        let m = modules("hi").unwrap();
        assert_eq!(m.size(), 4 * usize::from(m.version()) + 17);
        assert_eq!(image_side(m.size()), (m.size() + 8) * 4);
    }
}
