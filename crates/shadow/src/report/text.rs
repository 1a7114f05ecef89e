//! The terminal summary of a run: a table of endpoints, then the requests not compared
//! and why, the fields that differ, and the noise.

use std::fmt::Write as _;

use crate::tally::Summary;

/// The terminal summary: endpoints, then the fields that differ, then noise.
pub fn text_table(s: &Summary) -> String {
    let mut o = String::new();
    let w = s
        .endpoints
        .iter()
        .map(|e| e.endpoint.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let _ = writeln!(
        o,
        "{:<w$}  {:>9}  {:>9}  {:>10}  {:>7}  {:>8}  {:>11}",
        "endpoint", "compared", "matched", "mismatched", "errors", "skipped", "consistency"
    );
    // Consistency is a range wherever chosen requests were not compared (see
    // `consistency_text`): never 100 % over requests nobody compared.
    for e in &s.endpoints {
        let _ = writeln!(
            o,
            "{:<w$}  {:>9}  {:>9}  {:>10}  {:>7}  {:>8}  {:>11}",
            e.endpoint,
            e.compared,
            e.matched,
            e.mismatched,
            e.errors,
            "",
            e.consistency_text()
        );
    }
    let _ = writeln!(
        o,
        "{:<w$}  {:>9}  {:>9}  {:>10}  {:>7}  {:>8}  {:>11}",
        "TOTAL",
        s.compared,
        s.matched,
        s.mismatched,
        s.errors,
        s.skipped,
        s.consistency_text()
    );
    if s.not_compared > 0 {
        let _ = writeln!(
            o,
            "not compared: {} of {} chosen ({:.2}% compared)",
            s.not_compared,
            s.compared + s.not_compared,
            s.coverage_percent
        );
    }
    if s.skipped > 0 {
        let reasons: Vec<String> = s
            .skipped_by_reason
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(o, "skipped: {} ({})", s.skipped, reasons.join(", "));
    }
    if !s.redaction_withheld.is_empty() {
        let parts: Vec<String> = s
            .redaction_withheld
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            o,
            "redaction withheld (unreadable, stored as [REDACTED]): {}",
            parts.join(", ")
        );
    }
    if !s.errors_by_kind.is_empty() {
        let kinds: Vec<String> = s
            .errors_by_kind
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(o, "failed sides: {}", kinds.join(", "));
    }
    let fields: Vec<_> = s
        .endpoints
        .iter()
        .flat_map(|e| e.fields.iter().map(move |f| (&e.endpoint, f)))
        .collect();
    if !fields.is_empty() {
        let _ = writeln!(o, "\nfields that differ:");
        for (ep, f) in fields {
            let _ = writeln!(o, "  {ep}  {}  {}  {}", f.path, f.kind, f.count);
        }
    }
    if !s.noise.is_empty() {
        let _ = writeln!(
            o,
            "\nnoise (also differs between primary and secondary; not counted):"
        );
        for f in &s.noise {
            let _ = writeln!(
                o,
                "  {}  {}  {}  candidate {} / secondary {}",
                f.endpoint, f.path, f.kind, f.count, f.noise_count
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::EndpointSummary;

    #[test]
    fn the_table_shows_each_endpoint_the_total_and_why_requests_were_not_compared() {
        let mut s = Summary {
            compared: 10,
            matched: 9,
            mismatched: 1,
            skipped: 2,
            not_compared: 2,
            ..Summary::default()
        };
        s.skipped_by_reason.insert("too_large".into(), 2);
        s.endpoints.push(EndpointSummary {
            endpoint: "GET /v1/users/{id}".into(),
            compared: 10,
            matched: 9,
            mismatched: 1,
            ..EndpointSummary::default()
        });
        let table = text_table(&s);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("endpoint"), "{table}");
        assert!(lines[1].starts_with("GET /v1/users/{id}"), "{table}");
        assert!(
            lines[2].starts_with("TOTAL") && lines[2].contains("10"),
            "{table}"
        );
        assert!(table.contains("not compared: 2 of 12 chosen"), "{table}");
        assert!(table.contains("skipped: 2 (too_large=2)"), "{table}");
    }
}
