"""Run plumbing, apart from common/'s algorithm parts: `run`, `checkpoint` (writing one),
`errors`; `resume`, `extras` and `distributed` are imported only when a flag or torchrun asks for
them. Imports nothing."""
