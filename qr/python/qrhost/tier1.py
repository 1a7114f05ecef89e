"""Tier 1: one `qr-cli` process per request, the text on its stdin, the PNG on its stdout.

Every child starts in its own session (so its own process group): a time-out, a client
that goes away, an oversized answer or shutdown kills the whole group, so a wrapper script
with children of its own (`sh -c 'sleep 1000'`) leaves nothing behind. The answer (a JSON
500) is sent at once; the child is reaped by a task that waits for it. The same rules as
qr/node/lib/cli-tier.js.
"""

import asyncio
import os
import signal

from .contract import internal

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: A QR PNG of 512 bytes is a few KiB; anything this large is a broken child.
MAX_STDOUT_BYTES = 4 * 1024 * 1024
MAX_STDERR_BYTES = 4096


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


async def _read_capped(stream, cap, what):
    """All of `stream`, or QrError 500 past `cap` bytes (stderr: keep the first `cap`)."""
    chunks, total = [], 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > cap:
            if what == "stdout":
                raise internal(f"qr-cli wrote more than {cap} bytes")
            continue
        chunks.append(chunk)


async def _feed(stdin, data):
    try:
        stdin.write(data)
        await stdin.drain()
        stdin.close()
    except (OSError, RuntimeError):
        # A child that died before reading (EPIPE; uvloop: the pipe's handle is closed):
        # its exit status says why.
        pass


class CliTier:
    name = "tier 1 (qr-cli per request)"
    is_async = True
    #: The app cancels a render whose client went away, which kills the child.
    wants_disconnect = True

    def __init__(self, cli_path, timeout_s):
        self.cli_path = cli_path
        self.timeout_s = timeout_s
        self.live = set()
        self._reapers = set()

    async def render(self, data):
        try:
            proc = await asyncio.create_subprocess_exec(
                self.cli_path, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as e:
            raise internal(f"cannot run qr-cli: {e.strerror or e}") from None
        self.live.add(proc)
        try:
            async with asyncio.timeout(self.timeout_s):
                out, err, _ = await asyncio.gather(
                    _read_capped(proc.stdout, MAX_STDOUT_BYTES, "stdout"),
                    _read_capped(proc.stderr, MAX_STDERR_BYTES, "stderr"),
                    _feed(proc.stdin, data))
                code = await proc.wait()
        except TimeoutError:
            self._abandon(proc)
            raise internal(f"qr-cli timed out after {round(self.timeout_s * 1000)} ms") from None
        except BaseException:
            # The client went away (cancelled), the output was too large, or shutdown.
            self._abandon(proc)
            raise
        self.live.discard(proc)
        first_line = err.decode("utf-8", "replace").split("\n", 1)[0].strip()
        if code != 0:
            _kill_group(proc)  # in case it left descendants behind
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
            raise internal(f"qr-cli {how}" + (f": {first_line}" if first_line else ""))
        if not out.startswith(PNG_SIGNATURE):
            raise internal("qr-cli exited 0 but did not write a PNG")
        return out

    def _abandon(self, proc):
        """Kill the child's group now and reap it in the background: the answer does not
        wait for the child's death."""
        _kill_group(proc)
        task = asyncio.get_running_loop().create_task(self._reap(proc))
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)

    async def _reap(self, proc):
        try:
            await proc.wait()
        finally:
            self.live.discard(proc)

    def close(self):
        for proc in list(self.live):
            _kill_group(proc)
