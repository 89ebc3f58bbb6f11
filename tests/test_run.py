"""The run plumbing as a user meets it: videos, interrupts, failures that must not lose a run, bad set-ups."""

from __future__ import annotations

import collections
import copy
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ddpg
import dqn
import numpy as np
import probes
import pytest
import torch

import harness.cli
import harness.errors
import harness.run
from common.network import NetworkWrapper

ROOT = Path(__file__).resolve().parents[1]


def cli(
    algo: str, *flags: str, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "algos" / f"{algo}.py"), *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def one_error_line(r: subprocess.CompletedProcess, algo: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"{algo}: error: "), (
        r.stderr
    )
    return lines[0]


def test_videos_hold_every_evaluation_episode_named_by_step(tmp_path):
    summary = dqn.train(
        dqn.Args(
            total_timesteps=600,
            learning_starts=100,
            eval_every=300,
            eval_episodes=2,
            capture_video=True,
            run_dir=str(tmp_path),
            progress=False,
        )
    )
    videos = Path(summary["run_dir"]) / "videos"
    assert sorted(p.name for p in videos.iterdir()) == ["step-000000300", "step-000000600"]
    for (
        folder
    ) in videos.iterdir():  # one whole episode per evaluation env, no fragment of a next one
        assert sorted(p.name for p in folder.glob("*.mp4")) == ["episode-0.mp4", "episode-1.mp4"]


def test_frames_on_a_headless_machine_print_nothing():
    """pygame's frames (classic control, Box2D; drawn for videos, with harness.extras) drew with "error:
    XDG_RUNTIME_DIR is invalid..." on stderr where there is no screen: SDL probed for one. The frame is drawn."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER")
    }
    code = (
        "import harness.extras, gymnasium as gym; e = gym.make('CartPole-v1', render_mode='rgb_array'); e.reset(seed=0); "
        "frame = e.render(); e.close(); assert frame.shape == (400, 600, 3) and frame.min() < 100 < frame.max()"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.slow
def test_capture_video_on_a_headless_mujoco_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL")}
    r = cli(
        "ddpg",
        "--env",
        "InvertedPendulum-v5",
        "--total-timesteps",
        "300",
        "--learning-starts",
        "100",
        "--capture-video",
        "--eval-episodes",
        "2",
        "--save-model",
        "--no-progress",
        "--run-dir",
        str(tmp_path),
        env=env,
    )
    assert r.returncode == 0, r.stderr
    run = next(tmp_path.iterdir())
    assert len(list((run / "videos").rglob("*.mp4"))) == 2 and (run / "model.pt").exists()


def test_a_failed_final_evaluation_keeps_the_model_and_summary(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("an OpenGL platform library has not been loaded")

    monkeypatch.setattr(harness.run, "evaluate", broken)
    args = ddpg.Args(
        env_id="Pendulum-v1",
        total_timesteps=300,
        learning_starts=100,
        hidden_sizes=(32, 32),
        save_model=True,
        checkpoint_every=150,
        run_dir=str(tmp_path),
        progress=False,
    )
    assert ddpg.main(args) == 1
    run = next(tmp_path.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] and summary["total_timesteps"] == 300
    assert (
        summary["error"].startswith("final evaluation failed: RuntimeError")
        and summary["eval_return_mean"] is None
    )
    assert (run / "model.pt").exists() and (run / "checkpoint.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "make_bad", [lambda tmp: tmp / "a_file", lambda tmp: Path("/proc/no_such_dir")]
)
def test_a_run_dir_that_cannot_be_written_is_one_line(tmp_path, make_bad):
    bad = make_bad(tmp_path)
    if bad.parent == tmp_path:
        bad.write_text("not a folder")
    r = cli("dqn", "--total-timesteps", "200", "--learning-starts", "100", "--run-dir", str(bad))
    assert "--run-dir" in one_error_line(r, "dqn")


@pytest.mark.parametrize("config", ["{}", "[1, 2]", '{"env_id": "CartPole-v1"}'])
def test_resume_of_a_folder_whose_config_names_no_algorithm_is_one_line(
    tmp_path, monkeypatch, capsys, config
):
    (tmp_path / "config.json").write_text(config)
    says = f"dqn: error: --resume {tmp_path}: its config.json names no algorithm (not the config.json of a run)"
    monkeypatch.setattr(sys, "argv", ["dqn.py", "--resume", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        harness.cli.parse_args(dqn.Args, dqn.__doc__)
    assert stop.value.code == 2 and capsys.readouterr().err.strip() == says
    assert (
        dqn.main(probes.tiny_args(dqn, "dqn", tmp_path / "runs", resume=str(tmp_path))) == 2
    )  # train() called directly
    assert capsys.readouterr().err.strip() == says


def test_resume_of_a_run_without_a_checkpoint_is_one_line_from_the_command_line(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "config.json").write_text('{"algo": "dqn"}')
    monkeypatch.setattr(sys, "argv", ["dqn.py", "--resume", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        harness.cli.parse_args(dqn.Args, dqn.__doc__)
    assert stop.value.code == 2
    assert (
        capsys.readouterr().err.strip()
        == f"dqn: error: --resume {tmp_path}: no checkpoint.pt there (was the run started with --checkpoint-every?)"
    )


@pytest.mark.slow
def test_track_without_a_wandb_login_falls_back_to_offline(tmp_path):
    pytest.importorskip("wandb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        HOME=str(tmp_path / "home"),
        WANDB_SILENT="true",
        WANDB_CONFIG_DIR=str(tmp_path / "wandb_config"),
    )
    (tmp_path / "home").mkdir()
    r = cli(
        "dqn",
        "--total-timesteps",
        "300",
        "--learning-starts",
        "100",
        "--track",
        "--no-progress",
        "--run-dir",
        str(tmp_path / "runs"),
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "not logged in" in r.stderr and "Traceback" not in r.stderr
    assert list((tmp_path / "runs").glob("*/wandb/offline-run-*"))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ddpg", "naf"])
def test_single_process_scripts_refuse_torchrun(tmp_path, algo):
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
    }
    r = cli(
        algo,
        "--total-timesteps",
        "300",
        "--learning-starts",
        "100",
        "--run-dir",
        str(tmp_path),
        env=env,
    )
    assert "torchrun" in one_error_line(r, algo)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ddpg", "naf"])
def test_learning_starts_beyond_the_run_is_refused(tmp_path, algo):
    r = cli(
        algo, "--total-timesteps", "500", "--learning-starts", "500", "--run-dir", str(tmp_path)
    )
    assert "--learning-starts" in one_error_line(r, algo)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"])
def test_help_says_what_the_script_is(algo):
    r = cli(algo, "--help")
    assert r.returncode == 0
    first_line = (
        Path(ROOT / "algos" / f"{algo}.py").read_text().split('"""')[1].strip().splitlines()[0]
    )
    assert first_line in r.stdout.split("╭")[0]  # before the first box of flags
    assert "--checkpoint-every" in r.stdout and "--resume" in r.stdout


