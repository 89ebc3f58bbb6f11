"""DQN: autoreset handling, smoke, determinism, interrupts, bad input, saved models, learning."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dqn
import gymnasium as gym
import numpy as np
import probes
import pytest
import torch
from probes import ChainEnv, RecordingWrapper

from common.replay import ReplayMemory

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "algos" / "dqn.py")


class CountEnv(gym.Env):
    """obs = [steps since reset, episode id]; terminates at a random step, truncated by TimeLimit."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.np_random.integers(1_000_000)
        self.end = self.np_random.integers(2, 12)  # sometimes beyond the time limit (truncation)
        return np.array([self.t, self.episode], np.float32), {}

    def step(self, action):
        self.t += 1
        return (
            np.array([self.t, self.episode], np.float32),
            1.0,
            bool(self.t == self.end),
            False,
            {},
        )


gym.register("CountEnv-v0", entry_point=CountEnv, max_episode_steps=6)


def small_args(tmp_path, **kw):
    base = dict(
        total_timesteps=600,
        learning_starts=100,
        train_every=2,
        batch_size=32,
        buffer_size=1000,
        target_every=50,
        run_dir=str(tmp_path),
        progress=False,
    )
    base.update(kw)
    return dqn.Args(**base)


def read_metrics(run_dir, drop=("wall_seconds", "sps")):
    with open(Path(run_dir) / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


@pytest.mark.parametrize("num_envs", [1, 3])
def test_stored_transitions_never_cross_a_reset(tmp_path, monkeypatch, num_envs):
    stored = []

    class RecordingMemory(ReplayMemory):
        def add(self, obs, actions, rewards, next_obs, terminated, valid=None, done=None):
            stored.append((np.array(obs), np.array(next_obs), np.array(terminated)))
            super().add(obs, actions, rewards, next_obs, terminated, valid, done)

    monkeypatch.setattr(dqn, "ReplayMemory", RecordingMemory)
    summary = dqn.train(
        small_args(tmp_path, env_id="CountEnv-v0", num_envs=num_envs, total_timesteps=300)
    )
    obs = np.concatenate([s[0] for s in stored])
    next_obs = np.concatenate([s[1] for s in stored])
    terminated = np.concatenate([s[2] for s in stored])
    assert len(obs) == summary["total_timesteps"] == 300  # every env step is a real transition
    # same episode, one step later: never the reset observation of the next episode
    np.testing.assert_array_equal(next_obs[:, 0], obs[:, 0] + 1)
    np.testing.assert_array_equal(next_obs[:, 1], obs[:, 1])
    # the time limit cut some episodes: their true final observation (t = 6) was stored, not terminated
    truncations = (next_obs[:, 0] == 6) & ~terminated
    assert truncations.any() and terminated.any()


def test_smoke_run_folder_and_summary(tmp_path):
    summary = dqn.train(small_args(tmp_path, save_model=True, eval_every=200, eval_episodes=3))
    run = Path(summary["run_dir"])
    assert run.parent == tmp_path and run.name.startswith("CartPole-v1__dqn__1__")
    for key in [
        "algo",
        "env",
        "seed",
        "total_timesteps",
        "wall_seconds",
        "sps",
        "eval_return_mean",
        "eval_return_std",
        "eval_episodes",
        "train_return_last10",
        "completed",
    ]:
        assert key in summary
    assert (
        summary["completed"] and summary["total_timesteps"] == 600 and summary["eval_episodes"] == 3
    )
    assert summary["updates"] == (600 - 100) // 2
    assert json.loads((run / "summary.json").read_text()) == summary
    assert json.loads((run / "config.json").read_text())["batch_size"] == 32
    rows = read_metrics(run, drop=())
    assert rows[0].keys() >= {
        "global_step",
        "wall_seconds",
        "episodic_return",
        "loss",
        "q_values",
        "epsilon",
        "eval_return",
    }
    assert any(r["loss"] for r in rows) and any(r["episodic_return"] for r in rows)
    assert sum(1 for r in rows if r["eval_return"]) == 3  # at 200 and 400, and at the end
    state = torch.load(run / "model.pt", weights_only=True)
    assert set(state) == set(dqn.QNetwork((4,), 2, (120, 84)).state_dict())


def test_same_seed_same_metrics(tmp_path):
    a = dqn.train(small_args(tmp_path / "a", num_envs=2, total_timesteps=1000))
    b = dqn.train(small_args(tmp_path / "b", num_envs=2, total_timesteps=1000))
    c = dqn.train(small_args(tmp_path / "c", num_envs=2, total_timesteps=1000, seed=2))
    rows_a, rows_b = read_metrics(a["run_dir"]), read_metrics(b["run_dir"])
    assert any(r["loss"] for r in rows_a)
    assert rows_a == rows_b

    def training(rows):  # without the final evaluation's row, whose seed follows --seed in any case
        return [r for r in rows if not r["eval_return"]]

    assert training(read_metrics(c["run_dir"])) != training(rows_a)


def test_exploration_and_replay_draw_independent_streams(tmp_path, monkeypatch):
    """Generators seeded with the same int draw the same numbers: exploration, replay sampling and
    env 0 (reset(seed=seed)) must each start from their own state."""
    created = []  # (generator, its state when created)
    default_rng = np.random.default_rng

    def recording_default_rng(seed=None):
        g = default_rng(seed)
        created.append((g, g.bit_generator.state))
        return g

    explorers, memories = [], []
    select_actions = dqn.select_actions

    def recording_select_actions(greedy, obs, epsilon, n_actions, rng):
        explorers.append(rng)
        return select_actions(greedy, obs, epsilon, n_actions, rng)

    class RecordingMemory(ReplayMemory):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            memories.append(self)

    monkeypatch.setattr(np.random, "default_rng", recording_default_rng)
    monkeypatch.setattr(dqn, "select_actions", recording_select_actions)
    monkeypatch.setattr(dqn, "ReplayMemory", RecordingMemory)
    dqn.train(small_args(tmp_path, total_timesteps=200))

    def initial_state(g):
        return next(state for h, state in created if h is g)

    exploration, replay = initial_state(explorers[0]), initial_state(memories[0].rng)
    env_0 = (
        default_rng(1).bit_generator.state
    )  # gymnasium seeds env 0 with PCG64(SeedSequence(seed)), as default_rng(seed)
    assert exploration != replay, "exploration and replay sampling draw the same stream"
    assert env_0 != exploration, "exploration draws env 0's stream"
    assert env_0 != replay, "replay sampling draws env 0's stream"


@pytest.mark.parametrize("target_rate, double_dqn", [(1.0, False), (0.25, True)])
def test_target_network_in_train(tmp_path, monkeypatch, target_rate, double_dqn):
    """Once learning has started, the target moves right after the gradient steps of the first env step
    at or past each multiple of --target-every, by exactly --target-rate, and at no other time; the
    regression targets bootstrap from the target network (valuing the online network's argmax with
    --double-dqn)."""
    bootstraps = []  # per gradient step: (targets used, targets from the target network, from the online network)
    targets = dqn.dqn_targets

    def recording_targets(q_target, q_online, rewards, next_obs, terminated, gamma, *a, **kw):
        q_net = RecordingWrapper.made[-1]
        with torch.no_grad():
            next_q, online_next_q = q_net.target(next_obs), q_net.online(next_obs)  # [N, A]
        best = (online_next_q if double_dqn else next_q).argmax(1, keepdim=True)  # [N, 1]
        from_target = rewards + gamma * (1.0 - terminated) * next_q.gather(1, best).squeeze(1)
        from_online = rewards + gamma * (1.0 - terminated) * online_next_q.max(1).values
        used = targets(q_target, q_online, rewards, next_obs, terminated, gamma, *a, **kw)
        bootstraps.append((used, from_target, from_online))
        return used

    monkeypatch.setattr(ChainEnv, "steps", 0)
    monkeypatch.setattr(RecordingWrapper, "made", [])
    monkeypatch.setattr(dqn, "NetworkWrapper", RecordingWrapper)
    monkeypatch.setattr(dqn, "dqn_targets", recording_targets)
    # 3 envs: env steps 3, 6, ..., 300; learning from step 93 on, 3 gradient steps per env step
    summary = dqn.train(
        small_args(
            tmp_path,
            env_id=probes.CHAIN_ID,
            num_envs=3,
            total_timesteps=300,
            learning_starts=90,
            train_every=1,
            target_every=50,
            target_rate=target_rate,
            double_dqn=double_dqn,
            hidden_sizes=(16,),
        )
    )
    (q_net,) = RecordingWrapper.made
    events = q_net.events
    assert summary["updates"] == 70 * 3 == len(bootstraps)  # env steps 93, 96, ..., 300

    assert [e["step"] for e in events if e["kind"] == "after sync"] == [102, 150, 201, 252, 300]
    for before, after in zip(events, events[1:]):
        if after["kind"] == "before sync":  # a sync follows the gradient steps of the same env step
            assert before["kind"] == "after update" and before["step"] == after["step"]
            assert not torch.equal(
                after["target"], after["online"]
            )  # it had drifted since the last sync
        if after["kind"] == "after sync":
            # target <- rate * online + (1 - rate) * target: a copy at rate 1
            torch.testing.assert_close(
                after["target"],
                target_rate * before["online"] + (1 - target_rate) * before["target"],
            )
            assert torch.equal(after["target"], after["online"]) == (target_rate == 1.0)
        else:  # the target moves at syncs only, and never by a gradient step
            assert torch.equal(after["target"], before["target"])
    # at a gradient step the target equals the online network only at the start and right after a hard sync
    for before, update in zip([None] + events, events):
        if update["kind"] == "before update":
            fresh = before is None or (before["kind"] == "after sync" and target_rate == 1.0)
            assert torch.equal(update["target"], update["online"]) == fresh

    apart = 0
    for used, from_target, from_online in bootstraps:
        torch.testing.assert_close(used, from_target)
        apart += not torch.allclose(from_target, from_online)
    assert (
        apart >= len(bootstraps) // 2
    )  # most gradient steps see a target that differs from the online network


def test_numpy_policy_matches_torch_after_updates(tmp_path):
    torch.manual_seed(0)
    from common.network import NetworkWrapper

    q_net = NetworkWrapper(dqn.QNetwork((4,), 3, (16, 8)), lr=0.1)
    act = dqn.greedy_policy(q_net.online, torch.device("cpu"))
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    for _ in range(3):  # the numpy views must follow the optimizer's in-place updates
        expected = q_net.online(torch.as_tensor(obs)).argmax(1).numpy()
        np.testing.assert_array_equal(act(obs), expected)
        q_net.train_step(q_net.online(torch.as_tensor(obs)).pow(2).mean())


def test_epsilon_schedule_and_double_dqn_targets():
    assert dqn.linear_epsilon(1.0, 0.05, 100, 0) == 1.0
    assert dqn.linear_epsilon(1.0, 0.05, 100, 50) == pytest.approx(0.525)
    assert dqn.linear_epsilon(1.0, 0.05, 100, 500) == pytest.approx(0.05)

    class Fixed(torch.nn.Module):
        def __init__(self, q):
            super().__init__()
            self.q = torch.tensor(q)

        def forward(self, x):
            return self.q.expand(len(x), -1)

    target, online = Fixed([1.0, 5.0, 3.0]), Fixed([0.0, 0.0, 9.0])
    rewards, next_obs, terminated = (
        torch.tensor([1.0, 1.0]),
        torch.zeros(2, 4),
        torch.tensor([0.0, 1.0]),
    )
    # DQN: max of the target net (5); Double DQN: target's value (3) of the online net's argmax (2)
    assert dqn.dqn_targets(target, online, rewards, next_obs, terminated, 0.5, False).tolist() == [
        3.5,
        1.0,
    ]
    assert dqn.dqn_targets(target, online, rewards, next_obs, terminated, 0.5, True).tolist() == [
        2.5,
        1.0,
    ]


def test_huber_double_dqn_soft_target_and_clipping_run(tmp_path):
    s = dqn.train(
        small_args(
            tmp_path,
            loss="huber",
            double_dqn=True,
            target_rate=0.01,
            target_every=1,
            clip_grad_norm=1.0,
            num_envs=4,
        )
    )
    assert s["completed"]


def run_cli(*argv, **kw):
    return subprocess.run(
        [sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=120, **kw
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, words",
    [
        (["--env", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
        (["--env", "Pendulum-v1"], "Discrete"),
        (["--total-timesteps", "0"], "--total-timesteps"),
        (["--batch-size", "-4"], "--batch-size"),
        (["--batch-size", "512", "--buffer-size", "100"], "--buffer-size"),
        (["--start-epsilon", "1.5"], "--start-epsilon"),
        (["--end-epsilon", "-0.1"], "--end-epsilon"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(tmp_path, argv, words):
    r = run_cli(*argv, "--run-dir", str(tmp_path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("dqn: error:"), r.stderr
    assert "Traceback" not in r.stderr
    assert not any(tmp_path.iterdir())  # nothing half-written


@pytest.mark.slow
def test_sigterm_writes_a_checkpoint_and_keeps_logs(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            SCRIPT,
            "--total-timesteps",
            "10000000",
            "--learning-starts",
            "500",
            "--run-dir",
            str(tmp_path),
            "--save-model",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob("*/metrics.csv")):
        time.sleep(0.2)
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    assert "Traceback" not in err and "--resume" in err
    run = next(tmp_path.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["completed"] is False
        and summary["error"] == "preempted"
        and summary["total_timesteps"] > 0
    )
    assert (
        (run / "model.pt").exists()
        and (run / "checkpoint.pt").exists()
        and len(read_metrics(run)) > 0
    )


@pytest.mark.slow
def test_nan_loss_stops_with_a_message(tmp_path):
    r = run_cli(
        "--total-timesteps",
        "3000",
        "--learning-starts",
        "100",
        "--train-every",
        "1",
        "--learning-rate",
        "1e38",
        "--run-dir",
        str(tmp_path),
        "--no-progress",
    )
    assert r.returncode == 1, r.stderr
    assert "loss became" in r.stderr and "Traceback" not in r.stderr
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["completed"] is False and "loss became" in summary["error"]


@pytest.mark.slow
def test_saved_model_evaluates_from_the_command_line(tmp_path):
    summary = dqn.train(small_args(tmp_path, save_model=True, capture_video=True, eval_episodes=2))
    run = Path(summary["run_dir"])
    assert len(list((run / "videos").rglob("*.mp4"))) == 2  # the final evaluation's two episodes
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools/evaluate.py"), str(run), "--episodes", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "over 3 episodes" in r.stdout


@pytest.mark.slow
def test_tracking_with_wandb_offline(tmp_path):
    pytest.importorskip("wandb")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    r = run_cli(
        "--total-timesteps",
        "300",
        "--learning-starts",
        "100",
        "--track",
        "--run-dir",
        str(tmp_path),
        "--no-progress",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.glob("*/wandb/offline-run-*"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_learns_cartpole(tmp_path, seed):
    """Defaults except a 20k budget with 1k heatup and CleanRL's constant step size (the default
    decay to 0 halves the learning a budget this short gets): a random policy scores ~20, solved
    (v0) is 195."""
    s = dqn.train(
        dqn.Args(
            seed=seed,
            total_timesteps=20_000,
            learning_starts=1000,
            anneal_lr=False,
            run_dir=str(tmp_path),
            progress=False,
        )
    )
    assert s["eval_return_mean"] >= 195, s


@pytest.mark.parametrize("anneal", [True, False])
def test_step_size_decays_linearly_to_zero_over_the_learning_phase(tmp_path, monkeypatch, anneal):
    """--anneal-lr (the default): the k-th gradient step uses lr * (1 - k / N), N the learning
    phase's gradient steps ((total - heatup) / train_every * gradient_steps), so the last uses lr / N;
    --no-anneal-lr keeps lr throughout."""
    seen = []
    real = dqn.NetworkWrapper.train_step
    monkeypatch.setattr(
        dqn.NetworkWrapper,
        "train_step",
        lambda self, loss, *a: seen.append(self.lr) or real(self, loss, *a),
    )
    s = dqn.train(
        dqn.Args(
            total_timesteps=600,
            learning_starts=200,
            train_every=4,
            gradient_steps=2,
            batch_size=8,
            learning_rate=1e-3,
            anneal_lr=anneal,
            eval_episodes=1,
            run_dir=str(tmp_path),
            progress=False,
        )
    )
    n = (600 // 4 - 200 // 4) * 2
    assert s["completed"] and s["updates"] == len(seen) == n
    expected = 1e-3 * (1 - np.arange(n) / n) if anneal else np.full(n, 1e-3)
    np.testing.assert_allclose(seen, expected, rtol=1e-9, atol=0)


def test_epsilon_in_a_run_decays_over_the_exploration_fraction_after_the_heatup(
    tmp_path, monkeypatch
):
    """Uniform actions during the heatup; then, at env step s, epsilon-greedy with
    epsilon = start + (end - start) * min(1, s / (exploration_fraction * total_timesteps))."""
    seen = []
    real = dqn.select_actions
    monkeypatch.setattr(
        dqn,
        "select_actions",
        lambda greedy, obs, epsilon, *a: seen.append(epsilon) or real(greedy, obs, epsilon, *a),
    )
    summary = dqn.train(
        dqn.Args(
            total_timesteps=400,
            learning_starts=100,
            batch_size=8,
            train_every=4,
            start_epsilon=0.9,
            end_epsilon=0.1,
            exploration_fraction=0.5,
            eval_episodes=1,
            run_dir=str(tmp_path),
            progress=False,
        )
    )
    assert summary["completed"] and len(seen) == 300  # steps 101 to 400
    steps = np.arange(101, 401)
    np.testing.assert_allclose(seen, 0.9 - 0.8 * np.minimum(1.0, steps / 200), rtol=0, atol=1e-12)
