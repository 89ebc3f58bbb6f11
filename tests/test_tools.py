"""The checks of a maintained Python project, with their settings in pyproject.toml: ruff's lint and format
over the whole tree, and mypy over algos/, common/ and harness/, run by the README's test command (so CI runs them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_finds_nothing_to_fix():
    r = tool("ruff", "check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_ruff_format_leaves_the_whole_tree_as_it_is():
    r = tool("ruff", "format", "--check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


@pytest.mark.slow
def test_mypy_finds_no_type_error_in_algos_common_and_harness():
    r = tool("mypy", "--cache-dir", "/dev/null")
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
