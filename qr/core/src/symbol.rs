//! Text → QR module matrix: qrcodegen draws the symbol, this module picks the mask.
//!
//! qrcodegen encodes the data once with mask 0. The other seven masked variants are
//! derived from that matrix (data modules re-masked, format bits redrawn), each is
//! scored with the penalty rule of the npm `qrcode` package (tier 0), and the lowest
//! score wins (ties: lowest mask number). Using tier 0's rule, not the ISO one, is what
//! makes every tier produce the same modules as tier 0 for the same text.

use qrcodegen::{DataTooLong, Mask, QrCode, QrCodeEcc, QrSegment, Version};

use crate::QrError;

/// The QR symbol for one text: a square of dark (`true`) and light modules.
///
/// Built by [`modules`](crate::modules); no quiet zone is included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modules {
    size: usize,
    /// Bit `x` of `rows[y]` is the module at column `x`, row `y` (1 = dark).
    rows: Vec<u128>,
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
        x < self.size && y < self.size && self.rows[y] >> x & 1 == 1
    }

    /// Row `y` as bits: bit `x` is the module at column `x` (1 = dark).
    pub(crate) fn row(&self, y: usize) -> u128 {
        self.rows[y]
    }

    /// Any square of modules, for the render's tests (not a valid symbol).
    #[cfg(test)]
    pub(crate) fn from_rows(rows: Vec<u128>) -> Modules {
        Modules {
            size: rows.len(),
            rows,
            version: 0,
            mask: 0,
        }
    }
}

