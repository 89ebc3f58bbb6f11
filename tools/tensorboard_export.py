"""Write existing run folders' metrics.csv as TensorBoard scalars, \
for runs trained without --tensorboard.

    python tools/tensorboard_export.py runs/CartPole-v1__dqn__1__20261122-211249 [RUN ...]
    tensorboard --logdir runs

Each run's scalars go into <run folder>/tensorboard under the tags `--tensorboard` uses
(CleanRL's names: charts/episodic_return, charts/SPS, losses/td_loss, eval/episodic_return, ...).
The folder is derived from metrics.csv: event files already there are replaced, so exporting
twice, or a run that also had --tensorboard, gives one copy of each scalar. Needs the
tensorboard package (pip install -r requirements/requirements-viz.txt).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for harness/
from harness.extras import tensorboard_writer, write_tensorboard  # noqa: E402


@dataclass
class ExportArgs:
    runs: tyro.conf.Positional[tuple[Path, ...]]
    """run folders holding config.json and metrics.csv"""


def main(a: ExportArgs) -> int:
    if not a.runs:
        print("tensorboard_export: error: give one or more run folders", file=sys.stderr)
        return 2
    for run in a.runs:
        if not (run / "metrics.csv").is_file() or not (run / "config.json").is_file():
            print(
                f"tensorboard_export: error: {run} has no metrics.csv and config.json "
                "(not a run folder)",
                file=sys.stderr,
            )
            return 2
    try:
        tensorboard_writer()
    except ValueError as e:
        print(f"tensorboard_export: error: {e}", file=sys.stderr)
        return 2
    for run in a.runs:
        for old in (run / "tensorboard").glob("events.out.tfevents.*"):
            old.unlink()
        writer = tensorboard_writer(run)
        count = write_tensorboard(run, writer)
        writer.close()
        print(f"{run / 'tensorboard'}: {count} scalars")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(ExportArgs, description=__doc__.strip().splitlines()[0])))
