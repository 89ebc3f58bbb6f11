"""The algorithm parts, each easy to get subtly wrong and tested on its own: `network`
(NetworkWrapper, soft_update), `replay` (ReplayMemory), `returns` (n-step returns), `autoreset`
(true_next_obs), `torso`, `pixels` (env makers; MinAtar), `atari` (the DQN paper's Atari
preprocessing and FrameMemory; imported for Atari ids only), `fastpath` (numpy acting, checked).

Import what you use from its module; this file imports nothing, so a copy with only the modules a
script uses works. Imports torch, numpy and gymnasium only (plus ale_py / minatar for pixel envs).
"""
