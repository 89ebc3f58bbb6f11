"""Latency of one gradient all_reduce between torchrun workers, as the training loop sees it (issue 7).

Each worker alternates `--work-ms` milliseconds of busy computation (standing in for a rollout and
its forward/backward) with one `all_reduce` of `--numel` float32 values (the flat gradient that
common.distributed.average_ sends: ~9.2k for A2C's CartPole network), and reports the mean time per all_reduce and per cycle. With --work-ms 0 it is
the back-to-back latency; with the ~2 ms an A2C update takes here, it is what one update pays.
N workers reach the ideal N x speed-up only if this stays small against the work.

Run (one machine, 2 workers):
    torchrun --standalone --nproc-per-node 2 benchmarks/speed_allreduce.py
    torchrun --standalone --nproc-per-node 2 benchmarks/speed_allreduce.py --work-ms 0 1 2 4 --numel 1 9348
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-ms", type=float, nargs="+", default=[0.0, 2.0], help="busy milliseconds between all_reduces")
    parser.add_argument("--numel", type=int, nargs="+", default=[9348], help="floats per all_reduce")
    parser.add_argument("--calls", type=int, default=1000, help="timed all_reduces per setting")
    opts = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for numel in opts.numel:
        t = torch.ones(numel)
        for work_ms in opts.work_ms:
            for _ in range(50):  # warm-up
                dist.all_reduce(t)
            dist.barrier()
            reduce_s, start = 0.0, time.perf_counter()
            for _ in range(opts.calls):
                busy(work_ms)
                t0 = time.perf_counter()
                dist.all_reduce(t)
                reduce_s += time.perf_counter() - t0
            cycle_ms = (time.perf_counter() - start) / opts.calls * 1e3
            if rank == 0:
                print(f"{world} workers, {numel:,} floats, {work_ms:g} ms work: all_reduce {reduce_s / opts.calls * 1e3:.2f} ms, "
                      f"cycle {cycle_ms:.2f} ms (bound on the speed-up: {world * work_ms / cycle_ms:.2f}x)" if work_ms else
                      f"{world} workers, {numel:,} floats, back to back: all_reduce {reduce_s / opts.calls * 1e3:.2f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
