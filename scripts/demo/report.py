"""target/demo/index.html: one self-contained page for the three stories. The look, the
plots and the per-run tables are `scalpel report html`'s own: its CSS is reused and the
bodies of its pages for the main result files are folded in under each story."""

import html
import os
import re
import subprocess

import common as c
import ladder_python
import payments

EXTRA_CSS = """
.story{margin-top:34px}
.embedded{border-top:1px dashed var(--line);margin-top:8px;padding-top:4px;overflow-x:auto}
.embedded header h1{font-size:16px}
.target-met{color:var(--good);font-weight:600}.target-not{color:var(--bad);font-weight:600}
.target-open{color:#b45309;font-weight:600}.card-verdict{font-size:13px;margin-top:2px}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px 12px;overflow-x:auto;font-size:12.5px}
td.left,th.left{text-align:left}
"""


def esc(v):
    return html.escape(str(v), quote=True)


def embed(result_file, title):
    """The body of `scalpel report html RESULT`, folded; ('', css) when the file is gone."""
    if not result_file or not os.path.exists(result_file):
        return "", None
    page = result_file[:-5] + ".html"
    r = subprocess.run([c.SCALPEL, "report", "html", result_file, "-o", page], capture_output=True, text=True)
    if r.returncode != 0:
        return f"<p class=\"note\">scalpel report html {esc(result_file)} failed: {esc(r.stderr.strip())}</p>", None
    text = c.read(page)
    css = re.search(r"<style>(.*?)</style>", text, re.S)
    body = re.search(r"<main>(.*?)</main>", text, re.S)
    inner = body.group(1) if body else ""
    inner = re.sub(r"<footer>.*?</footer>", "", inner, flags=re.S)
    return (f'<details><summary>{esc(title)}</summary><div class="embedded">{inner}</div></details>',
            css.group(1) if css else None)


def html_table(headers, rows, left=1):
    out = ['<table class="figures"><thead><tr>']
    out += [f'<th class="left">{esc(h)}</th>' if i < left else f"<th>{esc(h)}</th>" for i, h in enumerate(headers)]
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>")
        out += [f'<th class="left">{esc(v)}</th>' if i < left else f"<td>{esc(v)}</td>" for i, v in enumerate(r)]
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def card(name, figure, label, note, color="#2563eb", verdict=None):
    """A headline card; `verdict` (common.verdict's dict) adds its decision, interval and
    number of repeats under the figure."""
    decided = ""
    if verdict is not None:
        decided = (f'<div class="card-verdict">{verdict_span(verdict)} '
                   f'{esc(interval_words(verdict))}</div>')
    return (f'<div class="card" style="border-top-color:{color}"><div class="card-name" style="color:{color}">'
            f'{esc(name)}</div><div class="card-figure">{esc(figure)}</div><div class="card-label">{esc(label)}'
            f'</div>{decided}<div class="card-note">{esc(note)}</div></div>')


def verdict_span(v):
    """MET / NOT MET / undecided (or "interval" for a figure without a target), coloured."""
    word = v.get("verdict") or "interval"
    cls = {"MET": "target-met", "NOT MET": "target-not"}.get(word, "target-open")
    return f'<span class="{cls}">{esc(word)}</span>'


def verdict_line(v):
    """The decision, coloured, then what it rests on and, when undecided, why."""
    why = f" — {esc(v['why'])}" if v.get("verdict") == "undecided" else ""
    want = f", target &gt;= {esc(c.fmt_ratio(v['want']))}" if v.get("want") is not None else ""
    return f"{verdict_span(v)}: {esc(c.verdict_figure(v))}{want}{why}"


def span_range(v):
    """ "1.21x–1.52x (2 of 2)": the interval and how many repeats gave a figure, for a table cell."""
    got = len([x for x in v["values"] if x is not None])
    rng = "-" if v["lo"] is None else f"{c.fmt_ratio(v['lo'])}–{c.fmt_ratio(v['hi'])}"
    return f"{rng} ({got} of {v['repeats']})"


def interval_words(v):
    """ "1.21x–1.52x, min–max of 2 repeats; target >= 1.40x" (or why there is no interval)."""
    n = v["repeats"]
    got = len([x for x in v["values"] if x is not None])
    if v["lo"] is None:
        text = f"no figure in {n} repeat{'s' if n != 1 else ''}"
    else:
        kind = f"~{v['coverage'] * 100:.0f}% interval" if v.get("coverage") else "min–max"
        text = f"{c.fmt_ratio(v['lo'])}–{c.fmt_ratio(v['hi'])}, {kind} of {got} repeat{'s' if got != 1 else ''}"
        if got < n:
            text += f" ({n - got} without a figure)"
    if v.get("want") is not None:
        text += f"; target >= {c.fmt_ratio(v['want'])}"
    return text