@pytest.mark.parametrize("flush", [True, False])
@pytest.mark.parametrize("algo", ["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"])
def test_training_flushes_subnormals_and_gives_the_callers_setting_back(
    tmp_path, monkeypatch, algo, flush
):
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    module = importlib.import_module(algo)
    seen = []
    train_step = NetworkWrapper.train_step

    def recording_train_step(self, *a, **kw):
        seen.append(probes.flushes_denormals())
        return train_step(self, *a, **kw)

    monkeypatch.setattr(NetworkWrapper, "train_step", recording_train_step)
    try:
        torch.set_flush_denormal(flush)
        module.train(probes.tiny_args(module, algo, tmp_path))
        assert seen and all(seen)  # every gradient step ran with subnormals flushed
        assert probes.flushes_denormals() is flush  # and the caller's setting is back
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("algo", ["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"])
def test_a_run_that_fails_before_training_leaves_the_callers_flush_setting(
    tmp_path, monkeypatch, algo
):
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    module = importlib.import_module(algo)

    def failing_begin(self, envs, eval_envs, checkpoint):
        raise OSError("checkpoint unreadable")

    monkeypatch.setattr(harness.run.Run, "begin", failing_begin)
    try:
        torch.set_flush_denormal(False)
        with pytest.raises(OSError, match="checkpoint unreadable"):
            module.train(probes.tiny_args(module, algo, tmp_path))
        assert probes.flushes_denormals() is False
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", [False, True])
def test_ctrl_c_stops_with_130_and_a_checkpoint_only_when_checkpointing(tmp_path, checkpointing):
    flags = [
        "--total-timesteps",
        "10000000",
        "--learning-starts",
        "500",
        "--no-progress",
        "--run-dir",
        str(tmp_path),
    ]
    if checkpointing:
        flags += ["--checkpoint-every", "100000000"]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "algos" / "dqn.py"), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob("*/metrics.csv")):
        time.sleep(0.2)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    run = next(tmp_path.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["error"] == "interrupted" and summary["total_timesteps"] > 0
    assert (run / "checkpoint.pt").exists() == checkpointing
    # the line says whether the run can be continued, and how
    if checkpointing:
        assert f"checkpoint written; resume with --resume {run}" in err, (
            err
        )  # the checkpoint at the step boundary
    else:
        assert "cannot be resumed" in err and "--checkpoint-every" in err, err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--batch-size", "abc"], "invalid literal for int() with base 10: 'abc'"),
        (["--batch-sizee", "3"], "Unrecognized options: --batch-sizee"),
        (["--total-timesteps", "1e5"], "--total-timesteps"),
    ],
)
def test_a_value_tyro_cannot_parse_is_tyros_message_with_exit_2(argv, says):
    """tyro's own message, wide enough that no value is cut, and argparse's exit status 2."""
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, str(ROOT / "algos" / "dqn.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_progress_line_says_heatup_and_its_eta_follows_the_learning_rate(tmp_path, capsys):
    """During heatup the line names it instead of an ETA extrapolated from random actions; afterwards
    the ETA comes from the rate since learning began."""
    args = probes.tiny_args(
        dqn, "dqn", tmp_path, total_timesteps=3000, learning_starts=2000, progress=True
    )
    dqn.train(args)
    lines = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("dqn ") and " steps (" in line
    ]
    steps = [int(line.split()[1].split("/")[0].replace(",", "")) for line in lines]
    assert any(s <= 2000 for s in steps) and any(s > 2000 for s in steps), lines
    for s, line in zip(steps, lines):
        assert ("heatup to 2,000" in line) == (s <= 2000) and ("ETA" in line) == (s > 2000), line


