//! The render as it was on main at 9491f26, before issue #27 made it faster: qrcodegen
//! encodes with mask 0, the mask is chosen on `u128` bit lines, the pixels are drawn into an
//! image buffer and the png crate filters and deflates it. Kept only for the benches, so the
//! old and the new function are timed in the same run; `benches/png.rs` checks that both
//! give the same bytes before timing them. Not maintained: a frozen copy.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::all)]

use qr_core::{MARGIN_MODULES, PIXELS_PER_MODULE};

#[derive(Debug)]
pub enum QrError {
    Encode(String),
}

/// `qr_core::png` as it was (valid texts only: the length checks are unchanged).
pub fn png(text: &str) -> Result<Vec<u8>, QrError> {
    encode_png(&encode(text)?)
}

use qrcodegen::{DataTooLong, Mask, QrCode, QrCodeEcc, QrSegment, Version};

/// The QR symbol for one text: a square of dark (`true`) and light modules.
///
/// Built by [`modules`](crate::modules); no quiet zone is included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modules {
    size: usize,
    dark: Vec<bool>,
    version: u8,
    mask: u8,
}

impl Modules {
    /// Side length in modules (`4 * version + 17`).
    pub fn size(&self) -> usize {
        self.size
    }

    /// QR version, 1..=40: the smallest one that holds the text at level M in byte mode.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The mask pattern chosen, 0..=7.
    pub fn mask(&self) -> u8 {
        self.mask
    }

    /// Whether the module at column `x`, row `y` is dark. Out-of-range is light.
    pub fn is_dark(&self, x: usize, y: usize) -> bool {
        x < self.size && y < self.size && self.dark[y * self.size + x]
    }
}

fn encode(text: &str) -> Result<Modules, QrError> {
    let segments = [QrSegment::make_bytes(text.as_bytes())];
    let base = QrCode::encode_segments_advanced(
        &segments,
        QrCodeEcc::Medium,
        Version::MIN,
        Version::MAX,
        Some(Mask::new(0)),
        false, // never boost the EC level: tier 0 stays at M too
    )
    .map_err(|e| match e {
        DataTooLong::SegmentTooLong => QrError::Encode("segment too long".into()),
        DataTooLong::DataOverCapacity(need, have) => {
            QrError::Encode(format!("needs {need} bits, version 40-M holds {have}"))
        }
    })?;
    let size = usize::try_from(base.size()).map_err(|_| QrError::Encode("bad size".into()))?;
    let version = base.version().value();
    // 512 bytes need version 18 (89 modules); a line of up to 128 modules is one u128.
    if size > MAX_BITS {
        return Err(QrError::Encode(format!(
            "version {version} is wider than {MAX_BITS} modules"
        )));
    }
    let function = function_map(size, version);
    // Both fit in i32: size <= 128.
    let base = Bits::from_fn(size, |x, y| base.get_module(x as i32, y as i32));
    let data = Bits::from_fn(size, |x, y| !function[y * size + x]);
    // The data modules with mask 0 taken off again.
    let mut unmasked = Bits::from_fn(size, |_, _| false);
    unmasked.assign_masked(&base, 0, &data);

    let mut candidate = base; // a buffer of the right size, overwritten for every mask
    let mut best: Option<(u32, u8)> = None;
    for mask in 0..8u8 {
        candidate.assign_masked(&unmasked, mask, &data);
        format_bits(size, mask, |x, y, v| candidate.set(x, y, v));
        let score = candidate.penalty();
        if best.is_none_or(|(s, _)| score < s) {
            best = Some((score, mask));
        }
    }
    let (_, mask) = best.expect("eight masks scored");
    let mut chosen = candidate;
    chosen.assign_masked(&unmasked, mask, &data);
    format_bits(size, mask, |x, y, v| chosen.set(x, y, v));
    let mut dark = Vec::with_capacity(size * size);
    for y in 0..size {
        dark.extend((0..size).map(|x| chosen.get(x, y)));
    }
    Ok(Modules {
        size,
        dark,
        version,
        mask,
    })
}

/// Widest symbol the bit-line form holds.
const MAX_BITS: usize = 128;