def target_items(targets):
    """The <li> lines of a stage's targets (common.served_target's); a target recorded
    before verdicts had intervals is shown as it was written, marked so."""
    return "".join(f'<li>{esc(t["target"])}: {verdict_line(t["interval"])}; {esc(t.get("note", ""))}</li>'
                   if "interval" in t else
                   f'<li>{esc(t["target"])}: {esc(t["verdict"])} (an older report: one run, no interval)</li>'
                   for t in targets)


def ladder_section(d, css_sink):
    if not d:
        return '<section class="story"><h2>1. The tier ladder, served</h2><p class="note">not run</p></section>'
    rows = []
    for t in d["tiers"]:
        slo = c.fmt_max(t["slo_rps"], t["slo_rps_lower_bound"], t.get("ramp_start"))
        rows.append([t["tier"], t["how"], c.fmt_num(t["rps"]), c.fmt_ms(t["mean_ms"]), c.fmt_ms(t["p99_ms"]),
                     c.fmt_num(t["bytes"], 0), c.fmt_num(t["pss_mb"]), c.fmt_num(t["cpu_us_per_request"]),
                     c.fmt_num(t["rps_per_core"]), slo])
    main = html_table(["tier", "how", "req/s", "mean ms", "p99 ms", "bytes", "PSS MiB", "CPU µs/request",
                       "req/s per core", f"req/s at {d['slo']}"], rows, left=2)
    rows = []
    for t in d["tiers"]:
        v, a, z = t["vs_0_article"], t["article_vs_0"] or {}, t["vs_0"]
        pair = lambda k, ak: f"{c.fmt_ratio(v[k])} | {c.fmt_ratio(a.get(ak)) if a else '-'}"
        rows.append([t["tier"], pair("rps", "rps"), pair("mean_ms", "mean_ms"), pair("p99_ms", "p99_ms"),
                     pair("bytes", "bytes"), pair("pss_mb", "memory"), c.fmt_ratio(z["rps"]),
                     c.fmt_ratio(z["rps_per_core"]), c.fmt_ratio(z["slo_rps"])])
    ratios = html_table(["tier", "req/s (ours | article)", "mean", "p99", "bytes", "memory", "req/s vs 0",
                         "per core vs 0", "at SLO vs 0"], rows)
    targets = target_items(d["targets"])
    python = python_block(d)
    closed, css = embed(d.get("closed_file"), "the closed-model run, every tier (scalpel report html)")
    css_sink.append(css)
    ramps = ""
    for t in d["tiers"]:
        files = t.get("ramp_files") or []
        if files:
            block, css = embed(files[0], f"tier {t['tier']}: the open-model ramp")
            css_sink.append(css)
            ramps += block
    return f"""<section class="story"><h2>1. The tier ladder, served — GET /qrcode at every tier of Rust adoption</h2>
<p class="note">{esc(d['pinning'])}. Closed model at the article's 100 connections (all tiers in one
<code>scalpel load</code> run, alternating segments; {len(d.get('closed_files') or [1])} such runs, the figures
their medians, each target judged on their paired ratios), then an open-model ramp per tier to {esc(d['slo'])}.
{esc(d['outputs']['note'])}.</p>
{main}
<h3>Ratios to tier 0-article (ours | the article's published figure) and to tier 0 with matched settings</h3>
{ratios}
<p class="note">Each tier's ramp has the same shape, scaled to its own closed-model rate. PSS is the whole
process tree's, tier 1's <code>qr-cli</code> children included. Mean latency in a closed loop is 100
connections ÷ throughput, as in the article. On a shared
machine req/s follows the CPU share each server gets; CPU µs per request (and req/s per fully used core) does
not.</p>
<ul>{targets}</ul>
{python}
{closed}{ramps}</section>"""


def python_block(d):
    """The Python host's table (qr/python), from the same runs; '' for a report made before it."""
    p = d.get("python")
    if not p:
        return ""
    targets = target_items(p["targets"])
    return (f'<h3>The same ladder, Python host (qr/python: an ASGI app under uvicorn), in the same runs</h3>'
            f'<p class="note">{esc(d["outputs"].get("python_note", ""))}. Tier 4 is repeated as the top.</p>'
            f'{html_table(ladder_python.HEADERS, ladder_python.table_rows(p), left=2)}<ul>{targets}</ul>')


