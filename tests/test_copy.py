"""README, "Copying a script": the files listed for each script are exactly what it imports, their
line count is the one given, and a folder holding only those files trains the script."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"]
SHORT_RUN = {
    "dqn": ["--total-timesteps", "300", "--learning-starts", "100"],
    "n_step_q": ["--total-timesteps", "300"],
    "sarsa": ["--total-timesteps", "300"],
    "a2c": ["--total-timesteps", "300"],
    "ddpg": ["--total-timesteps", "300", "--learning-starts", "100", "--batch-size", "32"],
    "naf": ["--total-timesteps", "300", "--learning-starts", "100", "--batch-size", "32"],
}


def readme_table() -> dict[str, tuple[list[str], int]]:
    """script -> (the files listed beside it, the line count given), from README's copying section."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Copying a script"):]
    section = section[: section.index("\n## ", 3)] if "\n## " in section[3:] else section
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`algos/(\w+)\.py`\s*\|(.*)\|\s*([\d,]+)\s*\|", line)
        if m:
            files = re.findall(r"`([\w/]+\.py)`", m.group(2))
            rows[m.group(1)] = (sorted(files), int(m.group(3).replace(",", "")))
    return rows


def imported_files(path: Path, seen: set[Path] | None = None) -> set[Path]:
    """The files of common/ and harness/ that `path` imports at module level, transitively (each
    package's __init__ with them): what the script needs to run without an optional flag."""
    seen = set() if seen is None else seen
    for node in ast.parse(path.read_text()).body:
        modules = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("common", "harness"):
            modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names if a.name.split(".")[0] in ("common", "harness")]
        for module in modules:
            for candidate in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.split(".")[0] / "__init__.py"):
                if candidate.is_file() and candidate not in seen:
                    seen.add(candidate)
                    imported_files(candidate, seen)
    return seen


def test_the_readme_lists_every_script():
    assert sorted(readme_table()) == sorted(SCRIPTS)


@pytest.mark.parametrize("algo", SCRIPTS)
def test_the_listed_files_are_what_the_script_imports_and_the_count_is_right(algo):
    files, lines = readme_table()[algo]
    needed = sorted(str(p.relative_to(ROOT)) for p in imported_files(ROOT / "algos" / f"{algo}.py"))
    assert files == needed
    total = sum(len((ROOT / f).read_text().splitlines()) for f in [f"algos/{algo}.py", *files])
    assert lines == total


# the budgets of a script that reads as its algorithm (STYLE.md, "Anatomy"): its lines, where its loop starts
# (at most 72% of the way down) and the lines a copy carries with it
LINES = {"dqn": 340, "n_step_q": 330, "sarsa": 370, "a2c": 480, "ddpg": 360, "naf": 400}
COPY_LINES, LOOP_AT = 1800, 0.72


@pytest.mark.parametrize("algo", SCRIPTS)
def test_each_script_and_its_copy_keep_within_their_budgets(algo):
    lines = (ROOT / "algos" / f"{algo}.py").read_text().splitlines()
    loop = next(i for i, line in enumerate(lines, 1) if line.strip().startswith("while global_step"))
    assert len(lines) <= LINES[algo] and loop <= LOOP_AT * len(lines), (len(lines), loop)
    assert readme_table()[algo][1] <= COPY_LINES


@pytest.mark.slow
@pytest.mark.parametrize("algo, env_id", [*((algo, None) for algo in SCRIPTS), pytest.param(
    "ddpg", "HalfCheetah-v5", marks=pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="mujoco extra"))])
def test_a_folder_with_only_the_listed_files_trains_the_script(algo, env_id, tmp_path):
    """Each script on its default env (Pendulum-v1 for ddpg and naf), and ddpg on a MuJoCo env too."""
    files, _ = readme_table()[algo]
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "algos" / f"{algo}.py", project)
    for f in files:
        (project / f).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / f, project / f)
    env = {"PATH": "/usr/bin:/bin", "WANDB_MODE": "disabled", "HOME": str(tmp_path)}
    env_id = env_id or ("Pendulum-v1" if algo in ("ddpg", "naf") else None)
    command = [sys.executable, f"{algo}.py", *(["--env", env_id] if env_id else []), *SHORT_RUN[algo],
               "--eval-episodes", "1", "--run-dir", "out", "--no-progress"]
    r = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (summary,) = (project / "out").glob("*/summary.json")
    assert json.loads(summary.read_text())["completed"]
