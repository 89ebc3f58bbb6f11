"""A2C: targets against a hand-computed rollout, policy pieces, smoke, determinism, bad input, learning."""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "algos"))
sys.path.insert(0, str(ROOT))

import a2c  # noqa: E402
import probes  # noqa: E402
from a2c import (  # noqa: E402
    ActorCritic,
    Args,
    a2c_targets,
    greedy_policy,
    load_policy,
    log_prob_entropy,
    main,
    numpy_head,
    sample_actions,
    train,
    true_next_obs,
)

from common.normalize import ObsNormalizer, merge_moments  # noqa: E402
from harness.run import evaluate as run_evaluate  # noqa: E402

# A rollout of T = 4 steps of B = 2 envs, gamma = 0.5, written column by column (env 0, env 1).
# env 0: its episode terminates at t = 1; t = 2 is the first step of the next episode (the
#        SAME_STEP autoreset already returned that episode's first observation), so G_1 must
#        not see r_2 and V(final obs) at t = 1 (next_values 20) must not be used.
# env 1: its episode is truncated at t = 2 and bootstraps from V(final obs) = next_values[2] = 6;
#        t = 3 belongs to the next episode.
GAMMA = 0.5
REWARDS = [[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]]
VALUES = [[5.0, 1.0], [6.0, 1.0], [7.0, 1.0], [8.0, 1.0]]
NEXT_VALUES = [[10.0, 2.0], [20.0, 12.0], [30.0, 6.0], [40.0, 8.0]]
TERMINATED = [[0, 0], [1, 0], [0, 0], [0, 0]]
TRUNCATED = [[0, 0], [0, 0], [0, 1], [0, 0]]


def rollout():
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return t(REWARDS), t(VALUES), t(NEXT_VALUES), t(TERMINATED), t(TRUNCATED)


# Hand computation (env 0 | env 1):
# n = None (to the end of the rollout):
#   G_3 = 4 + .5*40 = 24             | 1 + .5*8 = 5
#   G_2 = 3 + .5*G_3 = 15            | 1 + .5*6 = 4        (truncation: bootstrap, stop)
#   G_1 = 2 (termination: no tail)   | 1 + .5*G_2 = 3
#   G_0 = 1 + .5*G_1 = 2             | 1 + .5*G_1 = 2.5
# n = 2: G_0 = 1 + .5*2 = 2 | 1 + .5*1 + .25*12 = 4.5; the other rows equal n = None.
# n = 1: r_t + .5 (1 - terminated_t) next_values_t.
# GAE lambda = .5 (gamma*lambda = .25): deltas = r + .5 (1 - term) nv - v
#   env 0: [1, -4, 11, 16], not done [1, 0, 1, 1] -> A = [0, -4, 15, 16]
#   env 1: [1, 6, 3, 4],    not done [1, 1, 0, 1] -> A = [2.6875, 6.75, 3, 4]
HAND = {
    None: [[2.0, 2.5], [2.0, 3.0], [15.0, 4.0], [24.0, 5.0]],
    2: [[2.0, 4.5], [2.0, 3.0], [15.0, 4.0], [24.0, 5.0]],
    1: [[6.0, 2.0], [2.0, 7.0], [18.0, 4.0], [24.0, 5.0]],
}
HAND_GAE_ADV = [[0.0, 2.6875], [-4.0, 6.75], [15.0, 3.0], [16.0, 4.0]]


@pytest.mark.parametrize("n", [None, 2, 1])
def test_n_step_targets_match_hand_computation(n):
    rewards, values, next_values, terminated, truncated = rollout()
    advantages, returns = a2c_targets(rewards, values, next_values, terminated, truncated, GAMMA, n)
    torch.testing.assert_close(returns, torch.tensor(HAND[n]))
    torch.testing.assert_close(advantages, torch.tensor(HAND[n]) - values)


