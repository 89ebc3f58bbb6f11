"""n_step_q.py: targets against a hand-computed rollout, smoke, determinism, bad input, learning."""

import csv
import functools
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import n_step_q
import numpy as np
import probes
import pytest
import torch
from probes import ChainEnv, RecordingWrapper
from torch import nn

import harness.run
from harness.run import evaluate as run_evaluate

ROOT = Path(__file__).resolve().parents[1]


class ScriptedEnv(gym.Env):
    """Observation [base + 10 * episode + t], reward t (1-based step of the episode).

    Seeded 0 (env 0 of a vector env reset with seed 0): base 0, terminates on its 3rd step.
    Seeded 1 (env 1): base 100, truncates on its 2nd step. Actions are ignored.
    """

    observation_space = gym.spaces.Box(0.0, 1000.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.base, self.term_at, self.trunc_at = (0, 3, None) if seed == 0 else (100, None, 2)
            self.episode = -1
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.base + 10 * self.episode + self.t], dtype=np.float32)

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t == self.term_at, self.t == self.trunc_at, {}


gym.register("NStepQScripted-v0", entry_point=ScriptedEnv)


def linear_q(scale: tuple[float, ...] = (1.0, 2.0)) -> nn.Module:
    """Q(s, a) = scale[a] * s."""
    q = nn.Linear(1, len(scale))
    with torch.no_grad():
        q.weight.copy_(torch.tensor(scale).unsqueeze(1))
        q.bias.zero_()
    return q


def collect(T: int):
    """A rollout of T steps of 2 scripted envs, stored the way n_step_q.train stores it."""
    envs = n_step_q.make_env("NStepQScripted-v0", 2)
    obs, _ = envs.reset(seed=0)
    rows = {k: [] for k in ("obs", "rewards", "terminated", "truncated", "next_obs")}
    for _ in range(T):
        next_obs, rewards, terminated, truncated, infos = envs.step(np.zeros(2, dtype=np.int64))
        rows["obs"].append(obs)
        rows["rewards"].append(rewards.astype(np.float32))  # train stores float32
        rows["terminated"].append(terminated)
        rows["truncated"].append(truncated)
        rows["next_obs"].append(n_step_q.true_next_obs(next_obs, infos))
        obs = next_obs
    envs.close()
    return {k: torch.as_tensor(np.array(v)) for k, v in rows.items()}


def test_rollout_and_targets_by_hand():
    g = 0.5
    r = collect(5)
    # env 0: episode 0 is 0 -> 1 -> 2 -> 3 (terminated, reset to 10), then 10 -> 11 -> 12
    # env 1: 100 -> 101 -> 102 (truncated, reset to 110) -> 111 -> 112 (truncated, reset to 120) -> 121
    # SAME_STEP autoreset: the row after an episode end starts from the reset observation and is
    # a real transition (reward 1); there is no extra reset row with reward 0
    assert r["obs"][:, :, 0].tolist() == [[0, 100], [1, 101], [2, 110], [10, 111], [11, 120]]
    assert r["next_obs"][:, :, 0].tolist() == [[1, 101], [2, 102], [3, 111], [11, 112], [12, 121]]
    assert r["rewards"].tolist() == [[1, 1], [2, 2], [3, 1], [1, 2], [2, 1]]
    assert r["terminated"].tolist() == [
        [False, False],
        [False, False],
        [True, False],
        [False, False],
        [False, False],
    ]
    assert r["truncated"].tolist() == [
        [False, False],
        [False, True],
        [False, False],
        [False, True],
        [False, False],
    ]

    targets = n_step_q.n_step_q_targets(
        linear_q(), r["rewards"], r["next_obs"], r["terminated"], r["truncated"], g
    )

    def V(s):  # max_a Q(s, a) = 2 s
        return 2.0 * s

    expected = [
        # env 0: termination at row 2 stops the sum; rows 3-4 bootstrap at the rollout's end (obs 12)
        [1 + g * 2 + g**2 * 3, 2 + g * 3, 3, 1 + g * 2 + g**2 * V(12), 2 + g * V(12)],
        # env 1: truncations at rows 1 and 3 bootstrap from the final observations 102 and 112,
        # not from the reset observations 110 and 120; row 4 from the rollout's end (121)
        [
            1 + g * 2 + g**2 * V(102),
            2 + g * V(102),
            1 + g * 2 + g**2 * V(112),
            2 + g * V(112),
            1 + g * V(121),
        ],
    ]
    torch.testing.assert_close(targets, torch.tensor(expected).T)


