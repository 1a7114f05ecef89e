//! The library against real histograms, real files and an independent XML parser.

mod common;

use std::collections::BTreeMap;

use common::{Rng, run, step_with_values};
use scalpel_load::result::{
    LatencySummary, RunResult, TargetResult, decode_histogram, new_histogram,
};
use scalpel_report::{
    MergeOptions, ReportError, html, merge, merge_with, read_json, read_json_for_merge,
    summary_table, to_json_string, write_json,
};

fn target(name: &str, steps: Vec<scalpel_load::result::StepResult>) -> TargetResult {
    TargetResult {
        name: name.to_owned(),
        url: format!("http://127.0.0.1/{name}"),
        connection: None,
        steps,
        breaking_point: None,
    }
}

/// Latencies in microseconds, log-normal around `median_us`.
fn latencies(seed: u64, n: usize, median_us: f64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| rng.log_normal(median_us, 0.6).max(1.0) as u64)
        .collect()
}

#[test]
fn merged_percentiles_equal_those_of_one_histogram_holding_all_values() {
    // Two machines with different latency profiles: averaging their percentiles would be
    // wrong; the merge must equal one histogram fed with every value.
    let a_go = latencies(1, 30_000, 2_000.0);
    let b_go = latencies(2, 10_000, 9_000.0);
    let a_rust = latencies(3, 30_000, 700.0);
    let b_rust = latencies(4, 10_000, 1_500.0);
    let mut a_step = step_with_values(0, Some(3000.0), 10.0, &a_go);
    a_step.errors = 7;
    a_step.error_kinds = BTreeMap::from([("timeout".to_owned(), 5), ("status_503".to_owned(), 2)]);
    a_step.late = 11;
    a_step.not_sent = 3;
    let mut b_step = step_with_values(0, Some(3000.0), 10.5, &b_go);
    b_step.errors = 1;
    b_step.error_kinds = BTreeMap::from([("timeout".to_owned(), 1)]);
    b_step.late = 4;
    let a = run(
        "host-a",
        "open",
        None,
        vec![
            target("go", vec![a_step]),
            target(
                "rust",
                vec![step_with_values(0, Some(3000.0), 10.0, &a_rust)],
            ),
        ],
    );
    let b = run(
        "host-b",
        "open",
        None,
        vec![
            // Targets in a different order: matched by name, not position.
            target(
                "rust",
                vec![step_with_values(0, Some(3000.0), 10.5, &b_rust)],
            ),
            target("go", vec![b_step]),
        ],
    );

    let merged = merge(&[a.clone(), b.clone()]).unwrap();

    assert_eq!(merged.machine.hosts, ["host-a", "host-b"]);
    assert_eq!(
        merged
            .targets
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["go", "rust"]
    );
    for (name, values) in [("go", [&a_go, &b_go]), ("rust", [&a_rust, &b_rust])] {
        let mut all = new_histogram();
        for v in values.iter().flat_map(|v| v.iter()) {
            all.record(*v).unwrap();
        }
        let step = &merged
            .targets
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .steps[0];
        assert_eq!(
            step.latency_ms,
            LatencySummary::from_histogram(&all),
            "{name}"
        );
        let back = decode_histogram(&step.histogram).unwrap();
        assert_eq!(back.len(), all.len());
        assert_eq!(
            back, all,
            "{name}: merged histogram differs from the union of values"
        );
        assert_eq!(step.requests, 40_000);
        assert_eq!(step.offered_rps, Some(6000.0));
        assert_eq!(step.duration_s, 10.5);
    }
    // The merged p99 is not the mean of the two p99s.
    let go = &merged.targets[0].steps[0];
    let p99 = |s: &scalpel_load::result::StepResult| s.latency_ms.unwrap().p99;
    let mean_of_p99 = (p99(&a.targets[0].steps[0]) + p99(&b.targets[1].steps[0])) / 2.0;
    assert_ne!(p99(go), mean_of_p99);
    assert_eq!(go.errors, 8);
    assert_eq!(
        go.error_kinds,
        BTreeMap::from([("timeout".to_owned(), 6), ("status_503".to_owned(), 2)])
    );
    assert_eq!((go.late, go.not_sent), (15, 3));
    let expected_rps = 30_000.0 / 10.0 + 10_000.0 / 10.5;
    assert!((go.achieved_rps - expected_rps).abs() < 1e-9);
}

