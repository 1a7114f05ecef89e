//! The self-contained HTML report: endpoints, then fields, then samples side by side.
//! Inline CSS, no scripts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use scalpel_present::escape_html;

use crate::tally::{Sample, SampleResponse, Summary, body_text};

const CSS: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.5em}h2{margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#17702f}.bad{color:#b3261e}.noise{color:#8a6d00}
.big{font-size:2em;font-weight:bold}
.sample{border:1px solid #ccc;padding:.5em 1em;margin:1em 0}
.cols{display:flex;gap:1em}.cols>div{flex:1;min-width:0}
pre{background:#fafafa;border:1px solid #eee;padding:.5em;overflow-x:auto;font-size:12px;margin:0}
pre span.d{background:#ffe0e0;display:block}
code{font-size:12px}
";

/// Renders the report. `meta` is shown as the run's settings.
pub fn render_html(
    summary: &Summary,
    samples: &[Sample],
    meta: &BTreeMap<String, String>,
) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>scalpel shadow report</title><style>{CSS}</style></head><body><h1>scalpel shadow report</h1>"
    );
    settings(&mut h, meta);
    headline(&mut h, summary);
    endpoints(&mut h, summary);
    fields(&mut h, summary);
    noise(&mut h, summary);
    let _ = write!(h, "<h2>Samples ({})</h2>", samples.len());
    if samples.is_empty() {
        h.push_str("<p>None kept.</p>");
    }
    for (i, sm) in samples.iter().enumerate() {
        render_sample(&mut h, i + 1, sm);
    }
    h.push_str("</body></html>\n");
    h
}

/// The run's settings, a row each.
fn settings(h: &mut String, meta: &BTreeMap<String, String>) {
    if meta.is_empty() {
        return;
    }
    h.push_str("<table>");
    for (k, v) in meta {
        let _ = write!(
            h,
            "<tr><th>{}</th><td><code>{}</code></td></tr>",
            escape_html(k),
            escape_html(v)
        );
    }
    h.push_str("</table>");
}

/// The consistency in large type, the counts, and what was not compared and why.
fn headline(h: &mut String, s: &Summary) {
    let class = if s.compared > 0 && s.mismatched == 0 && s.errors == 0 {
        "ok"
    } else {
        "bad"
    };
    let _ = write!(
        h,
        "<p class=\"big {class}\">{} consistent</p><p>{} compared, {} matched, {} mismatched, {} skipped, {} errors{}</p>",
        escape_html(&s.consistency_text()),
        s.compared,
        s.matched,
        s.mismatched,
        s.skipped,
        s.errors,
        if s.secondary {
            ", noise measured with a secondary"
        } else {
            ""
        }
    );
    if !s.skipped_by_reason.is_empty() || !s.errors_by_kind.is_empty() {
        h.push_str("<table><tr><th>not compared</th><th>count</th></tr>");
        for (k, v) in s.skipped_by_reason.iter().chain(&s.errors_by_kind) {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=n>{v}</td></tr>",
                escape_html(k)
            );
        }
        h.push_str("</table>");
    }
}

/// A row per endpoint.
fn endpoints(h: &mut String, s: &Summary) {
    h.push_str("<h2>Endpoints</h2><table><tr><th>endpoint</th><th>compared</th><th>matched</th><th>mismatched</th><th>errors</th><th>consistency</th></tr>");
    for ep in &s.endpoints {
        let c = if ep.mismatched == 0 && ep.errors == 0 {
            "ok"
        } else {
            "bad"
        };
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=\"n {c}\">{}</td></tr>",
            escape_html(&ep.endpoint),
            ep.compared,
            ep.matched,
            ep.mismatched,
            ep.errors,
            escape_html(&ep.consistency_text())
        );
    }
    h.push_str("</table>");
}

/// The fields that really differ, per endpoint (with the secondary's count beside).
fn fields(h: &mut String, s: &Summary) {
    h.push_str("<h2>Fields that differ</h2>");
    let mut any = false;
    let head = if s.secondary {
        "<table><tr><th>endpoint</th><th>field</th><th>kind</th><th>primary≠candidate</th><th>primary≠secondary</th></tr>"
    } else {
        "<table><tr><th>endpoint</th><th>field</th><th>kind</th><th>requests</th></tr>"
    };
    for ep in &s.endpoints {
        for f in &ep.fields {
            if !any {
                h.push_str(head);
                any = true;
            }
            let _ = write!(
                h,
                "<tr><td><code>{}</code></td><td class=bad><code>{}</code></td><td>{}</td><td class=n>{}</td>",
                escape_html(&ep.endpoint),
                escape_html(&f.path),
                f.kind,
                f.count
            );
            if let Some(n) = f.noise_count {
                let _ = write!(h, "<td class=n>{n}</td>");
            }
            h.push_str("</tr>");
        }
    }
    h.push_str(if any {
        "</table>"
    } else {
        "<p class=ok>None.</p>"
    });
}

/// With a secondary: the fields that differ between the two copies of the old service too.
fn noise(h: &mut String, s: &Summary) {
    if !s.secondary {
        return;
    }
    h.push_str("<h2>Noise (differs between primary and secondary too)</h2>");
    if s.noise.is_empty() {
        h.push_str("<p>None.</p>");
        return;
    }
    h.push_str("<table><tr><th>endpoint</th><th>field</th><th>kind</th><th>primary≠candidate</th><th>primary≠secondary</th></tr>");
    for f in &s.noise {
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td class=noise><code>{}</code></td><td>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
            escape_html(&f.endpoint),
            escape_html(&f.path),
            f.kind,
            f.count,
            f.noise_count
        );
    }
    h.push_str("</table>");
}

