"""Tune one cell of a suite with Optuna: search the script's own flags for the best mean greedy evaluation.

A trial runs the cell once per seed of `--seeds` with `Args` drawn from the search space; its objective is
the mean final greedy evaluation, its evaluations go to Optuna's median pruner. Every worker shares the study
(<study-dir>/journal.log), and the same command continues it; the cell's current settings run first, as the
baseline a settings line must beat. Output: <study-dir>/STUDY.md. Details: benchmarks/README.md.
Exit status: 0 done; 1 no searched trial completed; 2 bad input (one line); 130 interrupted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import dataclasses
import gc
import importlib
import json
import multiprocessing
import shlex
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import (  # noqa: E402
    NO_SUBMITIT,
    BadInput,
    OneLineParser,
    add_slurm_flags,
    fail,
    flags_error,
    fmt_steps,
    md_row,
    no_slurm,
)
from job import Job, stop_on_signals  # noqa: E402
from provenance import code_state  # noqa: E402
from suite import BENCH, ROOT, SUITES_FILE, Cell, load_suite, metrics_file  # noqa: E402

try:  # optional (benchmarks/requirements-cluster.txt): main() says so in one line
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages import RetryHeartbeatStaleTrialCallback as Retry
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    warnings.filterwarnings(
        "ignore", category=optuna.exceptions.ExperimentalWarning
    )  # the retry callback's
except ImportError:
    optuna = None

# the built-in search spaces, in `--space FILE`'s format
SPACES = tomllib.loads((BENCH / "spaces.toml").read_text())
# the default: untracked (.gitignore's runs/); committed studies live in benchmarks/results/tuning/
STUDIES_DIR = ROOT / "runs" / "tuning"


class RunFailed(RuntimeError):
    """A seed's run did not finish ok (NaN stop, crash): the trial fails, the study goes on."""


def check_space(algo: str, space: dict, origin: str) -> dict:
    """The space, checked against the script's Args; BadInput names the first problem."""
    if not space:
        raise BadInput(f"the search space is empty ({origin} defines no parameter)")
    sys.path[:0] = [str(ROOT), str(ROOT / "algos")]
    fields = {f.name for f in dataclasses.fields(importlib.import_module(algo).Args)}
    for name, spec in space.items():
        if name not in fields:
            raise BadInput(
                f"{origin}: {name!r} is not a flag of algos/{algo}.py (its Args has no field {name})"
            )
        if not isinstance(spec, dict) or not (
            {"choices"} == set(spec)
            or {"low", "high"} <= set(spec) <= {"low", "high", "log", "step"}
        ):
            raise BadInput(
                f"{origin}: {name} needs {{choices = [...]}} or {{low = ..., high = ...}} (optional log, step), got {spec!r}"
            )
        if "choices" in spec:
            if not isinstance(spec["choices"], list) or not spec["choices"]:
                raise BadInput(f"{origin}: {name}: choices must be a non-empty list")
        elif not (
            isinstance(spec["low"], (int, float))
            and isinstance(spec["high"], (int, float))
            and spec["low"] < spec["high"]
        ):
            raise BadInput(
                f"{origin}: {name}: needs numbers low < high, got {spec['low']!r} and {spec['high']!r}"
            )
        elif spec.get("log") and spec["low"] <= 0:
            raise BadInput(f"{origin}: {name}: a log range needs low > 0, got {spec['low']}")
    return space


def load_space(algo: str, path: str | None, params: list[str] | None) -> dict:
    if path:
        try:
            space, origin = tomllib.loads(Path(path).read_bytes().decode()), path
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise BadInput(f"--space {path}: {e}") from None
    else:
        space, origin = dict(SPACES[algo]), f"the built-in space of {algo}"
    if params is not None:
        if unknown := sorted(set(params) - set(space)):
            raise BadInput(f"--params {' '.join(unknown)}: not in {origin} ({', '.join(space)})")
        space, origin = (
            {k: v for k, v in space.items() if k in params},
            f"{origin} with --params {' '.join(params) or '(none)'}",
        )
    return check_space(algo, space, origin)


