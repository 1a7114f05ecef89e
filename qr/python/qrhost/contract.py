"""The HTTP contract every tier shares, the Node host's (qr/node/lib/contract.js, its
server.js): which text is accepted, and how each failure maps to a status and a JSON body.
The error messages are the Node host's, word for word, so the two hosts answer alike
(tests/test_contract.py compares them request by request)."""

import json

#: Longest accepted text, in UTF-8 bytes (the published bindings counted UTF-16 units).
MAX_TEXT_BYTES = 512


class QrError(Exception):
    """A failure with the HTTP status it answers with; ``kind`` is stable, for tests and logs."""

    def __init__(self, kind, status, message):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.message = message


def empty_text():
    return QrError("empty", 400, "text is missing or empty")


def too_long(n):
    return QrError("too_long", 413, f"text is {n} UTF-8 bytes; the limit is {MAX_TEXT_BYTES}")


def invalid_utf8():
    return QrError("invalid_utf8", 400, "text is not valid UTF-8")


def internal(message):
    return QrError("internal", 500, message)


def from_binding_error(message):
    """A Rust binding's error code (`empty`, `too_long`, `encode: …`) as a QrError: the
    second line of defence, since the text is checked before any tier sees it."""
    if message == "empty":
        return empty_text()
    if message == "too_long":
        return QrError("too_long", 413, "text is longer than 512 UTF-8 bytes")
    return internal(f"qr function failed: {message}")


_HEX = {c: int(chr(c), 16) for c in b"0123456789abcdefABCDEF"}


def form_decode(raw):
    """application/x-www-form-urlencoded bytes decoding, as URLSearchParams does it:
    ``+`` is a space, ``%XX`` a byte, a malformed ``%`` stays literal."""
    if b"%" not in raw and b"+" not in raw:
        return raw
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        b = raw[i]
        if b == 0x2B:
            out.append(0x20)
        elif b == 0x25 and i + 2 < n and raw[i + 1] in _HEX and raw[i + 2] in _HEX:
            out.append(_HEX[raw[i + 1]] << 4 | _HEX[raw[i + 2]])
            i += 2
        else:
            out.append(b)
        i += 1
    return bytes(out)


def text_param(query):
    """The first ``text`` parameter of the raw query string, as decoded bytes, or None.
    A key is compared decoded (``te%78t=`` is ``text``; invalid UTF-8 in a key becomes
    U+FFFD, as URLSearchParams does, so it is never ``text``); empty pairs are skipped."""
    for pair in query.split(b"&"):
        if not pair:
            continue
        key, eq, value = pair.partition(b"=")
        if key == b"text" or form_decode(key).decode("utf-8", "replace") == "text":
            return form_decode(value) if eq else b""
    return None


def validated_text(query):
    """The text of a ``/qrcode`` query as UTF-8 bytes, checked in the Node host's order:
    missing or empty (400), not UTF-8 (400), over 512 bytes (413). Raises QrError."""
    raw = text_param(query)
    if not raw:
        raise empty_text()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_utf8() from None
    if len(raw) > MAX_TEXT_BYTES:
        raise too_long(len(raw))
    return raw


def error_body(message):
    """``{"error":"…"}`` exactly as JSON.stringify writes it (no spaces, non-ASCII kept)."""
    return json.dumps({"error": message}, ensure_ascii=False, separators=(",", ":")).encode()


# The path as WHATWG's URL parser leaves it for an http URL (the Node host's
# `new URL(req.url, base).pathname`): dot segments resolved, `\` as `/`, and the bytes of
# its path percent-encode set escaped, so 404 messages name the path as Node does.
_DOT = {b".", b"%2e"}
_DOTDOT = {b"..", b".%2e", b"%2e.", b"%2e%2e"}
_PATH_ESCAPE = frozenset(b' "#<>?`{}') | frozenset(range(0x00, 0x21)) | frozenset(range(0x7F, 0x100))


def url_path(raw_path):
    """The path Node's host routes on, from the request target's raw path bytes."""
    if not raw_path.startswith(b"/"):
        raw_path = b"/" + raw_path
    if b"." in raw_path or b"\\" in raw_path or b"%2" in raw_path.lower():
        segments = raw_path.replace(b"\\", b"/").split(b"/")[1:]
        out = []
        for i, seg in enumerate(segments):
            last = i == len(segments) - 1
            low = seg.lower()
            if low in _DOTDOT:
                if out:
                    out.pop()
                if last:
                    out.append(b"")
            elif low in _DOT:
                if last:
                    out.append(b"")
            else:
                out.append(seg)
        raw_path = b"/" + b"/".join(out)
    if any(b in _PATH_ESCAPE for b in raw_path):
        raw_path = b"".join(b"%%%02X" % b if b in _PATH_ESCAPE else bytes((b,)) for b in raw_path)
    return raw_path.decode("ascii")
