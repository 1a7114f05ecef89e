"""Same answer from every tier: tiers 1, 2 and 3 (both modes) return the bytes of the Rust
tier 4 (qr-server); tier 0 (qrcode + pypng, matched) the same image (IHDR and every
pixel); tier 0-article the library's defaults."""

import pytest

import harness as h

RUST_TIERS = ["1", "2", "3", "3-threads"]


@pytest.fixture(scope="module")
def servers(artifacts):
    started = h.start_many(["0", "0-article", *RUST_TIERS, "4"])
    yield started
    for s in started.values():
        s.stop()


def cross_texts():
    return {
        **h.sample_texts(),
        "one_char": "a",
        "space": " ",
        "newline_tab": "line1\nline2\tend",
        "mixed_scripts": "Ünïcödé Ελληνικά русский العربية",
        "nul": "a\x00b",
        # around version boundaries, and where the length field grows (version 10)
        "len14": "abcdefghijklmn",
        "len15": "abcdefghijklmno",
        "len100": "p" * 100,
        "len213": "v" * 213,
        "len214": "w" * 214,
        "len300": "q" * 300,
    }


def fetch_all(servers, text):
    out = {}
    for name, s in servers.items():
        res = h.request(s.base, h.qrcode_target(text))
        assert res.status == 200, f"tier {name}: {res.body!r}"
        out[name] = res.body
    return out


@pytest.fixture(scope="module")
def bodies(servers):
    return {name: fetch_all(servers, text) for name, text in cross_texts().items()}


def test_tiers_1_2_3_are_byte_identical_to_tier_4(bodies):
    for name, by_tier in bodies.items():
        for tier in RUST_TIERS:
            assert by_tier[tier] == by_tier["4"], f"{name}: tier {tier} differs from tier 4"
        assert h.decode_qr(by_tier["4"]) == cross_texts()[name], name


def test_tier_0_has_the_same_ihdr_and_pixels_as_tier_4(bodies):
    for name, by_tier in bodies.items():
        rust = h.png_header(by_tier["4"])
        assert h.png_header(by_tier["0"]) == rust, name
        assert (rust["bit_depth"], rust["color_type"]) == (8, 0), f"{name}: 8-bit grayscale"
        # another PNG writer (pypng: filter None, zlib 1): other bytes, the same pixels
        assert h.gray_pixels(by_tier["0"]) == h.gray_pixels(by_tier["4"]), f"{name}: pixels"
        assert h.decode_qr(by_tier["0"]) == cross_texts()[name], name


def test_tier_0_article_keeps_the_library_defaults(bodies):
    for name, by_tier in bodies.items():
        header = h.png_header(by_tier["0-article"])
        # qrcode's defaults: 10 px per module and a 4-module border, a 1-bit grayscale PNG
        assert header["width"] % 10 == 0 and header["width"] == header["height"], name
        assert (header["bit_depth"], header["color_type"]) == (1, 0), name
        assert h.decode_qr(by_tier["0-article"]) == cross_texts()[name], name
