"""The fixed text set of every QR bench, the same as qr/node/bench/texts.js: several
lengths, ASCII and multi-byte; labels carry the UTF-8 length."""

_TEXTS = [
    ("hello world", ""),
    ("https://example.com/orders/12345?ref=qr&x=1", "url"),
    # JS padEnd counts UTF-16 units; every character here is in the BMP, so ljust agrees.
    ("Zażółć gęślą jaźń — 日本語のテキスト — ".ljust(96, "·"), "utf8"),
    ("k" * 256, ""),
    ("z" * 512, ""),
]

TEXTS = [(f"{len(t.encode())} B{' ' + note if note else ''}", t) for t, note in _TEXTS]
