"""Writing checkpoints, in every run (a stop signal writes one): atomic files, code-free content
(`weights_only` loading refuses numpy: `pack` stores arrays as tagged tensors), every generator, and
each sub-env's state with its wrappers (the time limit's count, the generator; MuJoCo's through
`mj_getState`: stepping on is bitwise identical). Anything else (a Box2D world) cannot be captured:
`env_state` says why, and the script restarts the episodes on resume. The script's dict is what a
checkpoint holds; harness/resume.py reads one back. Functions over values: `content` builds the
dict a checkpoint holds, `save` writes it; harness.run.Run decides when.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import torch

if TYPE_CHECKING:
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

FORMAT = 1  # a checkpoint's "format": harness/resume.py refuses any other


def save(path: str | Path, state: dict) -> None:
    """Write `state` to `path` atomically:
    a process killed while writing leaves the previous file whole."""
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.tmp-*"):  # left by a process killed while writing
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)


def rng_state() -> dict:
    """python `random`, numpy's global generator, torch CPU and (if present) CUDA generators."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [
            kind,
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(pos),
            int(has_gauss),
            float(cached),
        ],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


class _Uncapturable(Exception):
    pass


# constants or bookkeeping that never change the next step; everything else must be captured
_SKIP = {
    "env",
    "spec",
    "_cached_spec",
    "metadata",
    "_metadata",
    "_saved_kwargs",
    "_ezpickle_args",
    "_ezpickle_kwargs",
    "_previous_data",
    "observation_structure",
    "render_mode",
    "screen",
    "clock",
    "isopen",
    "_np_random_seed",
}
_MUJOCO_ENV = "gymnasium.envs.mujoco.mujoco_env.MujocoEnv"


def _encode(value: Any, where: str) -> Any:
    """A plain attribute as something `weights_only` loads back,
    tagged so it decodes to its type."""
    if isinstance(value, np.generic):  # before the plain types: np.float64 is a float
        return {"__npscalar__": torch.from_numpy(np.array(value))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": torch.from_numpy(value.copy())}
    if isinstance(value, (tuple, list)):
        return {
            "__tuple__" if isinstance(value, tuple) else "__list__": [
                _encode(v, where) for v in value
            ]
        }
    raise _Uncapturable(f"{where} is a {type(value).__name__}")


def layers(env: gym.Env) -> list:  # the wrappers and the env itself, outermost first
    found = [env]
    while isinstance(found[-1], gym.Wrapper):
        found.append(found[-1].env)
    return found


def _capture(layer: gym.Env) -> dict:  # one of layers()
    # a gymnasium MujocoEnv, found without importing mujoco (an extra that may not be installed)
    mujoco_layer = any(f"{c.__module__}.{c.__name__}" == _MUJOCO_ENV for c in type(layer).__mro__)
    skip = _SKIP | ({"model", "data", "mujoco_renderer"} if mujoco_layer else set())
    attrs = {
        name: _encode(value, f"{type(layer).__name__}.{name}")
        for name, value in vars(layer).items()
        if name not in skip and not isinstance(value, gym.Space)
    }
    if mujoco_layer:
        import mujoco

        mujoco_env = cast("MujocoEnv", layer)  # found above by its class name
        sim = np.empty(mujoco.mj_stateSize(mujoco_env.model, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(
            mujoco_env.model, mujoco_env.data, sim, mujoco.mjtState.mjSTATE_INTEGRATION
        )
        attrs["__mujoco__"] = torch.from_numpy(sim)
    return {"type": type(layer).__name__, "attrs": attrs}


def env_state(envs: gym.vector.VectorEnv) -> tuple[dict | None, str]:
    """(state, "") for a SyncVectorEnv whose sub-envs can be captured, else (None, the reason)."""
    if not isinstance(envs, gym.vector.SyncVectorEnv):
        return None, f"{type(envs).__name__} is not a SyncVectorEnv"
    try:
        sub = [[_capture(layer) for layer in layers(env)] for env in envs.envs]
    except _Uncapturable as e:
        return None, f"the env state cannot be captured ({e})"
    spaces = [
        space.np_random.bit_generator.state
        for space in (envs.action_space, envs.single_action_space)
    ]
    return {"envs": sub, "spaces": spaces}, ""


def state_of(obj: Any) -> Any:
    """What a checkpoint keeps of one of the objects a script's checkpoint() names: its
    state_dict(), a numpy generator's state, an array, a tensor or a plain value as it is
    (harness.resume.load_into puts it back)."""
    if hasattr(obj, "state_dict"):
        return obj.state_dict()
    if isinstance(obj, np.random.Generator):
        return obj.bit_generator.state
    return obj


def pack(obj: Any) -> Any:
    """A script's checkpoint dict with its numpy arrays and scalars as tagged tensors; dicts, lists
    and tuples are walked, tensors and plain values kept. `harness.resume.unpack` is its inverse."""
    if isinstance(obj, dict):
        return {k: pack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack(v) for v in obj)
    return _encode(obj, "") if isinstance(obj, (np.ndarray, np.generic)) else obj


def content(
    algo: str,
    global_step: int,
    resumes: list[int],
    envs: gym.vector.VectorEnv,
    obs: np.ndarray,
    episodes: dict,
    objects: dict,
) -> dict:
    """A run's checkpoint: the state of `objects` (`state_of`) with the step, the steps it was
    resumed at, the envs and `obs`, the running `episodes` (return, length, recent) and every
    generator (Run adds metrics.csv's length and the clock when it writes one)."""
    state = {name: state_of(obj) for name, obj in objects.items()}
    env, note = env_state(envs)
    return {
        "format": FORMAT,
        "algo": algo,
        "global_step": global_step,
        "resumes": resumes,
        "rng": rng_state(),
        "envs": env,
        "envs_note": note,
        "obs": pack(obs),
        "episodes": pack(episodes),
        "state": pack(state),
    }
