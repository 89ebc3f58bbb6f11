"""The exceptions the scripts treat apart from bugs: bad input, and workers that cannot go on."""


class InputError(ValueError):
    """Bad input (a flag's value, an env id, a run folder, a resume): one line on stderr,
    exit 2. Every other exception out of `train()` is a bug and keeps its traceback (exit 1)."""


class WorkerError(RuntimeError):
    """The torchrun workers cannot go on together: one never joined, died, or stopped answering."""
