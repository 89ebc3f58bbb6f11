import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "algos"))
os.environ.setdefault("WANDB_MODE", "disabled")


def pytest_configure(config):
    # `python -m pytest -q -m "not slow" tests` leaves these out: unit tests and smoke runs only
    config.addinivalue_line(
        "markers", "slow: over ~5 s on an idle 2-core machine (learning, long runs, command-line subprocesses, torchrun)")