def payments_section(d, css_sink):
    if not d:
        return '<section class="story"><h2>2. Payments</h2><p class="note">not run</p></section>'
    sh = d["shadow"]
    parts = [f"""<section class="story"><h2>2. Payments — the hot endpoints moved from Go to Rust</h2>
<p class="note">{esc(d['pinning'])}. {d['users']:,} users, the ledger in {esc(d.get('store', 'sqlite'))}; every user on every hot endpoint and window replayed to
both services and compared field by field: {sh['compared']:,} pairs, {sh['matched']:,} matched,
{sh['mismatched']} differ, {sh['errors']} errors.</p><pre>{esc(sh['table'].strip())}</pre>"""]
    if d.get("shadow_cgo"):
        parts.append(f"<p class=\"note\">Go against Go + Rust via cgo (tier 3), the same requests:</p>"
                     f"<pre>{esc(d['shadow_cgo']['table'].strip())}</pre>")
    for ep, e in d["endpoints"].items():
        f = e["fixed"]
        parts.append(f"<h3>/v1/users/{{id}}/{esc(ep)}: ramped under {esc(d['slo'])}, then fixed at "
                     f"{f['offered_rps']:,} req/s (half of Go's max)</h3>")
        # The rungs the run had (Go, the cgo engine, the Rust service), as the terminal shows them.
        parts.append(html_table(*payments.endpoint_table(e)))
        if e.get("target"):
            parts.append(f'<p>Target: Rust\'s max &gt;= {esc(c.fmt_ratio(e["target"]["want"]))} Go\'s: '
                         f'{verdict_line(e["target"])}</p>')
        if e.get("target_cgo"):
            parts.append(f'<p>Target: the cgo engine\'s max &gt;= {esc(c.fmt_ratio(e["target_cgo"]["want"]))} Go\'s: '
                         f'{verdict_line(e["target_cgo"])}</p>')
        if f.get("go_http_layer_us") is not None:
            parts.append(f'<p class="note">Go\'s HTTP layer and the cgo crossing: '
                         f'{esc(c.fmt_num(f["go_http_layer_us"]))} µs of CPU per request (tier 3 minus tier 4: '
                         "both compute with the same Rust code).</p>")
        cpu = e.get("cpu_percent_at_max") or {}
        parts.append(f'<p class="note">CPU at the last step that held: Go {esc(c.fmt_num(cpu.get("go")))}%, Rust '
                     f'{esc(c.fmt_num(cpu.get("rust")))}% of a core. A maximum marked "&gt;=" held at the ramp\'s '
                     "top: a lower bound.</p>")
        block, css = embed(e["ramp_files"][0], f"{ep}: the ramp (scalpel report html)")
        css_sink.append(css)
        parts.append(block)
        block, css = embed(e["fixed_files"][0], f"{ep}: the fixed load (scalpel report html)")
        css_sink.append(css)
        parts.append(block)
    cost = d["cost"]
    parts.append(f"<h3>Cost projection</h3><pre>$ {esc(cost['command'])}\n{esc(cost['table'].strip())}</pre>")
    parts.append("</section>")
    return "".join(parts)


