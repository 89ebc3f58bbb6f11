"""Draw run folders' learning curves into one PNG: \
return vs env steps, each run whole, seeds averaged.

    python tools/plot.py runs/CartPole-v1__dqn__* --out curves.png
    python tools/plot.py runs --out curves.png        # every run folder inside runs/

One panel per environment. Runs of the same algorithm and environment are grouped by their seed
(config.json's, else the folder name's):
- one run: its curves as they are, over its whole length;
- several seeds: their mean (thick) with a band from the lowest to the highest seed, over the
  steps every seed covers (the legend gives that range); where a run goes on past it, its own
  curve is drawn on, thin;
- two runs with the same seed are not two seeds:
  tools/plot.py says so and draws each run on its own.
Training return (solid): each run's episodic returns, averaged over its last --smooth episodes
(means and bands on 200 evenly spaced steps). Evaluation return (dashed, markers), where
metrics.csv has eval_return: at the steps where the runs evaluated; seeds that evaluated at no
common step are drawn one by one. Reads metrics.csv and config.json only; needs matplotlib
(pip install -r requirements/requirements-viz.txt).
"""

from __future__ import annotations

import csv
import json
import sys
import textwrap
from collections import Counter, defaultdict
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
    seed: int | None = None
    name: str = ""  # the run folder's name


def find_runs(paths: tuple[Path, ...]) -> list[Path]:
    """Each path that holds metrics.csv, and the run folders directly inside the others."""
    runs = []
    for path in paths:
        if (path / "metrics.csv").is_file():
            runs.append(path)
            continue
        inside = (
            sorted(p for p in path.iterdir() if (p / "metrics.csv").is_file())
            if path.is_dir()
            else []
        )
        if not inside:
            raise ValueError(
                f"{path} has no metrics.csv (not a run folder, nor a folder of run folders)"
            )
        runs += inside
    return runs


def read_run(folder: Path, smooth: int) -> Curves:
    parts = (folder.name.split("__") + ["?", "?", "?"])[:3]  # <env>__<algo>__<seed>__<time>
    env, algo, seed = parts[0], parts[1], int(parts[2]) if parts[2].isdigit() else None
    config_path = folder / "config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text())
        algo, env, seed = config["algo"], config["env_id"], config.get("seed", seed)
    train, evals = [], []
    with open(folder / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("episodic_return"):
                train.append((int(row["global_step"]), float(row["episodic_return"])))
            if row.get("eval_return"):
                evals.append((int(row["global_step"]), float(row["eval_return"])))
    steps, returns = (
        (np.array(c, dtype=float) for c in zip(*train)) if train else (np.array([]), np.array([]))
    )
    if len(returns) and smooth > 1:  # trailing mean over up to `smooth` episodes
        total = np.cumsum(np.insert(returns, 0, 0.0))
        first = np.maximum(np.arange(1, len(returns) + 1) - smooth, 0)
        returns = (total[1:] - total[first]) / (np.arange(1, len(returns) + 1) - first)
    eval_steps, eval_returns = (
        (np.array(c, dtype=float) for c in zip(*evals)) if evals else (np.array([]), np.array([]))
    )
    return Curves(algo, env, (steps, returns), (eval_steps, eval_returns), seed, folder.name)


def on_common_grid(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray | None = None):
    """(grid, [seeds, grid] values) over the step range every curve covers; None when
    they share none. `grid` None: 200 evenly spaced steps; else the given steps that
    fall in the shared range."""
    curves = [c for c in curves if len(c[0])]
    if not curves:
        return None
    lo, hi = max(s[0] for s, _ in curves), min(s[-1] for s, _ in curves)
    if hi < lo:
        return None
    grid = np.linspace(lo, hi, 200) if grid is None else grid[(grid >= lo) & (grid <= hi)]
    return grid, np.stack([np.interp(grid, s, v) for s, v in curves])


def _steps(x: float) -> str:
    return f"{x:,.0f}"


def _seeds(seeds: list) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(str(s) for s in seeds)}"


