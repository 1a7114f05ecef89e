"""The ASGI app: routing, the contract's answers, and one call of the tier per request.
No framework: a request is a scope and two callables, the answer two messages."""

import asyncio
import sys

from . import contract
from .contract import QrError

_JSON = b"application/json"
_ALLOW_GET = [(b"allow", b"GET")]


async def _send(send, status, content_type, body, extra=()):
    headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
    headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send, err):
    if err.status >= 500:
        print(f"qr-python: 500: {err.message}", file=sys.stderr, flush=True)
    extra = _ALLOW_GET if err.status == 405 else ()
    await _send(send, err.status, _JSON, contract.error_body(err.message), extra)


def _as_qr_error(exc):
    if isinstance(exc, QrError):
        return exc
    return contract.from_binding_error(str(exc))


async def _until_disconnect(receive):
    while (await receive())["type"] != "http.disconnect":
        pass


def make_app(tier):
    """The ASGI callable serving `tier`."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return  # lifespan is off (server.py); nothing else is served
        path = contract.url_path(scope.get("raw_path") or scope["path"].encode())
        method = scope["method"]
        if path == "/healthz":
            if method != "GET":
                return await _send_error(send, QrError("method", 405, f"method {method} not allowed on /healthz"))
            return await _send(send, 200, _JSON, b'{"status":"ok"}')
        if path != "/qrcode":
            return await _send_error(send, QrError("route", 404, f"no route for {path}"))
        if method != "GET":
            return await _send_error(send, QrError("method", 405, f"method {method} not allowed on /qrcode"))
        try:
            data = contract.validated_text(scope["query_string"])
            if not tier.is_async:
                png = tier.render(data)
            elif getattr(tier, "wants_disconnect", False):
                png = await _render_unless_gone(tier, data, receive)
                if png is None:
                    return  # the client went away; the child is killed already
            else:
                png = await tier.render(data)
        except Exception as e:  # noqa: BLE001 - every failure is a JSON answer, never a crash
            return await _send_error(send, _as_qr_error(e))
        await _send(send, 200, b"image/png", png)

    return app


async def _render_unless_gone(tier, data, receive):
    """Tier 1: the render, cancelled (its child killed) when the client goes away first."""
    render = asyncio.ensure_future(tier.render(data))
    watch = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait({render, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not render.done():
        render.cancel()
        try:
            await render
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the client is gone
            pass
        return None
    return render.result()
