"""A small PNG reader (standard library only) for the demo's output checks: the pixels of
tier 0's PNGs (npm qrcode, RGBA) against the Rust tiers' (grayscale), as luminance.

Handles what the two writers produce: 8-bit grayscale, RGB and RGBA, non-interlaced, every
row filter. Anything else raises ValueError."""

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 6: 4}


def luminance(data):
    """(width, height, bytes of one 0-255 value per pixel) of a PNG; RGB(A) pixels must be
    grey (r = g = b) and opaque, else ValueError."""
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    pos = len(SIGNATURE)
    idat = bytearray()
    header = None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("no IHDR")
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in CHANNELS or interlace != 0:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {color}, interlace {interlace}")
    bpp = CHANNELS[color]
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    prev = bytearray(stride)
    out = bytearray()
    for y in range(height):
        start = y * (stride + 1)
        kind = raw[start]
        row = bytearray(raw[start + 1:start + 1 + stride])
        unfilter(kind, row, prev, bpp)
        if bpp == 1:
            out += row
        else:
            for x in range(width):
                px = row[x * bpp:(x + 1) * bpp]
                if px[0] != px[1] or px[1] != px[2] or (bpp == 4 and px[3] != 255):
                    raise ValueError(f"pixel ({x},{y}) is not opaque grey: {list(px)}")
                out.append(px[0])
        prev = row
    return width, height, bytes(out)


def unfilter(kind, row, prev, bpp):
    n = len(row)
    if kind == 0:
        return
    for i in range(n):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if kind == 1:
            row[i] = (row[i] + a) & 0xFF
        elif kind == 2:
            row[i] = (row[i] + b) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + (a + b) // 2) & 0xFF
        elif kind == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            row[i] = (row[i] + pred) & 0xFF
        else:
            raise ValueError(f"bad filter type {kind}")
