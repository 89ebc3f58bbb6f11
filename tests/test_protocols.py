"""The papers' protocols as flags: the value-based scripts' optimizer, MinAtar's epsilon schedule,
Atari's evaluation epsilon and frame cap."""

import subprocess
import sys
from pathlib import Path

import dqn
import n_step_q
import numpy as np
import probes
import pytest
import sarsa
import torch

from common import pixels
from harness.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {"dqn": dqn, "n_step_q": n_step_q, "sarsa": sarsa}


def tiny_args(module, tmp_path, **kw):
    base = dict(total_timesteps=300, eval_episodes=1, run_dir=str(tmp_path), progress=False)
    if module is dqn:
        base.update(learning_starts=100, batch_size=16, buffer_size=500, train_every=4)
    base.update(kw)
    return module.Args(**base)


def record_wrappers(module, monkeypatch) -> list:
    """The NetworkWrappers `module.train` builds, in order."""
    made = []
    monkeypatch.setattr(probes.RecordingWrapper, "made", made)
    monkeypatch.setattr(module, "NetworkWrapper", probes.RecordingWrapper)
    return made


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_optimizer_flags_reach_the_optimizer(tmp_path, monkeypatch, name):
    module = SCRIPTS[name]
    made = record_wrappers(module, monkeypatch)
    summary = module.train(
        tiny_args(
            module,
            tmp_path / "rms",
            optimizer="rmsprop",
            rmsprop_centered=True,
            rmsprop_alpha=0.95,
            optimizer_eps=0.01,
            learning_rate=2.5e-4,
        )
    )
    assert summary["completed"] and len(made) == 1
    opt = made[0].optimizer
    assert type(opt) is torch.optim.RMSprop
    group = opt.param_groups[0]
    assert (group["alpha"], group["eps"], group["centered"]) == (0.95, 0.01, True)
    assert (
        group.get("initial_lr", group["lr"]) == 2.5e-4
    )  # initial_lr: under n_step_q's and sarsa's decay
    # the default stays Adam at eps 1e-8
    made.clear()
    assert module.train(tiny_args(module, tmp_path / "adam"))["completed"]
    assert (
        type(made[0].optimizer) is torch.optim.Adam
        and made[0].optimizer.param_groups[0]["eps"] == 1e-8
    )


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_rmsprop_settings_without_rmsprop_are_refused(name):
    module = SCRIPTS[name]
    with pytest.raises(InputError, match="--optimizer rmsprop"):
        module.validate(module.Args(rmsprop_centered=True))
    with pytest.raises(InputError, match="--optimizer-eps"):
        module.validate(module.Args(optimizer_eps=0.0))


def test_epsilon_decays_from_the_end_of_the_heatup_with_decay_after_heatup(tmp_path, monkeypatch):
    """MinAtar's agent: epsilon = start + (end - start) * min(1, (s - learning_starts) / duration)."""
    seen = []
    real = dqn.select_actions
    monkeypatch.setattr(
        dqn,
        "select_actions",
        lambda greedy, obs, epsilon, *a: seen.append(epsilon) or real(greedy, obs, epsilon, *a),
    )
    summary = dqn.train(
        tiny_args(
            dqn,
            tmp_path,
            total_timesteps=400,
            start_epsilon=0.9,
            end_epsilon=0.1,
            exploration_fraction=0.25,
            decay_after_heatup=True,
        )
    )
    assert summary["completed"] and len(seen) == 300  # steps 101 to 400
    steps = np.arange(101, 401)
    np.testing.assert_allclose(
        seen, 0.9 - 0.8 * np.minimum(1.0, (steps - 100) / 100), rtol=0, atol=1e-12
    )


def test_evaluation_policy_is_greedy_at_zero_and_seeded_epsilon_greedy_otherwise():
    greedy = lambda obs: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    obs = np.zeros((4000, 3), np.float32)
    assert dqn.evaluation_policy(greedy, 0.0, 6, seed=1, step=10) is greedy
    act = dqn.evaluation_policy(greedy, 0.25, 6, seed=1, step=10)(obs)
    # a random action is uniform over all 6 (a sixth of them greedy by chance): 0.25 * 5/6 not greedy
    assert abs(np.mean(act != 0) - 0.25 * 5 / 6) < 0.03
    assert set(np.unique(act)) == set(range(6))
    again = dqn.evaluation_policy(greedy, 0.25, 6, seed=1, step=10)(obs)
    other = dqn.evaluation_policy(greedy, 0.25, 6, seed=1, step=20)(obs)
    assert np.array_equal(act, again) and not np.array_equal(act, other)