fn render_sample(h: &mut String, n: usize, sm: &Sample) {
    let _ = write!(
        h,
        "<div class=sample><h3>#{n} <code>{} {}</code> — <code>{}</code></h3>",
        escape_html(&sm.method),
        escape_html(&sm.target),
        escape_html(&sm.endpoint)
    );
    for (title, list, class) in [
        ("primary vs candidate", &sm.differences, "bad"),
        ("primary vs secondary", &sm.noise_differences, "noise"),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = write!(
            h,
            "<table><tr><th colspan=4>{title}</th></tr><tr><th>path</th><th>kind</th><th>primary</th><th>other</th></tr>"
        );
        for d in list {
            let _ = write!(
                h,
                "<tr><td class={class}><code>{}</code></td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td></tr>",
                escape_html(d.path()),
                d.kind(),
                escape_html(d.primary().unwrap_or("—")),
                escape_html(d.candidate().unwrap_or("—"))
            );
        }
        h.push_str("</table>");
    }
    let p = pretty(&sm.primary);
    let c = pretty(&sm.candidate);
    let (pm, cm) = line_diff(&p, &c);
    h.push_str("<div class=cols>");
    column(h, "primary", &sm.primary, &p, &pm);
    column(h, "candidate", &sm.candidate, &c, &cm);
    if let Some(sec) = &sm.secondary {
        let s = pretty(sec);
        let (_, sm2) = line_diff(&p, &s);
        column(h, "secondary", sec, &s, &sm2);
    }
    h.push_str("</div></div>");
}

fn column(h: &mut String, title: &str, r: &SampleResponse, lines: &[String], marks: &[bool]) {
    let _ = write!(h, "<div><b>{title}</b> — status {}<pre>", r.status);
    for (k, v) in &r.headers {
        let _ = writeln!(h, "{}: {}", escape_html(k), escape_html(v));
    }
    h.push_str("</pre><pre>");
    for (i, line) in lines.iter().enumerate() {
        if marks.get(i).copied().unwrap_or(false) {
            let _ = write!(h, "<span class=d>{}</span>", escape_html(line));
        } else {
            let _ = writeln!(h, "{}", escape_html(line));
        }
    }
    h.push_str("</pre></div>");
}

const SHOWN_BODY_MAX: usize = 64 * 1024;

fn pretty(r: &SampleResponse) -> Vec<String> {
    let text = match serde_json::from_slice::<serde_json::Value>(&r.body) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => match body_text(&r.body) {
            (t, "text") => {
                let mut cut = t.len().min(SHOWN_BODY_MAX);
                while !t.is_char_boundary(cut) {
                    cut -= 1;
                }
                t[..cut].to_string()
            }
            (b64, _) => {
                // Binary: base64 in lines of 76, never replacement characters.
                let shown = &b64[..b64.len().min(SHOWN_BODY_MAX)];
                let mut out = format!("(binary, {} bytes, base64)\n", r.body.len());
                for chunk in shown.as_bytes().chunks(76) {
                    out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
                    out.push('\n');
                }
                out
            }
        },
    };
    text.lines().map(str::to_string).collect()
}

/// Marks the lines of each side that are not in their longest common subsequence.
fn line_diff(a: &[String], b: &[String]) -> (Vec<bool>, Vec<bool>) {
    const MAX: usize = 2000;
    if a.len() > MAX || b.len() > MAX {
        return (vec![false; a.len()], vec![false; b.len()]);
    }
    let (n, m) = (a.len(), b.len());
    let mut t = vec![0u16; (n + 1) * (m + 1)];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i * (m + 1) + j] = if a[i] == b[j] {
                t[(i + 1) * (m + 1) + j + 1] + 1
            } else {
                t[(i + 1) * (m + 1) + j].max(t[i * (m + 1) + j + 1])
            };
        }
    }
    let (mut am, mut bm) = (vec![true; n], vec![true; m]);
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            am[i] = false;
            bm[j] = false;
            i += 1;
            j += 1;
        } else if t[(i + 1) * (m + 1) + j] >= t[i * (m + 1) + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    (am, bm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_diff_marks_only_changed_lines() {
        let a: Vec<String> = ["{", "\"a\": 1,", "\"b\": 2", "}"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let b: Vec<String> = ["{", "\"a\": 1,", "\"b\": 3", "}"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (am, bm) = line_diff(&a, &b);
        assert_eq!(am, vec![false, false, true, false]);
        assert_eq!(bm, vec![false, false, true, false]);
    }

    #[test]
    fn binary_bodies_are_shown_as_base64_never_as_replacement_characters() {
        let r = SampleResponse {
            status: 200,
            headers: vec![],
            body: bytes::Bytes::from_static(b"\x89PNG\r\n\x1a\n\xff\xfe"),
        };
        let lines = pretty(&r);
        assert_eq!(lines[0], "(binary, 10 bytes, base64)");
        assert_eq!(lines[1], "iVBORw0KGgr//g==");
        assert!(lines.iter().all(|l| !l.contains('\u{fffd}')));
    }

    #[test]
    fn html_escapes_user_text() {
        assert_eq!(
            escape_html("<script>&\"'"),
            "&lt;script&gt;&amp;&quot;&#39;"
        );
        assert_eq!(crate::tally::consistency_text(99_999, 100_000, 0), "99.99%");
        assert_eq!(crate::tally::consistency_text(5, 5, 0), "100.00%");
        // Never 100 % over requests that were not compared.
        assert_eq!(
            crate::tally::consistency_text(680, 680, 417),
            "61.98–100.00%"
        );
    }
}
