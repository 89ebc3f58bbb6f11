"""Run plumbing, apart from the algorithm parts in common/: `run`, `checkpoint` (writing one) and `errors`;
`resume`, `extras` and `distributed` are imported only when a flag or torchrun asks for them. This file
imports nothing."""
