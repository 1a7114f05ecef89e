//! Text → QR module matrix: the codewords ([`codewords`]) laid out once without a mask,
//! then the mask chosen.
//!
//! The symbol is drawn as bit lines (function patterns, then the codewords' zigzag), once
//! unmasked. The eight masked variants are derived from it (data modules masked, format
//! bits drawn), each is scored with the penalty rule of the npm `qrcode` package (tier 0), and the lowest
//! score wins (ties: lowest mask number). Using tier 0's rule, not the ISO one, is what
//! makes every tier produce the same modules as tier 0 for the same text.

use crate::QrError;
use crate::codewords;

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

    /// The rows as bits: bit `x` of row `y` is the module at column `x` (1 = dark).
    #[cfg(test)]
    pub(crate) fn rows(&self) -> &[u128] {
        &self.rows
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

/// The chosen symbol in a fixed array: what the render reads, with no allocation.
#[derive(Debug)]
pub(crate) struct Symbol {
    rows: [u128; MAX_BITS],
    size: usize,
    version: u8,
    mask: u8,
}

impl Symbol {
    /// Row `y` as bits: bit `x` is the module at column `x` (1 = dark).
    pub(crate) fn rows(&self) -> &[u128] {
        &self.rows[..self.size]
    }
}

pub(crate) fn encode(text: &str) -> Result<Modules, QrError> {
    let s = symbol(text)?;
    Ok(Modules {
        size: s.size,
        rows: s.rows().to_vec(),
        version: s.version,
        mask: s.mask,
    })
}

pub(crate) fn symbol(text: &str) -> Result<Symbol, QrError> {
    let version = codewords::version_for(text.len())?;
    let size = 4 * usize::from(version) + 17;
    // 512 bytes need version 18 (89 modules); a line of up to 128 modules is one u128.
    if size > MAX_BITS {
        return Err(QrError::Encode(format!(
            "version {version} is wider than {MAX_BITS} modules"
        )));
    }
    let mut all = [0u8; codewords::MAX_CODEWORDS];
    codewords::encode(text.as_bytes(), version, &mut all);
    let (unmasked, data) = layout(size, version, &all[..codewords::raw_modules(version) / 8]);

    let mut candidate = Bits::empty(size); // overwritten for every mask
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
    candidate.assign_masked(&unmasked, mask, &data);
    format_bits(size, mask, |x, y, v| candidate.set(x, y, v));
    Ok(Symbol {
        rows: candidate.rows,
        size,
        version,
        mask,
    })
}

/// The symbol before masking (function patterns with the dark module, codewords placed in
/// the zigzag of ISO 18004 §7.7.3, remainder bits light; the format areas are drawn per mask
/// later) and the data modules, the ones masks flip.
fn layout(size: usize, version: u8, codewords: &[u8]) -> (Bits, Bits) {
    let mut symbol = Bits::empty(size);
    let mut function = Bits::empty(size);
    function_patterns(size, version, &mut symbol.rows, &mut function.rows);

    // Two columns at a time from the right, up then down, skipping the timing column and
    // every function module; bit 7 of each codeword first. Past the last codeword the
    // reader gives zeros: the remainder bits stay light.
    let mut bits = BitReader::new(codewords);
    let mut right = size - 1;
    loop {
        if right == 6 {
            right = 5;
        }
        let upward = (right + 1) & 2 == 0;
        for vert in 0..size {
            let y = if upward { size - 1 - vert } else { vert };
            // Bit 1: column `right` is free, bit 0: column `right - 1`.
            let free = (!function.rows[y] >> (right - 1)) as u32 & 0b11;
            let pair = match free {
                0b11 => bits.take(2), // the first bit goes right
                0b10 => bits.take(1) << 1,
                0b01 => bits.take(1),
                _ => 0,
            };
            symbol.rows[y] |= u128::from(pair) << (right - 1);
        }
        if right < 2 {
            break;
        }
        right -= 2;
    }
    symbol.cols = transpose(&symbol.rows, size);
    // Function patterns are symmetric about the diagonal (tests check it): the columns of
    // the map are its rows.
    let line = line_mask(size);
    for y in 0..size {
        function.rows[y] = !function.rows[y] & line;
    }
    function.cols = function.rows;
    (symbol, function)
}

/// The codewords' bits, most significant first, then zeros.
struct BitReader<'a> {
    bytes: &'a [u8],
    buf: u64,
    nbits: u32,
}

