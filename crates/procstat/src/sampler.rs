//! A background thread that reads a tree every interval and keeps the samples.

use std::collections::VecDeque;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::proc::{pss_of, read_known};
use crate::tree::discover;
use crate::{ProcStatError, TreeReading, cpu_percent};

/// How many samples a sampler keeps: at 100 ms, well over two hours.
const RETAINED: usize = 100_000;
/// How often the tree is re-discovered (a pass over every process in `/proc`, ~1 ms here).
/// Every other sample reads two small files a process.
const DISCOVER_EVERY: Duration = Duration::from_secs(1);
/// The sampler thread's nice value: the lowest, so a load generator on the same core
/// preempts it at once instead of waiting out a reading.
const SAMPLER_NICE: i32 = 19;

/// One point of a sampler's series.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Time since the sampler started.
    pub elapsed: Duration,
    /// CPU% of the tree since the previous sample (100.0 = one core busy).
    pub cpu_percent: f64,
    /// Summed resident set size of the tree.
    pub rss_bytes: u64,
    /// Summed proportional set size, when readable for every process; read only by
    /// [`TreeSampler::summary_since`], at the end of a window (see the crate doc), so
    /// `None` in the background samples.
    pub pss_bytes: Option<u64>,
    /// Processes in the tree.
    pub processes: u32,
}

/// Resource use of a tree over a window of samples (e.g. one load step).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResourceSummary {
    /// Samples in the window.
    pub samples: u32,
    /// CPU% over the whole window: CPU time used ÷ wall time (not a mean of the samples'
    /// figures, so irregular intervals do not skew it).
    pub cpu_percent_mean: f64,
    /// Highest CPU% of one sampling interval in the window.
    pub cpu_percent_peak: f64,
    /// Mean RSS over the samples.
    pub rss_bytes_mean: u64,
    /// Highest RSS of one sample.
    pub rss_bytes_peak: u64,
    /// Mean PSS over the samples of the window that have it (in practice the one read
    /// when the window was summarized); `None` when unreadable.
    pub pss_bytes_mean: Option<u64>,
    /// Highest PSS of those samples.
    pub pss_bytes_peak: Option<u64>,
}

/// A point in time of a sampler, to summarize what came after it.
#[derive(Debug, Clone, Copy)]
pub struct SampleMark(Instant);

/// The CPU of a tree over one whole interval between two of a sampler's readings (see
/// [`TreeSampler::cpu_since`]).
#[derive(Debug, Clone, Copy)]
pub struct CpuInterval {
    /// CPU% over the interval: every tick in it ÷ its wall time (100.0 = one core busy).
    pub cpu_percent: f64,
    /// The interval's length.
    pub wall: Duration,
    /// Its end (the newest reading), to measure the next interval from: intervals chained
    /// this way tile the time, no tick counted twice or lost.
    pub end: SampleMark,
}

#[derive(Debug, Clone, Copy)]
struct Record {
    reading: TreeReading,
    sample: Sample,
}

#[derive(Debug)]
struct State {
    root: u32,
    interval: Duration,
    started: Instant,
    /// The reading before the first retained record (the start, or the last evicted one).
    base: TreeReading,
    records: VecDeque<Record>,
    /// The tree as last discovered, and when.
    pids: Vec<u32>,
    discovered: Instant,
}

impl State {
    /// Takes one reading and appends it; `false` if the root is gone.
    fn sample(&mut self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.discovered) >= DISCOVER_EVERY {
            let Ok(pids) = discover(&[self.root], true) else {
                return false;
            };
            self.pids = pids;
            self.discovered = now;
        }
        let Some(reading) = read_known(&self.pids) else {
            return false; // the root is gone
        };
        let previous = self.records.back().map_or(self.base, |r| r.reading);
        let sample = Sample {
            elapsed: reading.at.saturating_duration_since(self.started),
            cpu_percent: cpu_percent(&previous, &reading),
            rss_bytes: reading.rss_bytes,
            pss_bytes: reading.pss_bytes,
            processes: reading.processes,
        };
        if self.records.len() == RETAINED
            && let Some(evicted) = self.records.pop_front()
        {
            self.base = evicted.reading;
        }
        self.records.push_back(Record { reading, sample });
        true
    }
}

/// Lowers the calling thread's priority (Linux: `setpriority` on a thread id affects that
/// thread only). Best effort: a sampler that keeps nice 0 still samples.
fn lower_own_priority() {
    let tid = rustix::thread::gettid();
    let _ = rustix::process::setpriority_process(Some(tid), SAMPLER_NICE);
}

