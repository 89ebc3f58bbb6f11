"""run.py's SLURM backend through submitit's local executor (the same tasks, without a cluster), and
the direction of the imports in benchmarks/.

A tiny suite runs as submitit tasks; a finished run is skipped; a task stopped mid-run as SLURM
stops it at a time limit or a preemption (SIGUSR2 to the task) is requeued and resumes the run
from its checkpoint; a run killed outright (SIGKILL) resumes from its last periodic checkpoint
when the command is run again; both end with the metrics and evaluation of a run never stopped.
The local backend stopped by SIGTERM stops its run with a checkpoint, and that run resumes too.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import cluster  # noqa: E402
import probes  # noqa: E402
import run  # noqa: E402
from suite import load_suite  # noqa: E402

TINY = """
[suites.tiny]
description = "test suite"
seeds = [1, 2]
eval_points = 2

[[suites.tiny.cells]]
algo = "dqn"
env = "CartPole-v1"
steps = 300
settings = { learning_starts = 100, buffer_size = 300, batch_size = 16, train_every = 4, hidden_sizes = [16] }

[[suites.tiny.cells]]
algo = "dqn"
env = "Acrobot-v1"
steps = 6_000
seeds = [1]
settings = { learning_starts = 200, buffer_size = 2_000, batch_size = 64, train_every = 1, target_every = 200, hidden_sizes = [64, 64], eval_episodes = 3 }
"""
WALL_CLOCK = ("wall_seconds", "sps")


@pytest.fixture(scope="module")
def suites(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suites") / "suites.toml"
    path.write_text(TINY)
    return path


def args(suites: Path, results: Path, *extra: str) -> list[str]:
    return [
        "--suite",
        "tiny",
        "--suites-file",
        str(suites),
        "--results-dir",
        str(results),
        "--status-every",
        "1000",
        *extra,
    ]


def slurm(suites: Path, results: Path, *extra: str) -> list[str]:
    return args(suites, results, "--backend", "slurm", "--submitit-cluster", "local", *extra)


def metrics(run_dir: Path) -> list[dict]:
    (path,) = run_dir.glob("*/metrics.csv")
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in csv.DictReader(f)]


def result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def wait_for_checkpoint(run_dir: Path, timeout: float = 120.0) -> None:
    """Until the run has written a checkpoint and is still going (fails rather than let the run finish unstopped)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if list(run_dir.glob("*/checkpoint.pt")):
            assert not (run_dir / "result.json").exists(), (
                "the run ended before it could be stopped: make it longer"
            )
            return
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint in {run_dir} after {timeout} s")


@pytest.fixture(scope="module")
def straight(suites, tmp_path_factory) -> Path:
    """The long cell run once by the local backend, never stopped, without checkpoints: the reference."""
    results = tmp_path_factory.mktemp("straight")
    assert run.main(args(suites, results, "--envs", "Acrobot-v1")) == 0
    (run_dir,) = (results / "tiny" / "runs").iterdir()
    return run_dir


@pytest.mark.slow
def test_slurm_backend_runs_the_cells_and_skips_finished_ones(suites, tmp_path, capsys):
    results = tmp_path / "results"
    assert run.main(slurm(suites, results, "--envs", "CartPole-v1", "--workers", "2")) == 0
    out = capsys.readouterr().out
    assert (
        "2 to run with 2 worker(s) through submitit's local executor" in out
        and out.count("OK     dqn CartPole-v1") == 2
    )
    runs = sorted((results / "tiny" / "runs").iterdir())
    assert [p.name.split("__")[2] for p in runs] == ["s1", "s2"], "the local backend's folders"
    for p in runs:
        r = result(p)
        assert (
            r["status"] == "ok"
            and r["summary"]["completed"]
            and r["summary"]["total_timesteps"] == 300
        )
        assert list(p.glob("*/metrics.csv"))
    assert list((results / "tiny" / "submitit").glob("*_log.out")), "submitit ran the tasks"
    before = {p: (p / "result.json").stat().st_mtime_ns for p in runs}

    assert run.main(slurm(suites, results, "--envs", "CartPole-v1", "--workers", "2")) == 0
    out = capsys.readouterr().out
    assert "2 already ok" in out and "0 to run" in out and "submit " not in out
    assert before == {p: (p / "result.json").stat().st_mtime_ns for p in runs}

    # a task started for a run that finished meanwhile (a requeued task) returns its result, runs nothing
    cell = load_suite("tiny", suites).cells[0]
    assert cluster.CellTask("tiny", cell, 1, str(results), 0, fresh=False)() == result(runs[0])
    assert before == {p: (p / "result.json").stat().st_mtime_ns for p in runs}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the task's process in /proc")
