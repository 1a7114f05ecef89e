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
    let mut base_dark = Vec::with_capacity(size * size);
    for y in 0..size {
        for x in 0..size {
            // Both fit in i32: size <= 177.
            base_dark.push(base.get_module(x as i32, y as i32));
        }
    }
    let function = function_map(size, version);

    let mut best: Option<(u32, u8, Vec<bool>)> = None;
    let mut candidate = base_dark.clone();
    for mask in 0..8u8 {
        for y in 0..size {
            for x in 0..size {
                let i = y * size + x;
                if !function[i] {
                    candidate[i] = base_dark[i] ^ mask_bit(0, y, x) ^ mask_bit(mask, y, x);
                }
            }
        }
        draw_format_bits(&mut candidate, size, mask);
        let score = penalty(&candidate, size);
        if best.as_ref().is_none_or(|(s, _, _)| score < *s) {
            best = Some((score, mask, candidate.clone()));
        }
    }
    let (_, mask, dark) = best.expect("eight masks scored");
    Ok(Modules {
        size,
        dark,
        version,
        mask,
    })
}

/// The ISO 18004 data mask condition for row `i`, column `j` (npm qrcode's `getMaskAt`).
#[allow(clippy::manual_is_multiple_of)] // the formulas as ISO 18004 and npm qrcode write them
fn mask_bit(mask: u8, i: usize, j: usize) -> bool {
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

/// Both copies of the 15 format bits for level M and `mask`, and the dark module.
fn draw_format_bits(dark: &mut [bool], size: usize, mask: u8) {
    // Level M's format code is 0b00.
    let data = u32::from(mask);
    let mut rem = data;
    for _ in 0..10 {
        rem = (rem << 1) ^ ((rem >> 9) * 0x537);
    }
    let bits = (data << 10 | rem) ^ 0x5412;
    let bit = |i: usize| (bits >> i) & 1 == 1;
    let mut set = |x: usize, y: usize, v: bool| dark[y * size + x] = v;
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
/// exactly, including its simplifications (N3 counts only the 11-module patterns).
fn penalty(dark: &[bool], size: usize) -> u32 {
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
        for len in [1usize, 20, 60, 150, 300, 512, 2000] {
            let text: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let m = encode(&text).unwrap();
            assert_eq!(m.dark, qrcodegen_with_mask(&text, m.mask), "len {len}");
        }
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
                draw_format_bits(&mut got, size, mask);
                assert!(got == want, "version {version} mask {mask}");
            }
        }
    }
}
