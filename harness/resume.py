"""Resuming a run, imported with `--resume RUN` only: the stored arguments and the run folder
checked, metrics.csv cut back to the checkpoint, and the generators, envs and running episodes put
back as they were. `load`, `set_rng_state`, `set_env_state`, `unpack` and `load_into` are the
inverses of harness.checkpoint's `save`, `rng_state`, `env_state`, `pack` and `state_of`. Functions
over values: `checked_checkpoint` gives the checkpoint, `restore` what harness.run.Run puts back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from pathlib import Path
from typing import Any, TextIO

import gymnasium as gym
import numpy as np
import torch

from harness.checkpoint import FORMAT, layers
from harness.errors import InputError

# flags that may change when a run is resumed: its length, evaluation, logging and output
RESUMABLE_CHANGES = {
    "total_timesteps",
    "eval_every",
    "eval_episodes",
    "progress",
    "track",
    "wandb_project",
    "wandb_entity",
    "capture_video",
    "save_model",
    "checkpoint_every",
    "checkpoint_memory",
    "resume",
    "run_dir",
    "torch_threads",
    "tensorboard",
}


def stored_arguments(args_class: type, folder: Path) -> dict:
    """The fields of `args_class` stored in the run folder's config.json (lists as tuples);
    checked before train() builds envs and memory, to fail at once."""
    stored = stored_config(folder)
    if not (folder / "checkpoint.pt").is_file():
        raise InputError(
            f"--resume {folder}: no checkpoint.pt there "
            "(was the run started with --checkpoint-every?)"
        )
    defaults = {f.name: stored[f.name] for f in dataclasses.fields(args_class) if f.name in stored}
    return {name: tuple(v) if isinstance(v, list) else v for name, v in defaults.items()}


def stored_config(folder: Path) -> dict:
    config = folder / "config.json"
    if not config.is_file():
        raise InputError(f"--resume {folder}: no config.json there (not a run folder)")
    try:
        stored = json.loads(config.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"--resume {folder}: config.json cannot be read ({e})") from None
    if not isinstance(stored, dict) or not stored.get("algo"):
        raise InputError(
            f"--resume {folder}: its config.json names no algorithm (not the config.json of a run)"
        )
    return stored


def checked_checkpoint(
    folder: Path, algo: str, config: dict, columns: list[str], defaults: dict
) -> dict:
    """The checkpoint of the run folder `folder`, once its config, checkpoint and metrics.csv's
    `columns` are checked against this run's `config` (InputError, before anything is written);
    `defaults`: the run flags' defaults, for folders written before a flag existed."""
    stored = stored_config(folder)
    if stored.get("algo") != algo:
        raise InputError(f"--resume {folder}: that run is {stored.get('algo')!r}, not {algo}")
    for key in sorted(set(stored) | set(config)):
        if key not in RESUMABLE_CHANGES and stored.get(key, defaults.get(key)) != config.get(key):
            raise InputError(
                f"--resume {folder}: --{key.replace('_', '-')} was {stored.get(key)!r} "
                f"in that run, {config.get(key)!r} now; "
                "only the run length, evaluation and logging flags may change"
            )
    try:
        saved = load(folder / "checkpoint.pt")
    except ValueError as e:  # missing, truncated or not ours
        raise InputError(f"--resume {folder}: {e}") from None
    if saved.get("format") != FORMAT or saved.get("algo") != algo:
        raise InputError(
            f"{folder / 'checkpoint.pt'} is a {saved.get('algo')!r} checkpoint "
            f"(format {saved.get('format')}), not {algo}'s"
        )
    metrics = folder / "metrics.csv"
    with open(metrics, newline="") as f:
        header = f.readline().strip().split(",")
    if header != columns:
        raise InputError(f"{metrics} has columns {header}, expected {columns}")
    return saved


def reopen_metrics(folder: Path, saved: dict, config: dict) -> TextIO:
    """metrics.csv, open to append, cut back to the checkpoint `saved`; config.json rewritten with
    this run's `config` (the new length or logging flags)."""
    metrics = folder / "metrics.csv"
    # rows after the checkpoint are not part of this history
    os.truncate(metrics, saved["metrics_bytes"])
    file = open(metrics, "a", newline="")
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return file


@dataclasses.dataclass
class Restored:
    """What a resumed run continues from: the observation and step, the running episodes (return
    and length [B], None where the envs were reset), the last returns, a note on the envs."""

    obs: np.ndarray
    global_step: int
    ep_return: np.ndarray | None
    ep_length: np.ndarray | None
    recent_returns: list[float]
    env_note: str

    @property
    def envs_reset(self) -> bool:
        return self.ep_return is None


