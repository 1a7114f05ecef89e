//! The zlib stream of fdeflate 0.3's `Compressor` (what the png crate 0.18 runs for
//! `DeflateCompression::FdeflateUltraFast`), reproduced bit for bit, with two changes that
//! do not touch the output: bits go straight into the PNG's buffer, and a row the render
//! already knows is all zeros is written from its recorded bits instead of being scanned.
//!
//! fdeflate writes one dynamic-Huffman block whose code is fixed in advance (tuned for
//! filtered PNG rows, [`LENGTHS`]); every byte is a literal except runs of zero bytes,
//! written as a literal 0 then length codes at distance 1. Runs are found in 8-byte chunks
//! from the start of each `write_data` call (the png crate calls it once per row, filter
//! byte first), never across calls, and the last `len % 8` bytes of a call are always
//! literals. Those rules decide the bytes, so [`Deflate::row`] keeps them exactly; the
//! tests compare it with the fdeflate crate itself.

/// Code lengths of literals/lengths 0..=285: fdeflate 0.3.7 `tables::HUFFMAN_LENGTHS`,
/// which its fixed 54-byte block header ([`HEADER`]) declares.
const LENGTHS: [u8; 286] = [
    2, 3, 4, 5, 5, 6, 6, 7, 7, 7, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10,
    10, 10, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 11, 11, 11, 11, 11, 11, 11,
    11, 11, 11, 10, 11, 10, 10, 10, 10, 10, 10, 10, 10, 10, 9, 9, 9, 9, 9, 8, 9, 8, 8, 8, 8, 8, 7,
    7, 7, 6, 6, 6, 5, 4, 3, 12, 12, 12, 9, 9, 11, 10, 11, 11, 10, 11, 11, 11, 11, 11, 11, 12, 11,
    12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 9,
];

/// The canonical (RFC 1951) codes of [`LENGTHS`], bit-reversed for LSB-first output.
const CODES: [u16; 286] = canonical_codes(&LENGTHS);

/// zlib header, then the dynamic block header declaring [`LENGTHS`] and a one-code
/// distance tree: 53 bytes and 5 bits (fdeflate's `write_headers`).
const HEADER: [u8; 53] = [
    120, 1, 237, 192, 3, 160, 36, 89, 150, 198, 241, 255, 119, 238, 141, 200, 204, 167, 114, 75,
    99, 174, 109, 219, 182, 109, 219, 182, 109, 219, 182, 109, 105, 140, 158, 150, 74, 175, 158,
    50, 51, 34, 238, 249, 118, 183, 106, 122, 166, 135, 59, 107, 213,
];
const HEADER_TAIL: (u64, u32) = (15, 5);

/// Symbol 256, end of block.
const END_OF_BLOCK: usize = 256;
/// Symbol 285, a match of 258 bytes.
const LENGTH_258: usize = 285;

const fn canonical_codes(lengths: &[u8; 286]) -> [u16; 286] {
    let mut codes = [0u16; 286];
    let mut code = 0u32;
    let mut len = 1;
    while len <= 16 {
        let mut i = 0;
        while i < lengths.len() {
            if lengths[i] == len {
                codes[i] = (code as u16).reverse_bits() >> (16 - len);
                code += 1;
            }
            i += 1;
        }
        code <<= 1;
        len += 1;
    }
    assert!(code == 2 << 16, "LENGTHS is not a complete prefix code");
    codes
}

/// Per literal byte, its code in the low 16 bits and its length above: one load a byte.
const LITERALS: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = CODES[i] as u32 | (LENGTHS[i] as u32) << 16;
        i += 1;
    }
    t
};

/// The code of literal `byte`, as (bits, bit count).
#[inline(always)]
fn literal(byte: u8) -> (u64, u32) {
    let e = LITERALS[usize::from(byte)];
    (u64::from(e & 0xffff), e >> 16)
}

/// Length symbol 257..=284 for a match of `len` (5..=257) bytes and its extra-bit count.
fn length_symbol(len: u32) -> (usize, u32) {
    // RFC 1951 3.2.5: lengths 3..=10 have no extra bits, then every 4 symbols double the range.
    let l = len - 3;
    if l < 8 {
        return (257 + l as usize, 0);
    }
    let extra = (31 - l.leading_zeros()) - 2;
    let sym = (257 + 4 * extra + (l >> extra)) as usize;
    (sym, extra)
}

/// Where the codes go: the PNG buffer, or a recorder for a row written many times.
pub(crate) trait Sink {
    /// Appends the low `n` bits of `bits` (n <= 64), least significant first.
    fn put(&mut self, bits: u64, n: u32);
}

