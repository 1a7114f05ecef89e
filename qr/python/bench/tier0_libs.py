"""Which pure-Python library for tier 0: `qrcode` (+ pypng) or `segno`, measured.

    python qr/python/bench/tier0_libs.py [--ms 300]

CPU per call (this process, `time.process_time`), for the five bench texts, of:
- each library with its defaults, text in, PNG bytes out (what tier 0-article would be);
- what the matched tier needs from a library: the symbol drawn with each of the eight
  masks, byte mode, level M, smallest version (then scored by npm's rule, the same for
  both): `qrcode` redraws from its cached codewords (``makeImpl(False, mask)``); `segno`'s
  API can only encode the text again per mask (``make_qr(..., mask=m)``);
- the whole matched render as tier 0 does it (qrcode + npm_mask + pypng);
and how often each library's own mask choice equals npm's (qr_core's) on the npm parity
set (qr/core/tests/data/npm_parity.jsonl).
"""

import argparse
import io
import json
import os
import sys
import time

import qrcode
import segno
from qrcode.constants import ERROR_CORRECT_M
from qrcode.image.pure import PyPNGImage
from qrcode.util import MODE_8BIT_BYTE, QRData

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from qrhost import tier0  # noqa: E402
from texts import TEXTS  # noqa: E402


def qrcode_defaults(text):
    out = io.BytesIO()
    qrcode.make(text, image_factory=PyPNGImage).save(out)
    return out.getvalue()


def segno_defaults(text):
    out = io.BytesIO()
    segno.make(text).save(out, kind="png")
    return out.getvalue()


def qrcode_eight_masks(text):
    qr = qrcode.QRCode(error_correction=ERROR_CORRECT_M, mask_pattern=0)
    qr.add_data(QRData(text.encode(), mode=MODE_8BIT_BYTE))
    qr.make(fit=True)
    out = []
    for m in range(8):
        qr.makeImpl(False, m)
        out.append(qr.modules)
    return out


def segno_eight_masks(text):
    return [segno.make_qr(text.encode(), error="m", mode="byte", boost_error=False, mask=m).matrix
            for m in range(8)]


def per_call_ms(f, text, seconds):
    f(text)
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        f(text)
        n += 1
    return (time.process_time() - start) / n * 1e3


def own_mask_agreement():
    path = os.path.join(HERE, "..", "..", "core", "tests", "data", "npm_parity.jsonl")
    with open(path) as f:
        cases = [json.loads(line) for line in f]
    segno_same = sum(segno.make_qr(c["text"].encode(), error="m", mode="byte", boost_error=False).mask == c["mask"]
                     for c in cases)
    qrcode_same = 0
    for c in cases:
        qr = qrcode.QRCode(error_correction=ERROR_CORRECT_M)
        qr.add_data(QRData(c["text"].encode(), mode=MODE_8BIT_BYTE))
        qr.make(fit=True)
        qrcode_same += qr.best_mask_pattern() == c["mask"]
    return len(cases), qrcode_same, segno_same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", type=float, default=300)
    a = ap.parse_args()
    rows = [("qrcode defaults (text -> PNG)", qrcode_defaults), ("segno defaults (text -> PNG)", segno_defaults),
            ("qrcode: the 8 masked symbols", qrcode_eight_masks), ("segno: the 8 masked symbols", segno_eight_masks),
            ("tier 0 matched (qrcode + npm rule + pypng)", lambda t: tier0.matched_png(t.encode()))]
    print(f"CPU ms per call, {a.ms:g} ms per cell; loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'':44}" + "".join(f"{label:>12}" for label, _ in TEXTS))
    for name, f in rows:
        print(f"{name:44}" + "".join(f"{per_call_ms(f, t, a.ms / 1e3):12.2f}" for _, t in TEXTS), flush=True)
    n, q, s = own_mask_agreement()
    print(f"own mask choice = npm's on the parity set ({n} texts): qrcode {q}, segno {s}")


if __name__ == "__main__":
    main()
