//! Data files on disk: lines and CSV, good and broken, bound to templates.

use std::path::{Path, PathBuf};

use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate, RequestsError};

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write data file");
    path
}

fn get(path: &str) -> RequestTemplate {
    RequestTemplate::parse("GET", path, &[], None).expect("template")
}

fn error_text(err: &RequestsError, path: &Path) -> String {
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "the error does not name the file: {text}"
    );
    text
}

#[test]
fn lines_file_strips_cr_and_skips_blank_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "ids.txt", b"u1\r\n\r\n  \nu 2\nu3");
    let data = DataSet::from_path(&path).unwrap();
    assert_eq!(data.len(), 3);
    assert!(!data.is_empty());
    assert_eq!(data.columns(), ["ids"]);
    let set = RequestSet::new(
        get("/v1/users/{id}/stats?days=30"),
        Some(data),
        Order::Sequential,
    )
    .unwrap();
    let paths: Vec<String> = (0..3).map(|i| set.render(i).path_and_query).collect();
    assert_eq!(
        paths,
        [
            "/v1/users/u1/stats?days=30",
            "/v1/users/u%202/stats?days=30",
            "/v1/users/u3/stats?days=30"
        ]
    );
}

#[test]
fn sixteen_thousand_ids_shuffled_cover_every_id_once_per_round() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..16_000).map(|i| format!("user-{i:05}")).collect();
    let path = write(&dir, "users.txt", (ids.join("\n") + "\n").as_bytes());
    let set = RequestSet::new(
        get("/v1/users/{id}/stats?days=30"),
        Some(DataSet::from_path(&path).unwrap()),
        Order::Shuffled { seed: 2024 },
    )
    .unwrap();
    assert_eq!(set.len(), 16_000);
    let mut seen: Vec<String> = (0..16_000u64)
        .map(|i| {
            let p = set.render(i).path_and_query;
            p["/v1/users/".len()..p.len() - "/stats?days=30".len()].to_owned()
        })
        .collect();
    assert_ne!(seen[..10], ids[..10], "not shuffled");
    seen.sort();
    assert_eq!(seen, ids);
}

#[test]
fn csv_binds_columns_by_name_with_quoting() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "rows.CSV",
        b"id , currency,note\n7,EUR,\"a, quoted \"\"note\"\"\"\n8,USD,plain\n",
    );
    let data = DataSet::from_path(&path).unwrap();
    assert_eq!(data.columns(), ["id", "currency", "note"]);
    let template = RequestTemplate::parse(
        "POST",
        "/v1/accounts/{id}/balance?currency={currency}",
        &["X-Note: {note}".to_owned()],
        Some("{{\"id\":{id}}}"),
    )
    .unwrap();
    let set = RequestSet::new(template, Some(data), Order::Sequential).unwrap();
    let first = set.render(0);
    assert_eq!(first.method, http::Method::POST);
    assert_eq!(first.path_and_query, "/v1/accounts/7/balance?currency=EUR");
    assert_eq!(first.headers[0].1, "a, quoted \"note\"");
    assert_eq!(first.body, "{\"id\":7}");
    assert_eq!(
        set.render(1).path_and_query,
        "/v1/accounts/8/balance?currency=USD"
    );
}

#[test]
fn csv_placeholder_that_is_not_a_column_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "one.csv", b"id\n1\n");
    let err = RequestSet::new(
        get("/u/{user}"),
        Some(DataSet::from_path(&path).unwrap()),
        Order::Sequential,
    )
    .unwrap_err();
    let text = error_text(&err, &path);
    assert!(text.contains("{user}") && text.contains("id"), "{text}");
}

#[test]
fn ragged_csv_row_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "ragged.csv", b"a,b\n1,2\n3,4\n5\n");
    let err = DataSet::from_path(&path).unwrap_err();
    assert!(
        matches!(
            err,
            RequestsError::RaggedRow {
                line: 4,
                expected: 2,
                found: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let text = error_text(&err, &path);
    assert!(text.contains("line 4"), "{text}");
}

#[test]
fn csv_with_a_repeated_column_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "dup.csv", b"id,id\n1,2\n");
    let err = DataSet::from_path(&path).unwrap_err();
    assert!(matches!(err, RequestsError::DuplicateColumn { ref column, .. } if column == "id"));
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.txt");
    let err = DataSet::from_path(&path).unwrap_err();
    assert!(matches!(err, RequestsError::Io { .. }), "{err:?}");
    error_text(&err, &path);
}

#[test]
fn empty_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("empty.txt", &b""[..]),
        ("blank.txt", b"\n\r\n   \n"),
        ("header-only.csv", b"id,name\n"),
        ("empty.csv", b""),
    ] {
        let path = write(&dir, name, bytes);
        let err = DataSet::from_path(&path).unwrap_err();
        assert!(
            matches!(err, RequestsError::EmptyData { .. }),
            "{name}: {err:?}"
        );
        error_text(&err, &path);
    }
}

#[test]
fn non_utf8_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "latin1.txt", b"ok\n\nfine\ncaf\xe9\n");
    let err = DataSet::from_path(&path).unwrap_err();
    assert!(
        matches!(err, RequestsError::NotUtf8 { line: 4, .. }),
        "{err:?}"
    );
    assert!(error_text(&err, &path).contains("line 4"));

    let path = write(&dir, "latin1.csv", b"id\nok\ncaf\xe9\n");
    let err = DataSet::from_path(&path).unwrap_err();
    assert!(
        matches!(err, RequestsError::NotUtf8 { line: 3, .. }),
        "{err:?}"
    );
}

#[test]
fn bad_row_in_a_file_names_the_file_line() {
    let dir = tempfile::tempdir().unwrap();
    // Line 3 is blank and skipped; the bad value is on line 4.
    let path = write(&dir, "tokens.txt", b"abc\ndef\n\nbad\x01token\n");
    let template = RequestTemplate::parse(
        "GET",
        "/",
        &["Authorization: Bearer {token}".to_owned()],
        None,
    )
    .unwrap();
    let err = RequestSet::new(
        template,
        Some(DataSet::from_path(&path).unwrap()),
        Order::Sequential,
    )
    .unwrap_err();
    assert!(
        matches!(err, RequestsError::InvalidRow { line: 4, .. }),
        "{err:?}"
    );
    error_text(&err, &path);
}

#[test]
fn shared_between_threads() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "n.txt", b"1\n2\n3\n4\n");
    let set = std::sync::Arc::new(
        RequestSet::new(
            get("/n/{n}"),
            Some(DataSet::from_path(&path).unwrap()),
            Order::Sequential,
        )
        .unwrap(),
    );
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let set = std::sync::Arc::clone(&set);
            std::thread::spawn(move || set.render(t).path_and_query)
        })
        .collect();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, ["/n/1", "/n/2", "/n/3", "/n/4"]);
}
