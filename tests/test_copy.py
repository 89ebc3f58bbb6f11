"""README, "Copying a script": the files listed for each script are exactly what it imports, their
line count is the one given, and a folder holding only those files trains the script."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import signal
import subprocess
import sys
import time
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
    section = text[text.index("## Copying a script") :]
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
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] in ("common", "harness")
        ):
            modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names if a.name.split(".")[0] in ("common", "harness")]
        for module in modules:
            for candidate in (
                ROOT / (module.replace(".", "/") + ".py"),
                ROOT / module.split(".")[0] / "__init__.py",
            ):
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


# a script reads in order (STYLE.md, "Anatomy"): after train() only plumbing helpers, no algorithm code;
# its length is a consequence of what it says, never a budget
AFTER_TRAIN = {"validate", "load_policy", "main"}  # main: the command line, last


@pytest.mark.parametrize("algo", SCRIPTS)
def test_each_script_reads_in_order(algo):
    source = (ROOT / "algos" / f"{algo}.py").read_text()
    names = [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    ]
    assert set(names[names.index("train") + 1 :]) <= AFTER_TRAIN, names[names.index("train") + 1 :]


def copy_of(algo: str, tmp_path: Path) -> tuple[Path, dict]:
    """A project folder holding the script and the files README lists beside it; a clean environment for it."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "algos" / f"{algo}.py", project)
    for f in readme_table()[algo][0]:
        (project / f).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / f, project / f)
    return project, {"PATH": "/usr/bin:/bin", "WANDB_MODE": "disabled", "HOME": str(tmp_path)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, env_id",
    [
        *((algo, None) for algo in SCRIPTS),
        pytest.param(
            "ddpg",
            "HalfCheetah-v5",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("mujoco") is None, reason="mujoco extra"
            ),
        ),
    ],
)
def test_a_folder_with_only_the_listed_files_trains_the_script(algo, env_id, tmp_path):
    """Each script on its default env (Pendulum-v1 for ddpg and naf), and ddpg on a MuJoCo env too."""
    project, env = copy_of(algo, tmp_path)
    env_id = env_id or ("Pendulum-v1" if algo in ("ddpg", "naf") else None)
    command = [
        sys.executable,
        f"{algo}.py",
        *(["--env", env_id] if env_id else []),
        *SHORT_RUN[algo],
        "--eval-episodes",
        "1",
        "--run-dir",
        "out",
        "--no-progress",
    ]
    r = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (summary,) = (project / "out").glob("*/summary.json")
    assert json.loads(summary.read_text())["completed"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, argv, missing",
    [
        ("dqn", ["--resume", "runs/any"], "harness/resume.py, which --resume need"),
        (
            "ddpg",
            ["--checkpoint-every", "1000"],
            "harness/checkpoint.py, which --checkpoint-every and --resume need",
        ),
        (
            "dqn",
            ["--tensorboard"],
            "harness/extras.py, which --tensorboard, --track, --capture-video, --compile and --cudagraphs need",
        ),
        (
            "sarsa",
            ["--compile"],
            "harness/extras.py, which --tensorboard, --track, --capture-video, --compile and --cudagraphs need",
        ),
        ("n_step_q", ["--env", "MinAtar/Breakout-v1"], "common/minatar.py, which MinAtar ids need"),
        (
            "a2c",
            ["--normalize-obs"],
            "common/normalize.py, which --normalize-obs and --normalize-reward need",
        ),
    ],
)
def test_a_copy_asked_for_a_feature_it_lacks_names_the_file_in_one_line(
    algo, argv, missing, tmp_path
):
    """README: an optional feature imports one more file; a copy without it says which, exit 2, no traceback."""
    project, env = copy_of(algo, tmp_path)
    r = subprocess.run(
        [sys.executable, f"{algo}.py", *argv, "--total-timesteps", "20000", "--run-dir", "out"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"{algo}: error: this copy lacks {missing}; copy it beside the script's other files (README, 'Copying a script')"
    ], r.stderr
    assert not (project / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, extra, status, says",
    [
        (
            signal.SIGINT,
            ["checkpoint.py"],
            130,
            "checkpoint written; resuming it needs harness/resume.py beside the script",
        ),
        (
            signal.SIGTERM,
            [],
            75,
            "no checkpoint written: that needs harness/checkpoint.py beside the script",
        ),
    ],
)
def test_a_stopped_copy_offers_only_what_it_can_do(sig, extra, status, says, tmp_path):
    """Ctrl-C in a copy that writes checkpoints but lacks harness/resume.py offers no --resume; a stop signal in
    the copy the README lists (no harness/checkpoint.py) stops without a checkpoint and says why."""
    project, env = copy_of("dqn", tmp_path)
    for name in extra:  # README: harness/checkpoint.py for --checkpoint-every
        shutil.copy(ROOT / "harness" / name, project / "harness")
    every = ["--checkpoint-every", "1000"] if extra else []
    proc = subprocess.Popen(
        [
            sys.executable,
            "dqn.py",
            "--total-timesteps",
            "10000000",
            "--learning-starts",
            "500",
            *every,
            "--no-progress",
            "--run-dir",
            "out",
        ],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(
        (project / "out").glob("*/checkpoint.pt" if extra else "*/metrics.csv")
    ):
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status and "Traceback" not in err, err
    assert "--resume" not in err and says in err, err


CHECK_RESUME = [
    "--total-timesteps",
    "2000",
    "--learning-starts",
    "500",
    "--eval-every",
    "1000",
    "--eval-episodes",
    "2",
]


@pytest.mark.slow
def test_check_resume_passes_a_copy_and_catches_one_that_forgets_a_generator(tmp_path):
    """tools/check_resume.py on a copy with the files README lists for --resume: exit 0; the same copy with
    its exploration generator left out of checkpoint(): exit 1, naming where the runs part."""
    project, env = copy_of("dqn", tmp_path)
    for f in ("harness/checkpoint.py", "harness/resume.py"):
        shutil.copy(ROOT / f, project / f)
    # checkpoint() also names a leaf tensor that requires grad (a learned temperature): it resumes too
    source = (project / "dqn.py").read_text()
    with_leaf = re.sub(
        r'(\n(\s*)"rng": rng,)(?=\n\s*\})', r'\1\n\2"temperature": log_alpha,', source
    )
    with_leaf = with_leaf.replace(
        "    rng = np.random.default_rng(explore_seed)",
        "    log_alpha = torch.zeros(1, requires_grad=True)\n    rng = np.random.default_rng(explore_seed)",
    )
    assert with_leaf.count("log_alpha") == 2
    (project / "dqn.py").write_text(with_leaf)
    tool = [sys.executable, str(ROOT / "tools" / "check_resume.py"), "dqn.py", *CHECK_RESUME]
    r = subprocess.run(tool, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumes exactly" in r.stdout
    (project / "dqn.py").write_text(source)
    forgotten = re.sub(
        r'\n\s*"rng": rng,(?=\n\s*\})', "", source
    )  # checkpoint() without the generator
    assert forgotten.count("\n") == source.count("\n") - 1
    (project / "dqn.py").write_text(forgotten)
    r = subprocess.run(tool, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "differs from the straight one: metrics.csv line" in r.stdout


def test_check_resume_refuses_the_flags_it_sets_in_one_line():
    tool = [
        sys.executable,
        str(ROOT / "tools" / "check_resume.py"),
        "algos/dqn.py",
        "--run-dir",
        "x",
    ]
    r = subprocess.run(tool, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == (
        "check_resume: error: --run-dir is set by check_resume itself; leave it out"
    )
