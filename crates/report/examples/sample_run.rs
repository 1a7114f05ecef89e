//! Writes a realistic sample result (a Go service and its Rust rewrite under a ramp, with
//! real histograms) and its HTML page, to look at the report without running load:
//!
//! ```sh
//! cargo run -p scalpel-report --example sample_run -- /tmp/sample.json /tmp/sample.html
//! # a second "machine" for trying `scalpel report merge`: HOST and SEED
//! cargo run -p scalpel-report --example sample_run -- /tmp/b.json - bench-2 8
//! ```

use std::path::PathBuf;
// Realistic result files built in code (the test kit's, a dev-dependency).
use scalpel_testkit::results as common;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let json = args.next().unwrap_or_else(|| "sample.json".into());
    let html = args.next().filter(|p| p.as_os_str() != "-");
    let host = args
        .next()
        .map_or_else(|| "bench-1".to_owned(), |h| h.display().to_string());
    let seed = args
        .next()
        .and_then(|s| s.to_str()?.parse().ok())
        .unwrap_or(7);
    let offered: Vec<f64> = (1..=7).map(|k| 2000.0 * f64::from(k)).collect();
    let run = common::go_vs_rust_ramp(&host, &offered, 10.0, seed);
    // A single-run merge recomputes the SLO verdicts and breaking points from the figures.
    let run = scalpel_report::merge(&[run])?;
    scalpel_report::write_json(&run, &json)?;
    if let Some(html) = html {
        std::fs::write(html, scalpel_report::html(&run))?;
    }
    print!("{}", scalpel_report::summary_table(&run));
    Ok(())
}
