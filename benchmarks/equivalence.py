"""Check that an older commit's code gives a cell the same metrics as today's, and record it.

Runs the cell's first seed for a prefix of `--steps` env steps (evaluating every N/2) with the old commit's
and HEAD's deciding files, compares the metrics and records an identical pair. Details: benchmarks/README.md.
Exit status: 0 identical (recorded) or nothing to check (the files are the same); 1 the metrics
differ, or a side failed (nothing recorded); 2 bad input (one line).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import BadInput, OneLineParser, fail  # noqa: E402
from job import machine_info  # noqa: E402
from provenance import EQUIVALENCE_FILE, ROOT, Checker, GitError, code_state, git, load_records  # noqa: E402
from suite import SUITES_FILE, Cell, load_suite  # noqa: E402

WALL_CLOCK = ("wall_seconds", "sps")
DEFAULT_STEPS = 20_000

# The run on each side: only the side's own files on sys.path, so nothing of today's code leaks into
# the old side; Args fields an older script lacks are left out.
DRIVER = r"""
import dataclasses, importlib, json, sys
spec = json.load(open(sys.argv[1]))
sys.path[:0] = [spec["root"], spec["root"] + "/algos"]
module = importlib.import_module(spec["algo"])
fields = {f.name for f in dataclasses.fields(module.Args)}
values = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["settings"].items()}
values.update(env_id=spec["env"], seed=spec["seed"], total_timesteps=spec["steps"], run_dir=spec["run_dir"])
extra = {"eval_every": spec["eval_every"], "progress": False, "torch_threads": values.get("torch_threads", 1)}
values.update({k: v for k, v in extra.items() if k in fields})
summary = module.train(module.Args(**values))
json.dump(summary, open(spec["run_dir"] + "/summary_of_prefix.json", "w"), default=str)
"""


def run_side(root: Path, cell: Cell, seed: int, steps: int, out: Path) -> tuple[list[dict], dict]:
    """The prefix run with the files under `root`: (metrics.csv rows without wall-clock columns, summary)."""
    out.mkdir(parents=True)
    spec = {
        "root": str(root),
        "algo": cell.algo,
        "env": cell.env,
        "seed": seed,
        "steps": steps,
        "settings": cell.settings,
        "eval_every": steps // 2 if cell.eval_every else 0,
        "run_dir": str(out),
    }
    (out / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONHASHSEED="0", WANDB_MODE="disabled")
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, str(out / "spec.json")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    (out / "log.txt").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the run failed (exit {r.returncode}): {tail} (log: {out / 'log.txt'})")
    (metrics,) = out.glob("*/metrics.csv")
    with open(metrics, newline="") as f:
        rows = [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in csv.DictReader(f)]
    return rows, json.loads((out / "summary_of_prefix.json").read_text())


def first_difference(old: tuple[list[dict], dict], new: tuple[list[dict], dict]) -> str | None:
    """Where two sides' (metrics rows, summary) first differ: rows, then final evaluations."""
    (old, old_eval), (new, new_eval) = ((rows, s.get("eval_return_mean")) for rows, s in (old, new))
    if len(old) != len(new):
        return f"{len(old)} metrics rows against {len(new)}"
    for i, (a, b) in enumerate(zip(old, new)):
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return f"row {i + 1} (global_step {a.get('global_step')}): " + ", ".join(
                f"{k} {a.get(k)!r} != {b.get(k)!r}" for k in keys
            )
    return None if old_eval == new_eval else f"final evaluation {old_eval} != {new_eval}"