/// A symbol as bits, once by rows and once by columns: bit `x` of `rows[y]` and bit `y` of
/// `cols[x]` are the module at column `x`, row `y` (1 = dark). The penalty's row and column
/// scans are then a few shifts, ANDs and popcounts per line instead of a loop per module
/// (scoring the eight masks module by module was most of the render time).
#[derive(Debug, Clone)]
struct Bits {
    size: usize,
    rows: Vec<u128>,
    cols: Vec<u128>,
}

impl Bits {
    fn from_fn(size: usize, dark: impl Fn(usize, usize) -> bool) -> Bits {
        let mut bits = Bits {
            size,
            rows: vec![0; size],
            cols: vec![0; size],
        };
        for y in 0..size {
            for x in 0..size {
                if dark(x, y) {
                    bits.set(x, y, true);
                }
            }
        }
        bits
    }

    /// Writes `from` with data mask `mask` applied to the modules in `only` (rows and
    /// columns), reusing this buffer: the eight candidates cost no allocation.
    fn assign_masked(&mut self, from: &Bits, mask: u8, only: &Bits) {
        let size = from.size;
        // The 12-module period of the mask, tiled across a whole line (MASK_TILES).
        let tile = |seed: u16| {
            let mut line = 0u128;
            let mut at = 0;
            while at < size {
                line |= u128::from(seed) << at;
                at += 12;
            }
            line & line_mask(size)
        };
        let (row_seeds, col_seeds) = &MASK_TILES[usize::from(mask)];
        let rows = row_seeds.map(tile);
        let cols = col_seeds.map(tile);
        self.size = size;
        self.rows.clear();
        self.cols.clear();
        for (y, (line, only)) in from.rows.iter().zip(&only.rows).enumerate() {
            self.rows.push(line ^ (rows[y % 12] & only));
        }
        for (x, (line, only)) in from.cols.iter().zip(&only.cols).enumerate() {
            self.cols.push(line ^ (cols[x % 12] & only));
        }
    }

    fn set(&mut self, x: usize, y: usize, dark: bool) {
        if dark {
            self.rows[y] |= 1 << x;
            self.cols[x] |= 1 << y;
        } else {
            self.rows[y] &= !(1 << x);
            self.cols[x] &= !(1 << y);
        }
    }

    fn get(&self, x: usize, y: usize) -> bool {
        self.rows[y] >> x & 1 == 1
    }

    /// npm qrcode's mask penalty (`lib/core/mask-pattern.js`, N1 + N2 + N3 + N4) on bit
    /// lines; equal to `penalty_reference`, its module-by-module transcription (the tests'
    /// oracle).
    #[allow(unsafe_code)] // calling the POPCNT build of the same code, after checking the CPU
    fn penalty(&self) -> u32 {
        // Most of the work is counting bits. The x86-64 baseline has no POPCNT instruction
        // (a count is ~15 instructions); every x86-64 CPU since 2008 has it. Same code,
        // chosen at run time: no build flag differs between tiers.
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has POPCNT, checked on the line above.
            return unsafe { self.penalty_popcnt() };
        }
        self.penalty_lines()
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    fn penalty_popcnt(&self) -> u32 {
        self.penalty_lines()
    }

    #[inline(always)]
    fn penalty_lines(&self) -> u32 {
        let size = self.size;
        let mut points = 0u32;
        for &line in self.rows.iter().chain(&self.cols) {
            // N1: a run of L >= 5 equal modules scores 3 + (L - 5). Bit x of `five` says
            // modules x..=x+4 are equal: a run of L has L - 4 such bits in a row, so it
            // scores its `five` bits plus 2 for the first of them.
            let same = !(line ^ (line >> 1)) & line_mask(size - 1);
            let five = same & (same >> 1) & (same >> 2) & (same >> 3);
            points += five.count_ones() + 2 * (five & !(five << 1)).count_ones();
            // N3: 1011101 with four light modules on one side: 11 modules, both ways.
            if size >= FINDER.len() {
                let mut forward = line_mask(size + 1 - FINDER.len());
                let mut backward = forward;
                for (k, &dark) in FINDER.iter().enumerate() {
                    let (d, l) = (line >> k, !line >> k);
                    forward &= if dark { d } else { l };
                    backward &= if FINDER[FINDER.len() - 1 - k] { d } else { l };
                }
                points += 40 * (forward.count_ones() + backward.count_ones());
            }
        }
        // N2: 2x2 blocks of one colour.
        for w in self.rows.windows(2) {
            let (a, b) = (w[0], w[1]);
            let dark = a & b & (a >> 1) & (b >> 1);
            let light = !a & !b & !(a >> 1) & !(b >> 1);
            points += 3 * ((dark | light) & line_mask(size - 1)).count_ones();
        }
        // N4: dark share away from 50 %, JS: |ceil(dark*100/total/5) - 10| * 10. The integer
        // form is exact: a non-integer quotient is at least 1/(5*total) away from an integer.
        let total = (size * size) as u64;
        let dark_count: u64 = self.rows.iter().map(|r| u64::from(r.count_ones())).sum();
        let k = (dark_count * 20).div_ceil(total).abs_diff(10);
        points + (k as u32) * 10
    }
}