def sample(trial, space: dict) -> dict:
    """The trial's values; floats rounded to 3 significant digits, so that the settings line is the run."""
    values = {}
    for name, spec in space.items():
        if "choices" in spec:  # Optuna's choices must be scalars: lists go as JSON
            values[name] = json.loads(
                trial.suggest_categorical(name, [json.dumps(c) for c in spec["choices"]])
            )
        elif isinstance(spec["low"], int) and isinstance(spec["high"], int):
            values[name] = trial.suggest_int(
                name,
                spec["low"],
                spec["high"],
                step=spec.get("step", 1),
                log=spec.get("log", False),
            )
        else:
            x = trial.suggest_float(
                name, spec["low"], spec["high"], log=spec.get("log", False), step=spec.get("step")
            )
            values[name] = float(f"{x:.3g}")
    return values


def toml_value(v) -> str:
    """A value as TOML writes it: JSON's, but for lists of any value and large ints (10_000)."""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(map(toml_value, v)) + "]"
    return f"{v:_}" if type(v) is int and abs(v) >= 10_000 else json.dumps(v)


def settings_line(settings: dict) -> str:
    return "settings = { " + ", ".join(f"{k} = {toml_value(v)}" for k, v in settings.items()) + " }"


def eval_rows(job: Job) -> list[tuple[int, float]]:
    """(global_step, eval_return) of the evaluations in the run's metrics.csv so far (whole lines only)."""
    path = metrics_file(job.dir)
    text = path.read_text(errors="ignore") if path else ""
    text = text[: text.rfind("\n") + 1]
    return [
        (int(r["global_step"]), float(r["eval_return"]))
        for r in csv.DictReader(text.splitlines())
        if r.get("eval_return")
    ]


def points(cell: Cell) -> int:
    """Evaluations per seed before the final one: one each time the run passes a multiple of eval_every."""
    return cell.steps // cell.eval_every if cell.eval_every else 0


def objective(trial, config: dict, state: dict) -> float:
    """Each seed of the trial in turn, its evaluations reported to Optuna as they come; the mean eval. A trial
    stopped by Ctrl-C or SIGTERM is failed by Optuna and marked `interrupted`, for the next command to retry."""
    try:
        return run_trial(trial, config, state)
    except KeyboardInterrupt:
        trial.set_user_attr("interrupted", True)
        # the process is stopping: our own line says so, not a traceback
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        raise


