"""harness/distributed.py and the NetworkWrapper's gradient averaging, with two real gloo workers.

The workers are forked from a forkserver that has imported torch once, so each test costs a
second or two rather than two fresh torch imports. Every collective has a short timeout and
every test a deadline, so a broken set-up fails the test instead of hanging CI.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
from torch import nn

from common.network import NetworkWrapper
from harness import distributed

DEADLINE = 120.0  # seconds for a whole two-worker test (normally a few)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(
    fn, *args, nprocs: int = 2, ranks: list[int] | None = None, timeout: float = 20.0
) -> None:
    """Start `fn(i, port, world, *args)` in `nprocs` fresh processes that act as torchrun workers
    (RANK = ranks[i], WORLD_SIZE = nprocs); re-raise the first worker's exception here."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "common"])
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(nprocs),
        "RL_DIST_TIMEOUT": str(timeout),
    }
    ranks = list(range(nprocs)) if ranks is None else ranks
    ctx = tmp.start_processes(
        _worker, (fn, env, ranks, args), nprocs=len(ranks), join=False, start_method="forkserver"
    )
    deadline = time.monotonic() + DEADLINE
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers still running after {DEADLINE}s: a collective hangs")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()


def _worker(i, fn, env, ranks, args):
    os.environ.update(env, RANK=str(ranks[i]), LOCAL_RANK=str(ranks[i]))
    torch.set_num_threads(1)
    try:
        fn(ranks[i], *args)
    finally:
        distributed.shutdown()


def mlp(seed: int, hidden: int = 16) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))


def shared(net: nn.Module, **kwargs) -> NetworkWrapper:
    """A wrapper shared by the workers, as the scripts build it under torchrun: join the group, then wrap."""
    distributed.init()
    return NetworkWrapper(net, workers=distributed, **kwargs)


def all_equal_across_ranks(t: torch.Tensor) -> bool:
    everyone = distributed.gather(t.detach().reshape(1, -1))  # [world, numel]
    return all(torch.equal(everyone[0], row) for row in everyone[1:])


# ---- one process: nothing changes -----------------------------------------------------------------
def test_single_process_needs_no_process_group(monkeypatch):
    for k in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    assert (
        distributed.world_size(),
        distributed.rank(),
        distributed.is_main(),
        distributed.launched(),
    ) == (
        1,
        0,
        True,
        False,
    )
    assert distributed.init() == 1
    net = NetworkWrapper(mlp(0), lr=1e-2, clip_grad_norm=1.0, workers=distributed)
    reference = NetworkWrapper(mlp(0), lr=1e-2, clip_grad_norm=1.0)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        net.train_step(net.online(x).pow(2).sum(1))
        reference.train_step(reference.online(x).pow(2).sum(1))
    assert net.world_size == 1 and not dist.is_initialized()
    assert torch.equal(net.flat_param, reference.flat_param)
    t = torch.arange(6.0).reshape(3, 2)
    assert distributed.gather(t) is t and torch.equal(distributed.average_(t.clone()), t)
    distributed.check_same({"anything": 1})  # no-op
    distributed.shutdown()  # no-op


