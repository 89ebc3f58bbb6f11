"""speed.py dqn and dqn-atari: a CleanRL script, unmodified, in CleanRL's own Python, with the CPU and wall
seconds of its training loop alone. Its loop starts at its first vector-env reset, so that reset is wrapped to
note the times; nothing else changes. Prints one JSON line after the script's own output: loop_cpu_seconds,
loop_wall_seconds.

Run: python benchmarks/launchers/cleanrl_loop.py CLEANRL_SCRIPT [ITS FLAGS ...]
"""

import json
import runpy
import sys
import time

import gymnasium as gym

loop_start = []
plain_reset = gym.vector.SyncVectorEnv.reset


def first_reset(self, *args, **kwargs):
    loop_start.append((time.process_time(), time.perf_counter()))
    return plain_reset(self, *args, **kwargs)


gym.vector.SyncVectorEnv.reset = first_reset
sys.argv = sys.argv[1:]  # the script sees itself as argv[0], as when run on its own
runpy.run_path(sys.argv[0], run_name="__main__")
cpu, wall = loop_start[0]
print(
    json.dumps(
        {
            "loop_cpu_seconds": time.process_time() - cpu,
            "loop_wall_seconds": time.perf_counter() - wall,
        }
    )
)
