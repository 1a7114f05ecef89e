//! Module matrix → grayscale PNG bytes, with the fixed scale, margin, filter and deflate.
//!
//! The bytes are exactly those the png crate 0.18 wrote for the same pixels with
//! `Filter::Adaptive` and `DeflateCompression::FdeflateUltraFast` (the contract; the golden
//! corpus and the tests against the png crate check it), but the work follows the image's
//! structure instead of its pixels:
//!
//! * **A pixel row per module row.** Each module row is `SCALE` identical pixel rows. The
//!   png crate's adaptive filter tries Up first and stops at a zero cost, so rows 2..=4 of
//!   a module row (and a row equal to the one above) are always filter Up, all zeros: one
//!   deflate bit string, recorded once per image and appended again ([`deflate::Recorded`]),
//!   with its Adler-32 step in closed form.
//! * **Filter costs on bit lines.** In the first pixel row of a module row every pixel is
//!   0 or 255 and depends only on its module, its left neighbour and the two above, so the
//!   four filters' costs (the png crate's sum of `|byte as i8|`) are a few popcounts of the
//!   row and the row above as bits ([`costs`]), and the chosen filter's bytes are written
//!   four at a time from a table of what each filter makes of a module ([`MODULE_BYTES`]).
//! * **No image buffer**, no copies: the stream is written straight into the PNG, the
//!   chunk's length patched in afterwards; CRC-32 by `crc32fast` (the png crate's), the
//!   zlib stream's Adler-32 from the sums of what each row was written with ([`Adler`]).

use crate::deflate::{self, BitWriter, Recorded};
use crate::symbol::line_mask;
use crate::{MARGIN_MODULES, PIXELS_PER_MODULE, QrError};

/// Side of the image in pixels for a symbol of `modules` modules.
pub(crate) fn image_side(modules: usize) -> usize {
    (modules + 2 * MARGIN_MODULES) * PIXELS_PER_MODULE
}

/// Widest line of modules (symbol and quiet zone) rendered: one bit line holds a row and the
/// dark column the png crate's filters see left of it. 512 bytes need 89 + 8 modules.
const MAX_WIDTH: usize = 127;
/// Bytes of the longest filtered pixel row: the filter type byte, then the pixels.
const MAX_ROW_BYTES: usize = MAX_WIDTH * PIXELS_PER_MODULE + 1;

const SIGNATURE: [u8; 8] = *b"\x89PNG\r\n\x1a\n";
const IEND: [u8; 12] = [0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xAE, 0x42, 0x60, 0x82];

/// The PNG row filters the adaptive choice tries, in the png crate's order (its ties go to
/// the later one); the value is the filter type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    Up = 2,
    Sub = 1,
    Avg = 3,
    Paeth = 4,
}

const FILTERS: [Filter; 4] = [Filter::Up, Filter::Sub, Filter::Avg, Filter::Paeth];

/// A module's pixel value: dark 0, light 255.
const fn pixel(dark: bool) -> u8 {
    if dark { 0 } else { 255 }
}

/// What `filter` writes for pixel `x` with left `a`, above `b`, upper-left `c` (the png
/// crate's formulas; Paeth as in the PNG specification, which the png crate's variants equal).
const fn filtered(filter: Filter, x: u8, a: u8, b: u8, c: u8) -> u8 {
    match filter {
        Filter::Up => x.wrapping_sub(b),
        Filter::Sub => x.wrapping_sub(a),
        Filter::Avg => x.wrapping_sub(((a as u16 + b as u16) / 2) as u8),
        Filter::Paeth => {
            let p = a as i16 + b as i16 - c as i16;
            let (pa, pb, pc) = (
                (p - a as i16).abs(),
                (p - b as i16).abs(),
                (p - c as i16).abs(),
            );
            let predictor = if pa <= pb && pa <= pc {
                a
            } else if pb <= pc {
                b
            } else {
                c
            };
            x.wrapping_sub(predictor)
        }
    }
}