def test_paper_epsilons():
    args = n_step_q.Args(num_envs=10_000, paper_epsilons=True)
    eps = n_step_q.final_epsilons(args, np.random.default_rng(0))
    assert set(np.unique(eps)) == {0.01, 0.1, 0.5}
    assert np.allclose(
        [(eps == 0.1).mean(), (eps == 0.01).mean(), (eps == 0.5).mean()], [0.4, 0.3, 0.3], atol=0.02
    )
    assert n_step_q.Args().paper_epsilons, "the paper's per-env final epsilons are the default"
    one = n_step_q.Args(num_envs=3, paper_epsilons=False)
    assert (n_step_q.final_epsilons(one, np.random.default_rng(0)) == 0.01).all()
    # per-env epsilons decay from the same start to each env's own end
    assert np.allclose(n_step_q.linear_epsilon(1.0, np.array([0.1, 0.5]), 100, 50), [0.55, 0.75])


def test_greedy_policy_is_the_argmax_of_forward():
    q = n_step_q.QNetwork((4,), 3, (16, 8))
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    with torch.no_grad():
        want = q(torch.from_numpy(obs)).argmax(1).numpy()
    assert (n_step_q.greedy_policy(q, torch.device("cpu"))(obs) == want).all()


def test_conv_network_acts_in_torch_and_targets_take_a_rollout_of_images():
    # MinAtar's torso on [4, 10, 10] uint8 grids: greedy actions are forward()'s argmax, and the
    # targets of a [T, B] rollout equal those of each row alone
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    q = n_step_q.QNetwork((4, 10, 10), 3, (16, 8))
    obs = rng.integers(0, 2, size=(64, 4, 10, 10), dtype=np.uint8)
    with torch.no_grad():
        want = q(torch.from_numpy(obs)).argmax(1).numpy()
    assert (n_step_q.greedy_policy(q, torch.device("cpu"))(obs) == want).all() and len(
        set(want)
    ) > 1
    T, B = 4, 3
    next_obs = torch.from_numpy(rng.integers(0, 2, size=(T, B, 4, 10, 10), dtype=np.uint8))
    rewards = torch.from_numpy(rng.normal(size=(T, B)).astype(np.float32))
    terminated, truncated = (
        torch.from_numpy(rng.random((T, B)) < 0.2),
        torch.from_numpy(rng.random((T, B)) < 0.2),
    )
    targets = n_step_q.n_step_q_targets(q, rewards, next_obs, terminated, truncated, 0.9)
    with torch.no_grad():
        next_values = torch.stack([q(next_obs[t]).max(1).values for t in range(T)])  # [T, B]
    torch.testing.assert_close(
        targets, n_step_q.n_step_returns(rewards, next_values, terminated, truncated, 0.9, n=None)
    )


def small_args(tmp_path, **kw):
    kw = {
        "total_timesteps": 600,
        "num_envs": 4,
        "n_steps": 5,
        "eval_episodes": 2,
        "run_dir": str(tmp_path),
        "progress": False,
        "target_every": 100,
        **kw,
    }
    return n_step_q.Args(**kw)


def test_smoke(tmp_path):
    summary = n_step_q.train(small_args(tmp_path, paper_epsilons=True, save_model=True))
    assert summary["completed"] and summary["error"] is None
    assert summary["updates"] == 30  # 600 steps / (4 envs * 5 steps), one gradient step per rollout
    run = Path(summary["run_dir"])
    assert run.parent == tmp_path and run.name.startswith("CartPole-v1__n_step_q__1__")
    assert json.loads((run / "config.json").read_text())["algo"] == "n_step_q"
    assert json.loads((run / "summary.json").read_text()) == summary
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert (
        any(r["episodic_return"] for r in rows)
        and any(r["loss"] for r in rows)
        and rows[-1]["eval_return"]
    )
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
    # the saved model reloads as the same greedy policy (what tools/evaluate.py does)
    act = n_step_q.load_policy(n_step_q.Args(), str(run / "model.pt"))
    assert (
        run_evaluate(
            act,
            functools.partial(n_step_q.make_env, "CartPole-v1"),
            2,
            n_step_q.Args().seed + 100_000,
        ).mean()
        == summary["eval_return_mean"]
    )