def run_trial(trial, config: dict, state: dict) -> float:
    baseline = bool(trial.user_attrs.get("baseline"))  # the cell's own settings, nothing drawn
    drawn = {} if baseline else sample(trial, config["space"])
    settings = {**config["cell"]["settings"], **drawn}
    trial.set_user_attr("settings", settings)
    cell = Cell(**{**config["cell"], "settings": settings})
    seeds = config["seeds"]
    per_seed = points(cell) + 1  # Optuna steps per seed: its evaluations and the final one
    at_point: dict[
        int, list[float]
    ] = {}  # an evaluation's point -> the returns there of the seeds so far
    evals: dict[str, float] = {}
    state["trial"] = trial.number
    for i, seed in enumerate(seeds):
        job = Job(f"{trial.number:04d}", cell, seed, Path(config["study_dir"]) / "trials")
        seen = 0
        t0 = time.time()
        try:
            # inside the try: a stop that comes while it starts still ends the run
            job.start(code_state(), fresh=True)
            state["proc"] = job.proc
            while True:
                ended = job.proc.poll() is not None
                rows = eval_rows(job)
                for step, value in rows[seen:]:
                    # the evaluation's index in its run (points(cell): the final one): the pruner compares trials
                    # there, never at the env step, which differs between trials whose rollouts differ in size
                    k = min(step // cell.eval_every, points(cell)) if cell.eval_every else 0
                    at_point.setdefault(k, []).append(value)
                    trial.report(statistics.fmean(at_point[k]), i * per_seed + k)
                    # the last seed's final evaluation is the objective itself
                    last = i == len(seeds) - 1 and step >= cell.steps
                    if not last and not baseline and trial.should_prune():
                        trial.set_user_attr("pruned_at", f"seed {seed}, step {step:,}")
                        print(
                            f"trial {trial.number} pruned at seed {seed}, step {step:,}", flush=True
                        )
                        raise optuna.TrialPruned(
                            f"seed {seed} at step {step:,}: {statistics.fmean(at_point[k]):.1f}"
                        )
                seen = len(rows)
                if ended:
                    break
                time.sleep(1.0)
        finally:
            # pruned, or the worker is being stopped: the run is not needed
            if job.proc is not None and job.proc.poll() is None:
                job.proc.kill()
                job.proc.wait()
            # None only on the way out with an exception
            result = job.finish() if job.proc is not None else None
            state["proc"] = None
        # the run was stopped by a signal (Ctrl-C, SLURM's scancel)
        if result["status"] in ("preempted", "interrupted"):
            raise KeyboardInterrupt(
                f"trial {trial.number} seed {seed}: the run was {result['status']}"
            )
        if result["status"] != "ok":
            trial.set_user_attr("error", f"seed {seed}: {result.get('error')}")
            raise RunFailed(
                f"trial {trial.number} seed {seed}: {result.get('error')} (log: {job.dir / 'log.txt'})"
            )
        evals[str(seed)] = result["summary"]["eval_return_mean"]
        trial.set_user_attr("evals", evals)
        print(
            f"trial {trial.number} seed {seed}: eval {evals[str(seed)]:.2f} ({time.time() - t0:.0f} s)",
            flush=True,
        )
    print(f"trial {trial.number}: objective {statistics.fmean(evals.values()):.2f}", flush=True)
    return statistics.fmean(evals.values())


def open_study(config: dict, worker: int = 0):
    """The study in the config's journal file, with the median pruner and the TPE sampler, seeded per worker
    and past the trials the study holds (a continued study draws anew)."""
    storage = JournalStorage(JournalFileBackend(str(Path(config["study_dir"]) / "journal.log")))
    pruner = optuna.pruners.NopPruner()
    if config["prune_after"] >= 0:
        warmup = points(Cell(**config["cell"])) // 2  # the first half of the first seed
        pruner = optuna.pruners.MedianPruner(
            n_startup_trials=config["prune_after"], n_warmup_steps=warmup
        )
    study = optuna.create_study(
        study_name=config["name"],
        storage=storage,
        pruner=pruner,
        direction="maximize",
        load_if_exists=True,
    )
    seed = config["sampler_seed"] + 1000 * worker + len(study.get_trials(deepcopy=False))
    study.sampler = optuna.samplers.TPESampler(n_startup_trials=5, seed=seed)
    return study


def retried(trials) -> set[int]:
    """The trials stopped and queued again: Optuna's retry history (older studies: the user attr `retry_of`)."""
    return {n for t in trials for n in Retry.retry_history(t)} | {
        t.user_attrs.get("retry_of") for t in trials
    }


def counted(study) -> int:
    """Trials towards --trials: every trial begun, but not one stopped and queued again (its retry counts, once
    however often queued), nor the baseline."""
    trials = study.get_trials(deepcopy=False)
    again = retried(trials)
    return len(
        {
            t.system_attrs.get("failed_trial", t.user_attrs.get("retry_of", t.number))
            for t in trials
            if t.state != TrialState.WAITING
            and t.number not in again
            and not t.user_attrs.get("baseline")
        }
    )


def to_run(study, trials: int) -> int:
    """Trials still to run: up to `trials` counted ones, and a queued baseline besides."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    return max(trials - counted(study), 0) + any(t.user_attrs.get("baseline") for t in waiting)


def retry(study, trials) -> list[int]:
    """Queue the stopped `trials` again with Optuna's retry callback, but not one queued again already; their
    numbers. Of the user attrs a retry keeps what makes a baseline, and writes its own."""
    again = retried(study.get_trials(deepcopy=False))
    stopped = [copy.copy(t) for t in trials if t.number not in again]
    for t in stopped:
        t.user_attrs = {
            k: t.user_attrs[k] for k in ("baseline", "settings") if t.user_attrs.get("baseline")
        }
        Retry()(study, t)
    return [t.number for t in stopped]


def baseline_trial(study, settings: dict):
    """The trial that scored the cell's current `settings` as they are: a completed one (a trial whose
    drawn values the cell took counts too), else the latest one queued or run for them; None if none."""
    same = json.dumps(settings, sort_keys=True)  # lists and tuples alike, as stored
    found = [
        t
        for t in study.get_trials(deepcopy=False)
        if json.dumps(t.user_attrs.get("settings"), sort_keys=True) == same
    ]
    found = [t for t in found if t.state == TrialState.COMPLETE] or [
        t for t in found if t.user_attrs.get("baseline")
    ]
    return found[-1] if found else None


def work(
    config: dict, worker: int = 0, state: dict | None = None, interrupted_trial: int | None = None
) -> int:
    """One worker: trials one at a time until none is left to run (every worker's count); first, a trial its
    SLURM task was stopped in is failed and queued again. The number of trials it ran."""
    state = {} if state is None else state
    # our own lines per seed and trial; failures still show
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = open_study(config, worker)
    stopped = [t for t in study.get_trials(deepcopy=False) if t.number == interrupted_trial]
    if stopped and stopped[0].state == TrialState.RUNNING:
        study.tell(interrupted_trial, state=TrialState.FAIL)
        retry(study, stopped)
    ran = 0
    while to_run(study, config["trials"]):
        study.optimize(lambda t: objective(t, config, state), n_trials=1, catch=(RunFailed,))
        ran += 1
    return ran


def _work_process(config: dict, worker: int) -> None:  # a local worker process
    with (
        stop_on_signals(),
        contextlib.suppress(KeyboardInterrupt),
    ):  # SIGTERM (from anyone): the trial fails
        work(config, worker)


def one_decimal(x) -> str:
    """A score or minutes as the table shows them: one decimal, "-" for none (or NaN)."""
    return "-" if x is None or x != x else f"{x:.1f}"  # x != x: NaN


def study_markdown(study, config: dict) -> tuple[str, str | None]:
    """STUDY.md's text, and the best trial's settings block (None without a completed trial)."""
    trials = study.get_trials(deepcopy=False)
    table = trials_lines(trials, config["seeds"], config["space"])
    best_lines, block = best_trial_lines(study, config, trials)
    return "\n".join([*setup_lines(study, config), *table, *best_lines]), block


def setup_lines(study, config: dict) -> list[str]:
    """The heading and what the study does: objective, pruning, search space, the cell's settings, commands."""
    cell = config["cell"]
    threshold = ""
    if cell.get("threshold") is not None:
        threshold = (
            f"; the cell's threshold: {cell['threshold']:g} ({cell['pass_rule']} of the suite's seeds "
            f"{cell['seeds']})"
        )
    pruning = "none"
    if config["prune_after"] >= 0:
        pruning = (
            f"Optuna's median rule on the evaluations every {cell['eval_every']:,} steps (the mean over the seeds "
            f"run so far at each point), after {config['prune_after']} finished trials and from step "
            f"{cell['steps'] // 2:,} of the first seed"
        )
    space = "; ".join(
        f"`{name}` in {toml_value(spec['choices'])}"
        if "choices" in spec
        else f"`{name}` from {spec['low']:g} to {spec['high']:g}{' (log)' if spec.get('log') else ''}"
        for name, spec in config["space"].items()
    )
    return [
        f"# Tuning study: `{cell['algo']}` on `{cell['env']}` (suite `{config['suite']}`)",
        "",
        f"- **Objective**: the mean over seeds {', '.join(map(str, config['seeds']))} of the final greedy "
        f"evaluation (eval_return_mean: {cell['settings'].get('eval_episodes', 10)} episodes), each seed "
        f"trained for the cell's {fmt_steps(cell['steps'])} env steps with the cell's settings and the "
        f"trial's values{threshold}.",
        f"- **Pruning**: {pruning}; sampler: TPE.",
        f"- **Search space**: {space}.",
        f"- **Cell's settings** (kept unless searched): `{settings_line(cell['settings'])}`",
        f"- **Commands** ({', '.join(study.user_attrs.get('dates', []))}):",
        "",
        *[f"  `{command}`" for command in study.user_attrs.get("commands", [])],
        "",
    ]


def trials_lines(trials, seeds: list[int], space: dict) -> list[str]:
    """How many trials ended how, when they ran and for how long; then a row for each, in table_order."""
    count = Counter(t.state for t in trials)
    unfinished = count[TrialState.RUNNING] + count[TrialState.WAITING]
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    when = ""
    if starts and ends:
        when = f"started {min(starts):%Y-%m-%d %H:%M}, last finished {max(ends):%Y-%m-%d %H:%M}; "
    minutes = sum(t.duration.total_seconds() for t in trials if t.duration) / 60
    header = [
        "trial",
        "state",
        "objective",
        *[f"seed {s}" for s in seeds],
        "pruned at",
        "min",
        *space,
    ]
    again = retried(trials)
    return [
        f"- **Trials**: {len(trials)} ({count[TrialState.COMPLETE]} complete, {count[TrialState.PRUNED]} "
        f"pruned, {count[TrialState.FAIL]} failed, {unfinished} unfinished); {when}{minutes:.1f} min of trial "
        "time in all.",
        "",
        md_row(header),
        "|" + "---|" * len(header),
        *[trial_row(t, seeds, space, again) for t in sorted(trials, key=table_order)],
        "",
    ]


def table_order(trial) -> tuple:
    """Completed trials first, best first; then the pruned; then the rest; each by number."""
    rank = {TrialState.COMPLETE: 0, TrialState.PRUNED: 1}.get(trial.state, 2)
    return (rank, -trial.value if trial.state == TrialState.COMPLETE else 0, trial.number)


def trial_row(trial, seeds: list[int], space: dict, retried_numbers: set[int]) -> str:
    """The trial's row: its state (why a failed one failed, a pruned one's last value), scores and values."""
    state = trial.state.name.lower()
    if trial.state == TrialState.FAIL:
        stopped = "stopped, retried" if trial.number in retried_numbers else "stopped"
        state += ": " + (trial.user_attrs.get("error") or stopped)
    elif trial.state == TrialState.PRUNED:
        state += f" (at {one_decimal(trial.intermediate_values.get(trial.last_step))})"
    evals = trial.user_attrs.get("evals", {})
    settings = trial.user_attrs.get("settings", {})
    return md_row(
        [
            f"{trial.number} (the cell's settings)"
            if trial.user_attrs.get("baseline")
            else trial.number,
            state.replace("|", "\\|"),
            one_decimal(trial.value if trial.state == TrialState.COMPLETE else None),
            *[one_decimal(evals.get(str(s))) for s in seeds],
            trial.user_attrs.get("pruned_at", "-"),
            one_decimal(trial.duration.total_seconds() / 60 if trial.duration else None),
            *[toml_value(settings[name]) if name in settings else "-" for name in space],
        ]
    )


def best_trial_lines(study, config: dict, trials) -> tuple[list[str], str | None]:
    """The best searched trial (its score on each seed, against the cell's threshold and current settings), and
    its settings block where it beats them, else a line that says why there is none."""
    searched = [
        t for t in trials if t.state == TrialState.COMPLETE and not t.user_attrs.get("baseline")
    ]
    if not searched:
        return ["No searched trial has completed yet.", ""], None
    cell = config["cell"]
    best = max(searched, key=lambda t: t.value)
    base = baseline_trial(study, cell["settings"])
    scores = ", ".join(
        f"{s}: {one_decimal(best.user_attrs['evals'].get(str(s)))}" for s in config["seeds"]
    )
    threshold = ""
    if cell.get("threshold") is not None:
        verdict = "reaches" if best.value >= cell["threshold"] else "stays below"
        threshold = (
            f" On these tuning seeds it {verdict} the cell's threshold {cell['threshold']:g}; the suite's own "
            f"runs (seeds {cell['seeds']}) decide the cell's verdict."
        )
    lines = [
        f"**Best: trial {best.number}**, objective {best.value:.1f} (seeds: {scores}).{threshold}",
        "",
    ]
    if base is not None and base.state == TrialState.COMPLETE:
        lines += [
            f"The cell's current settings (trial {base.number}) score {base.value:.1f} on the same seeds.",
            "",
        ]
    if reason := why_no_settings_line(cell, best, base):
        return [*lines, f"No settings line: {reason}", ""], None
    table = Path(config["study_dir"]).resolve() / "STUDY.md"
    where = table.relative_to(ROOT).as_posix() if table.is_relative_to(ROOT) else str(table)
    source = (
        f"{where}: best of {counted(study)} trials (trial {best.number}, mean greedy eval {best.value:.1f} over "
        f"seeds {', '.join(map(str, config['seeds']))}, where the settings it replaces score {base.value:.1f})"
    )
    block = f'{settings_line(best.user_attrs["settings"])}\nsettings_source = "{source}"'
    return [
        *lines,
        "Its settings, to paste into the cell in `benchmarks/suites.toml` (replacing `settings` and "
        "`settings_source`; the new settings give the cell new run folders):",
        "",
        "```toml",
        block,
        "```",
        "",
    ], block


def why_no_settings_line(cell: dict, best, base) -> str | None:
    """Why the best trial's settings are not offered to the cell; None where they beat the cell's own."""
    if not cell.get("comparable", True):
        return (
            f"the trials ran {fmt_steps(cell['steps'])} env steps, a smoke try (`--total-timesteps`), not the "
            "cell's budget."
        )
    if base is None or base.state != TrialState.COMPLETE:
        return (
            "the cell's current settings have no score on these seeds yet (the next tune.py command on this "
            "study runs them first)."
        )
    if best.number == base.number:
        return "the cell has these settings already."
    if best.value <= base.value:
        return f"no trial scores above the cell's current settings ({base.value:.1f})."
    return None


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog="benchmarks/tune.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--suite", required=True, help="suite holding the cell (classic, continuous, ...)"
    )
    p.add_argument("--algo", required=True, help="the cell's algorithm")
    p.add_argument("--env", required=True, help="the cell's env id")
    p.add_argument(
        "--trials",
        type=int,
        default=20,
        help="trials in the study in all, over every worker and earlier commands (default 20)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[1001, 1002, 1003],
        help="seeds of each trial (default 1001 1002 1003)",
    )
    p.add_argument(
        "--workers", type=int, default=1, help="trials at a time: local processes, or SLURM tasks"
    )
    p.add_argument(
        "--backend",
        choices=("local", "slurm"),
        default="local",
        help="local processes, or a SLURM job array through submitit",
    )
    p.add_argument(
        "--space",
        help="TOML file: the search space (name = {low = .., high = .., log = true} or {choices = [..]}) "
        "instead of the built-in one",
    )
    p.add_argument("--params", nargs="*", help="search only these parameters of the space")
    p.add_argument(
        "--prune-after",
        type=int,
        default=5,
        help="finished trials before pruning starts (-1: never prune; default 5)",
    )
    p.add_argument(
        "--sampler-seed",
        type=int,
        default=0,
        help="seed of the TPE sampler (worker w: seed + 1000 w)",
    )
    p.add_argument(
        "--study-dir",
        help="storage, table and trial runs (default runs/tuning/<suite>__<algo>__<env>, untracked: "
        "give benchmarks/results/tuning/<name> for a study to commit)",
    )
    p.add_argument(
        "--total-timesteps",
        type=int,
        metavar="N",
        help="smoke try: each seed trains N env steps instead of the cell's budget (must be smaller); its own "
        "study, runs marked not comparable, no settings line",
    )
    p.add_argument("--suites-file", default=str(SUITES_FILE), help=argparse.SUPPRESS)
    add_slurm_flags(p)
    return p


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, dict]:
    """The flags, and the study's config; BadInput names the first problem."""
    a = build_parser().parse_args(argv)
    return a, study_config(a, checked_cell(a))


