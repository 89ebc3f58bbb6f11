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

import numpy as np
import pytest
import torch

import harness.run
import evaluate
from common import pixels
from harness.run import evaluate as run_evaluate
from common.torso import ToFloat

ALGOS = ["dqn", "n_step_q", "sarsa", "a2c"]
# the rollout scripts: 2 envs, rollouts of 5 steps, so learning sees [10, C, H, W]; dqn: batches of 8
SMALL = {
    "dqn": dict(num_envs=1, learning_starts=100, batch_size=8, buffer_size=1_000, train_every=4, target_every=100),
    "n_step_q": dict(num_envs=2, n_steps=5),
    "sarsa": dict(num_envs=2, n_steps=5, expected=True, target_network=True, target_every=100),
    "a2c": dict(num_envs=2, n_steps=5),
}
LEARNING_BATCH = {"dqn": 8, "n_step_q": 10, "sarsa": 10, "a2c": 10}
# where each script hands its learning rewards over: (function, position of `rewards`)
TARGETS = {"dqn": ("dqn_targets", 2), "n_step_q": ("n_step_q_targets", 1), "sarsa": ("sarsa_targets", 1), "a2c": ("a2c_targets", 0)}


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

    def make(env_id, training=True, render_mode=None, scale_obs=False):
        flags.append(training)
        return real(env_id, training, render_mode, scale_obs)

    monkeypatch.setattr(pixels, "make", make)
    return flags


def small(algo: str, tmp_path: Path, **kw):
    module = importlib.import_module(algo)
    args = dict(run_dir=str(tmp_path), progress=False, device="cpu", eval_episodes=2, **SMALL[algo])
    return module, module.Args(**{**args, **kw})


@pytest.mark.parametrize("algo", ALGOS)
def test_minatar_smoke_feeds_uint8_grids_to_the_network(tmp_path, torso_inputs, made, algo):
    pytest.importorskip("minatar")
    module, args = small(algo, tmp_path, env_id="MinAtar/Breakout-v1", total_timesteps=400, save_model=True)
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
    assert made == [True] * args.num_envs + [False] * args.eval_episodes  # the evaluation plays whole games
    # the saved model reloads as the same greedy policy (what evaluate.py does)
    act = module.load_policy(args, str(run / "model.pt"))
    returns = run_evaluate(act, functools.partial(module.make_env, args.env_id, training=False), args.eval_episodes, args.seed + 100_000)
    assert returns.mean() == summary["eval_return_mean"]


@pytest.mark.parametrize("algo", ALGOS)
def test_atari_smoke_feeds_uint8_frame_stacks_to_the_network(tmp_path, torso_inputs, algo):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    module, args = small(algo, tmp_path, env_id="BreakoutNoFrameskip-v4", total_timesteps=200, eval_episodes=1)
    summary = module.train(args)
    assert summary["completed"] and summary["error"] is None and summary["updates"] > 0
    assert (Path(summary["run_dir"]) / "summary.json").exists()
    assert {dtype for dtype, _ in torso_inputs} == {torch.uint8}
    assert {shape[1:] for _, shape in torso_inputs} == {(4, 84, 84)}
    assert LEARNING_BATCH[algo] in {shape[0] for _, shape in torso_inputs}


@pytest.mark.parametrize("algo", ALGOS)
def test_atari_learns_from_clipped_rewards_and_logs_whole_games(tmp_path, monkeypatch, algo):
    # Asterix pays 50 a bonus and loses a life every ~70 random steps: within 300 steps of one env
    # acting at random (a2c's initial policy is near uniform) there are rewards above 1 and lives
    # lost that do not end the game
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    at_random = {} if algo == "a2c" else {"end_epsilon": 1.0}
    module, args = small(algo, tmp_path, env_id="AsterixNoFrameskip-v4", total_timesteps=300, eval_episodes=1, num_envs=1, **at_random)
    learned, logged, games = [], [], []
    name, position = TARGETS[algo]
    real_targets, real_episodes, real_game_over = getattr(module, name), harness.run.Run.episodes, pixels.game_over

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
    assert set(learned.tolist()) <= {-1.0, 0.0, 1.0} and (learned == 1.0).any()  # clipped to their sign
    assert max(r.max() for r, _ in logged) > 1.0  # the logged returns add the game's own rewards
    assert len(games) == len(logged) and all(np.array_equal(over, done) for (_, over), (_, done) in zip(games, logged))
    assert any((ended & ~over).any() for ended, over in games)  # a lost life ended an episode but no game was logged


def test_evaluate_py_plays_whole_games(tmp_path, monkeypatch, made):
    pytest.importorskip("minatar")
    module, args = small("dqn", tmp_path, env_id="MinAtar/Breakout-v1", total_timesteps=200, save_model=True)
    monkeypatch.setitem(sys.modules, "dqn", module)  # evaluate.py loads the script afresh under this name
    summary = module.train(args)
    made.clear()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]))) == 0
    assert made == [True] + [False] * args.eval_episodes  # load_policy reads the spaces off one env; the episodes are whole games
