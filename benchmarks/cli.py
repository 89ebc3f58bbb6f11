"""Pieces shared by the command-line tools: one-line argument errors, the SLURM backend's flags (run.py, tune.py), a
cell's settings as a script's flags (speed.py, the report), step counts and markdown table rows (report, tune.py)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

NO_SUBMITIT = (
    "--backend slurm needs submitit ({}): pip install -r benchmarks/requirements-cluster.txt"
)


def no_slurm(submitit_cluster: str) -> str | None:
    """Why `--backend slurm` cannot submit here (submitit's SLURM executor needs `srun` and `sbatch` on the PATH),
    or None: checked before submitit is asked, whose own answer is a traceback."""
    missing = [tool for tool in ("srun", "sbatch") if shutil.which(tool) is None]
    if submitit_cluster != "slurm" or not missing:
        return None
    return (
        f"--backend slurm: no SLURM on this machine ({' and '.join(missing)} not found); run it where SLURM "
        "is (a cluster's login node), or use --backend local"
    )


class BadInput(ValueError):
    """Bad input to a tool: one line for the user (`fail`), exit 2."""


def fail(tool: str, message) -> int:
    """`<tool>: error: <message>` as one line on stderr; 2, the exit status of bad input."""
    print(f"{tool}: error: {message}", file=sys.stderr)
    return 2


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors (unknown flag, bad value) as one line `<name>: error: ...` and exit 2, no usage block."""

    def error(self, message: str):
        sys.exit(fail(Path(self.prog).stem, message))


def add_slurm_flags(p: argparse.ArgumentParser) -> None:
    slurm = p.add_argument_group("slurm backend")
    slurm.add_argument(
        "--time-limit",
        type=int,
        default=60,
        help="minutes per array task; near the limit the task stops its run at a checkpoint and is requeued (default 60)",
    )
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    slurm.add_argument(
        "--cpus-per-task",
        type=int,
        default=1,
        help="CPUs per array task (default 1; a run uses one)",
    )
    slurm.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other sbatch option, e.g. account=myproject, qos=low, mem=4G (repeatable)",
    )
    slurm.add_argument(
        "--submitit-dir",
        help="submitit's job files and logs (default: run.py <results-dir>/<suite>/submitit, tune.py <study-dir>/submitit)",
    )
    slurm.add_argument(
        "--submitit-cluster",
        choices=("slurm", "local", "debug"),
        default="slurm",
        help="slurm; or local/debug: the same tasks as local processes through submitit, to try the SLURM path without a cluster",
    )


def flags_error(a: argparse.Namespace, **least) -> str | None:
    """The first of the named flags below its least value (unset ones pass), or of the SLURM flags' errors."""
    for name, low in {**least, "time_limit": 1, "cpus_per_task": 1}.items():
        if getattr(a, name) is not None and getattr(a, name) < low:
            return f"--{name.replace('_', '-')} must be >= {low}, got {getattr(a, name)}"
    bad = [x for x in a.slurm_option if "=" not in x]
    return f"--slurm-option takes KEY=VALUE, got {bad[0]!r}" if bad else None


def cli_flags(settings: dict) -> list[str]:
    """A suite cell's settings as a script's command-line flags (booleans as --x / --no-x)."""
    flags = []
    for k, v in settings.items():
        name = k.replace("_", "-")
        if isinstance(v, bool):
            flags.append(f"--{name}" if v else f"--no-{name}")
        else:
            flags += [f"--{name}", *map(str, v if isinstance(v, (list, tuple)) else [v])]
    return flags


def fmt_steps(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k" if n >= 1000 else str(n)


def md_row(cells) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"
