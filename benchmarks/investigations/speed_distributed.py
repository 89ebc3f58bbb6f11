"""Total env steps/s of A2C with N torchrun workers against one plain process.

Every worker runs the same per-worker settings as the single process (CartPole-v1, 8 envs,
n_steps 5, CPU, 1 torch thread), so N workers do N times the env steps and forward passes per
update, and the ideal is N x the single process's steps/s; the gap is the gradient all_reduce,
the lockstep wait for the slowest worker, and the cores the machine lacks. Runs alternate
(1 worker, N workers, 1 worker, ...) so that a change in the machine's load hits both; the
ratio is of the medians. Timed: summary["sps"] of rank 0, env steps of all workers from the
first reset to the last update (no start-up, no final evaluation).

On a shared machine the CPU left to us, not the code, can bound the ratio, so a third kind of
run is interleaved as a control: N independent single processes at once (no process group),
whose summed steps/s is what N processes can get from the machine at that moment; N workers
against it is the cost of the synchronisation itself. The load average is printed before
every run.

Run:
    python benchmarks/investigations/speed_distributed.py --workers 2 --total-timesteps 200000 --repeats 3
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

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def script_args(total_timesteps: int, num_envs: int, seed: int, run_dir: str) -> list[str]:
    return [str(ROOT / "algos" / "a2c.py"), "--env", "CartPole-v1", "--seed", str(seed), "--device", "cpu",
            "--total-timesteps", str(total_timesteps), "--num-envs", str(num_envs), "--eval-episodes", "1",
            "--run-dir", run_dir, "--no-progress"]


def independent(n: int, total_timesteps: int, num_envs: int, seed: int) -> float:
    """Summed steps/s of n plain single processes started together, each with total_timesteps / n."""
    with tempfile.TemporaryDirectory() as run_dir:
        procs = [subprocess.Popen([sys.executable, *script_args(total_timesteps // n, num_envs, seed + i, f"{run_dir}/{i}")],
                                  stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"}) for i in range(n)]
        if any(p.wait() != 0 for p in procs):
            raise RuntimeError("an independent run failed")
        return sum(json.loads(f.read_text())["sps"] for f in Path(run_dir).glob("*/*/summary.json"))


def run(workers: int, total_timesteps: int, num_envs: int, seed: int) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        script = script_args(total_timesteps, num_envs, seed, run_dir)
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
    sps: dict[str, list[float]] = {"1 worker": [], f"{a.workers} workers": [], f"{a.workers} independent processes": []}
    for r in range(a.repeats):
        for kind in sps:
            load = os.getloadavg()[0]
            if kind.endswith("independent processes"):
                sps[kind].append(independent(a.workers, a.total_timesteps, a.num_envs, seed=1 + r))
            else:
                sps[kind].append(run(1 if kind == "1 worker" else a.workers, a.total_timesteps, a.num_envs, seed=1 + r))
            print(f"repeat {r}: {kind} x {a.num_envs} envs: {sps[kind][-1]:,.0f} steps/s (load average before: {load:.1f})", flush=True)
    one, many, ceiling = (statistics.median(v) for v in sps.values())
    print(f"median steps/s: 1 worker {one:,.0f}; {a.workers} workers {many:,.0f} ({many / one:.2f}x); "
          f"{a.workers} independent processes at once {ceiling:,.0f} ({ceiling / one:.2f}x, what the machine gave); "
          f"workers / independent {many / ceiling:.2f} ({os.cpu_count()} cores)")

if __name__ == "__main__":
    main()