impl<'a> BitReader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        BitReader {
            bytes,
            buf: 0,
            nbits: 0,
        }
    }

    /// The next `n` (1 or 2) bits, the first one highest.
    #[inline(always)]
    fn take(&mut self, n: u32) -> u32 {
        if self.nbits < n {
            // Refill a byte at a time: the top of `buf` holds the next bits.
            let (&next, rest) = self.bytes.split_first().unwrap_or((&0, &[]));
            self.bytes = rest;
            self.buf |= u64::from(next) << (56 - self.nbits);
            self.nbits += 8;
        }
        let out = (self.buf >> (64 - n)) as u32;
        self.buf <<= n;
        self.nbits -= n;
        out
    }
}

/// `rows` transposed: bit `y` of line `x` is bit `x` of `rows[y]`, for a square of `size`.
/// Block swaps halving each time (Hacker's Delight §7-3): log2 passes over the lines.
fn transpose(rows: &[u128; MAX_BITS], size: usize) -> [u128; MAX_BITS] {
    let mut t = *rows;
    let n = size.next_power_of_two();
    let mut width = n / 2;
    let mut mask = line_mask(width);
    while width > 0 {
        // `mask`: the low `width` bits of every 2·width-bit group.
        let mut k = 0;
        while k < n {
            for a in k..k + width {
                let b = a + width;
                let swap = ((t[a] >> width) ^ t[b]) & mask;
                t[b] ^= swap;
                t[a] ^= swap << width;
            }
            k += 2 * width;
        }
        width /= 2;
        mask ^= mask << width;
    }
    t
}

/// Draws the function patterns into `dark` and marks them in `function`: timing lines,
/// finders with separators, alignment patterns, version information (7+), the dark module,
/// and (marked only) the format areas — qrcodegen's `draw_function_patterns`.
fn function_patterns(
    size: usize,
    version: u8,
    dark: &mut [u128; MAX_BITS],
    function: &mut [u128; MAX_BITS],
) {
    let mut set = |x: usize, y: usize, on: bool| {
        function[y] |= 1 << x;
        dark[y] = dark[y] & !(1 << x) | u128::from(on) << x;
    };
    for i in 0..size {
        set(6, i, i % 2 == 0);
        set(i, 6, i % 2 == 0);
    }
    for (cx, cy) in [(3, 3), (size - 4, 3), (3, size - 4)] {
        for y in cy.saturating_sub(4)..(cy + 5).min(size) {
            for x in cx.saturating_sub(4)..(cx + 5).min(size) {
                let dist = x.abs_diff(cx).max(y.abs_diff(cy));
                set(x, y, dist != 2 && dist != 4);
            }
        }
    }
    let (align, n) = alignment_positions(size, version);
    for (i, &cx) in align[..n].iter().enumerate() {
        for (j, &cy) in align[..n].iter().enumerate() {
            if (i == 0 && (j == 0 || j == n - 1)) || (i == n - 1 && j == 0) {
                continue; // on a finder
            }
            for y in cy - 2..=cy + 2 {
                for x in cx - 2..=cx + 2 {
                    set(x, y, x.abs_diff(cx).max(y.abs_diff(cy)) != 1);
                }
            }
        }
    }
    // Format areas: marked here, drawn for each mask by `format_bits`.
    format_bits(size, 0, |x, y, _| set(x, y, false));
    if version >= 7 {
        let v = u32::from(version);
        let mut rem = v;
        for _ in 0..12 {
            rem = (rem << 1) ^ ((rem >> 11) * 0x1F25);
        }
        let bits = v << 12 | rem;
        for i in 0..18 {
            let (a, b) = (size - 11 + i % 3, i / 3);
            let on = bits >> i & 1 == 1;
            set(a, b, on);
            set(b, a, on);
        }
    }
}

