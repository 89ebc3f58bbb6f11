"""The report's text and plots: REPORT.md's sections, the learning-curve PNGs, and the README's result tables."""

from __future__ import annotations

import csv
import json
import os
import re
import statistics
import warnings
from pathlib import Path

import numpy as np
from cli import cli_flags, fmt_steps, md_row
from provenance import Checker, recorded_state
from selection import (
    BOOTSTRAP_RESAMPLES,
    MANY_SEEDS,
    VERDICT_SEEDS,
    Judged,
    bootstrap_ci,
    iqm,
    judge_suite,
)
from suite import (
    LEGEND_FILE,
    RESULTS_DIR,
    ROOT,
    SUITES_FILE,
    Cell,
    Suite,
    load_references,
    load_suite,
    load_suites,
    metrics_file,
)

README = ROOT / "README.md"  # its result tables: between the comments MARKER finds
MARKER = re.compile(r"(<!-- results:([\w-]+):start -->\n)(.*?)(<!-- results:\2:end -->)", re.DOTALL)
ALGO_PAGES = (
    ROOT / "docs" / "algorithms"
)  # a page per script, its results between ALGO_MARKER's comments
ALGO_MARKER = re.compile(
    r"(<!-- algo-results:([\w-]+):start -->\n)(.*?)(<!-- algo-results:\2:end -->)", re.DOTALL
)


def fmt_eval(xs: list[float]) -> str:
    """The eval column: mean [95% CI] over seeds (from 2 on), the std, the IQM [95% CI] from MANY_SEEDS on."""
    if len(xs) < 2:
        return f"{xs[0]:.1f}" if xs else "-"
    lo, hi = bootstrap_ci(xs)
    text = f"{statistics.fmean(xs):.1f} [{lo:.1f}, {hi:.1f}]<br>std {statistics.pstdev(xs):.1f}"
    if len(xs) >= MANY_SEEDS:
        lo, hi = bootstrap_ci(xs, iqm)
        text += f"<br>IQM {float(iqm(xs)):.1f} [{lo:.1f}, {hi:.1f}]"
    return text


def fmt_ms(xs: list[float], fmt=lambda x: f"{x:.1f}") -> str:
    """mean ± std of `xs` (one value: itself; none: -), each number written by `fmt`."""
    if len(xs) < 2:
        return fmt(xs[0]) if xs else "-"
    return f"{fmt(statistics.fmean(xs))} ± {fmt(statistics.pstdev(xs))}"


def train_last(run_dir: Path, n: int) -> float | None:
    """The mean of a run's last `n` training returns (MinAtar's figure: n = 100); None without episodes."""
    returns = [ret for _, ret in read_curves(m)[1]] if (m := metrics_file(run_dir)) else []
    return statistics.fmean(returns[-n:]) if returns else None


def fmt_seconds(s: float) -> str:
    return (
        "-"
        if s != s
        else f"{s / 3600:.1f} h"
        if s >= 3600
        else f"{s / 60:.1f} min"
        if s >= 120
        else f"{s:.0f} s"
    )


def read_curves(path: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(eval points, training episode returns) from a metrics.csv, as (global_step, value) lists."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return tuple(
        [(int(r["global_step"]), float(r[k])) for r in rows if r.get(k)]
        for k in ("eval_return", "episodic_return")
    )


