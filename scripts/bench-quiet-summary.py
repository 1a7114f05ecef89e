"""One markdown section of target/bench-quiet/RESULTS.md from one part's output (scripts/bench-quiet.sh).

    python3 scripts/bench-quiet-summary.py PART ISSUE LOG RC SECONDS LOAD_BEFORE LOAD_AFTER NPROC CPU COMMAND OUT

Reads what the part's own script printed (LOG) or wrote (the demo's report.json under OUT) and
prints the figure, the ratio, the spread over repeats and the verdict against the issue's target.
A part that failed, or whose output does not parse, is said to have failed: never a verdict
without figures. Standard library only."""

import json
import os
import re
import sys

part, issue, log, rc, secs, before, after, nproc, cpu, command, out = sys.argv[1:12]
rc, secs = int(rc), int(secs)
text = open(log, errors="replace").read() if os.path.exists(log) else ""
NUM = r"[-+]?[\d.]+"


def verdict(ok):
    return "**met**" if ok else "**NOT met**"


def by_bounds(median, lo, hi, want, higher_better=True):
    """A ratio judged from its sides' min–max (the worst and best pairing of the repeats), never
    from the median alone: met only when even the worst pairing passes, NOT met only when even
    the best fails, else undecided."""
    ok = (lambda r: r >= want) if higher_better else (lambda r: r <= want)
    worst, best = (lo, hi) if higher_better else (hi, lo)
    word = "**met**" if ok(worst) else "**NOT met**" if not ok(best) else "**undecided**"
    return f"{word} (median {median:.2f}x, {lo:.2f}–{hi:.2f}x from the sides' min–max)"


def decided(v):
    """The demo's own verdict (scripts/demo/common.py: MET / NOT MET only when the repeats'
    interval is wholly on one side of the target) in this file's words, with its interval."""
    word = {"MET": "**met**", "NOT MET": "**NOT met**"}.get(v.get("verdict"), "**undecided**")
    figure = v.get("text", "").split(": ", 1)[-1]
    return f"{word}: {figure}" + (f" — {v.get('why')}" if word == "**undecided**" else "")


def fnum(x, d=0):
    return "-" if x is None else f"{x:,.{d}f}"


def fratio(x):
    return "-" if x is None else f"{x:.2f}x"


def tail(n=15):
    return "\n".join(text.strip().splitlines()[-n:])


def ratio(a, b):
    return None if a is None or not b else a / b


def spread(xs, d=0):
    xs = sorted(x for x in (xs or []) if x is not None)
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{fnum(xs[0], d)} (one run)"
    return f"{fnum(xs[0], d)}–{fnum(xs[-1], d)} over {len(xs)}"


def demo_report(name):
    path = os.path.join(out, f"demo-{name}", "report.json")
    with open(path) as f:
        d = json.load(f)
    if d.get("failures"):
        raise ValueError("; ".join(d["failures"]))
    return d


def direct():
    rows = {}
    for m in re.finditer(rf"^\| (direct|pm2|proxy) \| ({NUM}) \(({NUM})–({NUM})\) \| ({NUM}) \(({NUM})–({NUM})\) \|",
                         text, re.M):
        rows[m.group(1)] = [float(x) for x in m.groups()[1:]]
    d, p, x = rows["direct"], rows["pm2"], rows["proxy"]
    rr, cr = d[0] / p[0], d[3] / p[3]
    spreads = re.findall(r"^- direct spread, (.*)$", text, re.M)
    lines = [
        "| setup | req/s median (min–max) | CPU µs/request, whole tree (min–max) |", "|---|---|---|",
        *(f"| {k} | {fnum(v[0])} ({fnum(v[1])}–{fnum(v[2])}) | {v[3]:.1f} ({v[4]:.1f}–{v[5]:.1f}) |"
          for k, v in (("serve direct", d), ("pm2 cluster", p), ("serve proxy", x))),
        "",
        f"- req/s direct/pm2 **{rr:.2f}x** (target ≥ 1.0x): {by_bounds(rr, d[1] / p[2], d[2] / p[1], 1.0)}",
        f"- CPU per request direct/pm2 **{cr:.2f}x** (target ≤ 1.0x): "
        f"{by_bounds(cr, d[4] / p[5], d[5] / p[4], 1.0, higher_better=False)}",
        f"- direct/proxy req/s {d[0] / x[0]:.2f}x",
        *(f"- direct workers' CPU, {s}" for s in spreads),
    ]
    return "Two Node hello workers, wrk -t2 -c64: `mode = \"direct\"` ≥ pm2 cluster's req/s and ≤ its CPU per request, same run", lines


