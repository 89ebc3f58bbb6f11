"""A child process timed in CPU seconds, for the speed comparisons (speed_dqn_atari.py, speed_minatar.py).

CPU time (user + system of the child and its threads, from os.wait4) is what a busy machine
disturbs least; wall time comes along for the record.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time


def run_timed(cmd: list[str], cwd: str, env: dict, label: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd` to completion; (the finished process, CPU seconds, wall seconds). A failure exits with its stderr's tail.

    The CPU time is this child's own (os.wait4's resource usage of that process), so two children
    timed at once from two threads each get their own.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
    if done.returncode != 0:
        raise SystemExit(f"{label} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done, usage.ru_utime + usage.ru_stime, wall
