"""Turn a suite's results into benchmarks/results/<suite>/REPORT.md and learning-curve PNGs, and
the README's result tables.

    python benchmarks/report.py --suite classic
    python benchmarks/report.py --suite classic --algos dqn --envs CartPole-v1 --results-dir my_results
    python benchmarks/report.py --readme        # rewrite the README's result tables from the committed runs

Per cell: the final greedy eval return as the mean over seeds with a bootstrap 95% confidence
interval, the std, from 5 seeds on the interquartile mean with its own interval, and how many
seeds reach the threshold; the mean of the last 10 training episodes (mean +- std over seeds);
steps/s and wall time per run; the published references beside them; and a verdict against the
cell's threshold: PASS, or FAIL with the reason (below the threshold, a run that crashed or whose
final evaluation failed, script missing), partial (fewer than 5 current seeds finished, or seeds
still to run), stale (runs made with other code). Cells without a threshold get no verdict.

A run counts only when it is current: it ran with the cell's settings (its settings hash), on a
clean commit whose files that decide its numbers (its script and the common/ and harness/ files
the script imports, transitively) are the same as today's (HEAD's), or an equivalence check
(benchmarks/equivalence.py) showed that its commit's files give the same metrics as today's for
that cell. Every other run is stale: the report shows its commit and the files changed since (or
"dirty tree"). Smoke tries (`--total-timesteps`) never count. Listed are the cells with runs and
the cells selected with --algos / --envs. Also: per-run details with errors, the speed
comparison (benchmarks/results/speed/, from benchmarks/speed.py), and the machine and package
versions the runs ran on.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import CODE_DIRS, Checker, code_state, recorded_state  # noqa: E402
from suite import (RESULTS_DIR, ROOT, SUITES_FILE, Cell, Suite, load_references, load_suite, metrics_file,  # noqa: E402
                   read_result, script_path)


def mean_std(xs: list[float]) -> tuple[float, float]:
    return (statistics.fmean(xs), statistics.pstdev(xs)) if xs else (math.nan, math.nan)


# ---- statistics over seeds ----------------------------------------------------------------------
# One seed's result moves with the machine (floating-point summation order, library versions), so
# a verdict rests on what the seeds estimate, the mean, with an interval saying how well they pin
# it down; the bootstrap's generator is seeded, so that the same runs give the same report.
MANY_SEEDS = 5  # from this many finished seeds: the IQM is shown, and a verdict no longer says "few seeds"
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def mean(x) -> float | np.ndarray:
    """Mean along the last axis: of one sample [n], or of each bootstrap resample [R, n]."""
    return np.mean(np.asarray(x, dtype=float), axis=-1)


def iqm(x) -> float | np.ndarray:
    """Interquartile mean along the last axis: the mean of the middle 50% of the sorted values.

    Each of the n sorted values holds 1/n of the sample; a value straddling the 25% or 75% point
    counts with the part of its 1/n that lies between them (n = 5: weights 0, .3, .4, .3, 0).
    For n a multiple of 4 this is rliable's IQM, scipy.stats.trim_mean(x, 0.25); for other n
    trim_mean drops floor(n/4) whole values at each end instead (n = 5: 0, 1/3, 1/3, 1/3, 0)."""
    x = np.sort(np.asarray(x, dtype=float), axis=-1)
    n = x.shape[-1]
    i = np.arange(n)
    inside = np.clip(np.minimum(i + 1, 0.75 * n) - np.maximum(i, 0.25 * n), 0.0, None)  # [n], in units of 1/n
    return x @ (inside / (0.5 * n))


def bootstrap_ci(x, statistic=mean, level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic` over the values x (one per seed): draw n of
    them with replacement `resamples` times and keep the central `level` of the statistic's values."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"bootstrap_ci wants a non-empty list of values, got shape {x.shape}")
    idx = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))  # [R, n]
    lo, hi = np.percentile(statistic(x[idx]), [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def fmt_eval(xs: list[float]) -> str:
    """The eval column: mean [95% CI] over seeds (a CI from 2 seeds on), the std, and the
    IQM [95% CI] from MANY_SEEDS seeds on."""
    if not xs:
        return "-"
    m = statistics.fmean(xs)
    if len(xs) == 1:
        return f"{m:.1f}"
    lo, hi = bootstrap_ci(xs)
    text = f"{m:.1f} [{lo:.1f}, {hi:.1f}]<br>std {statistics.pstdev(xs):.1f}"
    if len(xs) >= MANY_SEEDS:
        lo, hi = bootstrap_ci(xs, iqm)
        text += f"<br>IQM {float(iqm(xs)):.1f} [{lo:.1f}, {hi:.1f}]"
    return text


def ci_caution(xs: list[float], threshold: float) -> str:
    """What follows a mean-rule verdict: whether the 95% CI of the mean clears the threshold too
    (its lower bound, beside a mean at or above it; its upper bound, beside a mean below it), and
    "few seeds" below MANY_SEEDS finished seeds."""
    n = len(xs)
    if n < 2:
        return f"; few seeds ({n}): no CI"
    lo, hi = bootstrap_ci(xs)
    if statistics.fmean(xs) >= threshold:
        text = f"; CI lower bound {lo:.1f} " + ("clears it too" if lo >= threshold else "below it")
    else:
        text = f"; CI upper bound {hi:.1f} " + ("reaches it" if hi >= threshold else "below it too")
    return text + (f"; few seeds ({n})" if n < MANY_SEEDS else "")


def fmt_ms(xs: list[float], digits: int = 1) -> str:
    if not xs:
        return "-"
    m, s = mean_std(xs)
    return f"{m:.{digits}f} ± {s:.{digits}f}" if len(xs) > 1 else f"{m:.{digits}f}"


def train_last(run_dir: Path, n: int) -> float | None:
    """The mean of a run's last `n` training-episode returns, from its metrics.csv (MinAtar's figure
    plots that moving average with n = 100); None without episodes."""
    m = metrics_file(run_dir)
    if m is None:
        return None
    with open(m) as f:
        returns = [float(row["episodic_return"]) for row in csv.DictReader(f) if row.get("episodic_return")]
    return statistics.fmean(returns[-n:]) if returns else None


def fmt_steps(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k" if n >= 1000 else str(n)


def fmt_seconds(s: float) -> str:
    if s != s:
        return "-"
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 120 else f"{s:.0f} s"


def script_command(cell: Cell, seed: int) -> str:
    """The same run as the runner's, as one command line of the script (tyro flags)."""
    parts = [f"python algos/{cell.algo}.py --env {cell.env} --seed {seed} --total-timesteps {cell.steps}"]
    if cell.eval_every:
        parts.append(f"--eval-every {cell.eval_every}")
    for k, v in cell.settings.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            parts.append(flag if v else "--no-" + k.replace("_", "-"))
        elif isinstance(v, (list, tuple)):
            parts.append(f"{flag} {' '.join(map(str, v))}")
        else:
            parts.append(f"{flag} {v}")
    return " ".join(parts)


