//! The processes behind each target: `--watch-pid`/`--watch-port` resolved to a pid, and
//! `scalpel-procstat`'s sampler behind the load crate's resource seam.

use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use scalpel_load::{ResourceUsage, ResourceWatch};
use scalpel_procstat::{SampleMark, TreeSampler};

/// The pid to watch for target `name`, from `--watch-pid`/`--watch-port` values that are
/// `NAME=N`, or plain `N` when there is only one target.
pub(super) fn watch_for(
    name: &str,
    bases: &[(String, String)],
    pids: &[String],
    ports: &[String],
) -> anyhow::Result<Option<u32>> {
    let mut found = None;
    for (flag, values) in [("--watch-pid", pids), ("--watch-port", ports)] {
        for v in values {
            let (who, number) = match v.split_once('=') {
                Some((who, n)) => {
                    if !bases.iter().any(|(b, _)| b == who) {
                        bail!("{flag} `{v}`: no target named `{who}`");
                    }
                    (who, n)
                }
                None if bases.len() == 1 => (bases[0].0.as_str(), v.as_str()),
                None => bail!(
                    "{flag} `{v}`: with several targets, give NAME={}",
                    if flag == "--watch-pid" { "PID" } else { "PORT" }
                ),
            };
            if who != name {
                continue;
            }
            if found.is_some() {
                bail!("target `{name}` is watched twice");
            }
            let pid = if flag == "--watch-pid" {
                number
                    .parse::<u32>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| anyhow!("{flag} `{v}`: not a process id"))?
            } else {
                let port = number
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| anyhow!("{flag} `{v}`: not a TCP port"))?;
                scalpel_procstat::pid_listening_on(port).with_context(|| format!("{flag} `{v}`"))?
            };
            found = Some(pid);
        }
    }
    Ok(found)
}

/// `scalpel-procstat` behind the load crate's resource seam.
#[derive(Debug)]
pub(super) struct ProcWatch {
    /// Shared with the dashboard, which shows its latest sample.
    sampler: Arc<TreeSampler>,
    mark: Option<SampleMark>,
}

impl ProcWatch {
    pub(super) fn new(sampler: Arc<TreeSampler>) -> ProcWatch {
        ProcWatch {
            sampler,
            mark: None,
        }
    }
}

impl ResourceWatch for ProcWatch {
    fn begin(&mut self) {
        self.mark = Some(self.sampler.mark());
    }

    fn end(&mut self) -> Option<ResourceUsage> {
        let s = self.sampler.summary_since(self.mark.take()?);
        // PSS is read once, at the end of the step; a tree that has exited by then reads
        // as 0 bytes. A live process never has a PSS of 0: that is "not measured".
        let pss = |bytes: Option<u64>| bytes.filter(|&b| b > 0);
        (s.samples > 0).then_some(ResourceUsage {
            samples: u64::from(s.samples),
            cpu_percent_mean: s.cpu_percent_mean,
            cpu_percent_peak: s.cpu_percent_peak,
            rss_bytes_mean: s.rss_bytes_mean,
            rss_bytes_peak: s.rss_bytes_peak,
            pss_bytes_mean: pss(s.pss_bytes_mean),
            pss_bytes_peak: pss(s.pss_bytes_peak),
        })
    }
}