#[test]
fn resource_figures_are_kept_from_the_one_run_that_watched_the_target() {
    let mut watched = step_with_values(0, None, 10.0, &[100, 200]);
    watched.cpu_percent = Some(150.0);
    watched.cpu_percent_peak = Some(190.0);
    watched.rss_mb = Some(40.0);
    watched.rss_mb_peak = Some(44.0);
    let unwatched = step_with_values(0, None, 10.0, &[300]);
    let a = run(
        "a",
        "closed",
        None,
        vec![target("svc", vec![unwatched.clone()])],
    );
    let b = run(
        "b",
        "closed",
        None,
        vec![target("svc", vec![watched.clone()])],
    );
    let step = &merge(&[a, b.clone()]).unwrap().targets[0].steps[0];
    assert_eq!(
        (step.cpu_percent, step.cpu_percent_peak),
        (Some(150.0), Some(190.0))
    );
    assert_eq!((step.rss_mb, step.rss_mb_peak), (Some(40.0), Some(44.0)));
    assert_eq!(step.pss_mb, None);

    // Two watchers of the same process: duration-weighted mean, highest peak.
    let mut other = watched.clone();
    other.duration_s = 30.0;
    other.cpu_percent = Some(110.0);
    other.cpu_percent_peak = Some(200.0);
    let c = run("c", "closed", None, vec![target("svc", vec![other])]);
    let step = &merge(&[b, c]).unwrap().targets[0].steps[0];
    assert_eq!(step.cpu_percent, Some((150.0 * 10.0 + 110.0 * 30.0) / 40.0));
    assert_eq!(step.cpu_percent_peak, Some(200.0));
}

#[test]
fn merge_rejudges_the_slo_on_merged_figures() {
    let fast = vec![10_000u64; 1000];
    // 1.5% of requests at 100 ms: this machine alone breaks p99<50ms...
    let mut tail = vec![10_000u64; 985];
    tail.extend([100_000u64; 15]);
    let slow = vec![100_000u64; 1000];
    let slo = Some("p99<50ms,errors<1%");
    let a = run(
        "a",
        "ramp",
        slo,
        vec![target(
            "svc",
            vec![
                step_with_values(0, Some(1000.0), 1.0, &fast),
                step_with_values(1, Some(2000.0), 1.0, &fast),
            ],
        )],
    );
    let b = run(
        "b",
        "ramp",
        slo,
        vec![target(
            "svc",
            vec![
                step_with_values(0, Some(1000.0), 1.0, &tail),
                step_with_values(1, Some(2000.0), 1.0, &slow),
            ],
        )],
    );
    let merged = merge(&[a, b]).unwrap();
    let svc = &merged.targets[0];
    // ...but together only 0.75% are slow, so the merged p99 holds.
    assert!(
        svc.steps[0].latency_ms.unwrap().p99 < 10.1,
        "{:?}",
        svc.steps[0].latency_ms
    );
    assert_eq!(svc.steps[0].slo_held, Some(true));
    assert_eq!(svc.steps[1].slo_held, Some(false));
    let bp = svc.breaking_point.as_ref().unwrap();
    assert_eq!(bp.rps, Some(2000.0));
    assert!(
        bp.reason.starts_with("p99 ") && bp.reason.ends_with("at 4000 rps"),
        "{}",
        bp.reason
    );
}

/// `b` as another machine's run (its own part id), merged with `a`.
fn other_part(b: &RunResult) -> RunResult {
    let mut b = b.clone();
    b.part_ids = vec!["another-machine".to_owned()];
    b
}

