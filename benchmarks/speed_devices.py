"""Each script's speed on the GPU against the CPU of the same machine, at suite cells' settings.

    python benchmarks/speed_devices.py                      # the default cells, cpu and cuda
    python benchmarks/speed_devices.py --steps 20000 --out benchmarks/results/speed/speed_devices_raw.json

Every (cell, device) pair is one run of `algos/<algo>.py` as a child process with the cell's
settings, `--steps` env steps and one torch thread; the cell's `learning_starts` is cut to a
quarter of the steps so that most of the run learns (schedules given as fractions of the run,
such as DQN's epsilon decay, shrink with it: a shorter run acts greedily sooner). The figure is env steps per second of wall
time while learning: between the first and the last metrics.csv row past `learning_starts`
(each row's elapsed time is its global_step over its sps), or, for a script without a heatup
whose run logged fewer than two rows, the whole run's figure from summary.json (start-up and the
first use of each GPU kernel included: it overstates a GPU's cost). On a machine with more CPUs
than runs at once, the CPU runs go at once (one core each) and the GPU runs one after another
beside them, so no two share the GPU; on a smaller one every run goes alone, one after another. A short run's speed is the speed of its phase, not of a whole run's: the
networks' size and the batch decide it, the memory's fill level little.
"""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "algos"))
from provenance import code_state  # noqa: E402
from speed_minatar import cli_flags  # noqa: E402
from suite import Cell, load_suite, metrics_file  # noqa: E402

DEFAULT_CELLS = [
    "classic:dqn:CartPole-v1",
    "minatar_paper:dqn:MinAtar/Breakout-v0",
    "atari_cpu:dqn:BreakoutNoFrameskip-v4",
    "mujoco:ddpg:HalfCheetah-v5",
    "mujoco:naf:HalfCheetah-v5",
    "mujoco:a2c:HalfCheetah-v5",
]


@dataclass
class DeviceArgs:
    cells: list[str] = field(default_factory=lambda: list(DEFAULT_CELLS))
    """suite:algo:env, each a cell of benchmarks/suites.toml"""
    devices: list[str] = field(default_factory=lambda: ["cpu", "cuda"])
    """the devices to run each cell on"""
    steps: int = 12_000
    """env steps per run"""
    threads: int = 1
    """torch threads per run"""
    out: str | None = None
    """where to write the figures as JSON (default: print only)"""


class BadInput(Exception):
    """A wrong --cells entry or device: one line, exit 2."""


def find_cell(spec: str):
    parts = spec.split(":", 2)
    if len(parts) != 3:
        raise BadInput(f"--cells {spec!r}: expected suite:algo:env, e.g. mujoco:ddpg:HalfCheetah-v5")
    suite, algo, env = parts
    try:
        cells = load_suite(suite).cells
    except SystemExit as e:  # an unknown suite
        raise BadInput(f"--cells {spec!r}: {e}") from None
    for cell in cells:
        if cell.algo == algo and cell.env == env:
            return cell
    raise BadInput(f"--cells {spec!r}: no cell {algo} {env} in suite {suite}")


def sps_while_learning(run_dir: Path, after: int) -> tuple[float | None, int]:
    """Env steps per wall second between the first and last logged rows past step `after`; (rate, rows)."""
    with open(metrics_file(run_dir)) as f:
        rows = [(int(r["global_step"]), int(r["sps"])) for r in csv.DictReader(f) if r.get("sps") and int(r["global_step"]) > after]
    if len(rows) < 2 or rows[0][1] <= 0 or rows[-1][1] <= 0:
        return None, len(rows)
    (s0, r0), (s1, r1) = rows[0], rows[-1]
    return (s1 - s0) / (s1 / r1 - s0 / r0), len(rows)