def plot_cell(
    cell: Cell, runs: dict[int, dict], refs: list[dict], out: Path, stale: bool = False
) -> bool:
    try:
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing to close
    except ImportError:  # plotting is a benchmarks-only dependency (benchmarks/requirements.txt)
        print(
            "report: matplotlib is not installed, skipping plots (pip install -r benchmarks/requirements.txt)"
        )
        return False

    curves = [
        read_curves(m) for _, r in sorted(runs.items()) if (m := metrics_file(r["dir"]))
    ]  # ok runs
    if not curves:
        return False
    grid = np.linspace(0, cell.steps, 101)
    fig = Figure(figsize=(6.4, 4.0), dpi=110)
    ax = fig.subplots()

    train_series, eval_series = [], []
    for evals, train in curves:
        if len(train) >= 2:
            steps, rets = np.array(train).T
            # mean of the episodes that ended in each grid interval, carried forward over empty ones
            idx = np.clip(np.searchsorted(grid, steps, side="left"), 0, len(grid) - 1)
            sums, counts = np.bincount(idx, rets, len(grid)), np.bincount(idx, minlength=len(grid))
            y = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
            n = idx.max() + 1  # not past the last episode: a stopped run ends there
            y[:n] = y[np.maximum.accumulate(np.where(np.isnan(y[:n]), 0, np.arange(n)))]
            train_series.append(y)
        if evals:
            es, ev = np.array(evals).T
            y = np.interp(grid, es, ev, left=np.nan)
            y[grid < es[0]] = np.nan
            eval_series.append(y)
    for series, color, label in (
        (train_series, "tab:blue", "training episodes"),
        (eval_series, "tab:orange", "greedy eval"),
    ):
        if not series:
            continue
        arr = np.array(series)  # [seeds, grid]: mean and a ±1 std band
        with warnings.catch_warnings(
            action="ignore", category=RuntimeWarning
        ):  # early grid points: all-NaN
            mean, std = np.nanmean(arr, 0), np.nanstd(arr, 0)
        ax.plot(
            grid,
            mean,
            color=color,
            label=f"{label} (mean of {len(series)} seed{'s' if len(series) > 1 else ''})",
        )
        if len(series) > 1:
            ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    if cell.threshold is not None:
        ax.axhline(
            cell.threshold,
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"threshold {cell.threshold:g}",
        )
    for ref, color in zip(refs, ["tab:green", "tab:red", "tab:purple", "tab:brown"]):
        ax.axhline(
            ref["mean"],
            color=color,
            linestyle=":",
            linewidth=1.5,
            label=f"{ref['source'].split(' (')[0].split(',')[0]}: {ref['mean']:g} ({ref['convention']}, {fmt_steps(ref['steps'])})",
        )
    ax.set(
        xlabel="env steps",
        ylabel="episodic return",
        xlim=(0, cell.steps),
        title=f"{cell.algo} on {cell.env}"
        + (" (stale runs: made with older code)" if stale else ""),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return True


def speed_section(speed_dir: Path) -> list[str]:
    files = sorted(speed_dir.glob("*.json"))
    lines = ["## Speed against the peers", ""]
    if not files:
        return lines + [
            "Not run yet: `python benchmarks/speed.py` runs the per-algorithm comparisons and writes "
            f"`{speed_dir.name}/`.",
            "",
        ]
    lines += [
        "Each comparison runs ours and the peer side by side in one invocation with matched settings "
        "(the settings are in each script's docstring); the machine is shared, so only the ratio within "
        "one invocation means anything.",
        "",
        "| comparison | when | ratio ours/peer | result (the script's own summary) | status |",
        "|---|---|---|---|---|",
    ]
    for f in files:
        d = json.loads(f.read_text())
        if "command" not in d:  # a comparison script's own raw output, not a speed.py record
            continue
        ratios = ", ".join(f"{r:.2f}x" for r in d.get("ratios", [])) or "-"
        summary = "<br>".join(x.replace("|", "\\|") for x in d.get("summary_lines", [])) or "-"
        status = (
            "ok"
            if d.get("returncode") == 0
            else f"FAILED (exit {d.get('returncode')}): {d.get('error', '')}"
        )
        lines.append(
            f"| `{d['command']}` | {d.get('finished', '-')} | {ratios} | {summary} | {status} |"
        )
    return lines + [""]


def machine_kind(run: dict) -> str | None:
    """The machine kind a run's floats depend on (benchmarks/machine.py): from its summary, or from result.json's
    machine; None for runs made before it was recorded."""
    return ((run.get("summary") or {}).get("machine") or {}).get("kind") or (
        run.get("machine") or {}
    ).get("kind")


def machine_labels(all_runs: list[dict]) -> dict[str, str]:
    """kind -> M1, M2, ... in order of first appearance, for the Runs table's machine column."""
    kinds = dict.fromkeys(
        k for r in all_runs if r["status"] in ("ok", "failed") and (k := machine_kind(r))
    )
    return {k: f"M{i}" for i, k in enumerate(kinds, 1)}


def machine_section(all_runs: list[dict]) -> list[str]:
    lines, seen = ["## Machine and versions", ""], {}
    finished = [r for r in all_runs if r["status"] in ("ok", "failed")]
    labels = machine_labels(all_runs)
    if finished:
        unknown = [r for r in finished if not machine_kind(r)]
        models = sorted({(r.get("machine") or {}).get("cpu") or "?" for r in unknown})
        lines.append(
            f"- Runs from {len(labels)} machine kind{'s' if len(labels) != 1 else ''} (CPU vendor and model, "
            "torch's CPU capability, BLAS, kernel variables: what a seed's floats depend on; the Runs table's "
            "machine column)"
            + (
                f", and {len(unknown)} run{'s' if len(unknown) != 1 else ''} made before the "
                f"kind was recorded (CPU model: {', '.join(models)})"
                if unknown
                else ""
            )
            + "."
        )
        lines += [
            f"  - {label}: {kind} ({sum(machine_kind(r) == kind for r in finished)} runs)"
            for kind, label in labels.items()
        ]
    for m in (r["machine"] for r in all_runs if r.get("machine")):
        key = (
            m.get("cpu"),
            m.get("cpu_count"),
            m.get("platform"),
            json.dumps(m.get("versions"), sort_keys=True),
        )
        seen.setdefault(key, []).append(m)
    if not seen:
        return lines + ["No runs yet.", ""]
    for (cpu, n, plat, versions), ms in seen.items():
        loads = [m["load_average"][0] for m in ms if m.get("load_average")]
        lines.append(f"- {len(ms)} run(s) on: {cpu}, {n} logical CPUs, {plat}")
        lines.append(
            "  - versions: " + ", ".join(f"{k} {v}" for k, v in json.loads(versions).items() if v)
        )
        if loads:
            lines.append(
                f"  - 1-min load average at run start: {min(loads):.1f} to {max(loads):.1f} "
                f"(the machine was shared: steps/s and wall times are pessimistic)"
            )
    commits = sorted(
        {short_commit(recorded_state(r)) for r in all_runs if r["status"] in ("ok", "failed")}
    )
    lines.append(
        f"- code: git commit(s) {', '.join(commits)} (+dirty: uncommitted changes in the code the run used; "
        "each run's state is in the Runs table)"
    )
    return lines + [""]


def least_margin(evals: list[float], threshold: float | None) -> str:
    """The worst seed against the threshold, in points and as a share of the threshold's scale (|threshold|):
    how far the weakest seed is from failing the promise."""
    if not evals or threshold is None:
        return "-"
    margin = min(evals) - threshold
    share = f" ({margin / abs(threshold):+.1%})" if threshold else ""
    return f"{margin:+.1f}{share}"


def ref_label(r: dict, detail: str = "") -> str:
    """A reference's result: mean ± std (convention, `detail`, by default its steps)."""
    std = f" ± {r['std']:g}" if "std" in r else ""
    return f"{r['mean']:g}{std} ({r['convention']}, {detail or fmt_steps(r['steps'])})"


def short_commit(state: dict | None) -> str:
    commit = (state or {}).get("commit")
    return (commit[:7] + ("+dirty" if state.get("dirty") else "")) if commit else "?"


def report_text(
    suite: Suite,
    results_dir: Path,
    judged: list[Judged],
    left_out: list[Cell],
    refs: dict,
    plots: bool,
    selection: str = "",
) -> tuple[str, dict, int]:
    """REPORT.md's text, the verdict counts and the number of plots drawn."""
    out_dir = results_dir / suite.name
    counts = {
        k: sum(j.verdict == k for j in judged) for k in ("PASS", "FAIL", "partial", "stale", "n/a")
    }
    all_runs = [r for j in judged for r in j.runs.values()]
    ref_ids = cited_references(judged, refs)
    drawn = draw_curves(judged, refs, out_dir) if plots else []
    lines = [
        *title_lines(suite, all_runs, selection),
        *legend_lines(suite),
        *tally_lines(suite, judged, left_out, counts),
        *cell_table(judged, refs, ref_ids),
        *time_section(judged),
        *references_section(ref_ids, refs),
        *curves_section(drawn, out_dir),
        *failures_section(judged, out_dir),
        *runs_section(judged, out_dir),
        *settings_section(judged),
        *speed_section(results_dir / "speed"),
        *machine_section(all_runs),
    ]
    return "\n".join(lines), counts, len(drawn)


def cited_references(judged: list[Judged], refs: dict) -> list[str]:
    """The ids of the known references the cells cite, in order of first citation: the References' numbers."""
    return list(dict.fromkeys(rid for j in judged for rid in j.cell.references if rid in refs))


def draw_curves(judged: list[Judged], refs: dict, out_dir: Path) -> list[tuple[Cell, Path]]:
    """Draws each cell's learning curves into `out_dir`/plots; returns the cells drawn with their PNG."""
    drawn = []
    for j in judged:
        png = out_dir / "plots" / f"{j.cell.slug}.png"
        cell_refs = [refs[rid] for rid in j.cell.references if rid in refs]
        if j.shown and plot_cell(j.cell, j.shown, cell_refs, png, stale=j.shown_stale):
            drawn.append((j.cell, png))
    return drawn


def title_lines(suite: Suite, all_runs: list[dict], selection: str) -> list[str]:
    """The title, the command that wrote the report and when its runs finished; why it cannot run here."""
    # the runs' dates, not today's: the same runs give the same report
    dates = sorted(str(r["finished"])[:10] for r in all_runs if r.get("finished"))
    when = f"runs finished {dates[0]} to {dates[-1]}" if dates else "no finished runs yet"
    lines = [
        f"# Benchmark report: `{suite.name}`",
        "",
        (f"{suite.description}. " if suite.description else "")
        + f"Written by `python benchmarks/report.py --suite {suite.name}{selection}` from `runs/` ({when}).",
        "",
    ]
    if not suite.runnable:
        lines += [f"**Declared, not runnable here:** {suite.not_runnable_reason}", ""]
    return lines


def legend_lines(suite: Suite) -> list[str]:
    """What the columns and verdicts mean (LEGEND_FILE, filled in with the suite and the constants)."""
    legend = LEGEND_FILE.read_text().format(
        resamples=f"{BOOTSTRAP_RESAMPLES:,}",
        many_seeds=MANY_SEEDS,
        verdict_seeds=VERDICT_SEEDS,
        suite=suite.name,
    )
    return [*legend.splitlines(), ""]


def tally_lines(
    suite: Suite, judged: list[Judged], left_out: list[Cell], counts: dict
) -> list[str]:
    """The verdicts counted over the listed cells, and the cells not listed for want of runs."""
    listed = (
        f"{len(judged)} of the suite's {len(suite.cells)} cells"
        if left_out or len(judged) != len(suite.cells)
        else f"{len(judged)} cell{'s' if len(judged) != 1 else ''}"
    )
    lines = [
        f"**{listed}: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial, "
        f"{counts['stale']} stale (runs on other code), {counts['n/a']} without threshold.**",
        "",
    ]
    if left_out:
        names = ", ".join(f"{c.algo} {c.env}" for c in left_out)
        lines += [
            f"Not listed: {len(left_out)} cell{'s' if len(left_out) > 1 else ''} without runs ({names}); "
            "`--algos` / `--envs` list them.",
            "",
        ]
    return lines


def cell_table(judged: list[Judged], refs: dict, ref_ids: list[str]) -> list[str]:
    """The table of cells: a row per cell with its figures over the seeds, its references and its verdict."""
    every_seed = any(
        j.cell.pass_rule == "all" for j in judged
    )  # a suite whose cells must solve every seed
    header = [
        "algo",
        "env",
        "steps",
        "seeds ok",
        "eval: mean [95% CI]",
        "train (last 10)",
        "steps/s",
        "wall/run",
        "threshold",
        *["least margin"] * every_seed,
        "references",
        "verdict",
    ]
    rows = [cell_row(j, refs, ref_ids, every_seed) for j in judged]
    return [md_row(header), "|---" * len(header) + "|", *rows, ""]


def cell_row(j: Judged, refs: dict, ref_ids: list[str], every_seed: bool) -> str:
    """A cell's row of the table of cells, from the runs it shows."""
    cell = j.cell
    summaries = [r["summary"] for r in j.shown.values()]
    evals = [s["eval_return_mean"] for s in summaries]
    stale_ok = len([r for r in j.runs.values() if r["status"] == "ok" and r.get("stale")])
    cell_refs = [
        f"{ref_label(refs[rid])} [{ref_ids.index(rid) + 1}]"
        if rid in refs
        else f"unknown reference {rid}"
        for rid in cell.references
    ]
    return md_row(
        [
            cell.algo,
            cell.env,
            fmt_steps(cell.steps),
            f"{len(j.current_ok)}/{len(cell.seeds)}"
            + (f" (+{stale_ok} stale)" if stale_ok else ""),
            eval_text(j, evals),
            train_text(j, refs),
            fmt_ms([s["sps"] for s in summaries], lambda x: f"{x:.0f}").split(" ±")[0],
            fmt_seconds(statistics.fmean(s["wall_seconds"] for s in summaries))
            if summaries
            else "-",
            "-" if cell.threshold is None else f"{cell.threshold:g} ({cell.pass_rule})",
            *[least_margin(evals, cell.threshold)] * every_seed,
            "<br>".join(cell_refs) or "-",
            verdict_text(j),
        ]
    )


def eval_text(j: Judged, evals: list[float]) -> str:
    """The eval column: the shown seeds' evals (marked when stale), then how many reach the threshold."""
    text = ("*stale*: " if j.shown_stale else "") + fmt_eval(evals)
    threshold = j.cell.threshold
    if evals and threshold is not None:
        text += f"<br>{sum(x >= threshold for x in evals)}/{len(evals)} seeds ≥ {threshold:g}"
    return text


def train_text(j: Judged, refs: dict) -> str:
    """The train column: the last 10 training episodes, and the last 100 beside a *train100* reference."""
    summaries = [r["summary"] for r in j.shown.values()]
    text = fmt_ms(
        [s["train_return_last10"] for s in summaries if s.get("train_return_last10") is not None]
    )
    if any(refs.get(rid, {}).get("convention") == "train100" for rid in j.cell.references):
        last100 = [
            x
            for x in (train_last(r["dir"], 100) for _, r in sorted(j.shown.items()))
            if x is not None
        ]
        text += f"<br>last 100: {fmt_ms(last100)}" if last100 else ""
    return text


def verdict_text(j: Judged) -> str:
    """The verdict column: the verdict, its reason, and the cell's note on why it fails or what to know."""
    text = f"**{j.verdict}**" + (f": {j.reason.removeprefix('partial: ')}" if j.reason else "")
    if j.cell.note and (j.verdict == "FAIL" or j.cell.threshold is None):
        text += f". {'Why' if j.verdict == 'FAIL' else 'Note'}: {j.cell.note}"
    return text


def time_section(judged: list[Judged]) -> list[str]:
    """The run time measured, and an estimate for the seeds still without a current finished run."""
    measured_seconds = 0.0
    missing_seeds = 0  # seeds of the listed cells without a current finished run
    seconds_left = 0.0  # the estimate for those whose cell has a finished run
    cells_not_estimated = []  # cells with such seeds and no finished run to estimate from
    for j in judged:
        walls = [r["summary"]["wall_seconds"] for r in j.runs.values() if r["status"] == "ok"]
        measured_seconds += sum(walls)
        cell_missing = len([s for s in j.cell.seeds if s not in j.current_ok])
        missing_seeds += cell_missing
        if cell_missing and walls:
            seconds_left += cell_missing * statistics.fmean(walls)
        elif cell_missing:
            cells_not_estimated.append(f"{j.cell.algo} {j.cell.env}")
    lines = [
        "## Time",
        "",
        f"- Measured: {fmt_seconds(measured_seconds)} of run time over the finished runs (sum of wall times, "
        "one run at a time per worker).",
    ]
    if missing_seeds:
        lines.append(
            f"- Without a current finished run: {missing_seeds} seed(s) of the listed cells"
            + (
                f"; from the wall time of the cell's finished runs, about {fmt_seconds(seconds_left)} to run them"
                if seconds_left
                else ""
            )
            + (
                f"; no seed of the cell finished yet for: {', '.join(cells_not_estimated)}"
                if cells_not_estimated
                else ""
            )
            + "."
        )
    return lines + [""]


def references_section(ref_ids: list[str], refs: dict) -> list[str]:
    """The references the table cites, numbered: their result, source, link and env."""
    lines = ["## References", ""]
    for i, rid in enumerate(ref_ids, 1):
        r = refs[rid]
        detail = f"{r['seeds']} seed{'s' if r['seeds'] > 1 else ''}, {'tuned' if r['tuned'] else 'untuned'}"
        lines.append(
            f"{i}. `{rid}`: {r['algo']} {r['env']}, {r['steps']:,} steps: {ref_label(r, detail)}. "
            f"{r['source']}, <{r['url']}>. Env: {r['env_note']}."
        )
    return lines + ["", "All references with their conventions: `benchmarks/references.toml`.", ""]


def curves_section(drawn: list[tuple[Cell, Path]], out_dir: Path) -> list[str]:
    """The learning-curve plots drawn, if any."""
    if not drawn:
        return []
    return [
        "## Learning curves",
        "",
        "Mean over seeds with a ±1 std band, of the runs the table's figures come from; training returns are "
        "averaged per 1% of the run; greedy evaluations every 5% of the run; the threshold is dashed, references dotted.",
        "",
        *(
            f"![{cell.algo} {cell.env}]({png.relative_to(out_dir).as_posix()})"
            for cell, png in drawn
        ),
        "",
    ]


def failures_section(judged: list[Judged], out_dir: Path) -> list[str]:
    """Each run that did not finish ok: its error, a link to its log and the end of its traceback."""
    failures = [
        (j.cell, seed, r)
        for j in judged
        for seed, r in sorted(j.runs.items())
        if r["status"] != "ok"
    ]
    lines = ["## Failures", "", *([] if failures else ["No run crashed."])]
    for cell, seed, r in failures:
        rel = r["dir"].relative_to(out_dir).as_posix()
        lines.append(
            f"- `{cell.algo}` `{cell.env}` seed {seed}: **{r['status']}**"
            + (" (stale)" if r.get("stale") else "")
            + f": {r.get('error')} (log: [{rel}/log.txt]({rel}/log.txt))"
        )
        if tb := r.get("traceback") or "\n".join(r.get("log_tail") or []):
            lines += ["", "  ```", *("  " + x for x in tb.strip().splitlines()[-8:]), "  ```"]
    return lines + [""]


def runs_section(judged: list[Judged], out_dir: Path) -> list[str]:
    """The table of runs: a row per seed's run, and a row per cell for the runs it ignores."""
    labels = machine_labels([r for j in judged for r in j.runs.values()])
    lines = [
        "## Runs",
        "",
        "| algo | env | seed | status | eval | train (last 10) | steps/s | wall s | machine | code | error | folder |",
        "|---" * 12 + "|",
    ]
    for j in judged:
        lines += [run_row(j.cell, seed, r, out_dir, labels) for seed, r in sorted(j.runs.items())]
        if j.older or j.smoke:
            lines.append(ignored_row(j))
    return lines + [""]


def run_row(cell: Cell, seed: int, r: dict, out_dir: Path, labels: dict[str, str]) -> str:
    """A run's row of the table of runs: its figures, machine, code, error and folder."""
    s = r.get("summary") or {}
    rel = r["dir"].relative_to(out_dir)
    finished = r["status"] in ("ok", "failed")
    return md_row(
        [
            cell.algo,
            cell.env,
            seed,
            r["status"],
            fmt_ms([s["eval_return_mean"]] if s.get("eval_return_mean") is not None else []),
            fmt_ms([s["train_return_last10"]] if s.get("train_return_last10") is not None else []),
            s.get("sps", "-"),
            s.get("wall_seconds", "-"),
            labels.get(machine_kind(r), "-") if finished else "-",
            run_code(r).replace("|", "\\|"),
            str(r.get("error") or "").replace("|", "\\|")[:200] or "-",
            f"[{rel.name}]({rel.as_posix()})",
        ]
    )


def run_code(r: dict) -> str:
    """The code column: why the run is stale, or the commit it ran on and what makes it current."""
    if r.get("stale"):
        return f"**stale**: {r['stale']}"
    code = short_commit(recorded_state(r)) if r["status"] in ("ok", "failed") else "-"
    return code + f": {r['current_by']}" if r.get("current_by") else code


def ignored_row(j: Judged) -> str:
    """The table of runs' row of a cell's runs that do not count: older settings and smoke tries."""
    ignored = []
    if j.older:
        ignored.append(f"{j.older} run(s) with older settings")
    if j.smoke:
        ignored.append(f"{j.smoke} smoke tr{'ies' if j.smoke > 1 else 'y'}")
    return f"| {j.cell.algo} | {j.cell.env} | - | {' and '.join(ignored)} ignored | | | | | | | | |"


def settings_section(judged: list[Judged]) -> list[str]:
    """Each cell's settings, where they come from, and its first seed's command line."""
    return ["## Settings of each cell", "", *(settings_line(j.cell) for j in judged), ""]


def settings_line(cell: Cell) -> str:
    """The cell's settings, their sources and its first seed's run as one command line of the script."""
    command = " ".join(
        [
            f"python algos/{cell.algo}.py --env {cell.env} --seed {cell.seeds[0]} --total-timesteps {cell.steps}",
            *([f"--eval-every {cell.eval_every}"] if cell.eval_every else []),
            *cli_flags(cell.settings),
        ]
    )
    return (
        f"- `{cell.algo}` `{cell.env}` (hash `{cell.digest}`), settings from {cell.settings_source or '-'}; "
        f"threshold from {cell.threshold_source or '-'}"
        + (
            f"; every seed must reach it, as in {cell.pass_rule_source}"
            if cell.pass_rule == "all"
            else ""
        )
        + f". One seed by hand:\n  `{command}`"
    )


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
        seeds = (
            "every seed"
            if set(stale) >= set(j.runs)
            else f"seed{'s' if len(stale) > 1 else ''} {', '.join(map(str, sorted(stale)))}"
        )
        return f"*stale*: {seeds} ran on other code ({', '.join(commits)})"
    if j.verdict == "partial":
        return "partial: " + j.reason.removeprefix("partial: ").split(";")[0].split(" (")[0]
    return "no threshold"


def readme_table(
    suite_name: str, results_dir: Path, suites_file: Path | str, checker: Checker
) -> str:
    """The README's block for a suite: per cell with runs its eval, train return, reference, verdict."""
    suite = load_suite(suite_name, suites_file)
    refs = load_references()
    judged, _ = judge_suite(suite, results_dir / suite.name / "runs", checker)
    counts = {
        k: sum(j.verdict == k for j in judged) for k in ("PASS", "FAIL", "partial", "stale", "n/a")
    }
    report = (results_dir / suite.name / "REPORT.md").resolve()
    report = report.relative_to(ROOT).as_posix() if report.is_relative_to(ROOT) else str(report)
    lines = [
        f"Written by `python benchmarks/report.py --readme` from the `{suite.name}` suite's runs "
        f"([its report]({report}), with every run, the CIs and the reasons): {len(judged)} cell{'' if len(judged) == 1 else 's'} with runs, "
        f"{counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial, {counts['stale']} stale (made with "
        f"older code), {counts['n/a']} without threshold.",
        "",
        "| algo | env | steps | greedy eval: mean ± std (each seed) | train (last 10) | threshold | reference | min/run | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for j in judged:
        cell = j.cell
        # a stale cell's numbers came from other code: its report keeps them, the README shows none
        summaries = [] if j.shown_stale else [j.shown[s]["summary"] for s in sorted(j.shown)]
        evals = [s["eval_return_mean"] for s in summaries]
        trains = [
            s["train_return_last10"] for s in summaries if s.get("train_return_last10") is not None
        ]
        ev = fmt_ms(evals, fmt_num) + (
            f" ({', '.join(fmt_num(x) for x in evals)})" if len(evals) > 1 else ""
        )
        if evals and cell.threshold is not None:
            ev += f"; {sum(x >= cell.threshold for x in evals)}/{len(evals)} ≥ {cell.threshold:g}"
        if (
            evals
            and not j.shown_stale
            and len(j.current_ok) < len([r for r in j.runs.values() if r["status"] == "ok"])
        ):
            ev += "; current seeds only"
        tr = fmt_ms(trains, fmt_num)
        r = refs.get(cell.references[0]) if cell.references else None
        ref = f"{r['source'].split(' (')[0].split(',')[0]} {ref_label(r)}" if r else "-"
        minutes = [s["wall_seconds"] / 60 for s in summaries]
        wall = (
            f"{statistics.fmean(minutes):.{0 if statistics.fmean(minutes) >= 10 else 1}f}"
            if minutes
            else "-"
        )
        lines.append(
            md_row(
                [
                    cell.algo,
                    cell.env,
                    fmt_steps(cell.steps),
                    ev,
                    tr,
                    "-" if cell.threshold is None else f"{cell.threshold:g}",
                    ref,
                    wall,
                    short_verdict(j),
                ]
            )
        )
    return "\n".join(lines) + "\n"


def readme_text(
    text: str, results_dir: Path = RESULTS_DIR, suites_file: Path | str = SUITES_FILE
) -> str:
    """`text` (the README) with every `<!-- results:SUITE:start -->` ... `end` block rewritten."""
    checker = Checker()
    return MARKER.sub(
        lambda m: (
            m.group(1) + readme_table(m.group(2), results_dir, suites_file, checker) + m.group(4)
        ),
        text,
    )


def algo_table(
    algo: str,
    results_dir: Path,
    suites_file: Path | str,
    checker: Checker,
    page_dir: Path = ALGO_PAGES,
) -> str:
    """An algorithm page's block: each suite cell of `algo` with runs, its greedy eval over the seeds, the
    threshold, the verdict, and links to the suite's report and the cell's learning curves."""
    lines = [
        f"Written by `python benchmarks/report.py --readme` from the committed runs of every suite with a "
        f"`{algo}` cell (a stale cell ran on older code: its report keeps its numbers, this table shows none).",
        "",
        "| suite | env | steps | greedy eval: mean ± std (seeds; worst) | threshold | verdict | curves |",
        "|---|---|---|---|---|---|---|",
    ]

    def rel(path: Path) -> str:
        path = path.resolve()
        return Path(os.path.relpath(path, page_dir.resolve())).as_posix()

    without = []  # cells with no run of the current settings
    for name in load_suites(suites_file):
        suite = load_suite(name, suites_file)
        if not any(c.algo == algo for c in suite.cells):
            continue
        judged, _ = judge_suite(suite, results_dir / suite.name / "runs", checker, [algo])
        for j in judged:
            if not j.runs:
                without.append(f"{suite.name} {j.cell.env}")
                continue
            cell = j.cell
            summaries = [] if j.shown_stale else [j.shown[s]["summary"] for s in sorted(j.shown)]
            evals = [s["eval_return_mean"] for s in summaries]
            ev = f"{fmt_ms(evals, fmt_num)} ({len(evals)}; {fmt_num(min(evals))})" if evals else "-"
            png = results_dir / suite.name / "plots" / f"{cell.slug}.png"
            report = results_dir / suite.name / "REPORT.md"
            lines.append(
                md_row(
                    [
                        f"[{suite.name}]({rel(report)})" if report.exists() else suite.name,
                        cell.env,
                        fmt_steps(cell.steps),
                        ev,
                        "-" if cell.threshold is None else f"{cell.threshold:g}",
                        "*stale*: ran on older code" if j.verdict == "stale" else short_verdict(j),
                        f"[png]({rel(png)})" if png.exists() else "-",
                    ]
                )
            )
    if without:
        lines += ["", f"Cells without runs of their current settings: {', '.join(without)}."]
    return "\n".join(lines) + "\n"


def algo_page_text(
    text: str,
    results_dir: Path = RESULTS_DIR,
    suites_file: Path | str = SUITES_FILE,
    page_dir: Path = ALGO_PAGES,
) -> str:
    """`text` (an algorithm page) with its `<!-- algo-results:ALGO:start -->` ... `end` block rewritten."""
    checker = Checker()
    return ALGO_MARKER.sub(
        lambda m: (
            m.group(1)
            + algo_table(m.group(2), results_dir, suites_file, checker, page_dir)
            + m.group(4)
        ),
        text,
    )
