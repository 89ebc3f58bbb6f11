"""Run plumbing, apart from the algorithm parts in common/: `run` (run flags, run folder, logging, progress,
signals, evaluation, exit statuses), `checkpoint` (writing: atomic files, generators, env state), `errors`;
imported only when asked for: `resume` (--resume), `extras` (TensorBoard, videos, wandb, compile) and
`distributed` (torchrun workers). This file imports nothing.
"""