fn mismatch(a: &RunResult, b: &RunResult) -> String {
    match merge(&[a.clone(), other_part(b)]) {
        Err(err @ ReportError::Mismatch(_)) => err.to_string(),
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

#[test]
fn merge_refuses_runs_that_do_not_line_up() {
    let step = |i, rps| step_with_values(i, Some(rps), 1.0, &[1000, 2000]);
    let base = run(
        "a",
        "ramp",
        None,
        vec![
            target("go", vec![step(0, 100.0), step(1, 200.0)]),
            target("rust", vec![step(0, 100.0), step(1, 200.0)]),
        ],
    );

    let mut other_target = base.clone();
    other_target.targets[1].name = "node".to_owned();
    assert!(
        mismatch(&base, &other_target).contains("targets: go, rust (run 1) vs go, node (run 2)")
    );

    // The engine stops a target at its first broken step, so one machine may have run
    // fewer steps: the merge keeps the steps every machine ran.
    let mut fewer_steps = base.clone();
    fewer_steps.targets[0].steps.pop();
    let merged = merge(&[base.clone(), other_part(&fewer_steps)]).unwrap();
    assert_eq!(merged.targets[0].steps.len(), 1);
    assert_eq!(merged.targets[1].steps.len(), 2);
    assert_eq!(merged.targets[0].steps[0].requests, 4);

    let mut gap = base.clone();
    gap.targets[0].steps.remove(0);
    assert!(mismatch(&base, &gap).contains("target \"go\""));

    let mut other_rates = base.clone();
    other_rates.targets[1].steps[1].offered_rps = Some(400.0);
    assert_eq!(
        mismatch(&base, &other_rates),
        "cannot merge: target \"rust\": run 1 and run 2 ran step 2 at different rates: \
         200 rps (run 1) vs 400 rps (run 2)"
    );

    let mut other_model = base.clone();
    other_model.config.model = "closed".to_owned();
    assert!(mismatch(&base, &other_model).contains("load model: ramp (run 1) vs closed (run 2)"));

    // #18.14: in words, not Rust's debug text (`Some("errors<1%") vs None`).
    let mut other_slo = base.clone();
    other_slo.config.slo = Some("errors<1%".to_owned());
    assert_eq!(
        mismatch(&other_slo, &base),
        "cannot merge: run 1 and run 2 differ in SLO: errors<1% (run 1) vs no SLO (run 2)"
    );
    let mut counted = base.clone();
    counted.config.step_duration_s = None;
    counted.config.requests_per_step = Some(100);
    assert_eq!(
        mismatch(&base, &counted),
        "cannot merge: run 1 and run 2 differ in step length: 10 s per step (run 1) vs a \
         request count per step (run 2)"
    );

    assert!(matches!(merge(&[]), Err(ReportError::Mismatch(_))));
}

#[test]
fn json_round_trips_through_an_atomic_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.json");
    let original = merge(&[common::go_vs_rust_ramp("h", &[1000.0, 2000.0], 1.0, 3)]).unwrap();
    write_json(&original, &path).unwrap();
    // Overwrite in place: still one file, no temporary left behind.
    write_json(&original, &path).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["run.json"]);
    assert_eq!(read_json(&path).unwrap(), original);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, to_json_string(&original));
    assert!(text.starts_with("{\n  \"format_version\": 1,"));
}

#[test]
fn bad_files_give_errors_that_name_the_file_and_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let err = read_json(&missing).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("cannot read {}", missing.display())),
        "{err}"
    );

    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\n  \"format_version\": 1,\n  \"tool\": oops\n}").unwrap();
    let err = read_json(&broken).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:3:", broken.display())),
        "{err}"
    );

    let future = dir.path().join("future.json");
    std::fs::write(&future, r#"{"format_version": 99, "targets": "whatever"}"#).unwrap();
    let err = read_json(&future).unwrap_err().to_string();
    assert!(err.contains("format version 99 is not supported"), "{err}");

    let run = run(
        "a",
        "closed",
        None,
        vec![target("svc", vec![step_with_values(0, None, 1.0, &[5])])],
    );
    let mut text = to_json_string(&run);
    let shape = dir.path().join("shape.json");
    std::fs::write(&shape, text.replace("\"requests\"", "\"requestz\"")).unwrap();
    let err = read_json(&shape).unwrap_err().to_string();
    assert!(err.contains("missing field `requests`"), "{err}");

    text = text.replace(&run.targets[0].steps[0].histogram, "bm90IGEgaGlzdG9ncmFt");
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, text).unwrap();
    let err = read_json(&garbage).unwrap_err().to_string();
    assert!(err.starts_with("target \"svc\" step 0: histogram"), "{err}");
}

