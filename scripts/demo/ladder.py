"""Story 2, served: every tier of the QR ladder answering GET /qrcode over HTTP, one core,
the same texts and schedule for all; closed model at the article's 100 connections (all
tiers in one `scalpel load` run, alternating), then an open-model ramp per tier to the SLO.
The Node host's tiers and the Python host's (ladder_python.py) run in the same runs; each
host has its own table.
"""

import hashlib
import os
import urllib.parse

import common as c
import ladder_python
import pngcheck

# tier, how, the article's published ratios to its tier 0 (req/s, mean, p99, bytes, memory)
TIERS = [
    ("0-article", "pure Node, npm qrcode, the article's settings", (1.0, 1.0, 1.0, 1.0, 1.0)),
    ("0", "pure Node, npm qrcode, same pixels as Rust", None),
    ("1", "Rust CLI spawned per request", (1.76, 0.57, 0.82, 0.52, 0.92)),
    ("2", "Rust -> Wasm (wasm-bindgen)", (2.03, 0.50, 0.66, 0.52, 0.95)),
    ("2-raw", "Rust -> Wasm (hand-written bindings)", None),
    ("3", "Rust native addon (napi-rs)", (3.75, 0.26, 0.39, 0.52, 0.97)),
    ("4", "whole server in Rust (qr-server)", (4.93, 0.21, 0.28, 0.52, 0.01)),
]
ARTICLE_TIER0 = {"rps": 1464, "mean_ms": 68, "p99_ms": 96, "bytes": 1506, "memory_mb": 1353}
SLO = "p99<50ms,errors<1%"
TEMPLATE = "/qrcode?text={text:raw}"
RUST_TIERS = ["1", "2", "2-raw", "3", "4"]


def texts():
    """The fixed text set: 100 URLs of 40 to 90 bytes, the kind a QR code carries."""
    out = []
    for i in range(100):
        n = (i * 7919) % 100000
        out.append(f"https://shop.example.com/p/{n}?utm_source=qr&c={'abcdefghij' * (i % 5)}"[:90])
    return out


def command(tier):
    if tier in ladder_python.NAMES:
        return ladder_python.command(tier)
    if tier == "4":
        return [os.path.join(c.TARGET, "release", "qr-server"), "--port", "0"]
    return ["node", os.path.join(c.ROOT, "qr", "node", "server.js"), "--tier", tier, "--port", "0"]


def name(tier):
    return f"t{tier}"


def all_tiers():
    """(tier, how, article ratios) of both hosts: Node's seven, then the Python host's five."""
    return TIERS + [(t, how, None) for t, _, how in ladder_python.TIERS]


def run(cfg, report):
    out = os.path.join(c.OUT, "ladder")
    os.makedirs(out, exist_ok=True)
    data = os.path.join(out, "texts.txt")
    all_texts = texts()
    with open(data, "w") as f:
        for t in all_texts:
            f.write(urllib.parse.quote(t, safe="") + "\n")
    procs = c.Procs()
    try:
        servers = {}
        for tier, _, _ in all_tiers():
            p, url = procs.start(f"ladder-tier-{tier}", command(tier), env={"CARGO_TARGET_DIR": c.TARGET},
                                 ready=r"listening on (http://[0-9.:]+)")
            servers[tier] = (p, url)
        c.log(f"ladder: {len(servers)} servers listening, Node's tiers and the Python host's ({c.PINNING_NOTE})")

        outputs = check_outputs(servers, all_texts)
        c.log(f"ladder: outputs checked: {outputs['note']}")

        args = ["-c", "100"]
        for tier, _, _ in all_tiers():
            p, url = servers[tier]
            args += ["--target", f"{name(tier)}={url}", "--watch-pid", f"{name(tier)}={p.pid}"]
        args += ["--data", data, "--shuffle", "7", TEMPLATE]
        c.log("ladder: warm-up, 1 s per tier (discarded)")
        c.scalpel_load(["-d", "1s", "--rounds", "1"] + args, os.path.join(out, "warmup.json"))
        # The closed model, repeated on the same servers: each repeat is one run in which
        # every tier alternates (`--rounds` segments), so each gives one paired ratio per
        # target, and the repeats give the verdict's interval (common.verdict).
        steps = {tier: [] for tier, _, _ in all_tiers()}
        closed_files = []
        open_verdicts = lambda: any(t["decision"] == "undecided" for t in all_targets(per_repeat(steps)))
        for r in c.repeats(cfg, "ladder: closed model", open_verdicts, cfg["ladder_repeats"]):
            c.log(f"ladder: closed model, 100 connections, {cfg['ladder_closed']} per tier in "
                  f"{cfg['ladder_rounds']} alternating segments (repeat {r + 1})")
            path = os.path.join(out, f"closed-{r + 1}.json")
            closed = c.scalpel_load(["-d", cfg["ladder_closed"], "--rounds", str(cfg["ladder_rounds"])] + args,
                                    path)
            closed_files.append(path)
            for tier, _, _ in all_tiers():
                steps[tier].append(c.target_of(closed, name(tier))["steps"][0])
        rows = {}
        for tier, how, article in all_tiers():
            rows[tier] = per_repeat(steps)[tier] | {"tier": tier, "how": how, "bytes": outputs["bytes"][tier],
                                                    "article": article}

        ramps = []
        for r in range(cfg["ladder_ramp_rounds"]):
            order = all_tiers() if r % 2 == 0 else list(reversed(all_tiers()))
            for tier, _, _ in order:
                p, url = servers[tier]
                top = rows[tier]["rps"]
                lo, step, hi = (max(1, round(top * f)) for f in cfg["ladder_ramp"])
                c.log(f"ladder: tier {tier}: open-model ramp {lo},{step},{hi} req/s, "
                      f"{cfg['ladder_step']} steps, SLO {SLO} (round {r + 1})")
                path = os.path.join(out, f"ramp-{tier}-{r + 1}.json")
                result = c.scalpel_load(
                    ["--ramp", f"{lo},{step},{hi}", "--step-duration", cfg["ladder_step"], "--slo", SLO,
                     "-c", "100", "--watch-pid", str(p.pid), "--data", data, "--shuffle", "7",
                     url + TEMPLATE], path)
                held, lower_bound = c.breaking_rps(result["targets"][0])
                ramps.append((tier, held, lower_bound, path))
                rows[tier]["ramp_start"] = lo
        for tier, _, _ in all_tiers():
            mine = [(h, lb) for t, h, lb, _ in ramps if t == tier]
            rows[tier]["slo_rps"] = c.median([h for h, _ in mine])
            rows[tier]["slo_rps_lower_bound"] = any(lb for _, lb in mine)
            rows[tier]["ramp_files"] = [p for t, _, _, p in ramps if t == tier]
    finally:
        procs.stop_all()

    result = summarize(rows, outputs, closed_files)
    report["ladder"] = result
    print_tables(result)
    return result


