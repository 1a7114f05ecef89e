"""Tier 0's mask rule: the bit-line penalty equals a module-by-module transcription of npm
qrcode's rule (the oracle), and with it `qrcode`'s symbols are npm's (reference data made
by npm, qr/core/tests/data/npm_parity.jsonl)."""

import json
import os
import random

import harness as h
from qrhost import npm_mask, tier0


def penalty_reference(m):
    """npm qrcode's lib/core/mask-pattern.js, module by module."""
    size = len(m)
    points = 0
    for row in range(size):
        for line in ([m[row][c] for c in range(size)], [m[c][row] for c in range(size)]):
            run, last = 0, None
            for v in line + [None]:
                if v == last:
                    run += 1
                else:
                    if run >= 5:
                        points += 3 + (run - 5)
                    last, run = v, 1
    for r in range(size - 1):
        for c in range(size - 1):
            s = m[r][c] + m[r][c + 1] + m[r + 1][c] + m[r + 1][c + 1]
            points += 3 if s in (0, 4) else 0
    for r in range(size):
        br = bc = 0
        for c in range(size):
            br = ((br << 1) & 0x7FF) | m[r][c]
            bc = ((bc << 1) & 0x7FF) | m[c][r]
            if c >= 10:
                points += 40 * ((br in (0x5D0, 0x05D)) + (bc in (0x5D0, 0x05D)))
    dark = sum(map(sum, m))
    k = abs(-(-dark * 20 // (size * size)) - 10)
    return points + 10 * k


def test_the_bit_line_penalty_equals_the_module_by_module_rule():
    rng = random.Random(28)
    for _ in range(300):
        size = rng.choice([21, 25, 33, 57, 89])
        bias = rng.random()
        m = [[int(rng.random() < bias) for _ in range(size)] for _ in range(size)]
        assert npm_mask.penalty(m) == penalty_reference(m)


def test_qrcode_with_the_npm_mask_rule_draws_npms_modules():
    path = os.path.join(h.REPO, "qr", "core", "tests", "data", "npm_parity.jsonl")
    with open(path) as f:
        cases = [json.loads(line) for line in f]
    assert len(cases) >= 40
    for c in cases:
        modules, version, mask = tier0.matched_modules(c["text"].encode())
        size = c["size"]
        bits = bin(int(c["modules_hex"], 16))[2:].zfill(len(c["modules_hex"]) * 4)
        expected = [[bits[y * size + x] == "1" for x in range(size)] for y in range(size)]
        assert (version, mask) == (c["version"], c["mask"]), c["text"][:30]
        assert [list(map(bool, r)) for r in modules] == expected, c["text"][:30]