def direct_fixed():
    m = re.search(r"^RESULT direct-fixed (.*)$", text, re.M)
    kv = dict(x.split("=", 1) for x in m.group(1).split())
    table = [line for line in text.splitlines() if line.startswith("|")]
    low = kv.get("low", "task-clock")
    words = {"le-shown": f"**met** (≤ shown: the whole CPU-time and {low} intervals are ≤ 1.00x)",
             "gt-shown": "**NOT met** (the whole CPU-time interval is above 1.00x)",
             "tie": f"**not shown** (a tie: the CPU-time or the {low} interval reaches above 1.00x)"}[kv["verdict"]]
    corroboration = (f"- the low-noise corroboration, perf {low} per request direct/pm2: median "
                     f"**{float(kv['low_ratio']):.2f}x**, interval {float(kv['low_lo']):.2f}–{float(kv['low_hi']):.2f}x"
                     if kv.get("low_ratio", "-") != "-" else f"- no perf {low} figure: no ≤ verdict (fail closed)")
    lines = [
        *table, "",
        f"- CPU time per request direct/pm2 (the target's figure), paired median over {kv['pairs']} alternating rounds "
        f"**{float(kv['ratio']):.2f}x**, "
        f"≥95% interval {float(kv['lo']):.2f}–{float(kv['hi']):.2f}x (rounds {float(kv['min']):.2f}–{float(kv['max']):.2f}x), "
        f"target ≤ 1.0x: {words}",
        corroboration,
        *(f"- {line}" for line in re.findall(r"^no hardware counters.*$", text, re.M)),
        *(f"- {line.strip()}" for line in re.findall(r"^(?:direct\S*|pm2) +(?:pair|round) .*$|^    worker .*$", text, re.M)),
    ]
    return "Two Node hello workers at a fixed 10,000 req/s: `mode = \"direct\"` ≤ pm2 cluster's CPU per request", lines


def frozen():
    runs = re.findall(r"^run (\d+): (\d+) requests .*?, (\d+) failed, (\d+) failed after; (.*?); out of rotation (\S+) s, "
                      r"successor ready (\S+) s after the SIGSTOP$", text, re.M)
    if not runs:
        raise ValueError("no run line")
    lines, none_failed, none_after, share_zero = [], True, True, True
    for n, total, failed, after_, middle, rot, ready in runs:
        m = re.search(r"the last connection it answered began (before the SIGSTOP|([-+]\d+) ms after it)", middle)
        last_ms = None if m is None or m.group(2) is None else int(m.group(2))
        detect = None if rot == "none" else float(rot) * 1000
        share_zero = share_zero and (last_ms is None or (detect is not None and last_ms <= detect))
        none_failed = none_failed and int(failed) == 0
        none_after = none_after and int(after_) == 0
        lines.append(f"- run {n}: {total} requests, **{failed} failed** ({after_} begun after the freeze); {middle}; "
                     f"out of rotation {rot} s, successor ready {ready} s after the SIGSTOP")
    lines += ["",
              f"- no failed request: {verdict(none_failed)}"
              + ("" if none_failed or not none_after else
                 " — every failure was a request begun before the freeze, on a connection the frozen worker had "
                 "already accepted (docs/serve.md: those die with it)"),
              f"- no failed request begun after the freeze (what `direct_mode_frozen_worker_under_load_fails_no_request` "
              f"checks): {verdict(none_after)}",
              f"- the frozen worker's share of new connections zero within the detection time: {verdict(share_zero)}",
              f"- {len(runs)} runs"]
    return ("Direct mode, a worker frozen under load: no failed request; the frozen worker's share of new "
            "connections zero within the detection time"), lines


