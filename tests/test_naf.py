"""algos/naf.py: the quadratic advantage, targets, in-process smoke and determinism runs, bad input."""

import copy
import csv
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import naf
import numpy as np
import probes
import pytest
import torch
from naf import (
    Args,
    NAFNetwork,
    deterministic_policy,
    load_policy,
    lower_triangular,
    naf_advantage,
    naf_targets,
    train,
)

ROOT = Path(__file__).resolve().parents[1]
SUMMARY_KEYS = {
    "algo",
    "env",
    "seed",
    "total_timesteps",
    "num_envs",
    "device",
    "wall_seconds",
    "sps",
    "eval_return_mean",
    "eval_return_std",
    "eval_episodes",
    "train_return_last10",
    "completed",
    "error",
    "updates",
    "run_dir",
    "versions",
    "machine",
    "resumed_at",
    "envs_on_resume",
    "checkpoint_seconds",
    "checkpoint_bytes",
}


def small_args(tmp_path, **kw) -> Args:
    base = dict(
        total_timesteps=300,
        learning_starts=100,
        batch_size=32,
        buffer_size=1000,
        hidden_sizes=(32, 32),
        eval_episodes=2,
        run_dir=str(tmp_path),
        progress=False,
        device="cpu",
    )
    base.update(kw)
    return Args(**base)


def brute_force_L(entries: np.ndarray, A: int) -> np.ndarray:
    """L [A, A] filled row by row from the lower-triangle entries, diagonal exponentiated."""
    L, k = np.zeros((A, A)), 0
    for i in range(A):
        for j in range(i + 1):
            L[i, j] = np.exp(entries[k]) if i == j else entries[k]
            k += 1
    return L


