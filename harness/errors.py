"""The one exception the scripts treat as bad input."""


class InputError(ValueError):
    """Bad input (a flag's value, an env id, a run folder, a resume): one line on stderr, exit 2.

    Every other exception out of `train()` is a bug and keeps its traceback (exit 1)."""
