"""Turn a suite's results into benchmarks/results/<suite>/REPORT.md and learning-curve PNGs.

    python benchmarks/report.py --suite classic

Per cell: the final greedy eval return as the mean over seeds with a bootstrap 95% confidence
interval, the std, and from 5 seeds on the interquartile mean with its own interval; the mean of
the last 10 training episodes (mean +- std over seeds); steps/s and wall time per run; the
published references beside them; and a verdict against the cell's threshold: PASS, or FAIL with
the reason (below the threshold, a run that crashed, seeds not run, script missing). Cells without
a threshold are reported without a verdict. Only results with the cell's current settings hash
count. Also: per-run details with errors, the speed comparison (benchmarks/results/speed/, from
benchmarks/speed.py), and the machine and package versions the runs ran on.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import RESULTS_DIR, SUITES_FILE, Cell, load_references, load_suite, metrics_file, read_result, script_path  # noqa: E402


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


def cell_runs(cell: Cell, runs_dir: Path) -> dict[int, dict]:
    """seed -> result.json (with the run folder added) for the cell's current settings hash."""
    out = {}
    for d in sorted(runs_dir.glob(f"{cell.slug}__s*__{cell.digest}")):
        r = read_result(d)
        if r is None:
            r = {"status": "incomplete", "error": "no result.json: the run is still going, or was killed"}
        r["dir"] = d
        out[int(d.name.split("__")[2][1:])] = r
    return out


def stale_count(cell: Cell, runs_dir: Path) -> int:
    return sum(1 for d in runs_dir.glob(f"{cell.slug}__s*__*") if not d.name.endswith(cell.digest))


def verdict(cell: Cell, runs: dict[int, dict]) -> tuple[str, str]:
    """('PASS' | 'FAIL' | 'partial' | 'n/a', reason).

    Rule "mean" (the default): PASS when the mean over the finished seeds meets the threshold; the
    reason says whether the 95% CI of the mean clears it too, and "few seeds" below MANY_SEEDS.
    Rule "all" (only where a published result judges every seed, suites.toml's pass_rule_source):
    every seed must meet it. FAIL only on what the finished runs show (a crash, or a result below
    the threshold that more seeds cannot change); a cell with seeds still to run is otherwise
    'partial: k of n seeds'."""
    if not script_path(cell.algo).exists():
        return "FAIL", f"script missing: algos/{cell.algo}.py"
    ok = {s: r for s, r in runs.items() if r["status"] == "ok"}
    failures = [f"seed {s} crashed: {str(r.get('error'))[:120]}" for s, r in sorted(runs.items()) if r["status"] == "failed"]
    missing = [s for s in cell.seeds if s not in runs or runs[s]["status"] not in ("ok", "failed")]
    evals = {s: r["summary"]["eval_return_mean"] for s, r in ok.items()}
    so_far = ""
    if cell.threshold is not None and evals:
        t = cell.threshold
        if cell.pass_rule == "all":
            below = [f"seed {s}: {v:.1f} < {t:g}" for s, v in sorted(evals.items()) if v < t]
            if below:  # more seeds cannot change it
                failures.append("below threshold: " + "; ".join(below))
        else:
            m = statistics.fmean(evals.values())
            if m < t and not missing:
                failures.append(f"below threshold: mean {m:.1f} < {t:g}" + ci_caution(list(evals.values()), t))
            so_far = f"; mean so far {m:.1f} ({'≥' if m >= t else '<'} {t:g})"
    if missing:
        done = len([s for s in cell.seeds if s in ok])
        not_run = [str(s) for s in missing if s not in runs]
        unfinished = [f"seed {s} {runs[s]['status']}" for s in missing if s in runs]  # running, interrupted or killed
        partial = f"partial: {done} of {len(cell.seeds)} seeds"
        if not_run:
            partial += f" (not run: seed{'s' if len(not_run) > 1 else ''} {', '.join(not_run)})"
        if unfinished:
            partial += f" (unfinished: {', '.join(unfinished)})"
        if failures:
            return "FAIL", "; ".join(failures + [partial])
        return "partial", partial + so_far
    if failures:
        return "FAIL", "; ".join(failures)
    if cell.threshold is None:
        return "n/a", "no threshold set"
    if cell.pass_rule == "all":
        return "PASS", f"{len(evals)}/{len(evals)} seeds ≥ {cell.threshold:g}"
    values = list(evals.values())
    return "PASS", f"mean {statistics.fmean(values):.1f} ≥ {cell.threshold:g}" + ci_caution(values, cell.threshold)


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