def check(
    suite: str,
    algo: str,
    env: str,
    old: str,
    steps: int | None,
    record_file: Path = EQUIVALENCE_FILE,
    suites_file: Path | str = SUITES_FILE,
    root: Path = ROOT,
    keep: Path | None = None,
) -> int:
    try:
        cell = next(
            (c for c in load_suite(suite, suites_file).cells if c.algo == algo and c.env == env),
            None,
        )
    except SystemExit as e:
        raise BadInput(str(e)) from None
    if cell is None:
        raise BadInput(f"suite {suite} has no cell {algo} {env}")
    steps = steps or min(cell.steps // 2, DEFAULT_STEPS)
    if not 1 <= steps < cell.steps:
        raise BadInput(
            f"--steps must be between 1 and the cell's budget ({cell.steps:,}), got {steps:,}"
        )
    checker = Checker(root, equivalence_file=None)
    if checker.head is None:
        raise BadInput(checker.error)
    if (old_commit := checker.resolve(old)) is None:
        raise BadInput(f"--old {old}: not a commit of this repository")
    old_files, new_files = checker.deciding(old_commit, algo), checker.deciding(checker.head, algo)
    if checker.same_code(old_files, new_files):
        print(
            f"{algo} {env}: the deciding files of {old_commit[:7]} and HEAD ({checker.head[:7]}) are the same code "
            "(docstrings, comments and layout aside): its runs count already, nothing to check"
        )
        return 0
    changed = sorted(
        p for p in set(old_files) | set(new_files) if old_files.get(p) != new_files.get(p)
    )
    dirty = [p for p in (code_state(root).get("dirty_files") or []) if p in new_files]
    print(
        f"{algo} {env} seed {cell.seeds[0]}, {steps:,} steps: {old_commit[:7]} against HEAD {checker.head[:7]} "
        f"(changed: {', '.join(changed)})"
        + (
            f"; HEAD's files are checked, not the uncommitted changes to {', '.join(dirty)}"
            if dirty
            else ""
        ),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="equivalence-") as tmp:
        base = Path(keep) if keep else Path(tmp)
        sides = {}
        for name, commit, files in (
            ("old", old_commit, old_files),
            ("new", checker.head, new_files),
        ):
            (base / name / "code").mkdir(parents=True)  # the side's files, out of git
            tar = git(
                ["archive", "--format=tar", commit, "--", *sorted(files)], root, text=False
            ).stdout
            tarfile.open(fileobj=io.BytesIO(tar)).extractall(base / name / "code", filter="data")
            t0 = time.time()
            try:
                sides[name] = run_side(
                    base / name / "code", cell, cell.seeds[0], steps, base / name / "run"
                )
            except RuntimeError as e:
                print(f"{name} side ({commit[:7]}): {e}")
                return 1
            print(
                f"  {name} side ({commit[:7]}): {len(sides[name][0])} metrics rows, final eval "
                f"{sides[name][1].get('eval_return_mean')}, {time.time() - t0:.0f} s",
                flush=True,
            )
        new_rows, new_summary = sides["new"]
        if diff := first_difference(sides["old"], sides["new"]):
            print(f"DIFFERENT: {diff}; nothing recorded")
            return 1
        if not new_summary.get("updates"):
            print(
                f"the {steps:,}-step prefix took no gradient step (the summary's updates: {new_summary.get('updates')}): "
                "give a larger --steps; nothing recorded"
            )
            return 1
    machine = machine_info()
    record = {
        "suite": suite,
        "algo": algo,
        "env": env,
        "hash": cell.digest,
        "seed": cell.seeds[0],
        "steps": steps,
        "old": {"commit": old_commit, "files": old_files},
        "new": {"commit": checker.head, "files": new_files},
        "rows": len(new_rows),
        "date": time.strftime("%Y-%m-%d"),
        "machine": {k: v for k, v in machine.items() if k != "load_average"},
    }
    records = [*load_records(record_file), record]
    Path(record_file).write_text(json.dumps({"records": records}, indent=1) + "\n")
    print(
        f"IDENTICAL: {len(new_rows)} metrics rows and the final evaluation; recorded in {record_file}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(
        prog="benchmarks/equivalence.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag in ("--suite", "--algo", "--env"):
        p.add_argument(flag, required=True)
    p.add_argument("--old", required=True, help="the commit the cell's runs were made on")
    p.add_argument(
        "--steps",
        type=int,
        help=f"env steps of the prefix (default: half the budget, at most {DEFAULT_STEPS:,})",
    )
    p.add_argument("--record-file", default=str(EQUIVALENCE_FILE), help=argparse.SUPPRESS)
    p.add_argument("--suites-file", default=str(SUITES_FILE), help=argparse.SUPPRESS)
    p.add_argument(
        "--keep", help="keep both sides' code and runs in this folder (new), to look at them"
    )
    a = p.parse_args(argv)
    try:
        if a.keep and Path(a.keep).exists():
            raise BadInput(f"--keep {a.keep}: exists already")
        return check(
            a.suite, a.algo, a.env, a.old, a.steps, Path(a.record_file), a.suites_file, keep=a.keep
        )
    except (BadInput, GitError) as e:
        return fail("equivalence", e)


if __name__ == "__main__":
    sys.exit(main())
