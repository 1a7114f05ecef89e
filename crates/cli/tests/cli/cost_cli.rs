//! `scalpel report cost` on result files made the real way: `scalpel load` against two real
//! server processes on loopback (this test binary re-run as a child), their CPU sampled
//! from /proc; then the projection is checked against the same arithmetic done here from
//! the file's own figures, in integers for the money.
//!
//! No timed assertions: the only comparison between the servers is that the one doing
//! eight times the work per request spends more CPU per request.

use std::io::{Read, Write};
use std::process::Output;

use scalpel_testkit::raw::serve_requests;
use scalpel_testkit::{ChildServer, child_server, scalpel, scratch};

use crate::util::assert_one_line_error;
use serde_json::Value;

/// A child server: answers every request after `SCALPEL_COST_TEST_WORK` rounds of a hash
/// loop, a fixed amount of CPU work per request whatever the machine's load.
#[test]
#[ignore = "helper process for the cost tests"]
fn cost_child_server() {
    let Some(work) = std::env::var_os("SCALPEL_COST_TEST_WORK") else {
        return;
    };
    let work: u64 = work.to_str().unwrap().parse().unwrap();
    let port = serve_requests(move |_, writer| {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..work {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x = x.wrapping_add(i);
        }
        let body = format!("{}\n", std::hint::black_box(x) % 10);
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        writer.write_all(reply.as_bytes()).is_ok()
    });
    println!("PORT {port}");
    std::io::stdout().flush().unwrap();
    // Live until the parent closes our stdin (or kills us).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0);
}

fn start_child(work: u64) -> ChildServer {
    child_server(
        "cost_cli::cost_child_server",
        &[("SCALPEL_COST_TEST_WORK", &work.to_string())],
    )
}

