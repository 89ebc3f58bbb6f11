"""Env makers: `gym.make` for every id, plus the standard preprocessing of pixel envs.

`make(env_id, training)` adds, when the id is a pixel env (and, for vector envs, the optional
rescaling described under `make`):

- Atari (any `ale_py` id, e.g. `ALE/Breakout-v5`, `BreakoutNoFrameskip-v4`): the DQN paper's
  preprocessing, in common/atari.py (imported for Atari ids only). Rewards are left as they are:
  the scripts clip them to their sign for learning only, so logged and evaluated returns are real
  game scores. `ALE/*-v5` ids keep their sticky actions (the previous action repeats with
  probability 0.25); `*NoFrameskip-v4` ids have none.
- MinAtar (`MinAtar/<Game>-v0|v1`): channels first and a time limit, in common/minatar.py (imported
  for MinAtar ids only).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def _register() -> None:
    """Register the ALE and MinAtar ids that are installed (the pixels extra)."""
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass
    try:
        import minatar.gym

        if "MinAtar/Breakout-v1" not in gym.registry:
            minatar.gym.register_envs()
    except ImportError:
        pass


def kind(env_id: str) -> str | None:
    """The id's kind: "atari", "minatar" or None (a vector env); ValueError for an unknown id."""
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        _register()
        try:
            spec = gym.spec(env_id)
        except gym.error.Error as e:
            pixel = env_id.startswith(("ALE/", "MinAtar/")) or "NoFrameskip" in env_id
            hint = (
                " (pixel envs need `pip install -r requirements/requirements-pixels.txt`)"
                if pixel
                else ""
            )
            raise ValueError(f"unknown environment id {env_id!r} ({e}){hint}") from None
    if spec.namespace == "MinAtar":
        return "minatar"
    if spec.entry_point == "ale_py.env:AtariEnv":
        return "atari"
    return None


def make(
    env_id: str,
    training: bool = True,
    render_mode: str | None = None,
    scale_obs: bool = False,
    max_frames: int | None = None,
) -> gym.Env:
    """One env, preprocessed as described above when `env_id` is a pixel env.

    `scale_obs` (vector envs only): each observation component with finite bounds in the
    observation space is mapped linearly from [low, high] to [-1, 1] (gymnasium's
    RescaleObservation); unbounded components pass unchanged. MountainCar's velocity, for one, lives
    in [-0.07, 0.07], too small beside the position for a network's first layer to use it.

    `max_frames` (Atari only): the game is truncated after this many emulator frames (ALE's
    `max_num_frames_per_episode`; None keeps ALE's 108,000, 30 minutes at 60 frames a second)."""
    env_kind = kind(env_id)
    if max_frames is not None and env_kind != "atari":
        raise ValueError(f"max_frames is for Atari ids; {env_id} is a {env_kind or 'vector'} env")
    if scale_obs and env_kind is not None:
        raise ValueError(f"--scale-obs is for vector observations; {env_id} is a {env_kind} env")
    # not every env takes it
    kwargs: dict = {} if render_mode is None else {"render_mode": render_mode}
    if env_kind == "atari":
        from common.atari import make_atari

        return make_atari(env_id, training, max_frames, **kwargs)
    if env_kind == "minatar":
        from common.minatar import make_minatar

        return make_minatar(env_id, **kwargs)
    env = gym.make(env_id, **kwargs)
    if not scale_obs:
        return env
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box):
        env.close()
        raise ValueError(f"--scale-obs needs a Box observation space; {env_id} has {space}")
    low = np.where(np.isfinite(space.low), -1.0, space.low).astype(space.dtype)
    high = np.where(np.isfinite(space.high), 1.0, space.high).astype(space.dtype)
    return gym.wrappers.RescaleObservation(env, low, high)


def game_over(terminated: np.ndarray, truncated: np.ndarray, infos: dict) -> np.ndarray:
    """Which envs finished a real episode this step [B] bool, for logging returns.

    A training Atari env ends an episode at each lost life; the game, whose score the published
    tables report, ends only when the last life is lost. `common.atari.EpisodicLife` marks the other
    ends with info["life_lost"], which a SAME_STEP vector env moves into infos["final_info"].
    """
    done = np.logical_or(terminated, truncated)
    life_lost = infos.get("final_info", {}).get("life_lost")
    return done & ~np.asarray(life_lost, dtype=bool) if life_lost is not None else done