fn ramp() -> RunResult {
    let offered: Vec<f64> = (1..=5).map(|k| 2500.0 * f64::from(k)).collect();
    merge(&[common::go_vs_rust_ramp("bench-1", &offered, 2.0, 11)]).unwrap()
}

#[test]
fn table_has_a_column_per_target_ratios_and_fits_100_columns() {
    let run = ramp();
    let table = summary_table(&run);
    let widest = table.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(widest <= 100, "widest line {widest}:\n{table}");
    assert!(table.contains("rust/go"));
    // Each step block: the p99 row carries both values and their ratio, computed here
    // independently from the model.
    for (go, rust) in run.targets[0].steps.iter().zip(&run.targets[1].steps) {
        let ratio = rust.latency_ms.unwrap().p99 / go.latency_ms.unwrap().p99;
        let row = table
            .lines()
            .find(|l| l.starts_with("latency p99 ms") && l.contains(&format!("{:.2}x", ratio)))
            .unwrap_or_else(|| panic!("no p99 row with ratio {ratio:.2}x:\n{table}"));
        assert!(
            row.ends_with("better") || row.ends_with("worse") || row.ends_with("1.00x"),
            "{row}"
        );
    }
    // Rows of one block are aligned: the ratio column ends at the same place... and the
    // headers name both targets.
    let block: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("step 1 of 5"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(block[0].contains("go") && block[0].contains("rust"));
    let rule = block[1];
    assert!(rule.chars().all(|c| c == '-' || c == ' '));
    let ends: Vec<usize> = block[2..]
        .iter()
        .filter(|l| l.starts_with("latency"))
        .map(|l| l.len())
        .collect();
    assert!(ends.windows(2).all(|w| w[0] == w[1]) || ends.iter().all(|&e| e <= rule.len()));
    assert!(table.contains("breaking point (SLO p99<50ms,errors<1%)"));
    // The reason is there, whole, though wrapped to fit.
    let go_bp = run.targets[0].breaking_point.as_ref().unwrap();
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat(&table).contains(&flat(&go_bp.reason)), "{table}");
}

