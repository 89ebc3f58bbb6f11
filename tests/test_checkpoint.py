"""Checkpoint and exact resume: an interrupted and resumed run equals the uninterrupted one.

Every script, on a classic-control env (and DDPG on a MuJoCo env): a run stopped by SIGUSR1 at
an arbitrary step (it checkpoints at the next step boundary) and resumed writes the same
metrics.csv (wall-clock columns aside), the same final weights and the same evaluation as the
run that was never stopped. Then the failure paths: SIGKILL while a checkpoint is written,
a corrupted checkpoint, a changed algorithm argument, another algorithm's run folder.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import a2c
import ddpg
import dqn
import n_step_q
import naf
import numpy as np
import pytest
import sarsa
import torch

import harness.checkpoint
import harness.resume

ROOT = Path(__file__).resolve().parents[1]
MODULES = {"dqn": dqn, "n_step_q": n_step_q, "sarsa": sarsa, "a2c": a2c, "ddpg": ddpg, "naf": naf}
WALL_CLOCK = ("wall_seconds", "sps")

CASES = {
    "dqn-CartPole": (
        "dqn",
        dict(
            env_id="CartPole-v1",
            num_envs=2,
            total_timesteps=1600,
            learning_starts=200,
            train_every=2,
            batch_size=32,
            buffer_size=1000,
            target_every=100,
            eval_every=600,
        ),
    ),
    "n_step_q-CartPole": (
        "n_step_q",
        dict(
            env_id="CartPole-v1",
            num_envs=4,
            n_steps=5,
            total_timesteps=1600,
            target_every=100,
            eval_every=600,
            paper_epsilons=True,
        ),
    ),
    "sarsa-CartPole": (
        "sarsa",
        dict(
            env_id="CartPole-v1",
            num_envs=4,
            n_steps=5,
            total_timesteps=1600,
            target_network=True,
            target_every=100,
            eval_every=600,
        ),
    ),
    "a2c-CartPole": (
        "a2c",
        dict(env_id="CartPole-v1", num_envs=4, n_steps=5, total_timesteps=1600, eval_every=600),
    ),
    "a2c-Pendulum": (
        "a2c",
        dict(
            env_id="Pendulum-v1",
            num_envs=4,
            n_steps=5,
            total_timesteps=1600,
            normalize_obs=True,
            normalize_reward=True,
            gae_lambda=0.9,
        ),
    ),
    "ddpg-Pendulum": (
        "ddpg",
        dict(
            env_id="Pendulum-v1",
            total_timesteps=900,
            learning_starts=100,
            batch_size=32,
            buffer_size=500,
            hidden_sizes=(32, 32),
            noise="ou",
            eval_every=450,
        ),
    ),
    "naf-Pendulum": (
        "naf",
        dict(
            env_id="Pendulum-v1",
            total_timesteps=900,
            learning_starts=100,
            batch_size=32,
            buffer_size=500,
            hidden_sizes=(32, 32),
            eval_every=450,
        ),
    ),
    "naf-Pendulum-twin": (
        "naf",
        dict(
            env_id="Pendulum-v1",
            total_timesteps=900,
            learning_starts=100,
            batch_size=32,
            buffer_size=500,
            hidden_sizes=(32, 32),
            eval_every=450,
            twin_q=True,
        ),
    ),
    "ddpg-HalfCheetah": (
        "ddpg",
        dict(
            env_id="HalfCheetah-v5",
            total_timesteps=700,
            learning_starts=100,
            batch_size=32,
            buffer_size=1000,
            hidden_sizes=(32, 32),
        ),
    ),
}


def make_args(algo: str, tmp_path: Path, **kw):
    base = dict(
        run_dir=str(tmp_path), progress=False, eval_episodes=2, save_model=True, device="cpu"
    )
    return MODULES[algo].Args(**{**base, **kw})


def metrics(run_dir) -> list[dict]:
    with open(Path(run_dir) / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in csv.DictReader(f)]


def weights(run_dir) -> dict:
    state = torch.load(Path(run_dir) / "model.pt", weights_only=True)
    flat = {}
    for key, value in state.items():
        for k, v in value.items() if isinstance(value, dict) else [(None, value)]:
            flat[f"{key}.{k}"] = v
    return flat


def stop_at_env_step(monkeypatch, module, calls: int) -> None:
    """SIGUSR1 to this process during the `calls`-th vector step, as SLURM would send it."""
    count = {"n": 0}
    original = module.true_next_obs

    def counting(next_obs, infos):
        count["n"] += 1
        if count["n"] == calls:
            os.kill(os.getpid(), signal.SIGUSR1)
        return original(next_obs, infos)

    monkeypatch.setattr(module, "true_next_obs", counting)


def assert_same_run(resumed: dict, straight: dict) -> None:
    assert resumed["completed"] and resumed["error"] is None
    assert (
        resumed["total_timesteps"] == straight["total_timesteps"]
        and resumed["updates"] == straight["updates"]
    )
    assert metrics(resumed["run_dir"]) == metrics(straight["run_dir"])
    a, b = weights(resumed["run_dir"]), weights(straight["run_dir"])
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert resumed["eval_return_mean"] == straight["eval_return_mean"]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_stopped_and_resumed_run_equals_the_uninterrupted_run(tmp_path, monkeypatch, case):
    algo, kw = CASES[case]
    module = MODULES[algo]
    straight = module.train(make_args(algo, tmp_path / "straight", **kw))
    assert (
        straight["completed"] and straight["checkpoint_seconds"] is None
    )  # no checkpoint asked for, none written

    with monkeypatch.context() as m:
        stop_at_env_step(
            m, module, calls=137
        )  # not a rollout or logging boundary; past every case's learning_starts
        stopped = module.train(make_args(algo, tmp_path / "resumed", **kw))
    assert stopped["error"] == "preempted" and not stopped["completed"]
    assert 0 < stopped["total_timesteps"] < straight["total_timesteps"]
    run_dir = Path(stopped["run_dir"])
    assert (run_dir / "checkpoint.pt").exists()

    resumed = module.train(make_args(algo, tmp_path / "ignored", resume=str(run_dir), **kw))
    assert resumed["run_dir"] == str(run_dir) and resumed["resumed_at"] == [
        stopped["total_timesteps"]
    ]
    assert resumed["envs_on_resume"] == "restored"
    assert_same_run(resumed, straight)


@pytest.mark.slow
def test_periodic_checkpoints_and_an_extended_run(tmp_path):
    """A finished run with --checkpoint-every resumes with a larger --total-timesteps: one history."""
    kw = dict(CASES["ddpg-Pendulum"][1], checkpoint_every=300)
    first = ddpg.train(make_args("ddpg", tmp_path, **kw))
    assert first["completed"] and first["checkpoint_bytes"] > 0
    longer = dict(kw, total_timesteps=1200)
    extended = ddpg.train(make_args("ddpg", tmp_path, resume=first["run_dir"], **longer))
    assert (
        extended["completed"]
        and extended["total_timesteps"] == 1200
        and extended["resumed_at"] == [900]
    )
    rows = metrics(extended["run_dir"])
    steps = [int(r["global_step"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] == 1200
    # the first run's final evaluation at 900 stays: the same as a 1200-step run's periodic one there
    evals = [int(r["global_step"]) for r in rows if r["eval_return"]]
    assert evals == [450, 900, 1200]


def test_resume_without_the_replay_memory_refills_it_before_learning(tmp_path, monkeypatch):
    algo, kw = CASES["dqn-CartPole"]
    kw = dict(kw, checkpoint_memory=False)
    straight = dqn.train(make_args(algo, tmp_path / "straight", **kw))
    with monkeypatch.context() as m:
        stop_at_env_step(m, dqn, calls=400)  # step 800: learning since 200
        stopped = dqn.train(make_args(algo, tmp_path / "resumed", **kw))
    resumed = dqn.train(make_args(algo, tmp_path, resume=stopped["run_dir"], **kw))
    assert resumed["completed"]
    # 2 envs add 2 rows per iteration: the memory holds learning_starts (200) rows again after 100
    # iterations, and learning restarts in the 100th; the 99 before it skip their one round each
    assert resumed["updates"] == straight["updates"] - 99


def test_env_that_cannot_be_captured_restarts_its_episodes(tmp_path, monkeypatch):
    kw = dict(
        env_id="LunarLander-v3",
        total_timesteps=600,
        learning_starts=100,
        batch_size=32,
        buffer_size=1000,
    )
    with monkeypatch.context() as m:
        stop_at_env_step(m, dqn, calls=250)
        stopped = dqn.train(make_args("dqn", tmp_path, **kw))
    resumed = dqn.train(make_args("dqn", tmp_path, resume=stopped["run_dir"], **kw))
    assert resumed["completed"] and resumed["total_timesteps"] == 600
    assert (
        resumed["envs_on_resume"].startswith("episodes restarted on resume")
        and "b2World" in resumed["envs_on_resume"]
    )


# the command line: exit codes, one-line errors, files left alone -------------------------------
def cli(algo: str, *flags: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "algos" / f"{algo}.py"), *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


DQN_FLAGS = (
    "--total-timesteps",
    "1200",
    "--learning-starts",
    "200",
    "--train-every",
    "2",
    "--batch-size",
    "32",
    "--buffer-size",
    "1000",
    "--target-every",
    "100",
    "--eval-episodes",
    "2",
    "--no-progress",
    "--save-model",
)


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory) -> Path:
    """A finished DQN run with checkpoints every 300 steps (its last at 1200)."""
    tmp = tmp_path_factory.mktemp("dqn_run")
    r = cli("dqn", *DQN_FLAGS, "--checkpoint-every", "300", "--run-dir", str(tmp))
    assert r.returncode == 0, r.stderr
    return next(tmp.iterdir())


def copy_run(run: Path, to: Path) -> Path:
    to.mkdir()
    for f in run.iterdir():
        if f.is_file():
            (to / f.name).write_bytes(f.read_bytes())
    return to


@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_resumes_from_the_previous_one(tmp_path, dqn_run):
    """The process dies half-way through writing its second checkpoint; --resume uses the first."""
    child = f"""