fn ok(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The projection of a real two-step ramp, recomputed here from the file's own figures.
#[test]
fn cost_of_a_real_run_matches_the_arithmetic_and_bad_input_exits_2() {
    let heavy = start_child(400_000);
    let light = start_child(50_000);
    let dir = scratch("real");
    let ramp = dir.join("ramp.json");
    let (heavy_pid, light_pid) = (heavy.child.id(), light.child.id());
    let out = scalpel(&[
        "load",
        "--no-progress",
        "--ramp",
        "50,50,100",
        "--step-duration",
        "2s",
        "--threads",
        "1",
        "-c",
        "4",
        "--target",
        &format!("heavy=http://127.0.0.1:{}", heavy.port),
        "--target",
        &format!("light=http://127.0.0.1:{}", light.port),
        "--watch-pid",
        &format!("heavy={heavy_pid}"),
        "--watch-pid",
        &format!("light={light_pid}"),
        "--json",
        ramp.to_str().unwrap(),
        "/",
    ]);
    ok(&out);
    let ramp_s = ramp.to_str().unwrap();

    let out = scalpel(&[
        "report",
        "cost",
        ramp_s,
        "--step",
        "2",
        "--fleet-qps",
        "250000",
        "--vcpu-hour-price",
        "0.0416",
        "--headroom",
        "0.25",
        "--json",
    ]);
    let projection: Value = serde_json::from_str(&ok(&out)).unwrap();

    // The same arithmetic, done here from the result file.
    let run: Value = serde_json::from_str(&std::fs::read_to_string(&ramp).unwrap()).unwrap();
    let mut vcpus = Vec::new();
    for (i, target) in run["targets"].as_array().unwrap().iter().enumerate() {
        let s = &target["steps"][1];
        let cpu = s["cpu_percent"].as_f64().expect("CPU sampled");
        let rps = s["achieved_rps"].as_f64().unwrap();
        let exact = 250_000.0 * (cpu / 100.0 / rps) / (1.0 - 0.25);
        let whole = (exact - 1e-9).ceil() as i64;
        let t = &projection["targets"][i];
        assert_eq!(t["name"], target["name"]);
        assert!((t["vcpu_exact"].as_f64().unwrap() - exact).abs() < 1e-6 * exact.max(1.0));
        let us = t["cpu_us_per_request"].as_f64().unwrap();
        assert!((us - cpu / 100.0 / rps * 1e6).abs() < 1e-6 * us);
        assert_eq!(t["vcpu"].as_i64(), Some(whole), "{t}");
        vcpus.push(whole);
    }
    // Eight times the work per request costs more CPU per request.
    assert!(vcpus[0] > vcpus[1], "heavy needs more vCPUs: {vcpus:?}");
    let saved = vcpus[0] - vcpus[1];
    // Money in integers: 0.0416 $/vCPU-h = 41,600 µ$; × 8,760 h; to cents, half away from 0.
    let micros = i128::from(saved) * 41_600 * 8_760;
    let cents = (micros + 5_000) / 10_000;
    assert_eq!(projection["vcpu_saved"].as_i64(), Some(saved));
    assert_eq!(
        projection["yearly_saving_cents"].as_i64(),
        Some(cents as i64)
    );
    assert_eq!(projection["hours_per_year"], 8760);
    assert_eq!(projection["vcpu_hour_price_micros"], 41_600);
    assert_eq!(projection["step"], 2);
    assert_eq!(projection["baseline"], "heavy");

    // The table shows the same numbers, the formula filled in, money to the cent.
    let table = ok(&scalpel(&[
        "report",
        "cost",
        ramp_s,
        "--step",
        "2",
        "--fleet-qps",
        "250000",
        "--vcpu-hour-price",
        "0.0416",
        "--headroom",
        "0.25",
    ]));
    let dollars = format!("{}.{:02}", cents / 100, cents % 100);
    let grouped = group(&dollars);
    assert!(
        table.contains(&format!("${grouped}")),
        "{grouped} in {table}"
    );
    assert!(
        table.contains("250,000 req/s ×") && table.contains("÷ (1 − 0.25)"),
        "{table}"
    );
    assert!(
        table.contains("× $0.0416/vCPU-hour × 8,760 h/year"),
        "{table}"
    );

    // Bad input: one line, exit 2.
    let base = ["report", "cost", ramp_s];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    assert_one_line_error(
        &with(&["--fleet-qps", "1000", "--vcpu-hour-price", "0.04"]),
        "--step",
    );
    assert_one_line_error(
        &with(&[
            "--step",
            "3",
            "--fleet-qps",
            "1000",
            "--vcpu-hour-price",
            "0.04",
        ]),
        "no step 3",
    );
    assert_one_line_error(
        &with(&[
            "--step",
            "1",
            "--fleet-qps",
            "0",
            "--vcpu-hour-price",
            "0.04",
        ]),
        "fleet rate",
    );
    assert_one_line_error(
        &with(&[
            "--step",
            "1",
            "--fleet-qps",
            "abc",
            "--vcpu-hour-price",
            "0.04",
        ]),
        "fleet-qps",
    );
    assert_one_line_error(
        &with(&["--step", "1", "--fleet-qps", "1000", "--vcpu-hour-price=-1"]),
        "price",
    );
    assert_one_line_error(
        &with(&[
            "--step",
            "1",
            "--fleet-qps",
            "1000",
            "--vcpu-hour-price",
            "4 cents",
        ]),
        "price",
    );
    assert_one_line_error(
        &with(&[
            "--step",
            "1",
            "--fleet-qps",
            "1000",
            "--vcpu-hour-price",
            "0.04",
            "--headroom",
            "1",
        ]),
        "headroom",
    );
    assert_one_line_error(
        &[
            "report",
            "cost",
            dir.join("missing.json").to_str().unwrap(),
            "--fleet-qps",
            "1000",
            "--vcpu-hour-price",
            "0.04",
        ],
        "missing.json",
    );

    // A run made without watching any process has no CPU to project from.
    let unwatched = dir.join("unwatched.json");
    ok(&scalpel(&[
        "load",
        "--no-progress",
        "-n",
        "20",
        "-c",
        "2",
        "--json",
        unwatched.to_str().unwrap(),
        &format!("http://127.0.0.1:{}/", light.port),
    ]));
    assert_one_line_error(
        &[
            "report",
            "cost",
            unwatched.to_str().unwrap(),
            "--fleet-qps",
            "1000",
            "--vcpu-hour-price",
            "0.04",
        ],
        "--watch-pid",
    );
}

/// `1234567.89` → `1,234,567.89`.
fn group(number: &str) -> String {
    let (int, frac) = number.split_once('.').unwrap();
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out}.{frac}")
}
