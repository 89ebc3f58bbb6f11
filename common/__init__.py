"""The algorithm parts the design names, each easy to get subtly wrong and tested on its own.

- `network`: `NetworkWrapper` (online network, optional target copy, optimizer, gradient
  clipping; `train_step(loss)` returns the loss and the gradient norm before clipping) and
  `soft_update` (target <- rate * online + (1 - rate) * target).
- `replay`: `ReplayMemory` (preallocated ring fed by vector envs, seeded sampling) and
  `FrameMemory` (frame stacks, each frame stored once, stacks rebuilt when sampling).
- `returns`: `n_step_returns`, r_t + g r_{t+1} + ... + g^m V(s_{t+m}) on [T, B].
- `autoreset`: `true_next_obs`, the real next observation under SAME_STEP autoreset.
- `torso`: the feature layers (MLP, MinAtar conv, Nature conv) chosen from the observation.
- `pixels`: env makers for Atari (the DQN paper's preprocessing) and MinAtar ids.
- `fastpath`: `checked`, which keeps a fast acting path only while it agrees with `forward()`.

Import what you use from its module (`from common.network import NetworkWrapper`); this file
imports nothing, so a copy with only the modules a script uses works. The run plumbing (run
folder, logging, signals, checkpoints, torchrun) is the separate package `harness/`.
Imports torch, numpy and gymnasium only (plus ale_py / minatar for pixel envs, when installed).
"""