# ---- the quadratic advantage ---------------------------------------------------------------------
@pytest.mark.parametrize("A", [1, 2, 3, 6])
def test_P_is_symmetric_positive_definite(A):
    torch.manual_seed(A)
    entries = 2.0 * torch.randn(500, A * (A + 1) // 2, dtype=torch.float64)
    L = lower_triangular(entries, A)  # [B, A, A]
    assert torch.equal(L, L.tril())
    P = L @ L.transpose(1, 2)
    torch.testing.assert_close(P, P.transpose(1, 2))
    assert (torch.linalg.eigvalsh(P) > 0).all()
    torch.linalg.cholesky(P)  # raises unless positive definite


@pytest.mark.parametrize("A", [2, 3])
def test_large_off_diagonal_entries_give_finite_values_and_gradients(A):
    # only the diagonal goes through exp: exp(100) overflows float32, and a masked inf still gives NaN gradients
    entries = torch.zeros(4, A * (A + 1) // 2)
    rows, cols = torch.tril_indices(A, A)
    entries[:, rows != cols] = 100.0
    entries.requires_grad_(True)
    L = lower_triangular(entries, A)
    assert torch.equal(
        L[:, rows[rows != cols], cols[rows != cols]],
        torch.full((4, int((rows != cols).sum())), 100.0),
    )
    assert torch.equal(torch.diagonal(L, dim1=1, dim2=2), torch.ones(4, A))
    advantage = naf_advantage(torch.full((4, A), 0.1), torch.zeros(4, A), L)
    assert torch.isfinite(advantage).all()
    advantage.sum().backward()
    assert torch.isfinite(entries.grad).all() and entries.grad.abs().sum() > 0


@pytest.mark.parametrize("A", [2, 6])
def test_a_huge_diagonal_entry_is_capped_and_gives_finite_loss_and_gradients(A):
    # a diagonal entry of ~81 made L ~ 3e35 on HalfCheetah-v5, and |L^T (a - mu)|^2 overflowed float32
    rows, cols = torch.tril_indices(A, A)
    entries = torch.zeros(3, A * (A + 1) // 2)
    entries[0, rows == cols] = 81.0  # above the cap: capped
    entries[1, rows == cols] = 9.5  # below it: exp as before
    entries.requires_grad_(True)
    L = lower_triangular(entries, A)
    diagonal = torch.diagonal(L, dim1=1, dim2=2)
    assert torch.equal(
        diagonal[0], torch.full((A,), math.exp(naf.LOG_DIAGONAL_MAX), dtype=torch.float32)
    )
    assert torch.equal(diagonal[1], torch.full((A,), 9.5).exp())
    q = naf_advantage(torch.ones(3, A), -torch.ones(3, A), L)  # the largest action gap in [-1, 1]
    loss = (q - 500.0).square().mean()
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(entries.grad).all()
    assert torch.equal(
        entries.grad[0, rows == cols], torch.zeros(A)
    )  # capped: no gradient pushes it further
    assert (entries.grad[1, rows == cols] != 0).all()


@pytest.mark.parametrize("A", [1, 3])
def test_a_vanishing_diagonal_is_floored_so_that_mu_keeps_a_gradient_adam_can_follow(A):
    """A diagonal entry of -19 (Pendulum-v1 saw lower) makes P ~ e^-38 ~ 3e-17, and mu's gradient, which
    is proportional to P, falls far below Adam's eps (1e-8), so Adam's steps on mu vanish; at the
    floor the gradient stays orders of magnitude above eps."""
    adam_eps = 1e-8

    def mu_gradient(L: torch.Tensor) -> torch.Tensor:
        mu = torch.zeros(len(L), A, requires_grad=True)
        (
            naf_advantage(torch.ones(len(L), A), mu, L) - 1.0
        ).square().sum().backward()  # a - mu = 1, target above Q
        return mu.grad.abs()

    rows, cols = torch.tril_indices(A, A)
    entries = torch.zeros(2, A * (A + 1) // 2)
    entries[:, rows == cols] = torch.tensor([[-19.0], [-4.0]])  # below the floor; above it
    L = lower_triangular(entries, A)
    diagonal = torch.diagonal(L, dim1=1, dim2=2)
    assert torch.equal(
        diagonal[0], torch.full((A,), math.exp(naf.LOG_DIAGONAL_MIN), dtype=torch.float32)
    )
    assert torch.equal(diagonal[1], torch.full((A,), -4.0).exp())
    assert (mu_gradient(L) > 100 * adam_eps).all()
    # what the floor prevents: the same entries exponentiated without it
    raw = torch.diag_embed(torch.full((1, A), -19.0).exp())
    assert (mu_gradient(raw) < adam_eps).all()


@pytest.mark.parametrize("A", [1, 2, 4])
def test_advantage_matches_direct_computation(A):
    rng = np.random.default_rng(A)
    B = 50
    entries, actions, mu = (
        rng.normal(size=(B, A * (A + 1) // 2)),
        rng.normal(size=(B, A)),
        rng.normal(size=(B, A)),
    )
    expected = np.empty(B)
    for b in range(B):
        L = brute_force_L(entries[b], A)
        d = actions[b] - mu[b]
        expected[b] = -0.5 * d @ (L @ L.T) @ d
    got = naf_advantage(
        torch.as_tensor(actions), torch.as_tensor(mu), lower_triangular(torch.as_tensor(entries), A)
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-12)
    if A == 1:  # the scalar case written out: -1/2 exp(2 l) (a - mu)^2
        np.testing.assert_allclose(
            got.numpy(),
            -0.5 * np.exp(2 * entries[:, 0]) * (actions[:, 0] - mu[:, 0]) ** 2,
            rtol=1e-10,
        )


@pytest.mark.parametrize("A", [1, 3])
def test_q_peaks_at_mu_with_value_v(A):
    torch.manual_seed(0)
    space = gym.spaces.Box(-2.0, 2.0, (A,), np.float32)
    net = NAFNetwork(5, space, (16, 16))
    obs = torch.randn(64, 5)
    with torch.no_grad():
        values, mu, L = net(obs)
        q_values = lambda actions: values + naf_advantage(actions, mu, L)  # noqa: E731 Q = V + A (paper eq. 3)
        torch.testing.assert_close(q_values(mu), values)  # Q(s, mu(s)) = V(s)
        for _ in range(20):
            actions = 4 * torch.rand(64, A) - 2
            assert (q_values(actions) <= values + 1e-6).all()  # Q(s, a) <= V(s)
        # strictly lower away from mu: P is positive definite
        assert (q_values(mu + 0.1) < values).all()
        torch.testing.assert_close(net.value(obs), values)


def test_mu_within_bounds_and_numpy_policy_matches_torch():
    space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 5.0], np.float32))
    torch.manual_seed(0)
    net = NAFNetwork(4, space, (16,))
    with torch.no_grad():
        net.mu_head.weight.mul_(1e4)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with torch.no_grad():
        mu = net(torch.as_tensor(obs))[1].numpy()
    assert (mu >= space.low - 1e-6).all() and (mu <= space.high + 1e-6).all()
    assert (
        np.isclose(mu, space.low, atol=1e-3).any() and np.isclose(mu, space.high, atol=1e-3).any()
    )
    np.testing.assert_allclose(
        deterministic_policy(net, torch.device("cpu"))(obs), mu, rtol=1e-5, atol=1e-5
    )


def test_layer_norm_normalises_each_hidden_layer_and_the_policy_acts_through_forward():
    space = gym.spaces.Box(-np.ones(2, np.float32), np.ones(2, np.float32))
    torch.manual_seed(0)
    net = NAFNetwork(4, space, (16, 8), layer_norm=True)
    norms = [m for m in net.trunk if isinstance(m, torch.nn.LayerNorm)]
    assert [m.normalized_shape for m in norms] == [(16,), (8,)]
    assert [type(m).__name__ for m in net.trunk] == ["Linear", "LayerNorm", "ReLU"] * 2
    obs = 100.0 * np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with torch.no_grad():
        pre_relu = net.trunk[:2](torch.as_tensor(obs))  # [B, 16]
        mu = net(torch.as_tensor(obs))[1].numpy()
    torch.testing.assert_close(
        pre_relu.mean(1), torch.zeros(64), atol=1e-5, rtol=0
    )  # whatever the input scale
    torch.testing.assert_close(pre_relu.var(1, unbiased=False), torch.ones(64), atol=1e-3, rtol=0)
    np.testing.assert_allclose(
        deterministic_policy(net, torch.device("cpu"))(obs), mu, rtol=1e-6, atol=1e-6
    )
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in NAFNetwork(4, space, (16, 8)).trunk)


def test_reward_scale_multiplies_the_rewards_in_the_targets(tmp_path, monkeypatch):
    seen = {}

    def recording(scale):
        def targets(net, rewards, *rest, **kw):
            seen.setdefault(scale, []).append(rewards.clone())
            return naf_targets(net, rewards, *rest, **kw)

        return targets

    for scale in (1.0, 0.1):
        monkeypatch.setattr(naf, "naf_targets", recording(scale))
        summary = train(small_args(tmp_path / str(scale), total_timesteps=120, reward_scale=scale))
        assert summary["completed"]
    first, scaled = seen[1.0][0], seen[0.1][0]  # the same seed samples the same first batch
    assert first.abs().sum() > 0
    torch.testing.assert_close(scaled, 0.1 * first)


class ConstantValue(torch.nn.Module):
    def value(self, obs):
        return obs[:, 0] * 10.0


def test_targets_bootstrap_from_the_target_value():
    next_obs = torch.tensor([[1.0, 0.0], [-0.5, 2.0], [3.0, 1.0]])
    rewards = torch.tensor([1.0, 2.0, -1.0])
    terminated = torch.tensor([0.0, 0.0, 1.0])
    targets = naf_targets(ConstantValue(), rewards, next_obs, terminated, gamma=0.5)
    torch.testing.assert_close(targets, torch.tensor([1.0 + 0.5 * 10.0, 2.0 + 0.5 * -5.0, -1.0]))
    assert not targets.requires_grad


class ScaledValue(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def value(self, obs):
        return obs[:, 0] * self.scale


def test_twin_targets_bootstrap_from_the_smaller_target_value():
    next_obs = torch.tensor([[1.0], [-1.0], [2.0]])
    rewards, terminated = torch.zeros(3), torch.tensor([0.0, 0.0, 1.0])
    targets = naf_targets(
        ScaledValue(10.0), rewards, next_obs, terminated, gamma=1.0, twin_target=ScaledValue(3.0)
    )
    torch.testing.assert_close(
        targets, torch.tensor([3.0, -10.0, 0.0])
    )  # min(10, 3); min(-10, -3); terminated


def test_twin_q_trains_both_networks_on_the_clipped_targets(tmp_path, monkeypatch):
    """Both networks take a gradient step per update, on the same targets; the first one acts."""
    made = []
    monkeypatch.setattr(probes.RecordingWrapper, "made", made)
    monkeypatch.setattr(naf, "NetworkWrapper", probes.RecordingWrapper)
    summary = train(small_args(tmp_path, twin_q=True))
    assert summary["completed"] and len(made) == 2
    assert made[0].updates == made[1].updates == summary["updates"] > 0
    first, twin = (probes.flat(m.online) for m in made)
    assert not torch.equal(first, twin)  # two networks, initialised and trained apart
    made.clear()
    plain = train(small_args(tmp_path / "plain"))
    assert len(made) == 1 and plain["updates"] == summary["updates"]


# ---- training runs -------------------------------------------------------------------------------
def test_evaluation_scores_short_episodes_over_100_and_long_ones_over_10(tmp_path):
    # a short episode's return depends much on its start state: 10 episodes would score one policy tens of
    # points apart, so the default (eval_episodes=0) takes 100 where the time limit is at most 200 steps
    assert naf.eval_episodes_for("Pendulum-v1") == 100  # 200 steps
    assert naf.eval_episodes_for("MountainCarContinuous-v0") == 10  # 999 steps
    assert naf.eval_episodes_for("NoSuchEnv-v0") == 10  # validate() names the unknown id
    summary = train(small_args(tmp_path, eval_episodes=0))
    assert summary["eval_episodes"] == 100
    (config,) = tmp_path.glob("*/config.json")
    assert json.loads(config.read_text())["eval_episodes"] == 100  # what tools/evaluate.py repeats
    assert (
        train(small_args(tmp_path, eval_episodes=3, seed=2))["eval_episodes"] == 3
    )  # a given count stays


def test_smoke_run_takes_gradient_steps_and_writes_the_run_folder(tmp_path):
    summary = train(small_args(tmp_path, eval_every=150, gradient_steps=2))
    assert summary["completed"] and summary["error"] is None
    assert set(summary) == SUMMARY_KEYS
    assert summary["updates"] == 400 and summary["total_timesteps"] == 300
    run = Path(summary["run_dir"])
    assert json.loads((run / "summary.json").read_text()) == summary
    assert json.loads((run / "config.json").read_text())["algo"] == "naf"
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert sum(1 for r in rows if r["loss"]) == 4
    assert sum(1 for r in rows if r["eval_return"]) == 2
    assert np.isfinite(summary["eval_return_mean"])


def test_smoke_run_multi_dim_actions_ou_noise_save_and_load(tmp_path):
    summary = train(
        small_args(tmp_path, env_id="Reacher-v5", num_envs=2, noise="ou", save_model=True)
    )
    assert summary["completed"]
    assert (
        summary["updates"] == 200
    )  # one per env step after learning_starts, 2 envs stepped together
    act = load_policy(
        small_args(tmp_path, env_id="Reacher-v5"), str(Path(summary["run_dir"]) / "model.pt")
    )
    actions = act(np.zeros((3, 10), dtype=np.float32))
    assert actions.shape == (3, 2) and (np.abs(actions) <= 1.0).all()


def test_same_seed_gives_identical_metrics_and_another_seed_different_ones(tmp_path):
    rows = []
    for k, seed in enumerate((1, 1, 2)):
        summary = train(small_args(tmp_path / str(k), total_timesteps=250, seed=seed))
        with open(Path(summary["run_dir"]) / "metrics.csv") as f:
            rows.append(
                [
                    {key: v for key, v in r.items() if key not in ("wall_seconds", "sps")}
                    for r in csv.DictReader(f)
                ]
            )
    assert rows[0] == rows[1] and len(rows[0]) > 1
    training = [
        [r for r in rs if not r["eval_return"]] for rs in rows
    ]  # the evaluations' seed differs anyway
    assert training[2] != training[0]


# ---- what train() stores, regresses on and moves -------------------------------------------------
def box_args(tmp_path, **kw) -> Args:
    """A few hundred steps on the tiny CountBoxEnv; 100 updates after 100 steps of heatup."""
    return small_args(
        tmp_path,
        **{
            **dict(
                env_id=probes.ENV_ID,
                total_timesteps=200,
                batch_size=16,
                hidden_sizes=(16, 16),
                eval_episodes=1,
            ),
            **kw,
        },
    )


def test_episode_ends_store_the_true_final_observation(tmp_path, monkeypatch):
    added = []

    class RecordingMemory(naf.ReplayMemory):
        def add(self, obs, actions, rewards, next_obs, terminated, valid=None):
            added.append(
                (np.array(obs), np.array(actions), np.array(next_obs), np.array(terminated))
            )
            super().add(obs, actions, rewards, next_obs, terminated, valid)

    monkeypatch.setattr(naf, "ReplayMemory", RecordingMemory)
    summary = train(box_args(tmp_path, num_envs=2))
    obs, actions, next_obs, terminated = (np.concatenate([a[k] for a in added]) for k in range(4))
    assert len(obs) == summary["total_timesteps"] == 200
    # one step later in the same episode, never the next episode's reset observation (t = 0)
    np.testing.assert_array_equal(next_obs[:, 0], obs[:, 0] + 1)
    np.testing.assert_array_equal(next_obs[:, 1], obs[:, 1])
    np.testing.assert_array_equal(
        next_obs[:, 2], actions[:, 0]
    )  # the stored action is the one the env received
    truncations = (next_obs[:, 0] == probes.TIME_LIMIT) & ~terminated
    assert truncations.any() and terminated.any()


@pytest.mark.parametrize("gradient_steps", [1, 2])
def test_target_moves_by_the_rate_after_each_gradient_step_and_bootstrap_reads_it(
    tmp_path, monkeypatch, gradient_steps
):
    events, wrappers, bootstraps = [], {}, []
    real_targets = naf.naf_targets

    def recording_targets(net_target, *a, **kw):
        bootstraps.append(net_target)
        return real_targets(net_target, *a, **kw)

    monkeypatch.setattr(
        naf, "NetworkWrapper", probes.recording_wrapper(naf.NetworkWrapper, events, wrappers)
    )
    monkeypatch.setattr(naf, "naf_targets", recording_targets)
    rate = 0.3
    summary = train(
        box_args(tmp_path, target_rate=rate, gradient_steps=gradient_steps, train_every=2)
    )
    q_net = wrappers["NAFNetwork"]
    assert summary["updates"] == 100 // 2 * gradient_steps
    assert len(bootstraps) == summary["updates"] and all(t is q_net.target for t in bootstraps)
    # every gradient step is followed by one soft sync, at the rate
    assert [e[0] for e in events] == ["step", "sync"] * summary["updates"]
    probes.assert_only_recorded_calls_move_the_networks(events)
    for k, (kind, _, r, before, after) in enumerate(events):
        online, target = before["NAFNetwork"]
        if kind == "step":
            assert torch.equal(
                after["NAFNetwork"][1], target
            )  # a gradient step leaves the target alone
            assert torch.equal(online, target) == (
                k == 0
            )  # between syncs the target lags (equal only at the start)
        else:
            assert torch.equal(after["NAFNetwork"][0], online)
            torch.testing.assert_close(after["NAFNetwork"][1], rate * online + (1 - rate) * target)
            assert r == rate


def test_exploration_and_replay_sampling_draw_independent_streams(tmp_path, monkeypatch):
    streams = {}

    class RecordingMemory(naf.ReplayMemory):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            streams.setdefault("replay", []).append(copy.deepcopy(self.rng))

    class RecordingNoise(naf.ExplorationNoise):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            streams.setdefault("noise", []).append(copy.deepcopy(self.rng))

    monkeypatch.setattr(naf, "ReplayMemory", RecordingMemory)
    monkeypatch.setattr(naf, "ExplorationNoise", RecordingNoise)
    for seed in (1, 1, 2):
        train(box_args(tmp_path, total_timesteps=110, seed=seed))
    draws = {k: [rng.random(8) for rng in v] for k, v in streams.items()}
    assert not np.array_equal(
        draws["noise"][0], draws["replay"][0]
    )  # the same seed, two different streams
    for (
        k
    ) in draws:  # derived from the seed: the same seed gives the same stream, another seed another
        assert np.array_equal(draws[k][0], draws[k][1]) and not np.array_equal(
            draws[k][0], draws[k][2]
        )


def test_nan_loss_stops_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(naf, "naf_targets", lambda *a, **k: torch.full((32,), float("nan")))
    summary = train(small_args(tmp_path))
    assert not summary["completed"] and "loss became nan" in summary["error"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "CartPole-v1"], "needs a continuous (Box) action space"),
        pytest.param(
            ["--env", "MinAtar/Breakout-v1"],
            "takes vector observations; MinAtar/Breakout-v1 is a pixel env",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("minatar") is None,
                reason="pip install -r requirements/requirements-pixels.txt",
            ),
        ),
        (
            ["--batch-size", "64", "--buffer-size", "10"],
            "--batch-size 64 is larger than --buffer-size 10",
        ),
        (["--reward-scale", "0"], "--reward-scale must be positive"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(tmp_path, argv, message):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "algos" / "naf.py"),
            *argv,
            "--run-dir",
            str(tmp_path),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("naf: error: ") and message in lines[0], (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())


def test_image_observations_give_one_line_and_exit_2(tmp_path, capsys):
    args = Args(
        env_id=probes.IMAGE_BOX_ID,
        total_timesteps=200,
        learning_starts=100,
        buffer_size=1_000,
        run_dir=str(tmp_path),
        progress=False,
    )  # short and small, were it to run
    assert naf.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "naf: error: naf takes vector observations; ImageBox-v0 gives images of shape (3, 84, 84)"
    ]
    assert not any(tmp_path.iterdir())
