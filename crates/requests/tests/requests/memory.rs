//! #18.6: a data file must not take many times its size in memory.
//!
//! A 1 GB, 119M-line `--data` file took 7.6 GB of RSS (14.9 GB with a templated header and
//! body): one boxed string per value, a pre-rendered header value per row, and a vector of
//! body offsets sized to the row count. This test generates a ~200 MB data file of short
//! values in a temporary folder, loads it in a child process (this same test binary, so
//! nothing else shares its address space) with a templated header and body and a shuffled
//! order, and reads the child's peak RSS (`VmHWM`) from `/proc/self/status`.

use std::io::Write;
use std::path::Path;

use scalpel_requests::{
    DataSet, Order, RecordedSource, RenderedRequest, RequestSet, RequestTemplate, SourceOptions,
};

const CHILD_ENV: &str = "SCALPEL_REQUESTS_MEMORY_CHILD";
const LOG_CHILD_ENV: &str = "SCALPEL_REQUESTS_LOG_MEMORY_CHILD";

/// Runs the ignored test `name` of this binary in a child with `env` set to `path`, and
/// returns the numbers it printed as `KEY=value`.
fn run_child(name: &str, env: &str, path: &Path) -> impl Fn(&str) -> u64 {
    let output = scalpel_testkit::child_test(name)
        .env(env, path)
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    move |key: &str| -> u64 {
        let text = stdout
            .lines()
            .chain(stderr.lines())
            .find_map(|l| l.split_once(key).map(|(_, v)| v))
            .unwrap_or_else(|| panic!("no {key} in child output:\n{stdout}\n{stderr}"));
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect("number")
    }
}

/// Peak resident set size of this process in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmHWM value");
    kb * 1024
}

fn write_data_file(path: &Path, target_bytes: u64) -> (u64, u64) {
    let file = std::fs::File::create(path).expect("create data file");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let (mut written, mut lines) = (0u64, 0u64);
    while written < target_bytes {
        // 9–14 byte values: the short-id shape that made per-value overhead dominate.
        let line = format!("u{:x}-{}\n", lines.wrapping_mul(0x9E37_79B9), lines % 97);
        out.write_all(line.as_bytes()).expect("write data file");
        written += line.len() as u64;
        lines += 1;
    }
    out.flush().expect("flush data file");
    (written, lines)
}

#[test]
fn a_200mb_data_file_with_templated_header_and_body_stays_within_twice_its_size() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ids.txt");
    let (size, lines) = write_data_file(&path, 200 << 20);

    let report = run_child("memory::child_loads_the_data_file", CHILD_ENV, &path);
    let rows = report("ROWS=");
    let peak = report("PEAK_RSS=");
    assert_eq!(rows, lines, "every line became a row");
    let bound = 2 * size + (50 << 20);
    eprintln!(
        "data file {} MB, {lines} lines: child peak RSS {} MB (bound {} MB)",
        size >> 20,
        peak >> 20,
        bound >> 20
    );
    assert!(
        peak < bound,
        "peak RSS {} MB for a {} MB data file (bound {} MB)",
        peak >> 20,
        size >> 20,
        bound >> 20
    );
}

/// Run by the test above in a child process; does nothing when started any other way.
#[test]
#[ignore = "helper: started in a child process by the memory test"]
fn child_loads_the_data_file() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let data = DataSet::from_path(Path::new(&path)).expect("load data");
    let rows = data.len();
    let template = RequestTemplate::parse(
        "POST",
        "/v1/users/{id}/stats?days=30",
        &["X-User: <{id}>".to_owned()],
        Some("{{\"user\": \"{id}\"}}"),
    )
    .expect("template");
    let set = RequestSet::new(template, Some(data), Order::Shuffled { seed: 7 }).expect("bind");
    let mut out = RenderedRequest::default();
    for i in 0..100_000u64 {
        set.render_into(i * 7919, &mut out);
        assert!(out.path_and_query.starts_with("/v1/users/u"));
        assert!(out.body.starts_with(b"{\"user\": \"u"));
    }
    println!("ROWS={rows}");
    println!("PEAK_RSS={}", peak_rss());
}

/// Recorded files are streamed: reading a 100 MB access log twice (the counting pass at
/// open and a reader) must not grow with the file.
#[test]
fn a_100mb_access_log_is_read_in_constant_memory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("access.log");
    let file = std::fs::File::create(&path).expect("create log");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let (mut size, mut lines) = (0u64, 0u64);
    while size < 100 << 20 {
        let line = format!(
            "10.0.{}.{} - - [12/Mar/2026:14:{:02}:{:02} +0000] \"GET /v1/users/u{lines}/stats?days=30 HTTP/1.1\" 200 {} \"https://shop.example.com/\" \"Mozilla/5.0 (X11; Linux x86_64)\" 0.004\n",
            lines % 200,
            lines % 251,
            lines / 60_000 % 60,
            lines / 1_000 % 60,
            lines % 5_000
        );
        out.write_all(line.as_bytes()).expect("write log");
        size += line.len() as u64;
        lines += 1;
    }
    out.flush().expect("flush log");
    drop(out);

    let report = run_child("memory::child_reads_the_access_log", LOG_CHILD_ENV, &path);
    assert_eq!(report("RECORDS="), lines);
    let peak = report("PEAK_RSS=");
    eprintln!(
        "access log {} MB, {lines} lines: child peak RSS {} MB",
        size >> 20,
        peak >> 20
    );
    // The test binary itself takes a few MB; the file is 100 MB.
    assert!(
        peak < 40 << 20,
        "peak RSS {} MB reading a {} MB log",
        peak >> 20,
        size >> 20
    );
}

/// Run by the test above in a child process; does nothing when started any other way.
#[test]
#[ignore = "helper: started in a child process by the memory test"]
fn child_reads_the_access_log() {
    let Some(path) = std::env::var_os(LOG_CHILD_ENV) else {
        return;
    };
    let source = RecordedSource::open(Path::new(&path), SourceOptions::new()).expect("open log");
    let mut reader = source.reader();
    let mut out = RenderedRequest::default();
    let mut records = 0u64;
    while reader.next_into(&mut out).expect("read").is_some() {
        records += 1;
    }
    assert_eq!(records, source.len());
    println!("RECORDS={records}");
    println!("PEAK_RSS={}", peak_rss());
}
