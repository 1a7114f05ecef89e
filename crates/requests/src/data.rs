//! Data files: one value per line, or CSV with a header row.
//!
//! Values are kept in one compact buffer, not one allocation per cell (#18.6: a 1 GB file of
//! 119M short lines took 7.6 GB as boxed strings). Each row is stored as
//! `varint(line delta) (varint(len) bytes){columns}`; a checkpoint every [`CHECKPOINT`]
//! rows gives random access in at most `CHECKPOINT - 1` skipped rows. The file is read
//! streaming, so a data set costs about its values plus two bytes a row, whatever the file
//! size.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::RequestsError;

/// Rows between two random-access checkpoints: 8 bytes of index per 16 rows.
const CHECKPOINT: usize = 16;

/// Values to fill a template's placeholders with: rows of named columns.
///
/// A *lines* data set has one column and binds to whatever single placeholder a template
/// uses; a CSV data set binds placeholders to columns by name. Cloning is cheap (the
/// values are shared).
#[derive(Debug, Clone)]
pub struct DataSet {
    inner: Arc<Store>,
}

#[derive(Debug)]
struct Store {
    /// File path or the name given to [`DataSet::from_lines`]; used in error messages.
    origin: String,
    kind: DataKind,
    columns: Vec<String>,
    /// Rows, each `varint(line delta) (varint(len) bytes){columns}`; every value is UTF-8.
    cells: Vec<u8>,
    /// Offset in `cells` of rows 0, CHECKPOINT, 2·CHECKPOINT, …
    checkpoints: Vec<usize>,
    rows: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataKind {
    Lines,
    Csv,
}

/// Builds a [`Store`] row by row.
struct Builder {
    cells: Vec<u8>,
    checkpoints: Vec<usize>,
    rows: usize,
    last_line: u64,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            cells: Vec::new(),
            checkpoints: Vec::new(),
            rows: 0,
            last_line: 0,
        }
    }

    fn start_row(&mut self, line: u64) {
        if self.rows.is_multiple_of(CHECKPOINT) {
            self.checkpoints.push(self.cells.len());
        }
        push_varint(&mut self.cells, line.saturating_sub(self.last_line));
        self.last_line = line;
        self.rows += 1;
    }

    fn push_cell(&mut self, value: &[u8]) {
        push_varint(&mut self.cells, value.len() as u64);
        self.cells.extend_from_slice(value);
    }

    fn finish(mut self, origin: String, kind: DataKind, columns: Vec<String>) -> DataSet {
        // Growth by doubling leaves up to half the buffer unused (and, being untouched,
        // mostly not resident); give it back.
        self.cells.shrink_to_fit();
        self.checkpoints.shrink_to_fit();
        DataSet {
            inner: Arc::new(Store {
                origin,
                kind,
                columns,
                cells: self.cells,
                checkpoints: self.checkpoints,
                rows: self.rows,
            }),
        }
    }
}

impl DataSet {
    /// Reads a data file. A name ending in `.csv` (any case) is CSV with a header row;
    /// anything else is one value per line (a trailing `\r` is stripped, blank lines are
    /// skipped).
    ///
    /// The file is read streaming; the data set holds the values in one buffer (about
    /// the values' size plus two bytes a row), never the file itself.
    ///
    /// # Errors
    ///
    /// A missing or unreadable file, a file without values, a CSV row with a different
    /// number of fields than the header, a repeated column name, or bytes that are not
    /// UTF-8; each error names the path and, where it applies, the line.
    pub fn from_path(path: &Path) -> Result<DataSet, RequestsError> {
        let io = |error| RequestsError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let reader = BufReader::with_capacity(1 << 16, file);
        let is_csv = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        if is_csv {
            parse_csv(path, reader)
        } else {
            parse_lines(path, reader)
        }
    }

    /// An in-memory one-column data set named `name` (the column and the data set take
    /// that name). Values are used exactly as given.
    pub fn from_lines(name: &str, values: Vec<String>) -> DataSet {
        let mut builder = Builder::new();
        for (i, value) in values.iter().enumerate() {
            builder.start_row(i as u64 + 1);
            builder.push_cell(value.as_bytes());
        }
        builder.finish(name.to_owned(), DataKind::Lines, vec![name.to_owned()])
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.inner.rows
    }