def restore(saved: dict, envs: gym.vector.VectorEnv, objects: dict, seed: int) -> Restored:
    """The checkpoint `saved` put back: the generators, the `objects` (`load_into`) and the envs'
    state (or the envs reset with `seed` plus the step, where it was not captured)."""
    set_rng_state(saved["rng"])
    state = unpack(saved["state"])
    obs = unpack(saved["obs"])
    for name, target in objects.items():
        load_into(target, state[name], name)
    episodes = unpack(saved["episodes"])
    if saved["envs"] is not None:
        set_env_state(envs, saved["envs"])  # type: ignore[arg-type]  # captured: a SyncVectorEnv
        return Restored(
            obs,
            saved["global_step"],
            episodes["return"],
            episodes["length"],
            episodes["recent"],
            "restored",
        )
    obs = envs.reset(seed=seed + saved["global_step"])[0].reshape(obs.shape)
    return Restored(
        obs,
        saved["global_step"],
        None,
        None,
        episodes["recent"],  # finished episodes still count
        f"episodes restarted on resume: {saved['envs_note']}",
    )


def load_into(target: Any, value: Any, name: str) -> None:
    """Put a checkpoint's `value` back into the object it was taken from
    (harness.checkpoint.state_of): load_state_dict, a numpy generator's state, an array's or a
    tensor's values in place. Nothing where either is None (a memory left out of the checkpoint, or
    out of this run's: it is refilled)."""
    if target is None or value is None:
        return
    if hasattr(target, "load_state_dict"):
        target.load_state_dict(value)
    elif isinstance(target, np.random.Generator):
        target.bit_generator.state = value
    elif isinstance(target, np.ndarray):
        target[...] = value
    elif isinstance(target, torch.Tensor):
        # a leaf that requires grad (a learned temperature) takes its values too
        with torch.no_grad():
            target.copy_(torch.as_tensor(value))
    else:
        raise TypeError(
            f"cannot put the checkpoint's {name!r} back into a {type(target).__name__} in place; "
            "give the checkpoint an object with state_dict/load_state_dict, "
            "a generator, an array or a tensor"
        )


def load(path: str | Path) -> dict:
    """Read a checkpoint written by harness.checkpoint.save;
    ValueError (one line) if it is missing, truncated or not ours."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, bad magic number, a pickle that wants code, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(
            f"checkpoint {path} cannot be read, it is truncated or corrupted "
            f"({type(e).__name__}: {first[:120]})"
        ) from None
    if not isinstance(state, dict) or "format" not in state:
        raise ValueError(f"{path} is not a checkpoint written by these scripts")
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _decode(value: Any, current: Any = None) -> Any:
    if not isinstance(value, dict):
        return value
    if "__generator__" in value:
        if current is None:  # an env that was never reset creates its generator lazily
            current = np.random.Generator(
                getattr(np.random, value["__generator__"]["bit_generator"])()
            )
        # same object: whoever holds it sees the state
        current.bit_generator.state = value["__generator__"]
        return current
    if "__ndarray__" in value:
        return value["__ndarray__"].numpy().copy()
    if "__npscalar__" in value:
        return value["__npscalar__"].numpy()[()]
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    return [_decode(v) for v in value["__list__"]]


def set_env_state(envs: gym.vector.SyncVectorEnv, state: dict) -> None:
    """Put the state from harness.checkpoint.env_state back into envs built the same way;
    ValueError if they differ."""
    if len(state["envs"]) != len(envs.envs):
        raise ValueError(
            f"the checkpoint holds {len(state['envs'])} envs, the run has {len(envs.envs)}"
        )
    for env, stored in zip(envs.envs, state["envs"]):
        mine = layers(env)
        if [type(layer).__name__ for layer in mine] != [layer["type"] for layer in stored]:
            raise ValueError("the checkpoint's env wrappers differ from this run's")
        for layer, saved in zip(mine, stored):
            for name, value in saved["attrs"].items():
                if name == "__mujoco__":
                    import mujoco

                    mujoco.mj_setState(
                        layer.model, layer.data, value.numpy(), mujoco.mjtState.mjSTATE_INTEGRATION
                    )
                    mujoco.mj_forward(layer.model, layer.data)
                else:
                    setattr(layer, name, _decode(value, getattr(layer, name, None)))
    for space, saved in zip((envs.action_space, envs.single_action_space), state["spaces"]):
        space.np_random.bit_generator.state = saved


def unpack(obj: Any) -> Any:
    if (
        isinstance(obj, dict)
        and len(obj) == 1
        and next(iter(obj)) in ("__ndarray__", "__npscalar__")
    ):
        return _decode(obj)
    if isinstance(obj, dict):
        return {k: unpack(v) for k, v in obj.items()}
    return type(obj)(unpack(v) for v in obj) if isinstance(obj, (list, tuple)) else obj
