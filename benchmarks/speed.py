"""Speed against the peers: runs each per-algorithm comparison script and collects its ratios.

    python benchmarks/speed.py                      # every comparison, each script's own defaults
    python benchmarks/speed.py --only dqn a2c       # some of them
    python benchmarks/speed.py --quick              # short budgets (~30 s): checks the plumbing, not the speed
    python benchmarks/speed.py --only ddpg --cleanrl ~/cleanrl --cleanrl-python ~/venv-cleanrl/bin/python

The comparisons themselves live in benchmarks/speed_<algo>.py (each runs ours and
Stable-Baselines3 side by side with matched settings, interleaved, and prints steps/s and the
ratio; DDPG's also runs CleanRL's torch and JAX scripts from a CleanRL checkout given with
`--cleanrl PATH`, in CleanRL's own Python environment given with `--cleanrl-python`). This entry runs them one after another (never in parallel: they would slow each other),
keeps each one's full output in benchmarks/results/speed/<name>.log and writes
benchmarks/results/speed/<name>.json (command, exit status, the script's closing lines, the ratios
found in them), which `python benchmarks/report.py --suite ...` puts into every report. A script
that does not exist yet is reported as missing; one that fails is recorded with its exit status.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# name -> (script, full arguments, quick arguments)
COMPARISONS = {
    "dqn": ("speed_dqn.py", ["--total-timesteps", "500000", "--out", "{dir}/speed_dqn_raw.json"],
            ["--total-timesteps", "3000", "--learning-starts", "1000", "--out", "{dir}/speed_dqn_raw.json"]),
    "a2c": ("speed_a2c.py", ["--total-timesteps", "100000", "--repeats", "2"], ["--total-timesteps", "2000", "--repeats", "1"]),
    "ddpg": ("speed_ddpg.py", ["--repeats", "2", "--threads", "1", "default", "--out", "{dir}/speed_ddpg_raw.json"],
             ["--repeats", "1", "--threads", "1", "--total-timesteps", "600", "--learning-starts", "300", "--out", "{dir}/speed_ddpg_raw.json"]),
    "dqn-atari": ("speed_dqn_atari.py", ["--total-timesteps", "12000", "--repeats", "2", "--threads", "1", "2", "--profile",
                                        "--out", "{dir}/speed_dqn_atari_raw.json"],
                  ["--total-timesteps", "400", "--learning-starts", "200", "--repeats", "1", "--threads", "1",
                   "--out", "{dir}/speed_dqn_atari_raw.json"]),
}
RATIO_LINE = re.compile(r"ratio|ours/", re.IGNORECASE)
RATIO = re.compile(r"(?<![>=\d.])(?<!>= )(\d+(?:\.\d+)?)x\b")  # not a bound such as ">= 2x"


def parse(output: str) -> tuple[list[str], list[float]]:
    """The script's closing lines, and every 'N.NNx' on lines that talk about a ratio."""
    lines = [x.rstrip() for x in output.splitlines() if x.strip() and "warn" not in x.lower()]
    closing = []
    for x in reversed(lines):  # the summary block: trailing lines after the per-run lines
        if x.lower().startswith(("run ", "repeat ", "ours  ", "sb3   ", "[")):
            break
        closing.insert(0, x)
    closing = closing[-30:] or lines[-3:]
    ratios = [float(m) for x in closing if RATIO_LINE.search(x) for m in RATIO.findall(x)]
    return closing, ratios


CLEANRL_COMPARISONS = {"ddpg"}  # the comparisons that take --cleanrl / --cleanrl-python


def run_one(name: str, quick: bool, out_dir: Path, timeout: float, cleanrl: list[str] | None = None) -> dict:
    script, full, short = COMPARISONS[name]
    path = BENCH / script
    argv = short if quick and short is not None else full
    shown = out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir
    argv = [a.format(dir=shown) for a in argv] + (cleanrl if cleanrl and name in CLEANRL_COMPARISONS else [])
    command = " ".join(["python", f"benchmarks/{script}", *argv])
    record = {"name": name, "command": command, "quick": quick, "started": time.strftime("%Y-%m-%d %H:%M")}
    if not path.exists():
        record.update(returncode=None, error=f"script missing: benchmarks/{script}", summary_lines=[], ratios=[])
        print(f"{name}: script missing: benchmarks/{script}")
        return record
    print(f"{name}: {command}", flush=True)
    start = time.perf_counter()
    log = out_dir / f"{name}.log"
    try:
        proc = subprocess.run([sys.executable, str(path), *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout or None)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="ignore") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = None
        record["error"] = f"timed out after {timeout:.0f} s"
    log.write_text(output)
    closing, ratios = parse(proc.stdout if code is not None else output)
    record.update(returncode=code, seconds=round(time.perf_counter() - start, 1), summary_lines=closing, ratios=ratios,
                  log=str(log.relative_to(ROOT)) if log.is_relative_to(ROOT) else str(log),
                  finished=time.strftime("%Y-%m-%d %H:%M"))
    if code not in (0, None):
        record["error"] = (output.strip().splitlines() or ["no output"])[-1][:200]
    for x in closing:
        print(f"  {x}")
    print(f"  -> ratios {ratios}, exit {code}, {record['seconds']} s", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=sorted(COMPARISONS), help="these comparisons only")
    p.add_argument("--quick", action="store_true", help="tiny budgets: a plumbing check, the numbers mean nothing")
    p.add_argument("--out", default=None, help="folder for the .json and .log files (default: benchmarks/results/speed; "
                   "with --quick, a folder in the system's temporary directory, so the measured records stay as they are)")
    p.add_argument("--timeout", type=float, default=0, help="seconds per comparison (0: none)")
    p.add_argument("--cleanrl", default=None, help="a CleanRL checkout: DDPG is also timed against its torch and JAX scripts")
    p.add_argument("--cleanrl-python", default=None, help="the Python of CleanRL's environment (gymnasium 0.29, jax, flax, optax)")
    a = p.parse_args(argv)
    cleanrl = None
    if a.cleanrl:
        if not (Path(a.cleanrl) / "cleanrl").is_dir():
            p.error(f"--cleanrl {a.cleanrl} is not a CleanRL checkout (no cleanrl/ folder in it)")
        cleanrl = ["--cleanrl", str(Path(a.cleanrl).resolve())] + (["--cleanrl-python", a.cleanrl_python] if a.cleanrl_python else [])
    default = Path(tempfile.gettempdir()) / "rl-speed-quick" if a.quick else BENCH / "results" / "speed"
    out_dir = Path(a.out or default).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in a.only or COMPARISONS:
        record = run_one(name, a.quick, out_dir, a.timeout, cleanrl)
        (out_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
        failed += record.get("returncode") != 0
    print(f"wrote {out_dir}/*.json; `python benchmarks/report.py --suite classic` puts them in the report")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