    /// True when there are no rows (only possible with [`DataSet::from_lines`]).
    pub fn is_empty(&self) -> bool {
        self.inner.rows == 0
    }

    /// Column names: the CSV header, or the single column of a lines data set (named
    /// after the file stem, or the name given to [`DataSet::from_lines`]).
    pub fn columns(&self) -> &[String] {
        &self.inner.columns
    }

    /// Bytes held for the values and their index (for memory accounting in reports).
    pub fn heap_bytes(&self) -> usize {
        self.inner.cells.capacity() + self.inner.checkpoints.capacity() * size_of::<usize>()
    }

    pub(crate) fn origin(&self) -> &str {
        &self.inner.origin
    }

    pub(crate) fn kind(&self) -> DataKind {
        self.inner.kind
    }

    /// A view of row `row`, which must be in range (`row % len` is used otherwise, so
    /// this never panics on a non-empty set).
    pub(crate) fn row(&self, row: usize) -> Row<'_> {
        let store = &*self.inner;
        if store.rows == 0 {
            return Row {
                cells: &[],
                start: 0,
                columns: 0,
            };
        }
        let row = row % store.rows;
        let mut at = store.checkpoints[row / CHECKPOINT];
        for _ in 0..row % CHECKPOINT {
            at = skip_row(&store.cells, at, store.columns.len());
        }
        Row {
            cells: &store.cells,
            start: at,
            columns: store.columns.len(),
        }
    }

    /// Every row in order with its 1-based line in the file (row number for in-memory
    /// data).
    pub(crate) fn rows(&self) -> impl Iterator<Item = (u64, Row<'_>)> {
        let store = &*self.inner;
        let mut at = 0;
        let mut line = 0u64;
        (0..store.rows).map(move |_| {
            let (delta, after) = read_varint(&store.cells, at);
            line += delta;
            let row = Row {
                cells: &store.cells,
                start: at,
                columns: store.columns.len(),
            };
            at = skip_cells(&store.cells, after, store.columns.len());
            (line, row)
        })
    }
}

/// One row of a [`DataSet`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    cells: &'a [u8],
    /// Offset of the row's line delta.
    start: usize,
    columns: usize,
}

impl<'a> Row<'a> {
    /// The value of `column`, or "" when out of range.
    pub(crate) fn cell(&self, column: usize) -> &'a [u8] {
        if column >= self.columns {
            return &[];
        }
        let (_, mut at) = read_varint(self.cells, self.start);
        at = skip_cells(self.cells, at, column);
        let (len, at) = read_varint(self.cells, at);
        let end = at.saturating_add(len as usize).min(self.cells.len());
        self.cells.get(at..end).unwrap_or(&[])
    }
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 value at `at`; returns it and the offset after it. Total on any input.
fn read_varint(buf: &[u8], mut at: usize) -> (u64, usize) {
    let mut value = 0u64;
    let mut shift = 0u32;
    while let Some(&b) = buf.get(at) {
        at += 1;
        if shift < 64 {
            value |= u64::from(b & 0x7F) << shift;
        }
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    (value, at)
}

fn skip_cells(buf: &[u8], mut at: usize, cells: usize) -> usize {
    for _ in 0..cells {
        let (len, after) = read_varint(buf, at);
        at = after.saturating_add(len as usize);
    }
    at
}

fn skip_row(buf: &[u8], at: usize, columns: usize) -> usize {
    let (_, after) = read_varint(buf, at);
    skip_cells(buf, after, columns)
}

fn parse_lines(path: &Path, mut reader: impl BufRead) -> Result<DataSet, RequestsError> {
    let mut builder = Builder::new();
    let mut raw = Vec::new();
    let mut line = 0u64;
    loop {
        raw.clear();
        let n = reader
            .read_until(b'\n', &mut raw)
            .map_err(|error| RequestsError::Io {
                path: path.to_path_buf(),
                error,
            })?;
        if n == 0 {
            break;
        }
        line += 1;
        let mut text = raw.as_slice();
        text = text.strip_suffix(b"\n").unwrap_or(text);
        text = text.strip_suffix(b"\r").unwrap_or(text);
        let value = std::str::from_utf8(text).map_err(|_| RequestsError::NotUtf8 {
            path: path.to_path_buf(),
            line,
        })?;
        if value.trim().is_empty() {
            continue;
        }
        builder.start_row(line);
        builder.push_cell(text);
    }
    if builder.rows == 0 {
        return Err(RequestsError::EmptyData {
            path: path.to_path_buf(),
        });
    }
    let column = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "value".to_owned());
    Ok(builder.finish(path.display().to_string(), DataKind::Lines, vec![column]))
}

