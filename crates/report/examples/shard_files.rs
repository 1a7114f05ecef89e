//! Writes the result files of one sharded run, as `scalpel load --shard I/N --json` would:
//! N shards of a ramp of STEPS steps each, with real (simulated) latency histograms, to time
//! `scalpel report merge` on a large set without running load (scripts/bench-shards.sh):
//!
//! ```sh
//! cargo run --release -p scalpel-report --example shard_files -- /tmp/set 100 60
//! scalpel report merge /tmp/set/shard-*.json -o /tmp/merged.json
//! ```

use std::path::PathBuf;

use scalpel_load::result::{ShardInfo, TargetResult};
// Realistic result files built in code (the test kit's, a dev-dependency).
use scalpel_testkit::results as common;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "shard-set".into()));
    let shards: u32 = args.next().map_or(Ok(100), |a| a.parse())?;
    let steps: u32 = args.next().map_or(Ok(60), |a| a.parse())?;
    std::fs::create_dir_all(&dir)?;
    // A service that saturates at 2 million requests/s in all: the ramp's last steps break.
    let service = common::Service {
        capacity_rps: 2_000_000.0 / f64::from(shards),
        median_ms: 1.2,
        cores: 2.0,
        base_rss_mb: 40.0,
        rss_mb_per_krps: 0.5,
    };
    for index in 0..shards {
        let steps = (0..steps)
            .map(|k| {
                let total = 40_000.0 * f64::from(k + 1);
                common::simulated_step(
                    service,
                    k,
                    total / f64::from(shards),
                    10.0,
                    u64::from(index) * 10_000 + u64::from(k),
                )
            })
            .collect();
        let target = TargetResult {
            name: "payments".into(),
            url: "http://payments.default.svc:8080".into(),
            connection: None,
            steps,
            breaking_point: None,
        };
        let mut run = common::run(
            &format!("generator-{index}"),
            "ramp",
            Some("p99<50ms,errors<1%"),
            vec![target],
        );
        run.part_ids = vec![format!("generator-{index}-1")];
        run.config.connections = 200 / shards.max(1);
        run.shard = Some(ShardInfo {
            run_id: "bench-run".into(),
            index,
            count: shards,
            start_at: Some("2030-01-01T12:00:00Z".into()),
            start_late_s: Some(0.0),
            settings: "0123456789abcdef".into(),
        });
        scalpel_report::write_json(&run, &dir.join(format!("shard-{index:03}.json")))?;
    }
    eprintln!("{shards} shard files of {steps} steps in {}", dir.display());
    Ok(())
}
