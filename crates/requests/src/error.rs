use std::path::PathBuf;

/// What went wrong while reading data, parsing a template or binding the two.
///
/// Every variant names what a user needs to fix it: the file and line, the template and
/// the column, the placeholder, or the data row.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestsError {
    /// The data file could not be opened or read.
    // The cause is part of the message and deliberately not a `source`, so a report that
    // prints the error chain shows it once.
    #[error("cannot read data file {}: {error}", path.display())]
    Io {
        /// The data file.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// The data file holds no values (no non-blank line, or a CSV header and no rows).
    #[error("data file {} has no values", path.display())]
    EmptyData {
        /// The data file.
        path: PathBuf,
    },
    /// A line of the data file is not valid UTF-8.
    #[error("data file {}, line {line}: not valid UTF-8", path.display())]
    NotUtf8 {
        /// The data file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
    },
    /// A CSV row has a different number of fields than the header.
    #[error(
        "data file {}, line {line}: {found} fields, but the header has {expected}",
        path.display()
    )]
    RaggedRow {
        /// The data file.
        path: PathBuf,
        /// 1-based line number of the row.
        line: u64,
        /// Fields in the header.
        expected: usize,
        /// Fields in this row.
        found: usize,
    },
    /// The CSV header names the same column twice.
    #[error("data file {}: column {column:?} appears twice in the header", path.display())]
    DuplicateColumn {
        /// The data file.
        path: PathBuf,
        /// The repeated column name.
        column: String,
    },
    /// Any other CSV syntax error.
    #[error("data file {}, line {line}: {message}", path.display())]
    Csv {
        /// The data file.
        path: PathBuf,
        /// 1-based line number (0 when the CSV reader could not tell).
        line: u64,
        /// What the CSV reader reported.
        message: String,
    },
    /// The template text is malformed (unclosed `{`, bad placeholder name, ...).
    #[error("{part} template {template:?}, column {column}: {message}")]
    Template {
        /// Which part of the request: "path", "header" or "body".
        part: &'static str,
        /// The template text as given.
        template: String,
        /// 1-based character position of the problem.
        column: usize,
        /// What is wrong there.
        message: String,
    },
    /// The HTTP method is not a valid token.
    #[error("invalid HTTP method {method:?}")]
    Method {
        /// The method as given.
        method: String,
    },
    /// A header is not of the form `Name: value`, or its name or literal value is invalid.
    #[error("header {header:?}: {message}")]
    Header {
        /// The header as given.
        header: String,
        /// What is wrong with it.
        message: String,
    },
    /// The template uses placeholders but no data was given.
    #[error("placeholder {{{placeholder}}} in {template:?} needs a data file, but none was given")]
    NoData {
        /// The first placeholder of the template.
        placeholder: String,
        /// The text that holds it: the path template, a header or the body.
        template: String,
    },
    /// A placeholder does not name a column of the data.
    #[error("placeholder {{{placeholder}}} is not a column of {data} (columns: {})", columns.join(", "))]
    UnboundPlaceholder {
        /// The placeholder name.
        placeholder: String,
        /// The data set (file path or name).
        data: String,
        /// The columns the data has.
        columns: Vec<String>,
    },
    /// A data row renders a request that is not valid HTTP (a header value with a
    /// newline, a raw path value with a space, ...). Checked for every row at bind time.
    #[error("{data}, line {line}: {message}")]
    InvalidRow {
        /// The data set (file path or name).
        data: String,
        /// 1-based line of the row in the data file (row number for in-memory data).
        line: u64,
        /// What would be invalid.
        message: String,
    },
    /// A shuffled order is limited to 2³² rows (the permutation holds 32-bit row numbers).
    #[error("{data}: {rows} rows are too many to shuffle (at most 4294967295)")]
    TooManyRows {
        /// The data set (file path or name).
        data: String,
        /// Rows in the data.
        rows: u64,
    },
    /// A request body would exceed [`MAX_BODY`](crate::MAX_BODY).
    #[error("{}the body would be {size} bytes, over the limit of {max}", body_origin(data, *line))]
    BodyTooLarge {
        /// The data set (file path or name); empty for a fixed body.
        data: String,
        /// 1-based line of the row in the data file (0 for a fixed body).
        line: u64,
        /// Bytes the body would have.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A mix file is malformed: TOML syntax, an unknown key, a bad request entry.
    #[error("mix file {}, line {line}: {message}", path.display())]
    Mix {
        /// The mix file.
        path: PathBuf,
        /// 1-based line of the problem (0 when the whole file is at fault).
        line: u64,
        /// What is wrong, naming the request entry where it applies.
        message: String,
    },
    /// A recorded-traffic file (or a file a mix names) could not be opened or read.
    #[error("cannot read {}: {error}", path.display())]
    SourceIo {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// The format of a recorded-traffic file could not be told from its content.
    #[error("{}: {message}", path.display())]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        message: String,
    },
    /// A recorded-traffic file holds no request that passes the filters.
    #[error("{}: no usable request ({detail})", path.display())]
    NoUsableRequest {
        /// The file.
        path: PathBuf,
        /// What was read and why each record was skipped, in words.
        detail: String,
    },
    /// A recorded-traffic file changed while it was being replayed (it became shorter).
    #[error("{}: the file changed while it was read ({message})", path.display())]
    SourceChanged {
        /// The file.
        path: PathBuf,
        /// What was found.
        message: String,
    },
    /// A filter or rewrite option is invalid: a bad regular expression, method or header.
    #[error("{option} {value:?}: {message}")]
    InvalidOption {
        /// The option, e.g. "include-path".
        option: &'static str,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        message: String,
    },
    /// The capture file could not be created, written or rotated.
    #[error("capture file {}: {error}", path.display())]
    Capture {
        /// The capture file.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
}

fn body_origin(data: &str, line: u64) -> String {
    if data.is_empty() {
        String::new()
    } else {
        format!("{data}, line {line}: ")
    }
}
