"""The feature extractor ("torso") a network puts before its heads, chosen from the observation.

- a vector [D]: an MLP with `hidden_sizes` (Linear + ReLU each, or another activation);
- a small grid [C, H, W] with H, W <= 16 (MinAtar's [C, 10, 10]): one 3x3 convolution with 16
  filters, then 128 hidden units (Young & Tian 2019, the MinAtar paper's networks);
- an 84x84 frame stack [4, 84, 84] (Atari): the Nature DQN torso, three convolutions (32 8x8
  stride 4, 64 4x4 stride 2, 64 3x3 stride 1) and 512 hidden units (Mnih et al. 2015).

Images are kept as uint8 (in memory, in the replay) and turned into floats inside the network:
[0, 255] -> [0, 1] for Atari frames, MinAtar's 0/1 as they are. `hidden_sizes` applies to
vectors only; the image torsos are the papers' own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

if TYPE_CHECKING:
    import gymnasium as gym


class ToFloat(nn.Module):
    """uint8 (or any) images -> float32 divided by `scale`."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / self.scale if self.scale != 1.0 else x.float()


def torso(
    obs_shape: tuple[int, ...], hidden_sizes: tuple[int, ...], activation: type[nn.Module] = nn.ReLU
) -> tuple[list[nn.Module], int]:
    """Layers [obs] -> [features] and the feature width; the caller appends its head(s).
    `activation` follows each hidden layer of the MLP (the image torsos keep their papers' ReLU)."""
    if len(obs_shape) == 3 and obs_shape[1] == obs_shape[2] == 84:
        c = obs_shape[0]
        layers = [ToFloat(255.0), nn.Conv2d(c, 32, 8, stride=4), nn.ReLU()]
        layers += [
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
        ]
        return [*layers, nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU()], 512
    if len(obs_shape) == 3 and max(obs_shape[1:]) <= 16 and min(obs_shape[1:]) >= 3:
        c, h, w = obs_shape
        layers = [ToFloat(1.0), nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(), nn.Flatten()]
        return [*layers, nn.Linear(16 * (h - 2) * (w - 2), 128), nn.ReLU()], 128
    if len(obs_shape) == 3:
        expected = "[C, 10, 10]-like grids (MinAtar) or [4, 84, 84] stacks (Atari)"
        raise ValueError(f"no torso for images of shape {obs_shape}: expected {expected}")
    layers = []
    width = math.prod(obs_shape)
    for h in hidden_sizes:
        layers += [nn.Linear(width, h), activation()]
        width = h
    return layers, width


def is_image(obs_shape: tuple[int, ...]) -> bool:
    """Observations the torso treats as images ([C, H, W]);
    everything else is flattened to a vector."""
    return len(obs_shape) == 3


def obs_shape(space: gym.Space) -> tuple[int, ...]:
    """The shape a network sees: images [C, H, W] as they are, anything else flattened to [D]."""
    shape = cast("tuple[int, ...]", space.shape)  # a Box's, never None
    return tuple(shape) if is_image(shape) else (math.prod(shape),)
