//! What the CLI's test files share beyond the test kit (`scalpel_testkit`): reading the
//! output and the result files of a `scalpel` run.

use std::path::Path;
use std::process::Output;

use scalpel_testkit::{scalpel, scratch};
use serde_json::Value;

/// A JSON integer (panics when it is not one).
pub(crate) fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// A JSON number (panics when it is not one).
pub(crate) fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A run's stdout, as text.
pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A run's stderr, as text.
pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `scalpel load --no-progress --json DIR/NAME.json ARGS`: the exit code, the result
/// and the output.
pub(crate) fn load_json_in(dir: &Path, name: &str, args: &[&str]) -> (i32, Value, Output) {
    let json = dir.join(format!("{name}.json"));
    let mut all = vec!["load", "--no-progress", "--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = scalpel(&all);
    let code = out.status.code().unwrap_or(-1);
    let text = std::fs::read_to_string(&json).unwrap_or_else(|_| {
        panic!(
            "no JSON written (exit {code}); stderr: {}; stdout: {}",
            stderr(&out),
            stdout(&out)
        )
    });
    (code, serde_json::from_str(&text).unwrap(), out)
}

/// [`load_json_in`] a fresh scratch directory named after `test`.
pub(crate) fn load_json(test: &str, args: &[&str]) -> (i32, Value, Output) {
    load_json_in(&scratch(test), "out", args)
}

/// Bad input: `scalpel ARGS` exits 2 with one line on stderr, `scalpel: …` naming
/// `mention`, and nothing on stdout.
pub(crate) fn assert_one_line_error(args: &[&str], mention: &str) {
    let out = scalpel(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line, got: {err}");
    assert!(err.starts_with("scalpel: "), "{args:?}: {err}");
    assert!(
        err.contains(mention),
        "{args:?}: expected `{mention}` in: {err}"
    );
    assert!(out.stdout.is_empty(), "{args:?}");
}