def _outside(
    s: np.ndarray, v: np.ndarray, lo: float, hi: float, join: bool
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The parts of the curve (s, v) before step lo and after step hi; `join`:
    each starts or ends at the curve's value at lo or hi, so that it meets the mean's line."""
    parts = []
    if s[0] < lo:
        k = int(np.searchsorted(s, lo, "left"))
        parts.append(
            (np.append(s[:k], lo), np.append(v[:k], np.interp(lo, s, v)))
            if join
            else (s[:k], v[:k])
        )
    if s[-1] > hi:
        k = int(np.searchsorted(s, hi, "right"))
        parts.append(
            (np.insert(s[k:], 0, hi), np.insert(v[k:], 0, np.interp(hi, s, v)))
            if join
            else (s[k:], v[k:])
        )
    return parts


def figure(runs: list[Curves], smooth: int):
    """The figure and one line per (environment, algorithm) saying what was drawn;
    warnings on stderr."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError(
            "tools/plot.py needs matplotlib: pip install -r requirements/requirements-viz.txt"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    groups: dict[tuple[str, str], list[Curves]] = defaultdict(list)
    for run in runs:
        groups[(run.env, run.algo)].append(run)
    envs = sorted({env for env, _ in groups})
    algos = sorted({algo for _, algo in groups})
    # a group is averaged over its seeds unless two of its runs share a seed:
    # then each run is drawn alone
    averaged = {}
    for (env, algo), members in sorted(groups.items()):
        members.sort(key=lambda m: (m.seed is None, m.seed or 0, m.name))
        repeats = {seed: n for seed, n in Counter(m.seed for m in members).items() if n > 1}
        averaged[(env, algo)] = len(members) > 1 and not repeats
        for seed, n in repeats.items():
            names = ", ".join(m.name for m in members if m.seed == seed)
            print(
                f"plot: {algo} on {env}: {n} runs have seed {seed} ({names}); "
                "runs with the same seed are not different seeds, "
                f"so each run of {algo} on {env} is drawn on its own, not averaged",
                file=sys.stderr,
            )
    # one colour per algorithm where its runs are averaged or alone,
    # one per run where they are drawn one by one
    keys = sorted(
        {
            (algo, "") if averaged[(env, algo)] or len(ms) == 1 else (algo, m.name)
            for (env, algo), ms in groups.items()
            for m in ms
        }
    )
    colors = {key: plt.get_cmap("tab10")(i % 10) for i, key in enumerate(keys)}
    cols = min(3, len(envs))
    rows = -(-len(envs) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(6 * cols, 4.5 * rows), squeeze=False, layout="constrained"
    )
    drawn, said = 0, []
    styles = {"training": dict(ls="-"), "evaluation": dict(ls="--", marker="o", ms=3)}
    for ax, env in zip(axes.flat, envs):
        for algo in algos:
            members = groups.get((env, algo), [])
            if not members:
                continue
            if not averaged[(env, algo)]:
                for m in members:
                    color = colors[(algo, "")] if len(members) == 1 else colors[(algo, m.name)]
                    alone = f"seed {m.seed}" + (
                        "" if len(members) == 1 else f", {m.name.split('__')[-1]}"
                    )
                    for kind, (steps, values) in (("training", m.train), ("evaluation", m.eval)):
                        if len(steps):
                            ax.plot(
                                steps,
                                values,
                                color=color,
                                label=f"{algo} {kind} ({alone})",
                                **styles[kind],
                            )
                            drawn += 1
                    last = max([*m.train[0][-1:], *m.eval[0][-1:]], default=None)
                    said.append(
                        f"{algo} on {env}: {alone}, drawn alone"
                        + ("" if last is None else f" to step {_steps(last)}")
                    )
                continue
            seeds = [m.seed for m in members]
            for kind in ("training", "evaluation"):
                curves = [(m.train if kind == "training" else m.eval, m.seed) for m in members]
                curves = [(c, seed) for c, seed in curves if len(c[0])]
                if not curves:
                    continue
                grid = (
                    None
                    if kind == "training"
                    else np.unique(np.concatenate([c[0] for c, _ in curves]))
                )
                common = on_common_grid([c for c, _ in curves], grid)
                if common is None or (kind == "training" and common[0][-1] <= common[0][0]):
                    for (steps, values), seed in curves:  # nothing shared to average over
                        ax.plot(
                            steps,
                            values,
                            color=colors[(algo, "")],
                            alpha=0.6,
                            lw=1,
                            label=f"{algo} {kind} (seed {seed}, alone)",
                            **styles[kind],
                        )
                        drawn += 1
                    said.append(
                        f"{algo} on {env}: the {kind} curves of {_seeds(seeds)} share no steps; "
                        "each drawn alone"
                    )
                    continue
                steps, values = common
                over = f"steps {_steps(steps[0])}-{_steps(steps[-1])}"
                who = _seeds([seed for _, seed in curves])
                ax.plot(
                    steps,
                    values.mean(0),
                    color=colors[(algo, "")],
                    lw=2,
                    label=f"{algo} {kind}, mean of {who} over {over}",
                    **styles[kind],
                )
                ax.fill_between(
                    steps, values.min(0), values.max(0), color=colors[(algo, "")], alpha=0.2, lw=0
                )
                drawn += 1
                lo, hi = steps[0], steps[-1]
                label = f"{algo} {kind}, each seed alone outside those steps"
                for (s, v), _seed in curves:  # each run's own curve where the others have none
                    for part_s, part_v in _outside(s, v, lo, hi, join=kind == "training"):
                        ax.plot(
                            part_s,
                            part_v,
                            color=colors[(algo, "")],
                            lw=0.8,
                            alpha=0.7,
                            label=label,
                            **styles[kind],
                        )
                        label = None
                alone = [
                    f"seed {seed} alone {_steps(s[0])}-{_steps(lo)}"
                    for (s, _), seed in curves
                    if s[0] < lo
                ]
                alone += [
                    f"seed {seed} alone {_steps(hi)}-{_steps(s[-1])}"
                    for (s, _), seed in curves
                    if s[-1] > hi
                ]
                said.append(
                    f"{algo} on {env}: {kind} return averaged over {who}, {over}"
                    + "".join(f"; {x}" for x in alone)
                )
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.set_ylabel("episodic return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(envs) :]:
        ax.axis("off")
    if not drawn:
        plt.close(fig)
        raise ValueError("nothing to plot: no run has a finished episode or an evaluation")
    title = [
        f"training return: mean of each run's last {smooth} episodes"
        if smooth > 1
        else "training return: each episode"
    ]
    if any(averaged.values()):
        title.append("thick line: mean over seeds, band: lowest to highest seed")
    width = int(6 * cols * 72 / (9 * 0.6))  # characters of 9 pt text that fit the figure's width
    fig.suptitle(textwrap.fill("; ".join(title), width), fontsize=9)
    return fig, said


def plot(runs: list[Curves], out: Path, smooth: int) -> list[str]:
    """Draw `runs` into the PNG `out`;
    returns what was drawn, one line per (environment, algorithm)."""
    import matplotlib.pyplot as plt

    fig, said = figure(runs, smooth)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return said


def main(a: PlotArgs) -> int:
    try:
        if not a.runs:
            raise ValueError("give one or more run folders (or folders holding them)")
        if a.smooth < 1:
            raise ValueError(f"--smooth must be at least 1, got {a.smooth}")
        runs = [read_run(folder, a.smooth) for folder in find_runs(a.runs)]
        said = plot(runs, a.out, a.smooth)
    except ValueError as e:
        print(f"plot: error: {e}", file=sys.stderr)
        return 2
    print(f"{a.out}: {len(runs)} run{'s' if len(runs) != 1 else ''}")
    for line in said:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(PlotArgs, description=__doc__.strip().splitlines()[0])))
