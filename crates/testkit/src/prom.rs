//! Reading a value out of Prometheus text (`/metrics`), as a scraper would.

/// The value of the sample `sample` — its name and labels exactly as written, e.g.
/// `scalpel_serve_retries_total{app="web"}` — in Prometheus text; `None` when absent or
/// not a number.
pub fn metric_value(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

/// [`metric_value`], 0 when the sample is absent (a counter not yet incremented).
pub fn metric(text: &str, sample: &str) -> f64 {
    metric_value(text, sample).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_matched_whole_never_by_its_prefix() {
        let text = "# TYPE a_total counter\n\
                    a_total{k=\"x\"} 3\n\
                    a_total_more{k=\"x\"} 9\n\
                    b 2.5\n";
        assert_eq!(metric_value(text, "a_total{k=\"x\"}"), Some(3.0));
        assert_eq!(metric_value(text, "b"), Some(2.5));
        assert_eq!(metric_value(text, "a_total"), None);
        assert_eq!(metric(text, "c"), 0.0);
    }
}
