"""tune.py: a study of a few trials on a tiny budget (storage, table, settings line), pruning on the
evaluations, a trial stopped by SLURM, Ctrl-C or SIGTERM tried again, the built-in search spaces,
and bad input."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

optuna = pytest.importorskip("optuna")
Retry = optuna.storages.RetryHeartbeatStaleTrialCallback  # records the trial a retry tries again

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import job  # noqa: E402
import probes  # noqa: E402
import tune  # noqa: E402

TINY = """
[suites.tiny]
description = "test suite"
seeds = [1, 2]
eval_points = 2

[[suites.tiny.cells]]
algo = "a2c"
env = "CartPole-v1"
steps = 2_000
settings = { num_envs = 4, eval_episodes = 2 }
threshold = 50.0
"""
SPACE = """
learning_rate = { low = 1e-4, high = 3e-3, log = true }
n_steps = { choices = [5, 16] }
hidden_sizes = { choices = [[16], [32, 32]] }
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("tune")
    (base / "suites.toml").write_text(TINY)
    (base / "space.toml").write_text(SPACE)
    (base / "empty.toml").write_text("# no parameter\n")
    return {
        "suites": str(base / "suites.toml"),
        "space": str(base / "space.toml"),
        "empty": str(base / "empty.toml"),
    }


def argv(files: dict, study_dir: Path, *extra: str) -> list[str]:
    return [
        "--suite",
        "tiny",
        "--suites-file",
        files["suites"],
        "--algo",
        "a2c",
        "--env",
        "CartPole-v1",
        "--space",
        files["space"],
        "--study-dir",
        str(study_dir),
        *extra,
    ]


def load(study_dir: Path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return optuna.load_study(
        study_name="tiny__a2c__CartPole-v1",
        storage=JournalStorage(JournalFileBackend(str(study_dir / "journal.log"))),
    )


@pytest.fixture(scope="module")
def study(files, tmp_path_factory) -> dict:
    """Three trials of one seed each (about 2k env steps per trial), pruning off."""
    study_dir = tmp_path_factory.mktemp("study")
    rc = tune.main(argv(files, study_dir, "--trials", "3", "--seeds", "7", "--prune-after", "-1"))
    return {"rc": rc, "dir": study_dir}


def searched(trials):
    return [t for t in trials if not t.user_attrs.get("baseline")]


@pytest.mark.slow
def test_study_writes_its_storage_its_table_and_a_settings_line(study, files):
    assert study["rc"] == 0
    s = load(study["dir"])
    trials = s.get_trials()
    assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), (
        "3 trials and the baseline"
    )
    (base,) = [t for t in trials if t.user_attrs.get("baseline")]
    assert (
        base.number == 0
        and base.params == {}
        and base.user_attrs["settings"] == {"num_envs": 4, "eval_episodes": 2}
    ), "the cell's own settings run first, nothing drawn"
    for t in trials:  # the objective is the run's own final greedy evaluation (one seed here)
        (run_dir,) = (study["dir"] / "trials" / f"{t.number:04d}" / "runs").iterdir()
        result = json.loads((run_dir / "result.json").read_text())
        assert (
            result["status"] == "ok"
            and result["spec"]["seed"] == 7
            and result["spec"]["steps"] == 2_000
        )
        assert result["spec"]["settings"] == t.user_attrs["settings"], (
            "the run ran the trial's settings"
        )
        assert t.value == result["summary"]["eval_return_mean"] == t.user_attrs["evals"]["7"]
        if t is not base:
            assert t.user_attrs["settings"]["num_envs"] == 4 and set(t.params) == {
                "learning_rate",
                "n_steps",
                "hidden_sizes",
            }
    best = max(searched(trials), key=lambda t: t.value)

    text = (study["dir"] / "STUDY.md").read_text()
    rows = [
        x for x in text.splitlines() if x.startswith("| ") and x.split("|")[1].strip().isdigit()
    ]
    assert len(rows) == 3 and rows[0].startswith(f"| {best.number} | complete | {best.value:.1f} |")
    assert f"| 0 (the cell's settings) | complete | {base.value:.1f} |" in text
    assert "python benchmarks/tune.py --suite tiny" in text and "--trials 3" in text, (
        "the command that made it"
    )
    assert (
        f"The cell's current settings (trial 0) score {base.value:.1f} on the same seeds." in text
    )
    if best.value <= base.value:  # no line from a trial that does not beat the cell's settings
        assert (
            "```toml" not in text
            and "No settings line: no trial scores above the cell's current settings" in text
        )
        return
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    pasted = tomllib.loads(block)
    assert pasted["settings"] == {
        **{"num_envs": 4, "eval_episodes": 2},
        **best.user_attrs["settings"],
    }
    assert set(best.user_attrs["settings"]) == {
        "num_envs",
        "eval_episodes",
        "learning_rate",
        "n_steps",
        "hidden_sizes",
    }
    assert (
        f"trial {best.number}, mean greedy eval {best.value:.1f} over seeds 7"
        in pasted["settings_source"]
    )


