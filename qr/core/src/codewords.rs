//! Bytes → the QR codeword sequence at level M: the version choice, the one byte-mode
//! segment, padding, Reed–Solomon error correction and block interleaving (ISO 18004 §7.4–
//! 7.6), computed as qrcodegen 1.8 computes them (its tables; the tests compare every
//! version's codewords with qrcodegen's symbols) but with table-driven GF(256) arithmetic
//! and no allocation: qrcodegen's bit-by-bit buffers and shift-and-add multiply were most of
//! its time.

use crate::QrError;

/// Error-correction codewords per block at level M, by version (index 0 unused).
const ECC_PER_BLOCK: [u8; 41] = [
    0, 10, 16, 26, 18, 24, 16, 18, 22, 22, 26, 30, 22, 22, 24, 24, 28, 28, 26, 26, 26, 26, 28, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28,
];
/// Error-correction blocks at level M, by version (index 0 unused).
const BLOCKS: [u8; 41] = [
    0, 1, 1, 1, 2, 2, 4, 4, 4, 5, 5, 5, 8, 9, 9, 10, 10, 11, 13, 14, 16, 17, 17, 18, 20, 21, 23,
    25, 26, 28, 29, 31, 33, 35, 37, 38, 40, 43, 45, 47, 49,
];

/// Largest version whose codewords [`encode`] lays out (a symbol of at most 128 modules).
pub(crate) const MAX_VERSION: u8 = 27;
/// Codewords of the largest version [`encode`] lays out.
pub(crate) const MAX_CODEWORDS: usize = raw_modules(MAX_VERSION) / 8;
/// The longest Reed–Solomon divisor any version needs.
const MAX_ECC: usize = 30;

/// Data modules (data and error correction, remainder bits included) of `version`.
pub(crate) const fn raw_modules(version: u8) -> usize {
    let v = version as usize;
    let mut modules = (16 * v + 128) * v + 64;
    if v >= 2 {
        let align = v / 7 + 2;
        modules -= (25 * align - 10) * align - 55;
        if v >= 7 {
            modules -= 36;
        }
    }
    modules
}

/// Data codewords (before error correction) of `version` at level M.
const fn data_codewords(version: u8) -> usize {
    let v = version as usize;
    raw_modules(version) / 8 - ECC_PER_BLOCK[v] as usize * BLOCKS[v] as usize
}

/// Bits of the byte-mode character count in `version`.
const fn count_bits(version: u8) -> usize {
    if version <= 9 { 8 } else { 16 }
}

/// The smallest version 1..=40 whose level-M capacity holds one byte segment of `len`
/// bytes (mode, count and data bits); the error is qrcodegen's, in the crate's words.
pub(crate) fn version_for(len: usize) -> Result<u8, QrError> {
    let mut need = None;
    for version in 1..=40u8 {
        if len >> count_bits(version) != 0 {
            need = None; // the count field cannot hold the length
            continue;
        }
        let bits = 4 + count_bits(version) + 8 * len;
        if bits <= data_codewords(version) * 8 {
            return Ok(version);
        }
        need = Some(bits);
    }
    Err(QrError::Encode(match need {
        None => "segment too long".into(),
        Some(bits) => format!(
            "needs {bits} bits, version 40-M holds {}",
            data_codewords(40) * 8
        ),
    }))
}

/// GF(256) modulo x^8 + x^4 + x^3 + x^2 + 1: `EXP[i]` = 2^i (twice over, so a sum of two
/// logarithms needs no reduction) and `LOG[2^i]` = i.
const EXP: [u8; 512] = {
    let mut t = [0u8; 512];
    let mut x = 1u16;
    let mut i = 0;
    while i < 512 {
        t[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= 0x11d;
        }
        i += 1;
    }
    t
};
const LOG: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[EXP[i] as usize] = i as u8;
        i += 1;
    }
    t
};

const fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Per degree, the logarithms of the Reed–Solomon divisor (x - 2^0)(x - 2^1)…, highest
/// power first without the leading 1, as qrcodegen's `reed_solomon_compute_divisor` builds
/// it. None of its coefficients is 0, so each has a logarithm.
const DIVISOR_LOGS: [[u8; MAX_ECC]; MAX_ECC + 1] = {
    let mut t = [[0u8; MAX_ECC]; MAX_ECC + 1];
    let mut degree = 1;
    while degree <= MAX_ECC {
        let mut poly = [0u8; MAX_ECC];
        poly[degree - 1] = 1;
        let mut root = 1u8;
        let mut i = 0;
        while i < degree {
            let mut j = 0;
            while j < degree {
                poly[j] = gf_mul(poly[j], root);
                if j + 1 < degree {
                    poly[j] ^= poly[j + 1];
                }
                j += 1;
            }
            root = gf_mul(root, 2);
            i += 1;
        }
        let mut j = 0;
        while j < degree {
            assert!(poly[j] != 0, "a divisor coefficient is zero");
            t[degree][j] = LOG[poly[j] as usize];
            j += 1;
        }
        degree += 1;
    }
    t
};

/// The error-correction codewords of one block, into `ecc` (its length is the degree).
fn reed_solomon(data: &[u8], ecc: &mut [u8]) {
    let degree = ecc.len();
    let divisor = &DIVISOR_LOGS[degree][..degree];
    ecc.fill(0);
    for &byte in data {
        let factor = byte ^ ecc[0];
        ecc.copy_within(1.., 0);
        ecc[degree - 1] = 0;
        if factor != 0 {
            let log = usize::from(LOG[usize::from(factor)]);
            for (e, &d) in ecc.iter_mut().zip(divisor) {
                *e ^= EXP[log + usize::from(d)];
            }
        }
    }
}

