"""A fast acting path that proves itself against the network's `forward()`.

Acting at a batch of a few envs is dominated by torch's per-op dispatch (~3 us for each of ~10
ops), so the scripts run a small MLP in numpy on zero-copy views of its parameters, several times
faster. Such a path reads the layers, not `forward()`: an edit to `forward()` (a dueling head, a
scaling) would train with the new forward and act with the old one. `checked` keeps the fast path
only where it gives `forward()`'s outputs on a probe batch, else acts through `forward()` and says
so once. The scripts build their acting function again after loading weights.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import torch
from torch import nn


# an acting function: observations [B, ...] -> outputs [B, ...]
Act = Callable[[np.ndarray], np.ndarray]


def numpy_mlp(
    layers: list[nn.Module],
    device: torch.device,
    net: nn.Module,
    *others: nn.Module | nn.Parameter | None,
) -> Act | None:
    """obs [B, ...] -> `layers` applied in order [B, out], in numpy, on zero-copy views of their
    parameters (which the optimizer updates in place). None (act through `forward()`) unless on
    the CPU, `layers` are Linear, ReLU and Tanh modules, and every parameter of `net` is in
    `layers` or `others` (parts acting does not use, e.g. a value head): elsewhere it is a part
    the numpy path would leave out."""
    linear = [m for m in layers if isinstance(m, nn.Linear)]
    supported = all(isinstance(m, (nn.Linear, nn.ReLU, nn.Tanh)) for m in layers)
    if device.type != "cpu" or not linear or not supported:
        return None
    known = {
        id(p)
        for part in [*layers, *others]
        if isinstance(part, nn.Module)
        for p in part.parameters()
    }
    known |= {id(part) for part in others if isinstance(part, nn.Parameter)}
    if any(id(p) not in known for p in net.parameters()):
        return None

    def numpy_step(m: nn.Module):
        """A Linear as views of its weight [in, out] and bias [out];
        an activation as a numpy function."""
        if isinstance(m, nn.Linear):
            return m.weight.detach().numpy().T, m.bias.detach().numpy()
        return np.tanh if isinstance(m, nn.Tanh) else (lambda x: np.maximum(x, 0, out=x))

    steps = [numpy_step(m) for m in layers]

    def forward(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        for step in steps:
            x = step(x) if callable(step) else x @ step[0] + step[1]
        return x

    forward.in_features = linear[0].in_features  # type: ignore[attr-defined]  # read by checked()
    return forward


def probe_batch(shape: tuple[int, ...], n: int = 64) -> np.ndarray:
    """n standard-normal observations [n, *shape] from a fixed generator (never the run's)."""
    return np.random.default_rng(0).standard_normal((n, *shape)).astype(np.float32)


def checked(fast: Act | None, plain: Act, what: str, probe: np.ndarray | None = None) -> Act:
    """`fast` if it gives `plain`'s (`forward()`'s) outputs on `probe` (default:
    `fast.in_features`-vectors) up to float rounding, else `plain`; `fast` None: ruled out already.
    The check draws nothing from the run's generators (torch's CPU generator is forked around it),
    so it changes no result."""
    if fast is None:
        return plain
    probe = probe_batch((fast.in_features,)) if probe is None else probe  # type: ignore[attr-defined]
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        expected = np.asarray(plain(probe))
        try:
            got = np.asarray(fast(probe))
        except (ValueError, TypeError, IndexError):
            # shapes no longer fit the layers the fast path read
            got = None
    if (
        got is not None
        and got.shape == expected.shape
        and np.allclose(got, expected, rtol=1e-4, atol=1e-5)
    ):
        return fast
    why = "the numpy fast path disagrees with forward() (the network was changed)"
    warnings.warn(f"{what}: {why}; acting through forward()", stacklevel=2)
    return plain