pub(crate) fn encode(text: &str) -> Result<Modules, QrError> {
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
    chosen.rows.truncate(size);
    Ok(Modules {
        size,
        rows: chosen.rows,
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

/// npm qrcode's mask penalty (`lib/core/mask-pattern.js`, N1 + N2 + N3 + N4), reproduced
/// exactly module by module, including its simplifications (N3 counts only the 11-module
/// patterns). The oracle of [`Bits::penalty`], which is what runs.
#[cfg(test)]
fn penalty_reference(dark: &[bool], size: usize) -> u32 {
    let at = |row: usize, col: usize| dark[row * size + col];
    let mut points = 0u32;

    // N1: runs of five or more equal modules, in rows and columns.
    for row in 0..size {
        let (mut run_row, mut run_col) = (0u32, 0u32);
        let (mut last_row, mut last_col) = (None, None);
        for col in 0..size {
            let m = at(row, col);
            if Some(m) == last_row {
                run_row += 1;
            } else {
                if run_row >= 5 {
                    points += 3 + (run_row - 5);
                }
                last_row = Some(m);
                run_row = 1;
            }
            let m = at(col, row);
            if Some(m) == last_col {
                run_col += 1;
            } else {
                if run_col >= 5 {
                    points += 3 + (run_col - 5);
                }
                last_col = Some(m);
                run_col = 1;
            }
        }
        for run in [run_row, run_col] {
            if run >= 5 {
                points += 3 + (run - 5);
            }
        }
    }

    // N2: 2x2 blocks of one colour.
    let mut blocks = 0u32;
    for row in 0..size - 1 {
        for col in 0..size - 1 {
            let sum = u8::from(at(row, col))
                + u8::from(at(row, col + 1))
                + u8::from(at(row + 1, col))
                + u8::from(at(row + 1, col + 1));
            if sum == 0 || sum == 4 {
                blocks += 1;
            }
        }
    }
    points += blocks * 3;

    // N3: 1011101 with four light modules on one side, rows and columns.
    let mut finders = 0u32;
    for row in 0..size {
        let (mut bits_row, mut bits_col) = (0u16, 0u16);
        for col in 0..size {
            bits_row = ((bits_row << 1) & 0x7FF) | u16::from(at(row, col));
            bits_col = ((bits_col << 1) & 0x7FF) | u16::from(at(col, row));
            if col >= 10 {
                finders += u32::from(bits_row == 0x5D0 || bits_row == 0x05D);
                finders += u32::from(bits_col == 0x5D0 || bits_col == 0x05D);
            }
        }
    }
    points += finders * 40;

    // N4: dark share away from 50 %, JS: |ceil(dark*100/total/5) - 10| * 10. The integer
    // form is exact: a non-integer quotient is at least 1/(5*total) away from an integer.
    let total = (size * size) as u64;
    let dark_count = dark.iter().filter(|&&d| d).count() as u64;
    let k = (dark_count * 20).div_ceil(total).abs_diff(10);
    points + (k as u32) * 10
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qrcodegen_with_mask(text: &str, mask: u8) -> Vec<bool> {
        let segs = [QrSegment::make_bytes(text.as_bytes())];
        let q = QrCode::encode_segments_advanced(
            &segs,
            QrCodeEcc::Medium,
            Version::MIN,
            Version::MAX,
            Some(Mask::new(mask)),
            false,
        )
        .unwrap();
        let n = q.size();
        (0..n * n).map(|i| q.get_module(i % n, i / n)).collect()
    }

    #[test]
    fn chosen_mask_matrix_equals_qrcodegen_drawing_that_mask() {
        // Derived variants must be exactly what a full encode with that mask draws, for
        // versions with and without version info and with many alignment patterns.
        for len in [1usize, 20, 60, 150, 300, 400, 512] {
            let text: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let m = encode(&text).unwrap();
            let dark: Vec<bool> = (0..m.size * m.size)
                .map(|i| m.is_dark(i % m.size, i / m.size))
                .collect();
            assert_eq!(dark, qrcodegen_with_mask(&text, m.mask), "len {len}");
        }
    }

    /// The bit-line penalty is the module-by-module one, for every mask of texts of many
    /// lengths (versions 1 to 18, the widest 512 bytes need) and contents.
    #[test]
    fn bit_penalty_equals_the_module_by_module_penalty() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut scored = 0;
        for len in (1..=512).step_by(7).chain([512]) {
            let text: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    char::from(b' ' + (seed % 95) as u8)
                })
                .collect();
            for mask in 0..8u8 {
                let drawn = qrcodegen_with_mask(&text, mask);
                let size = (drawn.len() as f64).sqrt() as usize;
                let bits = Bits::from_fn(size, |x, y| drawn[y * size + x]);
                let want = penalty_reference(&drawn, size);
                assert_eq!(bits.penalty(), want, "len {len} mask {mask}");
                assert_eq!(
                    bits.penalty_lines(),
                    want,
                    "len {len} mask {mask}, no POPCNT"
                );
                scored += 1;
            }
        }
        assert!(scored > 500);
    }

    /// Every candidate (not only the chosen one) is what qrcodegen draws with that mask, in
    /// rows and in columns.
    #[test]
    fn every_mask_candidate_equals_qrcodegen_drawing_that_mask() {
        for len in [1usize, 17, 60, 150, 333, 512] {
            let text = "Zq9".repeat(len).chars().take(len).collect::<String>();
            let base = qrcodegen_with_mask(&text, 0);
            let size = (base.len() as f64).sqrt() as usize;
            let version = ((size - 17) / 4) as u8;
            let function = function_map(size, version);
            let base = Bits::from_fn(size, |x, y| base[y * size + x]);
            let data = Bits::from_fn(size, |x, y| !function[y * size + x]);
            let mut unmasked = base.clone();
            unmasked.assign_masked(&base, 0, &data);
            for mask in 0..8u8 {
                let want = qrcodegen_with_mask(&text, mask);
                let want = Bits::from_fn(size, |x, y| want[y * size + x]);
                let mut got = base.clone();
                got.assign_masked(&unmasked, mask, &data);
                format_bits(size, mask, |x, y, v| got.set(x, y, v));
                assert_eq!(got.rows, want.rows, "rows, len {len} mask {mask}");
                assert_eq!(got.cols, want.cols, "columns, len {len} mask {mask}");
            }
        }
    }

    #[test]
    fn symbols_wider_than_a_bit_line_are_an_error_not_a_panic() {
        // 2000 bytes need version 37 (165 modules); the public functions stop at 512 bytes.
        assert!(matches!(encode(&"a".repeat(2000)), Err(QrError::Encode(_))));
    }

    #[test]
    fn function_map_matches_qrcodegen_for_every_version_and_mask() {
        // For each version, encode a text that needs it, then check every derived mask.
        for version in 1..=40u8 {
            let size = 4 * usize::from(version) + 17;
            let function = function_map(size, version);
            let version_of = |len: usize| {
                let t = "z".repeat(len);
                let segs = [QrSegment::make_bytes(t.as_bytes())];
                QrCode::encode_segments_advanced(
                    &segs,
                    QrCodeEcc::Medium,
                    Version::MIN,
                    Version::MAX,
                    Some(Mask::new(0)),
                    false,
                )
                .unwrap()
                .version()
                .value()
            };
            // Binary search for the shortest text that needs `version`.
            let (mut lo, mut hi) = (1usize, 2331usize);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if version_of(mid) >= version {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            assert_eq!(version_of(lo), version);
            let text = "z".repeat(lo);
            let base = qrcodegen_with_mask(&text, 0);
            assert_eq!(base.len(), size * size);
            for mask in 1..8u8 {
                let want = qrcodegen_with_mask(&text, mask);
                let mut got = base.clone();
                for y in 0..size {
                    for x in 0..size {
                        let i = y * size + x;
                        if !function[i] {
                            got[i] = base[i] ^ mask_bit(0, y, x) ^ mask_bit(mask, y, x);
                        }
                    }
                }
                format_bits(size, mask, |x, y, v| got[y * size + x] = v);
                assert!(got == want, "version {version} mask {mask}");
            }
        }
    }
}