/// A deflate bit stream appended to a byte buffer.
pub(crate) struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    buf: u64,
    nbits: u32,
}

impl Sink for BitWriter<'_> {
    #[inline(always)]
    fn put(&mut self, bits: u64, n: u32) {
        debug_assert!(n <= 64 && (n == 64 || bits >> n == 0));
        self.buf |= bits << self.nbits; // nbits < 64 between calls
        self.nbits += n;
        if self.nbits >= 64 {
            self.out.extend_from_slice(&self.buf.to_le_bytes());
            self.nbits -= 64;
            self.buf = bits.checked_shr(n - self.nbits).unwrap_or(0);
        }
    }
}

/// The bits of one row, recorded once and written again for each identical row.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Recorded {
    bits: u128,
    nbits: u32,
}

impl Sink for Recorded {
    fn put(&mut self, bits: u64, n: u32) {
        // An all-zero row of up to 545 bytes records 4 + 2 + 2 * 10 + 18 + 14 bits at most.
        assert!(self.nbits + n <= 128, "a recorded row is at most 128 bits");
        self.bits |= u128::from(bits) << self.nbits;
        self.nbits += n;
    }
}

impl Recorded {
    /// How many bits were recorded.
    #[cfg(test)]
    pub(crate) fn bits(&self) -> usize {
        self.nbits as usize
    }

    pub(crate) fn replay(&self, sink: &mut impl Sink) {
        if self.nbits > 64 {
            sink.put(self.bits as u64, 64);
            sink.put((self.bits >> 64) as u64, self.nbits - 64);
        } else {
            sink.put(self.bits as u64, self.nbits);
        }
    }
}

/// fdeflate's run: a literal 0, then the other `run - 1` zeros as matches at distance 1
/// (each length code followed by the one-bit distance code 0); 1..=4 zeros left over stay
/// literals. Composed into as few puts as fit in 64 bits.
#[inline(always)]
fn run(sink: &mut impl Sink, run: u32) {
    let (zero, zero_len) = literal(0);
    debug_assert_eq!(zero, 0);
    let (mut bits, mut n) = (0u64, zero_len);
    let mut left = run - 1;
    while left >= 258 {
        // 10 bits each: flush before one would pass 64 (rows here need at most two).
        if n > 64 - 10 {
            sink.put(bits, n);
            (bits, n) = (0, 0);
        }
        bits |= u64::from(CODES[LENGTH_258]) << n;
        n += u32::from(LENGTHS[LENGTH_258]) + 1;
        left -= 258;
    }
    if left > 4 {
        let (sym, extra) = length_symbol(left);
        let value = u64::from((left - 3) & ((1 << extra) - 1));
        let code_len = u32::from(LENGTHS[sym]);
        // At most 12 + 5 + 1 bits more.
        if n > 64 - 18 {
            sink.put(bits, n);
            (bits, n) = (0, 0);
        }
        bits |= (u64::from(CODES[sym]) | value << code_len) << n;
        n += code_len + extra + 1;
    } else {
        n += left * zero_len;
    }
    sink.put(bits, n);
}

/// Literals for the low `count` (1..=8) bytes of `word`, first byte lowest, four to a put
/// (at most 48 bits).
#[inline(always)]
fn literals(sink: &mut impl Sink, mut word: u64, count: u32) {
    debug_assert!((1..=8).contains(&count));
    let mut left = count;
    while left > 0 {
        let group = left.min(4);
        let (mut bits, mut n) = (0u64, 0u32);
        for _ in 0..group {
            let (code, len) = literal(word as u8);
            bits |= code << n;
            n += len;
            word >>= 8;
        }
        sink.put(bits, n);
        left -= group;
    }
}

/// fdeflate's `write_data` for one call: `data` is one filtered row, filter byte first.
///
/// Per 8-byte chunk (a little-endian word): all zeros extend the pending run; otherwise a
/// pending run ends, taking the chunk's leading zero bytes with it, the bytes up to the
/// chunk's trailing zeros are literals (its leading zeros too, when no run was pending),
/// and the trailing zeros start the next run. The last `len % 8` bytes are literals.
pub(crate) fn row(sink: &mut impl Sink, data: &[u8]) {
    let mut zeros = 0u32;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        if word == 0 {
            zeros += 8;
            continue;
        }
        let tail = word.leading_zeros() / 8;
        let mut start = 0;
        if zeros > 0 {
            start = word.trailing_zeros() / 8;
            run(sink, zeros + start);
        }
        literals(sink, word >> (8 * start), 8 - tail - start);
        zeros = tail;
    }
    if zeros > 0 {
        run(sink, zeros);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        literals(sink, u64::from_le_bytes(word), rest.len() as u32);
    }
}

