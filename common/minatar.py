"""MinAtar (`MinAtar/<Game>-v0|v1`, Young & Tian 2019, arXiv:1903.03176) for the scripts' networks:
observations turned from [10, 10, C] booleans into [C, 10, 10] uint8, the layout of torch's
convolutions, and a time limit of MINATAR_MAX_STEPS steps, since most games have none and a good
agent would never end an episode. common.pixels imports this file for MinAtar ids only.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

MINATAR_MAX_STEPS = 10_000  # our choice: MinAtar registers no time limit


def make_minatar(env_id: str, **kwargs: Any) -> gym.Env:
    """gym.make of a MinAtar id (its keyword arguments, e.g. render_mode),
    channels first, time-limited."""
    return ChannelsFirst(gym.make(env_id, max_episode_steps=MINATAR_MAX_STEPS, **kwargs))


class ChannelsFirst(gym.ObservationWrapper):
    """[H, W, C] booleans -> [C, H, W] uint8."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        h, w, c = env.observation_space.shape or ()
        self.observation_space = gym.spaces.Box(0, 1, (c, h, w), np.uint8)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(obs, -1, 0), dtype=np.uint8)
