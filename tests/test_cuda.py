"""The CUDA path, on a machine with a GPU (skipped where torch sees none, as on CI's machines).

Every script trains with `--device cuda`; a run stopped and resumed there writes the same metrics.csv, weights and
evaluation as the uninterrupted run there; with `--device auto` a checkpoint moves between a GPU
machine and a CPU-only one in both directions; a model saved on the GPU loads on a machine without one and acts as it did. The replay
memories sample on the GPU exactly the rows they sample on the CPU. --compile and --cudagraphs give the eager
metrics within float tolerance there, and a run resumed under --cudagraphs equals the uninterrupted one.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_checkpoint import CASES, MODULES, assert_same_run, make_args, metrics, stop_at_env_step
from test_pixels import fill

from common.atari import FrameMemory  # noqa: E402
from common.fastpath import probe_batch
from common.replay import ReplayMemory
from harness.errors import InputError

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def on_gpu(**kw) -> dict:
    return dict(kw, device="cuda")


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_script_trains_on_the_gpu_and_its_model_loads_on_a_cpu(tmp_path, case):
    algo, kw = CASES[case]
    module = MODULES[algo]
    args = make_args(algo, tmp_path, **on_gpu(**kw))
    summary = module.train(args)
    assert summary["completed"] and summary["error"] is None and summary["device"] == "cuda"
    assert math.isfinite(summary["eval_return_mean"])
    model = Path(summary["run_dir"]) / "model.pt"
    saved = torch.load(model, weights_only=True)  # where it was saved from
    tensors = [t for v in saved.values() for t in (v.values() if isinstance(v, dict) else [v])]
    assert tensors and all(t.is_cuda for t in tensors)

    # the same weights act the same on both devices, on standard-normal observations (float rounding
    # across devices is far below the gaps between Q-values there)
    act_cpu, act_gpu = (
        module.load_policy(args, str(model), "cpu"),
        module.load_policy(args, str(model), "cuda"),
    )
    env = gym.make(kw["env_id"])
    obs = probe_batch(env.observation_space.shape)
    env.close()
    a, b = np.asarray(act_cpu(obs)), np.asarray(act_gpu(obs))
    assert a.shape == b.shape and len(a) == len(obs)
    if np.issubdtype(a.dtype, np.integer):
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_stopped_and_resumed_on_the_gpu_equals_the_uninterrupted_run_there(
    tmp_path, monkeypatch, case
):
    algo, kw = CASES[case]
    module = MODULES[algo]
    straight = module.train(make_args(algo, tmp_path / "straight", **on_gpu(**kw)))
    with monkeypatch.context() as m:
        stop_at_env_step(m, module, calls=137)
        stopped = module.train(make_args(algo, tmp_path / "resumed", **on_gpu(**kw)))
    assert (
        stopped["error"] == "preempted"
        and 0 < stopped["total_timesteps"] < straight["total_timesteps"]
    )
    resumed = module.train(
        make_args(algo, tmp_path / "ignored", resume=stopped["run_dir"], **on_gpu(**kw))
    )
    assert resumed["device"] == "cuda"
    assert_same_run(resumed, straight)


@pytest.mark.slow
@pytest.mark.parametrize("gpu_first", [True, False])
@pytest.mark.parametrize("case", ["dqn-CartPole", "a2c-Pendulum", "naf-Pendulum"])
def test_a_checkpoint_moves_between_a_gpu_machine_and_a_cpu_one(
    tmp_path, monkeypatch, case, gpu_first
):
    """With `--device auto` (the default) a run preempted on a GPU node resumes on a CPU-only one,
    and the other way round; naming another device than the run's is refused in one line."""
    algo, kw = CASES[case]
    module = MODULES[algo]
    auto = dict(kw, device="auto")
    with monkeypatch.context() as m:
        if not gpu_first:
            m.setattr(torch.cuda, "is_available", lambda: False)
        stop_at_env_step(m, module, calls=137)
        stopped = module.train(make_args(algo, tmp_path, **auto))
    assert stopped["error"] == "preempted" and stopped["device"] == ("cuda" if gpu_first else "cpu")
    other = "cpu" if gpu_first else "cuda"
    with pytest.raises(
        InputError, match=re.escape(f"--device was 'auto' in that run, '{other}' now")
    ):
        module.train(make_args(algo, tmp_path, resume=stopped["run_dir"], **dict(kw, device=other)))
    with monkeypatch.context() as m:
        if gpu_first:
            m.setattr(torch.cuda, "is_available", lambda: False)
        resumed = module.train(make_args(algo, tmp_path, resume=stopped["run_dir"], **auto))
    assert (
        resumed["completed"]
        and resumed["device"] == other
        and resumed["resumed_at"] == [stopped["total_timesteps"]]
    )
    assert math.isfinite(resumed["eval_return_mean"])