/// Widest symbol the bit-line form holds.
const MAX_BITS: usize = 128;

/// A symbol as bits, once by rows and once by columns: bit `x` of `rows[y]` and bit `y` of
/// `cols[x]` are the module at column `x`, row `y` (1 = dark). The penalty's row and column
/// scans are then a few shifts, ANDs and popcounts per line instead of a loop per module
/// (scoring the eight masks module by module was most of the render time). Fixed arrays:
/// the candidates cost no allocation.
#[derive(Debug, Clone)]
struct Bits {
    size: usize,
    rows: [u128; MAX_BITS],
    cols: [u128; MAX_BITS],
}

impl Bits {
    fn empty(size: usize) -> Bits {
        Bits {
            size,
            rows: [0; MAX_BITS],
            cols: [0; MAX_BITS],
        }
    }

    #[cfg(test)]
    fn from_fn(size: usize, dark: impl Fn(usize, usize) -> bool) -> Bits {
        let mut bits = Bits::empty(size);
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
    /// columns), reusing this buffer.
    fn assign_masked(&mut self, from: &Bits, mask: u8, only: &Bits) {
        let size = from.size;
        let (rows, cols) = &MASK_LINES[usize::from(mask)];
        self.size = size;
        for (y, out) in self.rows[..size].iter_mut().enumerate() {
            *out = from.rows[y] ^ (rows[y % 12] & only.rows[y]);
        }
        for (x, out) in self.cols[..size].iter_mut().enumerate() {
            *out = from.cols[x] ^ (cols[x % 12] & only.cols[x]);
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
        if size <= 64 {
            // Half the work on one machine word a line (versions 1..=11, texts up to 251 bytes).
            let (mut rows, mut cols) = ([0u64; 64], [0u64; 64]);
            for (narrow, &wide) in rows.iter_mut().zip(&self.rows[..size]) {
                *narrow = wide as u64;
            }
            for (narrow, &wide) in cols.iter_mut().zip(&self.cols[..size]) {
                *narrow = wide as u64;
            }
            penalty_of(&rows[..size], &cols[..size])
        } else {
            penalty_of(&self.rows[..size], &self.cols[..size])
        }
    }
}

/// A line of modules as bits, in a `u64` or a `u128`.
trait Line:
    Copy
    + std::ops::BitAnd<Output = Self>
    + std::ops::BitOr<Output = Self>
    + std::ops::BitXor<Output = Self>
    + std::ops::Not<Output = Self>
    + std::ops::Shl<u32, Output = Self>
    + std::ops::Shr<u32, Output = Self>
{
    /// The low `n` bits set.
    fn low(n: usize) -> Self;
    fn ones(self) -> u32;
}

impl Line for u64 {
    #[inline(always)]
    fn low(n: usize) -> Self {
        if n >= 64 { u64::MAX } else { (1 << n) - 1 }
    }
    #[inline(always)]
    fn ones(self) -> u32 {
        self.count_ones()
    }
}

impl Line for u128 {
    #[inline(always)]
    fn low(n: usize) -> Self {
        line_mask(n)
    }
    #[inline(always)]
    fn ones(self) -> u32 {
        self.count_ones()
    }
}

/// npm qrcode's penalty of the symbol whose rows and columns are `rows` and `cols`.
#[inline(always)]
fn penalty_of<L: Line>(rows: &[L], cols: &[L]) -> u32 {
    let size = rows.len();
    let line = L::low(size);
    let in_line_n1 = L::low(size - 1);
    let in_line_n3 = L::low((size + 1).saturating_sub(FINDER_LEN));
    let mut points = 0u32;
    for &dark in rows.iter().chain(cols) {
        // N1: a run of L >= 5 equal modules scores 3 + (L - 5). Bit x of `five` says
        // modules x..=x+4 are equal: a run of L has L - 4 such bits in a row, so it
        // scores its `five` bits plus 2 for the first of them.
        let same = !(dark ^ (dark >> 1)) & in_line_n1;
        let two = same & (same >> 1);
        let five = two & (two >> 2);
        points += five.ones() + 2 * (five & !(five << 1)).ones();
        // N3: 1011101 with four light modules on one side: 11 modules, both ways. Bit x
        // of `core` says 1011101 starts at x, of `light4` that x..=x+3 are light.
        let light = !dark & line;
        let d3 = dark & (dark >> 2) & (dark >> 3) & (dark >> 4);
        let core = d3 & (light >> 1) & (light >> 5) & (dark >> 6);
        let l2 = light & (light >> 1);
        let light4 = l2 & (l2 >> 2);
        let forward = core & (light4 >> 7);
        let backward = light4 & (core >> 4);
        points += 40 * ((forward & in_line_n3).ones() + (backward & in_line_n3).ones());
    }
    // N2: 2x2 blocks of one colour.
    for w in rows.windows(2) {
        let (a, b) = (w[0], w[1]);
        let dark = a & b & (a >> 1) & (b >> 1);
        let light = !(a | b | (a >> 1) | (b >> 1));
        points += 3 * ((dark | light) & in_line_n1).ones();
    }
    // N4: dark share away from 50 %, JS: |ceil(dark*100/total/5) - 10| * 10. The integer
    // form is exact: a non-integer quotient is at least 1/(5*total) away from an integer.
    let total = (size * size) as u64;
    let dark_count: u64 = rows.iter().map(|&r| u64::from(r.ones())).sum();
    let k = (dark_count * 20).div_ceil(total).abs_diff(10);
    points + (k as u32) * 10
}

/// N3's pattern length: 1011101 and four light modules.
const FINDER_LEN: usize = 11;

/// Per mask, the pattern over whole lines: `.0[y % 12]` bit `x` and `.1[x % 12]` bit `y`
/// are `mask_bit(mask, y, x)` for every `x, y < 128`. Every mask repeats every 12 modules
/// along a row and along a column (periods 2, 3, 4 or 6).
const MASK_LINES: [([u128; 12], [u128; 12]); 8] = mask_lines();

const fn mask_lines() -> [([u128; 12], [u128; 12]); 8] {
    let mut lines = [([0u128; 12], [0u128; 12]); 8];
    let mut mask = 0;
    while mask < 8 {
        let mut y = 0;
        while y < 12 {
            let mut x = 0;
            while x < MAX_BITS {
                if mask_bit(mask as u8, y, x) {
                    lines[mask].0[y] |= 1 << x;
                }
                if mask_bit(mask as u8, x, y) {
                    lines[mask].1[y] |= 1 << x;
                }
                x += 1;
            }
            y += 1;
        }
        mask += 1;
    }
    lines
}

/// The low `n` bits set.
pub(crate) fn line_mask(n: usize) -> u128 {
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

/// Centre coordinates of the alignment patterns (ISO 18004 Annex E, as computed by
/// qrcodegen) and how many there are (at most 7, for version 40).
fn alignment_positions(size: usize, version: u8) -> ([usize; 7], usize) {
    let mut positions = [0usize; 7];
    if version == 1 {
        return (positions, 0);
    }
    let ver = usize::from(version);
    let count = ver / 7 + 2;
    let step = if ver == 32 {
        26
    } else {
        (ver * 4 + count * 2 + 1) / (count * 2 - 2) * 2
    };
    positions[0] = 6;
    for i in 0..count - 1 {
        positions[count - 1 - i] = size - 7 - i * step;
    }
    (positions, count)
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
    use qrcodegen::{Mask, QrCode, QrCodeEcc, QrSegment, Version};

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

    /// Every mask's candidate, as `encode` builds it, for `text`.
    fn candidates(text: &str) -> Vec<Bits> {
        let version = codewords::version_for(text.len()).unwrap();
        let size = 4 * usize::from(version) + 17;
        let mut all = [0u8; codewords::MAX_CODEWORDS];
        codewords::encode(text.as_bytes(), version, &mut all);
        let (unmasked, data) = layout(size, version, &all[..codewords::raw_modules(version) / 8]);
        (0..8u8)
            .map(|mask| {
                let mut got = Bits::empty(size);
                got.assign_masked(&unmasked, mask, &data);
                format_bits(size, mask, |x, y, v| got.set(x, y, v));
                got
            })
            .collect()
    }

    #[test]
    fn chosen_mask_matrix_equals_qrcodegen_drawing_that_mask() {
        // The chosen symbol is exactly what a full qrcodegen encode with that mask draws, for
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
    /// rows and in columns, for a text of every version a bit line holds (1..=27): the
    /// codewords, their zigzag, the function patterns, the version and format bits.
    #[test]
    fn every_mask_candidate_of_every_version_equals_qrcodegen_drawing_that_mask() {
        let mut checked = 0;
        for version in 1..=codewords::MAX_VERSION {
            // The longest text of `version`: capacity minus mode and count bits.
            let len = (1..=2331)
                .rev()
                .find(|&len| codewords::version_for(len) == Ok(version))
                .unwrap();
            for text in [
                "Zq9".repeat(len).chars().take(len).collect::<String>(),
                "x".repeat(len),
            ] {
                let size = 4 * usize::from(version) + 17;
                for (mask, got) in candidates(&text).iter().enumerate() {
                    let want = qrcodegen_with_mask(&text, mask as u8);
                    let want = Bits::from_fn(size, |x, y| want[y * size + x]);
                    assert_eq!(got.rows, want.rows, "rows, version {version} mask {mask}");
                    assert_eq!(
                        got.cols, want.cols,
                        "columns, version {version} mask {mask}"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 27 * 2 * 8);
    }

    #[test]
    fn function_patterns_are_symmetric_about_the_diagonal() {
        // `layout` takes the map's columns to be its rows.
        for version in 1..=codewords::MAX_VERSION {
            let size = 4 * usize::from(version) + 17;
            let (mut dark, mut function) = ([0; MAX_BITS], [0; MAX_BITS]);
            function_patterns(size, version, &mut dark, &mut function);
            assert_eq!(transpose(&function, size), function, "version {version}");
        }
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for size in 1..=MAX_BITS {
            let mut rows = [0u128; MAX_BITS];
            for row in rows.iter_mut().take(size) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *row =
                    (u128::from(seed) << 64 | u128::from(seed.rotate_left(29))) & line_mask(size);
            }
            let t = transpose(&rows, size);
            for (y, row) in rows.iter().enumerate().take(size) {
                for (x, col) in t.iter().enumerate().take(size) {
                    assert_eq!(col >> y & 1, row >> x & 1, "size {size} ({x},{y})");
                }
            }
            assert!(t[size..].iter().all(|&l| l == 0));
        }
    }

    #[test]
    fn symbols_wider_than_a_bit_line_are_an_error_not_a_panic() {
        // 2000 bytes need version 37 (165 modules); the public functions stop at 512 bytes.
        assert!(matches!(encode(&"a".repeat(2000)), Err(QrError::Encode(_))));
        // The widest that fits (version 27, 125 modules) and the first that does not.
        let fits = (1..=2331)
            .rev()
            .find(|&l| codewords::version_for(l) == Ok(27))
            .unwrap();
        assert_eq!(encode(&"a".repeat(fits)).unwrap().size(), 125);
        assert!(matches!(
            encode(&"a".repeat(fits + 1)),
            Err(QrError::Encode(_))
        ));
    }
}
