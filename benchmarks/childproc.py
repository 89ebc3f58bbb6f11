"""A child process timed in CPU seconds, for the speed comparisons (speed_dqn_atari.py, speed_minatar.py).

CPU time (user + system of the child and its threads, from getrusage) is what a busy machine
disturbs least; wall time comes along for the record.
"""

from __future__ import annotations

import resource
import subprocess
import time


def run_timed(cmd: list[str], cwd: str, env: dict, label: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd` to completion; (the finished process, CPU seconds, wall seconds). A failure exits with its stderr's tail."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{label} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall
