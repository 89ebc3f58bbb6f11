"""Running normalisation of observations and rewards (OpenAI Baselines' VecNormalize).

- `ObsNormalizer`: (obs - running mean) / running std, clipped; its statistics are buffers, so a
  saved model carries them.
- `RewardScaler`: rewards divided by the running std of each env's discounted return, so the
  value targets' scale is ~1 whatever the task's reward scale.
- `merge_moments`: running mean and variance merged with a batch (Chan et al.'s parallel algorithm).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from torch import nn


class RewardScaler:
    """Divides rewards by the running std of each env's discounted return (OpenAI Baselines'
    VecNormalize): the scale of the value targets becomes ~1 whatever the task's reward scale.

    `gather` (harness.distributed.gather under torchrun) gives the statistics every worker's
    discounted returns, so all workers scale by the same statistics before their gradients are
    averaged, as they normalise observations by the same statistics."""

    def __init__(
        self,
        num_envs: int,
        gamma: float,
        gather: Callable[[torch.Tensor], torch.Tensor] = lambda x: x,
        clip: float = 10.0,
        eps: float = 1e-8,
    ):
        self.gamma = gamma
        self.gather = gather
        self.clip = clip
        self.eps = eps
        self.discounted = np.zeros(num_envs)  # [B] running discounted return of each env
        self.mean = 0.0
        self.var = 1.0
        self.count = 1e-4

    def __call__(self, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.discounted = self.discounted * self.gamma + rewards
        everyone = self.gather(
            torch.from_numpy(self.discounted)
        ).numpy()  # [world * B]: one all_gather a step
        self.mean, self.var, self.count = merge_moments(self.mean, self.var, self.count, everyone)
        self.discounted[done] = 0.0
        return np.clip(rewards / math.sqrt(self.var + self.eps), -self.clip, self.clip)

    def state_dict(self) -> dict:
        return {
            "discounted": self.discounted,
            "mean": self.mean,
            "var": self.var,
            "count": self.count,
        }

    def load_state_dict(self, state: dict) -> None:
        self.discounted, self.mean, self.var, self.count = (
            state[k] for k in ("discounted", "mean", "var", "count")
        )


def merge_moments(mean: Any, var: Any, count: Any, batch: Any) -> tuple[Any, Any, Any]:
    """Running mean/var merged with a batch [N, ...] (Chan et al.'s parallel algorithm)."""
    n = batch.shape[0]
    batch_mean = batch.mean(0)
    batch_var = ((batch - batch_mean) ** 2).mean(0)  # population variance in numpy and torch alike
    delta = batch_mean - mean
    total = count + n
    m2 = var * count + batch_var * n + delta**2 * count * n / total
    return mean + delta * n / total, m2 / total, total


class ObsNormalizer(nn.Module):
    """(obs - running mean) / running std, clipped to +-clip. Buffers,
    so the state dict carries them."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, obs_dim: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip = clip
        self.eps = eps
        self.register_buffer("mean", torch.zeros(obs_dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(obs_dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Merge a batch of observations [N, obs_dim] in place
        (numpy views of the buffers stay valid)."""
        batch = obs.to(torch.float64).reshape(-1, self.mean.shape[0])
        mean, var, count = merge_moments(self.mean, self.var, self.count, batch)
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(count)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (
            ((obs - self.mean) / torch.sqrt(self.var + self.eps))
            .clamp(-self.clip, self.clip)
            .to(obs.dtype)
        )
