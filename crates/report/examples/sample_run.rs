//! Writes a realistic sample result (a Go service and its Rust rewrite under a ramp, with
//! real histograms) and its HTML page, to look at the report without running load:
//!
//! ```sh
//! cargo run -p scalpel-report --example sample_run -- /tmp/sample.json /tmp/sample.html
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let json = args.next().unwrap_or_else(|| "sample.json".into());
    let html = args.next();
    let offered: Vec<f64> = (1..=7).map(|k| 2000.0 * f64::from(k)).collect();
    let run = common::go_vs_rust_ramp("bench-1", &offered, 10.0, 7);
    // A single-run merge recomputes the SLO verdicts and breaking points from the figures.
    let run = scalpel_report::merge(&[run])?;
    scalpel_report::write_json(&run, &json)?;
    if let Some(html) = html {
        std::fs::write(html, scalpel_report::html(&run))?;
    }
    print!("{}", scalpel_report::summary_table(&run));
    Ok(())
}
