"""Statistics over a cell's seeds, for the report: mean, interquartile mean and their bootstrap intervals.

One seed's result moves with the machine (floating-point summation order, library versions), so
a verdict rests on what the seeds estimate, the mean, with an interval saying how well they pin
it down; the bootstrap's generator is seeded, so that the same runs give the same report.
"""

from __future__ import annotations

import math
import statistics

import numpy as np


def mean_std(xs: list[float]) -> tuple[float, float]:
    return (statistics.fmean(xs), statistics.pstdev(xs)) if xs else (math.nan, math.nan)


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