def _config(tmp_path, cell: dict) -> dict:
    return {
        "cell": cell,
        "seeds": [7],
        "space": {"learning_rate": {"low": 1e-4, "high": 1e-2, "log": True}},
        "suite": "tiny",
        "prune_after": -1,
        "study_dir": str(tmp_path),
    }


def test_a_settings_line_is_offered_only_from_a_trial_that_beats_the_cells_settings(
    files, tmp_path
):
    _, config = tune.parse(argv(files, tmp_path / "study"))
    cell = config["cell"]

    def study_with(*trials):
        s = optuna.create_study(direction="maximize")
        for value, attrs in trials:
            s.add_trial(
                optuna.trial.create_trial(value=value, user_attrs={"evals": {"7": value}, **attrs})
            )
        return s

    base = (50.0, {"baseline": True, "settings": cell["settings"]})
    worse = (40.0, {"settings": {**cell["settings"], "learning_rate": 0.001}})
    better = (60.0, {"settings": {**cell["settings"], "learning_rate": 0.002}})
    text, block = tune.study_markdown(study_with(base, worse), _config(tmp_path, cell))
    assert (
        block is None
        and "No settings line: no trial scores above the cell's current settings (50.0)" in text
    )
    text, block = tune.study_markdown(study_with(worse), _config(tmp_path, cell))
    assert block is None and "the cell's current settings have no score on these seeds yet" in text
    text, block = tune.study_markdown(study_with(base, worse, better), _config(tmp_path, cell))
    assert block.startswith("settings = { num_envs = 4, eval_episodes = 2, learning_rate = 0.002 }")
    assert (
        "best of 2 trials (trial 2, mean greedy eval 60.0 over seeds 7, where the settings it replaces score 50.0)"
        in block
    )
    adopted = {**cell, "settings": better[1]["settings"]}
    text, block = tune.study_markdown(study_with(base, worse, better), _config(tmp_path, adopted))
    assert block is None and "No settings line: the cell has these settings already." in text
    smoke = {**cell, "comparable": False}
    text, block = tune.study_markdown(study_with(base, worse, better), _config(tmp_path, smoke))
    assert block is None and "a smoke try (`--total-timesteps`)" in text


@pytest.mark.slow
def test_studies_go_to_an_untracked_folder_unless_told_and_a_smoke_study_is_its_own(
    files, tmp_path
):
    """Not into the committed benchmarks/results/tuning/ by default; --total-timesteps makes a study of its own."""
    _, config = tune.parse(argv(files, tmp_path / "study")[:-2])  # no --study-dir
    assert Path(config["study_dir"]) == tune.ROOT / "runs" / "tuning" / "tiny__a2c__CartPole-v1"
    assert (
        subprocess.run(
            ["git", "check-ignore", "-q", str(Path(config["study_dir"]) / "journal.log")], cwd=ROOT
        ).returncode
        == 0
    )
    _, smoke = tune.parse([*argv(files, tmp_path / "study")[:-2], "--total-timesteps", "500"])
    assert smoke["name"] == "tiny__a2c__CartPole-v1__steps500" and smoke["study_dir"].endswith(
        "tiny__a2c__CartPole-v1__steps500"
    )
    assert (
        smoke["cell"]["steps"] == 500
        and smoke["cell"]["comparable"] is False
        and smoke["cell"]["eval_every"] == 250
    )
    with pytest.raises(tune.BadInput, match="must be below the cell's budget"):
        tune.parse([*argv(files, tmp_path / "study"), "--total-timesteps", "2000"])


def test_help_says_where_a_study_goes(capsys):
    with pytest.raises(SystemExit):
        tune.parse(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "default runs/tuning/<suite>__<algo>__<env>, untracked" in out
        and "benchmarks/results/tuning/<name>" in out
    )


