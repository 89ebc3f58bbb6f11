"""Checkpoint files: atomic writes, code-free loading (`weights_only`, which refuses numpy: `pack` stores
arrays as tagged tensors), every generator, and each sub-env's state with its wrappers (the time limit's
step count, the generator; MuJoCo's through `mj_getState`, so stepping on is bitwise identical). An env
holding anything else (e.g. a Box2D world) cannot be captured: `env_state` says why, and the script
restarts the episodes on resume. What a checkpoint holds is the script's dict.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch


def save(path: str | Path, state: dict) -> None:
    """Write `state` to `path` atomically: a process killed while writing leaves the previous file whole."""
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


def load(path: str | Path) -> dict:
    """Read a checkpoint written by `save`; ValueError (one line) if it is missing, truncated or not ours."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, bad magic number, a pickle that wants code, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(f"checkpoint {path} cannot be read, it is truncated or corrupted "
                         f"({type(e).__name__}: {first[:120]})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise ValueError(f"{path} is not a checkpoint written by these scripts")
    return state


def rng_state() -> dict:
    """python `random`, numpy's global generator, torch CPU and (if present) CUDA generators."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class _Uncapturable(Exception):
    pass


# constants or bookkeeping that never change the next step; everything else must be captured
_SKIP = {"env", "spec", "_cached_spec", "metadata", "_metadata", "_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs",
         "_previous_data", "observation_structure", "render_mode", "screen", "clock", "isopen", "_np_random_seed"}
_MUJOCO_ENV = "gymnasium.envs.mujoco.mujoco_env.MujocoEnv"


def _encode(value, where: str):
    """A plain attribute as something `weights_only` loads back, tagged so it decodes to its type."""
    if isinstance(value, np.generic):  # before the plain types: np.float64 is a float
        return {"__npscalar__": torch.from_numpy(np.array(value))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": torch.from_numpy(value.copy())}
    if isinstance(value, (tuple, list)):
        return {"__tuple__" if isinstance(value, tuple) else "__list__": [_encode(v, where) for v in value]}
    raise _Uncapturable(f"{where} is a {type(value).__name__}")


def _decode(value, current=None):
    if not isinstance(value, dict):
        return value
    if "__generator__" in value:
        if current is None:  # an env that was never reset creates its generator lazily
            current = np.random.Generator(getattr(np.random, value["__generator__"]["bit_generator"])())
        current.bit_generator.state = value["__generator__"]  # same object: whoever holds it sees the state
        return current
    if "__ndarray__" in value:
        return value["__ndarray__"].numpy().copy()
    if "__npscalar__" in value:
        return value["__npscalar__"].numpy()[()]
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    return [_decode(v) for v in value["__list__"]]


def _layers(env: gym.Env) -> list[gym.Env]:  # the wrappers and the env itself, outermost first
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _capture(layer: gym.Env) -> dict:
    # a gymnasium MujocoEnv, found without importing mujoco (an extra that may not be installed)
    mujoco_layer = any(f"{c.__module__}.{c.__name__}" == _MUJOCO_ENV for c in type(layer).__mro__)
    skip = _SKIP | ({"model", "data", "mujoco_renderer"} if mujoco_layer else set())
    attrs = {name: _encode(value, f"{type(layer).__name__}.{name}") for name, value in vars(layer).items()
             if name not in skip and not isinstance(value, gym.Space)}
    if mujoco_layer:
        import mujoco

        sim = np.empty(mujoco.mj_stateSize(layer.model, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(layer.model, layer.data, sim, mujoco.mjtState.mjSTATE_INTEGRATION)
        attrs["__mujoco__"] = torch.from_numpy(sim)
    return {"type": type(layer).__name__, "attrs": attrs}


def env_state(envs: gym.vector.SyncVectorEnv) -> tuple[dict | None, str]:
    """(state, "") for a SyncVectorEnv whose sub-envs can be captured, else (None, the reason)."""
    if not isinstance(envs, gym.vector.SyncVectorEnv):
        return None, f"{type(envs).__name__} is not a SyncVectorEnv"
    try:
        sub = [[_capture(layer) for layer in _layers(env)] for env in envs.envs]
    except _Uncapturable as e:
        return None, f"the env state cannot be captured ({e})"
    spaces = [space.np_random.bit_generator.state for space in (envs.action_space, envs.single_action_space)]
    return {"envs": sub, "spaces": spaces}, ""


def set_env_state(envs: gym.vector.SyncVectorEnv, state: dict) -> None:
    """Put the state from `env_state` back into envs built the same way; ValueError if they differ."""
    if len(state["envs"]) != len(envs.envs):
        raise ValueError(f"the checkpoint holds {len(state['envs'])} envs, the run has {len(envs.envs)}")
    for env, layers in zip(envs.envs, state["envs"]):
        mine = _layers(env)
        if [type(layer).__name__ for layer in mine] != [layer["type"] for layer in layers]:
            raise ValueError("the checkpoint's env wrappers differ from this run's")
        for layer, saved in zip(mine, layers):
            for name, value in saved["attrs"].items():
                if name == "__mujoco__":
                    import mujoco

                    mujoco.mj_setState(layer.model, layer.data, value.numpy(), mujoco.mjtState.mjSTATE_INTEGRATION)
                    mujoco.mj_forward(layer.model, layer.data)
                else:
                    setattr(layer, name, _decode(value, getattr(layer, name, None)))
    for space, saved in zip((envs.action_space, envs.single_action_space), state["spaces"]):
        space.np_random.bit_generator.state = saved


def pack(obj):
    """A script's checkpoint dict with its numpy arrays and scalars as tagged tensors; dicts, lists and tuples
    are walked, tensors and plain values kept. `unpack` is its inverse."""
    if isinstance(obj, dict):
        return {k: pack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack(v) for v in obj)
    return _encode(obj, "") if isinstance(obj, (np.ndarray, np.generic)) else obj


def unpack(obj):
    if isinstance(obj, dict) and len(obj) == 1 and next(iter(obj)) in ("__ndarray__", "__npscalar__"):
        return _decode(obj)
    if isinstance(obj, dict):
        return {k: unpack(v) for k, v in obj.items()}
    return type(obj)(unpack(v) for v in obj) if isinstance(obj, (list, tuple)) else obj
