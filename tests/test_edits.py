"""What a researcher meets when they copy a script and edit it.

- A subclass of a script's network with a changed `forward()` drives acting in training and in
  evaluation (the numpy fast paths must notice and step aside).
- A script copied with only what it needs into another project, beside a foreign package named
  `common`, runs and uses its own modules.
- A bug is a bug: an exception that is not bad input keeps its traceback and is not turned into
  "exit 2"; metrics.csv and summary.json keep the error. A metric logged without its column fails
  at the first call with a message that names the fix.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import a2c
import ddpg
import dqn
import n_step_q
import naf
import numpy as np
import probes
import pytest
import sarsa
import torch

import harness.errors
import harness.run

ROOT = Path(__file__).resolve().parents[1]
BIG = 1e3  # dominates any Q-value or logit a few hundred steps of training produce


def cartpole_rule(obs: np.ndarray) -> np.ndarray:
    """A fixed, state-dependent choice [B]: push towards where the pole falls."""
    obs = np.asarray(obs, dtype=np.float64).reshape(len(obs), -1)
    return (obs[:, 2] + obs[:, 3] > 0).astype(np.int64)


def pendulum_rule(obs: np.ndarray, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """A fixed, state-dependent action [B, 1] inside Pendulum's bounds."""
    obs = np.asarray(obs, dtype=np.float64).reshape(len(obs), -1)
    return (high + low) / 2 + (high - low) / 2 * np.tanh(3.0 * obs[:, 1:2] - obs[:, 2:3])