def run_one(spec: str, cell: Cell, device: str, a: DeviceArgs, scratch: Path) -> dict:
    settings = dict(cell.settings)
    defaults = {f.name: f.default for f in dataclasses.fields(importlib.import_module(cell.algo).Args)}
    after = 0
    if "learning_starts" in defaults:
        settings["learning_starts"] = after = min(int(settings.get("learning_starts", defaults["learning_starts"])), a.steps // 4)
    run_dir = scratch / f"{spec.replace(':', '_').replace('/', '-')}_{device}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, str(ROOT / "algos" / f"{cell.algo}.py"), "--env", cell.env, "--seed", "1", "--total-timesteps", str(a.steps),
           "--device", device, "--torch-threads", str(a.threads), "--eval-episodes", "1", "--eval-every", "0", "--no-progress",
           "--run-dir", str(run_dir), *cli_flags(settings)]
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        return {"cell": spec, "device": device, "error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    rate, rows = sps_while_learning(run_dir, after)
    summary = json.loads((metrics_file(run_dir).parent / "summary.json").read_text())
    measured = "logged rows past learning_starts"
    if rate is None and after == 0:  # no heatup (a2c, n_step_q, sarsa) and too few logged rows: the whole run's figure
        rate, measured = summary.get("sps"), "the whole run (summary.json)"
    return {"cell": spec, "device": device, "steps": a.steps, "learning_starts": after, "learning_sps": round(rate, 1) if rate else None,
            "measured_over": measured, "rows": rows, "wall_seconds": round(wall, 1), "summary_device": summary.get("device"), "updates": summary.get("updates")}


def main(a: DeviceArgs) -> int:
    import torch

    try:
        if "cuda" in a.devices and not torch.cuda.is_available():
            raise BadInput("--devices names cuda, but torch sees no CUDA GPU")
        cells = {spec: find_cell(spec) for spec in a.cells}  # a wrong name fails before any run
    except BadInput as e:
        print(f"speed_devices: error: {e}", file=sys.stderr)
        return 2
    cpu_cells = [c for c in a.cells if "cpu" in a.devices]
    parallel = (os.cpu_count() or 1) > len(cpu_cells) + 1  # a core for each CPU run and one for the GPU runs
    scratch = Path(tempfile.mkdtemp(prefix="speed_devices_"))
    results: dict[tuple[str, str], dict] = {}
    try:
        if parallel:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(cpu_cells) + 1) as pool:
                cpu_jobs = {pool.submit(run_one, c, cells[c], "cpu", a, scratch): (c, "cpu") for c in cpu_cells}

                def gpu_chain():
                    return {(c, d): run_one(c, cells[c], d, a, scratch) for c in a.cells for d in a.devices if d != "cpu"}

                chain = pool.submit(gpu_chain)
                for job, key in cpu_jobs.items():
                    results[key] = job.result()
                results.update(chain.result())
        else:
            for c in a.cells:
                for d in a.devices:
                    results[(c, d)] = run_one(c, cells[c], d, a, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    machine = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "cpu_runs_in_parallel": parallel}
    print(f"{machine['gpu'] or 'no GPU'}; {machine['cpu_count']} logical CPUs; torch {machine['torch']}; {a.steps:,} steps, {a.threads} torch thread(s)")
    print(f"{'cell':44s}" + "".join(f"{d + ' sps':>12s}" for d in a.devices) + ("   gpu/cpu" if "cpu" in a.devices and len(a.devices) > 1 else ""))
    for c in a.cells:
        line = f"{c:44s}"
        for d in a.devices:
            r = results[(c, d)]
            mark = "*" if r.get("measured_over", "").startswith("the whole run") else ""
            line += f"{'failed' if 'error' in r else str(r['learning_sps']) + mark if r['learning_sps'] else 'too short':>12}"
        cpu, other = results.get((c, "cpu"), {}), [results[(c, d)] for d in a.devices if d != "cpu"]
        if cpu.get("learning_sps") and other and other[0].get("learning_sps"):
            line += f"{other[0]['learning_sps'] / cpu['learning_sps']:>10.2f}"
        print(line)
    if any(r.get("measured_over", "").startswith("the whole run") for r in results.values()):
        print("* the whole run (too few logged rows while learning): start-up included")
    for r in results.values():
        if "error" in r:
            print(f"{r['cell']} on {r['device']} failed: {r['error'][0]}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"settings": vars(a), "machine": machine, "code": code_state(), "date": time.strftime("%Y-%m-%d"),
                                           "runs": list(results.values())}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(DeviceArgs, description=__doc__.split("\n\n")[0])))