def shards():
    s = re.search(rf"^single: +rate error median ({NUM})% \(({NUM})…({NUM})\), p99 median ({NUM}) ms \(({NUM})…({NUM})\)",
                  text, re.M)
    h = re.search(rf"^sharded: rate error median ({NUM})% \(({NUM})…({NUM})\), p99 median ({NUM}) ms \(({NUM})…({NUM})\)",
                  text, re.M)
    r = re.search(rf"^p99 sharded/single: ({NUM})", text, re.M)
    rate = re.search(r"^# rate: (.*)$", text, re.M)
    s, h = [float(x) for x in s.groups()], [float(x) for x in h.groups()]
    pr = float(r.group(1))
    in_spread = s[4] <= h[3] <= s[5] or h[4] <= s[3] <= h[5]
    lines = [
        f"{rate.group(1) if rate else ''}", "",
        "| run | rate error, median (min…max) | p99 ms, median (min…max) |", "|---|---|---|",
        f"| one process | {s[0]:+.2f}% ({s[1]:+.2f}…{s[2]:+.2f}) | {s[3]:.3f} ({s[4]:.3f}…{s[5]:.3f}) |",
        f"| two shards, merged | {h[0]:+.2f}% ({h[1]:+.2f}…{h[2]:+.2f}) | {h[3]:.3f} ({h[4]:.3f}…{h[5]:.3f}) |",
        "",
        f"- two shards within 1% of the asked total rate: {verdict(max(abs(h[1]), abs(h[2])) <= 1.0)} "
        f"(worst run {max(abs(h[1]), abs(h[2])):.2f}%)",
        f"- merged p99 / single-process p99 **{pr:.3f}** — separate runs, so equal only within their run-to-run "
        f"spread ({'the medians fall inside each other’s range' if in_spread else 'the ranges do not overlap'}); "
        "the exact equality over one schedule is the test's (`cargo test -p scalpel-report`)",
    ]
    return "Two shards on this machine within 1% of the asked total rate; merged p99 = a single process's", lines


def tls():
    # h1 and h2: paired median ratio over alternating pairs with its interval (bench-tls.sh's
    # RESULT lines); the verdict is the script's own, which fails closed.
    out_lines = ["| comparison | scalpel median req/s | peer median req/s | paired ratio, interval (pairs) | "
                 "nginx µs/request scalpel / peer | client µs/request scalpel / peer | nginx busy scalpel / peer | "
                 "client core busy scalpel / peer | status |",
                 "|---|---|---|---|---|---|---|---|---|"]
    words = {"met": "**met**", "not-met": "**NOT met**", "not-shown": "**not shown**"}
    for key, label in (("h1", "https HTTP/1.1, one thread each: scalpel load vs wrk (≥ 1.1x)"),
                       ("h2", "HTTP/2, 4 connections × 16 streams, one thread each: scalpel load vs h2load (≥ 1.1x)")):
        # the comparison with the peer (with OLD_SCALPEL a second line compares old and new)
        m = re.search(rf"^RESULT tls-{key} a=scalpel (b=(?!scalpel-old).*)$", text, re.M)
        if not m:
            if not re.search(rf"^## {1 if key == 'h1' else 2}\. ", text, re.M):
                continue  # not run (TLS_PARTS without it)
            raise ValueError(f"no RESULT tls-{key} line")
        kv = dict(x.split("=", 1) for x in m.group(1).split())
        f = lambda k: float(kv[k])
        cover = f"~{f('cover') * 100:.0f}%" if f("cover") else "min–max"
        out_lines.append(
            f"| {label} | {fnum(f('a_rps'))} | {kv['b']} {fnum(f('b_rps'))} | **{f('ratio'):.2f}x**, {cover} "
            f"{f('lo'):.2f}–{f('hi'):.2f}x ({kv['pairs']}, all {f('min'):.2f}–{f('max'):.2f}x) | "
            f"{f('a_nginx_us'):.2f} / {f('b_nginx_us'):.2f} (paired {f('nginx_ratio'):.2f}x) | "
            f"{f('a_client_us'):.2f} / {f('b_client_us'):.2f} | "
            f"{100 * f('a_nginx_busy'):.0f}% / {100 * f('b_nginx_busy'):.0f}% | "
            f"{100 * f('a_client_busy'):.0f}% / {100 * f('b_client_busy'):.0f}% | {words[kv['verdict']]} |")
    # handshakes: REPEATS alternating rounds, medians (a floor of 0.9x)
    m = re.search(rf"^\[hs\] \S+ median ({NUM}) \(min–max ({NUM})–({NUM})\); \S+ median ({NUM}) "
                  rf"\(min–max ({NUM})–({NUM})\); ratio \S+ ({NUM})$", text, re.M)
    if m:
        g = [float(x) for x in m.groups()]
        out_lines += ["", f"- handshakes/s, new connection per request, `--no-reuse` vs `h2load --h1`: "
                      f"{fnum(g[0])} ({fnum(g[1])}–{fnum(g[2])}) vs {fnum(g[3])} ({fnum(g[4])}–{fnum(g[5])}): "
                      f"**{g[6]:.2f}x** (target ≥ 0.9x): {verdict(g[6] >= 0.9)}"]
    elif re.search(r"^## 3\.", text, re.M):
        raise ValueError("no [hs] summary line")
    out_lines.append("")
    # which side was the limit, nginx's cost per request, and the optional parts (cost, h2cost, old)
    for m in re.finditer(r"^\[(h1|h2)\] (nginx worker CPU.*|ceiling .*|with .*)$", text, re.M):
        out_lines.append(f"- {m.group(1)}: {m.group(2)}")
    for m in re.finditer(r"^\[(cost|ngxcost|h2cost)\] (.*)$", text, re.M):
        out_lines.append(f"- {m.group(2)}")
    for m in re.finditer(r"^RESULT tls-(h1|h2) a=scalpel b=scalpel-old (.*)$", text, re.M):
        out_lines.append(f"- {m.group(1)} new/old scalpel: {m.group(2)}")
    for m in re.finditer(r"^\[hs\] (\S+) session resumption.*?: (.*)$", text, re.M):
        out_lines.append(f"- {m.group(1)} TLS sessions in nginx's log (count, reused, protocol): {m.group(2)}")
    head = [l for l in text.splitlines() if l.startswith("# ")]
    out_lines += [f"- {h[2:]}" for h in head]
    return "`scalpel load` over TLS and HTTP/2 against nginx (TLS 1.3, http2), alternating pairs", out_lines