def runtime_section(d, ab, css_sink):
    if not d:
        return '<section class="story"><h2>3. The runtime</h2><p class="note">not run</p></section>'
    parts = [f"""<section class="story"><h2>3. The runtime — the same Node service, the story's setup before and
under scalpel serve</h2>
<p class="note">{esc(d['note'])}. BEFORE, on the CPU-heavy workloads, is the setup the story ran: nginx (round
robin, keep-alive connections to its upstream) in front of pm2's cluster mode, where each kept-alive connection
lands on one worker and stays there; serve gives each worker its own port and picks a worker per request
(<code>least_conn</code>, <code>max_in_flight_per_worker = 1</code>). Hello world compares pm2 alone with serve's
direct mode. Every ramp repeat alternates all setups; a verdict is MET or NOT MET only when the repeats'
interval is wholly on one side of its target and holds their median with at least 90% probability (five
repeats or more).</p>"""]
    old = [w["name"] for w in d["workloads"] if "setups" not in w]
    if old:
        parts.append(f'<p class="note">Workloads recorded by an older demo ({esc(", ".join(old))}) are not shown: '
                     "run <code>./run demo --only runtime</code>.</p>")
    for w in d["workloads"]:
        if "setups" in w:
            parts.append(workload_block(w))
    for w in d["workloads"]:
        if "setups" not in w:
            continue
        block, css = embed(w["ramp_files"][0], f"{w['name']}: the first ramp, every setup alternating "
                                               "(scalpel report html)")
        css_sink.append(css)
        parts.append(block)
    if ab:
        rows = [[a["app"], c.fmt_num(a["requests"], 0), c.fmt_num(a["errors"], 0), c.fmt_ms(a["p50_ms"]),
                 c.fmt_ms(a["p99_ms"]), c.fmt_num(a["cpu_percent"]), c.fmt_num(a["pss_mb"])] for a in ab["arms"]]
        cons = ab["consistency_percent"]
        parts.append("<h3>A/B through scalpel serve: tier 0 host vs tier 3 host, 50/50 sticky by user, "
                     "tier 4 mirrored</h3>")
        parts.append(html_table(["arm", "requests", "5xx", "p50 ms", "p99 ms", "CPU %", "PSS MiB"], rows))
        parts.append(f"<p class=\"note\">{ab['client']['rps']:.1f} req/s served (asked {ab['rate']}), client p99 "
                     f"{esc(c.fmt_ms(ab['client']['p99_ms']))} ms, {ab['client']['errors']} errors. Mirror: "
                     f"{ab['compared']} compared, {ab['matched']} matched, {ab['mismatched']} differ, "
                     f"{ab['skipped']} skipped: consistency {esc(c.fmt_num(cons, 2) if cons is not None else '-')}% "
                     f"(tier-3 arm's share {esc(c.fmt_num(ab['tier3_share_percent']))}%). {esc(ab['note'])}.</p>")
    parts.append("</section>")
    return "".join(parts)


def workload_block(w):
    """One workload: a row per setup (rate at the SLO and each ramp's, the ratio to BEFORE
    with its verdict, the p99 at equal load and each run's, CPU, memory)."""
    before = w["before"]
    which = f"{w['p99_endpoint']} p99" if w.get("p99_endpoint") else "p99"
    start = w.get("ramp_start")
    rows = []
    for k, label in w["setups"].items():
        v = w["verdict"] if k == "serve" else w["variants"].get(k)
        pr = w["p99_ratio"].get(k)
        rows.append([f"{k}: {label}", c.fmt_max(w["rps"][k], w["rps_lower_bound"][k], start),
                     " ".join(c.fmt_max(x, b, start) for x, b in zip(w["rps_all"][k], w["rps_lower_bound_all"][k])),
                     "" if v is None else c.fmt_ratio(v["median"]), "" if v is None else span_range(v),
                     c.fmt_ms(w["p99_ms"][k]), " ".join(c.fmt_ms(x) for x in w["p99_ms_all"][k]),
                     "" if pr is None else f"{c.fmt_ratio(pr['median'])} ({span_range(pr)})",
                     c.fmt_num(w["cpu_percent"][k]), c.fmt_num(w["cpu_us_per_request"][k]), c.fmt_num(w["pss_mb"][k])])
    head = ["setup", "max req/s at the SLO", "each ramp", f"/ {before}", "interval (repeats)",
            f"{which} ms at {w['fixed_rps']:,} req/s", "each run", f"/ {before} (interval)", "CPU %", "CPU µs/req",
            "PSS MiB"]
    target = f"<p>Target: {esc(w['target'])}: {verdict_line(w['verdict'])}</p>" if w.get("target") else ""
    target += "".join(f"<p>{esc(k)} / {esc(before)}, the same target: {verdict_line(v)}</p>"
                      for k, v in w["variants"].items())
    return (f"<h3>{esc(w['name'])}: {esc(w['what'])}; SLO {esc(w['slo'])}</h3>{html_table(head, rows)}"
            f'<p class="note">{esc(which)} at equal load: {w["fixed_rps"]:,} req/s, 80% of {esc(before)}\'s rate '
            f"at the SLO. A rate marked &gt;= held at the ramp's top (a lower bound); &lt; held not even its first "
            f"step.</p>{target}")


