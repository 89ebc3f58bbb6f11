"""The thin shared module: only the parts that are easy to get subtly wrong.

- `NetworkWrapper`: online network, optional target copy, optimizer and gradient clipping;
  `train_step(loss)` returns the loss and the global gradient norm before clipping.
- `soft_update`: target <- rate * online + (1 - rate) * target, parameters and buffers.
- `ReplayMemory`: preallocated ring buffer fed by vector envs, seeded sampling; `FrameMemory`:
  the same for frame stacks, each frame stored once and the stacks rebuilt when sampling.
- `pixels`: Atari (the DQN paper's preprocessing, episodic life, FIRE on reset) and MinAtar envs;
  `torso`: MLP, MinAtar conv or Nature CNN chosen from the observation shape.
- `true_next_obs`: the real next observation under SAME_STEP autoreset (infos["final_obs"]).
- `n_step_returns`: the n-step reference r_t + g r_{t+1} + ... + g^m V(s_{t+m}) on [T, B].
- `distributed`: several torchrun workers, one network (rank, world size, agreeing on the
  config, gathering statistics); the wrapper averages gradients across them by itself.

Imports torch, numpy and gymnasium only (plus ale_py / minatar for pixel envs, when installed); nothing here knows about any algorithm.
"""

from common import distributed, pixels
from common.autoreset import true_next_obs
from common.network import NetworkWrapper, soft_update
from common.replay import Batch, FrameMemory, ReplayMemory
from common.returns import n_step_returns
from common.torso import is_image, obs_shape, torso

__all__ = ["NetworkWrapper", "soft_update", "ReplayMemory", "FrameMemory", "Batch", "torso", "is_image", "obs_shape", "pixels", "n_step_returns", "true_next_obs", "distributed"]
