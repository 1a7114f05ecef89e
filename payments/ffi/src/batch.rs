//! The batch format the Go side packs users, accounts and transaction rows into: one
//! buffer per call instead of one C call per row, and no Go pointer inside it (cgo lets C
//! read a Go buffer for the length of a call only if the buffer holds no Go pointers).
//!
//! Little-endian throughout. A string is a `u32` byte length and its UTF-8 bytes.
//!
//! - users: `(id)*`
//! - accounts: `(user_id currency)*`
//! - rows: `(seq:i64 ts:i64 amount:i64 user_id currency status category counterparty)*`
//!
//! Parsing is safe code over a byte slice: a truncated buffer or a string that is not
//! UTF-8 is [`Malformed`], never a read past the end.

use payments_model::Row;

/// The buffer does not follow the format: truncated, or a string is not UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// Reads a batch front to back.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { rest: buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.rest.len() < n {
            return Err(Malformed);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn i64(&mut self) -> Result<i64, Malformed> {
        let b = self.take(8)?;
        Ok(i64::from_le_bytes(b.try_into().map_err(|_| Malformed)?))
    }

    pub(crate) fn str(&mut self) -> Result<&'a str, Malformed> {
        let b = self.take(4)?;
        let n = u32::from_le_bytes(b.try_into().map_err(|_| Malformed)?);
        let bytes = self.take(usize::try_from(n).map_err(|_| Malformed)?)?;
        std::str::from_utf8(bytes).map_err(|_| Malformed)
    }

    pub(crate) fn row(&mut self) -> Result<Row<'a>, Malformed> {
        let seq = self.i64()?;
        let ts = self.i64()?;
        let amount = self.i64()?;
        Ok(Row {
            seq,
            ts,
            amount,
            user_id: self.str()?,
            currency: self.str()?,
            status: self.str()?,
            category: self.str()?,
            counterparty: self.str()?,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Packs like the Go side (`payments/go/internal/rustcore`), for the tests.
    pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    pub(crate) fn put_row(out: &mut Vec<u8>, r: &Row<'_>) {
        for n in [r.seq, r.ts, r.amount] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for s in [r.user_id, r.currency, r.status, r.category, r.counterparty] {
            put_str(out, s);
        }
    }

    const ROW: Row<'static> = Row {
        seq: 7,
        ts: -86_401,
        amount: i64::MIN,
        user_id: "u0123456789ab",
        currency: "EUR",
        status: "pending",
        category: "gift",
        counterparty: "ext:topup",
    };

    #[test]
    fn a_row_round_trips_with_extreme_numbers() {
        let mut buf = Vec::new();
        put_row(&mut buf, &ROW);
        put_row(
            &mut buf,
            &Row {
                amount: i64::MAX,
                seq: 8,
                ..ROW
            },
        );
        let mut c = Cursor::new(&buf);
        let a = c.row().unwrap();
        assert_eq!((a.seq, a.ts, a.amount), (7, -86_401, i64::MIN));
        assert_eq!(
            [a.user_id, a.currency, a.status, a.category, a.counterparty],
            ["u0123456789ab", "EUR", "pending", "gift", "ext:topup"]
        );
        assert_eq!(c.row().unwrap().amount, i64::MAX);
        assert!(c.is_empty());
    }

    #[test]
    fn every_truncation_is_malformed_never_a_panic() {
        let mut buf = Vec::new();
        put_row(&mut buf, &ROW);
        for cut in 0..buf.len() {
            let mut c = Cursor::new(&buf[..cut]);
            if cut == 0 {
                assert!(c.is_empty());
                continue;
            }
            assert_eq!(c.row().err(), Some(Malformed), "cut at {cut}");
        }
    }

    #[test]
    fn a_length_past_the_end_and_bad_utf8_are_malformed() {
        let mut huge = Vec::new();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(b"abc");
        assert_eq!(Cursor::new(&huge).str(), Err(Malformed));

        let mut bad = Vec::new();
        bad.extend_from_slice(&2u32.to_le_bytes());
        bad.extend_from_slice(&[0xc3, 0x28]);
        assert_eq!(Cursor::new(&bad).str(), Err(Malformed));
    }

    #[test]
    fn seeded_mutations_never_panic() {
        let mut base = Vec::new();
        for seq in 0..4 {
            put_row(&mut base, &Row { seq, ..ROW });
        }
        // xorshift: the same mutations on every run.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut whole, mut refused) = (0, 0);
        for _ in 0..5_000 {
            let mut buf = base.clone();
            for _ in 0..(next() % 4 + 1) {
                let at = (next() % buf.len() as u64) as usize;
                buf[at] = next() as u8;
            }
            let cut = (next() % (buf.len() as u64 + 1)) as usize;
            let mut c = Cursor::new(&buf[..cut]);
            loop {
                if c.is_empty() {
                    whole += 1;
                    break;
                }
                if c.row().is_err() {
                    refused += 1;
                    break;
                }
            }
        }
        // Both outcomes occur, so the mutations reach the error paths and the happy one.
        assert!(whole > 0 && refused > 0, "whole {whole}, refused {refused}");
    }
}