def checked_cell(a: argparse.Namespace) -> Cell:
    """The suite's cell of --algo and --env, once the flags are checked; BadInput names what is wrong."""
    if len(set(a.seeds)) != len(a.seeds):
        raise BadInput(f"--seeds has repeats: {a.seeds}")
    if error := flags_error(a, trials=1, workers=1, total_timesteps=1):
        raise BadInput(error)
    try:
        suite = load_suite(a.suite, a.suites_file)
    except (
        OSError,
        SystemExit,
    ) as e:  # a missing file, an unknown suite or a bad cell: suite.py's words
        raise BadInput(str(e)) from None
    algos = sorted({c.algo for c in suite.cells})
    if a.algo not in algos:
        raise BadInput(
            f"unknown algorithm {a.algo!r} in suite {a.suite}; its algorithms: {', '.join(algos)}"
        )
    if a.algo not in SPACES and not a.space:
        raise BadInput(f"no built-in search space for {a.algo}; give one with --space FILE")
    cell = next((c for c in suite.cells if c.algo == a.algo and c.env == a.env), None)
    if cell is None:
        envs = [c.env for c in suite.cells if c.algo == a.algo]
        raise BadInput(
            f"unknown env {a.env!r} for {a.algo} in suite {a.suite}; its envs there: {', '.join(envs)}"
        )
    return cell


