"""One factory for every tier. A tier is an object with ``name``, ``is_async``,
``render(data)`` (UTF-8 bytes the host has validated → PNG bytes, or an awaitable of them
when ``is_async``) and ``close()``. Failures raise ``contract.QrError`` or an exception
whose message is a binding code (`empty`, `too_long`, `encode: …`)."""

from . import artifacts, tier0

TIERS = ("0", "0-article", "1", "2", "3")


class PureTier:
    is_async = False

    def __init__(self, name, render):
        self.name = name
        self.render = render

    def close(self):
        pass


def create(tier, cli_path=None, cli_timeout_s=5.0, native_mode=None):
    """The tier object; FileNotFoundError (saying how to build it) for a missing artifact."""
    p = artifacts.paths()
    if tier == "0":
        return PureTier("tier 0 (qrcode + pypng, matched)", tier0.matched_png)
    if tier == "0-article":
        return PureTier("tier 0-article (qrcode, library defaults)", tier0.article_png)
    if tier == "1":
        from .tier1 import CliTier

        return CliTier(cli_path or artifacts.require(p["cli"], "tier 1 CLI (qr-cli)"), cli_timeout_s)
    if tier == "2":
        from .tier2 import RawQr

        return RawQr(artifacts.require(p["wasm_raw"], "tier 2 module (qr_raw.wasm)"))
    if tier == "3":
        from .tier3 import DEFAULT_MODE, NativeTier

        return NativeTier(native_mode or DEFAULT_MODE)
    raise ValueError(f"unknown tier {tier}; expected one of {', '.join(TIERS)}")