# ---- two workers: identical weights, averaged gradient == concatenated-batch gradient -------------
def _train_two_workers(rank, steps, optimizer):
    # different initial weights on purpose: the wrapper must start every worker from rank 0's
    net = shared(mlp(seed=rank), lr=3e-3, optimizer=optimizer, clip_grad_norm=0.5, target=True)
    assert net.world_size == 2 and dist.get_backend() == "gloo"
    reference = copy.deepcopy(net.online)  # plain module for the one-process gradient
    assert all_equal_across_ranks(net.flat_param)
    torch.testing.assert_close(
        nn.utils.parameters_to_vector(net.target.parameters()),
        net.flat_param.detach(),
        rtol=0,
        atol=0,
    )
    rank0 = mlp(seed=0)
    torch.testing.assert_close(
        net.flat_param.detach(), nn.utils.parameters_to_vector(rank0.parameters()), rtol=0, atol=0
    )

    g = torch.Generator().manual_seed(100 + rank)  # each worker its own data
    w_true = torch.randn(4, 2, generator=torch.Generator().manual_seed(7))
    clipped = 0
    for step in range(steps):
        x = torch.randn(16, 4, generator=g)  # [B, 4], the same B on every worker
        y = x @ w_true + 0.1 * torch.randn(16, 2, generator=g)
        # one process, concatenated batch [2B], from the current (shared) weights
        x_all, y_all = distributed.gather(x), distributed.gather(y)
        reference.load_state_dict(net.online.state_dict())
        expected = torch.autograd.grad(
            nn.functional.mse_loss(reference(x_all), y_all), list(reference.parameters())
        )
        expected = torch.cat([e.reshape(-1) for e in expected])
        expected_norm = expected.norm()
        expected_clipped = expected * torch.clamp(0.5 / (expected_norm + 1e-6), max=1.0)
        clipped += int(expected_norm > 0.5)

        _, grad_norm = net.train_step(nn.functional.mse_loss(net.online(x), y))
        torch.testing.assert_close(grad_norm, expected_norm, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(
            net.flat_grad, expected_clipped, rtol=1e-5, atol=1e-7
        )  # after clipping
        assert all_equal_across_ranks(net.flat_param), (
            f"weights differ across workers after update {step + 1}"
        )
        assert all_equal_across_ranks(net.flat_grad)
    assert 0 < clipped < steps  # both branches of the clipping were exercised
    final = nn.functional.mse_loss(net.online(x), y).item()
    assert final < 0.1, f"the shared network did not learn the regression (loss {final:.3f})"


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_two_workers_stay_identical_and_average_equals_concatenated_batch(optimizer):
    run_workers(_train_two_workers, 300, optimizer)


# ---- bad set-ups end with a clear message ---------------------------------------------------------
def _mismatched_config(rank, out_dir):
    config = {"env_id": "CartPole-v1", "learning_rate": 7e-4 if rank == 0 else 1e-3, "seed": 1}
    try:
        distributed.init()
        distributed.check_same(config)
    except ValueError as e:
        (out_dir / f"rank{rank}.txt").write_text(str(e))
        return
    raise AssertionError("mismatched configs were not detected")


@pytest.mark.slow
def test_mismatched_arguments_fail_on_every_worker_with_the_field_named(tmp_path):
    start = time.monotonic()
    run_workers(_mismatched_config, tmp_path)
    assert time.monotonic() - start < 30  # detected at once, not by a timeout
    for rank in (0, 1):
        message = (tmp_path / f"rank{rank}.txt").read_text()
        assert "learning_rate: rank 0 has 0.0007, rank 1 has 0.001" in message, message
        assert "seed" not in message and "env_id" not in message  # only the fields that differ


def _mismatched_network(rank, out_dir):
    try:
        shared(mlp(0, hidden=16 if rank == 0 else 32), lr=1e-3)
    except ValueError as e:
        (out_dir / f"rank{rank}.txt").write_text(str(e))
        return
    raise AssertionError("different networks were not detected")


@pytest.mark.slow
def test_different_networks_fail_on_every_worker(tmp_path):
    run_workers(_mismatched_network, tmp_path)
    for rank in (0, 1):
        assert (
            "the network differs across workers: rank 0 has 114 parameters, rank 1 has 226"
            in (tmp_path / f"rank{rank}.txt").read_text()
        )


def _lonely(rank, out_dir):
    start = time.monotonic()
    try:
        shared(mlp(0), lr=1e-3)
    except RuntimeError as e:
        (out_dir / "message.txt").write_text(f"{time.monotonic() - start:.1f}\n{e}")
        return
    raise AssertionError("a group of 2 formed with one worker")


@pytest.mark.slow
def test_missing_worker_times_out_with_a_clear_message(tmp_path):
    run_workers(_lonely, tmp_path, ranks=[0], timeout=2.0)  # WORLD_SIZE 2, rank 1 never starts
    seconds, message = (tmp_path / "message.txt").read_text().split("\n", 1)
    assert (
        "could not form a group of 2 workers at 127.0.0.1:" in message and "within 2s" in message
    ), message
    assert float(seconds) < 15


def _one_dies(rank, out_dir):
    net = shared(mlp(0), lr=1e-3)
    if rank == 1:
        os._exit(0)  # a crash without any goodbye
    time.sleep(0.5)
    try:
        for _ in range(10):
            net.train_step(net.online(torch.ones(4, 4)).pow(2).mean())
    except RuntimeError as e:
        (out_dir / "message.txt").write_text(str(e))
        return
    raise AssertionError("training went on without the dead worker")


@pytest.mark.slow
def test_dead_worker_stops_the_survivor_with_a_clear_message(tmp_path):
    run_workers(_one_dies, tmp_path, timeout=5.0)
    message = (tmp_path / "message.txt").read_text()
    assert message.startswith(
        "rank 0 of 2: all_reduce the gradient failed, another worker died or stopped answering"
    ), message


# ---- the on-policy scripts under torchrun -----------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def _clean_env() -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    return {**env, "OMP_NUM_THREADS": "1", "RL_DIST_TIMEOUT": "60"}


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["a2c", "n_step_q", "sarsa"])
def test_script_runs_unchanged_under_torchrun_with_two_workers(tmp_path, algo):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(ROOT / "algos" / f"{algo}.py"),
        "--total-timesteps",
        "2000",
        "--num-envs",
        "4",
        "--run-dir",
        str(tmp_path),
        "--no-progress",
        "--save-model",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE, env=_clean_env())
    assert p.returncode == 0, p.stdout + p.stderr
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1, runs  # rank 0 alone writes a run folder
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["completed"] and summary["world_size"] == 2 and summary["num_envs"] == 4
    assert summary["total_timesteps"] == 2000 and summary["updates"] == 2000 // (
        2 * 4 * 5
    )  # steps counted over both workers
    assert summary["eval_episodes"] > 0 and (runs[0] / "model.pt").exists()
    assert (
        p.stdout.count(f"{algo}: done in") == 1 and "x 2 workers" in p.stdout
    )  # one worker prints


