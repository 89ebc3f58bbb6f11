"""docs/changing.md: its diff turns a copy of ddpg.py into TD3; the copy trains and resumes exactly."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_checkpoint import metrics

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "changing.md"
SHORT = ["--learning-starts", "100", "--batch-size", "32", "--eval-episodes", "1", "--no-progress"]


def diff_lines(text: str) -> int:
    return sum(
        1 for line in text.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def rows(run_dir: Path) -> list[dict]:
    """metrics.csv of the one run folder in `run_dir`, without its wall-clock columns."""
    (folder,) = run_dir.iterdir()
    return metrics(folder)


@pytest.mark.slow
def test_the_td3_diff_applies_to_a_copy_of_ddpg_trains_and_resumes_exactly(tmp_path):
    page = PAGE.read_text()
    diff = re.search(r"```diff\n(.*?)```", page, re.S).group(1)
    # the README gives the diff's size: it must be this diff's
    stated = re.search(r"DDPG into TD3 in (\d+) changed lines", (ROOT / "README.md").read_text())
    assert stated and int(stated.group(1)) == diff_lines(diff), diff_lines(diff)
    copy = re.search(r"```bash\n(mkdir.*?)```", page, re.S).group(
        1
    )  # the copy the page makes, file by file
    project = tmp_path / "mytd3"
    for line in copy.splitlines():
        words = line.split()
        if words[0] == "cp":
            for source in words[1:-1]:
                shutil.copy(ROOT / source, tmp_path / words[-1])
        else:
            subprocess.run(words, cwd=tmp_path, check=True)
    (project / "td3.diff").write_text(diff)
    applied = subprocess.run(
        ["patch", "td3.py", "td3.diff"], cwd=project, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr

    def td3(*argv: str) -> None:
        r = subprocess.run(
            [sys.executable, "td3.py", *argv],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0 and "td3: done" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]

    td3("--total-timesteps", "600", "--checkpoint-every", "300", "--run-dir", "straight", *SHORT)
    td3("--total-timesteps", "300", "--checkpoint-every", "300", "--run-dir", "stopped", *SHORT)
    (stopped,) = (project / "stopped").iterdir()
    td3("--resume", str(stopped), "--total-timesteps", "600")
    resumed = [
        r for r in rows(project / "stopped") if not (r["global_step"] == "300" and r["eval_return"])
    ]
    assert resumed == rows(
        project / "straight"
    )  # the first part's final evaluation aside, row for row
    assert any(r["critic_loss"] for r in resumed) and resumed[-1]["eval_return"]