def plot_cell(cell: Cell, runs: dict[int, dict], refs: list[dict], out: Path) -> bool:
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
    ax.set_title(f"{cell.algo} on {cell.env}")
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
    commits = sorted({r.get("commit") or "?" for r in all_runs})
    lines.append(f"- code: git commit(s) {', '.join(commits)} (+dirty: algos/ or common/ had uncommitted changes)")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True)
    p.add_argument("--suites-file", default=str(SUITES_FILE), help=argparse.SUPPRESS)
    p.add_argument("--results-dir", default=str(RESULTS_DIR))
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args(argv)

    suite = load_suite(a.suite, a.suites_file)
    refs = load_references()
    out_dir = Path(a.results_dir) / suite.name
    runs_dir = out_dir / "runs"
    out_dir.mkdir(parents=True, exist_ok=True)

    lines = []  # the title and the date go on top at the end: the date is the last run's, so that the same runs give the same report
    if not suite.runnable:
        lines += [f"**Declared, not runnable here:** {suite.not_runnable_reason}", ""]
    lines += ["- **eval**: mean greedy return over the script's evaluation episodes (10) of the final policy; "
              "the mean over seeds with its 95% confidence interval (CI) in brackets (percentile bootstrap over the seeds, "
              f"{BOOTSTRAP_RESAMPLES:,} resamples, fixed generator seed; from 2 seeds on), then the std over seeds; from "
              f"{MANY_SEEDS} seeds on also the interquartile mean (IQM: the mean of the middle 50% of the seeds' values) "
              "with its own CI. **train**: mean of the last 10 training episodes (CleanRL's convention); "
              "mean ± std over seeds.",
              "- **steps/s**: env steps per second of the training loop (final evaluation excluded), mean over seeds; "
              "**wall**: mean wall time per run. One torch thread per run.",
              "- **verdict**: against the cell's threshold. Rule *mean*: PASS when the mean over the finished seeds "
              "meets it; the reason then says whether the CI's lower bound clears the threshold too (for a mean below "
              "it: whether the CI's upper bound reaches it), and *few seeds* when fewer than "
              f"{MANY_SEEDS} seeds finished, where the CI is rough. Rule *all*, only for a cell whose threshold "
              "comes with a published result that asks it of every seed: every seed must meet it. "
              "FAIL gives the reason: below threshold, crashed, script missing; a cell with seeds still to run is "
              "*partial* (k of n seeds) unless its finished seeds already fail it.",
              "- **code**: each run records the git commit it ran on (`result.json`, and the list under *Machine and "
              "versions*); a run is identified by its cell's settings, not by the code, so runs made with older code "
              "stay in the report until they are run again (`--force`).",
              f"- Reproduce a cell into a new folder: `python benchmarks/run.py --suite {suite.name} --algos ALGO --envs ENV "
              f"--results-dir my_results` then `python benchmarks/report.py --suite {suite.name} --results-dir my_results`.", ""]

    header = ("| algo | env | steps | seeds ok | eval: mean [95% CI] | train (last 10) | steps/s | wall/run | threshold | references | verdict |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")
    ref_ids: list[str] = []
    table, details, failures, all_runs, plots = [header], [], [], [], []
    counts = {"PASS": 0, "FAIL": 0, "partial": 0, "n/a": 0}
    measured_seconds, measured_by_cell = 0.0, {}
    est_missing: list[tuple[Cell, int]] = []
    for cell in suite.cells:
        runs = cell_runs(cell, runs_dir) if runs_dir.exists() else {}
        all_runs += list(runs.values())
        ok = {s: r for s, r in runs.items() if r["status"] == "ok"}
        summaries = [r["summary"] for r in ok.values()]
        v, reason = verdict(cell, runs)
        counts[v] += 1
        cell_refs = []
        for rid in cell.references:
            if rid not in refs:
                cell_refs.append(f"unknown reference {rid}")
                continue
            if rid not in ref_ids:
                ref_ids.append(rid)
            r = refs[rid]
            std = f" ± {r['std']:g}" if "std" in r else ""
            cell_refs.append(f"{r['mean']:g}{std} ({r['convention']}, {fmt_steps(r['steps'])}) [{ref_ids.index(rid) + 1}]")
        walls = [s["wall_seconds"] for s in summaries]
        measured_seconds += sum(walls)
        if walls:
            measured_by_cell[id(cell)] = statistics.fmean(walls)
        missing_seeds = len([s for s in cell.seeds if s not in ok])
        if missing_seeds:
            est_missing.append((cell, missing_seeds))
        thr = "-" if cell.threshold is None else f"{cell.threshold:g} ({cell.pass_rule})"
        verdict_txt = f"**{v}**" + (f": {reason.removeprefix('partial: ')}" if v == "partial" else f": {reason}" if reason else "")
        if cell.note and v == "FAIL":
            verdict_txt += f". Why: {cell.note}"
        elif cell.note and cell.threshold is None:  # no verdict to explain: what the reader should know about the cell
            verdict_txt += f". Note: {cell.note}"
        table.append(
            f"| {cell.algo} | {cell.env} | {fmt_steps(cell.steps)} | {len(ok)}/{len(cell.seeds)} | "
            f"{fmt_eval([s['eval_return_mean'] for s in summaries])} | "
            f"{fmt_ms([s['train_return_last10'] for s in summaries if s.get('train_return_last10') is not None])} | "
            f"{fmt_ms([s['sps'] for s in summaries], 0).split(' ±')[0]} | {fmt_seconds(statistics.fmean(walls)) if walls else '-'} | "
            f"{thr} | {'<br>'.join(cell_refs) or '-'} | {verdict_txt} |")
        stale = stale_count(cell, runs_dir) if runs_dir.exists() else 0
        for seed, r in sorted(runs.items()):
            s = r.get("summary") or {}
            err = str(r.get("error") or "").replace("|", "\\|")[:200]
            rel = r["dir"].relative_to(out_dir)
            ev = s.get("eval_return_mean")
            tr = s.get("train_return_last10")
            details.append(f"| {cell.algo} | {cell.env} | {seed} | {r['status']} | {'-' if ev is None else f'{ev:.1f}'} | "
                           f"{'-' if tr is None else f'{tr:.1f}'} | {s.get('sps', '-')} | {s.get('wall_seconds', '-')} | "
                           f"{err or '-'} | [{rel.name}]({rel.as_posix()}) |")
            if r["status"] != "ok":
                failures.append((cell, seed, r))
        if stale:
            details.append(f"| {cell.algo} | {cell.env} | - | {stale} run(s) with older settings ignored | | | | | | |")
        if not a.no_plots and runs:
            png = out_dir / "plots" / f"{cell.slug}.png"
            if plot_cell(cell, runs, [refs[i] for i in cell.references if i in refs], png):
                plots.append((cell, png))
        cell.__dict__["_settings_line"] = (
            f"- `{cell.algo}` `{cell.env}` (hash `{cell.digest}`), settings from {cell.settings_source or '-'}; "
            f"threshold from {cell.threshold_source or '-'}"
            + (f"; every seed must reach it, as in {cell.pass_rule_source}" if cell.pass_rule == "all" else "")
            + f". One seed by hand:\n  `{script_command(cell, cell.seeds[0])}`")

    lines += [f"**{len(suite.cells)} cells: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial "
              f"(seeds still to run), {counts['n/a']} without threshold.**", "", *table, ""]

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
        lines.append(f"- Not finished: {sum(n for _, n in est_missing)} run(s)"
                     + (f"; from the wall time of the cell's finished seeds, about {fmt_seconds(left)} more for those "
                        "cells" if left else "")
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

    if plots:
        lines += ["## Learning curves", "",
                  "Mean over seeds with a ±1 std band; training returns are averaged per 1% of the run; "
                  "greedy evaluations every 5% of the run; the threshold is dashed, references dotted.", ""]
        for cell, png in plots:
            lines.append(f"![{cell.algo} {cell.env}]({png.relative_to(out_dir).as_posix()})")
        lines.append("")

    lines += ["## Failures", ""]
    if failures:
        for cell, seed, r in failures:
            rel = r["dir"].relative_to(out_dir).as_posix()
            lines.append(f"- `{cell.algo}` `{cell.env}` seed {seed}: **{r['status']}**: {r.get('error')} "
                      f"(log: [{rel}/log.txt]({rel}/log.txt))")
            tb = r.get("traceback") or "\n".join(r.get("log_tail") or [])
            if tb:
                lines += ["", "  ```", *("  " + x for x in tb.strip().splitlines()[-8:]), "  ```"]
    else:
        lines.append("No run crashed.")
    lines.append("")

    lines += ["## Runs", "", "| algo | env | seed | status | eval | train (last 10) | steps/s | wall s | error | folder |",
              "|---|---|---|---|---|---|---|---|---|---|", *details, "",
              "## Settings of each cell", "", *(c.__dict__["_settings_line"] for c in suite.cells), ""]
    lines += speed_section(Path(a.results_dir) / "speed")
    lines += machine_section(all_runs)

    finished = sorted(str(r["finished"]).replace("T", " ")[:16] for r in all_runs if r.get("finished"))
    when = f"runs finished {finished[0][:10]} to {finished[-1][:10]}" if finished else "no finished runs yet"
    lines[0:0] = [f"# Benchmark report: `{suite.name}`", "",
                  (f"{suite.description}. " if suite.description else "") + f"Written by "
                  f"`python benchmarks/report.py --suite {suite.name}` from `{runs_dir.name}/` ({when}).", ""]
    report = out_dir / "REPORT.md"
    report.write_text("\n".join(lines))
    print(f"wrote {report} ({counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial, {counts['n/a']} n/a; "
          f"{len(plots)} plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