def test_replay_memory_lives_on_the_gpu_and_samples_the_rows_the_cpu_one_samples():
    rng = np.random.default_rng(0)
    mems = {
        "host": ReplayMemory(300, (3,), (2,), discrete=False, device="cpu", seed=7),
        "gpu": ReplayMemory(300, (3,), (2,), discrete=False, device="cuda", seed=7),
    }
    for _ in range(40):  # 400 rows into 300: wraps around
        rows = (
            rng.normal(size=(10, 3)).astype(np.float32),
            rng.normal(size=(10, 2)).astype(np.float32),
            rng.normal(size=10),
            rng.normal(size=(10, 3)).astype(np.float32),
            rng.random(10) < 0.1,
        )
        for m in mems.values():
            m.add(*rows)
    assert all(
        t.is_cuda
        for t in (mems["gpu"].obs, mems["gpu"].actions, mems["gpu"].rewards, mems["gpu"].next_obs)
    )
    for _ in range(3):
        a, b = mems["host"].sample(64), mems["gpu"].sample(64)
        for x, y in zip(a, b):
            assert y.is_cuda and torch.equal(x, y.cpu())
    # a memory checkpointed on the GPU loads on the CPU and goes on sampling the same rows
    back = ReplayMemory(300, (3,), (2,), discrete=False, device="cpu", seed=0)
    back.load_state_dict(mems["gpu"].state_dict())
    assert torch.equal(back.sample(64).obs, mems["gpu"].sample(64).obs.cpu())


def test_frame_memory_sends_the_same_batches_to_the_gpu():
    mems = {
        "host": FrameMemory(200, (5, 6), 4, 2, device="cpu", seed=3),
        "gpu": FrameMemory(200, (5, 6), 4, 2, device="cuda", seed=3),
    }
    for m in mems.values():
        fill(m, 2, 4, 150)
    for _ in range(3):
        a, b = mems["host"].sample(32), mems["gpu"].sample(32)
        for x, y in zip(a, b):
            assert y.is_cuda and torch.equal(x, y.cpu())


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["compile", "cudagraphs"])
@pytest.mark.parametrize(
    "case",
    [
        "dqn-CartPole",
        "n_step_q-CartPole",
        "sarsa-CartPole",
        "a2c-CartPole",
        "ddpg-Pendulum",
        "naf-Pendulum-twin",
    ],
)
def test_compiled_and_graph_replayed_updates_give_the_eager_metrics_on_the_gpu(
    tmp_path, case, mode
):
    from test_compile import AGAINST_EAGER, close, train

    algo, kw = AGAINST_EAGER[case]
    eager = train(algo, tmp_path / "eager", **on_gpu(**kw))
    fast = train(algo, tmp_path / mode, **on_gpu(**kw), **{mode: True})
    assert fast["completed"] and fast["error"] is None and fast["compile_seconds"] > 0
    rows_e, rows_f = metrics(eager["run_dir"]), metrics(fast["run_dir"])
    assert len(rows_e) == len(rows_f)
    for row_e, row_f in zip(rows_e, rows_f):
        bad = {k: (row_e[k], row_f[k]) for k in row_e if not close(row_e[k], row_f[k])}
        assert not bad, (row_e["global_step"], bad)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["dqn-CartPole", "ddpg-Pendulum"])
def test_stopped_and_resumed_under_cudagraphs_equals_the_uninterrupted_run(
    tmp_path, monkeypatch, case
):
    from test_compile import train

    algo, kw = CASES[case]
    kw = on_gpu(**kw, cudagraphs=True)
    straight = train(algo, tmp_path / "straight", **kw)
    with monkeypatch.context() as m:
        stop_at_env_step(m, MODULES[algo], calls=137)
        stopped = train(algo, tmp_path / "resumed", **kw)
    resumed = train(algo, tmp_path / "ignored", resume=stopped["run_dir"], **kw)
    assert_same_run(resumed, straight)


def test_cudagraphs_is_taken_on_the_gpu_and_auto_picks_it_for_atari():
    from harness.cli import RunArgs, check, device

    check(RunArgs(cudagraphs=True, device="cuda"))
    assert (
        device(RunArgs(env_id="ALE/Breakout-v5")).type == "cuda" and device(RunArgs()).type == "cpu"
    )