@pytest.mark.slow
def test_running_the_study_again_adds_no_trial_and_a_changed_one_is_refused(study, files, capsys):
    before = (study["dir"] / "journal.log").stat().st_size
    assert (
        tune.main(argv(files, study["dir"], "--trials", "3", "--seeds", "7", "--prune-after", "-1"))
        == 0
    )
    assert "3 trials so far, 0 to run" in capsys.readouterr().out
    assert len(load(study["dir"]).trials) == 4
    assert (study["dir"] / "journal.log").stat().st_size > before  # only the command was recorded
    assert tune.main(argv(files, study["dir"], "--trials", "3", "--seeds", "8")) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("tune: error: ")
        and "made with another seeds" in err
        and err.count("\n") == 1
    )


@pytest.mark.slow
def test_a_cell_that_took_the_best_settings_continues_its_study_and_another_cell_is_refused(
    study, files, tmp_path, capsys
):
    best = max(searched(load(study["dir"]).get_trials()), key=lambda t: t.value)
    adopted = tmp_path / "adopted.toml"  # the cell with the best trial's settings line pasted in
    adopted.write_text(
        TINY.replace(
            "settings = { num_envs = 4, eval_episodes = 2 }",
            tune.settings_line(best.user_attrs["settings"]),
        )
    )
    assert (
        tomllib.loads(adopted.read_text())["suites"]["tiny"]["cells"][0]["settings"]
        == best.user_attrs["settings"]
    )
    assert (
        tune.main(
            [
                *argv({**files, "suites": str(adopted)}, study["dir"]),
                "--trials",
                "3",
                "--seeds",
                "7",
            ]
        )
        == 0
    )
    assert "3 trials so far, 0 to run" in capsys.readouterr().out, (
        "the trial that drew these settings is their baseline"
    )
    assert (
        "No settings line: the cell has these settings already."
        in (study["dir"] / "STUDY.md").read_text()
    )
    changed = (
        tmp_path / "changed.toml"
    )  # a setting the space does not draw changes the trials' numbers
    changed.write_text(adopted.read_text().replace("eval_episodes = 2", "eval_episodes = 3"))
    assert (
        tune.main(
            [
                *argv({**files, "suites": str(changed)}, study["dir"]),
                "--trials",
                "3",
                "--seeds",
                "7",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.startswith("tune: error: ") and "made with another cell" in err and err.count("\n") == 1
    )


class _Folder:  # what eval_rows reads of a job.Job
    def __init__(self, folder: Path):
        self.dir = folder


def test_a_trial_below_the_median_is_pruned_at_an_evaluation(files, tmp_path):
    """An earlier trial that scored 1000 at every evaluation point: the new trial's first evaluation
    past the warmup (the first half of the first seed) is below that median, so it is pruned there."""
    study_dir = tmp_path / "study"
    _, config = tune.parse(
        argv(files, study_dir, "--trials", "2", "--seeds", "7", "8", "--prune-after", "1")
    )
    study_dir.mkdir()
    s = tune.open_study(config)
    steps = config["cell"]["steps"]
    per_seed = tune.points(tune.Cell(**config["cell"])) + 1
    s.add_trial(
        optuna.trial.create_trial(
            value=1000.0, intermediate_values={k: 1000.0 for k in range(2 * per_seed)}
        )
    )
    assert tune.work(config) == 1
    (t,) = [t for t in load(study_dir).get_trials() if t.number == 1]
    assert t.state == optuna.trial.TrialState.PRUNED
    (run_dir,) = (study_dir / "trials" / "0001" / "runs").iterdir()
    evals = tune.eval_rows(_Folder(run_dir))
    reported = sorted(t.intermediate_values)
    pruned_at = [step for step, _ in evals][len(reported) - 1]
    assert pruned_at >= steps // 2 and all(step < steps for step, _ in evals[: len(reported)]), (
        "pruned past the warmup, during the first seed"
    )
    assert t.user_attrs["pruned_at"] == f"seed 7, step {pruned_at:,}"
    assert t.intermediate_values == {
        step // config["cell"]["eval_every"]: value for step, value in evals[: len(reported)]
    }, "reported: the run's own evaluations from metrics.csv, keyed by their index in the run"
    assert [p.name.split("__")[2] for p in (study_dir / "trials" / "0001" / "runs").iterdir()] == [
        "s7"
    ], "seed 8 never ran"


@pytest.mark.slow
def test_trials_whose_rollouts_differ_in_size_report_their_evaluations_at_the_same_steps(
    files, tmp_path
):
    """4 envs x 5 steps evaluate at env steps 1,000 and 2,000; 4 envs x 16 steps at 1,024 and 2,048.
    Both report at the same Optuna steps (the evaluations' indices), where the pruner compares them."""
    study_dir = tmp_path / "study"
    _, config = tune.parse(
        argv(files, study_dir, "--trials", "2", "--seeds", "7", "--prune-after", "-1")
    )
    study_dir.mkdir()
    s = tune.open_study(config)
    for n_steps in ("5", "16"):
        s.enqueue_trial({"learning_rate": 1e-3, "n_steps": n_steps, "hidden_sizes": "[16]"})
    assert tune.work(config) == 2
    trials = load(study_dir).get_trials()
    steps = [
        [
            step
            for step, _ in tune.eval_rows(
                _Folder(next((study_dir / "trials" / f"{t.number:04d}" / "runs").iterdir()))
            )
        ]
        for t in trials
    ]
    assert [t.user_attrs["settings"]["n_steps"] for t in trials] == [5, 16]
    assert steps == [[1_000, 2_000], [1_024, 2_048]], "the runs evaluated at different env steps"
    assert sorted(trials[0].intermediate_values) == sorted(trials[1].intermediate_values) == [1, 2]


@pytest.mark.slow
def test_a_trial_stopped_by_slurm_is_failed_and_its_parameters_tried_again(files, tmp_path):
    study_dir = tmp_path / "study"
    _, config = tune.parse(argv(files, study_dir, "--trials", "1", "--seeds", "7"))
    study_dir.mkdir()
    s = tune.open_study(config)
    stopped = s.ask()  # a trial that was running when its worker was stopped
    stopped.suggest_float("learning_rate", 1e-4, 3e-3, log=True)
    stopped.suggest_categorical("n_steps", ["5", "16"])
    stopped.suggest_categorical("hidden_sizes", ["[16]", "[32, 32]"])
    assert tune.work(config, interrupted_trial=stopped.number) == 1, (
        "the stopped trial does not count: its retry is the one trial"
    )
    trials = load(study_dir).get_trials()
    assert len(trials) == 2
    assert trials[0].state == optuna.trial.TrialState.FAIL
    assert (
        trials[1].state == optuna.trial.TrialState.COMPLETE
        and Retry.retried_trial_number(trials[1]) == 0
    )
    assert trials[1].params == trials[0].params


@pytest.mark.slow
def test_a_trial_stopped_by_ctrl_c_or_sigterm_is_tried_again_by_the_next_command(files, tmp_path):
    study_dir = tmp_path / "study"
    _, config = tune.parse(argv(files, study_dir, "--trials", "1", "--seeds", "7"))
    study_dir.mkdir()
    s = tune.open_study(config)
    stopped = s.ask()  # what objective() leaves of a trial that a KeyboardInterrupt stopped
    stopped.suggest_float("learning_rate", 1e-4, 3e-3, log=True)
    stopped.suggest_categorical("n_steps", ["5", "16"])
    stopped.suggest_categorical("hidden_sizes", ["[16]", "[32, 32]"])
    stopped.set_user_attr("interrupted", True)
    s.tell(stopped, state=optuna.trial.TrialState.FAIL)
    assert tune.main(argv(files, study_dir, "--trials", "1", "--seeds", "7")) == 0
    trials = load(study_dir).get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL] + [
        optuna.trial.TrialState.COMPLETE
    ] * 2
    assert Retry.retried_trial_number(trials[1]) == 0 and trials[1].params == trials[0].params
    assert trials[2].user_attrs["baseline"], "then the cell's own settings"
    assert "| 0 | fail: stopped, retried |" in (study_dir / "STUDY.md").read_text()