import os, signal, sys
sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "algos")!r}]
import torch, harness.checkpoint as ck, dqn
from harness.cli import parse_args
calls = {{"n": 0}}
real_save = torch.save
def dying_save(obj, f, *a, **k):
    calls["n"] += 1
    if calls["n"] == 2:
        f.write(b"PK\\x03\\x04 half a checkpoint")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, f, *a, **k)
ck.torch.save = dying_save
sys.argv = ["dqn.py", *{list(DQN_FLAGS)!r}, "--checkpoint-every", "300", "--run-dir", {str(tmp_path / "killed")!r}]
sys.exit(dqn.main(parse_args(dqn.Args, dqn.__doc__)))
"""
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stderr
    run = next((tmp_path / "killed").iterdir())
    assert harness.resume.load(run / "checkpoint.pt")["global_step"] == 300  # the first one, whole
    assert int(metrics(run)[-1]["global_step"]) > 300  # rows written after it, to be dropped
    r = cli("dqn", "--resume", str(run))
    assert r.returncode == 0, r.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_at"] == [300]
    assert metrics(run) == metrics(dqn_run)
    assert weights(run).keys() == weights(dqn_run).keys()
    assert all(torch.equal(weights(run)[k], weights(dqn_run)[k]) for k in weights(run))
    assert not list(run.glob(".checkpoint.pt.tmp-*"))


@pytest.mark.slow
def test_corrupted_checkpoint_is_one_line_and_left_untouched(tmp_path, dqn_run):
    run = copy_run(dqn_run, tmp_path / "run")
    data = (run / "checkpoint.pt").read_bytes()
    for broken in (data[: len(data) // 2], b"not a checkpoint at all"):
        (run / "checkpoint.pt").write_bytes(broken)
        metrics_before = (run / "metrics.csv").read_bytes()
        r = cli("dqn", "--resume", str(run))
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and lines[0].startswith("dqn: error:") and "checkpoint" in lines[0]
        ), r.stderr
        assert (run / "checkpoint.pt").read_bytes() == broken and (
            run / "metrics.csv"
        ).read_bytes() == metrics_before


@pytest.mark.slow
def test_resume_refuses_a_changed_algorithm_argument(tmp_path, dqn_run):
    run = copy_run(dqn_run, tmp_path / "run")
    r = cli("dqn", "--resume", str(run), "--learning-rate", "0.001")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--learning-rate" in lines[0] and "0.00025" in lines[0], r.stderr
    # the run length and logging flags may change: a longer run continues from the last checkpoint
    r = cli("dqn", "--resume", str(run), "--total-timesteps", "1500", "--eval-episodes", "3")
    assert r.returncode == 0, r.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["total_timesteps"] == 1500
        and summary["eval_episodes"] == 3
        and summary["resumed_at"] == [1200]
    )


@pytest.mark.slow
def test_resume_refuses_another_algorithms_run_or_checkpoint(tmp_path, dqn_run):
    r = cli("sarsa", "--resume", str(dqn_run))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "'dqn'" in r.stderr, (
        r.stderr
    )
    # a sarsa checkpoint dropped into the dqn run folder
    sarsa_run = sarsa.train(
        sarsa.Args(
            total_timesteps=200,
            num_envs=2,
            checkpoint_every=100,
            run_dir=str(tmp_path / "s"),
            progress=False,
            eval_episodes=1,
        )
    )
    run = copy_run(dqn_run, tmp_path / "run")
    (run / "checkpoint.pt").write_bytes((Path(sarsa_run["run_dir"]) / "checkpoint.pt").read_bytes())
    r = cli("dqn", "--resume", str(run))
    assert (
        r.returncode == 2
        and len(r.stderr.strip().splitlines()) == 1
        and "'sarsa' checkpoint" in r.stderr
    ), r.stderr
    r = cli("dqn", "--resume", str(tmp_path / "nowhere"))
    assert (
        r.returncode == 2
        and len(r.stderr.strip().splitlines()) == 1
        and "no config.json" in r.stderr
    ), r.stderr


def test_checkpoint_files_hold_no_code(tmp_path, dqn_run):
    """weights_only loading: a pickle that would run code is refused, not executed."""

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    buf = io.BytesIO()
    torch.save({"format": 1, "x": Evil()}, buf)
    (tmp_path / "evil.pt").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="cannot be read"):
        harness.resume.load(tmp_path / "evil.pt")
    assert not (tmp_path / "pwned").exists()
    state = harness.resume.load(dqn_run / "checkpoint.pt")
    assert state["algo"] == "dqn" and state["global_step"] == 1200


def test_env_state_round_trip_is_exact_for_classic_and_mujoco_envs():
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    for env_id in ("CartPole-v1", "Pendulum-v1", "MountainCar-v0", "Acrobot-v1", "Hopper-v5"):

        def make(env_id=env_id):
            return gym.vector.SyncVectorEnv(
                [functools.partial(gym.make, env_id) for _ in range(2)],
                autoreset_mode=AutoresetMode.SAME_STEP,
            )

        a = make()
        a.action_space.seed(3)
        a.reset(seed=1)
        for _ in range(300):
            a.step(a.action_space.sample())
        state, why = harness.checkpoint.env_state(a)
        assert state is not None, why
        buf = io.BytesIO()
        torch.save({"format": 1, "envs": state}, buf)
        buf.seek(0)
        b = make()
        b.reset(seed=99)
        harness.resume.set_env_state(b, torch.load(buf, weights_only=True)["envs"])
        for _ in range(600):  # through several episode ends and resets
            action = a.action_space.sample()
            assert np.array_equal(action, b.action_space.sample())
            for x, y in zip(a.step(action)[:4], b.step(action)[:4]):
                assert np.array_equal(x, y), env_id


def test_resume_arguments_come_from_the_run_folder(monkeypatch, dqn_run):
    """`--resume RUN` alone takes every stored argument (here the non-default batch and memory sizes)."""
    monkeypatch.setattr(sys, "argv", ["dqn.py", "--resume", str(dqn_run)])
    from harness.cli import parse_args

    args = parse_args(dqn.Args, dqn.__doc__)
    stored = json.loads((dqn_run / "config.json").read_text())
    assert args.batch_size == 32 and args.buffer_size == 1000 and args.resume == str(dqn_run)
    assert {k: v for k, v in dataclasses.asdict(args).items() if k != "resume"} == {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in stored.items()
        if k not in ("algo", "resume")
    }


def test_global_generators_round_trip_through_a_checkpoint_file(tmp_path):
    import random

    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    harness.checkpoint.save(tmp_path / "c.pt", {"format": 1, "rng": harness.checkpoint.rng_state()})
    first = (
        random.random(),
        np.random.rand(3).tolist(),
        torch.rand(3).tolist(),
        random.gauss(0, 1),
    )
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    harness.resume.set_rng_state(harness.resume.load(tmp_path / "c.pt")["rng"])
    assert (
        random.random(),
        np.random.rand(3).tolist(),
        torch.rand(3).tolist(),
        random.gauss(0, 1),
    ) == first


# checkpoints every --checkpoint-every env steps ------------------------------------------------
# 3 envs: a step-by-step script adds 3 env steps per iteration, a rollout script 15 (5 steps x 3
# envs); neither divides the period, so a checkpoint falls on the first boundary past each
# multiple, and one more at the run's end, which is no multiple's boundary here
CADENCE = {
    "dqn": (
        dict(env_id="CartPole-v1", learning_starts=200, batch_size=32, buffer_size=1000),
        100,
        699,
        [102, 201, 300, 402, 501, 600, 699],
    ),
    "ddpg": (
        dict(
            env_id="Pendulum-v1",
            learning_starts=200,
            batch_size=32,
            buffer_size=1000,
            hidden_sizes=(32, 32),
        ),
        100,
        699,
        [102, 201, 300, 402, 501, 600, 699],
    ),
    "naf": (
        dict(
            env_id="Pendulum-v1",
            learning_starts=200,
            batch_size=32,
            buffer_size=1000,
            hidden_sizes=(32, 32),
        ),
        100,
        699,
        [102, 201, 300, 402, 501, 600, 699],
    ),
    "n_step_q": (dict(env_id="CartPole-v1", n_steps=5), 40, 195, [45, 90, 120, 165, 195]),
    "sarsa": (dict(env_id="CartPole-v1", n_steps=5), 40, 195, [45, 90, 120, 165, 195]),
    "a2c": (dict(env_id="CartPole-v1", n_steps=5), 40, 195, [45, 90, 120, 165, 195]),
}


@pytest.mark.parametrize("algo", list(CADENCE))
def test_a_checkpoint_each_time_the_step_count_passes_a_multiple_of_checkpoint_every(
    tmp_path, monkeypatch, algo
):
    kw, every, total, expected = CADENCE[algo]
    written = []
    real_save = harness.checkpoint.save

    def save(path, state):
        written.append(state["global_step"])
        return real_save(path, state)

    monkeypatch.setattr(harness.checkpoint, "save", save)
    summary = MODULES[algo].train(
        make_args(
            algo,
            tmp_path,
            num_envs=3,
            total_timesteps=total,
            checkpoint_every=every,
            save_model=False,
            eval_episodes=1,
            **kw,
        )
    )
    assert summary["completed"] and summary["total_timesteps"] == expected[-1]
    assert written == expected
    assert (
        harness.resume.load(Path(summary["run_dir"]) / "checkpoint.pt")["global_step"]
        == expected[-1]
    )


def test_a_tensor_that_requires_grad_is_put_back_in_place():
    """A leaf tensor with requires_grad (SAC's log temperature) in checkpoint()'s dict takes the saved
    values in place and stays a leaf that requires grad."""
    log_alpha = torch.zeros(3, requires_grad=True)
    saved = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    harness.resume.load_into(log_alpha, saved, "log_alpha")
    assert torch.equal(log_alpha, saved) and log_alpha.requires_grad and log_alpha.is_leaf
