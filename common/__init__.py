"""The algorithm parts, each easy to get subtly wrong and tested on its own: `network`, `replay`,
`returns`, `autoreset`, `torso`, `pixels`, `fastpath`, and `minatar` and `atari` for those ids only
(docs/layout.md). This file imports nothing, so a copy with only the modules a script uses works.
They import torch, numpy and gymnasium only (plus ale_py / minatar for pixel envs).
"""