/// The data codewords of `text` in `version`: mode 0100, the count, the bytes, up to four
/// terminator zeros, zeros to a byte boundary, then 0xEC 0x11 alternating to capacity.
fn data(text: &[u8], version: u8, out: &mut [u8]) {
    let capacity = data_codewords(version);
    let count = count_bits(version);
    // Mode and count take 12 or 20 bits: every data byte straddles two codewords by a nibble.
    let header = (0b0100u32 << count | text.len() as u32) << 4; // then the first data nibble
    let header_bytes = (4 + count + 4) / 8; // whole bytes of mode + count + 4 bits
    for (i, o) in out[..header_bytes].iter_mut().enumerate() {
        *o = (header >> (8 * (header_bytes - 1 - i))) as u8;
    }
    // Byte `header_bytes - 1` ends with the nibble before the first data byte.
    let mut at = header_bytes - 1;
    for &b in text {
        out[at] |= b >> 4;
        out[at + 1] = b << 4;
        at += 1;
    }
    // `out[at]` holds the last data nibble (or the count's): its low nibble is the
    // terminator; four zero bits always fit (the version was chosen with room to spare or
    // exactly full, where `at` is already the capacity).
    at += 1;
    let mut pad = [0xEC, 0x11].into_iter().cycle();
    for o in out.iter_mut().take(capacity).skip(at) {
        *o = pad.next().expect("cycle");
    }
}

/// Every codeword of `text` in `version`, data and error correction, interleaved as the
/// symbol places them: written into `out`, whose first `raw_modules(version) / 8` bytes are
/// the result.
pub(crate) fn encode(text: &[u8], version: u8, out: &mut [u8; MAX_CODEWORDS]) {
    let v = usize::from(version);
    let blocks = usize::from(BLOCKS[v]);
    let ecc_len = usize::from(ECC_PER_BLOCK[v]);
    let raw = raw_modules(version) / 8;
    let short_blocks = blocks - raw % blocks;
    let short_data = raw / blocks - ecc_len;

    let mut data_bytes = [0u8; MAX_CODEWORDS];
    data(text, version, &mut data_bytes);
    let mut ecc = [0u8; MAX_CODEWORDS];
    let mut start = 0;
    for b in 0..blocks {
        let len = short_data + usize::from(b >= short_blocks);
        let block_ecc = &mut ecc[b * ecc_len..(b + 1) * ecc_len];
        reed_solomon(&data_bytes[start..start + len], block_ecc);
        start += len;
    }
    // Interleave: the i-th data byte of every block in turn (short blocks lack the last),
    // then the i-th ECC byte of every block.
    let mut at = 0;
    for i in 0..=short_data {
        let mut block_start = 0;
        for b in 0..blocks {
            let len = short_data + usize::from(b >= short_blocks);
            if i < len {
                out[at] = data_bytes[block_start + i];
                at += 1;
            }
            block_start += len;
        }
    }
    for i in 0..ecc_len {
        for b in 0..blocks {
            out[at] = ecc[b * ecc_len + i];
            at += 1;
        }
    }
    debug_assert_eq!(at, raw);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gf_tables_are_a_field() {
        for a in 0..=255u8 {
            assert_eq!(gf_mul(a, 1), a);
            for b in [2u8, 3, 0x1d, 0x8e, 255] {
                // Shift-and-add, as qrcodegen multiplies.
                let mut z = 0u8;
                for i in (0..8).rev() {
                    z = (z << 1) ^ ((z >> 7) * 0x1d);
                    z ^= ((b >> i) & 1) * a;
                }
                assert_eq!(gf_mul(a, b), z, "{a} * {b}");
            }
        }
    }

    #[test]
    fn versions_hold_the_bytes_as_qrcodegen_chooses() {
        for len in (1..=2400).step_by(7).chain([2331, 2332, 65_536]) {
            let bytes = vec![b'q'; len];
            let want = qrcodegen::QrCode::encode_segments_advanced(
                &[qrcodegen::QrSegment::make_bytes(&bytes)],
                qrcodegen::QrCodeEcc::Medium,
                qrcodegen::Version::MIN,
                qrcodegen::Version::MAX,
                Some(qrcodegen::Mask::new(0)),
                false,
            );
            match (version_for(len), want) {
                (Ok(v), Ok(q)) => assert_eq!(v, q.version().value(), "len {len}"),
                (Err(QrError::Encode(msg)), Err(qrcodegen::DataTooLong::SegmentTooLong)) => {
                    assert_eq!(msg, "segment too long")
                }
                (
                    Err(QrError::Encode(msg)),
                    Err(qrcodegen::DataTooLong::DataOverCapacity(n, c)),
                ) => {
                    assert_eq!(msg, format!("needs {n} bits, version 40-M holds {c}"))
                }
                (ours, theirs) => panic!("len {len}: {ours:?} vs {}", theirs.is_ok()),
            }
        }
    }

    #[test]
    fn the_largest_version_fills_its_buffer() {
        assert_eq!(MAX_CODEWORDS, raw_modules(MAX_VERSION) / 8);
        assert_eq!(4 * usize::from(MAX_VERSION) + 17, 125);
        assert!(ECC_PER_BLOCK.iter().all(|&e| usize::from(e) <= MAX_ECC));
    }
}
