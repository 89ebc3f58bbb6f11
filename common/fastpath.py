"""A fast acting path that proves itself against the network's `forward()`.

Acting at a batch of one or a few envs is dominated by torch's per-op dispatch (~3 us for each
of ~10 ops), so the scripts can run a small MLP in numpy on zero-copy views of its parameters,
several times faster. Such a path reads the layers, not `forward()`: an edit to `forward()` (a
dueling head, a scaling, an extra module) would train with the new forward and act with the
old one. `checked` keeps the fast path only where it gives `forward()`'s outputs on a probe
batch, and otherwise acts through `forward()` and says so once. The scripts call it when they
build their acting function, which they do again after loading weights.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import torch


def probe_batch(shape: tuple[int, ...], n: int = 64) -> np.ndarray:
    """n standard-normal observations [n, *shape] from a fixed generator (never the run's)."""
    return np.random.default_rng(0).standard_normal((n, *shape)).astype(np.float32)


def checked(fast: Callable[[np.ndarray], np.ndarray] | None, plain: Callable[[np.ndarray], np.ndarray], probe: np.ndarray,
            what: str) -> Callable[[np.ndarray], np.ndarray]:
    """`fast` if it gives `plain`'s outputs on `probe` (up to float rounding), else `plain`.

    `plain` is the path through `forward()`; `fast` is None where the network's layers already
    rule the fast path out. The check draws nothing from the run's generators (torch's CPU
    generator is forked around it, in case `forward()` draws), so it changes no result.
    """
    if fast is None:
        return plain
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        expected = np.asarray(plain(probe))
        try:
            got = np.asarray(fast(probe))
        except (ValueError, TypeError, IndexError):  # shapes no longer fit the layers the fast path read
            got = None
    if got is not None and got.shape == expected.shape and np.allclose(got, expected, rtol=1e-4, atol=1e-5):
        return fast
    warnings.warn(f"{what}: the numpy fast path disagrees with forward() (the network was changed); acting through forward()",
                  stacklevel=2)
    return plain
