"""Real servers for the tests: the Python host's tiers (qr/python/serve), the Node host
(qr/node/server.js) and the Rust tier 4 (qr-server), each a child process on an ephemeral
port; plain HTTP/1.1 from the standard library; PNGs decoded by independent code (pypng
for the pixels, zxing-cpp for the symbol)."""

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse

import png
import pytest
import zxingcpp

HERE = os.path.dirname(os.path.abspath(__file__))
PY_ROOT = os.path.dirname(HERE)
REPO = os.path.abspath(os.path.join(PY_ROOT, "..", ".."))
SERVE = os.path.join(PY_ROOT, "serve")
NODE_SERVER = os.path.join(REPO, "qr", "node", "server.js")
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"))
BUILD_HINT = "run `./run build` (or `bash scripts/build-qr.sh`) from the repository root"
#: Generous: the machine is a shared 2-core box.
START_DEADLINE_S = 30
EXIT_DEADLINE_S = 20

#: Every Python server the suites run, by name: tier and extra flags.
PY_TIERS = {
    "0": ["--tier", "0"],
    "0-article": ["--tier", "0-article"],
    "1": ["--tier", "1"],
    "2": ["--tier", "2"],
    "3": ["--tier", "3", "--native-mode", "sync"],
    "3-threads": ["--tier", "3", "--native-mode", "threads"],
}


def require_artifacts():
    """Fails (never skips) when something the suites need is missing, saying how to build it."""
    needed = [os.path.join(TARGET, "qr", "venv", "bin", "python"), os.path.join(TARGET, "release", "qr-cli"),
              os.path.join(TARGET, "release", "qr-server"), os.path.join(TARGET, "qr", "qr_raw.wasm")]
    missing = [p for p in needed if not os.path.exists(p)]
    assert not missing, f"missing {', '.join(missing)}: {BUILD_HINT}"


class Server:
    def __init__(self, name, proc, base):
        self.name = name
        self.proc = proc
        self.base = base
        self.port = int(base.rsplit(":", 1)[1])
        self._stderr = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self._stderr.append(line)

    def stderr(self):
        return "".join(self._stderr)

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig`, waits for the exit, returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not exit within {EXIT_DEADLINE_S} s of {sig!r}")


def command(name, args=()):
    if name == "4":
        return [os.path.join(TARGET, "release", "qr-server"), "--port", "0", *args]
    if name == "node":
        return ["node", NODE_SERVER, "--tier", "0", "--port", "0", *args]
    return [SERVE, *PY_TIERS[name], "--port", "0", *args]


def start(name, env=None, args=()):
    """Starts one server and waits for its listening line."""
    return start_many([name], env=env, args=args)[name]


def start_many(names, env=None, args=()):
    """Starts servers in parallel; returns {name: Server} once all are listening."""
    full_env = {**os.environ, "CARGO_TARGET_DIR": TARGET, **(env or {})}
    procs = {n: subprocess.Popen(command(n, args), env=full_env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n in names}
    servers = {}
    try:
        for n, p in procs.items():
            servers[n] = Server(n, p, _wait_listening(n, p))
    except BaseException:
        for p in procs.values():
            p.kill()
            p.wait()
        raise
    return servers


def _wait_listening(name, proc):
    result = {}

    def read():
        line = proc.stdout.readline()
        result["line"] = line
        proc.stdout.close()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(START_DEADLINE_S)
    m = re.search(r"(http://\S+)", result.get("line", ""))
    if not m:
        proc.kill()
        err = proc.stderr.read()
        raise AssertionError(f"{name} did not print its listening line within {START_DEADLINE_S} s; "
                             f"stdout {result.get('line')!r}, stderr {err}")
    return m.group(1)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def content_type(self):
        return self.headers.get("content-type")

    def json(self):
        return json.loads(self.body)


def request(base, target, method="GET", timeout=30):
    """One request on a fresh connection; the target is sent as given."""
    host, port = base[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, target)
        r = conn.getresponse()
        body = r.read()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, body)
    finally:
        conn.close()


def qrcode_target(text):
    return "/qrcode?" + urllib.parse.urlencode({"text": text})


def png_header(data):
    """The IHDR fields every PNG must agree on across tiers."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature"
    assert data[12:16] == b"IHDR", "first chunk is IHDR"
    return {"width": int.from_bytes(data[16:20], "big"), "height": int.from_bytes(data[20:24], "big"),
            "bit_depth": data[24], "color_type": data[25]}


def gray_pixels(data):
    """(width, height, bytes of 8-bit luminance, one per pixel) of a grayscale PNG of any
    bit depth, decoded by pypng."""
    w, h, rows, info = png.Reader(bytes=data).asDirect()
    assert info["greyscale"] and not info["alpha"], f"expected grayscale, got {info}"
    top = (1 << info["bitdepth"]) - 1
    out = bytearray()
    for row in rows:
        out.extend(v * 255 // top for v in row) if top != 255 else out.extend(row)
    return w, h, bytes(out)


def decode_qr(data):
    """The text an independent decoder (zxing-cpp) reads from the PNG, as strict UTF-8."""
    w, h, pixels = gray_pixels(data)
    found = zxingcpp.read_barcodes(memoryview(pixels).cast("B", (h, w)), formats=zxingcpp.BarcodeFormat.QRCode)
    assert found, f"zxing-cpp found no QR symbol in a {w}x{h} PNG"
    return found[0].bytes.decode("utf-8")


def pid_alive(pid):
    """True while `pid` runs; a zombie counts as gone (PID 1 in a container may never reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def poll_until(check, deadline_s=20, every_s=0.05):
    end = time.monotonic() + deadline_s
    while True:
        value = check()
        if value or time.monotonic() > end:
            return value
        time.sleep(every_s)


def sample_texts():
    """Texts every tier must round-trip (the Node suite's set)."""
    return {
        "ascii": "hello world",
        "url": "https://example.com/path?q=1&r=two#frag",
        "digits": "0123456789012345678901234567890",
        "upper_alnum": "HELLO WORLD 123",
        "non_ascii": "héllo wörld — 日本語 😀 €",
        "plus_and_percent": "a+b c%20d&e=f",
        "exactly_512_ascii": "x" * 512,
        "exactly_512_multibyte": "€" * 170 + "ab",
    }


_REPEAT = re.compile(r"\$\{(.+?)\*(\d+)\}")


def contract_cases():
    """qr/contract/cases.json with its ``${S*N}`` repeats expanded."""
    with open(os.path.join(REPO, "qr", "contract", "cases.json")) as f:
        doc = json.load(f)
    out = []
    for case in doc["cases"]:
        case = dict(case)
        for key in ("target", "text"):
            if key in case:
                case[key] = _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), case[key])
        out.append(case)
    return out


@pytest.fixture(scope="session")
def artifacts():
    require_artifacts()
