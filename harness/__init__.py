"""Run plumbing shared by every script, apart from the algorithm parts in common/.

- `run`: the command line, the run folder (config.json, metrics.csv, summary.json), the progress
  line, wandb and TensorBoard, signals, evaluation episodes, checkpoints, exit statuses.
- `checkpoint`: atomic checkpoint files, code-free loading, every generator and each env's state.
- `extras`: TensorBoard, evaluation videos, wandb's login check (imported when a flag asks).
- `distributed`: several torchrun workers training one network (imported under torchrun only).
- `errors`: `InputError` (bad input: one line, exit 2) and `WorkerError` (a lost torchrun worker).

Nothing here knows about an algorithm, and this file imports nothing.
"""
