"""What a run's floats depend on, recorded beside each benchmark run (job.py) and in the reports:
the CPU, ATen's kernel level, the BLAS, torch's threads and the environment variables that choose
MKL's, ATen's and OpenBLAS's CPU kernels."""

from __future__ import annotations

import contextlib
import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

# the environment variables that choose MKL's, ATen's and OpenBLAS's CPU kernels (`machine`)
KERNEL_VARIABLES = (
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ATEN_CPU_CAPABILITY",
    "OPENBLAS_CORETYPE",
)


def machine() -> dict:
    """What a run's floats depend on:
    MKL, oneDNN, ATen pick kernels by CPU and KERNEL_VARIABLES (`kind`)."""
    cpu: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            cpu.setdefault(key.strip(), value.strip())
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    info: dict[str, Any] = {
        "cpu": cpu.get("model name") or platform.processor() or platform.machine()
    }
    info["vendor"] = cpu.get("vendor_id") or platform.machine()
    info |= {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "blas": blas.group(1) if blas else None,
    }
    info |= {"torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()}
    info["kernel_variables"] = {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ}
    variables = " ".join(f"{k}={v}" for k, v in info["kernel_variables"].items())
    parts = (info["vendor"], info["cpu"], info["capability"], info["blas"], variables)
    info["kind"] = " ".join(filter(None, parts))
    return info