def torch_rule(obs: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(cartpole_rule(obs.detach().cpu().numpy()), device=obs.device)


def record_steps(monkeypatch, module) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Every vector-env step the script takes, as (index of the env set, obs acted on, actions);
    set 0 is the training envs, the later ones are evaluations. Sets are numbered at their first
    reset: the env that validate() makes to check the id is never reset."""
    log: list[tuple[int, np.ndarray, np.ndarray]] = []
    made = [0]
    real_make_env = module.make_env

    def make_env(*args, **kwargs):
        envs = real_make_env(*args, **kwargs)
        reset, step, last = envs.reset, envs.step, {}

        def reset_(*a, **k):
            if "index" not in last:
                last["index"], made[0] = made[0], made[0] + 1
            obs, infos = reset(*a, **k)
            last["obs"] = obs
            return obs, infos

        def step_(actions):
            log.append(
                (last["index"], np.array(last["obs"], copy=True), np.array(actions, copy=True))
            )
            out = step(actions)
            last["obs"] = out[0]
            return out

        envs.reset, envs.step = reset_, step_
        return envs

    monkeypatch.setattr(module, "make_env", make_env)
    return log


# ---- a changed forward() drives acting and evaluation ------------------------------------------------
def ruled_q(base: type) -> type:
    class RuledQ(base):
        """A Q-network whose forward() adds a large bonus to the rule's action: its greedy action is the rule's."""

        def forward(self, obs):
            q = super().forward(obs)
            return q + BIG * torch.nn.functional.one_hot(torch_rule(obs), q.shape[1]).to(q.dtype)

    return RuledQ


@pytest.mark.parametrize("module", [dqn, n_step_q, sarsa], ids=lambda m: m.__name__)
def test_value_scripts_act_and_evaluate_through_a_changed_forward(module, monkeypatch, tmp_path):
    monkeypatch.setattr(module, "QNetwork", ruled_q(module.QNetwork))
    log = record_steps(monkeypatch, module)
    kwargs = dict(
        total_timesteps=400,
        start_epsilon=0.0,
        end_epsilon=0.0,
        eval_episodes=2,
        run_dir=str(tmp_path),
        progress=False,
    )
    if module is dqn:
        kwargs.update(learning_starts=100, batch_size=32, train_every=4)
    if module is n_step_q:
        kwargs.update(
            paper_epsilons=False
        )  # one end epsilon, 0 here, for every env: no exploration
    # dqn's numpy fast path notices the change and steps aside; n_step_q and sarsa act through
    # forward() alone
    warned = (
        pytest.warns(UserWarning, match="disagrees with forward")
        if module is dqn
        else contextlib.nullcontext()
    )
    with warned:
        summary = module.train(module.Args(**kwargs))
    assert summary["completed"] and summary["updates"] > 0
    heatup = kwargs.get(
        "learning_starts", 0
    )  # dqn's random steps; n_step_q and sarsa act greedily from the start here
    train = [(o, a) for i, o, a in log if i == 0][heatup:]
    evals = [(o, a) for i, o, a in log if i > 0]
    assert train and evals
    for obs, actions in train + evals:
        np.testing.assert_array_equal(actions, cartpole_rule(obs))


class RuledActorCritic(a2c.ActorCritic):
    def forward(self, obs):
        logits, values = super().forward(obs)
        return logits + BIG * torch.nn.functional.one_hot(torch_rule(obs), logits.shape[1]).to(
            logits.dtype
        ), values


def test_a2c_samples_and_evaluates_through_a_changed_forward(monkeypatch, tmp_path):
    monkeypatch.setattr(a2c, "ActorCritic", RuledActorCritic)
    log = record_steps(monkeypatch, a2c)
    with pytest.warns(UserWarning, match="disagrees with forward"):
        summary = a2c.train(
            a2c.Args(total_timesteps=400, eval_episodes=2, run_dir=str(tmp_path), progress=False)
        )
    assert summary["completed"] and summary["updates"] > 0
    assert {i for i, _, _ in log} >= {0, 1}
    for (
        _,
        obs,
        actions,
    ) in log:  # sampling from logits BIG apart is the rule's action, in training too
        np.testing.assert_array_equal(actions, cartpole_rule(obs))


class RuledActor(ddpg.Actor):
    def forward(self, obs):
        return torch.as_tensor(
            pendulum_rule(obs.detach().cpu().numpy()), dtype=obs.dtype
        ) + 0.0 * super().forward(obs)


class RuledNAF(naf.NAFNetwork):
    def forward(self, obs):
        values, mu, lower = super().forward(obs)
        return (
            values,
            torch.as_tensor(pendulum_rule(obs.detach().cpu().numpy()), dtype=mu.dtype) + 0.0 * mu,
            lower,
        )


@pytest.mark.parametrize(
    "module, name, sub",
    [(ddpg, "Actor", RuledActor), (naf, "NAFNetwork", RuledNAF)],
    ids=["ddpg", "naf"],
)
def test_continuous_scripts_act_and_evaluate_through_a_changed_forward(
    module, name, sub, monkeypatch, tmp_path
):
    monkeypatch.setattr(module, name, sub)
    log = record_steps(monkeypatch, module)
    args = module.Args(
        total_timesteps=300,
        learning_starts=100,
        batch_size=32,
        noise_std=0.0,
        eval_episodes=1,
        torch_threads=1,
        run_dir=str(tmp_path),
        progress=False,
    )
    with pytest.warns(UserWarning, match="disagrees with forward"):
        summary = module.train(args)
    assert summary["completed"]
    train = [(o, a) for i, o, a in log if i == 0][args.learning_starts :]  # after the random heatup
    evals = [(o, a) for i, o, a in log if i > 0]
    assert train and evals
    for obs, actions in train + evals:
        np.testing.assert_allclose(actions, pendulum_rule(obs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("module", [dqn, n_step_q, sarsa, a2c, ddpg, naf], ids=lambda m: m.__name__)
def test_unchanged_networks_keep_the_fast_path_silently(module, recwarn):
    """The check must not cry wolf: the scripts' own networks keep their numpy path (no warning)."""
    if module in (ddpg, naf):
        import gymnasium as gym

        space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        net = (
            ddpg.Actor(3, space, (16, 16)) if module is ddpg else naf.NAFNetwork(3, space, (16, 16))
        )
        act = module.deterministic_policy(net, torch.device("cpu"))
        assert act.__name__ == "act_numpy"
    elif module is a2c:
        net = a2c.ActorCritic((4,), 2, True, (16, 16), normalize_obs=True)
        assert a2c.numpy_head(net, torch.device("cpu")).__name__ == "head_numpy"
    else:
        q = module.QNetwork((4,), 2, (16, 16))
        obs = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
        np.testing.assert_array_equal(
            module.greedy_policy(q, torch.device("cpu"))(obs),
            q(torch.from_numpy(obs)).argmax(1).numpy(),
        )
    assert not [w for w in recwarn if "fast path" in str(w.message)]


def test_the_probe_catches_a_forward_that_the_layers_do_not_show():
    """A buffer loaded with the weights changes forward() while the layers look as the fast path expects."""
    q = dqn.QNetwork((4,), 2, (8,))

    class Scaled(dqn.QNetwork):
        def __init__(self, *a):
            super().__init__(*a)
            self.register_buffer("scale", torch.ones(()))

        def forward(self, obs):
            return -self.scale * super().forward(obs)

    s = Scaled((4,), 2, (8,))
    s.load_state_dict({**q.state_dict(), "scale": torch.tensor(3.0)})
    obs = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    with pytest.warns(UserWarning, match="disagrees with forward"):
        act = dqn.greedy_policy(s, torch.device("cpu"))
    np.testing.assert_array_equal(act(obs), s(torch.from_numpy(obs)).argmax(1).numpy())


# ---- a copied script beside a foreign `common` --------------------------------------------------------
@pytest.mark.slow
def test_a_copied_script_runs_beside_a_foreign_common_package(tmp_path):
    """README: copy the script, common/ (the modules it imports) and harness/ into one folder."""
    project = tmp_path / "project"
    (project / "common").mkdir(parents=True)  # the researcher's own package named `common`
    (project / "common" / "__init__.py").write_text(
        "raise ImportError('the foreign common package was imported')\n"
    )
    rl = project / "rl"
    (rl / "common").mkdir(parents=True)
    shutil.copy(ROOT / "algos" / "dqn.py", rl)
    for name in ("__init__", "autoreset", "fastpath", "network", "pixels", "replay", "torso"):
        shutil.copy(ROOT / "common" / f"{name}.py", rl / "common")
    shutil.copytree(ROOT / "harness", rl / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(project),
        "WANDB_MODE": "disabled",
        "HOME": str(tmp_path),
    }
    r = subprocess.run(
        [
            sys.executable,
            "rl/dqn.py",
            "--total-timesteps",
            "300",
            "--learning-starts",
            "100",
            "--eval-episodes",
            "1",
            "--run-dir",
            "out",
            "--no-progress",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (summary,) = (project / "out").glob("*/summary.json")
    assert json.loads(summary.read_text())["completed"]


# ---- bugs look like bugs -------------------------------------------------------------------------------
def test_a_bug_in_train_keeps_its_traceback_and_the_run_records_it(monkeypatch, tmp_path):
    real = dqn.dqn_targets
    calls = [0]

    def broken(*a, **k):
        calls[0] += 1
        if calls[0] == 50:
            raise ValueError("a researcher's slip")  # a ValueError, yet not bad input
        return real(*a, **k)

    monkeypatch.setattr(dqn, "dqn_targets", broken)
    with pytest.raises(ValueError, match="a researcher's slip"):
        dqn.main(
            dqn.Args(
                total_timesteps=2_000,
                learning_starts=100,
                train_every=1,
                run_dir=str(tmp_path),
                progress=False,
            )
        )
    (run,) = tmp_path.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] is False and summary["error"] == "ValueError: a researcher's slip"
    assert summary["total_timesteps"] == 150  # learning from step 101, one update per step
    assert "episodic_return" in (run / "metrics.csv").read_text().splitlines()[0]


def test_a_metric_without_its_column_fails_at_once_naming_the_fix(monkeypatch, tmp_path):
    real_log = harness.run.Run.log

    def log(self, global_step, **metrics):
        if "loss" in metrics:
            metrics["td_max"] = 1.0  # added to the script's log call, not to its fields
        return real_log(self, global_step, **metrics)

    monkeypatch.setattr(harness.run.Run, "log", log)
    with pytest.raises(
        ValueError,
        match=r"td_max not among the metrics.csv columns .* add it to the list of fields the script passes to Run",
    ):
        dqn.main(
            dqn.Args(
                total_timesteps=1_000,
                learning_starts=100,
                train_every=1,
                run_dir=str(tmp_path),
                progress=False,
            )
        )
    (run,) = tmp_path.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["error"].startswith("ValueError: Run.log: td_max")
        and summary["total_timesteps"] == 200
    )  # the 100th update logs the loss


@pytest.mark.parametrize("algo", ["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"])
def test_a_metric_added_to_a_log_call_without_its_column_fails_at_that_call(
    algo, tmp_path, monkeypatch
):
    """The edit in the script's own text: run.log checks the metrics it is given against the fields
    passed to Run(...), the first time the edited call runs."""
    source, calls = re.subn(
        r"run\.log\(\s*global_step,",
        "run.log(global_step, td_max=1.0,",
        (ROOT / "algos" / f"{algo}.py").read_text(),
    )
    assert calls == 1
    (tmp_path / f"{algo}_edited.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    edited = importlib.import_module(f"{algo}_edited")
    fast = {"train_every": 1} if "train_every" in edited.Args.__dataclass_fields__ else {}
    args = probes.tiny_args(edited, algo, tmp_path / "runs", total_timesteps=20_000, **fast)
    with pytest.raises(
        ValueError,
        match=r"td_max not among the metrics.csv columns .* add it to the list of fields",
    ):
        edited.train(args)


def test_bad_input_is_still_one_line_and_exit_2(tmp_path, capsys):
    assert dqn.main(dqn.Args(env_id="NoSuchEnv-v0", run_dir=str(tmp_path))) == 2
    assert dqn.main(dqn.Args(batch_size=0, run_dir=str(tmp_path))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("dqn: error: ") for line in err)
    assert issubclass(harness.errors.InputError, ValueError)