/// Samples a process tree on a background thread every `interval`.
///
/// The tree is re-discovered at every sample, so children started during the run are
/// counted from the sample after they appear. Dropping the sampler stops its thread.
#[derive(Debug)]
pub struct TreeSampler {
    state: Arc<Mutex<State>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state stays consistent even if a holder panicked: records are only appended.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TreeSampler {
    /// Takes a first reading of the tree under `root` and starts sampling it every
    /// `interval` (at least 1 ms).
    ///
    /// # Errors
    ///
    /// [`ProcStatError::NoSuchProcess`] if `root` does not exist, or an I/O error if
    /// `/proc` cannot be read or the thread cannot be spawned.
    pub fn start(root: u32, interval: Duration) -> Result<TreeSampler, ProcStatError> {
        let pids = discover(&[root], true)?;
        let first = read_known(&pids).ok_or(ProcStatError::NoSuchProcess { pid: root })?;
        let interval = interval.max(Duration::from_millis(1));
        let state = Arc::new(Mutex::new(State {
            root,
            interval,
            started: first.at,
            base: first,
            records: VecDeque::new(),
            pids,
            discovered: first.at,
        }));
        let (stop, stopped) = mpsc::channel::<()>();
        let thread_state = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name(format!("procstat-{root}"))
            .spawn(move || {
                lower_own_priority();
                let mut next = Instant::now() + interval;
                loop {
                    let wait = next.saturating_duration_since(Instant::now());
                    match stopped.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        // Told to stop, or the sampler was dropped.
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                    lock(&thread_state).sample();
                    // Keep the cadence; after a stall, resume from now instead of bursting.
                    next += interval;
                    let now = Instant::now();
                    if next < now {
                        next = now + interval;
                    }
                }
            })
            .map_err(|source| ProcStatError::Io {
                path: "(sampler thread)".into(),
                source,
            })?;
        Ok(TreeSampler {
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Now, as a point to summarize from.
    pub fn mark(&self) -> SampleMark {
        SampleMark(Instant::now())
    }

    /// Resource use over the samples taken after `mark`.
    ///
    /// Takes one fresh sample first unless the last one is under half an interval old, so
    /// even a step shorter than the interval has data and no sliver of an interval fakes a
    /// CPU peak, and reads PSS into it (the window's only PSS reading);
    /// CPU% is measured from the last reading at or before the mark. All zero when there
    /// is no sample after the mark (the root has exited).
    pub fn summary_since(&self, mark: SampleMark) -> ResourceSummary {
        let mut state = lock(&self.state);
        // A fresh sample only when the last one is not recent: one taken a few ms after
        // the background sample would divide a few ticks by a few ms and fake a CPU peak.
        let recent = state
            .records
            .back()
            .is_some_and(|r| r.reading.at > mark.0 && r.reading.at.elapsed() < state.interval / 2);
        if !recent {
            state.sample();
        }
        // PSS once, now that the window is over: reading it mid-window stalls the target.
        let pss = pss_of(&state.pids);
        if let Some(last) = state.records.back_mut()
            && last.reading.at > mark.0
        {
            last.sample.pss_bytes = pss;
        }
        summarize(&state, mark.0)
    }

    /// CPU% from the last reading at or before `mark` to the newest reading: the clock
    /// ticks of that whole interval summed. One sample covers one sampling interval, and
    /// at 100 ms a tick (10 ms of CPU) is 10% of it: a steady 5% reads 0%, 10%, 0%, …
    /// sample by sample, and 5% (±1 tick per process, ±1% over a second) here over a
    /// second. `None` until there is a reading after `mark`.
    pub fn cpu_since(&self, mark: SampleMark) -> Option<CpuInterval> {
        let state = lock(&self.state);
        let newest = state.records.back().filter(|r| r.reading.at > mark.0)?;
        let first_after = state.records.partition_point(|r| r.reading.at <= mark.0);
        let before = first_after
            .checked_sub(1)
            .map_or(state.base, |i| state.records[i].reading);
        Some(CpuInterval {
            cpu_percent: cpu_percent(&before, &newest.reading),
            wall: newest.reading.at.saturating_duration_since(before.at),
            end: SampleMark(newest.reading.at),
        })
    }

    /// The most recent sample, if any has been taken since the start.
    pub fn latest(&self) -> Option<Sample> {
        lock(&self.state).records.back().map(|r| r.sample)
    }

    /// Stops and joins the sampling thread; returns the retained samples, oldest first.
    pub fn stop(mut self) -> Vec<Sample> {
        self.halt();
        lock(&self.state).records.iter().map(|r| r.sample).collect()
    }

    fn halt(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The thread only reads /proc; a panic there has nothing to hand back.
            let _ = thread.join();
        }
    }
}

impl Drop for TreeSampler {
    fn drop(&mut self) {
        self.halt();
    }
}

fn summarize(state: &State, since: Instant) -> ResourceSummary {
    let first_after = state.records.partition_point(|r| r.reading.at <= since);
    let window: Vec<&Record> = state.records.range(first_after..).collect();
    let Some(last) = window.last() else {
        return ResourceSummary::default();
    };
    let before = first_after
        .checked_sub(1)
        .map_or(state.base, |i| state.records[i].reading);

    let count = window.len() as u64;
    let rss_total: u64 = window.iter().map(|r| r.sample.rss_bytes).sum();
    let pss: Vec<u64> = window.iter().filter_map(|r| r.sample.pss_bytes).collect();
    let pss = (!pss.is_empty()).then_some(pss);
    ResourceSummary {
        samples: u32::try_from(window.len()).unwrap_or(u32::MAX),
        cpu_percent_mean: cpu_percent(&before, &last.reading),
        cpu_percent_peak: window
            .iter()
            .map(|r| r.sample.cpu_percent)
            .fold(0.0, f64::max),
        rss_bytes_mean: rss_total / count,
        rss_bytes_peak: window.iter().map(|r| r.sample.rss_bytes).max().unwrap_or(0),
        pss_bytes_mean: pss.as_ref().map(|p| p.iter().sum::<u64>() / p.len() as u64),
        pss_bytes_peak: pss.as_ref().and_then(|p| p.iter().copied().max()),
    }
}
