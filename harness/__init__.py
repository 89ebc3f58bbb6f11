"""Run plumbing shared by every script, apart from the algorithm parts in common/.

- `run`: the command line, the run folder (config.json, metrics.csv, summary.json), the progress
  line, wandb and TensorBoard, signals, evaluation episodes, checkpoints, exit statuses.
- `checkpoint`: atomic checkpoint files, code-free loading, every generator and each env's state.
- `distributed`: several torchrun workers training one network.
- `errors`: `InputError`, the one exception that means bad input (one line, exit 2).

Nothing here knows about an algorithm, and this file imports nothing.
"""