#[test]
fn html_is_well_formed_self_contained_and_holds_every_series() {
    let mut run = ramp();
    // A hostile name must come out as text.
    run.targets[1].name = "rust <b>&\"new\"</b>".to_owned();
    let page = html(&run);
    let doc = roxmltree::Document::parse_with_options(&page, xml_options())
        .unwrap_or_else(|e| panic!("not well-formed: {e}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "html");
    for node in root.descendants() {
        assert!(
            !matches!(
                node.tag_name().name(),
                "script" | "link" | "img" | "iframe" | "object"
            ),
            "{:?}",
            node.tag_name()
        );
        for attr in node.attributes() {
            assert!(
                !matches!(attr.name(), "href" | "src" | "xlink:href")
                    && !attr.name().starts_with("on"),
                "attribute {}",
                attr.name()
            );
        }
    }
    assert!(!page.contains("url("), "CSS must not load anything");
    assert!(!page.contains("<b>"));
    let text: String = root
        .descendants()
        .filter(|n| n.is_text())
        .map(|n| n.text().unwrap())
        .collect();
    assert!(text.contains("rust <b>&\"new\"</b>"));
    assert!(text.contains("go"));

    let svgs: Vec<_> = root
        .descendants()
        .filter(|n| n.has_tag_name("svg"))
        .collect();
    assert!(svgs.len() >= 8, "{} charts", svgs.len());
    // Every per-step series has one point per step, and its markers' hover titles carry the
    // figures from the model.
    let steps = run.targets[0].steps.len();
    let series: Vec<_> = root
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("data-series").is_some())
        .collect();
    for name in ["go", "rust <b>&\"new\"</b>"] {
        let own: Vec<_> = series
            .iter()
            .filter(|s| s.attribute("data-series") == Some(name))
            .collect();
        assert!(own.len() >= 4, "{name}: {} series", own.len());
        for s in &own[..4] {
            assert_eq!(s.attribute("points").unwrap().split(' ').count(), steps);
        }
    }
    let titles: Vec<&str> = root
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .collect();
    for (i, target) in run.targets.iter().enumerate() {
        for step in &target.steps {
            let p99 = format!(
                "{} at {} rps: {} ms",
                target.name,
                fmt_rate(step.offered_rps.unwrap()),
                fmt_ms(step.latency_ms.unwrap().p99)
            );
            assert!(
                titles.contains(&p99.as_str()),
                "target {i}: no marker titled {p99:?}"
            );
        }
    }
}

#[test]
fn html_of_a_single_closed_step_uses_bar_charts() {
    let mut a = step_with_values(0, None, 5.0, &latencies(9, 5000, 3000.0));
    a.cpu_percent = Some(180.0);
    a.cpu_percent_peak = Some(199.0);
    let b = step_with_values(0, None, 5.0, &latencies(10, 9000, 900.0));
    let run = run(
        "h",
        "closed",
        None,
        vec![target("node", vec![a]), target("rust", vec![b])],
    );
    let page = html(&run);
    let doc = roxmltree::Document::parse_with_options(&page, xml_options()).unwrap();
    let bars = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("fill").is_some())
        .count();
    // Latency: 6 bars per target; throughput: 2 categories, rust has no CPU for the second.
    assert_eq!(bars, 6 * 2 + 2 + 1 + 2);
    assert!(page.contains("node · p99: "));
    let table = summary_table(&run);
    assert!(table.contains("closed model, 64 connections, 5.0 s"));
    assert!(!table.contains("offered rps"));
}

/// The same formatting the report uses, restated here to build the expected titles.
fn fmt_rate(v: f64) -> String {
    let s = format!("{v:.0}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// HTML5's `<!DOCTYPE html>` is a DTD to an XML parser; it declares no entities.
fn xml_options<'a>() -> roxmltree::ParsingOptions<'a> {
    roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    }
}

/// #18.8: an empty histogram printed p99 0.000 (and wrote 0 into the JSON): a step that
/// measured no latency read as the fastest step of the run.
#[test]
fn a_step_without_latencies_shows_a_dash_not_zero() {
    let mut dead = step_with_values(0, None, 2.0, &[]);
    dead.requests = 500;
    dead.errors = 500;
    dead.error_kinds = BTreeMap::from([("connect".to_owned(), 500)]);
    let run = run("h", "closed", None, vec![target("svc", vec![dead])]);
    let table = summary_table(&run);
    for figure in ["mean", "p50", "p90", "p99", "p99.9", "max"] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("latency {figure} ms")))
            .unwrap();
        assert_eq!(row.split_whitespace().last(), Some("-"), "{row}");
    }
    let json: serde_json::Value = serde_json::from_str(&to_json_string(&run)).unwrap();
    assert!(json["targets"][0]["steps"][0]["latency_ms"].is_null());
    // The page draws no bar for it, and no 0.
    let page = html(&run);
    roxmltree::Document::parse_with_options(&page, xml_options()).unwrap();
    assert!(!page.contains("p99 0.000"));
}

