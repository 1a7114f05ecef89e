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
        /// The path template.
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
}
