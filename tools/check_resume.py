"""Check that a script resumes exactly: \
a run stopped by a signal and resumed equals a run never stopped.

    python tools/check_resume.py algos/dqn.py --env CartPole-v1 --total-timesteps 20000 \
        --learning-starts 1000
    python tools/check_resume.py my_project/sac.py --stop-at 15000 --total-timesteps 30000

Trains the script twice from the same flags, in a temporary folder (or --keep DIR): once straight
through, and once stopped by SIGUSR1 (what SLURM sends before a time limit) during the env step that
reaches --stop-at, then resumed with `--resume`. It compares the two runs' metrics.csv row by row,
apart from the wall-clock columns (WALL_CLOCK), and their final weights (model.pt). Exit 0 when they
agree; 1 naming the first row and column (or weight) where they part; 2 on bad input or a run that
fails or ends before the stop.

Any script of this repository or a copy of one (with its common/ and harness/ beside it, including
harness/checkpoint.py and harness/resume.py) works: the stop counts the steps of the first gymnasium
vector env the script steps, its training env. A difference means some state the next step depends
on is missing from the script's checkpoint() dict (a generator, a schedule, an object whose
state_dict leaves something out) or is put back wrong.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

WALL_CLOCK = ("wall_seconds", "sps")  # metrics.csv's columns that measure time, not the run
OWN_FLAGS = (
    "--run-dir",
    "--resume",
    "--save-model",
    "--no-save-model",
    "--progress",
    "--no-progress",
)


class BadInput(Exception):
    """One line for the user; exit 2."""


def load_args(script: Path, flags: list[str]):
    """The script's parsed Args for `flags`
    (tyro prints its own message and exits 2 on a bad flag)."""
    # a script finds common/ and harness/ from its folder
    sys.path.insert(0, str(script.resolve().parent))
    spec = importlib.util.spec_from_file_location(f"_checked_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    import tyro

    return tyro.cli(module.Args, args=flags, prog=script.name)


def stop_during_step(stop_at: int) -> None:
    """Send this process SIGUSR1 during the training env's step that reaches `stop_at` env steps."""
    import gymnasium as gym

    state = {"env": None, "steps": 0}
    step = gym.vector.SyncVectorEnv.step

    def counting_step(env, actions):
        # the first vector env stepped: train() steps its env before any evaluation
        if state["env"] is None:
            state["env"] = env
        if env is state["env"]:
            state["steps"] += env.num_envs
            if state["steps"] >= stop_at and state["steps"] - env.num_envs < stop_at:
                os.kill(os.getpid(), signal.SIGUSR1)
        return step(env, actions)

    gym.vector.SyncVectorEnv.step = counting_step


def run_folder(parent: Path) -> Path:
    folders = [p for p in parent.iterdir() if p.is_dir()]
    if len(folders) != 1:
        raise BadInput(f"{parent} should hold one run folder, holds {len(folders)}")
    return folders[0]


def train(command: list[str], log: Path, expected: tuple[int, ...]) -> int:
    with open(log, "w") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode
    if code not in expected:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise BadInput(f"`{' '.join(command[1:])}` exited {code}: {tail[0]} (whole output: {log})")
    return code


def first_difference(straight: Path, resumed: Path) -> str | None:
    """Where the two runs' metrics.csv (apart from WALL_CLOCK) or model.pt first differ, or None."""
    with open(straight / "metrics.csv") as a, open(resumed / "metrics.csv") as b:
        rows_a, rows_b = list(csv.DictReader(a)), list(csv.DictReader(b))
    for i, (x, y) in enumerate(zip(rows_a, rows_b), start=2):  # line 1 is the header
        for column in x:
            if column not in WALL_CLOCK and x[column] != y.get(column):
                step = x.get("global_step")
                return (
                    f"metrics.csv line {i} (global_step {step}), column {column}: "
                    f"{x[column] or '(empty)'} straight through, "
                    f"{y.get(column) or '(empty)'} resumed"
                )
    if len(rows_a) != len(rows_b):
        return f"metrics.csv has {len(rows_a)} rows straight through, {len(rows_b)} resumed"
    import torch

    def flat(state, prefix=""):
        if isinstance(state, dict):
            return {
                k: v
                for key, value in state.items()
                for k, v in flat(value, f"{prefix}{key}.").items()
            }
        return {prefix.rstrip("."): state}

    a = flat(torch.load(straight / "model.pt", weights_only=True))
    b = flat(torch.load(resumed / "model.pt", weights_only=True))
    for name in sorted(a.keys() | b.keys()):
        if name not in a or name not in b:
            return f"model.pt: {name} is in one run's weights only"
        if not torch.equal(a[name], b[name]):
            return (
                f"model.pt: {name} differs "
                f"(largest difference {(a[name] - b[name]).abs().max().item():.3g})"
            )
    return None