/// Per mask, one period of the pattern: `.0[y]` bit `x` and `.1[x]` bit `y` are
/// `mask_bit(mask, y, x)` for `x, y < 12`. Every mask repeats every 12 modules along a row
/// and along a column (periods 2, 3, 4 or 6).
const MASK_TILES: [([u16; 12], [u16; 12]); 8] = mask_tiles();

const fn mask_tiles() -> [([u16; 12], [u16; 12]); 8] {
    let mut tiles = [([0u16; 12], [0u16; 12]); 8];
    let mut mask = 0;
    while mask < 8 {
        let mut y = 0;
        while y < 12 {
            let mut x = 0;
            while x < 12 {
                if mask_bit(mask as u8, y, x) {
                    tiles[mask].0[y] |= 1 << x;
                    tiles[mask].1[x] |= 1 << y;
                }
                x += 1;
            }
            y += 1;
        }
        mask += 1;
    }
    tiles
}

/// N3's finder-like pattern, 1011101 then four light modules, first module first.
const FINDER: [bool; 11] = [
    true, false, true, true, true, false, true, false, false, false, false,
];

/// The low `n` bits set.
fn line_mask(n: usize) -> u128 {
    if n >= 128 {
        u128::MAX
    } else {
        (1u128 << n) - 1
    }
}

/// The ISO 18004 data mask condition for row `i`, column `j` (npm qrcode's `getMaskAt`).
#[allow(clippy::manual_is_multiple_of)] // the formulas as ISO 18004 and npm qrcode write them
const fn mask_bit(mask: u8, i: usize, j: usize) -> bool {
    match mask {
        0 => (i + j) % 2 == 0,
        1 => i % 2 == 0,
        2 => j % 3 == 0,
        3 => (i + j) % 3 == 0,
        4 => (i / 2 + j / 3) % 2 == 0,
        5 => (i * j) % 2 + (i * j) % 3 == 0,
        6 => ((i * j) % 2 + (i * j) % 3) % 2 == 0,
        _ => ((i * j) % 3 + (i + j) % 2) % 2 == 0,
    }
}

/// Which modules are function patterns (finders, separators, timing, alignment,
/// format and version areas, the dark module): masks never touch them.
fn function_map(size: usize, version: u8) -> Vec<bool> {
    let mut f = vec![false; size * size];
    let mut mark = |x: usize, y: usize| f[y * size + x] = true;
    for i in 0..size {
        mark(6, i);
        mark(i, 6);
    }
    // Finders with separators, plus the format areas next to them.
    for y in 0..9 {
        for x in 0..9 {
            mark(x, y);
        }
    }
    for y in 0..9 {
        for x in size - 8..size {
            mark(x, y);
        }
    }
    for y in size - 8..size {
        for x in 0..9 {
            mark(x, y);
        }
    }
    let align = alignment_positions(size, version);
    let n = align.len();
    for (i, &cx) in align.iter().enumerate() {
        for (j, &cy) in align.iter().enumerate() {
            let on_finder = (i == 0 && (j == 0 || j == n - 1)) || (i == n - 1 && j == 0);
            if on_finder {
                continue;
            }
            for y in cy - 2..=cy + 2 {
                for x in cx - 2..=cx + 2 {
                    mark(x, y);
                }
            }
        }
    }
    if version >= 7 {
        for i in 0..18 {
            let a = size - 11 + i % 3;
            let b = i / 3;
            mark(a, b);
            mark(b, a);
        }
    }
    f
}