def serve_tls():
    rows = {}
    for m in re.finditer(rf"^\| (serve|nginx) \| ({NUM}) \(({NUM})–({NUM})\) \| ({NUM}) \(({NUM})–({NUM})\) \| "
                         rf"({NUM}) \(({NUM})–({NUM})\) \|", text, re.M):
        rows[m.group(1)] = [float(x) for x in m.groups()[1:]]
    s, n = rows["serve"], rows["nginx"]
    rr, br, wr = s[0] / n[0], s[3] / n[3], s[6] / n[6]
    hdr = re.search(r"^## TLS \+ HTTP/2: (.*)$", text, re.M)
    lines = [
        f"{hdr.group(1) if hdr else ''}, serve and nginx alternating", "",
        "| over TLS + h2 | req/s median (min–max) | balancer CPU µs/req | whole setup CPU µs/req |", "|---|---|---|---|",
        *(f"| {k} | {fnum(v[0])} ({fnum(v[1])}–{fnum(v[2])}) | {v[3]:.1f} ({v[4]:.1f}–{v[5]:.1f}) | "
          f"{v[6]:.1f} ({v[7]:.1f}–{v[8]:.1f}) |" for k, v in (("scalpel serve", s), ("nginx", n))),
        "",
        f"- throughput serve/nginx **{rr:.2f}x** (target ≥ 1.0x): {verdict(rr >= 1.0)}",
        f"- CPU per request serve/nginx: balancer alone **{br:.2f}x**, whole setup (balancer + the two Node "
        f"workers) **{wr:.2f}x** (target ≤ 1.0x): {verdict(br <= 1.0 and wr <= 1.0)}",
    ]
    return "`scalpel serve` TLS + h2 before two Node hello workers ≥ nginx (TLS, h2, keepalive upstreams) in throughput and CPU per request", lines


def ladder():
    d = demo_report("ladder")["ladder"]
    lines = ["| tier | req/s (closed, 100 conns) | p99 ms | CPU µs/req | req/s at SLO (open ramp) |", "|---|---|---|---|---|"]
    for t in d["tiers"]:
        slo = fnum(t.get("slo_rps"))
        if t.get("slo_rps_lower_bound"):
            slo = "≥ " + slo
        lines.append(f"| {t['tier']} | {fnum(t['rps'])} | {fnum(t['p99_ms'], 1)} | {fnum(t['cpu_us_per_request'], 1)} | {slo} |")
    lines.append("")
    for t in d["targets"] + (d.get("python") or {}).get("targets", []):
        lines.append(f"- {t['target']}: **{fratio(t['req_s_ratio'])}** (per CPU-second {fratio(t['per_core_ratio'])}): "
                     f"{decided(t['interval'])}")
    lines.append(f"- {d['pinning']}; {d['outputs']['note']}")
    lines.append(f"- spread: {len(d.get('closed_files') or [])} closed runs, each alternating every tier "
                 "(`--rounds` segments); the figures are their medians, each target's interval their paired ratios")
    return "Ladder on one pinned core: tier 4 ≥ 1.3x tier 3 and ≥ 15x tier 0 matched in served req/s", lines