def study_config(a: argparse.Namespace, cell: Cell) -> dict:
    """What every worker needs: the study's name and folder, its cell (on the budget of --total-timesteps
    for a smoke try), the checked search space, seeds and trials, pruning and sampler."""
    space = load_space(a.algo, a.space, a.params)
    name = f"{a.suite}__{cell.slug}"
    if a.total_timesteps:
        if a.total_timesteps >= cell.steps:
            raise BadInput(
                f"--total-timesteps {a.total_timesteps:,} must be below the cell's budget ({cell.steps:,})"
            )
        cell = cell.with_budget(a.total_timesteps)
        name = f"{name}__steps{a.total_timesteps}"
    return {
        "name": name,
        "suite": a.suite,
        "cell": dataclasses.asdict(cell),
        "space": space,
        "seeds": a.seeds,
        "trials": a.trials,
        "prune_after": a.prune_after,
        "sampler_seed": a.sampler_seed,
        "study_dir": str(Path(a.study_dir or STUDIES_DIR / name)),
    }


def unsearched(config: dict) -> dict:
    """A study's config without the cell's settings the space draws (every trial overrides them): a cell that
    took a study's best settings can continue it."""
    cell = config.get("cell", {})
    settings = {
        k: v for k, v in cell.get("settings", {}).items() if k not in config.get("space", {})
    }
    return {**config, "cell": {**cell, "settings": settings}}


