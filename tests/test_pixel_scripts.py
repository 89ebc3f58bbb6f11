"""The scripts on pixel envs: MinAtar and Atari smoke runs of dqn, n_step_q, sarsa and a2c.

Each run records what reaches the network's image torso (common.torso.ToFloat, its first layer):
uint8 images [N, C, H, W], when acting and when learning. The Atari runs also check that rewards
are clipped to their sign for learning only and that the logged episodes are whole games, and
every run that its evaluation envs play whole games (training=False). Needs the pixels extra.
"""

from __future__ import annotations

import csv
import functools
import importlib
import json
import sys
from pathlib import Path

import evaluate
import numpy as np
import pytest
import torch

import harness.run
from common import pixels
from common.torso import ToFloat
from harness.run import evaluate as run_evaluate

ALGOS = ["dqn", "n_step_q", "sarsa", "a2c"]
# the rollout scripts: 2 envs, rollouts of 5 steps, so learning sees [10, C, H, W]; dqn: batches of 8
SMALL = {
    "dqn": dict(
        num_envs=1,
        learning_starts=100,
        batch_size=8,
        buffer_size=1_000,
        train_every=4,
        target_every=100,
    ),
    "n_step_q": dict(num_envs=2, n_steps=5),
    "sarsa": dict(num_envs=2, n_steps=5, expected=True, target_network=True, target_every=100),
    "a2c": dict(num_envs=2, n_steps=5),
}
LEARNING_BATCH = {"dqn": 8, "n_step_q": 10, "sarsa": 10, "a2c": 10}
# where each script hands its learning rewards over: (function, position of `rewards`)
TARGETS = {
    "dqn": ("dqn_targets", 2),
    "n_step_q": ("n_step_q_targets", 1),
    "sarsa": ("sarsa_targets", 1),
    "a2c": ("a2c_targets", 0),
}


@pytest.fixture
def torso_inputs(monkeypatch):
    """(dtype, shape) of every batch that reaches an image torso."""
    seen = []
    real = ToFloat.forward

    def forward(self, x):
        seen.append((x.dtype, tuple(x.shape)))
        return real(self, x)

    monkeypatch.setattr(ToFloat, "forward", forward)
    return seen


@pytest.fixture
def made(monkeypatch):
    """The `training` flag of every env common.pixels.make builds."""
    flags = []
    real = pixels.make

    def make(env_id, training=True, render_mode=None, scale_obs=False, **kw):
        flags.append(training)
        return real(env_id, training, render_mode, scale_obs, **kw)

    monkeypatch.setattr(pixels, "make", make)
    return flags


def small(algo: str, tmp_path: Path, **kw):
    module = importlib.import_module(algo)
    args = dict(run_dir=str(tmp_path), progress=False, device="cpu", eval_episodes=2, **SMALL[algo])
    return module, module.Args(**{**args, **kw})


@pytest.mark.parametrize("algo", ALGOS)
def test_minatar_smoke_feeds_uint8_grids_to_the_network(tmp_path, torso_inputs, made, algo):
    pytest.importorskip("minatar")
    module, args = small(
        algo, tmp_path, env_id="MinAtar/Breakout-v1", total_timesteps=400, save_model=True
    )
    summary = module.train(args)
    assert summary["completed"] and summary["error"] is None and summary["updates"] > 0
    run = Path(summary["run_dir"])
    assert json.loads((run / "summary.json").read_text())["updates"] == summary["updates"]
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert any(r["episodic_return"] for r in rows) and rows[-1]["eval_return"]
    assert {dtype for dtype, _ in torso_inputs} == {torch.uint8}
    assert {shape[1:] for _, shape in torso_inputs} == {(4, 10, 10)}  # Breakout's 4 channels, first
    batches = {shape[0] for _, shape in torso_inputs}
    assert LEARNING_BATCH[algo] in batches and args.num_envs in batches  # learning and acting
    # validate() first makes one env to check the id and its spaces; then the training envs; the evaluation plays whole games
    assert made == [True] * (1 + args.num_envs) + [False] * args.eval_episodes
    # the saved model reloads as the same greedy policy (what tools/evaluate.py does)
    act = module.load_policy(args, str(run / "model.pt"))
    returns = run_evaluate(
        act,
        functools.partial(module.make_env, args.env_id, training=False),
        args.eval_episodes,
        args.seed + 100_000,
    )
    assert returns.mean() == summary["eval_return_mean"]


