"""The report and equivalence tests once more under a second set of CPU kernels, on whatever CPU runs the suite.

Float results differ between CPUs: MKL and oneDNN pick their GEMM kernels by CPU, ATen its vector width, numpy's
OpenBLAS its core type. A test that compares a float made here with text made on another machine passes on one
CPU kind and fails on the other. SECOND_KERNELS moves all three onto other code paths on the same machine, so CI
shakes such a test out whether it runs on an Intel or an AMD machine (docs/results.md, "Across CPUs").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECOND_KERNELS = {
    "MKL_CBWR": "COMPATIBLE",
    "ATEN_CPU_CAPABILITY": "avx2",
    "OPENBLAS_CORETYPE": "Haswell",
}
UNDER_IT = [
    "tests/test_report.py",  # provenance and the equivalence check
    "tests/test_benchmarks.py::test_committed_report_is_what_report_py_writes_from_the_committed_runs",
    "tests/test_benchmarks.py::test_the_report_statistics_are_the_same_on_every_cpu_and_in_every_order_of_the_seeds",
]


def under_second_kernels(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **SECOND_KERNELS, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_the_second_kernel_set_is_recorded_and_changes_torchs_kernels():
    r = under_second_kernels(
        "from benchmarks.machine import machine; import json; print(json.dumps(machine()))"
    )
    assert r.returncode == 0, r.stderr
    machine = json.loads(r.stdout)
    assert (
        machine["kernel_variables"] == SECOND_KERNELS and "MKL_CBWR=COMPATIBLE" in machine["kind"]
    )
    assert machine["capability"] in ("AVX2", "DEFAULT"), (
        "ATEN_CPU_CAPABILITY caps ATen's kernels at AVX2"
    )


@pytest.mark.slow
def test_the_report_and_equivalence_tests_pass_under_the_second_kernel_set():
    if all(os.environ.get(k) == v for k, v in SECOND_KERNELS.items()):
        pytest.skip("the whole suite runs under the second kernel set already")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *UNDER_IT],
        env={**os.environ, **SECOND_KERNELS},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, f"under {SECOND_KERNELS}:\n" + "\n".join(
        (r.stdout + r.stderr).splitlines()[-40:]
    )