/// Runs made on two machines at the same time: same schedule, their own part ids.
fn two_machines() -> (RunResult, RunResult) {
    let a = run(
        "host-a",
        "open",
        Some("errors<1%"),
        vec![target(
            "svc",
            vec![step_with_values(
                0,
                Some(500.0),
                10.0,
                &latencies(1, 5000, 900.0),
            )],
        )],
    );
    let b = run(
        "host-b",
        "open",
        Some("errors<1%"),
        vec![target(
            "svc",
            vec![step_with_values(
                0,
                Some(500.0),
                10.0,
                &latencies(2, 5000, 900.0),
            )],
        )],
    );
    (a, b)
}

fn refused(runs: &[RunResult], options: MergeOptions) -> String {
    match merge_with(runs, options) {
        Err(err @ ReportError::Mismatch(_)) => err.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// #18.14: a file merged with itself doubled every rate; a merged file merged again with
/// one of its parts counted that part twice.
#[test]
fn merge_refuses_a_run_merged_with_itself() {
    let (a, b) = two_machines();
    let strict = MergeOptions::default();
    assert_eq!(
        refused(&[a.clone(), a.clone()], strict),
        "cannot merge: run 1 and run 2 are the same run; a run merged with itself would count \
         every request twice"
    );
    let both = merge(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(both.part_ids.len(), 2);
    let again = refused(&[both.clone(), b.clone()], strict);
    assert!(
        again.contains("both hold the measurements of run host-b-"),
        "{again}"
    );
    // A file from before part ids were recorded: hosts and start time stand in.
    let (mut old_a, mut old_b) = (a.clone(), a.clone());
    old_a.part_ids.clear();
    old_b.part_ids.clear();
    old_b.targets[0].steps[0].requests += 1; // not byte-identical, still the same run
    assert!(refused(&[old_a, old_b], strict).contains("host-a@2025-06-01T10:00:00Z"));
}

/// #18.14: the same target name at two URLs merged silently, as did runs of different
/// scalpel versions; both are named, and merged only when allowed.
#[test]
fn merge_names_different_urls_and_versions() {
    let (a, mut b) = two_machines();
    b.targets[0].url = "http://10.0.0.9:8080".to_owned();
    let strict = MergeOptions::default();
    let why = refused(&[a.clone(), b.clone()], strict);
    assert!(
        why.contains(
            "target \"svc\" is http://127.0.0.1/svc in run 1 but http://10.0.0.9:8080 in run 2"
        ),
        "{why}"
    );
    let allowed = MergeOptions {
        allow_different_urls: true,
        ..strict
    };
    assert_eq!(
        merge_with(&[a.clone(), b.clone()], allowed)
            .unwrap()
            .targets[0]
            .url,
        a.targets[0].url
    );

    let (a, mut b) = two_machines();
    b.tool = "scalpel 0.2.0".to_owned();
    let why = refused(&[a.clone(), b.clone()], strict);
    assert!(
        why.contains("different versions: scalpel 0.1.0 (run 1) vs scalpel 0.2.0 (run 2)"),
        "{why}"
    );
    let allowed = MergeOptions {
        allow_different_versions: true,
        ..strict
    };
    assert_eq!(
        merge_with(&[a, b], allowed).unwrap().tool,
        "scalpel 0.1.0, scalpel 0.2.0"
    );
}

/// Messages are words: no Rust debug text (`Some("errors<1%") vs None`) in any refusal.
#[test]
fn merge_refusals_are_in_words() {
    let (a, b) = two_machines();
    let mut variants = Vec::new();
    let mut x = b.clone();
    x.config.slo = None;
    variants.push(x);
    let mut x = b.clone();
    x.config.step_duration_s = None;
    variants.push(x);
    let mut x = b.clone();
    x.config.model = "closed".to_owned();
    variants.push(x);
    let mut x = b.clone();
    x.targets[0].steps[0].offered_rps = None;
    variants.push(x);
    for other in variants {
        let why = refused(&[a.clone(), other], MergeOptions::default());
        for debug in ["Some(", "None", "\\\"", "[\""] {
            assert!(!why.contains(debug), "{why}");
        }
    }
}

/// A step cut short by an interrupt did not carry its load: a merge leaves it out.
#[test]
fn merge_leaves_out_partial_steps() {
    let step = |i, rps| step_with_values(i, Some(rps), 1.0, &[1000, 2000]);
    let a = run(
        "a",
        "ramp",
        None,
        vec![target("svc", vec![step(0, 100.0), step(1, 200.0)])],
    );
    let mut b = run(
        "b",
        "ramp",
        None,
        vec![target("svc", vec![step(0, 100.0), step(1, 200.0)])],
    );
    b.interrupted = true;
    b.targets[0].steps[1].partial = true;
    let merged = merge(&[a, b]).unwrap();
    assert_eq!(merged.targets[0].steps.len(), 1);
    assert!(merged.interrupted);
}

/// #16: a merge read its files checking every histogram, then decoded each again to add
/// it. Files are now read without the check (`read_json_for_merge`) and the merge decodes
/// each histogram once, so a bad one must still be refused by the merge — naming its run,
/// also in a step the merge leaves out — and a file read for a merge must merge exactly as
/// one read with the check.
#[test]
fn a_merge_decodes_each_histogram_once_and_still_refuses_a_bad_one_naming_its_run() {
    let step = |i, rps, seed| step_with_values(i, Some(rps), 1.0, &latencies(seed, 500, 2000.0));
    let part = |host: &str, seed| {
        run(
            host,
            "ramp",
            None,
            vec![target(
                "svc",
                vec![step(0, 100.0, seed), step(1, 200.0, seed + 1)],
            )],
        )
    };
    let garbage = "bm90IGEgaGlzdG9ncmFt".to_owned();

    // Read for a merge (no check) and read with the check: the same runs, the same merge.
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = (0..3)
        .map(|i| {
            let path = dir.path().join(format!("{i}.json"));
            write_json(&part(&format!("h{i}"), 10 * i), &path).unwrap();
            path
        })
        .collect();
    let lazy: Vec<RunResult> = paths
        .iter()
        .map(|p| read_json_for_merge(p).unwrap())
        .collect();
    let checked: Vec<RunResult> = paths.iter().map(|p| read_json(p).unwrap()).collect();
    assert_eq!(lazy, checked);
    assert_eq!(merge(&lazy).unwrap(), merge(&checked).unwrap());

    // A bad histogram in run 3, step 2: refused, naming run 3, the target and the step.
    let mut bad = lazy.clone();
    bad[2].targets[0].steps[1].histogram = garbage.clone();
    let path = dir.path().join("bad.json");
    write_json(&bad[2], &path).unwrap();
    assert!(
        read_json_for_merge(&path).is_ok(),
        "the merge checks, not the read"
    );
    let err = merge(&bad).unwrap_err();
    assert!(
        matches!(
            err,
            ReportError::RunHistogram {
                run: 3,
                step: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("run 3: target \"svc\" step 2: histogram"),
        "{err}"
    );

    // In a step the merge leaves out (run 1 was interrupted in step 2): still refused.
    let mut left_out = lazy.clone();
    left_out[0].targets[0].steps[1].partial = true;
    assert_eq!(merge(&left_out).unwrap().targets[0].steps.len(), 1);
    left_out[1].targets[0].steps[1].histogram = garbage;
    let err = merge(&left_out).unwrap_err();
    assert!(
        matches!(
            err,
            ReportError::RunHistogram {
                run: 2,
                step: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

/// Files from before `sent`/`answered`/`failed` were written read back with those counts
/// filled in from the error kinds.
#[test]
fn older_files_get_sent_and_answered_from_their_error_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let mut step = step_with_values(0, Some(100.0), 1.0, &[1000, 2000, 3000]);
    step.requests = 10;
    step.errors = 7;
    step.error_kinds = BTreeMap::from([
        ("connect".to_owned(), 2),
        ("timeout".to_owned(), 4),
        ("status_503".to_owned(), 1),
    ]);
    let run = run("a", "open", None, vec![target("svc", vec![step])]);
    let mut json: serde_json::Value = serde_json::from_str(&to_json_string(&run)).unwrap();
    let s = &mut json["targets"][0]["steps"][0];
    for key in ["sent", "answered", "failed"] {
        s.as_object_mut().unwrap().remove(key);
    }
    let path = dir.path().join("old.json");
    std::fs::write(&path, json.to_string()).unwrap();
    let back = read_json(&path).unwrap();
    let s = &back.targets[0].steps[0];
    assert_eq!((s.sent, s.answered, s.failed), (8, 4, 4));
}

/// A step cut short by an interrupt is not where the page compares the targets.
#[test]
fn the_page_never_compares_at_a_partial_step() {
    let step = |i, rps| step_with_values(i, Some(rps), 1.0, &latencies(i as u64 + 20, 500, 900.0));
    let mut run = run(
        "a",
        "ramp",
        None,
        vec![target(
            "svc",
            vec![step(0, 100.0), step(1, 200.0), step(2, 300.0)],
        )],
    );
    run.interrupted = true;
    run.targets[0].steps[2].partial = true;
    let page = html(&run);
    assert!(
        page.contains("Latency by percentile (step 2,"),
        "compared at step 2"
    );
    assert!(!page.contains("Latency by percentile (step 3,"));
    assert!(page.contains("INTERRUPTED"));
}

/// Issue #12: the TLS handshake histograms, connections and HTTP/2 events of two machines
/// merge exactly (the union of the handshakes, the sums of the counts), and a part measured
/// with `--insecure` makes the merged run say so.
#[test]
fn handshakes_h2_events_and_insecure_merge_across_machines() {
    use scalpel_load::result::{ConnectionInfo, H2Events, encode_histogram};
    let part = |host: &str, handshakes_us: &[u64], goaway: u64, insecure: bool| {
        let mut step = step_with_values(0, Some(1000.0), 10.0, &latencies(7, 1000, 800.0));
        let mut h = new_histogram();
        for v in handshakes_us {
            h.record(*v).unwrap();
        }
        step.connections_opened = handshakes_us.len() as u64;
        step.handshake_ms = LatencySummary::from_histogram(&h);
        step.handshake_histogram = Some(encode_histogram(&h));
        step.h2 = Some(H2Events {
            goaway,
            rst_stream: 2,
            rst_by_reason: BTreeMap::from([("cancel".to_string(), 2)]),
            stalled_on_streams: 1,
            stalled_on_window: 0,
        });
        let mut t = target("svc", vec![step]);
        t.connection = Some(ConnectionInfo {
            protocol: "h2".into(),
            tls: true,
            insecure,
            server_name: Some("svc.test".into()),
            address: "127.0.0.1:443".into(),
            streams: Some(16),
            reuse: true,
            ..ConnectionInfo::default()
        });
        run(host, "open", None, vec![t])
    };
    let a = part("host-a", &[900, 1_100, 1_300], 1, false);
    let b = part("host-b", &[5_000, 7_000], 4, true);
    let merged = merge(&[a, b]).unwrap();
    let t = &merged.targets[0];
    let s = &t.steps[0];
    assert_eq!(s.connections_opened, 5);
    let h = decode_histogram(s.handshake_histogram.as_ref().unwrap()).unwrap();
    assert_eq!(h.len(), 5);
    assert_eq!(s.handshake_ms, LatencySummary::from_histogram(&h));
    assert!(s.handshake_ms.unwrap().max >= 6.99, "{:?}", s.handshake_ms);
    let e = s.h2.as_ref().unwrap();
    assert_eq!((e.goaway, e.rst_stream, e.stalled_on_streams), (5, 4, 2));
    assert_eq!(e.rst_by_reason["cancel"], 4);
    assert!(
        t.connection.as_ref().unwrap().insecure,
        "one part was not verified"
    );
    let table = summary_table(&merged);
    assert!(
        table.contains("certificate NOT verified (--insecure)"),
        "{table}"
    );
    assert!(table.contains("TLS handshake p99 ms"), "{table}");
    assert!(table.contains("h2 GOAWAY"), "{table}");
    let page = html(&merged);
    assert!(page.contains("NOT verified"), "the page says it too");
}
