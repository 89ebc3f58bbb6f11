"""Replay memory: a preallocated ring buffer fed a batch at a time by a vector env.

Each row is one transition (obs, action, reward, next_obs, terminated). `next_obs` must be the
*true* next observation: at a truncation that is the episode's final observation, not the reset
observation the vector env returns. Truncation therefore needs no flag of its own: the target
bootstraps from `next_obs` unless `terminated`. Storage is allocated once, in contiguous
tensors on `device`, so memory use is fixed and there are no per-transition Python objects.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class Batch(NamedTuple):
    obs: torch.Tensor  # [N, *obs_shape] float32 (or the memory's obs_dtype)
    actions: torch.Tensor  # [N] int64 (discrete) or [N, *action_shape] float32
    rewards: torch.Tensor  # [N] float32
    next_obs: torch.Tensor  # [N, *obs_shape] like obs
    terminated: torch.Tensor  # [N] float32, 1.0 where the episode terminated


class ReplayMemory:
    """Ring buffer of `capacity` transitions with seeded uniform sampling (with replacement).

    Args:
        capacity: number of transitions kept; the oldest are overwritten.
        obs_shape: shape of one observation.
        obs_dtype: storage type of observations (torch.uint8 keeps images 4x smaller; the network
            converts them), returned as stored.
        action_shape: () for a discrete action, the action's shape otherwise.
        discrete: store actions as int64 (True) or float32 (False).
        device: where the storage lives and where sampled tensors are returned.
        seed: seed of the sampler, an int or a SeedSequence (e.g. one spawned from the run's seed,
            so that sampling and exploration draw independent streams); the same seed and the
            same additions give the same batches.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        discrete: bool = True,
        device: torch.device | str = "cpu",
        seed: int | np.random.SeedSequence | None = None,
        obs_dtype: torch.dtype = torch.float32,
    ):
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.device = torch.device(device)
        kw = dict(device=self.device)
        self.obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, **kw)
        self.next_obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, **kw)
        self.actions = torch.zeros((capacity, *action_shape), dtype=torch.int64 if discrete else torch.float32, **kw)
        self.rewards = torch.zeros(capacity, dtype=torch.float32, **kw)
        self.terminated = torch.zeros(capacity, dtype=torch.float32, **kw)
        self.pos = 0  # next row to write
        self.size = 0  # rows filled so far
        self.rng = np.random.default_rng(seed)
        self._stores = (self.obs, self.actions, self.rewards, self.next_obs, self.terminated)
        # on CPU, `add` writes through zero-copy numpy views of the storage (no torch dispatch)
        self._host_views = tuple(t.numpy() for t in self._stores) if self.device.type == "cpu" else None

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated, valid=None, done=None) -> None:
        """Store a batch of B transitions, one per env (numpy arrays or tensors, leading dim B).

        `valid` [B] bool (optional) drops rows, e.g. the step a NEXT_STEP vector env spends
        resetting, which is not a transition. `done` is accepted for the same call as
        `FrameMemory.add` and unused: whole observations need no episode boundaries.
        """
        if valid is not None:
            valid = np.asarray(valid, dtype=bool)
            if not valid.all():
                obs, actions, rewards, next_obs, terminated = (
                    np.asarray(x)[valid] for x in (obs, actions, rewards, next_obs, terminated)
                )
        n = len(rewards)
        if n == 0:
            return
        if n > self.capacity:  # only the newest `capacity` rows survive
            obs, actions, rewards, next_obs, terminated = (x[-self.capacity :] for x in (obs, actions, rewards, next_obs, terminated))
            n = self.capacity
        first = min(n, self.capacity - self.pos)  # rows before the wraparound
        views = self._host_views or self._stores
        for store, view, x in zip(self._stores, views, (obs, actions, rewards, next_obs, terminated)):
            if self._host_views is not None:
                x = np.asarray(x).reshape(n, *store.shape[1:])
            else:
                x = torch.as_tensor(np.asarray(x)).to(self.device, store.dtype).reshape(n, *store.shape[1:])
            view[self.pos : self.pos + first] = x[:first]
            if first < n:
                view[: n - first] = x[first:]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Batch:
        """`batch_size` transitions drawn uniformly with replacement, as tensors on `device`."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay memory")
        idx = torch.from_numpy(self.rng.integers(0, self.size, size=batch_size)).to(self.device)
        return Batch(
            self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx], self.terminated[idx]
        )

    def state_dict(self) -> dict:
        """The filled rows, the write position and the sampler's state (for a checkpoint)."""
        n = self.size

        def rows(x: torch.Tensor) -> torch.Tensor:  # a view would save the whole preallocated storage
            return x[:n].clone().cpu() if n < self.capacity else x.cpu()

        return {
            "obs": rows(self.obs), "actions": rows(self.actions), "rewards": rows(self.rewards),
            "next_obs": rows(self.next_obs), "terminated": rows(self.terminated),
            "pos": self.pos, "size": self.size, "capacity": self.capacity, "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict`, into a memory of the same capacity and shapes (written in place)."""
        if state["capacity"] != self.capacity:
            raise ValueError(f"the checkpoint's replay memory holds {state['capacity']} rows, this one {self.capacity}")
        n = state["size"]
        for store, name in zip(self._stores, ("obs", "actions", "rewards", "next_obs", "terminated")):
            store[:n] = state[name].to(self.device)
        self.pos, self.size = state["pos"], n
        self.rng.bit_generator.state = state["rng"]


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

    _ARRAYS = ("frames", "actions", "rewards", "terminated", "has_transition", "first", "written", "starts_episode")

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
            raise ValueError(f"capacity, stack and num_envs must be positive, got {capacity}, {stack}, {num_envs}")
        self.capacity, self.stack, self.num_envs = capacity, stack, num_envs
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
        self.starts_episode = np.ones(num_envs, dtype=bool)  # the next `add`'s obs begins an episode
        self.size = 0  # transitions held
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def _write(self, i: int, frame: np.ndarray, first: bool) -> int:
        slot = self.written[i] % self.ring
        if self.has_transition[i, slot]:
            self.size -= 1
        self.frames[i, slot] = frame
        self.first[i, slot], self.has_transition[i, slot] = first, False
        self.written[i] += 1
        return slot

    def add(self, obs, actions, rewards, next_obs, terminated, done) -> None:
        """Store one transition per env: `obs` [B, k, H, W] the stacks the agent acted on,
        `next_obs` the true next stacks (final observations at episode ends), `done` [B]
        terminated or truncated (the next call's obs then starts a new episode)."""
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        for i in range(self.num_envs):
            if self.starts_episode[i]:
                slot = self._write(i, obs[i, -1], first=True)
            else:  # the previous call wrote this obs's newest frame as its next frame
                slot = (self.written[i] - 1) % self.ring
            self.actions[i, slot], self.rewards[i, slot], self.terminated[i, slot] = actions[i], rewards[i], terminated[i]
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
        envs, entries = [], []
        for i in range(self.num_envs):
            lo, hi = self._range(i)
            e = np.arange(lo, hi + 1)
            e = e[self.has_transition[i, e % self.ring]]
            envs.append(np.full(len(e), i)), entries.append(e)
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
        ends = np.cumsum(counts)  # env i's entries are flat indices ends[i] - counts[i] .. ends[i] - 1
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
        return {**{k: torch.from_numpy(getattr(self, k).copy()) for k in self._ARRAYS}, "size": self.size,
                "capacity": self.capacity, "ring": self.ring, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict`, into a memory of the same capacity, shapes and env count."""
        if state["ring"] != self.ring or tuple(state["frames"].shape) != self.frames.shape:
            raise ValueError(f"the checkpoint's frame memory has shape {tuple(state['frames'].shape)}, this one {self.frames.shape}")
        for k in self._ARRAYS:
            getattr(self, k)[...] = state[k].numpy()
        self.size = state["size"]
        self.rng.bit_generator.state = state["rng"]
