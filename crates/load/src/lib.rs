//! Load schedules (closed, open, ramp), request workers, per-step HdrHistograms, SLO
//! evaluation and the result model.

pub mod result;