fn parse_csv(path: &Path, reader: impl BufRead) -> Result<DataSet, RequestsError> {
    let owned_path = || -> PathBuf { path.to_path_buf() };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .trim(csv::Trim::Headers)
        .from_reader(reader);
    let header = reader
        .byte_headers()
        .map_err(|e| csv_error(path, e))?
        .clone();
    if header.is_empty() {
        return Err(RequestsError::EmptyData { path: owned_path() });
    }
    let mut columns = Vec::with_capacity(header.len());
    for field in &header {
        let name = std::str::from_utf8(field).map_err(|_| RequestsError::NotUtf8 {
            path: owned_path(),
            line: header.position().map_or(1, |p| p.line()),
        })?;
        if columns.iter().any(|c| c == name) {
            return Err(RequestsError::DuplicateColumn {
                path: owned_path(),
                column: name.to_owned(),
            });
        }
        columns.push(name.to_owned());
    }
    let mut builder = Builder::new();
    let mut record = csv::ByteRecord::new();
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(csv_error(path, e)),
        }
        let line = record.position().map_or(0, |p| p.line());
        builder.start_row(line);
        for field in &record {
            std::str::from_utf8(field).map_err(|_| RequestsError::NotUtf8 {
                path: owned_path(),
                line,
            })?;
            builder.push_cell(field);
        }
    }
    if builder.rows == 0 {
        return Err(RequestsError::EmptyData { path: owned_path() });
    }
    Ok(builder.finish(path.display().to_string(), DataKind::Csv, columns))
}

fn csv_error(path: &Path, error: csv::Error) -> RequestsError {
    let line = error.position().map_or(0, |p| p.line());
    let message = error.to_string();
    match error.into_kind() {
        csv::ErrorKind::UnequalLengths {
            pos,
            expected_len,
            len,
        } => RequestsError::RaggedRow {
            path: path.to_path_buf(),
            line: pos.map_or(line, |p| p.line()),
            expected: expected_len as usize,
            found: len as usize,
        },
        csv::ErrorKind::Utf8 { pos, .. } => RequestsError::NotUtf8 {
            path: path.to_path_buf(),
            line: pos.map_or(line, |p| p.line()),
        },
        csv::ErrorKind::Io(error) => RequestsError::Io {
            path: path.to_path_buf(),
            error,
        },
        _ => RequestsError::Csv {
            path: path.to_path_buf(),
            line,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            push_varint(&mut buf, v);
            assert_eq!(read_varint(&buf, 0), (v, buf.len()), "{v}");
        }
        // Truncated or overlong input is total, never a panic.
        assert_eq!(read_varint(&[0x80, 0x80], 0).1, 2);
        assert_eq!(read_varint(&[0xFF; 20], 0).1, 20);
    }

    #[test]
    fn random_access_matches_sequential_across_checkpoints() {
        let values: Vec<String> = (0..100)
            .map(|i| "v".repeat(i % 7) + &i.to_string())
            .collect();
        let data = DataSet::from_lines("v", values.clone());
        for (i, want) in values.iter().enumerate() {
            assert_eq!(data.row(i).cell(0), want.as_bytes(), "row {i}");
        }
        let lines: Vec<u64> = data.rows().map(|(line, _)| line).collect();
        assert_eq!(lines, (1..=100).collect::<Vec<u64>>());
        assert_eq!(data.row(0).cell(5), b"", "a column out of range is empty");
    }
}