def test_gae_targets_match_hand_computation():
    rewards, values, next_values, terminated, truncated = rollout()
    advantages, returns = a2c_targets(
        rewards, values, next_values, terminated, truncated, GAMMA, gae_lambda=0.5
    )
    torch.testing.assert_close(advantages, torch.tensor(HAND_GAE_ADV))
    torch.testing.assert_close(returns, torch.tensor(HAND_GAE_ADV) + values)


def test_gae_lambda_one_equals_full_rollout_return_and_zero_equals_one_step():
    g = torch.Generator().manual_seed(0)
    T, B = 7, 5
    rewards, values, next_values = (torch.randn(T, B, generator=g) for _ in range(3))
    terminated = (torch.rand(T, B, generator=g) < 0.2).float()
    truncated = (torch.rand(T, B, generator=g) < 0.2).float()
    # as in a real rollout: V(s_{t+1}) is the next row's V(s_t) unless the episode ended at t
    ended = (terminated + truncated)[:-1] > 0
    next_values[:-1] = torch.where(ended, next_values[:-1], values[1:])
    for lam, n in ((1.0, None), (0.0, 1)):
        adv_gae, ret_gae = a2c_targets(
            rewards, values, next_values, terminated, truncated, 0.9, gae_lambda=lam
        )
        adv_n, ret_n = a2c_targets(rewards, values, next_values, terminated, truncated, 0.9, n=n)
        torch.testing.assert_close(ret_gae, ret_n)
        torch.testing.assert_close(adv_gae, adv_n)


def test_targets_carry_no_gradient():
    rewards, values, next_values, terminated, truncated = rollout()
    values.requires_grad_(True)
    for lam in (None, 0.9):
        advantages, returns = a2c_targets(
            rewards, values, next_values, terminated, truncated, GAMMA, gae_lambda=lam
        )
        assert not advantages.requires_grad and not returns.requires_grad


def test_a2c_loss_against_hand_values():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    entropy = torch.tensor([1.5, 0.5], requires_grad=True)
    values = torch.tensor([1.0, 3.0], requires_grad=True)
    advantages, returns = torch.tensor([2.0, 1.0]), torch.tensor([2.0, 1.0])
    loss, policy_loss, value_loss, entropy_mean = a2c.a2c_loss(
        logp, entropy, values, advantages, returns, value_coef=0.5, entropy_coef=0.1
    )
    # policy -mean(A log pi) = -mean(-2, -2) = 2; value mean((V - G)^2) = mean(1, 4) = 2.5; entropy mean 1
    assert (policy_loss.item(), value_loss.item(), entropy_mean.item()) == (2.0, 2.5, 1.0)
    assert loss.item() == pytest.approx(
        2.0 + 0.5 * 2.5 - 0.1 * 1.0
    )  # the entropy is a bonus: subtracted
    loss.backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([-1.0, -0.5])
    )  # -A / N: raise log pi where A > 0
    torch.testing.assert_close(
        entropy.grad, torch.tensor([-0.05, -0.05])
    )  # -entropy_coef / N: more entropy lowers the loss
    torch.testing.assert_close(values.grad, torch.tensor([-0.5, 1.0]))  # value_coef * 2 (V - G) / N