def test_task_stopped_by_slurm_is_requeued_and_resumes_to_the_uninterrupted_result(
    suites, straight, tmp_path
):
    """SIGUSR2 to the job's processes (SLURM's warning before the time limit, and a preemption, as
    submitit asks for them): the run checkpoints, the task is requeued, the run resumes, not restarts."""
    results = tmp_path / "results"
    ns = argparse.Namespace(
        submitit_cluster="local",
        time_limit=10,
        cpus_per_task=1,
        partition=None,
        slurm_option=[],
        workers=1,
    )
    executor = cluster.make_executor(ns, tmp_path / "submitit", "test", 1)
    cell = next(c for c in load_suite("tiny", suites).cells if c.env == "Acrobot-v1")
    sj = executor.submit(cluster.CellTask("tiny", cell, 1, str(results), 1000, fresh=False))
    run_dir = results / "tiny" / "runs" / cell.run_name(1)
    wait_for_checkpoint(run_dir)
    # SLURM's warning signal goes to every process of the job step: the task and the run it started
    # (submitit's LocalJob._interrupt would signal its controller process instead, which has no handler)
    task = _children(sj._process.pid)[0]
    for pid in (task, *_children(task)):
        os.kill(pid, signal.SIGUSR2)
    sj.wait()
    r = result(run_dir)
    assert r["status"] == "ok", r.get("error")
    (stopped_at,) = r["summary"]["resumed_at"]
    assert 1000 <= stopped_at < cell.steps, "resumed once, from a step inside the run"
    log = (run_dir / "log.txt").read_text()
    assert f"preempted at step {stopped_at:,}: checkpoint written" in log, (
        "the signal stopped the run at a checkpoint"
    )
    assert "resuming" in log, "the requeued task resumed the run"
    assert "requeued" in Path(sj.paths.stdout).read_text()
    assert metrics(run_dir) == metrics(straight)
    assert r["summary"]["eval_return_mean"] == result(straight)["summary"]["eval_return_mean"]


def _children(pid: int) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid
            ):
                out.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue
    assert out, f"process {pid} has no child"
    return out


def _pid_of_run(spec: Path) -> int:
    pid = probes.pid_of_run(spec)
    assert pid is not None, f"no process runs {spec}"
    return pid


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the run's process in /proc")
def test_run_killed_mid_run_resumes_from_its_checkpoint_next_time(
    suites, straight, tmp_path, capsys
):
    """SIGKILL (no chance to checkpoint) after a periodic checkpoint: the sweep records the run as
    killed; the same command again resumes it from that checkpoint to the uninterrupted result."""
    results = tmp_path / "results"
    argv = slurm(suites, results, "--envs", "Acrobot-v1", "--checkpoint-every", "1000")
    first = {}
    sweep = threading.Thread(target=lambda: first.update(rc=run.main(argv)))
    sweep.start()
    cell = next(c for c in load_suite("tiny", suites).cells if c.env == "Acrobot-v1")
    run_dir = results / "tiny" / "runs" / cell.run_name(1)
    wait_for_checkpoint(run_dir)
    os.kill(_pid_of_run(run_dir / "spec.json"), signal.SIGKILL)
    sweep.join(120)
    assert first["rc"] == 1, "a killed run is not ok"
    r = result(run_dir)
    assert r["status"] == "killed" and "resumes from its checkpoint next time" in r["error"]
    capsys.readouterr()

    assert run.main(argv) == 0
    assert "1 to run" in capsys.readouterr().out
    r = result(run_dir)
    assert r["status"] == "ok", r.get("error")
    (resumed_at,) = r["summary"]["resumed_at"]
    assert resumed_at > 0 and resumed_at % 1000 == 0, (
        "from the last periodic checkpoint, not from the start"
    )
    assert metrics(run_dir) == metrics(straight)
    assert r["summary"]["eval_return_mean"] == result(straight)["summary"]["eval_return_mean"]