def test_eta_uses_the_rate_of_the_current_phase():
    run = harness.run.Run.__new__(harness.run.Run)
    run.heatup, run.total, run.start = 1000, 11_000, 0.0
    run.marks = collections.deque(maxlen=64)
    run._eta(0, 0.0)
    run._eta(1000, 1.0)  # heatup: 1000 steps/s
    run._eta(1001, 1.0)  # learning begins: a new phase
    assert run._eta(2001, 11.0) == pytest.approx(
        (11_000 - 2001) / 100
    )  # 100 steps/s since then, not ~180 overall


def test_evaluate_closes_its_envs_when_the_policy_fails():
    import functools

    closed = []

    def make_envs(n, video_dir):
        envs = dqn.make_env("CartPole-v1", n, video_dir)
        real_close = envs.close
        envs.close = lambda **kw: (closed.append(True), real_close(**kw))
        return envs

    def failing_policy(obs):
        raise RuntimeError("policy failed")

    with pytest.raises(RuntimeError, match="policy failed"):
        harness.run.evaluate(failing_policy, make_envs, 2, seed=0)
    assert closed == [True]
    returns = harness.run.evaluate(
        lambda obs: (obs[:, 2] > 0).astype(np.int64),
        functools.partial(dqn.make_env, "CartPole-v1"),
        2,
        seed=0,
    )
    assert returns.shape == (2,) and (returns > 0).all()


@pytest.mark.slow
def test_a_missing_extra_is_one_line_naming_its_requirements_file(tmp_path, capsys, monkeypatch):
    import importlib.util

    import gymnasium as gym

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "moviepy" else real_find_spec(name, *a),
    )
    assert dqn.main(probes.tiny_args(dqn, "dqn", tmp_path, capture_video=True)) == 2
    assert (
        capsys.readouterr().err.strip()
        == "dqn: error: --capture-video needs moviepy: pip install -r requirements/requirements-video.txt"
    )
    assert not list(tmp_path.iterdir())  # found before the run folder is written

    def no_box2d(*a, **k):
        raise gym.error.DependencyNotInstalled(
            'Box2D is not installed, you can install it by run `pip install "gymnasium[box2d]"`'
        )

    monkeypatch.setattr(gym, "make", no_box2d)
    assert dqn.main(probes.tiny_args(dqn, "dqn", tmp_path, env_id="LunarLander-v3")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(
        "(this project's extra: pip install -r requirements/requirements-box2d.txt)"
    ), err


class UnboundedActions:  # Pendulum with an action space without finite bounds (the env itself clips)
    def __new__(cls, **kwargs):
        import gymnasium as gym
        import numpy as np

        env = gym.make("Pendulum-v1", **kwargs).unwrapped
        env.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        return env


@pytest.mark.parametrize("algo", ["ddpg", "naf"])
def test_ddpg_and_naf_refuse_actions_without_finite_bounds(tmp_path, capsys, algo):
    """Their actor's tanh output is scaled to the action bounds: infinite ones are refused in one line, exit 2."""
    import gymnasium as gym

    if "UnboundedActions-v0" not in gym.registry:
        gym.register("UnboundedActions-v0", entry_point=UnboundedActions, max_episode_steps=200)
    module = importlib.import_module(algo)
    assert module.main(probes.tiny_args(module, algo, tmp_path, env_id="UnboundedActions-v0")) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1
        and f"{algo} needs finite action bounds to scale its tanh output" in err
    ), err


