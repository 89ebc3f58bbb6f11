"""Total env steps/s of A2C with N torchrun workers against one plain process (issue 7).

Every worker runs the same per-worker settings as the single process (CartPole-v1, 8 envs,
n_steps 5, CPU, 1 torch thread), so N workers do N times the env steps and forward passes per
update, and the ideal is N x the single process's steps/s; the gap is the gradient all_reduce,
the lockstep wait for the slowest worker, and the cores the machine lacks. Runs alternate
(1 worker, N workers, 1 worker, ...) so that a change in the machine's load hits both; the
ratio is of the medians. Timed: summary["sps"] of rank 0, env steps of all workers from the
first reset to the last update (no start-up, no final evaluation). The machine's load average
is printed before every run: on a shared machine it bounds what the ratio can mean.

Run:
    python benchmarks/speed_distributed.py --workers 2 --total-timesteps 200000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(workers: int, total_timesteps: int, num_envs: int, seed: int) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        script = [str(ROOT / "algos" / "a2c.py"), "--env", "CartPole-v1", "--seed", str(seed), "--device", "cpu",
                  "--total-timesteps", str(total_timesteps), "--num-envs", str(num_envs), "--eval-episodes", "1",
                  "--run-dir", run_dir, "--no-progress"]
        if workers == 1:
            cmd = [sys.executable, *script]  # no torchrun: the plain single process
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(workers),
                   "--master-addr", "127.0.0.1", "--master-port", str(free_port()), *script]
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        summary = json.loads(next(Path(run_dir).glob("*/summary.json")).read_text())
        assert summary["world_size"] == workers and summary["completed"], summary
        return summary["sps"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--total-timesteps", type=int, default=200_000, help="env steps of one run, over all its workers")
    p.add_argument("--num-envs", type=int, default=8, help="envs per worker")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    sps: dict[int, list[float]] = {1: [], a.workers: []}
    for r in range(a.repeats):
        for n in (1, a.workers):
            load = os.getloadavg()[0]
            sps[n].append(run(n, a.total_timesteps, a.num_envs, seed=1 + r))
            print(f"repeat {r}: {n} worker(s) x {a.num_envs} envs: {sps[n][-1]:,.0f} steps/s (load average before: {load:.1f})", flush=True)
    one, many = statistics.median(sps[1]), statistics.median(sps[a.workers])
    print(f"median: 1 worker {one:,.0f} steps/s, {a.workers} workers {many:,.0f} steps/s: {many / one:.2f}x "
          f"({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
