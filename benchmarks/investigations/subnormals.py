"""What flushing subnormal floats to zero is worth: one script's run with and without it, alternating.

    python benchmarks/investigations/subnormals.py --algo dqn --repeats 2 -- --env MinAtar/Breakout-v1 \
        --total-timesteps 15000 --loss huber --learning-rate 0.00025 --batch-size 32 --buffer-size 100000 \
        --learning-starts 5000 --train-every 1 --target-every 1000 --end-epsilon 0.1 --exploration-fraction 0.1

Every script calls `harness.run.flush_denormals()` when training starts; here the "off" runs replace
it by a function that leaves the flush off. Each run is a fresh process (so neither inherits the
other's caches or setting), timed start to exit, one torch thread, and prints its final greedy
evaluation: with the flush only values below ~1.2e-38 change, so the two evaluations should be
close, not equal bit for bit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
sys.path[:0] = [{algos!r}, {root!r}]
import {algo} as script
from harness.run import parse_args
if {off}:
    script.flush_denormals = lambda: False  # leave subnormals as they are
args = parse_args(script.Args, script.__doc__)
summary = script.train(args)
print("RESULT " + json.dumps({{"eval": summary["eval_return_mean"], "sps": summary["sps"]}}))
"""


def run(algo: str, off: bool, flags: list[str], run_dir: str) -> dict:
    code = CHILD.format(algos=str(ROOT / "algos"), root=str(ROOT), algo=algo, off=off)
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code, *flags, "--torch-threads", "1", "--no-progress", "--run-dir", run_dir],
                       capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"subnormals: the {'off' if off else 'on'} run failed (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
    result = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
    return {"wall_seconds": round(wall, 1), **result}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="dqn", choices=["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("flags", nargs="*", help="the script's own flags, after --")
    a = p.parse_args()
    results = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as run_dir:
        for i in range(a.repeats):
            for kind in (("on", "off") if i % 2 == 0 else ("off", "on")):
                results[kind].append(run(a.algo, kind == "off", a.flags, run_dir))
                print(f"repeat {i + 1}, flush {kind}: {results[kind][-1]}", flush=True)
    on, off = (statistics.median(r["wall_seconds"] for r in results[k]) for k in ("on", "off"))
    print(f"{a.algo} {' '.join(a.flags)}: median wall {on:.1f} s with the flush, {off:.1f} s without: {off / on:.2f}x")


if __name__ == "__main__":
    main()
