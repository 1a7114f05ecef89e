//! Reading latency bounds out of an SLO string, to draw them on the charts.
//!
//! Judging steps is the load engine's job ([`scalpel_load::Slo`]); this only finds, say,
//! the `50ms` of `p99<50ms,errors<1%,rps>900` so the p99 chart can show the limit. Clauses it
//! does not understand are skipped: a missing line on a chart is harmless.

/// The bound in milliseconds on a latency figure (`p50`, `p90`, `p99`, `p99.9`/`p999`,
/// `mean`, `max`) in `slo`, if it has one.
pub(crate) fn latency_bound_ms(slo: &str, figure: &str) -> Option<f64> {
    let wanted = if figure == "p99.9" { "p999" } else { figure };
    slo.split(',').find_map(|clause| {
        let (name, rest) = clause.split_once('<')?;
        let name = name.trim().to_ascii_lowercase();
        let name = if name == "p99.9" {
            "p999".to_owned()
        } else {
            name
        };
        if name != wanted {
            return None;
        }
        let rest = rest.trim_start_matches('=').trim();
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, unit) = rest.split_at(split);
        let value: f64 = number.parse().ok()?;
        match unit.trim() {
            "us" | "µs" => Some(value / 1000.0),
            "ms" => Some(value),
            "s" => Some(value * 1000.0),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_latency_bounds_in_any_unit_and_skips_the_rest() {
        let slo = "p99<50ms, errors<1%, rps>900, p999<=0.2s, p50<500us";
        assert_eq!(latency_bound_ms(slo, "p99"), Some(50.0));
        assert_eq!(latency_bound_ms(slo, "p99.9"), Some(200.0));
        assert_eq!(latency_bound_ms(slo, "p50"), Some(0.5));
        assert_eq!(latency_bound_ms(slo, "p90"), None);
        assert_eq!(latency_bound_ms("p99<fast", "p99"), None);
    }
}