/// Per filter (in [`FILTERS`] order) and per module neighbourhood, the module's four filtered
/// bytes, little-endian. The index is `x << 3 | a << 2 | b << 1 | c` (1 = dark) for the
/// module `x`, its left neighbour `a`, the module above `b` and above-left `c`: its first
/// pixel sees those four; its other three see itself on the left and the module above twice.
const MODULE_BYTES: [[u32; 16]; 4] = module_bytes();

const fn module_bytes() -> [[u32; 16]; 4] {
    let mut table = [[0u32; 16]; 4];
    let mut f = 0;
    while f < 4 {
        let mut i = 0;
        while i < 16 {
            let [x, a, b, c] = [i & 8 != 0, i & 4 != 0, i & 2 != 0, i & 1 != 0];
            let (x, a, b, c) = (pixel(x), pixel(a), pixel(b), pixel(c));
            let first = filtered(FILTERS[f], x, a, b, c);
            let rest = filtered(FILTERS[f], x, x, b, b);
            table[f][i] = u32::from_le_bytes([first, rest, rest, rest]);
            i += 1;
        }
        f += 1;
    }
    table
}

/// One line of modules as the filters see it: bit `j` of `line` is module `j` (1 = dark),
/// bit `j` of `left` is module `j - 1`, and bit 0 of `left` is the dark (zero) pixel the
/// png crate puts left of every row.
#[derive(Debug, Clone, Copy)]
struct Line {
    line: u128,
    left: u128,
}

impl Line {
    fn new(line: u128, width: usize) -> Line {
        Line {
            line,
            left: ((line << 1) | 1) & line_mask(width),
        }
    }
}

/// The png crate's adaptive cost (sum of `|byte as i8|` over the row's pixels) of each
/// filter in [`FILTERS`] order, for the first pixel row of module line `cur` under `prev`.
/// Each is the table's per-module cost summed, grouped by popcount (tests check both agree):
/// * Up: every pixel of a module that differs from the one above is ±255, cost 1.
/// * Sub: only a module's first pixel can differ from its left, cost 1.
/// * Avg: where left and above agree, as Sub; where they differ the average is 127 and a
///   dark pixel costs 127, a light one 128; the other three pixels see `x` and `b`.
/// * Paeth: the predictor is above where left equals upper-left and above differs from
///   it, else left; three of four pixels predict themselves.
fn costs(cur: Line, prev: Line) -> [u32; 4] {
    let light = !cur.line;
    let vs_above = cur.line ^ prev.line;
    let vs_left = cur.line ^ cur.left;
    let left_vs_above = cur.left ^ prev.line;
    let up = 4 * vs_above.count_ones();
    let sub = vs_left.count_ones();
    let avg = (!left_vs_above & vs_left).count_ones()
        + 127 * left_vs_above.count_ones()
        + (left_vs_above & light).count_ones()
        + 3 * (127 * vs_above.count_ones() + (vs_above & light).count_ones());
    let above_pred = !(cur.left ^ prev.left) & (prev.line ^ prev.left);
    let predicted = (above_pred & prev.line) | (!above_pred & cur.left);
    let paeth = (cur.line ^ predicted).count_ones();
    [up, sub, avg, paeth]
}

/// The png crate's adaptive choice: the lowest cost, ties to the later filter, and the
/// first filter of cost 0 at once.
fn choose(costs: [u32; 4]) -> usize {
    let mut best = (u32::MAX, 0);
    for (i, &cost) in costs.iter().enumerate() {
        if cost <= best.0 {
            best = (cost, i);
            if cost == 0 {
                break;
            }
        }
    }
    best.1
}

/// Adler-32 arithmetic (RFC 1950) over rows of `len` bytes, each row given as its byte sum
/// and position-weighted sum, so a row's checksum comes from what was written into it.
#[derive(Debug, Clone, Copy)]
struct Adler {
    a: u64,
    b: u64,
}

const ADLER_MOD: u64 = 65_521;

impl Adler {
    /// After a row of `len` bytes whose sum is `sum` and whose `Σ (len - i) · byte[i]` is
    /// `weighted`: `a += sum`, `b += len · a + weighted`.
    fn row(&mut self, len: usize, sum: u64, weighted: u64) {
        self.b = (self.b + len as u64 * self.a + weighted) % ADLER_MOD;
        self.a = (self.a + sum) % ADLER_MOD;
    }

