"""Atari, as the DQN paper played it (Mnih et al. 2015): its preprocessing and a replay memory for
its frame stacks. Imported only for Atari ids (common.pixels.make, the scripts' `if atari:`), so a
script copied for other envs runs without this file.

- `make_atari(env_id, training, max_frames)`: up to 30 no-op actions at the start of a game, each
  action repeated for 4 frames with the max over the last two (flicker), 84x84 grayscale, the last
  4 frames stacked ([4, 84, 84] uint8), FIRE pressed at the start of a game and after each lost
  life in games that wait for it (`FireReset`); in a training env a lost life also ends the
  *episode* (`EpisodicLife`: the game goes on, and `reset()` continues it); an evaluation env
  plays full games. gymnasium 1.4 has the preprocessing and the frame stack, not these two
  wrappers; `terminal_on_life_loss=True` would restart the whole game at each life.
- `FrameMemory`: the frame stacks' replay memory, each frame stored once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np
import torch

from common.replay import Batch

if TYPE_CHECKING:
    from ale_py.env import AtariEnv

FRAME_STACK = 4


def make_atari(
    env_id: str, training: bool = True, max_frames: int | None = None, **kwargs: Any
) -> gym.Env:
    """One Atari env with the paper's preprocessing; `max_frames` truncates a game after that many
    emulator frames (ALE's `max_num_frames_per_episode`; None keeps ALE's 108,000)."""
    if max_frames is not None:
        kwargs["max_num_frames_per_episode"] = max_frames
    env = gym.make(env_id, frameskip=1, **kwargs)  # AtariPreprocessing skips the frames
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True
    )
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]  # ALE's
        env = FireReset(env)
    if training:
        env = EpisodicLife(env)
    # pads a new episode with its first frame
    return gym.wrappers.FrameStackObservation(env, FRAME_STACK)


class FireReset(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Presses FIRE after a reset and after each lost life, in games that wait for it to go on.

    Without it an agent can sit out a whole game doing nothing (Breakout's ball is only served
    on FIRE). The press is part of the step that lost the life, in training and evaluation alike.
    (RecordConstructorArgs: gymnasium can re-make the env from its spec.)
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)  # FIRE
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        self.lives = cast("AtariEnv", self.env.unwrapped).ale.lives()
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = cast("AtariEnv", self.env.unwrapped).ale.lives()
        if lives < self.lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(1)
            reward = cast(float, reward) + cast(float, fire_reward)
        self.lives = lives
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Ends the training episode when a life is lost (DQN paper); the game itself goes on.

    The step that loses a life (and not the game) returns terminated=True with info["life_lost"];
    the next `reset()` continues the same game from that observation, and only a real game over
    makes `reset()` start a new game. The value of the state after a lost life is therefore
    never bootstrapped, which is the point of the trick.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        self.lives = 0
        self.game_over = True
        self.last: tuple[Any, dict[str, Any]] | None = None  # (obs, info) a reset goes on from

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = cast("AtariEnv", self.env.unwrapped).ale.lives()
        self.game_over = terminated or truncated
        if lives < self.lives and not self.game_over:
            info = {**info, "life_lost": True}
            terminated = True
        self.lives = lives
        self.last = (obs, info)
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:
            # the game goes on from its last frame:
            # where the life was lost (or the reset, without a step)
            obs, info = cast("tuple[Any, dict[str, Any]]", self.last)  # set: no game over yet
            info = {k: v for k, v in info.items() if k != "life_lost"}
        lives = cast("AtariEnv", self.env.unwrapped).ale.lives()
        self.lives = lives
        self.game_over = False
        self.last = (obs, info)
        return obs, info


class FrameMemory:
    """Replay memory for frame stacks ([k, H, W] uint8, e.g. Atari's 4 x 84 x 84) that stores each
    frame once and rebuilds the stacks when sampling.

    A memory that stores each transition's stack and next stack holds every frame 2k times
    (1M Atari transitions: ~56 GB, ~28 GB sharing obs and next obs); this one holds it once (~7 GB).

    Each env writes its own ring of frames, in the order it saw them: the newest frame of every
    observation, plus at each episode end the true final frame and then the new episode's first
    frame. The transition out of entry e goes to entry e + 1, so the stack of entry e is the
    frames e-k+1 .. e of the same episode, padded at the episode's start with its first frame
    (what `FrameStackObservation`'s default padding gives the agent), and the next stack is the
    same built at e + 1. Entries holding a final frame have no transition out of them and are
    never sampled; neither are the oldest k - 1 entries of a ring, whose earlier frames may
    already be overwritten.

    Args:
        capacity: transitions kept over all envs (each env keeps capacity / num_envs entries);
        frame_shape: [H, W] of one frame; stack: k; num_envs: envs calling `add` together;
        device: where sampled tensors go (the storage stays in host memory);
        seed: sampler seed, as for `ReplayMemory`.
    """

    _ARRAYS = (
        "frames",
        "actions",
        "rewards",
        "terminated",
        "has_transition",
        "first",
        "written",
        "starts_episode",
    )

    def __init__(
        self,
        capacity: int,
        frame_shape: tuple[int, int],
        stack: int,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | np.random.SeedSequence | None = None,
    ):
        if capacity <= 0 or stack <= 0 or num_envs <= 0:
            raise ValueError(
                "capacity, stack and num_envs must be positive, "
                f"got {capacity}, {stack}, {num_envs}"
            )
        self.capacity = capacity
        self.stack = stack
        self.num_envs = num_envs
        self.ring = max(-(-capacity // num_envs), stack + 1)  # entries per env
        self.device = torch.device(device)
        shape = (num_envs, self.ring)
        self.frames = np.zeros((*shape, *frame_shape), dtype=np.uint8)
        self.actions = np.zeros(shape, dtype=np.int64)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=np.float32)
        self.has_transition = np.zeros(shape, dtype=bool)  # entry e has a transition e -> e + 1
        self.first = np.zeros(shape, dtype=bool)  # entry e is an episode's first frame
        self.written = np.zeros(num_envs, dtype=np.int64)  # entries ever written per env
        # the next `add`'s obs begins an episode
        self.starts_episode = np.ones(num_envs, dtype=bool)
        self.size = 0  # transitions held
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def _write(self, i: int, frame: np.ndarray, first: bool) -> int:
        slot = self.written[i] % self.ring
        if self.has_transition[i, slot]:
            self.size -= 1
        self.frames[i, slot] = frame
        self.first[i, slot] = first
        self.has_transition[i, slot] = False
        self.written[i] += 1
        return slot

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        done: np.ndarray,
    ) -> None:
        """Store one transition per env: `obs` [B, k, H, W] the stacks the agent acted on,
        `next_obs` the true next stacks (final observations at episode ends), `done` [B]
        terminated or truncated (the next call's obs then starts a new episode)."""
        obs = np.asarray(obs)
        next_obs = np.asarray(next_obs)
        for i in range(self.num_envs):
            if self.starts_episode[i]:
                slot = self._write(i, obs[i, -1], first=True)
            else:  # the previous call wrote this obs's newest frame as its next frame
                slot = (self.written[i] - 1) % self.ring
            self.actions[i, slot] = actions[i]
            self.rewards[i, slot] = rewards[i]
            self.terminated[i, slot] = terminated[i]
            self._write(i, next_obs[i, -1], first=False)
            self.has_transition[i, slot] = True
            self.size += 1
        self.starts_episode[:] = np.asarray(done, dtype=bool)

    def new_episodes(self) -> None:
        """The next `add`'s observations begin new episodes, whatever the last `add` said (the envs
        were reset outside the loop, e.g. on resuming from a checkpoint without their state)."""
        self.starts_episode[:] = True

    def _stacks(self, env: np.ndarray, entry: np.ndarray) -> np.ndarray:
        """Stacks [N, k, H, W] of absolute entries `entry` [N] of envs `env` [N]."""
        idx = np.empty((len(entry), self.stack), dtype=np.int64)
        idx[:, -1] = entry
        for j in range(self.stack - 2, -1, -1):  # walk back, staying on the episode's first frame
            newer = idx[:, j + 1]
            idx[:, j] = np.where(self.first[env, newer % self.ring], newer, newer - 1)
        return self.frames[env[:, None], idx % self.ring]

    def transitions(self, env: np.ndarray, entry: np.ndarray) -> Batch:
        """The transitions out of absolute entries `entry` of envs `env`, as tensors on `device`."""
        slot = entry % self.ring
        return Batch(
            torch.from_numpy(self._stacks(env, entry)).to(self.device),
            torch.from_numpy(self.actions[env, slot]).to(self.device),
            torch.from_numpy(self.rewards[env, slot]).to(self.device),
            torch.from_numpy(self._stacks(env, entry + 1)).to(self.device),
            torch.from_numpy(self.terminated[env, slot]).to(self.device),
        )

    def sampleable(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (env, absolute entry) that `sample` may draw, oldest first (for tests)."""
        envs = []
        entries = []
        for i in range(self.num_envs):
            lo, hi = self._range(i)
            e = np.arange(lo, hi + 1)
            e = e[self.has_transition[i, e % self.ring]]
            envs.append(np.full(len(e), i))
            entries.append(e)
        return np.concatenate(envs), np.concatenate(entries)

    def _range(self, i: int) -> tuple[int, int]:
        # entry e needs e - k + 1 .. e + 1 in the ring: the ring holds written - ring .. written - 1
        return max(0, int(self.written[i]) - self.ring + self.stack - 1), int(self.written[i]) - 2

    def sample(self, batch_size: int) -> Batch:
        """`batch_size` transitions drawn uniformly with replacement, as tensors on `device`."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay memory")
        ranges = np.array([self._range(i) for i in range(self.num_envs)])  # [B, 2]
        counts = np.maximum(ranges[:, 1] - ranges[:, 0] + 1, 0)
        # env i's entries are flat indices ends[i] - counts[i] .. ends[i] - 1
        ends = np.cumsum(counts)
        env = np.empty(batch_size, dtype=np.int64)
        entry = np.empty(batch_size, dtype=np.int64)
        todo = np.arange(batch_size)
        while len(todo):  # redraw the entries that hold a final frame (one per episode)
            flat = self.rng.integers(0, ends[-1], size=len(todo))
            env[todo] = np.searchsorted(ends, flat, side="right")
            entry[todo] = ranges[env[todo], 0] + flat - (ends - counts)[env[todo]]
            todo = todo[~self.has_transition[env[todo], entry[todo] % self.ring]]
        return self.transitions(env, entry)

    def state_dict(self) -> dict:
        """Everything `add` and `sample` depend on (for a checkpoint; the frames are most of it)."""
        return {
            **{k: torch.from_numpy(getattr(self, k).copy()) for k in self._ARRAYS},
            "size": self.size,
            "capacity": self.capacity,
            "ring": self.ring,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict`, into a memory of the same capacity, shapes and env count."""
        if state["ring"] != self.ring or tuple(state["frames"].shape) != self.frames.shape:
            raise ValueError(
                f"the checkpoint's frame memory has shape {tuple(state['frames'].shape)}, "
                f"this one {self.frames.shape}"
            )
        for k in self._ARRAYS:
            getattr(self, k)[...] = state[k].numpy()
        self.size = state["size"]
        self.rng.bit_generator.state = state["rng"]