def print_targets(targets):
    for t in targets:
        print(f"target: {t['target']}: {t['verdict']}")


def check_outputs(servers, all_texts):
    """Mean response bytes per tier over the text set; the Rust tiers byte for byte; tier 0
    matched pixel for pixel against tier 4 (decoded)."""
    bodies = {}
    for tier, (_, url) in servers.items():
        bodies[tier] = []
        for t in all_texts:
            status, headers, body = c.http_get(f"{url}/qrcode?text={urllib.parse.quote(t, safe='')}")
            if status != 200 or not body.startswith(b"\x89PNG"):
                raise c.DemoError(f"tier {tier} answered {status} for {t!r}")
            bodies[tier].append(body)
    sizes = {tier: sum(map(len, b)) / len(b) for tier, b in bodies.items()}
    identical = all(bodies[t] == bodies["4"] for t in RUST_TIERS)
    digest = hashlib.sha256(b"".join(bodies["4"])).hexdigest()[:16]
    if not identical:
        raise c.DemoError("the Rust tiers do not return byte-identical PNGs")
    pixels_same = 0
    checked = all_texts[:10]
    for i, _ in enumerate(checked):
        if pngcheck.luminance(bodies["0"][i]) == pngcheck.luminance(bodies["4"][i]):
            pixels_same += 1
    if pixels_same != len(checked):
        raise c.DemoError(f"tier 0 matched drew other pixels than tier 4 for {len(checked) - pixels_same} texts")
    note = (f"tiers {', '.join(RUST_TIERS)} byte-identical for all {len(all_texts)} texts (sha256 {digest}…); "
            f"tier 0 matched decodes to the same pixels as tier 4 ({pixels_same}/{len(checked)} checked); "
            f"tier 0-article draws 200x200 RGBA as the article did")
    python_note = ladder_python.check_outputs(bodies, len(checked))
    return {"bytes": sizes, "rust_identical": identical, "pixels_checked": len(checked),
            "pixels_same": pixels_same, "note": note, "python_note": python_note}


def per_repeat(steps):
    """Each tier's figures: the median over the closed repeats, and per repeat the two a
    target's ratio is taken from (req/s, CPU µs per request)."""
    rows = {}
    for tier, ss in steps.items():
        cpu = [c.cpu_us_per_request(s) for s in ss]
        med = lambda get: c.median([get(s) for s in ss])
        cpu_med = c.median(cpu)
        rows[tier] = {
            "rps": med(lambda s: s["achieved_rps"]),
            "mean_ms": med(lambda s: c.latency(s, "mean")),
            "p99_ms": med(lambda s: c.latency(s, "p99")),
            "errors": sum(s["errors"] for s in ss),
            "pss_mb": med(lambda s: s.get("pss_mb")),
            "rss_mb": med(lambda s: s.get("rss_mb")),
            "cpu_percent": med(lambda s: s.get("cpu_percent")),
            "cpu_us_per_request": cpu_med,
            "rps_per_core": 1e6 / cpu_med if cpu_med else None,
            "repeats": [{"rps": s["achieved_rps"], "cpu_us_per_request": u} for s, u in zip(ss, cpu)],
        }
    return rows


