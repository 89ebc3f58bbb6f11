"""Resident size of a filled 1M-transition Atari replay memory (FrameMemory: each frame stored once).

    python benchmarks/investigations/frame_memory_size.py --capacity 1000000

Fills a FrameMemory for [4, 84, 84] uint8 stacks with `capacity` transitions from one env
(episodes of 500 steps, random frames), then reads the process's resident set size (VmRSS) and
compares it with what a memory storing each transition's stack and next stack would need (the
layout of CleanRL's and SB3's default buffers; SB3's optimize_memory_usage halves it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common.replay import FrameMemory  # noqa: E402


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=int, default=1_000_000)
    p.add_argument("--episode-length", type=int, default=500)
    a = p.parse_args()
    before = rss_bytes()
    memory = FrameMemory(a.capacity, (84, 84), 4, num_envs=1, seed=0)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (64, 4, 84, 84), dtype=np.uint8)  # reused: what is measured is the storage
    start = time.perf_counter()
    for t in range(a.capacity):
        done = (t + 1) % a.episode_length == 0
        memory.add(frames[t % 64][None], np.array([t % 4]), np.array([1.0]), frames[(t + 1) % 64][None],
                   np.array([done]), done=np.array([done]))
    seconds = time.perf_counter() - start
    memory.sample(32)
    used = rss_bytes() - before
    stacks = 2 * a.capacity * 4 * 84 * 84
    print(f"FrameMemory, {len(memory):,} transitions held (capacity {a.capacity:,}): resident {used / 2**30:.2f} GiB "
          f"({memory.frames.nbytes / 2**30:.2f} GiB of frames); filled in {seconds:.0f} s ({a.capacity / seconds:,.0f} adds/s)")
    print(f"a stack-per-row memory (obs and next obs): {stacks / 2**30:.1f} GiB; sharing obs and next obs: {stacks / 2 / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
