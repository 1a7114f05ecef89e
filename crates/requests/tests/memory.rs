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
use std::process::Command;

use scalpel_requests::{DataSet, Order, RenderedRequest, RequestSet, RequestTemplate};

const CHILD_ENV: &str = "SCALPEL_REQUESTS_MEMORY_CHILD";

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

    let exe = std::env::current_exe().expect("test binary");
    let output = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "child_loads_the_data_file",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    let report = |key: &str| -> u64 {
        let text = stdout
            .lines()
            .chain(stderr.lines())
            .find_map(|l| l.split_once(key).map(|(_, v)| v))
            .unwrap_or_else(|| panic!("no {key} in child output:\n{stdout}\n{stderr}"));
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect("number")
    };
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