LONG = TINY.replace("steps = 2_000", "steps = 500_000")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the runs' processes in /proc")
def test_sigterm_stops_the_study_its_workers_and_their_runs(tmp_path):
    """SIGTERM to tune.py alone (kill's default, a scheduler's stop) stops it as Ctrl-C does: it
    passes the signal on to its worker processes, which kill their trials' runs and fail the trials
    as interrupted; tune.py writes the table and exits 130, without a traceback."""
    (tmp_path / "suites.toml").write_text(LONG)
    (tmp_path / "space.toml").write_text(SPACE)
    study_dir = tmp_path / "study"
    cmd = [
        sys.executable,
        "benchmarks/tune.py",
        "--suite",
        "tiny",
        "--suites-file",
        str(tmp_path / "suites.toml"),
        "--algo",
        "a2c",
        "--env",
        "CartPole-v1",
        "--space",
        str(tmp_path / "space.toml"),
        "--study-dir",
        str(study_dir),
        "--trials",
        "2",
        "--seeds",
        "7",
        "--workers",
        "2",
    ]
    study = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.time() + 180
    while len(specs := list(study_dir.glob("trials/*/runs/*/spec.json"))) < 2 or not all(
        probes.pid_of_run(f) for f in specs
    ):
        assert time.time() < deadline and study.poll() is None, "the two trials' runs did not start"
        time.sleep(0.1)
    pids = [probes.pid_of_run(f) for f in specs]
    study.send_signal(signal.SIGTERM)
    out, _ = study.communicate(timeout=120)
    assert (
        study.returncode == 130
        and "interrupted: the trials in progress are recorded as failed" in out
    ), out
    assert "Traceback" not in out, out
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids), "a trial's run was left going"
    trials = load(study_dir).get_trials()
    assert [(t.state, t.user_attrs.get("interrupted")) for t in trials] == [
        (optuna.trial.TrialState.FAIL, True)
    ] * 2
    assert (study_dir / "STUDY.md").read_text().count("| fail: stopped |") == 2


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the run's process in /proc")
def test_a_trial_whose_run_a_signal_stopped_is_interrupted_not_failed(tmp_path):
    """SIGTERM to a trial's run alone (SLURM's scancel signals every process of a task): the run
    checkpoints and stops as preempted, which stops the study (130) with the trial marked
    interrupted, for the next command to try again, rather than failed for good."""
    (tmp_path / "suites.toml").write_text(LONG)
    (tmp_path / "space.toml").write_text(SPACE)
    study_dir = tmp_path / "study"
    cmd = [
        sys.executable,
        "benchmarks/tune.py",
        "--suite",
        "tiny",
        "--suites-file",
        str(tmp_path / "suites.toml"),
        "--algo",
        "a2c",
        "--env",
        "CartPole-v1",
        "--space",
        str(tmp_path / "space.toml"),
        "--study-dir",
        str(study_dir),
        "--trials",
        "2",
        "--seeds",
        "7",
    ]
    study = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.time() + 180
    while not (specs := list(study_dir.glob("trials/*/runs/*/spec.json"))) or not (
        pid := probes.pid_of_run(specs[0])
    ):
        assert time.time() < deadline and study.poll() is None, "the trial's run did not start"
        time.sleep(0.1)
    while not any(
        f.read_text().count("\n") > 1 for f in specs[0].parent.glob("*/metrics.csv")
    ):  # in its training loop
        assert time.time() < deadline and study.poll() is None, "the trial's run wrote no metrics"
        time.sleep(0.1)
    os.kill(pid, signal.SIGTERM)  # there it means: checkpoint at the next step boundary and stop
    out, _ = study.communicate(timeout=120)
    assert study.returncode == 130 and "Traceback" not in out, out
    (t,) = load(study_dir).get_trials()
    assert (
        t.state == optuna.trial.TrialState.FAIL
        and t.user_attrs.get("interrupted")
        and "error" not in t.user_attrs
    )
    assert (
        json.loads(next(study_dir.glob("trials/*/runs/*/result.json")).read_text())["status"]
        == "preempted"
    )


