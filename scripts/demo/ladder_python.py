"""Story 2 for a Python host: the same ladder served by qr/python (an ASGI app under
uvicorn), beside the Node host's in the ladder stage — the same texts, the same closed run
(every tier of both hosts alternating in one `scalpel load` run), the same ramps, its own
table. Tier 4 (qr-server) is the top of both tables.

Targets (issue #28, docs/BENCHMARKS.md): on one pinned core, Python tier 3 >= 10x Python
tier 0 matched, Python tier 3 >= 0.8x Node's tier 3, tier 4 above every Python tier."""

import os

import common as c
import pngcheck

# tier name in the demo, the host's --tier, how
TIERS = [
    ("py0-article", "0-article", "pure Python, qrcode with the library's defaults"),
    ("py0", "0", "pure Python, qrcode + pypng, same pixels as Rust"),
    ("py1", "1", "Rust CLI spawned per request"),
    ("py2", "2", "Rust -> Wasm under wasmtime (hand-written bindings)"),
    ("py3", "3", "Rust extension module (PyO3)"),
]
NAMES = [t for t, _, _ in TIERS]
RUST_TIERS = ["py1", "py2", "py3"]
SERVE = os.path.join(c.ROOT, "qr", "python", "serve")


def command(tier):
    host_tier = {t: h for t, h, _ in TIERS}[tier]
    return [SERVE, "--tier", host_tier, "--port", "0"]


def check_outputs(bodies, n_checked):
    """The Python host's Rust tiers byte for byte against tier 4, its tier 0 matched pixel
    for pixel (decoded) on the first `n_checked` texts. Raises DemoError; returns a note."""
    for t in RUST_TIERS:
        if bodies[t] != bodies["4"]:
            raise c.DemoError(f"Python tier {t} does not return tier 4's bytes")
    same = sum(pngcheck.luminance(bodies["py0"][i]) == pngcheck.luminance(bodies["4"][i])
               for i in range(n_checked))
    if same != n_checked:
        raise c.DemoError(f"Python tier 0 matched drew other pixels than tier 4 for {n_checked - same} texts")
    return (f"Python host: tiers {', '.join(RUST_TIERS)} byte-identical to tier 4; py0 the same pixels "
            f"({same}/{n_checked} checked); py0-article is qrcode's default image (10 px per module, 1-bit)")


def summarize(rows):
    """The Python table's rows (its tiers and tier 4) with ratios to py0-article and py0,
    and the issue's three targets."""
    base_a, base_0 = rows["py0-article"], rows["py0"]
    tiers = []
    for tier in NAMES + ["4"]:
        r = rows[tier]
        tiers.append({k: v for k, v in r.items() if k != "article"} | {
            "vs_0_article": {"rps": c.ratio(r["rps"], base_a["rps"]),
                             "rps_per_core": c.ratio(r["rps_per_core"], base_a["rps_per_core"])},
            "vs_0": {"rps": c.ratio(r["rps"], base_0["rps"]),
                     "rps_per_core": c.ratio(r["rps_per_core"], base_0["rps_per_core"]),
                     "slo_rps": c.max_ratio(r["slo_rps"], base_0["slo_rps"])},
        })
    return {"tiers": tiers, "targets": targets(rows)}


def targets(rows):
    """The issue's three targets, each judged on the closed repeats (common.served_target)."""
    best_py = max(NAMES, key=lambda t: rows[t]["rps"] or 0)
    return [
        c.served_target("Python tier 3 >= 10x Python tier 0 matched, served req/s", rows["py3"], rows["py0"], 10.0),
        c.served_target("Python tier 3 >= 0.8x Node's tier 3, served req/s", rows["py3"], rows["3"], 0.8),
        c.served_target(f"tier 4 at the top: tier 4 / the best Python tier ({best_py}) >= 1x", rows["4"],
                        rows[best_py], 1.0),
    ]


def table_rows(result):
    rows = []
    for t in result["tiers"]:
        slo = c.fmt_max(t["slo_rps"], t["slo_rps_lower_bound"], t.get("ramp_start"))
        rows.append([t["tier"], t["how"], c.fmt_num(t["rps"]), c.fmt_ms(t["mean_ms"]), c.fmt_ms(t["p99_ms"]),
                     c.fmt_num(t["bytes"], 0), c.fmt_num(t["pss_mb"]), c.fmt_num(t["cpu_us_per_request"]),
                     c.fmt_num(t["rps_per_core"]), slo, c.fmt_ratio(t["vs_0"]["rps"])])
    return rows


HEADERS = ["tier", "how", "req/s", "mean ms", "p99 ms", "bytes", "PSS MiB", "CPU µs/req", "req/s per core",
           "req/s at SLO", "req/s vs py0"]


def print_tables(result):
    print("\nThe same ladder, Python host (qr/python: an ASGI app under uvicorn + httptools + uvloop), "
          "measured in the same runs; tier 4 repeated as the top")
    print(c.table(HEADERS, table_rows(result), left=2))
    for t in result["targets"]:
        print(f"target: {t['target']}: {t['verdict']}")
