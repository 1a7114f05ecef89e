//! Shard sets where they break: a seeded run of many random sets — shards dropped, given
//! twice, from another run, with other settings, split another way, mixed with a plain
//! run, in any order — must each be merged exactly when they are one whole run and refused
//! otherwise with one line naming the fault; never a panic.

use crate::common;

use common::{Rng, run, step_with_values};
use scalpel_load::result::{RunResult, ShardInfo, TargetResult, decode_histogram, new_histogram};
use scalpel_report::{ReportError, merge, summary_table};

/// Shard `index` of `count` of `run_id`: one step whose latencies depend on the shard, so
/// the merged histogram is checked against the sum.
fn shard(run_id: &str, index: u32, count: u32, settings: &str, seed: u64) -> RunResult {
    let mut rng = Rng::new(seed * 1000 + u64::from(index) + 1);
    let values: Vec<u64> = (0..200)
        .map(|_| rng.log_normal(800.0 * f64::from(index + 1), 0.4).max(1.0) as u64)
        .collect();
    let step = step_with_values(0, Some(1000.0 / f64::from(count)), 10.0, &values);
    let target = TargetResult {
        name: "svc".into(),
        url: "http://127.0.0.1:9".into(),
        connection: None,
        steps: vec![step],
        breaking_point: None,
    };
    let mut r = run(
        &format!("gen-{index}"),
        "open",
        Some("p99<50ms"),
        vec![target],
    );
    r.part_ids = vec![format!("{run_id}-part-{index}-{seed}")];
    r.shard = Some(ShardInfo {
        run_id: run_id.to_owned(),
        index,
        count,
        start_at: Some("2030-01-01T12:00:00Z".into()),
        start_late_s: Some(0.0),
        settings: settings.to_owned(),
    });
    r
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    Missing,
    Twice,
    OtherRun,
    OtherSettings,
    OtherCount,
    Plain,
}

fn message(result: Result<RunResult, ReportError>) -> String {
    match result {
        Ok(_) => panic!("merged a set that is not one whole run"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn random_sets_merge_exactly_when_whole_and_are_refused_naming_the_fault_otherwise() {
    let mut rng = Rng::new(20_301);
    for case in 0..300u64 {
        let count = 1 + (rng.next_f64() * 6.0) as u32;
        let mut set: Vec<RunResult> = (0..count)
            .map(|i| shard("run-a", i, count, "s1", case))
            .collect();
        let fault = match (rng.next_f64() * 7.0) as u32 {
            0 => Some(Fault::Missing),
            1 => Some(Fault::Twice),
            2 => Some(Fault::OtherRun),
            3 => Some(Fault::OtherSettings),
            4 => Some(Fault::OtherCount),
            5 => Some(Fault::Plain),
            _ => None,
        };
        let victim = ((rng.next_f64() * f64::from(count)) as usize).min(count as usize - 1);
        let fault =
            match fault {
                // A 1-shard run's only file is the whole run whatever it holds; only a second
                // file can be wrong.
                Some(
                    Fault::Missing | Fault::OtherRun | Fault::OtherSettings | Fault::OtherCount,
                ) if count == 1 => None,
                f => f,
            };
        match fault {
            None => {}
            Some(Fault::Missing) => {
                set.remove(victim);
            }
            Some(Fault::Twice) => {
                // Another file with the same shard: a copy, or a second attempt of it.
                let mut again = set[victim].clone();
                if rng.next_f64() < 0.5 {
                    again.part_ids = vec![format!("retry-{case}")];
                }
                set.push(again);
            }
            Some(Fault::OtherRun) => {
                set[victim] = shard("run-b", victim as u32, count, "s1", case + 7);
            }
            Some(Fault::OtherSettings) => {
                set[victim] = shard("run-a", victim as u32, count, "s2", case + 7);
            }
            Some(Fault::OtherCount) => {
                set[victim] = shard("run-a", 0, count + 1, "s1", case + 7);
            }
            Some(Fault::Plain) => {
                let mut plain = shard("run-a", 0, 1, "s1", case + 9);
                plain.shard = None;
                set.push(plain);
            }
        }
        // Any order.
        for i in (1..set.len()).rev() {
            let j = (rng.next_f64() * (i + 1) as f64) as usize;
            set.swap(i, j.min(i));
        }
        let result = merge(&set);
        let Some(fault) = fault else {
            let merged = result.unwrap_or_else(|e| panic!("case {case}: {e}"));
            let parts = &merged.shards.as_ref().expect("a shard set").parts;
            assert_eq!(parts.len(), count as usize);
            assert!(parts.iter().enumerate().all(|(i, p)| p.index == i as u32));
            let mut sum = new_histogram();
            for r in &set {
                sum.add(decode_histogram(&r.targets[0].steps[0].histogram).unwrap())
                    .unwrap();
            }
            let step = &merged.targets[0].steps[0];
            assert_eq!(decode_histogram(&step.histogram).unwrap(), sum);
            assert!((step.offered_rps.unwrap() - 1000.0).abs() < 1e-6);
            assert!(summary_table(&merged).contains(&format!("{count}/{count}")));
            continue;
        };
        let text = message(result);
        assert!(!text.contains('\n'), "one line: {text}");
        let expected = match fault {
            Fault::Missing => "missing (run id run-a)",
            Fault::Twice => "given twice",
            Fault::OtherRun => "shards of 2 runs",
            Fault::OtherSettings => "other settings",
            Fault::OtherCount => "split in different ways",
            Fault::Plain => "not a shard",
        };
        assert!(
            text.contains(expected),
            "case {case} ({fault:?}, {count} shards): {text}"
        );
    }
}

/// #26.3: `report merge` of shard 1/2 alone said "one result file … is not a merge: give
/// two or more". One file of a sharded run is a set with shards missing, named as such;
/// several missing are listed.
#[test]
fn one_shard_alone_names_the_shards_missing() {
    let text = message(merge(&[shard("run-7", 0, 2, "s1", 1)]));
    assert_eq!(
        text,
        "cannot merge: shard 2 of 2 missing (run id run-7): give the result files of all 2 \
         shards (1 given)"
    );
    let text = message(merge(&[shard("run-7", 2, 4, "s1", 1)]));
    assert!(
        text.contains("shards 1, 2 and 4 of 4 missing (run id run-7)"),
        "{text}"
    );
    let text = message(merge(&[
        shard("run-7", 1, 4, "s1", 1),
        shard("run-7", 3, 4, "s1", 1),
    ]));
    assert!(text.contains("shards 1 and 3 of 4 missing"), "{text}");
}
