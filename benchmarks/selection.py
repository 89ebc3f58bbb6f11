"""The report's core: which runs count for a cell (its settings hash's run folders, current or stale by
provenance.Checker), the statistics over its seeds (seeded bootstrap CIs), and its verdict from the current
runs. Details: README.md."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from provenance import Checker, recorded_state
from suite import Cell, Suite, read_result, script_path

MANY_SEEDS = (
    5  # from this many finished seeds: the IQM is shown, and a verdict no longer says "few seeds"
)
VERDICT_SEEDS = (
    5  # a cell's verdict (PASS, or FAIL by its mean) needs this many finished current seeds
)
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def ordered_sum(x: np.ndarray) -> np.ndarray:
    """The sum along the last axis of the values sorted, added left to right (a cumulative sum): the same float
    on every CPU and for every order of the seeds. numpy's sum and dot products add in blocks whose order
    follows the CPU's vector width and the BLAS, which moves the last bit (and, at a tie, a printed digit)."""
    return np.cumsum(np.sort(np.asarray(x, dtype=float), axis=-1), axis=-1)[..., -1]


def mean(x) -> float | np.ndarray:
    """Mean along the last axis: of one sample [n] in exact rational arithmetic, of each resample [R, n] by
    ordered_sum; either way the same on every CPU."""
    x = np.asarray(x, dtype=float)
    return (
        float(sum(map(Fraction, x), Fraction(0)) / len(x))
        if x.ndim == 1
        else ordered_sum(x) / x.shape[-1]
    )


def iqm(x) -> float | np.ndarray:
    """Interquartile mean along the last axis, values straddling the 25% or 75% point weighted by their part
    inside (n = 5: weights 0, .3, .4, .3, 0); rliable's IQM for n a multiple of 4 (benchmarks/README.md).
    One sample [n] in exact rational arithmetic, each resample [R, n] with its weighted sorted values added
    left to right: the same on every CPU (ordered_sum)."""
    x = np.sort(np.asarray(x, dtype=float), axis=-1)
    n = x.shape[-1]
    i = np.arange(n)
    inside = np.clip(
        np.minimum(i + 1, 0.75 * n) - np.maximum(i, 0.25 * n), 0.0, None
    )  # [n], multiples of 1/4: exact
    if x.ndim == 1:
        return float(sum(Fraction(w) * Fraction(v) for w, v in zip(inside, x)) / Fraction(n, 2))
    return np.cumsum(x * inside, axis=-1)[..., -1] / (0.5 * n)


