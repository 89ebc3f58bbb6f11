"""evaluate.py: by default it repeats a run's final evaluation from its saved model."""

import importlib
import sys
from pathlib import Path

import pytest

import evaluate
import probes


@pytest.mark.parametrize("algo, kw", [
    ("a2c", dict(total_timesteps=200, num_envs=2, normalize_obs=True)),  # the saved model carries the observation statistics
    ("ddpg", dict(total_timesteps=150, learning_starts=100, batch_size=16, hidden_sizes=(16, 16))),
])
def test_defaults_reproduce_the_runs_eval_return(tmp_path, capsys, monkeypatch, algo, kw):
    module = importlib.import_module(algo)
    monkeypatch.setitem(sys.modules, algo, module)  # evaluate.py loads the script afresh under this name
    summary = module.train(module.Args(env_id="Pendulum-v1", seed=3, eval_episodes=3, save_model=True, run_dir=str(tmp_path),
                                       progress=False, device="cpu", **kw))
    capsys.readouterr()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]))) == 0
    expected = f"return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} over 3 episodes"
    assert expected in capsys.readouterr().out


@pytest.mark.parametrize("algo", ["dqn", "n_step_q", "sarsa"])
def test_scale_obs_reaches_every_env_of_the_run_and_evaluate_py(tmp_path, capsys, monkeypatch, algo):
    """--scale-obs rescales the training envs, the evaluation envs and evaluate.py's envs alike:
    every env the run and evaluate.py make is asked for it, and evaluate.py repeats the run's return."""
    from common import pixels

    module = importlib.import_module(algo)
    monkeypatch.setitem(sys.modules, algo, module)
    asked = []
    make = pixels.make
    monkeypatch.setattr(pixels, "make", lambda *a, **kw: asked.append(kw.get("scale_obs", False)) or make(*a, **kw))
    summary = module.train(probes.tiny_args(module, algo, tmp_path, seed=3, total_timesteps=400, eval_episodes=3, save_model=True,
                                            scale_obs=True, device="cpu"))
    assert summary["completed"] and len(asked) >= 5 and all(asked), asked  # 2 training envs, 3 evaluation envs
    asked.clear()
    capsys.readouterr()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]))) == 0
    assert len(asked) == 4 and all(asked), asked  # the policy's env (for its shapes), 3 evaluation envs
    expected = f"return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} over 3 episodes"
    assert expected in capsys.readouterr().out