/// Centre coordinates of the alignment patterns (ISO 18004 Annex E, as computed by qrcodegen).
fn alignment_positions(size: usize, version: u8) -> Vec<usize> {
    if version == 1 {
        return Vec::new();
    }
    let ver = usize::from(version);
    let count = ver / 7 + 2;
    let step = if ver == 32 {
        26
    } else {
        (ver * 4 + count * 2 + 1) / (count * 2 - 2) * 2
    };
    let mut positions: Vec<usize> = (0..count - 1).map(|i| size - 7 - i * step).collect();
    positions.push(6);
    positions.reverse();
    positions
}

/// Both copies of the 15 format bits for level M and `mask`, and the dark module, given to
/// `set(x, y, dark)`.
fn format_bits(size: usize, mask: u8, mut set: impl FnMut(usize, usize, bool)) {
    // Level M's format code is 0b00.
    let data = u32::from(mask);
    let mut rem = data;
    for _ in 0..10 {
        rem = (rem << 1) ^ ((rem >> 9) * 0x537);
    }
    let bits = (data << 10 | rem) ^ 0x5412;
    let bit = |i: usize| (bits >> i) & 1 == 1;
    for i in 0..6 {
        set(8, i, bit(i));
    }
    set(8, 7, bit(6));
    set(8, 8, bit(7));
    set(7, 8, bit(8));
    for i in 9..15 {
        set(14 - i, 8, bit(i));
    }
    for i in 0..8 {
        set(size - 1 - i, 8, bit(i));
    }
    for i in 8..15 {
        set(8, size - 15 + i, bit(i));
    }
    set(8, size - 8, true);
}

/// PNG row filter: chosen by measurement, see the crate docs.
const FILTER: png::Filter = png::Filter::Adaptive;
/// Deflate setting: chosen by measurement, see the crate docs.
const DEFLATE: png::DeflateCompression = png::DeflateCompression::FdeflateUltraFast;

/// Side of the image in pixels for a symbol of `modules` modules.
fn image_side(modules: usize) -> usize {
    (modules + 2 * MARGIN_MODULES) * PIXELS_PER_MODULE
}

/// Raw 8-bit grayscale pixels (0 = dark, 255 = light), row-major, no filter bytes.
fn pixels(m: &Modules) -> Vec<u8> {
    let side = image_side(m.size());
    let mut img = vec![255u8; side * side];
    let mut row = vec![255u8; side];
    for y in 0..m.size() {
        for x in 0..m.size() {
            let v = if m.is_dark(x, y) { 0 } else { 255 };
            let start = (x + MARGIN_MODULES) * PIXELS_PER_MODULE;
            row[start..start + PIXELS_PER_MODULE].fill(v);
        }
        let top = (y + MARGIN_MODULES) * PIXELS_PER_MODULE;
        for r in top..top + PIXELS_PER_MODULE {
            img[r * side..(r + 1) * side].copy_from_slice(&row);
        }
    }
    img
}

/// Encodes `m` as the contract's PNG.
fn encode_png(m: &Modules) -> Result<Vec<u8>, QrError> {
    let side = image_side(m.size());
    let img = pixels(m);
    // Header + a well compressed body stays far below the raw size; avoid regrowth.
    let mut out = Vec::with_capacity(1024 + side * side / 16);
    let side32 = u32::try_from(side).map_err(|_| QrError::Encode("image too large".into()))?;
    let mut encoder = png::Encoder::new(&mut out, side32, side32);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    // Deflate first, filter second: `set_compression` would also reset the filter.
    encoder.set_deflate_compression(DEFLATE);
    encoder.set_filter(FILTER);
    let png_err = |e: png::EncodingError| QrError::Encode(format!("png: {e}"));
    let mut writer = encoder.write_header().map_err(png_err)?;
    writer.write_image_data(&img).map_err(png_err)?;
    writer.finish().map_err(png_err)?;
    Ok(out)
}