def cards(data):
    out = ['<section class="cards">']
    lad = data.get("ladder")
    if lad:
        t = lad["targets"][0]
        if "interval" in t:
            out.append(card("ladder", c.fmt_ratio(t["req_s_ratio"]), "tier 4 / tier 3, served req/s",
                            f"per CPU-second {c.fmt_ratio(t['per_core_ratio'])}", verdict=t["interval"]))
    pay = data.get("payments")
    if pay:
        out.append(card("payments", f"{c.fmt_num(pay['consistency_percent'], 2)}%", "same answers (shadow replay)",
                        f"{pay['shadow']['compared']:,} pairs, every one compared: a count, not a sample",
                        "#1e7b34"))
        e = pay["endpoints"][pay["endpoint"]]
        if "target" in e:
            out.append(card("payments", c.fmt_ratio(e["target"]["median"]), f"Rust / Go max req/s ({pay['endpoint']})",
                            f"Go {c.fmt_max(e['max_rps']['go'], e['max_rps_lower_bound']['go'], e.get('ramp_start'))}, "
                            f"Rust {c.fmt_max(e['max_rps']['rust'], e['max_rps_lower_bound']['rust'], e.get('ramp_start'))}"
                            " (medians)", "#1e7b34", e["target"]))
        cost = pay["cost"]
        saving = cost.get("yearly_saving")
        each = [x for x in cost.get("yearly_saving_all") or [] if x is not None]
        spread = (f"; ${min(each):,.0f}–${max(each):,.0f} over the {len(each)} fixed-load runs" if len(each) > 1
                  else "; one fixed-load run")
        out.append(card("cost", f"${saving:,.2f}" if saving is not None else "-", "a year",
                        f"{cost.get('vcpu_saved')} vCPU freed at {cost['fleet_qps']:,.0f} req/s{spread}", "#1e7b34"))
    rt = data.get("runtime")
    for w in (rt or {}).get("workloads", []):
        if w["name"] not in ("uneven", "hello") or "verdict" not in w:
            continue
        before, v = w["before"], w["verdict"]
        if w["name"] == "uneven":
            p = w["p99_ratio"]["serve"]
            note = (f"{w['p99_endpoint']} p99 at {w['fixed_rps']:,} req/s: serve {c.fmt_ms(w['p99_ms']['serve'])} ms, "
                    f"{before} {c.fmt_ms(w['p99_ms'][before])} ms ({c.fmt_ratio(p['median'])}, {interval_words(p)})")
            for k, x in w["variants"].items():
                note += f"; {k} {c.fmt_ratio(x['median'])} the rate ({x.get('verdict')})"
            out.append(card("runtime", c.fmt_ratio(v["median"]), f"serve / {before}, rate held at the SLO",
                            f"uneven mix, SLO {w['slo']}; " + note, "#7c3aed", v))
        else:
            out.append(card("runtime", c.fmt_ratio(v["median"]), f"serve direct mode / {before} alone, rate held "
                            "at the SLO", f"hello world, SLO {w['slo']}; p99 at {w['fixed_rps']:,} req/s: serve "
                            f"{c.fmt_ms(w['p99_ms']['serve'])} ms, {before} {c.fmt_ms(w['p99_ms'][before])} ms",
                            "#7c3aed", v))
    out.append("</section>")
    return "".join(out)


def write(data):
    css_sink = []
    body = [cards(data), ladder_section(data.get("ladder"), css_sink),
            payments_section(data.get("payments"), css_sink),
            runtime_section(data.get("runtime"), data.get("ab"), css_sink)]
    css = next((x for x in css_sink if x), "")
    m = data.get("machine", {})
    meta = [
        ("run", f"{data.get('mode', '?')} ({data.get('started_at', '?')}, {data.get('duration_s', 0):.0f} s)"),
        ("machine", f"{m.get('cpus')} CPUs, {m.get('cpu_model')}, {m.get('memory_gib')} GiB, kernel {m.get('kernel')}"),
        ("tools", f"{m.get('rustc')}; {m.get('go')}; node {m.get('node')}"),
        ("load average", f"{data.get('loadavg_start')} at the start, {data.get('loadavg_end')} at the end"),
        ("layout", data.get("pinning", "")),
    ]
    meta_html = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in meta)
    failures = "".join(f"<li>{esc(f)}</li>" for f in data.get("failures", []))
    if failures:
        failures = f'<section><h2>Stages that failed</h2><ul class="target-not">{failures}</ul></section>'
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/><meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>Scalpel demo: the three stories</title><style>{css}{EXTRA_CSS}</style></head>
<body><main>
<header><h1>Scalpel demo: the three stories, measured on this machine</h1><dl class="meta">{meta_html}</dl></header>
{failures}{''.join(body)}
<footer>Written by ./run demo (scripts/demo). Every figure comes from the result files under target/demo/;
report.json holds them all. Percentiles come from HdrHistograms. A shared machine moves absolute rates and tail
latencies; CPU per request and ratios measured in one alternating run hold up better.</footer>
</main></body></html>
"""
    path = os.path.join(c.OUT, "index.html")
    with open(path + ".tmp", "w") as f:
        f.write(page)
    os.replace(path + ".tmp", path)
