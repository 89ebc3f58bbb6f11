"""Draw run folders' learning curves into one PNG: return vs env steps, mean and min-max band over seeds.

    python plot.py runs/CartPole-v1__dqn__* --out curves.png
    python plot.py runs --out curves.png        # every run folder inside runs/

One panel per environment, one colour per algorithm. Runs of the same algorithm and environment
(different seeds) are drawn as their mean with a band from the lowest to the highest seed:
- training return (solid): each run's episodic returns, averaged over the last --smooth episodes,
  interpolated onto 200 env steps spanning the range every seed covers;
- evaluation return (dashed, markers), where metrics.csv has eval_return: at the steps where
  the seeds evaluated, within the range every seed covers.
Reads metrics.csv and config.json only; needs matplotlib (pip install -r requirements-viz.txt).
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro


@dataclass
class PlotArgs:
    runs: tyro.conf.Positional[tuple[Path, ...]]
    """run folders, or folders holding run folders"""
    out: Path = Path("curves.png")
    """PNG file to write"""
    smooth: int = 10
    """training returns are averaged over this many consecutive episodes of a run (1: raw)"""


@dataclass
class Curves:
    algo: str
    env: str
    train: tuple[np.ndarray, np.ndarray]  # env steps, episodic return
    eval: tuple[np.ndarray, np.ndarray]  # env steps, eval_return


def find_runs(paths: tuple[Path, ...]) -> list[Path]:
    """Each path that holds metrics.csv, and the run folders directly inside the others."""
    runs = []
    for path in paths:
        if (path / "metrics.csv").is_file():
            runs.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if (p / "metrics.csv").is_file()) if path.is_dir() else []
        if not inside:
            raise ValueError(f"{path} has no metrics.csv (not a run folder, nor a folder of run folders)")
        runs += inside
    return runs


def read_run(folder: Path, smooth: int) -> Curves:
    config_path = folder / "config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text())
        algo, env = config["algo"], config["env_id"]
    else:  # <env>__<algo>__<seed>__<time>
        env, algo = (folder.name.split("__") + ["?", "?"])[:2]
    train, evals = [], []
    with open(folder / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("episodic_return"):
                train.append((int(row["global_step"]), float(row["episodic_return"])))
            if row.get("eval_return"):
                evals.append((int(row["global_step"]), float(row["eval_return"])))
    steps, returns = (np.array(c, dtype=float) for c in zip(*train)) if train else (np.array([]), np.array([]))
    if len(returns) and smooth > 1:  # trailing mean over up to `smooth` episodes
        total = np.cumsum(np.insert(returns, 0, 0.0))
        first = np.maximum(np.arange(1, len(returns) + 1) - smooth, 0)
        returns = (total[1:] - total[first]) / (np.arange(1, len(returns) + 1) - first)
    eval_steps, eval_returns = (np.array(c, dtype=float) for c in zip(*evals)) if evals else (np.array([]), np.array([]))
    return Curves(algo, env, (steps, returns), (eval_steps, eval_returns))


def on_common_grid(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray | None = None):
    """(grid, [seeds, grid] values) over the step range every curve covers; None when they share none.
    `grid` None: 200 evenly spaced steps; else the given steps that fall in the shared range."""
    curves = [c for c in curves if len(c[0])]
    if not curves:
        return None
    lo, hi = max(s[0] for s, _ in curves), min(s[-1] for s, _ in curves)
    if hi < lo:
        return None
    grid = np.linspace(lo, hi, 200) if grid is None else grid[(grid >= lo) & (grid <= hi)]
    return grid, np.stack([np.interp(grid, s, v) for s, v in curves])


def plot(runs: list[Curves], out: Path, smooth: int) -> None:
    try:
        import matplotlib
    except ImportError:
        raise ValueError("plot.py needs matplotlib: pip install -r requirements-viz.txt") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str], list[Curves]] = defaultdict(list)
    for run in runs:
        groups[(run.env, run.algo)].append(run)
    envs = sorted({env for env, _ in groups})
    algos = sorted({algo for _, algo in groups})
    colors = {algo: plt.get_cmap("tab10")(i % 10) for i, algo in enumerate(algos)}
    cols = min(3, len(envs))
    rows = -(-len(envs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False)
    drawn = 0
    for ax, env in zip(axes.flat, envs):
        for algo in algos:
            members = groups.get((env, algo), [])
            if not members:
                continue
            seeds = f"{len(members)} seed{'s' if len(members) > 1 else ''}"
            for kind, grid_of, style in (("training", None, dict(ls="-")), ("evaluation", "eval", dict(ls="--", marker="o", ms=3))):
                curves = [m.train if kind == "training" else m.eval for m in members]
                grid = None if grid_of is None else np.unique(np.concatenate([s for s, _ in curves]))
                common = on_common_grid(curves, grid)
                if common is None:
                    if any(len(s) for s, _ in curves):
                        print(f"plot: {algo} on {env}: the seeds' {kind} curves share no step range; left out", file=sys.stderr)
                    continue
                steps, values = common
                ax.plot(steps, values.mean(0), color=colors[algo], label=f"{algo} {kind} ({seeds})", **style)
                ax.fill_between(steps, values.min(0), values.max(0), color=colors[algo], alpha=0.2, lw=0)
                drawn += 1
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episodic return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    if not drawn:
        plt.close(fig)
        raise ValueError("nothing to plot: no run has a finished episode or an evaluation")
    averaged = f"mean of each run's last {smooth} episodes" if smooth > 1 else "each episode"
    fig.suptitle(f"mean over seeds, band: min to max over seeds; training return: {averaged}", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(a: PlotArgs) -> int:
    try:
        if not a.runs:
            raise ValueError("give one or more run folders (or folders holding them)")
        if a.smooth < 1:
            raise ValueError(f"--smooth must be at least 1, got {a.smooth}")
        runs = [read_run(folder, a.smooth) for folder in find_runs(a.runs)]
        plot(runs, a.out, a.smooth)
    except ValueError as e:
        print(f"plot: error: {e}", file=sys.stderr)
        return 2
    print(f"{a.out}: {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(PlotArgs, description=__doc__.strip().splitlines()[0])))
