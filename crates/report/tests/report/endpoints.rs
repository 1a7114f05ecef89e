//! A mix's endpoints and recorded traffic in result files: tables and the page show them,
//! merges add endpoint histograms exactly and refuse runs whose endpoints differ, and an
//! SLO naming an endpoint is judged again on the merged figures.

use crate::common;

use std::collections::BTreeMap;

use common::{Rng, run, step_with_values};
use scalpel_load::Slo;
use scalpel_load::result::{
    EndpointResult, LatencySummary, MalformedRecord, RecordedInfo, RunResult, StepResult,
    TargetResult, decode_histogram, encode_histogram, new_histogram,
};
use scalpel_report::{html, merge, summary_table};

/// An endpoint holding exactly `values` (µs).
fn endpoint(name: &str, values: &[u64]) -> EndpointResult {
    let mut h = new_histogram();
    for v in values {
        h.record(*v).unwrap();
    }
    EndpointResult {
        name: name.to_owned(),
        achieved_rps: values.len() as f64 / 10.0,
        requests: values.len() as u64,
        sent: values.len() as u64,
        answered: values.len() as u64,
        failed: 0,
        errors: 0,
        error_kinds: BTreeMap::new(),
        late: 0,
        not_sent: 0,
        interrupted: 0,
        latency_ms: LatencySummary::from_histogram(&h),
        histogram: encode_histogram(&h),
    }
}

fn latencies(seed: u64, n: usize, median_us: f64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| rng.log_normal(median_us, 0.6).max(1.0) as u64)
        .collect()
}

/// A step of a mix: `balance` fast, `stats` with the given median; the step holds both.
fn mixed_step(seed: u64, stats_median_us: f64) -> StepResult {
    let balance = latencies(seed, 600, 800.0);
    let stats = latencies(seed + 1, 300, stats_median_us);
    let all: Vec<u64> = balance.iter().chain(&stats).copied().collect();
    let mut step = step_with_values(0, Some(90.0), 10.0, &all);
    step.endpoints = vec![endpoint("balance", &balance), endpoint("stats", &stats)];
    step
}

fn mixed_run(host: &str, seed: u64, stats_median_us: f64, slo: Option<&str>) -> RunResult {
    let target = TargetResult {
        name: "go".to_owned(),
        url: "http://10.0.0.1:8080".to_owned(),
        connection: None,
        steps: vec![mixed_step(seed, stats_median_us)],
        breaking_point: None,
    };
    let mut r = run(host, "open", slo, vec![target]);
    r.config.request = "mix mix.toml (seed 1): balance 2, stats 1".to_owned();
    r
}

#[test]
fn the_table_and_the_page_show_every_endpoint() {
    let r = mixed_run("a", 1, 4000.0, None);
    let table = summary_table(&r);
    for name in ["balance", "stats"] {
        assert!(table.contains(&format!(": endpoint {name}")), "{table}");
    }
    // The endpoint blocks hold the step's figures less the offered rate.
    let stats_block = table.split(": endpoint stats").nth(1).unwrap();
    assert!(stats_block.contains("latency p99 ms"), "{stats_block}");
    assert!(!stats_block.contains("offered rps"), "{stats_block}");
    assert!(table.lines().all(|l| l.chars().count() <= 100), "{table}");
    let page = html(&r);
    let doc = roxmltree::Document::parse_with_options(
        &page,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("not well-formed: {e}"));
    let headings: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("h4"))
        .map(|n| n.text().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        headings,
        ["endpoints", "endpoint balance", "endpoint stats"]
    );
    // At a glance: a line per endpoint, with the same numbers as its block.
    let glance = table.split(": endpoints\n").nth(1).unwrap();
    let stats_line = glance.lines().find(|l| l.starts_with("stats ")).unwrap();
    let p99_row = stats_block
        .lines()
        .find(|l| l.starts_with("latency p99 ms"))
        .unwrap();
    let p99 = p99_row.split_whitespace().last().unwrap();
    assert!(stats_line.ends_with(p99), "{stats_line} / {p99_row}");
}

#[test]
fn a_merge_adds_each_endpoints_histograms() {
    let (a, b) = (
        mixed_run("a", 1, 4000.0, None),
        mixed_run("b", 7, 9000.0, None),
    );
    let merged = merge(&[a.clone(), b.clone()]).unwrap();
    let step = &merged.targets[0].steps[0];
    for (k, name) in ["balance", "stats"].iter().enumerate() {
        let e = &step.endpoints[k];
        assert_eq!(&e.name, name);
        let (x, y) = (
            &a.targets[0].steps[0].endpoints[k],
            &b.targets[0].steps[0].endpoints[k],
        );
        assert_eq!(e.requests, x.requests + y.requests);
        assert!((e.achieved_rps - (x.achieved_rps + y.achieved_rps)).abs() < 1e-9);
        let mut sum = decode_histogram(&x.histogram).unwrap();
        sum.add(decode_histogram(&y.histogram).unwrap()).unwrap();
        assert_eq!(e.latency_ms, LatencySummary::from_histogram(&sum), "{name}");
    }
    // Runs whose steps have other endpoints are not merged.
    let mut other = mixed_run("c", 3, 4000.0, None);
    other.targets[0].steps[0].endpoints[1].name = "history".to_owned();
    let refused = merge(&[a, other]).unwrap_err().to_string();
    assert!(
        refused.contains("different endpoints: [balance, stats] (run 1) vs [balance, history]"),
        "{refused}"
    );
}