def all_targets(rows):
    """Every target of the stage (Node's table, then the Python host's), from the rows."""
    return targets(rows) + ladder_python.targets(rows)


def targets(rows):
    return [
        c.served_target("tier 4 >= 1.3x tier 3, served req/s", rows["4"], rows["3"], 1.3),
        c.served_target("tier 4 >= 15x tier 0 matched, served req/s", rows["4"], rows["0"], 15.0),
    ]


def summarize(rows, outputs, closed_files):
    base_a = rows["0-article"]
    base_0 = rows["0"]
    tiers = []
    for tier, _, _ in TIERS:
        r = rows[tier]
        vs_article = {
            "rps": c.ratio(r["rps"], base_a["rps"]),
            "mean_ms": c.ratio(r["mean_ms"], base_a["mean_ms"]),
            "p99_ms": c.ratio(r["p99_ms"], base_a["p99_ms"]),
            "bytes": c.ratio(r["bytes"], base_a["bytes"]),
            "pss_mb": c.ratio(r["pss_mb"], base_a["pss_mb"]),
            "rps_per_core": c.ratio(r["rps_per_core"], base_a["rps_per_core"]),
        }
        vs_0 = {
            "rps": c.ratio(r["rps"], base_0["rps"]),
            "rps_per_core": c.ratio(r["rps_per_core"], base_0["rps_per_core"]),
            # A tier that held not even its ramp's first step gives no ratio.
            "slo_rps": c.max_ratio(r["slo_rps"], base_0["slo_rps"]),
        }
        a = r["article"]
        article = None if a is None else dict(zip(["rps", "mean_ms", "p99_ms", "bytes", "memory"], a))
        tiers.append({k: v for k, v in r.items() if k != "article"} |
                     {"vs_0_article": vs_article, "vs_0": vs_0, "article_vs_0": article})
    return {"tiers": tiers, "outputs": outputs, "slo": SLO, "closed_file": closed_files[0],
            "closed_files": closed_files, "targets": targets(rows), "pinning": c.PINNING_NOTE,
            "python": ladder_python.summarize(rows)}


def print_tables(result):
    c.section("1. The ladder, served: GET /qrcode, one core, 100 connections (closed), then a ramp to "
              f"{result['slo']} (open)")
    print(result["pinning"])
    print(result["outputs"]["note"])
    rows = []
    for t in result["tiers"]:
        slo = c.fmt_max(t["slo_rps"], t["slo_rps_lower_bound"], t.get("ramp_start"))
        rows.append([t["tier"], t["how"], c.fmt_num(t["rps"]), c.fmt_ms(t["mean_ms"]), c.fmt_ms(t["p99_ms"]),
                     c.fmt_num(t["bytes"], 0), c.fmt_num(t["pss_mb"]), c.fmt_num(t["cpu_us_per_request"]),
                     c.fmt_num(t["rps_per_core"]), slo])
    print(c.table(["tier", "how", "req/s", "mean ms", "p99 ms", "bytes", "PSS MiB", "CPU µs/req",
                   "req/s per core", "req/s at SLO"], rows, left=2))
    print("\nratios to tier 0-article (ours | the article's)   and to tier 0 matched (ours)")
    rows = []
    for t in result["tiers"]:
        v, a, z = t["vs_0_article"], t["article_vs_0"] or {}, t["vs_0"]
        pair = lambda k, ak: f"{c.fmt_ratio(v[k])} | {c.fmt_ratio(a.get(ak)) if a else '-'}"
        rows.append([t["tier"], pair("rps", "rps"), pair("mean_ms", "mean_ms"), pair("p99_ms", "p99_ms"),
                     pair("bytes", "bytes"), pair("pss_mb", "memory"), c.fmt_ratio(z["rps"]),
                     c.fmt_ratio(z["rps_per_core"]), c.fmt_ratio(z["slo_rps"])])
    print(c.table(["tier", "req/s", "mean", "p99", "bytes", "memory", "req/s vs 0", "per core vs 0",
                   "at SLO vs 0"], rows))
    print("\nmean latency in a closed loop is 100 / throughput (as in the article); the open-model ramp "
          "gives the rate each tier holds at the SLO (each tier's ramp has the same shape, scaled to its own "
          "closed-model rate). PSS is the whole process tree's, tier 1's qr-cli children included.")
    print_targets(result["targets"])
    if result.get("python"):
        print(result["outputs"].get("python_note", ""))
        ladder_python.print_tables(result["python"])