# ---- which runs count -----------------------------------------------------------------------------
VERDICT_SEEDS = 5  # a cell's verdict (PASS, or FAIL by its mean) needs this many finished current seeds


def cell_runs(cell: Cell, runs_dir: Path) -> dict[int, dict]:
    """seed -> result.json (with the run folder added) for the cell's current settings hash; a run
    whose final evaluation failed (an older runner called it ok) is failed."""
    out = {}
    for d in sorted(runs_dir.glob(f"{cell.slug}__s*__{cell.digest}")):
        r = read_result(d)
        if r is None:
            r = {"status": "incomplete", "error": "no result.json: the run is still going, or was killed"}
        elif r["status"] == "ok" and (r.get("summary") or {}).get("eval_return_mean") is None:
            r = {**r, "status": "failed", "error": "its final evaluation failed: the summary has no eval_return_mean"}
        r["dir"] = d
        out[int(d.name.split("__")[2][1:])] = r
    return out


def other_runs(cell: Cell, runs_dir: Path) -> tuple[int, int]:
    """(runs with other settings, smoke tries) in the cell's folders: never counted."""
    older = smoke = 0
    for d in runs_dir.glob(f"{cell.slug}__s*__*"):
        if d.name.endswith(cell.digest):
            continue
        spec = read_result(d) or {}
        spec = spec.get("spec") or (json.loads((d / "spec.json").read_text()) if (d / "spec.json").exists() else {})
        if spec.get("comparable", True) is False:
            smoke += 1
        else:
            older += 1
    return older, smoke


def mark_stale(cell: Cell, runs: dict[int, dict], checker: Checker) -> None:
    """Set each finished run's `stale` (None: current; else why not) and `current_by` (an
    equivalence check, if that is what makes it current); every attempt of a resumed run counts."""
    key = (cell.algo, cell.env, cell.digest)
    for r in runs.values():
        r["stale"], r["current_by"] = None, ""
        if r["status"] not in ("ok", "failed"):
            continue
        spec = r.get("spec") or {}
        if spec.get("comparable", True) is False or r.get("comparable", True) is False:
            r["stale"] = "a smoke try on a shrunk budget"
            continue
        for state in [*map(recorded_state, spec.get("earlier_code", [])), recorded_state(r)]:
            fresh = checker.freshness(state, cell.algo, key)
            if not fresh.current:
                r["stale"] = fresh.why
                break
            r["current_by"] = r["current_by"] or fresh.why