@pytest.mark.parametrize("algo", ALGOS)
def test_atari_smoke_feeds_uint8_frame_stacks_to_the_network(tmp_path, torso_inputs, algo):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    module, args = small(
        algo, tmp_path, env_id="BreakoutNoFrameskip-v4", total_timesteps=200, eval_episodes=1
    )
    summary = module.train(args)
    assert summary["completed"] and summary["error"] is None and summary["updates"] > 0
    assert (Path(summary["run_dir"]) / "summary.json").exists()
    assert {dtype for dtype, _ in torso_inputs} == {torch.uint8}
    assert {shape[1:] for _, shape in torso_inputs} == {(4, 84, 84)}
    assert LEARNING_BATCH[algo] in {shape[0] for _, shape in torso_inputs}


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_atari_learns_from_clipped_rewards_and_logs_whole_games(tmp_path, monkeypatch, algo):
    # Asterix pays 50 a bonus and loses a life every ~70 random steps: within 300 steps of one env
    # acting at random (a2c's initial policy is near uniform) there are rewards above 1 and lives
    # lost that do not end the game
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    at_random = {} if algo == "a2c" else {"end_epsilon": 1.0}
    module, args = small(
        algo,
        tmp_path,
        env_id="AsterixNoFrameskip-v4",
        total_timesteps=300,
        eval_episodes=1,
        num_envs=1,
        **at_random,
    )
    learned, logged, games = [], [], []
    name, position = TARGETS[algo]
    real_targets, real_episodes, real_game_over = (
        getattr(module, name),
        harness.run.Run.episodes,
        pixels.game_over,
    )

    def targets(*a, **kw):
        learned.append(a[position].detach().clone().reshape(-1))
        return real_targets(*a, **kw)

    def episodes(self, global_step, rewards, done):
        logged.append((np.array(rewards), np.array(done)))
        return real_episodes(self, global_step, rewards, done)

    def game_over(terminated, truncated, infos):
        over = real_game_over(terminated, truncated, infos)
        games.append((terminated | truncated, over))
        return over

    monkeypatch.setattr(module, name, targets)
    monkeypatch.setattr(harness.run.Run, "episodes", episodes)
    monkeypatch.setattr(pixels, "game_over", game_over)
    summary = module.train(args)
    assert summary["completed"] and summary["error"] is None
    learned = torch.cat(learned)
    assert (
        set(learned.tolist()) <= {-1.0, 0.0, 1.0} and (learned == 1.0).any()
    )  # clipped to their sign
    assert max(r.max() for r, _ in logged) > 1.0  # the logged returns add the game's own rewards
    assert len(games) == len(logged) and all(
        np.array_equal(over, done) for (_, over), (_, done) in zip(games, logged)
    )
    assert any(
        (ended & ~over).any() for ended, over in games
    )  # a lost life ended an episode but no game was logged


def test_evaluate_py_plays_whole_games(tmp_path, monkeypatch, made):
    pytest.importorskip("minatar")
    module, args = small(
        "dqn", tmp_path, env_id="MinAtar/Breakout-v1", total_timesteps=200, save_model=True
    )
    monkeypatch.setitem(
        sys.modules, "dqn", module
    )  # tools/evaluate.py loads the script afresh under this name
    summary = module.train(args)
    made.clear()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]))) == 0
    assert (
        made == [True] + [False] * args.eval_episodes
    )  # load_policy reads the spaces off one env; the episodes are whole games


# --- dqn's frame memory in a real Atari run ------------------------------------------------------
def recording_frame_memory(monkeypatch, module):
    """Replaces the script's FrameMemory by one that keeps what each `add` was given, whole stacks per
    env (the brute-force record), and lists every memory made."""
    from common.atari import FrameMemory

    made = []

    class Recording(FrameMemory):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.record = [[] for _ in range(self.num_envs)]
            made.append(self)

        def add(self, obs, actions, rewards, next_obs, terminated, done):
            for i in range(self.num_envs):
                self.record[i].append(
                    (
                        np.array(obs[i]),
                        int(actions[i]),
                        float(rewards[i]),
                        np.array(next_obs[i]),
                        float(terminated[i]),
                    )
                )
            return super().add(obs, actions, rewards, next_obs, terminated, done)

    import common.atari

    monkeypatch.setattr(
        common.atari, "FrameMemory", Recording
    )  # the script imports it when it meets an Atari id
    return made


