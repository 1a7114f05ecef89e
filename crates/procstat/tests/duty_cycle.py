"""Burns a steady share of one core, the truth a CPU reading is checked against (the
procstat tests and the load dashboard's test in crates/cli use it).

    python3 duty_cycle.py SHARE      e.g. 0.25 for a quarter of a core

Each 100 ms it spins until its own CPU clock (time.process_time(), the kernel's per-process
clock, not /proc ticks) advanced by SHARE of that, then sleeps the rest. Prints "ready",
then answers each line on stdin with its CPU time and a wall clock reading, in seconds;
it exits at end of input."""

import select
import sys
import time

duty, period = float(sys.argv[1]), 0.1
print("ready", flush=True)
while True:
    start, cpu = time.monotonic(), time.process_time()
    while time.process_time() - cpu < duty * period:
        pass
    if select.select([sys.stdin], [], [], 0)[0]:
        if not sys.stdin.readline():
            break
        print(time.process_time(), time.monotonic(), flush=True)
    time.sleep(max(0.0, period - (time.monotonic() - start)))
