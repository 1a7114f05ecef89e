//! Positioned, buffered reading: every cursor has its own offset and buffer over one shared
//! file handle, so any number of cursors read one file without sharing a seek position,
//! and a file renamed or replaced while it is replayed does not change what is read.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Bytes addressable by offset: a file, or bytes in memory (tests, benchmarks).
pub(crate) trait ReadAt: Send + Sync + std::fmt::Debug {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        loop {
            match FileExt::read_at(self, buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

/// Bytes in memory, shown by their length only.
pub(crate) struct Memory(pub(crate) Vec<u8>);

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Memory({} bytes)", self.0.len())
    }
}

impl ReadAt for Memory {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let bytes = &self.0;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let n = buf.len().min(bytes.len() - start);
        buf[..n].copy_from_slice(&bytes[start..start + n]);
        Ok(n)
    }
}

const BUFFER: usize = 64 << 10;

/// A cursor over `[0, end)` of a [`ReadAt`].
pub(crate) struct PosReader {
    src: Arc<dyn ReadAt>,
    /// Offset of `buf[0]`.
    base: u64,
    buf: Box<[u8]>,
    start: usize,
    filled: usize,
    end: u64,
}

impl std::fmt::Debug for PosReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PosReader")
            .field("offset", &self.offset())
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// What [`PosReader::read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    /// No bytes left.
    Eof,
    /// A line (without its `\n` and a `\r` before it) is in the output buffer.
    Full,
    /// The line was longer than the limit; its first `max` bytes are in the output and
    /// the rest was skipped.
    TooLong,
}

impl PosReader {
    pub(crate) fn new(src: Arc<dyn ReadAt>, end: u64) -> PosReader {
        PosReader {
            src,
            base: 0,
            buf: vec![0; BUFFER].into_boxed_slice(),
            start: 0,
            filled: 0,
            end,
        }
    }

    /// The offset of the next byte to be read.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Moves to `offset`, keeping the buffer when it holds that offset.
    pub(crate) fn seek(&mut self, offset: u64) {
        if offset >= self.base && offset <= self.base + self.filled as u64 {
            self.start = (offset - self.base) as usize;
        } else {
            self.base = offset;
            self.start = 0;
            self.filled = 0;
        }
    }

    /// The buffered bytes, refilled when empty; empty at the end.
    pub(crate) fn fill(&mut self) -> io::Result<&[u8]> {
        if self.start >= self.filled {
            self.base += self.filled as u64;
            self.start = 0;
            self.filled = 0;
            let left = self.end.saturating_sub(self.base);
            let want = self
                .buf
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            if want > 0 {
                self.filled = self.src.read_at(&mut self.buf[..want], self.base)?;
            }
        }
        Ok(&self.buf[self.start..self.filled])
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.filled);
    }

    /// Reads one line into `out` (cleared first), keeping at most `max` bytes of it.
    /// Memory stays bounded by `max` whatever the input.
    pub(crate) fn read_line(&mut self, out: &mut Vec<u8>, max: usize) -> io::Result<Line> {
        out.clear();
        let mut any = false;
        let mut too_long = false;
        loop {
            let avail = self.fill()?;
            if avail.is_empty() {
                break;
            }
            any = true;
            let (take, done) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            let room = max.saturating_sub(out.len());
            if take > room {
                too_long = true;
            }
            out.extend_from_slice(&avail[..take.min(room)]);
            self.consume(take + usize::from(done));
            if done {
                break;
            }
        }
        if !any {
            return Ok(Line::Eof);
        }
        if too_long {
            return Ok(Line::TooLong);
        }
        if out.last() == Some(&b'\r') {
            out.pop();
        }
        Ok(Line::Full)
    }

    /// Reads the next line that is not blank into `out`, as [`PosReader::read_line`] does,
    /// counting every line read, blank ones too, in `line_no`: the one-record-a-line
    /// formats skip blank lines, and a skipped record names its line.
    pub(crate) fn read_record_line(
        &mut self,
        out: &mut Vec<u8>,
        max: usize,
        line_no: &mut u64,
    ) -> io::Result<Line> {
        loop {
            let kind = self.read_line(out, max)?;
            if kind == Line::Eof {
                return Ok(Line::Eof);
            }
            *line_no += 1;
            if !out.iter().all(u8::is_ascii_whitespace) {
                return Ok(kind);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8], buffer: usize) -> PosReader {
        let mut r = PosReader::new(Arc::new(Memory(bytes.to_vec())), bytes.len() as u64);
        r.buf = vec![0; buffer].into_boxed_slice();
        r
    }

    #[test]
    fn lines_across_buffer_boundaries_and_limits() {
        let text = b"one\r\ntwo\n\nthree-is-long\nlast";
        for buffer in 1..8 {
            let mut r = reader(text, buffer);
            let mut out = Vec::new();
            let mut got = Vec::new();
            loop {
                match r.read_line(&mut out, 5).unwrap() {
                    Line::Eof => break,
                    kind => got.push((kind, String::from_utf8(out.clone()).unwrap())),
                }
            }
            assert_eq!(
                got,
                [
                    (Line::Full, "one".to_owned()),
                    (Line::Full, "two".to_owned()),
                    (Line::Full, String::new()),
                    (Line::TooLong, "three".to_owned()),
                    (Line::Full, "last".to_owned()),
                ],
                "buffer {buffer}"
            );
        }
    }

    #[test]
    fn seek_and_end_limit() {
        let mut r = reader(b"abc\ndef\nghi\n", 4);
        r.end = 8;
        let mut out = Vec::new();
        assert_eq!(r.read_line(&mut out, 10).unwrap(), Line::Full);
        let after_first = r.offset();
        assert_eq!(after_first, 4);
        assert_eq!(r.read_line(&mut out, 10).unwrap(), Line::Full);
        assert_eq!(out, b"def");
        assert_eq!(r.read_line(&mut out, 10).unwrap(), Line::Eof, "end limit");
        r.seek(after_first);
        assert_eq!(r.read_line(&mut out, 10).unwrap(), Line::Full);
        assert_eq!(out, b"def");
        r.seek(0);
        assert_eq!(r.read_line(&mut out, 10).unwrap(), Line::Full);
        assert_eq!(out, b"abc");
    }

    #[test]
    fn record_lines_skip_blank_lines_and_count_them() {
        let mut r = reader(b"\n  \r\nfirst\n\t\nsecond-is-long\n\n", 4);
        let (mut out, mut line_no) = (Vec::new(), 0);
        assert_eq!(
            r.read_record_line(&mut out, 6, &mut line_no).unwrap(),
            Line::Full
        );
        assert_eq!((out.as_slice(), line_no), (&b"first"[..], 3));
        let kind = r.read_record_line(&mut out, 6, &mut line_no).unwrap();
        assert_eq!(
            (kind, out.as_slice(), line_no),
            (Line::TooLong, &b"second"[..], 5)
        );
        assert_eq!(
            r.read_record_line(&mut out, 6, &mut line_no).unwrap(),
            Line::Eof
        );
        assert_eq!(line_no, 6, "the trailing blank line is counted too");
    }
}