LONG = """
[suites.long]
description = "one run far longer than its --timeout"
seeds = [1]
eval_points = 0

[[suites.long.cells]]
algo = "dqn"
env = "CartPole-v1"
steps = 2_000_000
settings = { learning_starts = 100, buffer_size = 1_000, batch_size = 16, hidden_sizes = [16] }
"""


@pytest.mark.slow
def test_a_run_stopped_by_timeout_resumes_from_its_checkpoint_next_time(tmp_path, capsys):
    """--timeout sends SIGTERM: the script writes a checkpoint and stops; the run is not recorded as failed
    (which the same command would skip) but resumes from that checkpoint when the command runs again."""
    suites = tmp_path / "suites.toml"
    suites.write_text(LONG)
    argv = [
        "--suite",
        "long",
        "--suites-file",
        str(suites),
        "--results-dir",
        str(tmp_path / "results"),
    ]
    argv += ["--checkpoint-every", "500", "--timeout", "20", "--status-every", "1000"]
    assert run.main(argv) == 1, "stopped before its budget: not ok"
    (run_dir,) = (tmp_path / "results" / "long" / "runs").iterdir()
    first = result(run_dir)
    assert first["status"] == "preempted", first.get("error")
    assert (
        "timed out after 20 s (--timeout); it resumes from its checkpoint next time"
        in first["error"]
    )
    capsys.readouterr()
    run.main(argv)
    assert "1 to run" in capsys.readouterr().out
    (resumed_at,) = result(run_dir)["summary"]["resumed_at"]
    assert resumed_at > 0, "from the checkpoint the timeout left, not from the start"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the run's process in /proc")
