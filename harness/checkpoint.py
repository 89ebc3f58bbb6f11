"""Checkpoint files: atomic writes, code-free loading, every generator and each env's own state.

What a checkpoint holds is the script's business (a dict built in its `train()`); this module
only writes and reads that dict safely and captures the state no script should have to know
about:

- `save(path, state)`: temporary file in the same folder, flush, fsync, `os.replace`, fsync of
  the folder. A process killed while writing leaves the previous checkpoint untouched.
- `load(path)`: `torch.load(..., weights_only=True)`, so a checkpoint never executes code; a
  truncated or corrupted file raises ValueError with one line.
- `rng_state()` / `set_rng_state()`: python's `random`, numpy's global generator, torch's CPU
  and CUDA generators. `generator_state(rng)` for a `np.random.Generator` (plain ints, which
  `weights_only` accepts; numpy arrays it refuses).
- `env_state(envs)` / `set_env_state(envs, state)`: each sub-env of a vector env, wrappers
  included (the time limit's step count, the env's generator and physical state), and the
  vector env's action-space generators. Plain attributes are captured generically; MuJoCo envs
  through `mj_getState` (the full integration state, so stepping on is bitwise identical).
  An env holding anything else (e.g. a Box2D world) cannot be captured: `env_state` returns
  None with the reason, and the script restarts the episodes on resume.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch


def save(path: str | Path, state: dict) -> None:
    """Write `state` to `path` atomically: a reader sees the old file or the new one, never half."""
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
        if tmp.exists():
            tmp.unlink()
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
        raise ValueError(f"checkpoint {path} cannot be read, it is truncated or corrupted ({type(e).__name__}: {first[:120]})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise ValueError(f"{path} is not a checkpoint written by these scripts")
    return state


# generators ------------------------------------------------------------------------------------
def generator_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def set_generator_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


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


# env state -------------------------------------------------------------------------------------
class _Uncapturable(Exception):
    pass


# constants or bookkeeping that never change the next step; everything else must be captured
_SKIP = {"env", "spec", "_cached_spec", "metadata", "_metadata", "_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs",
         "_previous_data", "observation_structure", "render_mode", "screen", "clock", "isopen", "_np_random_seed"}


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


def _layers(env: gym.Env):
    while True:
        yield env
        if not isinstance(env, gym.Wrapper):
            return
        env = env.env


def _mujoco_env(layer) -> bool:
    try:
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
    except Exception:  # mujoco not installed
        return False
    return isinstance(layer, MujocoEnv)


def _capture_env(env: gym.Env) -> list[dict]:
    layers = []
    for layer in _layers(env):
        attrs = {}
        mujoco_layer = _mujoco_env(layer)
        for name, value in vars(layer).items():
            if name in _SKIP or isinstance(value, gym.Space):
                continue
            if mujoco_layer and name in ("model", "data", "mujoco_renderer"):
                continue
            attrs[name] = _encode(value, f"{type(layer).__name__}.{name}")
        if mujoco_layer:
            import mujoco

            spec = mujoco.mjtState.mjSTATE_INTEGRATION
            sim = np.empty(mujoco.mj_stateSize(layer.model, spec))
            mujoco.mj_getState(layer.model, layer.data, sim, spec)
            attrs["__mujoco__"] = torch.from_numpy(sim)
        layers.append({"type": type(layer).__name__, "attrs": attrs})
    return layers


def env_state(envs: gym.vector.SyncVectorEnv) -> tuple[dict | None, str]:
    """(state, "") for a SyncVectorEnv whose sub-envs can be captured, else (None, the reason)."""
    if not isinstance(envs, gym.vector.SyncVectorEnv):
        return None, f"{type(envs).__name__} is not a SyncVectorEnv"
    try:
        sub = [_capture_env(env) for env in envs.envs]
    except _Uncapturable as e:
        return None, f"the env state cannot be captured ({e})"
    spaces = [generator_state(s.np_random) for s in (envs.action_space, envs.single_action_space)]
    return {"envs": sub, "spaces": spaces}, ""


def set_env_state(envs: gym.vector.SyncVectorEnv, state: dict) -> None:
    """Put the state from `env_state` back into envs built the same way; ValueError if they differ."""
    if len(state["envs"]) != len(envs.envs):
        raise ValueError(f"the checkpoint holds {len(state['envs'])} envs, the run has {len(envs.envs)}")
    for env, layers in zip(envs.envs, state["envs"]):
        mine = list(_layers(env))
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
        set_generator_state(space.np_random, saved)


# the script's own state ------------------------------------------------------------------------
def pack(obj):
    """A script's checkpoint dict with its numpy arrays and scalars as tagged tensors (weights_only
    refuses numpy); dicts, lists and tuples are walked, tensors and plain values kept."""
    if isinstance(obj, dict):
        return {k: pack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack(v) for v in obj)
    if isinstance(obj, (np.ndarray, np.generic)):
        return _encode(obj, "")
    return obj


def unpack(obj):
    """Inverse of `pack`."""
    if isinstance(obj, dict):
        if len(obj) == 1 and next(iter(obj)) in ("__ndarray__", "__npscalar__"):
            return _decode(obj)
        return {k: unpack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(unpack(v) for v in obj)
    return obj