def bootstrap_ci(
    x,
    statistic=mean,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic` over the values x (one per seed): draw n of
    them with replacement `resamples` times and keep the central `level` of the statistic's values."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"bootstrap_ci wants a non-empty list of values, got shape {x.shape}")
    idx = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))  # [R, n]
    lo, hi = np.percentile(statistic(x[idx]), [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def ci_caution(xs: list[float], threshold: float) -> str:
    """What follows a mean-rule verdict: whether the 95% CI of the mean clears the threshold too (its lower bound
    beside a mean at or above it, its upper bound beside one below), and "few seeds" below MANY_SEEDS."""
    n = len(xs)
    if n < 2:
        return f"; few seeds ({n}): no CI"
    lo, hi = bootstrap_ci(xs)
    if statistics.fmean(xs) >= threshold:
        text = f"; CI lower bound {lo:.1f} " + ("clears it too" if lo >= threshold else "below it")
    else:
        text = f"; CI upper bound {hi:.1f} " + ("reaches it" if hi >= threshold else "below it too")
    return text + (f"; few seeds ({n})" if n < MANY_SEEDS else "")


def cell_runs(cell: Cell, runs_dir: Path) -> tuple[dict[int, dict], int, int]:
    """seed -> result.json (its folder as "dir") of the settings hash, failed where its final evaluation
    failed; and the counts of its other runs, never counted: (runs with other settings, smoke tries)."""
    runs, smoke = {}, []  # smoke: for each run of other settings, whether it is a smoke try
    for d in sorted(runs_dir.glob(f"{cell.slug}__s*__*")):
        r = read_result(d)
        if not d.name.endswith(cell.digest):
            spec = (r or {}).get("spec") or read_result(d, "spec.json") or {}
            smoke.append(spec.get("comparable", True) is False)
            continue
        if r is None:
            r = {
                "status": "incomplete",
                "error": "no result.json: the run is still going, or was killed",
            }
        elif r["status"] == "ok" and (r.get("summary") or {}).get("eval_return_mean") is None:
            r = {
                **r,
                "status": "failed",
                "error": "its final evaluation failed: the summary has no eval_return_mean",
            }
        r["dir"] = d
        runs[int(d.name.split("__")[2][1:])] = r
    return runs, len(smoke) - sum(smoke), sum(smoke)


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
    """('PASS' | 'FAIL' | 'partial' | 'stale' | 'n/a', reason) from the current runs: FAIL on what they already
    show; else 'stale' with runs on other code, else 'partial' with seeds to run or fewer than VERDICT_SEEDS
    finished. Rule "all" asks the threshold of every seed, rule "mean" of the mean."""
    if not script_path(cell.algo).exists():
        return "FAIL", f"script missing: algos/{cell.algo}.py"
    stale = {s: r for s, r in runs.items() if r.get("stale")}
    runs = {s: r for s, r in runs.items() if not r.get("stale")}
    ok = {s: r for s, r in runs.items() if r["status"] == "ok"}
    failures = [
        f"seed {s} {'crashed' if 'final evaluation' not in str(r.get('error')) else 'failed'}: {str(r.get('error'))[:120]}"
        for s, r in sorted(runs.items())
        if r["status"] == "failed"
    ]
    missing = [s for s in cell.seeds if s not in runs or runs[s]["status"] not in ("ok", "failed")]
    evals = {s: r["summary"]["eval_return_mean"] for s, r in ok.items()}
    t = cell.threshold
    enough = len(evals) >= VERDICT_SEEDS
    so_far = ""
    if t is not None and evals:
        if cell.pass_rule == "all":
            if below := [f"seed {s}: {v:.1f} < {t:g}" for s, v in sorted(evals.items()) if v < t]:
                failures.append(
                    "below threshold: " + "; ".join(below)
                )  # more seeds cannot change it
        else:
            m = statistics.fmean(evals.values())
            if m < t and not missing and enough:
                failures.append(
                    f"below threshold: mean {m:.1f} < {t:g}" + ci_caution(list(evals.values()), t)
                )
            so_far = f"; mean so far {m:.1f} ({'≥' if m >= t else '<'} {t:g})"
    by_why: dict[str, list[int]] = {}  # the stale runs' seeds by why they are stale
    for s, r in sorted(stale.items()):
        by_why.setdefault(r["stale"], []).append(s)
    stale_note = f"{len(stale)} run{'s' if len(stale) > 1 else ''} on other code: " + "; ".join(
        f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {why}"
        for why, seeds in by_why.items()
    )
    partial = f"partial: {len([s for s in cell.seeds if s in ok])} of {len(cell.seeds)} seeds"
    not_run = [str(s) for s in missing if s not in runs and s not in stale]
    unfinished = [
        f"seed {s} {runs[s]['status']}" for s in missing if s in runs
    ]  # running, interrupted or killed
    partial += (
        f" (not run: seed{'s' if len(not_run) > 1 else ''} {', '.join(not_run)})" if not_run else ""
    )
    partial += f" (unfinished: {', '.join(unfinished)})" if unfinished else ""
    if failures:
        return "FAIL", "; ".join(
            failures + ([partial] if missing else []) + ([stale_note] if stale else [])
        )
    if stale:
        return "stale", stale_note + (f"; {partial}" if not_run or unfinished else "")
    if missing:
        return "partial", partial + so_far
    if t is None:
        return "n/a", "no threshold set"
    if not enough:
        return "partial", (
            f"partial: {len(evals)} seed{'s' if len(evals) != 1 else ''}; a verdict needs {VERDICT_SEEDS} "
            f"finished seeds" + so_far
        )
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
    shown: dict[
        int, dict
    ]  # the ok runs the figures come from: the current ones, or the stale ones when none is current
    shown_stale: bool
    older: int = 0  # runs with other settings
    smoke: int = 0  # smoke tries

    @property
    def current_ok(self) -> dict[int, dict]:
        return {s: r for s, r in self.runs.items() if r["status"] == "ok" and not r.get("stale")}


def judge_suite(
    suite: Suite, runs_dir: Path, checker: Checker, algos=None, envs=None
) -> tuple[list[Judged], list[Cell]]:
    """The cells to list (those with runs, or selected with `algos` / `envs`) judged; and those left out."""
    listed, left_out = [], []
    for cell in suite.cells:
        if not (
            (not algos or cell.algo in algos) and (not envs or cell.env in envs)
        ):  # not selected
            continue
        runs, older, smoke = cell_runs(cell, runs_dir)
        if not (algos or envs) and not runs and not older:
            left_out.append(cell)
            continue
        mark_stale(cell, runs, checker)
        current = {s: r for s, r in runs.items() if r["status"] == "ok" and not r.get("stale")}
        stale_ok = {s: r for s, r in runs.items() if r["status"] == "ok" and r.get("stale")}
        listed.append(
            Judged(
                cell,
                runs,
                *verdict(cell, runs),
                current or stale_ok,
                not current and bool(stale_ok),
                older,
                smoke,
            )
        )
    return listed, left_out