def test_rollout_values_the_true_final_observation_and_the_loss_sees_the_unclipped_action(
    tmp_path, monkeypatch
):
    seen = {"obs": [], "next_obs": [], "actions": [], "terminated": [], "coefs": []}

    class RecordingActorCritic(a2c.ActorCritic):
        def forward(self, obs):
            if (
                torch.is_grad_enabled()
            ):  # the loss's pass, not the acting path's check against forward() (no grad)
                seen["obs"].append(obs.detach().clone())  # the rollout's observations [T * B, 3]
            return super().forward(obs)

        def value(self, obs):
            seen["next_obs"].append(
                obs.detach().clone()
            )  # the observations bootstrapped from [T * B, 3]
            return super().value(obs)

    real_log_prob_entropy, real_targets, real_loss = (
        a2c.log_prob_entropy,
        a2c.a2c_targets,
        a2c.a2c_loss,
    )

    def recording_log_prob_entropy(head, log_std, actions):
        seen["actions"].append(actions.detach().clone())
        return real_log_prob_entropy(head, log_std, actions)

    def recording_targets(rewards, values, next_values, terminated, truncated, *a, **kw):
        seen["terminated"].append(terminated.clone().reshape(-1))
        return real_targets(rewards, values, next_values, terminated, truncated, *a, **kw)

    def recording_loss(*a, **kw):
        seen["coefs"].append(a[5:])
        return real_loss(*a, **kw)

    monkeypatch.setattr(a2c, "ActorCritic", RecordingActorCritic)
    monkeypatch.setattr(a2c, "log_prob_entropy", recording_log_prob_entropy)
    monkeypatch.setattr(a2c, "a2c_targets", recording_targets)
    monkeypatch.setattr(a2c, "a2c_loss", recording_loss)
    summary = train(
        small(
            tmp_path,
            env_id=probes.ENV_ID,
            total_timesteps=200,
            num_envs=2,
            eval_episodes=1,
            value_coef=0.25,
            entropy_coef=0.01,
        )
    )
    assert summary["updates"] == 20
    obs, next_obs, actions, terminated = (
        torch.cat(seen[k]) for k in ("obs", "next_obs", "actions", "terminated")
    )
    assert len(obs) == len(next_obs) == len(actions) == 200
    # one step later in the same episode, never the next episode's reset observation (t = 0)
    torch.testing.assert_close(next_obs[:, 0], obs[:, 0] + 1, rtol=0, atol=0)
    torch.testing.assert_close(next_obs[:, 1], obs[:, 1], rtol=0, atol=0)
    truncations = (next_obs[:, 0] == probes.TIME_LIMIT) & (terminated == 0)
    assert truncations.any() and terminated.any()
    # the loss scores the sampled Gaussian action; the env received it clipped to the bounds
    torch.testing.assert_close(
        next_obs[:, 2], actions[:, 0].clamp(probes.LOW, probes.HIGH), rtol=0, atol=0
    )
    assert (
        actions.abs() > probes.HIGH
    ).float().mean() > 0.3  # std 1 against bounds of +-0.5: most samples lie outside
    assert set(seen["coefs"]) == {(0.25, 0.01)}


def test_true_next_obs_uses_final_observation_under_same_step_autoreset():
    envs = a2c.make_env("CartPole-v1", 2)
    obs, _ = envs.reset(seed=0)
    ended_once = False
    for _ in range(200):
        next_obs, _, terminated, truncated, infos = envs.step(
            np.zeros(2, dtype=np.int64)
        )  # always left: ends fast
        real = true_next_obs(next_obs, infos)
        for i in range(2):
            if terminated[i] or truncated[i]:
                ended_once = True
                np.testing.assert_array_equal(real[i], infos["final_obs"][i])
                assert not np.array_equal(real[i], next_obs[i])  # next_obs is already the reset obs
                assert abs(next_obs[i]).max() <= 0.05  # CartPole resets to U(-0.05, 0.05)
            else:
                np.testing.assert_array_equal(real[i], next_obs[i])
    envs.close()
    assert ended_once


def test_log_prob_entropy_match_torch_distributions():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 3, generator=g)
    actions = torch.randint(0, 3, (6,), generator=g)
    logp, ent = log_prob_entropy(logits, None, actions)
    d = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(logp, d.log_prob(actions))
    torch.testing.assert_close(ent, d.entropy())
    mean, log_std = torch.randn(6, 2, generator=g), torch.randn(2, generator=g)
    actions = torch.randn(6, 2, generator=g) * 3
    logp, ent = log_prob_entropy(mean, log_std, actions)
    d = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(logp, d.log_prob(actions).sum(-1))
    torch.testing.assert_close(ent, d.entropy().sum(-1))