impl<'a> BitWriter<'a> {
    /// Starts the zlib stream at the end of `out`: zlib header and block header.
    pub(crate) fn start(out: &'a mut Vec<u8>) -> Self {
        out.extend_from_slice(&HEADER);
        let mut w = BitWriter {
            out,
            buf: 0,
            nbits: 0,
        };
        w.put(HEADER_TAIL.0, HEADER_TAIL.1);
        w
    }

    /// Ends the block, pads to a byte and appends the Adler-32 of the uncompressed data.
    pub(crate) fn finish(mut self, adler: u32) {
        let (bits, n) = (
            u64::from(CODES[END_OF_BLOCK]),
            u32::from(LENGTHS[END_OF_BLOCK]),
        );
        self.put(bits, n);
        let bytes = self.nbits.div_ceil(8) as usize;
        self.out.extend_from_slice(&self.buf.to_le_bytes()[..bytes]);
        self.out.extend_from_slice(&adler.to_be_bytes());
    }
}

/// The longest code, in bits: a bound for the compressed size.
#[cfg(test)]
pub(crate) const MAX_CODE_BITS: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(rows: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = BitWriter::start(&mut out);
        let mut adler = simd_adler32::Adler32::new();
        for r in rows {
            row(&mut w, r);
            adler.write(r);
        }
        w.finish(adler.finish());
        out
    }

    fn fdeflate(rows: &[Vec<u8>]) -> Vec<u8> {
        let mut c = fdeflate::Compressor::new(Vec::new()).unwrap();
        for r in rows {
            c.write_data(r).unwrap();
        }
        c.finish().unwrap()
    }

    #[test]
    fn max_code_bits_is_the_longest_code() {
        assert_eq!(
            LENGTHS.iter().copied().max(),
            Some(MAX_CODE_BITS as u8),
            "MAX_CODE_BITS"
        );
    }

    #[test]
    fn length_symbols_follow_rfc_1951() {
        // (length, symbol, extra bits) at the edges of every range.
        for (len, sym, extra) in [
            (5, 259, 0),
            (10, 264, 0),
            (11, 265, 1),
            (12, 265, 1),
            (13, 266, 1),
            (18, 268, 1),
            (19, 269, 2),
            (34, 272, 2),
            (35, 273, 3),
            (66, 276, 3),
            (67, 277, 4),
            (99, 279, 4),
            (130, 280, 4),
            (131, 281, 5),
            (257, 284, 5),
        ] {
            assert_eq!(length_symbol(len), (sym, extra), "length {len}");
        }
    }

    /// Rows of zero runs of every length and position, and random bytes, are the same
    /// stream as the fdeflate crate's, one `write_data` call per row.
    #[test]
    fn rows_compress_to_fdeflates_bytes() {
        let mut seed = 0x243f_6a88_85a3_08d3u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut rows: Vec<Vec<u8>> = Vec::new();
        for len in 0..=600usize {
            // Sparse rows: mostly zeros, like filtered QR rows.
            let mut r = vec![0u8; len];
            for b in r.iter_mut() {
                if next() % 7 == 0 {
                    *b = next() as u8;
                }
            }
            rows.push(r);
            // A single zero run inside non-zero bytes, at every offset mod 8.
            let mut r: Vec<u8> = (0..len).map(|_| (next() as u8) | 1).collect();
            if len > 2 {
                let start = (next() as usize) % len;
                let end = start + (next() as usize) % (len - start);
                r[start..end].fill(0);
            }
            rows.push(r);
            rows.push(vec![0; len]);
            let mut r = vec![0; len];
            if len > 0 {
                r[0] = 2;
            }
            rows.push(r);
        }
        for group in rows.chunks(37) {
            assert_eq!(ours(group), fdeflate(group));
        }
        assert_eq!(ours(&rows), fdeflate(&rows));
        assert_eq!(ours(&[]), fdeflate(&[]));
    }

    #[test]
    fn a_recorded_row_replays_to_the_same_bits() {
        for len in [1usize, 8, 9, 149, 389, 545] {
            let mut data = vec![0u8; len];
            data[0] = 2;
            let mut rec = Recorded::default();
            row(&mut rec, &data);
            let mut direct = Vec::new();
            let mut w = BitWriter::start(&mut direct);
            for _ in 0..5 {
                row(&mut w, &data);
            }
            w.finish(7);
            let mut replayed = Vec::new();
            let mut w = BitWriter::start(&mut replayed);
            for _ in 0..5 {
                rec.replay(&mut w);
            }
            w.finish(7);
            assert_eq!(direct, replayed, "row of {len} bytes");
        }
    }
}
