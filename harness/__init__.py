"""Run plumbing, apart from common/'s algorithm parts: `cli` (the run flags, input checks, parsing,
exit status), `run` (the run folder, metrics.csv, evaluation, progress, signals, summary), `errors`;
`checkpoint`, `resume`, `extras` and `distributed` are imported only when a flag or torchrun asks
for them. Imports nothing."""