def run_workers(a: argparse.Namespace, config: dict, todo: int) -> int | None:
    """The study's trials: in this process, in local worker processes, or in SLURM tasks; 2 without submitit."""
    if todo > 0 and a.backend == "slurm":
        try:
            import cluster
        except ImportError as e:
            return fail("tune", NO_SUBMITIT.format(e))
        if problem := no_slurm(a.submitit_cluster):
            return fail("tune", problem)
        executor = cluster.make_executor(
            a,
            Path(a.submitit_dir or Path(config["study_dir"]) / "submitit"),
            f"tune-{config['name']}",
            a.workers,
        )
        import tune  # this module by its name: a task unpickles tune.work, where __main__.work would not resolve

        tasks = [cluster.StudyTask(tune.work, config, w) for w in range(min(a.workers, todo))]
        jobs = (
            executor.submit_array(tasks)
            if a.submitit_cluster == "slurm"
            else [executor.submit(t) for t in tasks]
        )
        print(
            f"submitted {len(jobs)} workers ({jobs[0].job_id.split('_')[0]}); submitit files: {executor.folder}",
            flush=True,
        )
        cluster.wait_for(jobs, poll=5.0 if a.submitit_cluster == "slurm" else 0.5)
        jobs.clear()
        gc.collect()  # submitit's jobs sit in reference cycles: collected now, not at interpreter exit, where their __del__ fails
    elif todo > 0 and a.workers == 1:
        work(config)
    elif todo > 0:
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(target=_work_process, args=(config, w)) for w in range(min(a.workers, todo))
        ]
        try:
            for proc in procs:
                proc.start()
            for proc in procs:
                proc.join()
        finally:  # stopped: Ctrl-C reaches the workers too, SIGTERM only this process: pass it on (ended ones ignore it)
            started = [proc for proc in procs if proc.pid is not None]
            for proc in started:
                proc.terminate()
            for proc in started:
                proc.join()
    return None