def test_determinism(tmp_path):
    def metrics(sub, **kw):
        s = n_step_q.train(small_args(tmp_path / sub, total_timesteps=2_000, **kw))
        rows = list(csv.DictReader(open(Path(s["run_dir"]) / "metrics.csv")))
        return [{k: v for k, v in r.items() if k not in ("wall_seconds", "sps")} for r in rows]

    def training(rows):  # without the final evaluation's row, whose seed follows --seed in any case
        return [r for r in rows if not r["eval_return"]]

    first, second = metrics("a"), metrics("b")
    assert len(first) > 10 and first == second
    assert training(metrics("c", seed=2)) != training(first)


def test_train_bootstraps_episode_ends_from_the_final_observation(tmp_path, monkeypatch):
    seen = []
    targets = n_step_q.n_step_q_targets

    def recording_targets(q_target, rewards, next_obs, terminated, truncated, *a, **kw):
        seen.append((next_obs.clone(), terminated.clone(), truncated.clone()))
        return targets(q_target, rewards, next_obs, terminated, truncated, *a, **kw)

    monkeypatch.setattr(n_step_q, "n_step_q_targets", recording_targets)
    n_step_q.train(small_args(tmp_path, env_id=probes.CHAIN_ID, total_timesteps=400))
    next_obs = torch.cat(
        [x[0] for x in seen]
    )  # [rollouts * T, B, 2], every env step of training in order
    terminated, truncated = torch.cat([x[1] for x in seen]), torch.cat([x[2] for x in seen])
    assert next_obs.shape == (400 // 4, 4, 2)
    t, episode = next_obs[..., 0], next_obs[..., 1]
    assert terminated.any() and truncated.any()
    # a true next observation is at least one step into its episode: never a reset observation (t = 0)
    assert (t >= 1).all()
    assert (t[truncated] == 6).all()  # the time limit's final observation
    # row k+1 of an env goes one step further in the same episode, or starts a new one where row k ended it
    go_on, ended = ~(terminated | truncated)[:-1], (terminated | truncated)[:-1]
    assert (t[1:][go_on] == t[:-1][go_on] + 1).all() and (
        episode[1:][go_on] == episode[:-1][go_on]
    ).all()
    assert (t[1:][ended] == 1).all() and (episode[1:][ended] != episode[:-1][ended]).all()


def test_target_network_in_train(tmp_path, monkeypatch):
    """Hard syncs right after the gradient step of the first rollout end at or past each multiple of
    --target-every; the target is frozen in between; the bootstrap values come from the target."""
    bootstraps = []  # per update: (next_values the targets used, max_a Q_target(s', a), max_a Q_online(s', a))
    targets, returns = n_step_q.n_step_q_targets, n_step_q.n_step_returns

    def recording_targets(q_target, rewards, next_obs, *a, **kw):
        q_net = RecordingWrapper.made[-1]
        with torch.no_grad():
            bootstraps.append(
                [None, q_net.target(next_obs).max(-1).values, q_net.online(next_obs).max(-1).values]
            )
        return targets(q_target, rewards, next_obs, *a, **kw)

    def recording_returns(rewards, next_values, *a, **kw):
        bootstraps[-1][0] = next_values.clone()
        return returns(rewards, next_values, *a, **kw)

    monkeypatch.setattr(ChainEnv, "steps", 0)
    monkeypatch.setattr(RecordingWrapper, "made", [])
    monkeypatch.setattr(n_step_q, "NetworkWrapper", RecordingWrapper)
    monkeypatch.setattr(n_step_q, "n_step_q_targets", recording_targets)
    monkeypatch.setattr(n_step_q, "n_step_returns", recording_returns)
    # rollouts of 4 envs x 5 steps: rollout ends at env steps 20, 40, ..., 400
    summary = n_step_q.train(
        small_args(
            tmp_path,
            env_id=probes.CHAIN_ID,
            total_timesteps=400,
            target_every=50,
            hidden_sizes=(16,),
        )
    )
    (q_net,) = RecordingWrapper.made
    events = q_net.events
    assert summary["updates"] == 20 and len(bootstraps) == 20

    assert [e["step"] for e in events if e["kind"] == "after sync"] == [
        60,
        100,
        160,
        200,
        260,
        300,
        360,
        400,
    ]
    for before, after in zip(events, events[1:]):
        if after["kind"] == "before sync":  # a sync follows the gradient step of the same rollout
            assert before["kind"] == "after update" and before["step"] == after["step"]
            assert not torch.equal(
                after["target"], after["online"]
            )  # it had drifted since the last sync
        if after["kind"] == "after sync":
            assert torch.equal(after["target"], after["online"])
        else:  # the target moves at syncs only, and never by a gradient step
            assert torch.equal(after["target"], before["target"])
    # at a gradient step the target equals the online network only at the start and right after a sync
    for before, update in zip([None] + events, events):
        if update["kind"] == "before update":
            fresh = before is None or before["kind"] == "after sync"
            assert torch.equal(update["target"], update["online"]) == fresh

    apart = 0
    for used, from_target, from_online in bootstraps:
        torch.testing.assert_close(used, from_target)
        apart += not torch.allclose(from_target, from_online)
    assert apart >= 10  # most updates see a target that differs from the online network


def test_nan_loss_stops_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(
        n_step_q,
        "n_step_q_targets",
        lambda q, rewards, *a, **k: torch.full_like(rewards, float("nan")),
    )
    args = small_args(tmp_path)
    assert n_step_q.main(args) == 1
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert not summary["completed"] and summary["error"].startswith("loss became nan")


def test_interrupt_writes_logs(tmp_path, monkeypatch):
    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(harness.run, "evaluate", interrupt)  # Ctrl-C during the final evaluation
    assert n_step_q.main(small_args(tmp_path)) == 130
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert (
        summary["completed"] is False
        and summary["error"] == "interrupted"
        and summary["total_timesteps"] == 600
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--total-timesteps", "0"], "--total-timesteps must be positive, got 0"),
        (["--n-steps", "0"], "--n-steps must be positive, got 0"),
        (["--env", "Pendulum-v1"], "needs a Discrete action space"),
    ],
)
def test_bad_input(tmp_path, argv, message):
    p = subprocess.run(
        [sys.executable, str(ROOT / "algos" / "n_step_q.py"), *argv, "--run-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("n_step_q: error: ") and message in lines[0], (
        p.stderr
    )
    assert not any(tmp_path.iterdir())  # no run folder for a run that never started


@pytest.mark.slow
def test_learns_cartpole(tmp_path):
    """Defaults except a 150k budget (the epsilon and learning-rate schedules shrink with it).

    A random policy scores ~22, CartPole-v0's "solved" is 195 (the bar DQN's test uses), the
    maximum 500. Seed 1 scores 500 here; ~10-20 s on an idle 2-core machine.
    """
    s = n_step_q.train(
        n_step_q.Args(seed=1, total_timesteps=150_000, run_dir=str(tmp_path), progress=False)
    )
    assert s["eval_return_mean"] >= 195, s


def test_paper_epsilons_in_a_run_each_env_explores_at_its_own_decaying_epsilon(
    tmp_path, monkeypatch
):
    """--paper-epsilons: at every step each env's epsilon lies on the line from start_epsilon to
    its own final epsilon (drawn once, not all equal), and each env explores that often."""
    calls = []
    real = n_step_q.select_actions

    def select_actions(greedy, obs, epsilon, n_actions, rng):
        actions = real(greedy, obs, epsilon, n_actions, rng)
        calls.append(
            (np.array(epsilon, dtype=np.float64), actions != greedy(obs))
        )  # greedy() draws nothing
        return actions

    monkeypatch.setattr(n_step_q, "select_actions", select_actions)
    summary = n_step_q.train(
        small_args(
            tmp_path,
            paper_epsilons=True,
            num_envs=8,
            total_timesteps=1600,
            exploration_fraction=0.25,
        )
    )
    assert summary["completed"] and len(calls) == 200
    eps = np.array([e for e, _ in calls])  # [steps, B]
    assert eps.shape == (200, 8)
    final = eps[-1].round(12)
    assert set(final) <= {0.1, 0.01, 0.5} and len(set(final)) >= 2
    steps = 8 * np.arange(1, 201)[:, None]  # global_step at each call
    np.testing.assert_allclose(
        eps, 1.0 + (final - 1.0) * np.minimum(1.0, steps / 400), rtol=0, atol=1e-12
    )
    off_greedy = np.array([o for _, o in calls])[50:].mean(0)  # after the decay: 150 steps per env
    assert (off_greedy[final == 0.5] > 0.12).all() and (
        off_greedy[final == 0.01] < 0.05
    ).all()  # 2 actions: half of eps