def check(script: Path, flags: list[str], stop_at: int | None, folder: Path) -> int:
    args = load_args(script, flags)
    start = getattr(args, "learning_starts", 0) or 0
    stop_at = stop_at if stop_at is not None else start + (args.total_timesteps - start) // 2
    if not 0 < stop_at < args.total_timesteps:
        raise BadInput(
            f"--stop-at must be between 0 and --total-timesteps {args.total_timesteps}, "
            f"got {stop_at}"
        )
    if stop_at <= start:
        print(f"check_resume: note: the stop at {stop_at} comes before learning starts ({start})")
    common = [*flags, "--save-model", "--no-progress"]
    print(
        f"check_resume: {script} {' '.join(flags)}: straight through, "
        f"then stopped at step {stop_at} and resumed"
    )
    train(
        [sys.executable, str(script), *common, "--run-dir", str(folder / "straight")],
        folder / "straight.log",
        (0,),
    )
    stopper = [sys.executable, __file__, "--stop-now-at", str(stop_at), str(script), *common]
    code = train([*stopper, "--run-dir", str(folder / "resumed")], folder / "stopped.log", (0, 75))
    if code == 0:
        raise BadInput(f"the run ended before step {stop_at} was stepped: give a smaller --stop-at")
    resumed = run_folder(folder / "resumed")
    resume = [sys.executable, str(script), "--resume", str(resumed), "--no-progress"]
    train(resume, folder / "resumed.log", (0,))
    where = first_difference(run_folder(folder / "straight"), resumed)
    if where is not None:
        print(f"check_resume: the resumed run differs from the straight one: {where}")
        return 1
    print(
        f"check_resume: same metrics.csv (apart from {', '.join(WALL_CLOCK)}) "
        "and the same model.pt: the run resumes exactly"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--stop-now-at"]:  # the stopped run, in a process of its own
        stop_during_step(int(argv[1]))
        script = argv[2]
        sys.argv = [script, *argv[3:]]
        sys.path.insert(0, str(Path(script).resolve().parent))
        runpy.run_path(script, run_name="__main__")  # ends with the script's own sys.exit
        return 0
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s SCRIPT [--stop-at STEP] [--keep DIR] [the script's flags]",
    )
    p.add_argument(
        "script", type=Path, help="the script to check: algos/<name>.py or a copy of one"
    )
    p.add_argument(
        "--stop-at",
        type=int,
        metavar="STEP",
        help=(
            "env step at which the second run is stopped "
            "(default: halfway from learning_starts to the end)"
        ),
    )
    p.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="train in DIR (new or empty) and keep both runs, to look at them",
    )
    a, flags = p.parse_known_args(argv)
    try:
        if not a.script.is_file():
            raise BadInput(f"{a.script} is not a file (give a script such as algos/dqn.py)")
        if own := [f for f in flags if f.split("=")[0] in OWN_FLAGS]:
            raise BadInput(f"{own[0]} is set by check_resume itself; leave it out")
        if a.keep is not None:
            if a.keep.exists() and any(a.keep.iterdir()):
                raise BadInput(f"--keep {a.keep} is not empty")
            a.keep.mkdir(parents=True, exist_ok=True)
            return check(a.script, flags, a.stop_at, a.keep.resolve())
        with tempfile.TemporaryDirectory(prefix="check_resume_") as folder:
            return check(a.script, flags, a.stop_at, Path(folder))
    except BadInput as e:
        print(f"check_resume: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