def test_sample_actions_categorical_frequencies_and_gaussian_moments():
    rng = np.random.default_rng(0)
    probs = np.array([0.1, 0.6, 0.3])
    logits = np.tile(np.log(probs), (20_000, 1)) + 5.0  # a constant shift must not matter
    counts = np.bincount(sample_actions(logits, None, rng), minlength=3) / 20_000
    np.testing.assert_allclose(counts, probs, atol=0.015)
    mean, std = np.tile([1.0, -2.0], (20_000, 1)), np.array([0.5, 2.0])
    a = sample_actions(mean, std, rng)
    assert a.dtype == np.float32 and a.shape == (20_000, 2)
    np.testing.assert_allclose(a.mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(a.std(0), std, rtol=0.03)


@pytest.mark.parametrize("shared, bounded", [(False, False), (True, False), (False, True)])
def test_numpy_policy_head_matches_torch_forward_with_obs_normalisation(shared, bounded):
    torch.manual_seed(0)
    bounds = (np.array([-2.0, 0.0]), np.array([2.0, 3.0])) if bounded else None
    net = ActorCritic(
        (4,), 2, False, (16, 8), shared_torso=shared, normalize_obs=True, mean_bounds=bounds
    )
    with torch.no_grad():
        net.policy_head.weight.mul_(3000.0)  # drive the raw mean far outside the bounds
    net.obs_norm.update(
        torch.randn(100, 4, dtype=torch.float64) * 3 + 1
    )  # in place: the views must follow
    obs = np.random.default_rng(0).normal(size=(5, 4)) * 3
    expected, _ = net(torch.as_tensor(obs, dtype=torch.float32))
    expected = expected.detach().numpy()
    np.testing.assert_allclose(
        numpy_head(net, torch.device("cpu"))(obs), expected, rtol=1e-5, atol=1e-5
    )
    if bounded:
        assert (expected >= bounds[0] - 1e-6).all() and (expected <= bounds[1] + 1e-6).all()
    else:
        assert np.abs(expected).max() > 3.0
    space = gym.spaces.Box(-0.01, 0.01, (2,))
    actions = greedy_policy(net, torch.device("cpu"), space)(obs)
    np.testing.assert_allclose(actions, np.clip(expected, -0.01, 0.01), atol=1e-6)


@pytest.mark.parametrize("shared", [False, True])
def test_image_torso_acts_in_torch_like_the_forward_and_starts_orthogonal(shared):
    torch.manual_seed(0)
    net = ActorCritic((4, 10, 10), 3, True, (64, 64), shared_torso=shared)  # MinAtar's torso
    conv = net.actor_torso[1]
    w = conv.weight.detach().reshape(
        conv.out_channels, -1
    )  # [16, 4 * 3 * 3]: orthogonal rows, gain sqrt(2)
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(conv.out_channels), atol=1e-5, rtol=0)
    obs = np.random.default_rng(0).integers(0, 2, size=(32, 4, 10, 10), dtype=np.uint8)
    with torch.no_grad():
        net.policy_head.weight.mul_(100.0)  # logits far enough apart for the argmax to vary
        expected, _ = net(torch.from_numpy(obs))
    np.testing.assert_allclose(
        numpy_head(net, torch.device("cpu"))(obs), expected.numpy(), rtol=1e-6, atol=1e-6
    )
    actions = greedy_policy(net, torch.device("cpu"), gym.spaces.Discrete(3))(obs)
    assert (actions == expected.numpy().argmax(1)).all() and len(set(actions)) > 1


def test_running_statistics_match_the_moments_of_all_data_seen():
    x = np.random.default_rng(0).normal(size=(60, 3)) * 2 + 1
    norm = ObsNormalizer(3)
    mean, var, count = 0.0, 1.0, 1e-4  # the RewardScaler's numpy path
    for chunk in np.split(x, 6):
        norm.update(torch.as_tensor(chunk))
        mean, var, count = merge_moments(mean, var, count, chunk)
    for m, v in ((norm.mean.numpy(), norm.var.numpy()), (mean, var)):
        np.testing.assert_allclose(m, x.mean(0), atol=1e-4)
        np.testing.assert_allclose(v, x.var(0), atol=1e-4)  # population variance, not unbiased


def small(tmp_path: Path, **kw) -> Args:
    defaults = dict(
        total_timesteps=400,
        num_envs=4,
        n_steps=5,
        run_dir=str(tmp_path),
        progress=False,
        eval_episodes=2,
    )
    return Args(**{**defaults, **kw})