def verdict(cell: Cell, runs: dict[int, dict]) -> tuple[str, str]:
    """('PASS' | 'FAIL' | 'partial' | 'stale' | 'n/a', reason), from the current runs (those whose
    `stale` is not set).

    FAIL on what the current finished runs show: a crash (or a failed final evaluation), a seed
    below an "all" threshold, or, with every seed run and at least VERDICT_SEEDS of them, a mean
    below the threshold. Otherwise a cell with runs on other code is 'stale'; one with seeds
    still to run, or fewer than VERDICT_SEEDS finished, is 'partial'. Rule "mean" (the default):
    PASS when the mean meets the threshold; the reason says whether the 95% CI of the mean clears
    it too. Rule "all" (only where a published result judges every seed, suites.toml's
    pass_rule_source): every seed must meet it."""
    if not script_path(cell.algo).exists():
        return "FAIL", f"script missing: algos/{cell.algo}.py"
    stale = {s: r for s, r in runs.items() if r.get("stale")}
    runs = {s: r for s, r in runs.items() if not r.get("stale")}
    ok = {s: r for s, r in runs.items() if r["status"] == "ok"}
    failures = [f"seed {s} {'crashed' if 'final evaluation' not in str(r.get('error')) else 'failed'}: {str(r.get('error'))[:120]}"
                for s, r in sorted(runs.items()) if r["status"] == "failed"]
    missing = [s for s in cell.seeds if s not in runs or runs[s]["status"] not in ("ok", "failed")]
    evals = {s: r["summary"]["eval_return_mean"] for s, r in ok.items()}
    t = cell.threshold
    enough = len(evals) >= VERDICT_SEEDS
    so_far = ""
    if t is not None and evals:
        if cell.pass_rule == "all":
            below = [f"seed {s}: {v:.1f} < {t:g}" for s, v in sorted(evals.items()) if v < t]
            if below:  # more seeds cannot change it
                failures.append("below threshold: " + "; ".join(below))
        else:
            m = statistics.fmean(evals.values())
            if m < t and not missing and enough:
                failures.append(f"below threshold: mean {m:.1f} < {t:g}" + ci_caution(list(evals.values()), t))
            so_far = f"; mean so far {m:.1f} ({'≥' if m >= t else '<'} {t:g})"
    stale_note = ""
    if stale:
        by_why: dict[str, list[int]] = {}
        for s, r in sorted(stale.items()):
            by_why.setdefault(r["stale"], []).append(s)
        stale_note = f"{len(stale)} run{'s' if len(stale) > 1 else ''} on other code: " + "; ".join(
            f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {why}" for why, seeds in by_why.items())
    done = len([s for s in cell.seeds if s in ok])
    partial = f"partial: {done} of {len(cell.seeds)} seeds"
    not_run = [str(s) for s in missing if s not in runs and s not in stale]
    unfinished = [f"seed {s} {runs[s]['status']}" for s in missing if s in runs]  # running, interrupted or killed
    if not_run:
        partial += f" (not run: seed{'s' if len(not_run) > 1 else ''} {', '.join(not_run)})"
    if unfinished:
        partial += f" (unfinished: {', '.join(unfinished)})"
    if failures:
        return "FAIL", "; ".join(failures + ([partial] if missing else []) + ([stale_note] if stale else []))
    if stale:
        return "stale", stale_note + (f"; {partial}" if not_run or unfinished else "")
    if missing:
        return "partial", partial + so_far
    if t is None:
        return "n/a", "no threshold set"
    if not enough:
        return "partial", (f"partial: {len(evals)} seed{'s' if len(evals) != 1 else ''}; a verdict needs {VERDICT_SEEDS} "
                           f"finished seeds" + so_far)
    values = list(evals.values())
    if cell.pass_rule == "all":
        return "PASS", f"{len(values)}/{len(values)} seeds ≥ {t:g}"
    return "PASS", f"mean {statistics.fmean(values):.1f} ≥ {t:g}" + ci_caution(values, t)


@dataclass
class Judged:
    """One cell of a report: its runs, which of them its figures come from, its verdict."""
    cell: Cell
    runs: dict[int, dict]
    verdict: str
    reason: str
    shown: dict[int, dict]  # the ok runs the figures come from: the current ones, or the stale ones when none is current
    shown_stale: bool
    older: int = 0  # runs with other settings
    smoke: int = 0  # smoke tries

    @property
    def current_ok(self) -> dict[int, dict]:
        return {s: r for s, r in self.runs.items() if r["status"] == "ok" and not r.get("stale")}


def judge_suite(suite: Suite, runs_dir: Path, checker: Checker, algos=None, envs=None) -> tuple[list[Judged], list[Cell]]:
    """The cells to list (those with runs, and those selected with `algos` / `envs`) judged; and the
    cells left out (no run, not selected)."""
    listed, left_out = [], []
    selecting = bool(algos or envs)
    for cell in suite.cells:
        selected = (not algos or cell.algo in algos) and (not envs or cell.env in envs)
        if selecting and not selected:
            continue
        runs = cell_runs(cell, runs_dir) if runs_dir.exists() else {}
        older, smoke = other_runs(cell, runs_dir) if runs_dir.exists() else (0, 0)
        if not selecting and not runs and not older:
            left_out.append(cell)
            continue
        mark_stale(cell, runs, checker)
        v, reason = verdict(cell, runs)
        current = {s: r for s, r in runs.items() if r["status"] == "ok" and not r.get("stale")}
        stale_ok = {s: r for s, r in runs.items() if r["status"] == "ok" and r.get("stale")}
        listed.append(Judged(cell, runs, v, reason, current or stale_ok, not current and bool(stale_ok), older, smoke))
    return listed, left_out


def eval_column(xs: list[float], threshold: float | None) -> str:
    """fmt_eval, then how many seeds reach the threshold."""
    text = fmt_eval(xs)
    if xs and threshold is not None:
        text += f"<br>{sum(x >= threshold for x in xs)}/{len(xs)} seeds ≥ {threshold:g}"
    return text


def read_curves(path: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(eval points, training episode returns) from a metrics.csv, as (global_step, value) lists."""
    evals, train = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(row["global_step"])
            if row.get("eval_return"):
                evals.append((step, float(row["eval_return"])))
            if row.get("episodic_return"):
                train.append((step, float(row["episodic_return"])))
    return evals, train


def plot_cell(cell: Cell, runs: dict[int, dict], refs: list[dict], out: Path, stale: bool = False) -> bool:
    try:
        import matplotlib
    except ImportError:  # plotting is a benchmarks-only dependency (benchmarks/requirements.txt)
        print("report: matplotlib is not installed, skipping plots (pip install -r benchmarks/requirements.txt)")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = []
    for seed, r in sorted(runs.items()):
        if r["status"] == "incomplete":  # still going: a partial curve would drag the mean down
            continue
        m = metrics_file(r["dir"])
        if m is not None:
            curves.append(read_curves(m))
    if not curves:
        return False
    grid = np.linspace(0, cell.steps, 101)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)

    def band(series: list[np.ndarray], color: str, label: str) -> None:
        arr = np.array(series)  # [seeds, grid]
        with warnings.catch_warnings():  # grid points before a seed's first episode are all-NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(arr, 0)
            std = np.nanstd(arr, 0)
        ax.plot(grid, mean, color=color, label=f"{label} (mean of {len(series)} seed{'s' if len(series) > 1 else ''})")
        if len(series) > 1:
            ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)

    train_series, eval_series = [], []
    for evals, train in curves:
        if len(train) >= 2:
            steps, rets = np.array(train).T
            # mean of the episodes that ended in each grid interval, carried forward over empty ones
            idx = np.clip(np.searchsorted(grid, steps, side="left"), 0, len(grid) - 1)
            sums, counts = np.bincount(idx, rets, len(grid)), np.bincount(idx, minlength=len(grid))
            y = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
            last = np.nan
            for i in range(idx.max() + 1):  # not past the last episode: a stopped run ends there
                last = y[i] if not np.isnan(y[i]) else last
                y[i] = last
            train_series.append(y)
        if evals:
            es, ev = np.array(evals).T
            y = np.interp(grid, es, ev, left=np.nan)
            y[grid < es[0]] = np.nan
            eval_series.append(y)
    if train_series:
        band(train_series, "tab:blue", "training episodes")
    if eval_series:
        band(eval_series, "tab:orange", "greedy eval")
    if cell.threshold is not None:
        ax.axhline(cell.threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {cell.threshold:g}")
    for ref, color in zip(refs, ["tab:green", "tab:red", "tab:purple", "tab:brown"]):
        ax.axhline(ref["mean"], color=color, linestyle=":", linewidth=1.5,
                   label=f"{ref['source'].split(' (')[0].split(',')[0]}: {ref['mean']:g} ({ref['convention']}, {fmt_steps(ref['steps'])})")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episodic return")
    ax.set_title(f"{cell.algo} on {cell.env}" + (" (stale runs: made with older code)" if stale else ""))
    ax.set_xlim(0, cell.steps)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return True


def speed_section(speed_dir: Path) -> list[str]:
    files = sorted(speed_dir.glob("*.json"))
    lines = ["## Speed against the peers", ""]
    if not files:
        return lines + ["Not run yet: `python benchmarks/speed.py` runs the per-algorithm comparisons and writes "
                        f"`{speed_dir.name}/`.", ""]
    lines += ["Each comparison runs ours and the peer side by side in one invocation with matched settings "
              "(the settings are in each script's docstring); the machine is shared, so only the ratio within "
              "one invocation means anything.", "",
              "| comparison | when | ratio ours/peer | result (the script's own summary) | status |", "|---|---|---|---|---|"]
    for f in files:
        d = json.loads(f.read_text())
        if "command" not in d:  # a comparison script's own raw output, not a speed.py record
            continue
        ratios = ", ".join(f"{r:.2f}x" for r in d.get("ratios", [])) or "-"
        summary = "<br>".join(x.replace("|", "\\|") for x in d.get("summary_lines", [])) or "-"
        status = "ok" if d.get("returncode") == 0 else f"FAILED (exit {d.get('returncode')}): {d.get('error', '')}"
        lines.append(f"| `{d['command']}` | {d.get('finished', '-')} | {ratios} | {summary} | {status} |")
    return lines + [""]


def machine_section(all_runs: list[dict]) -> list[str]:
    machines = [r["machine"] for r in all_runs if r.get("machine")]
    lines = ["## Machine and versions", ""]
    if not machines:
        return lines + ["No runs yet.", ""]
    seen = {}
    for m in machines:
        key = (m.get("cpu"), m.get("cpu_count"), m.get("platform"), json.dumps(m.get("versions"), sort_keys=True))
        seen.setdefault(key, []).append(m)
    for (cpu, n, plat, versions), ms in seen.items():
        loads = [m["load_average"][0] for m in ms if m.get("load_average")]
        lines.append(f"- {len(ms)} run(s) on: {cpu}, {n} logical CPUs, {plat}")
        lines.append("  - versions: " + ", ".join(f"{k} {v}" for k, v in json.loads(versions).items() if v))
        if loads:
            lines.append(f"  - 1-min load average at run start: {min(loads):.1f} to {max(loads):.1f} "
                         f"(the machine was shared: steps/s and wall times are pessimistic)")
    commits = sorted({short_commit(recorded_state(r)) for r in all_runs if r["status"] in ("ok", "failed")})
    lines.append(f"- code: git commit(s) {', '.join(commits)} (+dirty: uncommitted changes in the code the run used; "
                 "each run's state is in the Runs table)")
    return lines + [""]


def ref_label(r: dict) -> str:
    std = f" ± {r['std']:g}" if "std" in r else ""
    return f"{r['mean']:g}{std} ({r['convention']}, {fmt_steps(r['steps'])})"


def short_commit(state: dict | None) -> str:
    commit = (state or {}).get("commit")
    return (commit[:7] + ("+dirty" if state.get("dirty") else "")) if commit else "?"


def report_text(suite: Suite, results_dir: Path, judged: list[Judged], left_out: list[Cell], refs: dict, plots: bool,
                selection: str = "") -> tuple[str, dict, int]:
    """REPORT.md's text, the verdict counts and the number of plots drawn."""
    out_dir = results_dir / suite.name
    runs_dir = out_dir / "runs"
    lines = []  # the title and the date go on top at the end: the date is the last run's, so that the same runs give the same report
    if not suite.runnable:
        lines += [f"**Declared, not runnable here:** {suite.not_runnable_reason}", ""]
    lines += ["- **eval**: mean greedy return over the script's evaluation episodes (10) of the final policy; "
              "the mean over seeds with its 95% confidence interval (CI) in brackets (percentile bootstrap over the seeds, "
              f"{BOOTSTRAP_RESAMPLES:,} resamples, fixed generator seed; from 2 seeds on), then the std over seeds; from "
              f"{MANY_SEEDS} seeds on also the interquartile mean (IQM: the mean of the middle 50% of the seeds' values) "
              "with its own CI; then how many seeds reach the threshold. **train**: mean of the last 10 training episodes "
              "(CleanRL's convention); mean ± std over seeds; beside a reference in the convention *train100* (MinAtar's "
              "figure: the moving average of 100 training episodes) also the mean of the last 100 (*last 100*).",
              "- **steps/s**: env steps per second of the training loop (final evaluation excluded), mean over seeds; "
              "**wall**: mean wall time per run. One torch thread per run.",
              "- **code**: a run counts only when it is current: it ran with the cell's settings on a clean commit whose "
              "files that decide its numbers (its script and the `common/` and `harness/` files it imports, "
              "transitively) are the same as today's, or an equivalence check (`benchmarks/equivalence.py`, "
              "`results/equivalence.json`) showed that its commit's files give the same metrics for the cell as today's. "
              "Any other run is *stale*: its commit and the files changed since (or the dirty tree) are shown, its "
              "figures only where the cell has no current run (marked *stale*). Smoke tries (`--total-timesteps`) never count.",
              "- **verdict**: against the cell's threshold, from the current runs. Rule *mean*: PASS when the mean over "
              f"at least {VERDICT_SEEDS} finished seeds meets it; the reason then says whether the CI's lower bound clears "
              "the threshold too (for a mean below it: whether the CI's upper bound reaches it). Rule *all*, only for a "
              "cell whose threshold comes with a published result that asks it of every seed: every seed must meet it. "
              "FAIL gives the reason: below threshold, crashed (or the final evaluation failed), script missing. A cell "
              f"with runs on other code is *stale*; one with seeds still to run, or fewer than {VERDICT_SEEDS} finished, "
              "is *partial*, unless its current runs already fail it.",
              f"- Reproduce a cell into a new folder: `python benchmarks/run.py --suite {suite.name} --algos ALGO --envs ENV "
              f"--results-dir my_results` then `python benchmarks/report.py --suite {suite.name} --results-dir my_results`.", ""]

    header = ("| algo | env | steps | seeds ok | eval: mean [95% CI] | train (last 10) | steps/s | wall/run | threshold | references | verdict |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")
    ref_ids: list[str] = []
    table, details, failures, all_runs, drawn = [header], [], [], [], []
    counts = {"PASS": 0, "FAIL": 0, "partial": 0, "stale": 0, "n/a": 0}
    measured_seconds, measured_by_cell = 0.0, {}
    est_missing: list[tuple[Cell, int]] = []
    for j in judged:
        cell, runs = j.cell, j.runs
        all_runs += list(runs.values())
        summaries = [r["summary"] for r in j.shown.values()]
        counts[j.verdict] += 1
        cell_refs = []
        for rid in cell.references:
            if rid not in refs:
                cell_refs.append(f"unknown reference {rid}")
                continue
            if rid not in ref_ids:
                ref_ids.append(rid)
            cell_refs.append(f"{ref_label(refs[rid])} [{ref_ids.index(rid) + 1}]")
        walls = [r["summary"]["wall_seconds"] for r in runs.values() if r["status"] == "ok"]
        measured_seconds += sum(walls)
        if walls:
            measured_by_cell[id(cell)] = statistics.fmean(walls)
        missing_seeds = len([s for s in cell.seeds if s not in j.current_ok])
        if missing_seeds:
            est_missing.append((cell, missing_seeds))
        thr = "-" if cell.threshold is None else f"{cell.threshold:g} ({cell.pass_rule})"
        v, reason = j.verdict, j.reason
        verdict_txt = f"**{v}**" + (f": {reason.removeprefix('partial: ')}" if v == "partial" else f": {reason}" if reason else "")
        if cell.note and v == "FAIL":
            verdict_txt += f". Why: {cell.note}"
        elif cell.note and cell.threshold is None:  # no verdict to explain: what the reader should know about the cell
            verdict_txt += f". Note: {cell.note}"
        evals = [s["eval_return_mean"] for s in summaries]
        last100 = ""
        if any(refs.get(rid, {}).get("convention") == "train100" for rid in cell.references):  # the reference's own convention beside ours
            shown = [r for seed, r in sorted(j.shown.items())]
            values = [x for x in (train_last(r["dir"], 100) for r in shown) if x is not None]
            last100 = f"<br>last 100: {fmt_ms(values)}" if values else ""
        stale_ok = len([r for r in runs.values() if r["status"] == "ok" and r.get("stale")])
        table.append(
            f"| {cell.algo} | {cell.env} | {fmt_steps(cell.steps)} | {len(j.current_ok)}/{len(cell.seeds)}"
            + (f" (+{stale_ok} stale)" if stale_ok else "") + " | "
            + ("*stale*: " if j.shown_stale else "") + f"{eval_column(evals, cell.threshold)} | "
            f"{fmt_ms([s['train_return_last10'] for s in summaries if s.get('train_return_last10') is not None])}{last100} | "
            f"{fmt_ms([s['sps'] for s in summaries], 0).split(' ±')[0]} | "
            f"{fmt_seconds(statistics.fmean(s['wall_seconds'] for s in summaries)) if summaries else '-'} | "
            f"{thr} | {'<br>'.join(cell_refs) or '-'} | {verdict_txt} |")
        for seed, r in sorted(runs.items()):
            s = r.get("summary") or {}
            err = str(r.get("error") or "").replace("|", "\\|")[:200]
            rel = r["dir"].relative_to(out_dir)
            ev = s.get("eval_return_mean")
            tr = s.get("train_return_last10")
            code = short_commit(recorded_state(r)) if r["status"] in ("ok", "failed") else "-"
            if r.get("stale"):
                code = f"**stale**: {r['stale']}"
            elif r.get("current_by"):
                code += f": {r['current_by']}"
            details.append(f"| {cell.algo} | {cell.env} | {seed} | {r['status']} | {'-' if ev is None else f'{ev:.1f}'} | "
                           f"{'-' if tr is None else f'{tr:.1f}'} | {s.get('sps', '-')} | {s.get('wall_seconds', '-')} | "
                           f"{code.replace('|', chr(92) + '|')} | {err or '-'} | [{rel.name}]({rel.as_posix()}) |")
            if r["status"] != "ok":
                failures.append((cell, seed, r))
        if j.older or j.smoke:
            ignored = [f"{j.older} run(s) with older settings"] * bool(j.older) + [f"{j.smoke} smoke tr{'ies' if j.smoke > 1 else 'y'}"] * bool(j.smoke)
            details.append(f"| {cell.algo} | {cell.env} | - | {' and '.join(ignored)} ignored | | | | | | | |")
        if plots and j.shown:
            png = out_dir / "plots" / f"{cell.slug}.png"
            if plot_cell(cell, j.shown, [refs[i] for i in cell.references if i in refs], png, stale=j.shown_stale):
                drawn.append((cell, png))

    listed = (f"{len(judged)} of the suite's {len(suite.cells)} cells" if left_out or len(judged) != len(suite.cells)
              else f"{len(judged)} cell{'s' if len(judged) != 1 else ''}")
    lines += [f"**{listed}: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial, "
              f"{counts['stale']} stale (runs on other code), {counts['n/a']} without threshold.**", ""]
    if left_out:
        lines += [f"Not listed: {len(left_out)} cell{'s' if len(left_out) > 1 else ''} without runs ("
                  + ", ".join(f"{c.algo} {c.env}" for c in left_out) + "); `--algos` / `--envs` list them.", ""]
    lines += [*table, ""]

    # time: measured, and an estimate for what is left from the same algorithm's measured speed
    left, unknown = 0.0, []
    for cell, n in est_missing:
        if id(cell) in measured_by_cell:
            left += n * measured_by_cell[id(cell)]
        else:
            unknown.append(f"{cell.algo} {cell.env}")
    lines += ["## Time", "",
              f"- Measured: {fmt_seconds(measured_seconds)} of run time over the finished runs (sum of wall times, "
              "one run at a time per worker)."]
    if est_missing:
        lines.append(f"- Without a current finished run: {sum(n for _, n in est_missing)} seed(s) of the listed cells"
                     + (f"; from the wall time of the cell's finished runs, about {fmt_seconds(left)} to run them"
                        if left else "")
                     + (f"; no seed of the cell finished yet for: {', '.join(unknown)}" if unknown else "") + ".")
    lines.append("")

    lines += ["## References", ""]
    for i, rid in enumerate(ref_ids, 1):
        r = refs[rid]
        std = f" ± {r['std']:g}" if "std" in r else ""
        lines.append(f"{i}. `{rid}`: {r['algo']} {r['env']}, {r['steps']:,} steps: {r['mean']:g}{std} "
                     f"({r['convention']}, {r['seeds']} seed{'s' if r['seeds'] > 1 else ''}, {'tuned' if r['tuned'] else 'untuned'}). "
                     f"{r['source']}, <{r['url']}>. Env: {r['env_note']}.")
    lines += ["", "All references with their conventions: `benchmarks/references.toml`.", ""]

    if drawn:
        lines += ["## Learning curves", "",
                  "Mean over seeds with a ±1 std band, of the runs the table's figures come from; training returns are "
                  "averaged per 1% of the run; greedy evaluations every 5% of the run; the threshold is dashed, references dotted.", ""]
        for cell, png in drawn:
            lines.append(f"![{cell.algo} {cell.env}]({png.relative_to(out_dir).as_posix()})")
        lines.append("")

    lines += ["## Failures", ""]
    if failures:
        for cell, seed, r in failures:
            rel = r["dir"].relative_to(out_dir).as_posix()
            lines.append(f"- `{cell.algo}` `{cell.env}` seed {seed}: **{r['status']}**"
                         + (" (stale)" if r.get("stale") else "") + f": {r.get('error')} (log: [{rel}/log.txt]({rel}/log.txt))")
            tb = r.get("traceback") or "\n".join(r.get("log_tail") or [])
            if tb:
                lines += ["", "  ```", *("  " + x for x in tb.strip().splitlines()[-8:]), "  ```"]
    else:
        lines.append("No run crashed.")
    lines.append("")

    lines += ["## Runs", "", "| algo | env | seed | status | eval | train (last 10) | steps/s | wall s | code | error | folder |",
              "|---|---|---|---|---|---|---|---|---|---|---|", *details, "",
              "## Settings of each cell", "", *(settings_line(j.cell) for j in judged), ""]
    lines += speed_section(results_dir / "speed")
    lines += machine_section(all_runs)

    finished = sorted(str(r["finished"]).replace("T", " ")[:16] for r in all_runs if r.get("finished"))
    when = f"runs finished {finished[0][:10]} to {finished[-1][:10]}" if finished else "no finished runs yet"
    lines[0:0] = [f"# Benchmark report: `{suite.name}`", "",
                  (f"{suite.description}. " if suite.description else "") + f"Written by "
                  f"`python benchmarks/report.py --suite {suite.name}{selection}` from `{runs_dir.name}/` ({when}).", ""]
    return "\n".join(lines), counts, len(drawn)


def settings_line(cell: Cell) -> str:
    return (f"- `{cell.algo}` `{cell.env}` (hash `{cell.digest}`), settings from {cell.settings_source or '-'}; "
            f"threshold from {cell.threshold_source or '-'}"
            + (f"; every seed must reach it, as in {cell.pass_rule_source}" if cell.pass_rule == "all" else "")
            + f". One seed by hand:\n  `{script_command(cell, cell.seeds[0])}`")


# ---- the README's result tables -------------------------------------------------------------------
README = ROOT / "README.md"
MARKER = re.compile(r"(<!-- results:([\w-]+):start -->\n)(.*?)(<!-- results:\2:end -->)", re.DOTALL)


def fmt_num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.1f}"


def short_verdict(j: Judged) -> str:
    if j.verdict == "PASS":
        return "**PASS**"
    if j.verdict == "FAIL":
        return "**FAIL**: " + j.reason.split(";")[0].split(": mean")[0].split(": seed")[0]
    if j.verdict == "stale":
        stale = {s: r for s, r in j.runs.items() if r.get("stale")}
        commits = sorted({short_commit(recorded_state(r)) for r in stale.values()})
        seeds = "every seed" if set(stale) >= set(j.runs) else f"seed{'s' if len(stale) > 1 else ''} {', '.join(map(str, sorted(stale)))}"
        return f"*stale*: {seeds} ran on other code ({', '.join(commits)})"
    if j.verdict == "partial":
        return "partial: " + j.reason.removeprefix("partial: ").split(";")[0].split(" (")[0]
    return "no threshold"


def readme_table(suite_name: str, results_dir: Path = RESULTS_DIR, suites_file: Path | str = SUITES_FILE,
                 checker: Checker | None = None) -> str:
    """The README's block for a suite: its cells with runs, each with its final greedy evaluation
    (mean ± std and each seed's), the training return, the first reference and the verdict. A cell
    whose runs are all stale shows no numbers (they belong to other code), only its verdict."""
    suite = load_suite(suite_name, suites_file)
    refs = load_references()
    judged, _ = judge_suite(suite, results_dir / suite.name / "runs", checker or Checker())
    counts = {k: sum(j.verdict == k for j in judged) for k in ("PASS", "FAIL", "partial", "stale", "n/a")}
    report = (results_dir / suite.name / "REPORT.md").resolve()
    report = report.relative_to(ROOT).as_posix() if report.is_relative_to(ROOT) else str(report)
    lines = [f"Written by `python benchmarks/report.py --readme` from the `{suite.name}` suite's runs "
             f"([its report]({report}), with every run, the CIs and the reasons): {len(judged)} cell{'' if len(judged) == 1 else 's'} with runs, "
             f"{counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial, {counts['stale']} stale (made with "
             f"older code), {counts['n/a']} without threshold.", "",
             "| algo | env | steps | greedy eval: mean ± std (each seed) | train (last 10) | threshold | reference | min/run | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for j in judged:
        cell = j.cell
        # a stale cell's numbers came from other code: its report keeps them, the README shows none
        seeds = [] if j.shown_stale else sorted(j.shown)
        evals = [j.shown[s]["summary"]["eval_return_mean"] for s in seeds]
        trains = [j.shown[s]["summary"].get("train_return_last10") for s in seeds]
        trains = [x for x in trains if x is not None]
        if evals:
            m, sd = mean_std(evals)
            ev = (f"{fmt_num(m)} ± {fmt_num(sd)} ({', '.join(fmt_num(x) for x in evals)})" if len(evals) > 1 else fmt_num(m))
            if cell.threshold is not None:
                ev += f"; {sum(x >= cell.threshold for x in evals)}/{len(evals)} ≥ {cell.threshold:g}"
            if not j.shown_stale and len(j.current_ok) < len([r for r in j.runs.values() if r["status"] == "ok"]):
                ev += "; current seeds only"
        else:
            ev = "-"
        tr = f"{fmt_num(mean_std(trains)[0])} ± {fmt_num(mean_std(trains)[1])}" if len(trains) > 1 else fmt_num(trains[0]) if trains else "-"
        ref = "-"
        if cell.references and cell.references[0] in refs:
            r = refs[cell.references[0]]
            ref = f"{r['source'].split(' (')[0].split(',')[0]} {ref_label(r)}"
        thr = "-" if cell.threshold is None else f"{cell.threshold:g}"
        minutes = [j.shown[s]["summary"]["wall_seconds"] / 60 for s in seeds]
        wall = f"{statistics.fmean(minutes):.{0 if statistics.fmean(minutes) >= 10 else 1}f}" if minutes else "-"
        lines.append(f"| {cell.algo} | {cell.env} | {fmt_steps(cell.steps)} | {ev} | {tr} | {thr} | {ref} | {wall} | {short_verdict(j)} |")
    return "\n".join(lines) + "\n"


def readme_text(text: str, results_dir: Path = RESULTS_DIR, suites_file: Path | str = SUITES_FILE) -> str:
    """`text` (the README) with every `<!-- results:SUITE:start -->` ... `end` block rewritten."""
    checker = Checker()
    return MARKER.sub(lambda m: m.group(1) + readme_table(m.group(2), results_dir, suites_file, checker) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", help="the suite to report (required unless --readme)")
    p.add_argument("--algos", nargs="+", help="list only these algorithms' cells (with runs or not)")
    p.add_argument("--envs", nargs="+", help="list only these envs' cells (with runs or not)")
    p.add_argument("--readme", action="store_true",
                   help="rewrite the README's result tables (between <!-- results:SUITE:start --> and end) from the committed runs")
    p.add_argument("--suites-file", default=str(SUITES_FILE), help=argparse.SUPPRESS)
    p.add_argument("--results-dir", default=str(RESULTS_DIR))
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args(argv)
    if a.readme:
        text = README.read_text()
        new = readme_text(text, Path(a.results_dir), a.suites_file)
        blocks = [m.group(2) for m in MARKER.finditer(text)]
        README.write_text(new)
        print(f"{'rewrote' if new != text else 'unchanged:'} {README}'s result tables for {', '.join(blocks) or 'no suite (no markers)'}")
        if not a.suite:
            return 0
    if not a.suite:
        p.error("--suite is required (or --readme)")

    suite = load_suite(a.suite, a.suites_file)
    results_dir = Path(a.results_dir)
    out_dir = results_dir / suite.name
    out_dir.mkdir(parents=True, exist_ok=True)
    checker = Checker()
    if checker.head is None:
        print(f"report: {checker.error}: every run shows as stale", file=sys.stderr)
    else:
        dirty = code_state()
        if dirty.get("dirty"):
            print(f"report: uncommitted changes under {', '.join(CODE_DIRS)} ({len(dirty['dirty_files'])} files): runs are "
                  "judged against the last commit's files, not these", file=sys.stderr)
    judged, left_out = judge_suite(suite, out_dir / "runs", checker, a.algos, a.envs)
    selection = "".join(f" --{k} {' '.join(v)}" for k, v in (("algos", a.algos), ("envs", a.envs)) if v)
    text, counts, plots = report_text(suite, results_dir, judged, left_out, load_references(), not a.no_plots, selection)
    if not a.no_plots and not selection:  # a plot of a cell no longer listed would stay beside the report
        drawn = {f"{j.cell.slug}.png" for j in judged if j.shown}
        for png in (out_dir / "plots").glob("*.png"):
            if png.name not in drawn:
                png.unlink()
    report = out_dir / "REPORT.md"
    report.write_text(text)
    print(f"wrote {report} ({counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial, {counts['stale']} stale, "
          f"{counts['n/a']} n/a; {plots} plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