def payments():
    d = demo_report("payments")["payments"]
    e = d["endpoints"]["stats"]
    lb = e["max_rps_lower_bound"]
    mark = lambda n: ("≥ " if lb[n] else "") + fnum(e["max_rps"][n])
    r = e["max_ratio"]
    note = (" — Rust held the SLO up to the ramp's top: its max and the ratio are lower bounds" if lb["rust"] else "")
    f = e["fixed"]
    lines = [
        f"| figure | Go | Rust | Rust/Go |", "|---|---|---|---|",
        f"| max req/s at {d['slo']} (stats) | {mark('go')} | {mark('rust')} | **{fratio(r)}** |",
        f"| repeats (max req/s) | {spread(e['max_rps_all']['go'])} | {spread(e['max_rps_all']['rust'])} | |",
        f"| CPU % at the max | {fnum(e['cpu_percent_at_max']['go'], 1)} | {fnum(e['cpu_percent_at_max']['rust'], 1)} | |",
        f"| at {fnum(f['offered_rps'])} req/s: CPU % | {fnum(f['cpu_percent']['go'], 1)} | {fnum(f['cpu_percent']['rust'], 1)} | {fratio(ratio(f['cpu_percent']['rust'], f['cpu_percent']['go']))} |",
        f"| there: p99 ms | {fnum(f['p99_ms']['go'], 2)} | {fnum(f['p99_ms']['rust'], 2)} | {fratio(ratio(f['p99_ms']['rust'], f['p99_ms']['go']))} |",
        f"| there: PSS MiB | {fnum(f['pss_mb']['go'], 1)} | {fnum(f['pss_mb']['rust'], 1)} | {fratio(ratio(f['pss_mb']['rust'], f['pss_mb']['go']))} |",
        "",
        f"- Rust's max ≥ 3x Go's on stats at p99 < 50 ms: {decided(e['target'])}{note}",
        f"- shadow replay consistency {d['consistency_percent']}%; {d['pinning']}",
    ]
    return "Payments: Rust's real max ≥ 3x Go's on stats at p99 < 50 ms", lines


def runtime():
    d = demo_report("runtime")["runtime"]
    w = next(x for x in d["workloads"] if x["name"] == "uneven")
    keys, before = list(w["setups"]), w["before"]
    lb = w["rps_lower_bound"]
    mark = lambda n: ("≥ " if lb[n] else "") + fnum(w["rps"][n])
    p99 = f"{w['p99_endpoint']} p99" if w.get("p99_endpoint") else "p99"
    lines = [
        f"{w['what']}; SLO {w['slo']}", "",
        "| figure | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|",
        "| max req/s at the SLO | " + " | ".join(mark(k) for k in keys) + " |",
        "| repeats (max req/s) | " + " | ".join(spread(w["rps_all"][k]) for k in keys) + " |",
        f"| {p99} ms at {w['fixed_rps']:,} req/s (80% of {before}'s max) | "
        + " | ".join(fnum(w["p99_ms"][k], 2) for k in keys) + " |",
        f"| repeats ({p99} ms) | " + " | ".join(spread(w["p99_ms_all"][k], 2) for k in keys) + " |",
        "| errors there | " + " | ".join(fnum(w["errors"][k]) for k in keys) + " |",
        "| CPU µs per request | " + " | ".join(fnum(w["cpu_us_per_request"][k], 1) for k in keys) + " |",
        "",
        f"- serve: least_conn, max_in_flight_per_worker = {w.get('serve_max_in_flight_per_worker') or 'none'}; "
        + "; ".join(f"{k} = {label}" for k, label in w["setups"].items()),
        f"- {w['target']}: {decided(w['verdict'])}",
    ]
    lines += [f"- {k} / {before}, rate at the SLO: {decided(v)}" for k, v in w["variants"].items()]
    lines += [f"- {p99} at equal load, {k} / {before}: {v['text']}" for k, v in w["p99_ratio"].items()]
    lines += [f"- {d['note']}"]
    return "Runtime, uneven mix: serve ≥ 1.4x the rate of nginx → pm2 (the story's BEFORE) at the light p99 SLO", lines


PARTS = {"direct": direct, "direct-fixed": direct_fixed, "frozen": frozen, "shards": shards, "tls": tls, "serve-tls": serve_tls,
         "ladder": ladder, "payments": payments, "runtime": runtime}
title, body = f"part {part}", None
try:
    if rc != 0 and part not in ("ladder", "payments", "runtime"):
        raise ValueError(f"exit {rc}")
    title, body = PARTS[part]()
except Exception as e:  # noqa: BLE001 - a part that did not give figures is reported as failed, never judged
    body = [f"**FAILED** ({type(e).__name__}: {e}); no figures. Last lines of `{log}`:", "", "```", tail(), "```"]
print(f"## #{issue} — {title}\n")
print(f"- command: `{command}` (part `{part}` of `./run bench quiet`), {secs // 60} min {secs % 60:02d} s")
print(f"- machine: nproc {nproc}, {cpu}; load average before {before}, after {after}")
print()
print("\n".join(body))
print()
