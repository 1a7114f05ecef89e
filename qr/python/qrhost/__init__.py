"""The Python host of the QR tier ladder: ``GET /qrcode?text=…`` → PNG, served by an ASGI
app under uvicorn (httptools), at tier 0, 0-article, 1, 2 or 3 (docs/qr-python.md).

Modules: ``contract`` (the HTTP contract shared with the Node host: limits, query
decoding, errors), ``app`` (the ASGI app), ``server`` (flags, uvicorn, signals),
``protocol`` (uvicorn's httptools protocol with a header size limit and a header
time-out), one module per tier (``tier0``, ``tier1``, ``tier2``, ``tier3``), ``npm_mask``
(the mask rule tier 0 needs for the Rust tiers' pixels) and ``artifacts`` (paths).
"""