def _reward_statistics(rank, out_dir):
    import a2c

    import common.normalize

    scalers = []

    class RecordingScaler(common.normalize.RewardScaler):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            scalers.append(self)

    common.normalize.RewardScaler = (
        RecordingScaler  # this worker process's own module, where a2c imports it from
    )
    summary = a2c.train(
        a2c.Args(
            env_id="Pendulum-v1",
            total_timesteps=400,
            num_envs=2,
            n_steps=5,
            normalize_reward=True,
            eval_episodes=1,
            run_dir=str(out_dir / "runs"),
            progress=False,
            device="cpu",
        )
    )
    (scaler,) = scalers
    (out_dir / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "completed": summary["completed"],
                "statistics": [scaler.mean, scaler.var, scaler.count],
                "discounted": scaler.discounted.tolist(),
            }
        )
    )


@pytest.mark.slow
def test_a2c_workers_scale_rewards_by_the_same_statistics(tmp_path):
    """Each worker's rewards are scaled before the gradients are averaged: by statistics of every
    worker's discounted returns, equal on all workers, as the observation statistics are."""
    run_workers(_reward_statistics, tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["completed"] for r in ranks)
    assert ranks[0]["discounted"] != ranks[1]["discounted"]  # the workers' envs differ
    assert ranks[0]["statistics"] == ranks[1]["statistics"]
    # 400 steps over 2 workers x 2 envs: 100 env steps, each merging the 4 envs' discounted returns
    assert ranks[0]["statistics"][2] == pytest.approx(1e-4 + 400)


@pytest.mark.slow
def test_script_workers_with_different_arguments_stop_with_one_line(tmp_path):
    port, procs = str(free_port()), []
    for rank, lr in ((0, "0.0007"), (1, "0.001")):
        env = {
            **_clean_env(),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
        }
        cmd = [
            sys.executable,
            str(ROOT / "algos" / "a2c.py"),
            "--learning-rate",
            lr,
            "--run-dir",
            str(tmp_path),
            "--no-progress",
        ]
        procs.append(
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
        )
    for p in procs:
        _, stderr = p.communicate(timeout=DEADLINE)
        assert p.returncode == 2, stderr
        assert stderr.strip().splitlines() == [
            "a2c: error: arguments differ across the 2 workers (learning_rate: rank 0 has 0.0007, rank 1 has 0.001); "
            "give every worker the same command"
        ], stderr
    assert not list(tmp_path.iterdir())  # no run folder for a run that never started