#[test]
fn an_slo_naming_an_endpoint_is_judged_again_on_the_merged_figures() {
    let slo = "stats:p99<30ms";
    let with_stats = |host: &str, stats: Vec<u64>| {
        let balance = vec![500; 100];
        let all: Vec<u64> = balance.iter().chain(&stats).copied().collect();
        let mut step = step_with_values(0, Some(90.0), 10.0, &all);
        step.endpoints = vec![endpoint("balance", &balance), endpoint("stats", &stats)];
        let mut r = run(
            host,
            "open",
            Some(slo),
            vec![TargetResult {
                name: "go".to_owned(),
                url: "http://10.0.0.1:8080".to_owned(),
                connection: None,
                steps: vec![step],
                breaking_point: None,
            }],
        );
        let slo = Slo::parse(slo).unwrap();
        r.targets[0].breaking_point = slo.judge(&mut r.targets[0].steps);
        r
    };
    // One machine's stats answered 2000 times in 1 ms; the other's 300 times, 10 of them
    // in 40 ms: alone its p99 is 40 ms and breaks the SLO; merged, 10 of 2300 (0.43%) are
    // slow and the p99 is 1 ms: it holds. An "any part broke" rule would say it broke.
    let fast = with_stats("a", vec![1000; 2000]);
    let mut slow_values = vec![1000; 290];
    slow_values.extend([40_000; 10]);
    let slow = with_stats("b", slow_values);
    assert_eq!(fast.targets[0].steps[0].slo_held, Some(true));
    assert_eq!(slow.targets[0].steps[0].slo_held, Some(false));
    let reason = slow.targets[0].steps[0].slo_reason.clone().unwrap();
    assert!(reason.starts_with("stats: p99 40"), "{reason}");
    let merged = merge(&[fast, slow]).unwrap();
    let step = &merged.targets[0].steps[0];
    assert_eq!(step.endpoints[1].latency_ms.unwrap().p99, 1.0);
    assert_eq!(step.slo_held, Some(true), "{:?}", step.slo_reason);
    assert!(merged.targets[0].breaking_point.is_none());
}

#[test]
fn recorded_traffic_is_described_with_what_was_skipped_and_why() {
    let mut r = run(
        "a",
        "recorded",
        None,
        vec![TargetResult {
            name: "target".to_owned(),
            url: "http://10.0.0.1:8080".to_owned(),
            connection: None,
            steps: vec![step_with_values(0, Some(12.5), 8.0, &[900; 100])],
            breaking_point: None,
        }],
    );
    r.config.request = "recorded access.log (access-log)".to_owned();
    r.config.recorded = Some(RecordedInfo {
        file: "access.log".to_owned(),
        format: "access-log".to_owned(),
        schedule: "pool".to_owned(),
        speed: None,
        records: 130,
        usable: 100,
        skipped: [
            ("malformed".to_owned(), 7),
            ("unsafe_method".to_owned(), 23),
        ]
        .into_iter()
        .collect(),
        first_malformed: (0..5)
            .map(|i| MalformedRecord {
                line: 10 + i,
                message: "no [time] field".to_owned(),
            })
            .collect(),
        span_s: 8.0,
        looped: true,
    });
    let table = summary_table(&r);
    assert!(
        table.contains("access.log (access-log), 130 records, 100 usable\n  skipped: 7 malformed, 23 unsafe method\n"),
        "{table}"
    );
    for line in 10..15 {
        assert!(
            table.contains(&format!("malformed, line {line}: no [time] field")),
            "{table}"
        );
    }
    assert!(table.contains("LOOPED"), "{table}");
    let page = html(&r);
    assert!(page.contains("LOOPED") && page.contains("line 14: no [time] field"));
    // The info survives a merge; a pool any machine looped is looped.
    let mut other = r.clone();
    other.part_ids = vec!["b-1".to_owned()];
    other.machine.hosts = vec!["b".to_owned()];
    if let Some(info) = &mut other.config.recorded {
        info.looped = false;
    }
    r.config.recorded.as_mut().unwrap().looped = false;
    let merged = merge(&[r.clone(), other.clone()]).unwrap();
    assert!(!merged.config.recorded.as_ref().unwrap().looped);
    other.config.recorded.as_mut().unwrap().looped = true;
    let merged = merge(&[r, other]).unwrap();
    assert!(merged.config.recorded.as_ref().unwrap().looped);
}