    /// After `count` rows of `len` bytes that are the filter byte 2 and zeros.
    fn zero_rows(&mut self, len: usize, count: usize) {
        for _ in 0..count {
            self.row(len, 2, 2 * len as u64);
        }
    }

    fn value(self) -> u32 {
        (self.b << 16 | self.a) as u32
    }
}

/// Writes the filtered first pixel row of `cur` (filter type byte first) into `row` and
/// returns its byte sum and weighted sum for [`Adler::row`].
fn filter_row(row: &mut [u8], filter: usize, cur: Line, prev: Line) -> (u64, u64) {
    let len = row.len() as u64;
    let kind = FILTERS[filter] as u8;
    row[0] = kind;
    row[1..].fill(0);
    let (mut sum, mut weighted) = (u64::from(kind), len * u64::from(kind));
    let width = (row.len() - 1) / PIXELS_PER_MODULE;
    let valid = line_mask(width);
    let pick = |line: u128, dark: bool| if dark { line } else { !line };
    // Modules by neighbourhood: one mask per table entry. A module equal to its left, upper
    // and upper-left neighbours (entries 0 and 15) is four zeros under every filter.
    for (index, &bytes) in MODULE_BYTES[filter].iter().enumerate().take(15).skip(1) {
        if bytes == 0 {
            continue;
        }
        let mut modules = valid
            & pick(cur.line, index & 8 != 0)
            & pick(cur.left, index & 4 != 0)
            & pick(prev.line, index & 2 != 0)
            & pick(prev.left, index & 1 != 0);
        let (mut count, mut positions) = (0u64, 0u64);
        while modules != 0 {
            let j = modules.trailing_zeros() as usize;
            modules &= modules - 1;
            let at = 1 + j * PIXELS_PER_MODULE;
            row[at..at + PIXELS_PER_MODULE].copy_from_slice(&bytes.to_le_bytes());
            count += 1;
            positions += j as u64;
        }
        // Bytes [first, rest, rest, rest] at 1 + 4j: weights len - 1 - 4j, then -1, -2, -3.
        let (first, rest) = (u64::from(bytes & 0xff), u64::from(bytes >> 8 & 0xff));
        sum += count * (first + 3 * rest);
        weighted += count * ((len - 1) * first + (3 * len - 9) * rest)
            - positions * (4 * first + 12 * rest);
    }
    (sum, weighted)
}

/// The image's zlib stream (every pixel row filtered and deflated) appended to `out`.
fn write_image(out: &mut Vec<u8>, rows: &[u128], width: usize) {
    let row_len = width * PIXELS_PER_MODULE + 1;
    let mut buf = [0u8; MAX_ROW_BYTES];
    let row = &mut buf[..row_len];
    row[0] = Filter::Up as u8;
    let mut same = Recorded::default();
    deflate::row(&mut same, row);

    let mut w = BitWriter::start(out);
    let mut adler = Adler { a: 1, b: 0 };
    // The png crate filters the first row against a row of zeros: all dark.
    let mut prev = Line::new(line_mask(width), width);
    let mut pending = 0; // rows equal to the one above, not yet written
    for y in 0..width {
        let cur = match y.checked_sub(MARGIN_MODULES) {
            Some(y) if y < rows.len() => Line::new(rows[y] << MARGIN_MODULES, width),
            _ => Line::new(0, width),
        };
        if cur.line != prev.line {
            for _ in 0..pending {
                same.replay(&mut w);
            }
            adler.zero_rows(row_len, pending);
            pending = 0;
            let filter = choose(costs(cur, prev));
            let (sum, weighted) = filter_row(row, filter, cur, prev);
            deflate::row(&mut w, row);
            adler.row(row_len, sum, weighted);
        } else {
            pending += 1;
        }
        pending += PIXELS_PER_MODULE - 1;
        prev = cur;
    }
    for _ in 0..pending {
        same.replay(&mut w);
    }
    adler.zero_rows(row_len, pending);
    w.finish(adler.value());
}

