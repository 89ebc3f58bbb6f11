"""Pixel envs: Atari with the DQN paper's preprocessing, and MinAtar.

`make(env_id, training)` is `gym.make` for every id, plus the standard preprocessing when the id
is a pixel env (and, for vector envs, the optional rescaling described under `make`):

- Atari (any `ale_py` id, e.g. `ALE/Breakout-v5`, `BreakoutNoFrameskip-v4`), Mnih et al. 2015:
  up to 30 no-op actions at the start of a game, each action repeated for 4 frames with the max
  over the last two (flicker), 84x84 grayscale, the last 4 frames stacked ([4, 84, 84] uint8),
  FIRE pressed at the start of a game and after each lost life in games that wait for it. In a
  training env a lost life also ends the *episode* (the game goes on, and `reset()` continues it);
  an evaluation env plays full games. Rewards are left as they are: the scripts clip them to
  their sign for learning only, so logged and evaluated returns are real game scores.
  `ALE/*-v5` ids keep their sticky actions (the previous action repeats with probability 0.25);
  `*NoFrameskip-v4` ids have none.
- MinAtar (`MinAtar/<Game>-v0|v1`, Young & Tian 2019): observations turned from [10, 10, C]
  booleans into [C, 10, 10] uint8, and a time limit of MINATAR_MAX_STEPS steps, since most games
  have none and a good agent would never end an episode.

gymnasium 1.4 has the Atari preprocessing and the frame stack, not the episodic-life and
fire-reset wrappers; `terminal_on_life_loss=True` would restart the whole game at each life.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

MINATAR_MAX_STEPS = 10_000  # our choice: MinAtar registers no time limit
FRAME_STACK = 4


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
    """"atari", "minatar" or None (a vector env); ValueError for an unknown id."""
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        _register()
        try:
            spec = gym.spec(env_id)
        except gym.error.Error as e:
            hint = " (pixel envs need `pip install -r requirements-pixels.txt`)" if env_id.startswith(("ALE/", "MinAtar/")) or "NoFrameskip" in env_id else ""
            raise ValueError(f"unknown environment id {env_id!r} ({e}){hint}") from None
    if spec.namespace == "MinAtar":
        return "minatar"
    if spec.entry_point == "ale_py.env:AtariEnv":
        return "atari"
    return None


def make(env_id: str, training: bool = True, render_mode: str | None = None, scale_obs: bool = False, max_frames: int | None = None) -> gym.Env:
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
    kwargs = {} if render_mode is None else {"render_mode": render_mode}  # not every env takes the argument
    if env_kind == "atari":
        if max_frames is not None:
            kwargs["max_num_frames_per_episode"] = max_frames
        env = gym.make(env_id, frameskip=1, **kwargs)  # AtariPreprocessing skips the frames
        env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireReset(env)
        if training:
            env = EpisodicLife(env)
        return gym.wrappers.FrameStackObservation(env, FRAME_STACK)  # pads a new episode with its first frame
    if env_kind == "minatar":
        return ChannelsFirst(gym.make(env_id, max_episode_steps=MINATAR_MAX_STEPS, **kwargs))
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
    tables report, ends only when the last life is lost. `EpisodicLife` marks the other ends with
    info["life_lost"], which a SAME_STEP vector env moves into infos["final_info"].
    """
    done = np.logical_or(terminated, truncated)
    life_lost = infos.get("final_info", {}).get("life_lost")
    return done & ~np.asarray(life_lost, dtype=bool) if life_lost is not None else done


class FireReset(gym.Wrapper):
    """Presses FIRE after a reset and after each lost life, in games that wait for it to go on.

    Without it an agent can sit out a whole game doing nothing (Breakout's ball is only served
    on FIRE). The press is part of the step that lost the life, in training and evaluation alike.
    """

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)  # FIRE
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        if lives < self.lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(1)
            reward += fire_reward
        self.lives = lives
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """Ends the training episode when a life is lost (DQN paper); the game itself goes on.

    The step that loses a life (and not the game) returns terminated=True with info["life_lost"];
    the next `reset()` continues the same game from that observation, and only a real game over
    makes `reset()` start a new game. The value of the state after a lost life is therefore
    never bootstrapped, which is the point of the trick.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self.game_over, self.last = 0, True, None

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        self.game_over = terminated or truncated
        if lives < self.lives and not self.game_over:
            info = {**info, "life_lost": True}
            terminated = True
        self.lives, self.last = lives, (obs, info)
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:  # the game goes on from the frame where the life was lost
            obs, info = self.last
            info = {k: v for k, v in info.items() if k != "life_lost"}
        self.lives, self.game_over = self.env.unwrapped.ale.lives(), False
        return obs, info


class ChannelsFirst(gym.ObservationWrapper):
    """[H, W, C] booleans -> [C, H, W] uint8, the layout of torch's convolutions."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        h, w, c = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 1, (c, h, w), np.uint8)

    def observation(self, obs):
        return np.ascontiguousarray(np.moveaxis(obs, -1, 0), dtype=np.uint8)
