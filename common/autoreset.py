"""The true next observation under gymnasium 1.x SAME_STEP autoreset.

When an env's episode ends, a SAME_STEP vector env returns the *new* episode's first
observation in `next_obs` and the finished episode's real last observation in
infos["final_obs"] (mask infos["_final_obs"]). A transition, a replay row or a bootstrap value
must use the latter: valuing the reset observation would bootstrap a truncated episode from the
wrong state. Every row is then a real transition (there is no separate reset step).
"""

from __future__ import annotations

import numpy as np


def true_next_obs(next_obs: np.ndarray, infos: dict) -> np.ndarray:
    """The observation each env's step really led to [B, ...];
    `next_obs` itself when no episode ended."""
    if "_final_obs" not in infos:
        return next_obs
    real = next_obs.copy()
    for i in np.flatnonzero(infos["_final_obs"]):
        real[i] = np.reshape(infos["final_obs"][i], real.shape[1:])
    return real