/// Appends a chunk whose data `data` appends; writes its length and CRC around it.
fn chunk(
    out: &mut Vec<u8>,
    kind: &[u8; 4],
    data: impl FnOnce(&mut Vec<u8>),
) -> Result<(), QrError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(kind);
    data(out);
    let len = u32::try_from(out.len() - start - 8)
        .map_err(|_| QrError::Encode("chunk too large".into()))?;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    let crc = crc32fast::hash(&out[start + 4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// What fdeflate's stored-only compressor would write for `raw` bytes: the png crate
/// writes that instead when the compressed stream is longer (never for a QR code: a module
/// row's first pixel row costs at most 12 bits a byte, the other three a few bits in all).
fn stored_size(raw: usize) -> usize {
    const BLOCK: usize = u16::MAX as usize;
    (raw.saturating_sub(1) / BLOCK) * (BLOCK + 5) + (raw % BLOCK + 5) + 6
}

/// Encodes the symbol whose rows are `rows` (bit `x` of `rows[y]`: module `x`, `y`, 1 =
/// dark) as the contract's PNG.
pub(crate) fn encode_png(rows: &[u128]) -> Result<Vec<u8>, QrError> {
    let width = rows.len() + 2 * MARGIN_MODULES;
    if width > MAX_WIDTH {
        return Err(QrError::Encode(format!(
            "{width} modules wide is too wide to render"
        )));
    }
    let side = width * PIXELS_PER_MODULE;
    let side32 = u32::try_from(side).expect("at most 508 pixels");
    // A well compressed body stays far below the raw size; avoid regrowth.
    let mut out = Vec::with_capacity(1024 + side * side / 16);
    out.extend_from_slice(&SIGNATURE);
    chunk(&mut out, b"IHDR", |o| {
        o.extend_from_slice(&side32.to_be_bytes());
        o.extend_from_slice(&side32.to_be_bytes());
        // Bit depth 8, colour type 0 (grayscale), deflate, adaptive filtering, no interlace.
        o.extend_from_slice(&[8, 0, 0, 0, 0]);
    })?;
    let idat = out.len();
    chunk(&mut out, b"IDAT", |o| write_image(o, rows, width))?;
    let compressed = out.len() - idat - 12;
    if compressed > stored_size((side + 1) * side) {
        return Err(QrError::Encode("deflate larger than stored".into()));
    }
    out.extend_from_slice(&IEND);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Modules;

    /// The render as it was: pixels drawn one by one, then the png crate with the
    /// contract's settings. The oracle of [`encode_png`].
    fn png_crate(m: &Modules) -> Vec<u8> {
        let side = image_side(m.size());
        let mut img = vec![255u8; side * side];
        for y in 0..side {
            for x in 0..side {
                let (mx, my) = (x / PIXELS_PER_MODULE, y / PIXELS_PER_MODULE);
                if mx >= MARGIN_MODULES
                    && my >= MARGIN_MODULES
                    && m.is_dark(mx - MARGIN_MODULES, my - MARGIN_MODULES)
                {
                    img[y * side + x] = 0;
                }
            }
        }
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, side as u32, side as u32);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        // Deflate first, filter second: `set_compression` would also reset the filter.
        encoder.set_deflate_compression(png::DeflateCompression::FdeflateUltraFast);
        encoder.set_filter(png::Filter::Adaptive);
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(&img).unwrap();
        writer.finish().unwrap();
        out
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// A line of `n` modules, dark with probability `dark` in 1/8ths.
        fn line(&mut self, n: usize, dark: u64) -> u128 {
            (0..n).fold(0, |l, x| l | u128::from(self.next() % 8 < dark) << x)
        }
    }

    /// Squares of random modules of every renderable size, random densities and repeated
    /// rows (the filter choice sees every neighbourhood), are the png crate's bytes.
    #[test]
    fn random_modules_render_to_the_png_crates_bytes() {
        let mut rng = Rng(0x5851_f42d_4c95_7f2d);
        for size in (1..=MAX_WIDTH - 2 * MARGIN_MODULES).chain([21, 25, 29, 33, 89, 119]) {
            let dark = rng.next() % 9;
            let mut rows: Vec<u128> = Vec::new();
            for _ in 0..size {
                let row = match (rows.last(), rng.next() % 4) {
                    (Some(&last), 0) => last,
                    _ => rng.line(size, dark),
                };
                rows.push(row);
            }
            let m = Modules::from_rows(rows);
            assert_eq!(encode_png(m.rows()).unwrap(), png_crate(&m), "size {size}");
        }
    }

    /// The popcount costs equal the table's bytes summed module by module.
    #[test]
    fn bit_line_costs_equal_the_bytes_costs() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..3000 {
            let width = 1 + (rng.next() % MAX_WIDTH as u64) as usize;
            let dark = rng.next() % 9;
            let cur = Line::new(rng.line(width, dark), width);
            let prev_dark = rng.next() % 9;
            let prev = Line::new(rng.line(width, prev_dark), width);
            let mut want = [0u32; 4];
            let mut row = [0u8; MAX_ROW_BYTES];
            for (f, cost) in want.iter_mut().enumerate() {
                let _ = filter_row(&mut row[..1 + width * PIXELS_PER_MODULE], f, cur, prev);
                let pixels = &row[1..1 + width * PIXELS_PER_MODULE];
                *cost = pixels
                    .iter()
                    .map(|&b| u32::from((b as i8).unsigned_abs()))
                    .sum();
            }
            assert_eq!(costs(cur, prev), want, "width {width}");
        }
    }

    /// The sums `filter_row` returns and the zero rows' closed form make the Adler-32 of
    /// the bytes, as `simd-adler32` (fdeflate's) computes it.
    #[test]
    fn adler_from_row_sums_equals_adler_of_the_bytes() {
        let mut rng = Rng(0x1405_7b7e_f767_814f);
        for _ in 0..500 {
            let width = 1 + (rng.next() % MAX_WIDTH as u64) as usize;
            let len = 1 + width * PIXELS_PER_MODULE;
            let mut row = vec![0u8; len];
            let mut ours = Adler {
                a: rng.next() % ADLER_MOD,
                b: rng.next() % ADLER_MOD,
            };
            let mut theirs = simd_adler32::Adler32::from_checksum(ours.value());
            for _ in 0..3 {
                let (d1, d2) = (rng.next() % 9, rng.next() % 9);
                let cur = Line::new(rng.line(width, d1), width);
                let prev = Line::new(rng.line(width, d2), width);
                let filter = (rng.next() % 4) as usize;
                let (sum, weighted) = filter_row(&mut row, filter, cur, prev);
                ours.row(len, sum, weighted);
                theirs.write(&row);
                let zeros = (rng.next() % 16) as usize;
                ours.zero_rows(len, zeros);
                let mut zero = vec![0u8; len];
                zero[0] = 2;
                for _ in 0..zeros {
                    theirs.write(&zero);
                }
                assert_eq!(ours.value(), theirs.finish(), "width {width}");
            }
        }
    }

    /// The stored-size fallback of the png crate can never be taken: even with every byte
    /// of every module row's first pixel row at the longest code, the stream is shorter.
    #[test]
    fn deflate_is_always_shorter_than_stored() {
        for width in 1 + 2 * MARGIN_MODULES..=MAX_WIDTH {
            let side = width * PIXELS_PER_MODULE;
            let mut zero_row = Recorded::default();
            let mut row = vec![0u8; side + 1];
            row[0] = 2;
            deflate::row(&mut zero_row, &row);
            // Block header tail, every row as an all-zero row, plus one first row per module
            // row at 12 bits a byte, end of block; zlib and block header, Adler-32.
            let bits = 5
                + side * zero_row.bits()
                + width * (side + 1) * deflate::MAX_CODE_BITS
                + deflate::MAX_CODE_BITS;
            let worst = 53 + bits.div_ceil(8) + 4;
            assert!(worst < stored_size((side + 1) * side), "width {width}");
        }
    }

    #[test]
    fn too_wide_is_an_error_not_a_panic() {
        let m = Modules::from_rows(vec![0; MAX_WIDTH - 2 * MARGIN_MODULES + 1]);
        assert!(matches!(encode_png(m.rows()), Err(QrError::Encode(_))));
    }
}