def test_the_shared_loop_checks_say_what_is_wrong():
    """check_spaces, check(nonnegative=...), Run.stop_if_nan and Run.evaluation_due, which every script's loop uses."""
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])
    with pytest.raises(
        harness.errors.InputError, match=r"^dqn needs a Discrete action space; Pendulum-v1 has Box"
    ):
        harness.run.check_spaces(envs, "dqn", "Pendulum-v1")
    harness.run.check_spaces(
        envs, "ddpg", "Pendulum-v1", discrete=False, continuous=True, bounded=True
    )
    harness.run.check_spaces(envs, "a2c", "Pendulum-v1", continuous=True)
    cartpole = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(
        harness.errors.InputError,
        match=r"^ddpg needs a continuous \(Box\) action space; CartPole-v1 has Discrete",
    ):
        harness.run.check_spaces(
            cartpole, "ddpg", "CartPole-v1", discrete=False, continuous=True, bounded=True
        )
    with pytest.raises(
        harness.errors.InputError, match=r"^--learning-starts must be >= 0, got -1$"
    ):
        harness.cli.check(dqn.Args(learning_starts=-1), nonnegative=("learning_starts",))
    harness.cli.check(dqn.Args(learning_starts=0), nonnegative=("learning_starts",))

    run = harness.run.Run(
        "dqn", dqn.Args(total_timesteps=1000, eval_every=250), ("loss",), write=False
    )
    run.stop_if_nan(5, torch.tensor(1.0), actor=torch.tensor(2.0))  # finite: nothing happens
    with pytest.raises(
        FloatingPointError,
        match=r"^loss became 1.0 \(actor nan\) at step 5; lower the learning rate",
    ):
        run.stop_if_nan(5, torch.tensor(1.0), actor=torch.tensor(float("nan")))
    with pytest.raises(FloatingPointError, match=r"^loss became inf at step 7;"):
        run.stop_if_nan(7, torch.tensor(float("inf")))
    due = [step for step in range(100, 1001, 100) if run.evaluation_due(step - 100, step)]
    assert due == [
        300,
        500,
        800,
    ]  # each multiple of 250 crossed, but not 1000: the final evaluation comes then


def test_a_checkpoint_puts_each_kind_of_object_back_in_place():
    """What a script's checkpoint() may name: state_of() keeps it, load_into() restores the same object."""
    import harness.checkpoint
    import harness.resume

    net, rng = torch.nn.Linear(3, 2), np.random.default_rng(5)
    array, scalar = np.arange(4.0), torch.tensor(1.5)
    saved = {
        k: harness.checkpoint.state_of(v)
        for k, v in {"net": net, "rng": rng, "array": array, "scalar": scalar, "none": None}.items()
    }
    saved = {k: copy.deepcopy(v) for k, v in saved.items()}
    draws = rng.random(3)
    net2, rng2, array2, scalar2 = (
        torch.nn.Linear(3, 2),
        np.random.default_rng(6),
        np.zeros(4),
        torch.zeros(()),
    )
    for name, target in {
        "net": net2,
        "rng": rng2,
        "array": array2,
        "scalar": scalar2,
        "none": None,
    }.items():
        harness.resume.load_into(target, saved[name], name)
    assert all(
        torch.equal(a, b) for a, b in zip(net.state_dict().values(), net2.state_dict().values())
    )
    np.testing.assert_array_equal(rng2.random(3), draws)
    np.testing.assert_array_equal(array2, array)
    assert scalar2.item() == 1.5
    with pytest.raises(TypeError, match="'epsilon'"):  # a float cannot be put back in place
        harness.resume.load_into(0.1, 0.2, "epsilon")
