"""uvicorn's httptools protocol with the two limits it lacks and the Node host has: the
request head (request line and headers) at most 16 KiB (Node's default
``maxHeaderSize``: past it, ``431`` and the connection closed), and a time-out for a
request head to arrive (a client that connects and sends nothing, or trickles a header,
holds no connection forever; Node: ``headersTimeout``). httptools itself buffers a
request line or header of any length."""

import os

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 16 * 1024
#: Node's headersTimeout is 60 s; 10 s as qr-server's --header-timeout. QR_HEAD_TIMEOUT_MS
#: shortens it (the tests).
HEAD_TIMEOUT_S = int(os.environ.get("QR_HEAD_TIMEOUT_MS") or 10_000) / 1000
_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport):
        super().connection_made(transport)
        self._head_bytes = 0
        self._in_head = True
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def connection_lost(self, exc):
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _cancel_head_timer(self):
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self):
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data):
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES + 4096 and not self.transport.is_closing():
                # The head did not end within the limit (+ room for a body after it).
                self.transport.write(_TOO_LARGE)
                self.transport.close()
                return
        super().data_received(data)

    def on_message_begin(self):
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)
        super().on_message_begin()

    def on_headers_complete(self):
        self._in_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self):
        # What comes next on this connection is the next request's head.
        self._in_head = True
        self._head_bytes = 0
        super().on_message_complete()
