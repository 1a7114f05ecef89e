//! Data files: one value per line, or CSV with a header row.

use std::path::{Path, PathBuf};

use crate::RequestsError;

/// Values to fill a template's placeholders with: rows of named columns.
///
/// A *lines* data set has one column and binds to whatever single placeholder a template
/// uses; a CSV data set binds placeholders to columns by name.
#[derive(Debug, Clone)]
pub struct DataSet {
    /// File path or the name given to [`DataSet::from_lines`]; used in error messages.
    origin: String,
    kind: DataKind,
    columns: Vec<String>,
    /// Row-major cells: `cells[row * columns.len() + column]`.
    cells: Vec<Box<str>>,
    /// 1-based source line of each row, for error messages.
    lines: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataKind {
    Lines,
    Csv,
}

impl DataSet {
    /// Reads a data file. A name ending in `.csv` (any case) is CSV with a header row;
    /// anything else is one value per line (a trailing `\r` is stripped, blank lines are
    /// skipped).
    ///
    /// # Errors
    ///
    /// A missing or unreadable file, a file without values, a CSV row with a different
    /// number of fields than the header, a repeated column name, or bytes that are not
    /// UTF-8; each error names the path and, where it applies, the line.
    pub fn from_path(path: &Path) -> Result<DataSet, RequestsError> {
        let bytes = std::fs::read(path).map_err(|error| RequestsError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        let is_csv = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        if is_csv {
            parse_csv(path, &bytes)
        } else {
            parse_lines(path, &bytes)
        }
    }

    /// An in-memory one-column data set named `name` (the column and the data set take
    /// that name). Values are used exactly as given.
    pub fn from_lines(name: &str, values: Vec<String>) -> DataSet {
        let lines = (1..=values.len() as u64).collect();
        DataSet {
            origin: name.to_owned(),
            kind: DataKind::Lines,
            columns: vec![name.to_owned()],
            cells: values.into_iter().map(String::into_boxed_str).collect(),
            lines,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// True when there are no rows (only possible with [`DataSet::from_lines`]).
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Column names: the CSV header, or the single column of a lines data set (named
    /// after the file stem, or the name given to [`DataSet::from_lines`]).
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    pub(crate) fn origin(&self) -> &str {
        &self.origin
    }

    pub(crate) fn kind(&self) -> DataKind {
        self.kind
    }

    /// The cell at `row`, `column`; both must be in range.
    pub(crate) fn cell(&self, row: usize, column: usize) -> &str {
        &self.cells[row * self.columns.len() + column]
    }

    pub(crate) fn line_of(&self, row: usize) -> u64 {
        self.lines[row]
    }
}

fn parse_lines(path: &Path, bytes: &[u8]) -> Result<DataSet, RequestsError> {
    let mut cells = Vec::new();
    let mut lines = Vec::new();
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = index as u64 + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = std::str::from_utf8(raw).map_err(|_| RequestsError::NotUtf8 {
            path: path.to_path_buf(),
            line,
        })?;
        if text.trim().is_empty() {
            continue;
        }
        cells.push(Box::from(text));
        lines.push(line);
    }
    if cells.is_empty() {
        return Err(RequestsError::EmptyData {
            path: path.to_path_buf(),
        });
    }
    let column = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "value".to_owned());
    Ok(DataSet {
        origin: path.display().to_string(),
        kind: DataKind::Lines,
        columns: vec![column],
        cells,
        lines,
    })
}

fn parse_csv(path: &Path, bytes: &[u8]) -> Result<DataSet, RequestsError> {
    let owned_path = || -> PathBuf { path.to_path_buf() };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .trim(csv::Trim::Headers)
        .from_reader(bytes);
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
    let mut cells = Vec::new();
    let mut lines = Vec::new();
    let mut record = csv::ByteRecord::new();
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(csv_error(path, e)),
        }
        let line = record.position().map_or(0, |p| p.line());
        for field in &record {
            let text = std::str::from_utf8(field).map_err(|_| RequestsError::NotUtf8 {
                path: owned_path(),
                line,
            })?;
            cells.push(Box::from(text));
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return Err(RequestsError::EmptyData { path: owned_path() });
    }
    Ok(DataSet {
        origin: path.display().to_string(),
        kind: DataKind::Csv,
        columns,
        cells,
        lines,
    })
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
