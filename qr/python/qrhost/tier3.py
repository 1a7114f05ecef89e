"""Tier 3: the Rust function as a native extension module (``qr_pyo3``, PyO3, an abi3
wheel built by maturin and installed into the host's virtual environment by
``./run build``). The GIL is released during the render (qr/pyo3/src/lib.rs).

Two modes (``--native-mode``): ``sync`` renders on the event loop's thread, as tier 0
does; ``threads`` hands each render to a thread pool (one thread per CPU the process may
run on) and awaits it, so the event loop reads and writes other connections meanwhile.
Which one is the default is chosen by measurement (docs/qr-python.md).
"""

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

MODES = ("sync", "threads")
#: Chosen by measurement: docs/qr-python.md, "Tier 3: sync or threads" (the same CPU per
#: request, a lower p99 from 8 connections up: the loop reads other requests meanwhile).
DEFAULT_MODE = "threads"


def load():
    try:
        import qr_pyo3
    except ImportError as e:
        raise FileNotFoundError(
            f"cannot import qr_pyo3 ({e}): the wheel is built and installed by `./run build` "
            "(scripts/build-qr.sh)") from None
    return qr_pyo3


class NativeTier:
    is_async = False

    def __init__(self, mode=DEFAULT_MODE):
        if mode not in MODES:
            raise ValueError(f"native mode must be one of {', '.join(MODES)}, not {mode}")
        self.mode = mode
        self.name = f"tier 3 (PyO3 extension, {mode})"
        self._png = load().png
        self._pool = None
        if mode == "threads":
            self.is_async = True
            self._pool = ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0)),
                                            thread_name_prefix="qr-render")

    def render(self, data):
        if self._pool is None:
            return self._png(data)
        return asyncio.get_running_loop().run_in_executor(self._pool, self._png, data)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