def test_eval_epsilon_changes_only_the_evaluation(tmp_path):
    """Training's metrics are the same with and without --eval-epsilon; the evaluation differs
    (CartPole: epsilon 1 is a uniform random policy, which never reaches 100)."""
    base = dqn.train(tiny_args(dqn, tmp_path / "greedy", eval_episodes=5))
    noisy = dqn.train(tiny_args(dqn, tmp_path / "eps", eval_episodes=5, eval_epsilon=1.0))
    assert (
        base["updates"] == noisy["updates"]
        and base["train_return_last10"] == noisy["train_return_last10"]
    )
    assert noisy["eval_return_mean"] < 100
    assert base["eval_return_mean"] != noisy["eval_return_mean"]


def test_atari_eval_frame_cap_truncates_the_game():
    pytest.importorskip("ale_py")
    env = pixels.make("BreakoutNoFrameskip-v4", training=False, max_frames=400)
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, info = env.step(0)  # NOOP: the game never ends by itself
        steps += 1
        done = terminated or truncated
    env.close()
    assert truncated and not terminated
    assert info["episode_frame_number"] <= 400
    assert steps <= 100  # 4 frames a step


def test_eval_max_frames_is_only_for_the_evaluation_envs(tmp_path, monkeypatch):
    pytest.importorskip("ale_py")
    made = []
    real = pixels.make

    def recording(env_id, training=True, *a, **k):
        made.append((training, k.get("max_frames")))
        return real(env_id, training, *a, **k)

    monkeypatch.setattr(dqn.pixels, "make", recording)
    summary = dqn.train(
        tiny_args(
            dqn,
            tmp_path,
            env_id="BreakoutNoFrameskip-v4",
            total_timesteps=200,
            buffer_size=200,
            eval_episodes=1,
            eval_max_frames=800,
        )
    )
    assert summary["completed"]
    assert (
        (True, None) in made
        and (False, 800) in made
        and (False, None) not in made
        and (True, 800) not in made
    )


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MinAtar/Breakout-v1"])
def test_eval_max_frames_outside_atari_is_bad_input(tmp_path, env_id):
    if env_id.startswith("MinAtar"):
        pytest.importorskip("minatar")
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "algos" / "dqn.py"),
            "--env",
            env_id,
            "--eval-max-frames",
            "18000",
            "--run-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--eval-max-frames" in lines[0] and "Traceback" not in r.stderr


def test_the_minatar_paper_cells_settings_reach_dqn_as_flags():
    """speed.py minatar runs our side from the minatar_paper suite's settings as command-line flags."""
    import tyro

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed
    from suite import load_suite

    for cell in load_suite("minatar_paper").cells:
        args = tyro.cli(dqn.Args, args=speed.cli_flags(cell.settings))
        assert {k: getattr(args, k) for k in cell.settings} == cell.settings
        assert (
            args.optimizer == "rmsprop"
            and args.rmsprop_centered
            and args.decay_after_heatup
            and not args.double_dqn
        )


def test_speed_minatar_curve_is_the_mean_of_the_last_100_episodes_at_each_point():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed

    frames = list(range(10, 2010, 10))  # 200 episodes, one every 10 frames
    returns = [float(i) for i in range(200)]
    points = speed.curve(frames, returns, total=2000, points=4)
    assert [at for at, _ in points] == [500, 1000, 1500, 2000]
    assert points[0][1] == sum(range(50)) / 50  # 50 episodes by frame 500: all of them
    assert points[-1][1] == sum(range(100, 200)) / 100  # the last 100 only
    assert speed.curve([900], [3.0], total=1000, points=2) == [
        [1000, 3.0]
    ]  # no point before the first episode


def test_timed_children_at_once_each_get_their_own_cpu_time():
    """speed.py minatar --parallel times two children from two threads: each must get its own CPU time."""
    import concurrent.futures
    import os

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from speed import run_timed

    busy = [
        sys.executable,
        "-c",
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass",
    ]
    idle = [sys.executable, "-c", "import time; time.sleep(1.0)"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        b, i = (
            pool.submit(run_timed, busy, ".", dict(os.environ)),
            pool.submit(run_timed, idle, ".", dict(os.environ)),
        )
        (_, busy_cpu, _), (_, idle_cpu, idle_wall) = b.result(), i.result()
    assert busy_cpu >= 0.5
    assert idle_cpu < 0.4 and idle_wall >= 1.0


def test_the_readme_minatar_protocol_command_is_the_minatar_paper_cell():
    """The command for MinAtar's protocol (docs/pixels.md) must run what the minatar_paper suite runs: a
    flag the page leaves out (a default that differs from the agent's) fails here."""
    import shlex

    import tyro

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from suite import load_suite

    readme = (ROOT / "docs" / "pixels.md").read_text()
    start = readme.index("python algos/dqn.py --env MinAtar/Breakout-v0")
    command = readme[start : readme.index("```", start)].replace("\\\n", " ")
    argv = shlex.split(command)[2:]
    args = tyro.cli(dqn.Args, args=argv)
    cell = next(c for c in load_suite("minatar_paper").cells if c.env == args.env_id)
    assert args.total_timesteps == cell.steps
    assert {k: getattr(args, k) for k in cell.settings} == cell.settings
