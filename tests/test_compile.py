"""--compile and --cudagraphs on a CPU: the compiled update gives the eager metrics within float
tolerance, a run stopped and resumed under --compile equals the uninterrupted compiled run, an
edited forward() drives a compiled network, compile time is reported apart, and the combinations
that cannot work are refused in one line. --device auto: CUDA only where it was measured faster.

Each run compiles afresh (torch.compiler.reset()): in one process, dynamo would otherwise keep
recompiling the same loss function for every new network and fall back to eager past its limit.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from test_checkpoint import CASES, MODULES, assert_same_run, make_args, metrics, stop_at_env_step
from torch import nn

import harness.cli
import harness.extras
import harness.run
from harness.cli import RunArgs
from harness.errors import InputError
from harness.run import Run

SCRIPT_CASES = [
    "dqn-CartPole",
    "n_step_q-CartPole",
    "sarsa-CartPole",
    "a2c-Pendulum",
    "ddpg-Pendulum",
    "naf-Pendulum-twin",
]
# against eager: a2c logs its loss every 100 updates, and on CartPole (discrete actions) float rounding
# changes no sampled action, where Pendulum's Gaussian actions carry it into the episodes
AGAINST_EAGER = {
    **{case: CASES[case] for case in SCRIPT_CASES if case != "a2c-Pendulum"},
    "a2c-CartPole": ("a2c", {**CASES["a2c-CartPole"][1], "total_timesteps": 4400}),
}


def train(algo: str, tmp_path: Path, **kw) -> dict:
    torch.compiler.reset()
    return MODULES[algo].train(make_args(algo, tmp_path, **kw))


def close(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-3, abs_tol=1e-5)
    except ValueError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("case", list(AGAINST_EAGER))
def test_compiled_update_gives_the_eager_metrics(tmp_path, case):
    algo, kw = AGAINST_EAGER[case]
    eager = train(algo, tmp_path / "eager", **kw)
    compiled = train(algo, tmp_path / "compiled", compile=True, **kw)
    assert compiled["completed"] and compiled["error"] is None
    assert compiled["compile_seconds"] > 0 and "compile_seconds" not in eager
    assert compiled["updates"] == eager["updates"]
    rows_e, rows_c = metrics(eager["run_dir"]), metrics(compiled["run_dir"])
    assert len(rows_e) == len(rows_c) and any(
        v for row in rows_e for k, v in row.items() if k.endswith("loss")
    )
    for row_e, row_c in zip(rows_e, rows_c):
        assert row_e.keys() == row_c.keys()
        bad = {k: (row_e[k], row_c[k]) for k in row_e if not close(row_e[k], row_c[k])}
        assert not bad, (row_e["global_step"], bad)
    assert math.isclose(compiled["eval_return_mean"], eager["eval_return_mean"], rel_tol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("case", SCRIPT_CASES)
def test_stopped_and_resumed_compiled_run_equals_the_uninterrupted_one(tmp_path, monkeypatch, case):
    algo, kw = CASES[case]
    kw = {**kw, "compile": True}
    straight = train(algo, tmp_path / "straight", **kw)
    with monkeypatch.context() as m:
        stop_at_env_step(m, MODULES[algo], calls=137)
        stopped = train(algo, tmp_path / "resumed", **kw)
    assert stopped["error"] == "preempted"
    resumed = train(algo, tmp_path / "ignored", resume=stopped["run_dir"], **kw)
    assert resumed["resumed_at"] == [stopped["total_timesteps"]]
    assert_same_run(resumed, straight)


def test_resume_keeps_the_compile_mode_and_reads_folders_written_before_it(tmp_path):
    algo, kw = CASES["dqn-CartPole"]
    kw = {**kw, "total_timesteps": 400, "learning_starts": 100}
    first = MODULES[algo].train(make_args(algo, tmp_path, checkpoint_every=200, **kw))
    run_dir = Path(first["run_dir"])
    with pytest.raises(InputError, match="--compile was False in that run, True now"):
        Run(algo, make_args(algo, tmp_path, resume=str(run_dir), compile=True, **kw), ("loss",))
    config = json.loads((run_dir / "config.json").read_text())
    for key in ("compile", "cudagraphs"):  # a folder from before the flags existed: their defaults
        del config[key]
    (run_dir / "config.json").write_text(json.dumps(config))
    resumed = MODULES[algo].train(
        make_args(algo, tmp_path, resume=str(run_dir), **{**kw, "total_timesteps": 600})
    )
    assert resumed["completed"] and resumed["resumed_at"] == [400]


def test_impossible_combinations_are_refused_in_one_line(monkeypatch):
    with pytest.raises(InputError, match="--cudagraphs needs a CUDA device"):
        harness.cli.check(RunArgs(cudagraphs=True, device="cpu"))
    monkeypatch.setattr(
        harness.extras.shutil, "which", lambda command: None
    )  # no C++ compiler on the PATH
    with pytest.raises(InputError, match="--compile on a CPU needs a C\\+\\+ compiler"):
        harness.cli.check(RunArgs(compile=True, device="cpu"))
    harness.cli.check(RunArgs(device="cpu"))  # eager needs no compiler


def test_device_auto_takes_the_gpu_only_for_atari(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    device = lambda **kw: harness.cli.device(RunArgs(**kw)).type  # noqa: E731
    assert (
        device(env_id="ALE/Breakout-v5") == "cuda"
        and device(env_id="BreakoutNoFrameskip-v4") == "cuda"
    )
    assert device(env_id="CartPole-v1") == "cpu" and device(env_id="MinAtar/Breakout-v1") == "cpu"
    assert (
        device(env_id="CartPole-v1", device="cuda") == "cuda"
        and device(env_id="ALE/Pong-v5", device="cpu") == "cpu"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device(env_id="ALE/Breakout-v5") == "cpu"


class Edited(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))

    def forward(self, x):
        return -self.net(x) + 1.0  # an edit a numpy fast path built from self.net would miss


def test_compiled_network_runs_the_edited_forward_and_its_compile_time_is_counted(
    tmp_path, monkeypatch
):
    torch.compiler.reset()
    args = dataclasses.replace(RunArgs(), compile=True, run_dir=str(tmp_path), progress=False)
    run = Run("dqn", args, ("loss",))
    net = Edited()
    assert (
        run.compile(net) is net
    )  # on a CPU acting is not compiled (the numpy fast path serves it)
    monkeypatch.setattr(run, "device", torch.device("cuda"))  # as if on a GPU
    compiled = run.compile(net)
    assert compiled is not net and compiled.net is net.net  # the layers stay reachable
    x = torch.randn(5, 3)
    assert torch.allclose(compiled(x), net(x)) and torch.allclose(compiled(x), -net.net(x) + 1.0)
    assert run.compile_seconds > 0
    square = run.compile(lambda t: t * t)
    seconds = run.compile_seconds
    assert torch.equal(square(x), x * x) and run.compile_seconds > seconds
    summary = run.finish(0)
    assert summary["compile_seconds"] == round(run.compile_seconds, 2)
