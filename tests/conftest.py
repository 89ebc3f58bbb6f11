import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "algos"))
sys.path.insert(0, str(ROOT / "tools"))
os.environ.setdefault("WANDB_MODE", "disabled")
# torch.compile's on-disk cache does not key its CPU kernels on the kernel variables (tests/test_kernels.py): a
# kernel compiled under one set aborts the process that loads it under another, so each set keeps its own cache
from benchmarks.machine import KERNEL_VARIABLES  # noqa: E402

KERNELS = "_".join(f"{k}-{os.environ[k]}" for k in KERNEL_VARIABLES if k in os.environ)
if KERNELS:
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"torchinductor_{KERNELS}")
    )