def check_same_study(study, config: dict) -> None:
    """A new study records what its trials' numbers depend on; a study continued must have the same (BadInput
    names what changed)."""
    same = {
        "cell": {k: config["cell"][k] for k in ("algo", "env", "steps", "settings", "eval_every")},
        "space": config["space"],
        "seeds": config["seeds"],
    }
    made = study.user_attrs.get("config")
    if made is None:
        study.set_user_attr("config", same)
    elif unsearched(made) != (now := unsearched(json.loads(json.dumps(same)))):
        changed = [k for k in now if now[k] != unsearched(made).get(k)]
        raise BadInput(
            f"the study in {config['study_dir']} was made with another {', '.join(changed)}; "
            "give a new --study-dir, or the same flags and cell as before"
        )


def write_study_md(study, config: dict) -> None:
    """Write STUDY.md; print the settings line for the cell, or why there is none."""
    path = Path(config["study_dir"]) / "STUDY.md"
    text, block = study_markdown(study, config)
    path.write_text(text)
    print(f"\nwrote {path}")
    no_line = next((x for x in text.splitlines() if x.startswith("No ")), "")
    print("settings for the cell in suites.toml:\n" + block if block else no_line)


def main(argv: list[str] | None = None) -> int:
    try:
        a, config = parse(argv)
        if optuna is None:
            raise BadInput(
                "tune.py needs optuna: pip install -r benchmarks/requirements-cluster.txt"
            )
        study_dir = Path(config["study_dir"])
        study_dir.mkdir(parents=True, exist_ok=True)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own line per seed and per trial
        study = open_study(config)
        check_same_study(study, config)
    except BadInput as e:
        return fail("tune", e)

    command = "python benchmarks/tune.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    study.set_user_attr("commands", [*study.user_attrs.get("commands", []), command])
    study.set_user_attr(
        "dates", sorted({*study.user_attrs.get("dates", []), time.strftime("%Y-%m-%d")})
    )
    stopped = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    again = retry(study, [t for t in stopped if t.user_attrs.get("interrupted")])
    # a trial of the cell's settings, unless run, queued, running or stopped (then retry queues them)
    t = baseline_trial(study, config["cell"]["settings"])
    if baseline := t is None or (
        t.state == TrialState.FAIL and not t.user_attrs.get("interrupted")
    ):
        study.enqueue_trial(
            {}, user_attrs={"baseline": True, "settings": config["cell"]["settings"]}
        )
    todo = to_run(study, config["trials"])
    plan = (
        f"study {config['name']} in {study_dir}: {counted(study)} trials so far, {todo} to run with "
        f"{a.workers} worker(s); each: {len(config['seeds'])} seeds x {config['cell']['steps']:,} steps; "
        f"searching {', '.join(config['space'])}"
    )
    if baseline:
        plan += "; first the cell's own settings, the baseline a settings line must beat"
    if again:
        plan += f"; trying again the parameters of trial(s) {', '.join(map(str, again))}, stopped before"
    print(plan, flush=True)
    with stop_on_signals():  # SIGTERM stops the study as Ctrl-C does
        try:
            if (status := run_workers(a, config, todo)) is not None:
                return status
        except KeyboardInterrupt:
            print(
                "\ninterrupted: the trials in progress are recorded as failed; the same command tries their parameters "
                "again and continues the study",
                flush=True,
            )
            status = 130
        write_study_md(study, config)  # within: a second stop leaves no half-written table
        completed = any(
            t.state == TrialState.COMPLETE and not t.user_attrs.get("baseline")
            for t in study.get_trials(deepcopy=False)
        )
    return status if status is not None else 0 if completed else 1


if __name__ == "__main__":
    sys.exit(main())
