#!/usr/bin/env python3
"""A busy process with a name of its choosing, for the tests of CPU readings
(scripts/lib/proc-ticks-test.sh, crates/cli/tests/cli/procstat_cli.rs).

busy.py NAME: takes NAME (`/proc/PID/comm`, as pm2 names its daemon "PM2 v5.4.3: God"),
burns user time (arithmetic) and system time (stat calls), 0.3 s and 0.1 s at least, prints its own user
and system clock ticks and the ticks per second (`os.times()`: the kernel's own count, read
by the process itself), then stands still so it is read while its counters do not move:
until its stdin closes when that is a pipe, else for 120 s. The user and system ticks
include those of the children it reaped (cutime and cstime in /proc, which procstat counts:
a pyenv shim runs helpers of its own before it becomes python, in the same process).
"""
import os
import stat
import sys
import time

with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])
# Until it has burnt 0.3 s of user and 0.1 s of system time of its own, however long a
# loaded machine makes that take (30 s at most).
end = time.monotonic() + 30
x = 0
while time.monotonic() < end:
    t = os.times()
    if t.user >= 0.3 and t.system >= 0.1:
        break
    for _ in range(2000):
        x += 1
    for _ in range(200):
        os.stat("/")
t = os.times()
hz = os.sysconf("SC_CLK_TCK")
user, system = t.user + t.children_user, t.system + t.children_system
print(round(user * hz), round(system * hz), hz, flush=True)
if stat.S_ISFIFO(os.fstat(0).st_mode):
    sys.stdin.read()
else:
    time.sleep(120)
