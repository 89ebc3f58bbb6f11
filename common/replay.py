"""Replay memory: a preallocated ring buffer fed a batch at a time by a vector env.

Each row is one transition (obs, action, reward, next_obs, terminated). `next_obs` must be the
*true* next observation: at a truncation that is the episode's final observation, not the reset
observation the vector env returns. Truncation therefore needs no flag of its own: the target
bootstraps from `next_obs` unless `terminated`. Storage is allocated once, in contiguous
tensors on `device`, so memory use is fixed and there are no per-transition Python objects.
"""

from __future__ import annotations

from typing import Any, NamedTuple

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
        kw: dict[str, Any] = dict(device=self.device)
        self.obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, **kw)
        self.next_obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, **kw)
        action_dtype = torch.int64 if discrete else torch.float32
        self.actions = torch.zeros((capacity, *action_shape), dtype=action_dtype, **kw)
        self.rewards = torch.zeros(capacity, dtype=torch.float32, **kw)
        self.terminated = torch.zeros(capacity, dtype=torch.float32, **kw)
        self.pos = 0  # next row to write
        self.size = 0  # rows filled so far
        self.rng = np.random.default_rng(seed)
        self._stores = (self.obs, self.actions, self.rewards, self.next_obs, self.terminated)
        # on CPU, `add` writes through zero-copy numpy views of the storage (no torch dispatch)
        self._host_views = (
            tuple(t.numpy() for t in self._stores) if self.device.type == "cpu" else None
        )

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray | torch.Tensor,
        actions: np.ndarray | torch.Tensor,
        rewards: np.ndarray | torch.Tensor,
        next_obs: np.ndarray | torch.Tensor,
        terminated: np.ndarray | torch.Tensor,
        valid: np.ndarray | torch.Tensor | None = None,
        done: np.ndarray | torch.Tensor | None = None,
    ) -> None:
        """Store a batch of B transitions, one per env (numpy arrays or tensors, leading dim B).

        `valid` [B] bool (optional) drops rows, e.g. the step a NEXT_STEP vector env spends
        resetting, which is not a transition. `done` is accepted for the same call as
        `FrameMemory.add` and unused: whole observations need no episode boundaries.
        """
        batch: tuple[np.ndarray | torch.Tensor, ...] = (obs, actions, rewards, next_obs, terminated)
        if valid is not None:
            valid = np.asarray(valid, dtype=bool)
            if not valid.all():
                batch = tuple(np.asarray(x)[valid] for x in batch)
        n = len(batch[2])  # rows: the rewards' length
        if n == 0:
            return
        if n > self.capacity:  # only the newest `capacity` rows survive
            batch = tuple(x[-self.capacity :] for x in batch)
            n = self.capacity
        first = min(n, self.capacity - self.pos)  # rows before the wraparound
        views: tuple[Any, ...] = self._host_views or self._stores
        for store, view, x in zip(self._stores, views, batch):
            if self._host_views is not None:
                x = np.asarray(x).reshape(n, *store.shape[1:])
            else:
                x = (
                    torch.as_tensor(np.asarray(x))
                    .to(self.device, store.dtype)
                    .reshape(n, *store.shape[1:])
                )
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
        # obs, actions, rewards, next_obs, terminated
        return Batch(*(store[idx] for store in self._stores))

    def state_dict(self) -> dict:
        """The filled rows, the write position and the sampler's state (for a checkpoint)."""
        n = self.size

        # a view would save the whole preallocated storage
        def rows(x: torch.Tensor) -> torch.Tensor:
            return x[:n].clone().cpu() if n < self.capacity else x.cpu()

        state: dict = {name: rows(store) for name, store in zip(Batch._fields, self._stores)}
        state.update(
            pos=self.pos, size=self.size, capacity=self.capacity, rng=self.rng.bit_generator.state
        )
        return state

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict`, into a memory of the same capacity and
        shapes (written in place)."""
        held = state["capacity"]
        if held != self.capacity:
            raise ValueError(
                f"the checkpoint's replay memory holds {held} rows, this one {self.capacity}"
            )
        n = state["size"]
        for store, name in zip(self._stores, Batch._fields):
            store[:n] = state[name].to(self.device)
        self.pos = state["pos"]
        self.size = n
        self.rng.bit_generator.state = state["rng"]