def test_local_sweep_stopped_by_sigterm_stops_its_run_with_a_checkpoint_and_resumes_it(
    suites, straight, tmp_path
):
    """SIGTERM to the runner alone (kill's default, a scheduler's stop) stops it as Ctrl-C does: it
    passes the signal on to its run, which writes a checkpoint and stops, rather than dying and
    leaving the run going. The same command again resumes the run to the uninterrupted result."""
    results = tmp_path / "results"
    argv = args(suites, results, "--envs", "Acrobot-v1", "--checkpoint-every", "1000")
    sweep = subprocess.Popen(
        [sys.executable, "benchmarks/run.py", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    cell = next(c for c in load_suite("tiny", suites).cells if c.env == "Acrobot-v1")
    run_dir = results / "tiny" / "runs" / cell.run_name(1)
    wait_for_checkpoint(
        run_dir
    )  # in its training loop (metrics.csv is flushed every few seconds: too late a sign)
    pid = _pid_of_run(run_dir / "spec.json")
    sweep.send_signal(signal.SIGTERM)
    out, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 130 and "interrupted: stopping the running runs" in out, out
    assert not Path(f"/proc/{pid}").exists(), "the run was left going"
    r = result(run_dir)
    assert r["status"] == "preempted" and list(run_dir.glob("*/checkpoint.pt"))

    assert run.main(argv) == 0
    r = result(run_dir)
    assert r["status"] == "ok", r.get("error")
    (resumed_at,) = r["summary"]["resumed_at"]
    assert resumed_at > 0
    assert metrics(run_dir) == metrics(straight)
    assert r["summary"]["eval_return_mean"] == result(straight)["summary"]["eval_return_mean"]


def test_bad_slurm_flags_are_one_line_and_exit_2(suites, tmp_path, capsys):
    for extra, message in (
        (["--workers", "0"], "--workers must be >= 1"),
        (["--checkpoint-every", "-5"], "--checkpoint-every must be >= 0"),
        (["--slurm-option", "account"], "--slurm-option takes KEY=VALUE"),
        (["--suite", "nope"], "unknown suite 'nope'"),
        (["--backend", "pbs"], "invalid choice: 'pbs'"),
    ):
        try:
            rc = run.main(slurm(suites, tmp_path, *extra))
        except SystemExit as e:  # argparse's own checks (a choice, a type) exit from the parser
            rc = e.code
        assert rc == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("run: error: ") and message in err and err.count("\n") == 1


def test_slurm_backend_without_slurm_is_one_line_and_exit_2(suites, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(
        "PATH", str(tmp_path)
    )  # no srun, no sbatch: submitit's own answer is a traceback
    assert run.main(args(suites, tmp_path, "--backend", "slurm")) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("run: error: --backend slurm: no SLURM on this machine")
        and err.count("\n") == 1
    ), err


def _commands(script: str) -> list[list[str]]:
    """Every `python benchmarks/<script>` command in the README, docs/*.md and benchmarks/README.md (continued lines joined)."""
    import shlex

    out = []
    for doc in (
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "benchmarks" / "README.md",
    ):
        text = doc.read_text().replace("\\\n", " ")
        out += [
            shlex.split(line.split("#")[0])[2:]
            for line in text.splitlines()
            if line.startswith(f"python benchmarks/{script}")
        ]
    return out


def test_the_documented_slurm_and_tuning_commands_parse(tmp_path, capsys):
    """The SLURM and tuning commands the documents show are accepted as written (dry run; a tuning
    command is only parsed and checked against its cell and space: nothing is run)."""
    import tune

    slurm_runs = [c for c in _commands("run.py") if "slurm" in c]
    tunes = _commands("tune.py")
    assert len(slurm_runs) >= 2 and len(tunes) >= 4
    for argv in slurm_runs:
        assert run.main([*argv, "--results-dir", str(tmp_path), "--dry-run"]) == 0, argv
        assert "to run with" in capsys.readouterr().out
    for argv in tunes:
        a, config = tune.parse(argv)
        assert config["cell"]["algo"] == a.algo and config["space"], argv


def test_a_tuning_worker_task_unpickles_the_worker_function_by_its_module():
    """tune.py hands its worker loop to the task: pickled by reference to `tune.work` (as a SLURM
    node unpickles it), never to `__main__`."""
    import pickle

    import tune

    task = pickle.loads(pickle.dumps(cluster.StudyTask(tune.work, {"name": "x"}, 3)))
    assert task.work is tune.work and (task.config, task.worker, task.interrupted_trial) == (
        {"name": "x"},
        3,
        None,
    )


def test_the_core_imports_no_command_line_tool():
    """One direction: run.py, tune.py, report.py, equivalence.py (and cluster.py, their SLURM
    backend) on top of suite.py, job.py, provenance.py and cli.py, which import none of them."""
    import ast

    tools = {"run", "tune", "report", "equivalence", "cluster"}

    def imports(name: str) -> set[str]:
        tree = ast.parse((ROOT / "benchmarks" / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.split(".")[0])
        return found

    for core in ("suite", "job", "provenance", "cli"):
        assert not imports(core) & tools, core
    assert not imports("cluster") & (tools - {"cluster"}), "the SLURM backend imports the core only"
    assert imports("run") & tools <= {"cluster"} and imports("tune") & tools <= {"cluster", "tune"}
    assert not imports("report") & tools and not imports("equivalence") & tools
