"""Tier 0: pure Python, the `qrcode` library (with `pypng`), in two configurations.

- matched: the SAME image as the Rust function (docs/qr.md): one byte-mode segment of the
  UTF-8 bytes, level M never boosted, the smallest version, the mask npm qrcode's penalty
  rule picks (``npm_mask``: qrcode's own rule picks another mask for some texts), 4 px per
  module, a 4-module quiet zone, an 8-bit grayscale PNG. `qrcode` draws the modules,
  `pypng` writes the file (its only filter is None; zlib level 1, the nearest to Rust's
  fdeflate fast mode).
- article: the library's defaults, ``qrcode.make(text)`` saved as PNG (box size 10, its
  own segment optimisation and mask rule, a 1-bit PNG through pypng): what a user gets
  without settings, as the Node ladder's 0-article row keeps the published settings.

Why `qrcode` and not `segno`: measured (docs/qr-python.md, ``bench/tier0_libs.py``),
segno's defaults are faster, but the matched tier needs the eight masked symbols, and
only `qrcode` gives them through its API without encoding the text eight times
(``QRCode.makeImpl(False, mask)`` redraws from the cached codewords): 2-4x less work.
"""

import io

import png
import qrcode
from qrcode.constants import ERROR_CORRECT_M
from qrcode.image.pure import PyPNGImage
from qrcode.util import MODE_8BIT_BYTE, QRData

from . import npm_mask

#: The matched settings; keep in step with docs/qr.md and qr_core::PARAMS.
SCALE = 4
MARGIN = 4
ZLIB_LEVEL = 1
DARK, LIGHT = 0, 255


def matched_modules(data):
    """The module matrix (rows of bools, no quiet zone) of UTF-8 `data` as qr_core draws it,
    and its version and mask."""
    qr = qrcode.QRCode(error_correction=ERROR_CORRECT_M, mask_pattern=0)
    qr.add_data(QRData(data, mode=MODE_8BIT_BYTE))
    qr.make(fit=True)
    candidates = []
    for mask in range(8):
        # False: draw the real format bits, as npm's rule scores them (qrcode's own
        # scoring draws them light).
        qr.makeImpl(False, mask)
        candidates.append(qr.modules)
    mask = npm_mask.best_mask(candidates)
    return candidates[mask], qr.version, mask


def matched_png(data):
    """UTF-8 `data` (validated by the host) → PNG bytes, the matched configuration."""
    modules, _, _ = matched_modules(data)
    size = (len(modules) + 2 * MARGIN) * SCALE
    dark, light = bytes((DARK,)) * SCALE, bytes((LIGHT,)) * SCALE
    border = light * MARGIN
    blank = bytes((LIGHT,)) * size
    rows = [blank] * (MARGIN * SCALE)
    for line in modules:
        row = border + b"".join([dark if m else light for m in line]) + border
        rows.extend([row] * SCALE)
    rows.extend([blank] * (MARGIN * SCALE))
    out = io.BytesIO()
    png.Writer(size, size, greyscale=True, bitdepth=8, compression=ZLIB_LEVEL).write(out, rows)
    return out.getvalue()


def article_png(data):
    """UTF-8 `data` → PNG bytes with the library's defaults (its own segments and mask,
    box size 10, border 4, 1-bit PNG)."""
    out = io.BytesIO()
    qrcode.make(data.decode("utf-8"), image_factory=PyPNGImage).save(out)
    return out.getvalue()