def test_smoke_discrete(tmp_path):
    summary = train(
        small(tmp_path, env_id="CartPole-v1", eval_every=200, shared_torso=True, n_step_return=3)
    )
    assert summary["completed"] and summary["error"] is None
    assert summary["updates"] == 20 and summary["total_timesteps"] == 400
    run = Path(summary["run_dir"])
    assert json.loads((run / "summary.json").read_text())["updates"] == 20
    assert json.loads((run / "config.json").read_text())["algo"] == "a2c"
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert any(r["eval_return"] for r in rows) and any(r["episodic_return"] for r in rows)


def test_smoke_continuous_with_normalisation_saves_and_reloads(tmp_path):
    args = small(
        tmp_path,
        env_id="Pendulum-v1",
        normalize_obs=True,
        normalize_reward=True,
        gae_lambda=0.9,
        optimizer="adam",
        save_model=True,
        eval_episodes=1,
        bounded_mean=True,
    )
    summary = train(args)
    assert summary["completed"] and summary["updates"] == 20
    model = Path(summary["run_dir"]) / "model.pt"
    state = torch.load(model, weights_only=True)
    assert state["obs_norm.count"] > 400 - 20 and not torch.allclose(
        state["obs_norm.mean"], torch.zeros(3, dtype=torch.float64)
    )
    policy = load_policy(args, str(model))
    returns = run_evaluate(
        policy, functools.partial(a2c.make_env, "Pendulum-v1"), 1, args.seed + 100_000
    )
    assert returns[0] == pytest.approx(
        summary["eval_return_mean"]
    )  # the saved statistics reproduce the eval


def _metrics_without_timing(run_dir: str) -> list[dict]:
    rows = list(csv.DictReader(open(Path(run_dir) / "metrics.csv")))
    return [{k: v for k, v in r.items() if k not in ("wall_seconds", "sps")} for r in rows]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_same_seed_gives_identical_metrics(tmp_path, env_id):
    kw = dict(
        env_id=env_id,
        total_timesteps=2_000,
        eval_every=1_000,
        normalize_obs=env_id == "Pendulum-v1",
        seed=3,
    )
    a = train(small(tmp_path / "a", **kw))
    b = train(small(tmp_path / "b", **kw))
    rows = _metrics_without_timing(a["run_dir"])
    assert len(rows) > 5 and rows == _metrics_without_timing(b["run_dir"])
    c = train(small(tmp_path / "c", **{**kw, "seed": 4}))
    training = lambda rows: [r for r in rows if not r["eval_return"]]  # noqa: E731 (the evaluations' seed differs anyway)
    assert training(_metrics_without_timing(c["run_dir"])) != training(rows)


def test_nan_loss_stops_the_run_with_exit_1(tmp_path, monkeypatch):
    real_loss = a2c.a2c_loss

    def nan_loss(*args, **kw):
        loss, *rest = real_loss(*args, **kw)
        return (loss * float("nan"), *rest)

    monkeypatch.setattr(a2c, "a2c_loss", nan_loss)
    assert main(small(tmp_path)) == 1
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert not summary["completed"] and "nan" in summary["error"] and summary["updates"] == 1