def test_trials_count_once_each_however_often_a_stopped_one_was_queued_again():
    """Two commands started at once may both queue a stopped trial again: the two runs of its
    parameters count as one trial towards --trials."""
    s = optuna.create_study()
    stopped = s.ask()
    stopped.suggest_float("x", 0.0, 1.0)
    stopped.set_user_attr("interrupted", True)
    s.tell(stopped, state=optuna.trial.TrialState.FAIL)
    stopped = s.get_trials(states=(optuna.trial.TrialState.FAIL,))
    assert tune.counted(s) == 1 and tune.retry(s, stopped) == [0] and tune.retry(s, stopped) == []
    assert tune.counted(s) == 0, "a stopped trial queued again counts when its retry runs"
    Retry()(
        s, s.trials[0]
    )  # the other command's, which read the trials before the first retry was queued
    s.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=3)
    assert [Retry.retried_trial_number(t) for t in s.trials] == [None, 0, 0, None]
    assert tune.counted(s) == 2


def test_built_in_spaces_draw_valid_arguments_of_each_script():
    for algo, space in tune.SPACES.items():
        tune.check_space(algo, space, algo)
        module = importlib.import_module(algo)
        study = optuna.create_study(
            sampler=optuna.samplers.RandomSampler(seed=0), direction="maximize"
        )
        for _ in range(20):
            trial = study.ask()
            values = tune.sample(trial, space)
            env = (
                "Pendulum-v1" if algo in ("ddpg", "naf") else "CartPole-v1"
            )  # validate() checks the env's action space first
            args = job.build_args(
                module,
                {
                    "settings": values,
                    "algo": algo,
                    "env": env,
                    "seed": 1,
                    "steps": 50_000,
                    "run_dir": "unused",
                    "eval_every": 0,
                },
            )
            if hasattr(
                module, "eval_episodes_for"
            ):  # ddpg, naf: train() resolves eval_episodes=0 first
                args = dataclasses.replace(
                    args, eval_episodes=args.eval_episodes or module.eval_episodes_for(env)
                )
            module.validate(args)  # the script's own checks (ValueError on a bad combination)
            assert tomllib.loads(tune.settings_line(values))["settings"] == values
            study.tell(trial, random.random())