def assert_memory_rebuilds(memory, record):
    """Every transition the memory can sample equals, stack for stack, the newest ones `add` was given."""
    env, entry = memory.sampleable()
    got = memory.transitions(env, entry)
    for i, rows in enumerate(record):
        mine = np.flatnonzero(env == i)
        assert len(mine) >= len(rows) - 3  # nothing overwritten: all but the oldest stack - 1
        for k, (obs, action, reward, next_obs, terminated) in zip(
            mine, rows[len(rows) - len(mine) :]
        ):
            assert np.array_equal(got.obs[k].numpy(), obs) and np.array_equal(
                got.next_obs[k].numpy(), next_obs
            )
            assert (got.actions[k].item(), got.rewards[k].item(), got.terminated[k].item()) == (
                action,
                reward,
                terminated,
            )


def short_atari_games(monkeypatch, frames: int = 200):
    """Atari games cut by a time limit of `frames` frames (~50 agent steps), so a short run holds truncations."""
    import gymnasium as gym

    pixels.kind("BreakoutNoFrameskip-v4")
    real = gym.make
    monkeypatch.setattr(
        gym, "make", lambda env_id, **kw: real(env_id, max_episode_steps=frames, **kw)
    )


ATARI_DQN = dict(
    env_id="BreakoutNoFrameskip-v4",
    num_envs=2,
    total_timesteps=400,
    learning_starts=100,
    batch_size=8,
    buffer_size=1_000,
    train_every=4,
    target_every=100,
    end_epsilon=1.0,
    eval_episodes=1,
)


def test_dqn_frame_memory_rebuilds_every_stack_the_agent_acted_on(tmp_path, monkeypatch):
    """Lives lost (terminations) and time limits (truncations) end episodes; what dqn tells the
    memory (`done`) must make every rebuilt stack, at episode starts too, the one the env gave."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    short_atari_games(monkeypatch)
    made = recording_frame_memory(monkeypatch, importlib.import_module("dqn"))
    ends = []
    real_game_over = pixels.game_over
    monkeypatch.setattr(
        pixels,
        "game_over",
        lambda te, tr, infos: ends.append((te.copy(), tr.copy())) or real_game_over(te, tr, infos),
    )
    module, args = small("dqn", tmp_path, **ATARI_DQN)
    summary = module.train(args)
    assert summary["completed"] and summary["updates"] > 0 and len(made) == 1
    assert (
        sum(te.sum() for te, _ in ends) >= 2 and sum(tr.sum() for _, tr in ends) >= 2
    )  # both kinds of end
    assert_memory_rebuilds(made[0], made[0].record)


def test_dqn_atari_resume_restarts_the_episodes_in_the_frame_memory(tmp_path, monkeypatch):
    """An Atari env's state cannot be captured: a resumed run resets its envs, and the frame
    memory (restored from the checkpoint) must start new episodes there, not stack the reset
    frames onto the old episodes'."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    import os
    import signal

    short_atari_games(monkeypatch)
    module = importlib.import_module("dqn")
    made = recording_frame_memory(monkeypatch, module)
    calls = {"n": 0}
    real_true_next_obs = module.true_next_obs

    def stop_at_step_90(next_obs, infos):
        calls["n"] += 1
        if calls["n"] == 90:  # mid-episode (SIGUSR1: checkpoint at this step's end, then stop)
            os.kill(os.getpid(), signal.SIGUSR1)
        return real_true_next_obs(next_obs, infos)

    with monkeypatch.context() as m:
        m.setattr(module, "true_next_obs", stop_at_step_90)
        _, args = small("dqn", tmp_path, **ATARI_DQN)
        stopped = module.train(args)
    assert stopped["error"] == "preempted" and stopped["total_timesteps"] == 180
    _, args = small("dqn", tmp_path, resume=stopped["run_dir"], **ATARI_DQN)
    resumed = module.train(args)
    assert resumed["completed"] and resumed["envs_on_resume"].startswith(
        "episodes restarted on resume"
    )
    first, second = made
    assert_memory_rebuilds(second, [a + b for a, b in zip(first.record, second.record)])