def _run_cli(*argv: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "algos" / "a2c.py"),
            "--run-dir",
            str(tmp_path),
            "--no-progress",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_bad_input_gives_one_line_and_exit_2(tmp_path):
    result = _run_cli("--n-steps", "0", tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == ["a2c: error: --n-steps must be positive, got 0"]
    assert not list(tmp_path.iterdir())  # no run folder for a run that never started


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(env_id="NoSuchEnv-v0"), "NoSuchEnv-v0"),
        (dict(env_id="Blackjack-v1"), "Box observation space"),
        (dict(gae_lambda=1.5), "--gae-lambda"),
        (dict(gae_lambda=0.9, n_step_return=2), "cannot be used together"),
        (dict(env_id=probes.IMAGE_BOX_ID), "image observations with discrete actions only"),
        pytest.param(
            dict(env_id="MinAtar/Breakout-v1", normalize_obs=True),
            "--normalize-obs is for vector observations",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("minatar") is None,
                reason="pip install -r requirements/requirements-pixels.txt",
            ),
        ),
    ],
)
def test_bad_input_in_process_gives_one_line_and_exit_2(tmp_path, capsys, kw, needle):
    assert main(small(tmp_path, **kw)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("a2c: error: ") and needle in err[0]


@pytest.mark.slow
def test_sigterm_writes_a_checkpoint_and_an_incomplete_summary(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "algos" / "a2c.py"),
            "--run-dir",
            str(tmp_path),
            "--no-progress",
            "--total-timesteps",
            "10000000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not list(tmp_path.glob("*/metrics.csv")) and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 75, stderr
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert (
        summary["completed"] is False
        and summary["error"] == "preempted"
        and summary["total_timesteps"] > 0
    )
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_learns_cartpole_fast(tmp_path):
    # Default settings, 40k steps (a few seconds). Judged on the sampled policy's last 10 training
    # episodes, which start near a uniform policy's ~22 for every seed: the final greedy
    # evaluation is no learning test at this budget, since an untrained network's argmax already
    # scores 9-230 depending on the seed (seed 1: 230). Seeds 1-8 reached 150-362 (seed 1: 346),
    # so 120 is a threshold every calibrated seed clears, not one tuned to the test's seed.
    summary = train(
        Args(
            env_id="CartPole-v1",
            seed=1,
            total_timesteps=40_000,
            run_dir=str(tmp_path),
            progress=False,
        )
    )
    assert summary["completed"] and summary["train_return_last10"] >= 120.0, summary


# --- the normalisers in a run -----------------------------------------------------------------
class TorchActingActorCritic(ActorCritic):
    """An extra parameter the numpy actor does not know: acting and evaluation go through forward()."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.unused = torch.nn.Parameter(torch.zeros(1))


@pytest.mark.parametrize("path", ["numpy", "torch"])
def test_obs_statistics_grow_by_one_rollout_per_update_and_evaluations_leave_them(
    tmp_path, monkeypatch, path
):
    """--normalize-obs: the statistics an update's loss sees, and the ones the whole next rollout
    acts with, are those of every earlier rollout's observations and nothing else (the prior count
    1e-4 aside); the actor uses them as forward() does; an evaluation changes nothing."""
    nets, stats_at, rollouts, acting, evals = [], [], [], [], []

    class Recording(TorchActingActorCritic if path == "torch" else ActorCritic):
        def forward(self, obs):
            if torch.is_grad_enabled():  # the loss's pass: the rollout's observations [T * B, 3]
                rollouts.append(obs.detach().double().clone())
            return super().forward(obs)

    real_head, real_targets, real_evaluate = a2c.numpy_head, a2c.a2c_targets, a2c.Run.evaluate

    def snapshot():
        norm = nets[0].obs_norm
        return norm.count.item(), norm.mean.clone(), norm.var.clone()

    def build(args, envs):  # a2c.build_network's, as the Recording class
        space = envs.single_action_space
        nets.append(
            Recording(
                a2c.obs_shape(envs.single_observation_space),
                int(space.shape[0]),
                False,
                tuple(args.hidden_sizes),
                args.shared_torso,
                args.activation,
                args.normalize_obs,
                args.log_std_init,
            )
        )
        return nets[-1]

    def head(net, device):
        act = real_head(net, device)
        assert (act.__name__ == "head_forward") == (path == "torch")

        def checked(obs):
            out = act(obs)
            with torch.no_grad():  # the statistics the actor used are the module's current ones
                np.testing.assert_allclose(
                    out,
                    net(torch.as_tensor(obs, dtype=torch.float32))[0].numpy(),
                    rtol=1e-5,
                    atol=1e-5,
                )
            acting.append((len(stats_at), snapshot()))
            return out

        return checked

    def targets(rewards, values, *a, **kw):
        stats_at.append(snapshot())
        return real_targets(rewards, values, *a, **kw)

    def evaluate(self, act, global_step):
        before = snapshot()
        out = real_evaluate(self, act, global_step)
        evals.append((before, snapshot()))
        return out

    monkeypatch.setattr(a2c, "build_network", build)
    monkeypatch.setattr(a2c, "numpy_head", head)
    monkeypatch.setattr(a2c, "a2c_targets", targets)
    monkeypatch.setattr(a2c.Run, "evaluate", evaluate)
    summary = train(
        small(
            tmp_path,
            env_id="Pendulum-v1",
            normalize_obs=True,
            num_envs=2,
            total_timesteps=100,
            eval_every=50,
            eval_episodes=1,
        )
    )
    assert (
        summary["completed"] and summary["updates"] == 10 and len(stats_at) == len(rollouts) == 10
    )
    stats_at.append(snapshot())  # after the last update
    for k, (count, mean, var) in enumerate(stats_at):
        assert count == pytest.approx(
            1e-4 + 10 * k, rel=1e-12
        )  # one rollout of 5 steps x 2 envs per update
        if k:
            seen = torch.cat(rollouts[:k])
            torch.testing.assert_close(mean, seen.mean(0), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(var, seen.var(0, unbiased=False), rtol=1e-4, atol=1e-4)
    assert (
        len([k for k, _ in acting if k < 10]) >= 50 + 200
    )  # 50 training steps, and the evaluation at step 50 (one episode)
    for (
        k,
        (count, mean, var),
    ) in acting:  # rollout k acts with the statistics its update will learn with (k = 10: the final evaluation)
        assert (
            count == stats_at[k][0]
            and torch.equal(mean, stats_at[k][1])
            and torch.equal(var, stats_at[k][2])
        )
    assert len(evals) == 2
    for before, after in evals:
        assert (
            before[0] == after[0]
            and torch.equal(before[1], after[1])
            and torch.equal(before[2], after[2])
        )


def test_reward_scaler_in_a_run_divides_by_the_std_of_discounted_returns_restarted_at_episode_ends(
    tmp_path, monkeypatch
):
    """--normalize-reward on episodes that terminate and truncate: every learned reward equals a
    brute-force recomputation, each env's discounted return restarting after its episode's end."""
    raw, learned = [], []
    real_targets, real_episodes = a2c.a2c_targets, a2c.Run.episodes

    def episodes(self, global_step, rewards, done):
        raw.append((np.array(rewards, dtype=np.float64), np.array(done)))
        return real_episodes(self, global_step, rewards, done)

    def targets(rewards, *a, **kw):
        learned.append(rewards.clone())
        return real_targets(rewards, *a, **kw)

    monkeypatch.setattr(a2c.Run, "episodes", episodes)
    monkeypatch.setattr(a2c, "a2c_targets", targets)
    gamma = 0.9
    summary = train(
        small(
            tmp_path,
            env_id=probes.ENV_ID,
            normalize_reward=True,
            num_envs=2,
            total_timesteps=200,
            gamma=gamma,
            eval_episodes=1,
        )
    )
    assert summary["completed"] and len(raw) == 100
    learned = torch.cat(learned).numpy()  # [T * updates, B]
    dones = np.array([d for _, d in raw])
    assert dones.sum() >= 10  # episodes end (terminations and truncations at probes.TIME_LIMIT)
    discounted, history, expected = np.zeros(2), [], []
    for rewards, done in raw:
        discounted = gamma * discounted + rewards
        history.extend(discounted)
        x, prior = (
            np.array(history),
            1e-4,
        )  # the running moments start from mean 0, var 1, count 1e-4
        mean = x.sum() / (len(x) + prior)
        var = (prior * 1.0 + ((x - mean) ** 2).sum() + prior * mean**2) / (len(x) + prior)
        expected.append(np.clip(rewards / np.sqrt(var + 1e-8), -10, 10))
        discounted[done] = 0.0
    np.testing.assert_allclose(learned, np.array(expected), rtol=1e-5, atol=1e-6)