@pytest.mark.parametrize("algo", ["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"])
def test_runs_get_one_torch_thread_unless_the_cell_names_it(algo):
    module = importlib.import_module(algo)
    spec = {
        "settings": {},
        "algo": algo,
        "env": "CartPole-v1",
        "seed": 1,
        "steps": 1_000,
        "run_dir": "unused",
        "eval_every": 0,
    }
    assert (
        job.build_args(module, spec).torch_threads == 1
    )  # whatever the script's default (ddpg, naf: 2)
    assert job.build_args(module, {**spec, "settings": {"torch_threads": 2}}).torch_threads == 2


def test_settings_line_is_toml_for_every_kind_of_value():
    values = {
        "learning_rate": 0.000123,
        "gamma": 0.99,
        "tiny": 1.5e-08,
        "buffer_size": 100_000,
        "n": 5,
        "flag": True,
        "off": False,
        "loss": "huber",
        "hidden_sizes": [64, 64],
    }
    assert tomllib.loads(tune.settings_line(values))["settings"] == values


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--algo", "nope"], "unknown algorithm 'nope' in suite tiny; its algorithms: a2c"),
        (
            ["--env", "Nope-v0"],
            "unknown env 'Nope-v0' for a2c in suite tiny; its envs there: CartPole-v1",
        ),
        (["--space", "EMPTY"], "the search space is empty"),
        (["--params"], "the search space is empty"),
        (["--params", "gamma"], "--params gamma: not in"),
        (["--trials", "0"], "--trials must be >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(files, tmp_path, capsys, extra, message):
    a = argv(
        files, tmp_path / "study", *[files["empty"] if x == "EMPTY" else x for x in extra]
    )  # argparse: the last one counts
    assert tune.main(a) == 2
    err = capsys.readouterr().err
    assert err.startswith("tune: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "study" / "journal.log").exists(), "nothing written"


def test_slurm_backend_without_slurm_is_one_line_and_exit_2(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun, no sbatch
    assert tune.main(argv(files, tmp_path / "study", "--trials", "1", "--backend", "slurm")) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("tune: error: --backend slurm: no SLURM on this machine")
        and err.count("\n") == 1
    ), err


def test_search_space_names_must_be_flags_of_the_script(files, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("not_a_flag = { choices = [1, 2] }\n")
    assert tune.main(argv(files, tmp_path / "study", "--space", str(bad))) == 2
    assert "'not_a_flag' is not a flag of algos/a2c.py" in capsys.readouterr().err


@pytest.mark.slow
def test_command_line_bad_input_exits_2_without_a_traceback(files):
    r = subprocess.run(
        [
            sys.executable,
            "benchmarks/tune.py",
            "--suite",
            "tiny",
            "--suites-file",
            files["suites"],
            "--algo",
            "ddpg",
            "--env",
            "CartPole-v1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        r.returncode == 2
        and r.stderr == "tune: error: unknown algorithm 'ddpg' in suite tiny; its algorithms: a2c\n"
    )


def test_argument_errors_are_one_line_too(files, tmp_path, capsys):
    for extra in (["--trials", "many"], ["--no-such-flag"]):
        with pytest.raises(SystemExit) as e:
            tune.main(argv(files, tmp_path / "study", *extra))
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("tune: error: ") and err.count("\n") == 1, err
