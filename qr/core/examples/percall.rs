//! The bare `qr_core::png`, timed per call over a given set of texts, so the Node
//! per-call bench (`qr/node/bench/percall.js`) can run it inside its own rotation and set
//! it beside every tier in ONE run (criterion's figures come from another run).
//!
//! ```text
//! percall --texts FILE [--ms MS]     # FILE: a JSON array of strings
//! percall --texts FILE --dump        # the PNGs as hex, for the byte-identity check
//! percall --texts FILE --calls N     # exactly N calls per text, no clock, no output
//! ```
//!
//! `--calls` is for instruction counts: `valgrind --tool=callgrind percall --texts F
//! --calls N` twice with different N; the difference over the difference of N is the
//! instructions of one call, start-up cancelled (`docs/qr.md`).
//!
//! Prints one JSON object on stdout: for every text, in order, `bytes`, `calls`,
//! `wall_us` and `cpu_us` per call and `png_len`. Each text gets 3 warm-up calls (as in
//! percall.js) and is then called for `MS` milliseconds of wall time, reading the clock
//! every 8 calls. CPU time is this thread's run time from `/proc/thread-self/schedstat`
//! (nanoseconds, the same counter `getrusage` sums for Node's `process.cpuUsage`);
//! `null` where that file does not exist. Bad arguments: one line on stderr, exit 2.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Calls between two clock reads: cheap next to even the shortest text (~30 µs).
const CALLS_PER_CLOCK_READ: u64 = 8;
const WARM_UP_CALLS: usize = 3;

struct Args {
    texts: Vec<String>,
    budget: Duration,
    dump: bool,
    calls: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut texts_file = None;
    let mut ms = 150.0_f64;
    let mut dump = false;
    let mut calls = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--texts" => texts_file = Some(it.next().ok_or("--texts needs a file")?),
            "--ms" => {
                let v = it.next().ok_or("--ms needs a number")?;
                ms = v
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| format!("--ms: not a positive number: {v}"))?;
            }
            "--dump" => dump = true,
            "--calls" => {
                let v = it.next().ok_or("--calls needs a number")?;
                calls = Some(
                    v.parse()
                        .map_err(|_| format!("--calls: not a count: {v}"))?,
                );
            }
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    let file = texts_file.ok_or("--texts FILE is required")?;
    let json = std::fs::read_to_string(&file).map_err(|e| format!("{file}: {e}"))?;
    let texts: Vec<String> = serde_json::from_str(&json)
        .map_err(|e| format!("{file}: not a JSON array of strings: {e}"))?;
    if texts.is_empty() {
        return Err(format!("{file}: no texts"));
    }
    Ok(Args {
        texts,
        budget: Duration::from_secs_f64(ms / 1e3),
        dump,
        calls,
    })
}

/// This thread's CPU time in ns (first field of schedstat: time spent running).
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn render(text: &str) -> Result<Vec<u8>, String> {
    qr_core::png(black_box(text)).map_err(|e| format!("{:?}: {e}", &text[..text.len().min(20)]))
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    if args.dump {
        let hex: Vec<String> = args
            .texts
            .iter()
            .map(|t| render(t).map(|png| png.iter().map(|b| format!("{b:02x}")).collect()))
            .collect::<Result<_, _>>()?;
        println!("{}", serde_json::json!({ "png_hex": hex }));
        return Ok(());
    }
    if let Some(calls) = args.calls {
        for text in &args.texts {
            for _ in 0..calls {
                black_box(render(text)?);
            }
        }
        return Ok(());
    }
    let mut rows = Vec::with_capacity(args.texts.len());
    for text in &args.texts {
        let mut png_len = 0;
        for _ in 0..WARM_UP_CALLS {
            png_len = render(text)?.len();
        }
        let cpu_start = thread_cpu_ns();
        let start = Instant::now();
        let mut calls = 0_u64;
        let mut elapsed = Duration::ZERO;
        while elapsed < args.budget {
            for _ in 0..CALLS_PER_CLOCK_READ {
                black_box(render(text)?);
            }
            calls += CALLS_PER_CLOCK_READ;
            elapsed = start.elapsed();
        }
        let cpu_us = thread_cpu_ns()
            .zip(cpu_start)
            .map(|(end, begin)| (end - begin) as f64 / 1e3 / calls as f64);
        rows.push(serde_json::json!({
            "bytes": text.len(),
            "calls": calls,
            "wall_us": elapsed.as_secs_f64() * 1e6 / calls as f64,
            "cpu_us": cpu_us,
            "png_len": png_len,
        }));
    }
    println!("{}", serde_json::json!({ "texts": rows }));
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("percall: {msg}");
            ExitCode::from(2)
        }
    }
}
