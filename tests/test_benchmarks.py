"""Benchmark runner, report and suites: a tiny suite run end to end (seconds), resume, failures."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import operator
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import job  # noqa: E402
import provenance  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import selection  # noqa: E402
import speed  # noqa: E402
from machine import machine as this_machine  # noqa: E402
from suite import Cell, load_references, load_suite, load_suites, script_path  # noqa: E402

TINY = """
[suites.tiny]
description = "test suite"
seeds = [1, 2]
eval_points = 2

[[suites.tiny.cells]]
algo = "dqn"
env = "CartPole-v1"
steps = 300
settings = { learning_starts = 100, buffer_size = 300, batch_size = 16, train_every = 4, hidden_sizes = [16] }
threshold = 10.0
pass_rule = "all"
pass_rule_source = "a published result that asks the threshold of every seed (test)"
references = ["cleanrl-dqn-cartpole"]

[[suites.tiny.cells]]
algo = "dqn"
env = "Acrobot-v1"
steps = 300
seeds = [1]
settings = { batch_size = 0 }
threshold = -100.0
note = "the batch size is zero on purpose"

[[suites.tiny.cells]]
algo = "no_such_algo"
env = "CartPole-v1"
steps = 300
seeds = [1]
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny suite run once (2 workers): 2 good runs, 1 failing run, 1 missing script."""
    base = tmp_path_factory.mktemp("bench")
    suites = base / "suites.toml"
    suites.write_text(TINY)
    results = base / "results"
    common = ["--suite", "tiny", "--suites-file", str(suites), "--results-dir", str(results)]
    rc = run.main([*common, "--workers", "2", "--status-every", "1"])
    return {"common": common, "results": results, "rc": rc, "runs": results / "tiny" / "runs"}


@pytest.fixture
def current(monkeypatch):
    """The runs just made count as current, whatever the state of the working tree they ran in
    (the rules for stale runs: tests/test_report.py)."""
    monkeypatch.setattr(
        report.Checker, "freshness", lambda self, state, algo, key: provenance.Freshness(True, "")
    )


@pytest.mark.slow
def test_runner_runs_each_seed_in_its_folder(tiny):
    ok = sorted(tiny["runs"].glob("dqn__CartPole-v1__s*"))
    assert [p.name.split("__")[2] for p in ok] == ["s1", "s2"]
    for p in ok:
        result = json.loads((p / "result.json").read_text())
        assert result["status"] == "ok", result.get("error")
        assert result["summary"]["completed"] and result["summary"]["total_timesteps"] == 300
        assert (p / "log.txt").stat().st_size > 0
        assert list(p.glob("*/metrics.csv")), "the script's run folder lives inside the runner's"
        assert result["machine"]["versions"]["torch"]
        machine = result["summary"][
            "machine"
        ]  # where the run's floats were made (benchmarks/machine.py, through job.py)
        assert machine["torch_threads"] == 1 and machine["kind"] == result["machine"]["kind"]
        assert machine["vendor"] and machine["cpu"] and machine["capability"] and "blas" in machine
        code = (
            provenance.code_state()
        )  # what the runs recorded of the code: the commit and the dirty flag, explicitly
        assert result["commit"] == code["commit"] and len(result["commit"]) == 40
        assert result["dirty"] is code["dirty"] and result["dirty_files"] == code["dirty_files"]
        assert result["comparable"] is True


@pytest.mark.slow
def test_failing_run_is_recorded_and_reported_not_swallowed(tiny):
    assert tiny["rc"] == 1, "a failed run must make the runner exit non-zero"
    (bad,) = tiny["runs"].glob("dqn__Acrobot-v1__s1__*")
    result = json.loads((bad / "result.json").read_text())
    assert result["status"] == "failed"
    assert (
        "batch-size must be positive" in result["error"]
        and "Traceback (most recent call last)" in result["traceback"]
    )


@pytest.mark.slow
def test_resume_runs_nothing_the_second_time(tiny, capsys):
    before = {p: p.stat().st_mtime for p in tiny["runs"].glob("*/result.json")}
    rc = run.main([*tiny["common"], "--workers", "2"])
    out = capsys.readouterr().out
    suites, results = tiny["common"][3], tiny["common"][5]
    assert (
        f"report: python benchmarks/report.py --suite tiny --suites-file {suites} --results-dir {results}"
        in out
    ), "the closing hint keeps the flags the runner was given"
    assert "0 to run" in out and "start " not in out
    assert "2 already ok" in out and "1 failed before" in out and "script missing" in out
    assert rc == 1, "known failures are still reported on resume"
    assert {p: p.stat().st_mtime for p in tiny["runs"].glob("*/result.json")} == before


@pytest.mark.slow
def test_report_has_table_verdicts_and_plot(tiny, current):
    assert (
        report.main(
            [
                "--suite",
                "tiny",
                "--suites-file",
                str(tiny["common"][3]),
                "--results-dir",
                str(tiny["results"]),
            ]
        )
        == 0
    )
    text = (tiny["results"] / "tiny" / "REPORT.md").read_text()
    assert (
        "| algo | env | steps | seeds ok | eval: mean [95% CI] | train (last 10) | steps/s | wall/run | threshold "
        "| least margin | references | verdict |" in text
    ), "a suite with a rule-all cell shows each cell's least margin"
    row = next(x for x in text.splitlines() if x.startswith("| dqn | CartPole-v1 |"))
    assert "| 2/2 |" in row and "488.69 ± 16.11" in row
    assert (
        "**partial**: 2 seeds; a verdict needs 5 finished seeds" in row or "below threshold" in row
    ), row
    assert re.search(
        r"\| \d+\.\d \[\d+\.\d, \d+\.\d\]<br>std \d+\.\d<br>\d/2 seeds ≥ 10 \|", row
    ), "eval: mean [CI], the std, and how many seeds reach the threshold"
    assert "every seed must reach it, as in a published result" in text, (
        "an 'all' cell names its source"
    )
    assert re.search(r"\| 10 \(all\) \| [+-]\d+\.\d \([+-]\d+\.\d%\) \|", row), (
        "its worst seed against 10"
    )
    bad = next(x for x in text.splitlines() if x.startswith("| dqn | Acrobot-v1 |"))
    assert "**FAIL**" in bad and "crashed" in bad and "batch-size must be positive" in bad
    assert "Why: the batch size is zero on purpose" in bad, "a cell's note is shown beside its FAIL"
    assert not any(x.startswith("| no_such_algo |") for x in text.splitlines()), (
        "a cell without runs is listed only when selected"
    )
    assert "Not listed: 1 cell without runs (no_such_algo CartPole-v1)" in text
    assert "## Failures" in text and "## Machine and versions" in text and "torch 2" in text
    kind = this_machine()["kind"]
    assert "- Runs from 1 machine kind (" in text and f"  - M1: {kind} (" in text, (
        "the report names its machine kinds"
    )
    assert re.search(r"^\| dqn \| CartPole-v1 \| 1 \| ok \|.*\| M1 \|", text, re.M), (
        "each run's row names its machine"
    )
    assert "python algos/dqn.py --env CartPole-v1 --seed 1 --total-timesteps 300" in text
    png = tiny["results"] / "tiny" / "plots" / "dqn__CartPole-v1.png"
    try:  # plotting is a benchmarks-only dependency: the core install (requirements.txt) has no matplotlib
        import matplotlib  # noqa: F401
    except ImportError:
        assert not png.exists()
        return
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plots/dqn__CartPole-v1.png" in text


@pytest.mark.slow
def test_a_cell_without_runs_is_listed_when_selected(tiny, tmp_path, current):
    results = tmp_path / "results"
    shutil.copytree(tiny["results"], results)
    assert (
        report.main(
            [
                "--suite",
                "tiny",
                "--suites-file",
                tiny["common"][3],
                "--results-dir",
                str(results),
                "--no-plots",
                "--algos",
                "no_such_algo",
            ]
        )
        == 0
    )
    text = (results / "tiny" / "REPORT.md").read_text()
    table = text.split("| algo | env | steps |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert (
        len(table) == 1
        and table[0].startswith("| no_such_algo | CartPole-v1 |")
        and "**FAIL**: script missing" in table[0]
    )
    assert (
        "**1 of the suite's 3 cells: 0 PASS, 1 FAIL" in text
        and f"--suite tiny --algos no_such_algo --results-dir {results}` from" in text
    )


@pytest.mark.slow
def test_a_note_shows_beside_a_cell_without_threshold(tiny, tmp_path, current):
    """A cell with no threshold gets no verdict, but its note (say, where earlier seeds are) is shown."""
    suites = tmp_path / "suites.toml"
    rule = 'threshold = 10.0\npass_rule = "all"\npass_rule_source = "a published result that asks the threshold of every seed (test)"\n'
    assert rule in TINY
    suites.write_text(
        TINY.replace(rule, 'note = "seeds 3-4 were run by hand"\n')
    )  # verdict fields only: the same runs count
    results = tmp_path / "results"
    shutil.copytree(tiny["results"], results)
    assert (
        report.main(
            ["--suite", "tiny", "--suites-file", str(suites), "--results-dir", str(results)]
        )
        == 0
    )
    row = next(
        x
        for x in (results / "tiny" / "REPORT.md").read_text().splitlines()
        if x.startswith("| dqn | CartPole-v1 |")
    )
    assert (
        "| 2/2 |" in row and "**n/a**" in row and row.endswith("Note: seeds 3-4 were run by hand |")
    ), row


@pytest.mark.slow
def test_a_smoke_try_is_not_comparable_and_never_counts(tiny, tmp_path, capsys, current):
    """--total-timesteps shrinks the budget: the runs get folders of their own, record that they are
    not comparable, and the report ignores them; a budget not below the cell's is refused."""
    results = tmp_path / "results"
    argv = [
        "--suite",
        "tiny",
        "--suites-file",
        tiny["common"][3],
        "--results-dir",
        str(results),
        "--algos",
        "dqn",
        "--envs",
        "CartPole-v1",
        "--seeds",
        "1",
    ]
    assert run.main([*argv, "--total-timesteps", "300"]) == 2
    assert (
        "must be below the budget of every selected cell: dqn CartPole-v1 (300)"
        in capsys.readouterr().err
    )
    assert run.main([*argv, "--total-timesteps", "200"]) == 0
    out = capsys.readouterr().out
    assert "smoke try: 200 env steps per run, not comparable" in out
    assert "report: " not in out, (
        "a report of smoke runs shows nothing: the runner does not offer one"
    )
    assert (
        f"no report counts it. Each run's figures: {results / 'tiny' / 'runs'}/<run>/result.json"
        in out
    )
    (smoke,) = (results / "tiny" / "runs").iterdir()
    cell = load_suite("tiny", tiny["common"][3]).cells[0]
    assert smoke.name != cell.run_name(1) and smoke.name == cell.with_budget(200).run_name(1)
    result = json.loads((smoke / "result.json").read_text())
    assert (
        result["status"] == "ok"
        and result["comparable"] is False
        and result["summary"]["total_timesteps"] == 200
    )
    shutil.copytree(tiny["runs"] / cell.run_name(1), results / "tiny" / "runs" / cell.run_name(1))
    assert (
        report.main(
            [
                "--suite",
                "tiny",
                "--suites-file",
                tiny["common"][3],
                "--results-dir",
                str(results),
                "--no-plots",
            ]
        )
        == 0
    )
    text = (results / "tiny" / "REPORT.md").read_text()
    row = next(x for x in text.splitlines() if x.startswith("| dqn | CartPole-v1 |"))
    assert "| 1/2 |" in row and "partial" in row, "the smoke try is not a second seed"
    assert "| dqn | CartPole-v1 | - | 1 smoke try ignored |" in text


@pytest.mark.slow
def test_a_smoke_try_goes_to_an_untracked_folder_by_default(tiny, capsys):
    argv = [
        "--suite",
        "tiny",
        "--suites-file",
        tiny["common"][3],
        "--algos",
        "dqn",
        "--envs",
        "CartPole-v1",
        "--dry-run",
    ]
    assert run.main([*argv, "--total-timesteps", "100"]) == 0
    assert f"-> {run.SMOKE_DIR / 'tiny' / 'runs'}" in capsys.readouterr().out
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(run.SMOKE_DIR / "tiny" / "runs" / "x" / "result.json")],
        cwd=ROOT,
    )
    assert ignored.returncode == 0, "runs/smoke/ is ignored by git"


@pytest.mark.slow
def test_retry_failed_runs_the_failed_run_again(tiny, capsys):
    rc = run.main([*tiny["common"], "--algos", "dqn", "--envs", "Acrobot-v1", "--retry-failed"])
    out = capsys.readouterr().out
    assert rc == 1 and "1 to run" in out and "FAILED dqn Acrobot-v1 s1" in out


def _cell(**kw) -> Cell:
    base = dict(
        algo="dqn",
        env="CartPole-v1",
        steps=1000,
        settings={},
        seeds=[1, 2, 3],
        eval_every=50,
        threshold=100.0,
        pass_rule="all",
    )
    return Cell(**{**base, **kw})


def _ok(v: float) -> dict:
    return {"status": "ok", "summary": {"eval_return_mean": v}}


def test_eta_of_a_resumed_run_is_from_this_attempts_speed(tmp_path, monkeypatch):
    """A run resumed at 30% that does 10% in 100 s has 600 s left (not 165 s, as from 40% in 110 s);
    its first reading may be the step before the checkpoint's (34%, metrics.csv not yet cut back)."""
    clock = [0.0]
    monkeypatch.setattr(job.time, "time", lambda: clock[0])
    fresh, resumed = job.Job("tiny", _cell(), 1, tmp_path), job.Job("tiny", _cell(), 2, tmp_path)
    fresh._since = (0.0, 0.0)  # what start() sets for a run from scratch
    assert fresh.eta(0.01) is None
    for t, frac, left in ((0.0, 0.34, None), (10.0, 0.30, None), (110.0, 0.40, 600.0)):
        clock[0] = t
        got = resumed.eta(frac)
        assert got is None if left is None else got == pytest.approx(left)
    assert fresh.eta(0.1) == pytest.approx(110 / 0.1 * 0.9)
    clock[0] = 120.0
    assert resumed.eta(0.0) is None, "a failed read (0) is not where the attempt started"
    clock[0] = 210.0
    assert resumed.eta(0.50) == pytest.approx(200 / 0.2 * 0.5)
    late = job.Job("tiny", _cell(), 3, tmp_path)  # resumed, its metrics.csv not read yet
    assert late.eta(0.0) is None and late.eta(0.3) is None


def test_verdict_rules():
    five = [1, 2, 3, 4, 5]
    assert (
        report.verdict(
            _cell(seeds=five), {s: _ok(v) for s, v in zip(five, [100, 120, 500, 200, 300])}
        )[0]
        == "PASS"
    )
    v, why = report.verdict(
        _cell(seeds=five), {s: _ok(v) for s, v in zip(five, [99, 120, 500, 200, 300])}
    )
    assert v == "FAIL" and "seed 1: 99.0 < 100" in why
    assert (
        report.verdict(
            _cell(pass_rule="mean", seeds=five),
            {s: _ok(v) for s, v in zip(five, [99, 120, 500, 200, 300])},
        )[0]
        == "PASS"
    )
    v, why = report.verdict(_cell(), {1: _ok(200), 2: _ok(200)})
    assert v == "partial" and why == "partial: 2 of 3 seeds (not run: seed 3)", (
        "seeds not run yet are not a FAIL"
    )
    v, why = report.verdict(_cell(pass_rule="mean"), {1: _ok(99)})
    assert (
        v == "partial"
        and why.startswith("partial: 1 of 3 seeds (not run: seeds 2, 3)")
        and "mean so far 99.0 (< 100)" in why
    )
    v, why = report.verdict(_cell(), {1: _ok(99)})
    assert v == "FAIL" and "seed 1: 99.0 < 100" in why and "partial: 1 of 3 seeds" in why, (
        "a seed below an all-seeds bar fails the cell already"
    )
    v, why = report.verdict(_cell(), {1: _ok(200), 2: {"status": "incomplete"}})
    assert v == "partial" and "unfinished: seed 2 incomplete" in why
    v, why = report.verdict(
        _cell(), {1: _ok(200), 2: _ok(200), 3: {"status": "failed", "error": "boom"}}
    )
    assert v == "FAIL" and "seed 3 crashed: boom" in why
    assert report.verdict(_cell(threshold=None), {1: _ok(1), 2: _ok(2), 3: _ok(3)})[0] == "n/a"


def test_a_cell_passes_only_with_5_current_seeds():
    """Every seed of the cell run and above the threshold, but fewer than 5 of them: partial, not PASS
    (nor FAIL on a mean below it)."""
    four = [1, 2, 3, 4]
    v, why = report.verdict(_cell(pass_rule="mean", seeds=four), {s: _ok(500) for s in four})
    assert (
        v == "partial"
        and why == "partial: 4 seeds; a verdict needs 5 finished seeds; mean so far 500.0 (≥ 100)"
    )
    v, why = report.verdict(_cell(pass_rule="all", seeds=four), {s: _ok(500) for s in four})
    assert v == "partial" and "a verdict needs 5" in why
    v, why = report.verdict(_cell(pass_rule="mean", seeds=four), {s: _ok(50) for s in four})
    assert v == "partial" and "mean so far 50.0 (< 100)" in why
    five = [*four, 5]
    assert (
        report.verdict(_cell(pass_rule="mean", seeds=five), {s: _ok(500) for s in five})[0]
        == "PASS"
    )
    v, why = report.verdict(_cell(pass_rule="mean", seeds=five), {s: _ok(50) for s in five})
    assert v == "FAIL" and why.startswith("below threshold: mean 50.0 < 100")


def test_a_stale_run_takes_the_pass_away_and_says_why():
    five = [1, 2, 3, 4, 5]
    runs = {s: _ok(500) for s in five}
    assert report.verdict(_cell(seeds=five), runs)[0] == "PASS"
    runs[3] = {**_ok(500), "stale": "commit abc1234: algos/dqn.py changed since"}
    v, why = report.verdict(_cell(seeds=five), runs)
    assert (v, why) == (
        "stale",
        "1 run on other code: seed 3: commit abc1234: algos/dqn.py changed since",
    )
    runs[1] = {"status": "failed", "error": "boom"}  # a current crash is a FAIL, stale runs or not
    v, why = report.verdict(_cell(seeds=five), runs)
    assert (
        v == "FAIL" and why.startswith("seed 1 crashed: boom") and "seed 3: commit abc1234" in why
    )


def test_bootstrap_ci_of_the_mean():
    x = np.random.default_rng(1).normal(100.0, 20.0, size=5)
    lo, hi = report.bootstrap_ci(x)
    assert lo < x.mean() < hi
    assert report.bootstrap_ci(x) == (lo, hi), "seeded: the same values give the same interval"
    assert report.bootstrap_ci(x, seed=report.BOOTSTRAP_SEED + 1) != (lo, hi), (
        "the generator seed is what fixes it"
    )
    lo50, hi50 = report.bootstrap_ci(
        np.tile(x, 10)
    )  # the same spread over 50 seeds: about 1/sqrt(10) as wide
    assert 0.2 * (hi - lo) < hi50 - lo50 < 0.5 * (hi - lo)
    assert report.bootstrap_ci([3.25] * 4) == (3.25, 3.25)
    assert report.bootstrap_ci([3.25] * 4, report.iqm) == (3.25, 3.25)
    lo, hi = report.bootstrap_ci(x, report.iqm)
    assert lo < report.iqm(x) < hi


def test_iqm_is_the_mean_of_the_middle_half():
    assert report.iqm([10.0, 1.0, 3.0, 2.0]) == pytest.approx(
        2.5
    )  # n = 4: the middle two of 1, 2, 3, 10
    # n = 5: each value holds 20% of the sample; 1 lies at 20-40%, 2 at 40-60%, 10 at 60-80%, so the
    # middle half (25-75%) holds 15% of 1, all of 2 and 15% of 10: (.15 * 1 + .2 * 2 + .15 * 10) / .5
    assert report.iqm([100.0, 2.0, 0.0, 10.0, 1.0]) == pytest.approx(4.1)
    assert report.iqm([50.0, 3.0, -5.0, 100.0, 1.0, 0.0, 4.0, 2.0]) == pytest.approx(
        2.5
    )  # n = 8: 1, 2, 3, 4
    assert report.iqm([7.0]) == pytest.approx(7.0)
    rows = np.array([[100.0, 2.0, 0.0, 10.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    assert report.iqm(rows) == pytest.approx([4.1, 3.0]), "one IQM per row, as the bootstrap asks"


def test_the_report_statistics_are_the_same_on_every_cpu_and_in_every_order_of_the_seeds():
    """What a report prints must not move with the CPU: numpy's sums and dot products add in an order that
    follows the vector width and the BLAS. One sample's mean and IQM are exactly rounded, each resample's are
    its sorted values added left to right, so they equal the same sums done in plain Python."""

    def exact_iqm(v):  # the weights in quarters of 1/n, all products and the sum in rationals
        n = len(v)
        weights = (max(0.0, min(i + 1, 0.75 * n) - max(i, 0.25 * n)) for i in range(n))
        return float(
            sum(Fraction(w) * Fraction(x) for w, x in zip(weights, sorted(v))) / Fraction(n, 2)
        )

    # the a2c MinAtar/SpaceInvaders-v1 seeds whose IQM, 126.85 exactly rounded, a dot product writes
    # 126.85000000000001 on some CPUs, which prints 126.9 instead of 126.8
    tie = [119.4, 136.1, 139.8, 125.5, 114.5]
    assert report.iqm(tie) == 126.85 and f"{report.iqm(tie):.1f}" == "126.8"
    rng = np.random.default_rng(3)
    for n in (5, 8, 10, 17):
        x = rng.normal(100.0, 30.0, size=n).round(1)
        assert report.iqm(x) == exact_iqm(x) and selection.mean(x) == float(
            sum(map(Fraction, x)) / n
        )
        for perm in (x[::-1], rng.permutation(x)):
            assert report.iqm(perm) == report.iqm(x) and selection.mean(perm) == selection.mean(x)
        resamples = x[rng.integers(0, n, size=(200, n))]  # [R, n], as bootstrap_ci draws them
        in_python = [functools.reduce(operator.add, sorted(row)) / n for row in resamples.tolist()]
        assert selection.mean(resamples).tolist() == in_python, (
            "each resample's sum: sorted, left to right"
        )


def test_iqm_is_rliables_where_n_is_a_multiple_of_4():
    """rliable's IQM is scipy.stats.trim_mean(x, 0.25), which drops floor(n/4) whole values at each end."""
    scipy_stats = pytest.importorskip("scipy.stats")
    x = np.random.default_rng(2).normal(size=12)
    for n in (4, 8, 12):
        assert report.iqm(x[:n]) == pytest.approx(scipy_stats.trim_mean(x[:n], 0.25))
    assert scipy_stats.trim_mean([0.0, 1.0, 2.0, 10.0, 100.0], 0.25) == pytest.approx(13 / 3), (
        "not 4.1: no fractions"
    )


def test_eval_column_shows_the_ci_from_2_seeds_and_the_iqm_from_5():
    assert report.fmt_eval([]) == "-"
    assert report.fmt_eval([12.0]) == "12.0"
    assert report.fmt_eval([10.0, 20.0]) == "15.0 [10.0, 20.0]<br>std 5.0"
    four = report.fmt_eval([1.0, 2.0, 3.0, 4.0])
    assert "IQM" not in four and four.startswith("2.5 [")
    five = report.fmt_eval([0.0, 1.0, 2.0, 10.0, 100.0])
    assert five.startswith("22.6 [") and "<br>std 38.9<br>IQM 4.1 [" in five


def test_verdict_judges_5_seeds_by_the_mean_and_says_what_the_ci_shows():
    cell = _cell(pass_rule="mean", threshold=450.0, seeds=[1, 2, 3, 4, 5])
    lucky = {s: _ok(v) for s, v in zip(cell.seeds, [480.0, 480.0, 480.0, 480.0, 400.0])}
    v, why = report.verdict(cell, lucky)  # mean 464; a resample with three 400s has mean 432
    assert (
        v == "PASS"
        and why.startswith("mean 464.0 ≥ 450; CI lower bound ")
        and why.endswith(" below it")
    )
    assert float(why.split("CI lower bound ")[1].split()[0]) < 450
    firm = {s: _ok(v) for s, v in zip(cell.seeds, [480.0, 490.0, 500.0, 485.0, 495.0])}
    assert report.verdict(cell, firm) == (
        "PASS",
        "mean 490.0 ≥ 450; CI lower bound 484.0 clears it too",
    )
    close = {s: _ok(v) for s, v in zip(cell.seeds, [400.0, 400.0, 400.0, 400.0, 500.0])}
    v, why = report.verdict(cell, close)
    assert (
        v == "FAIL"
        and why.startswith("below threshold: mean 420.0 < 450; CI upper bound ")
        and why.endswith(" reaches it")
    )
    v, why = report.verdict(_cell(pass_rule="mean"), {1: _ok(150), 2: _ok(120), 3: _ok(130)})
    assert v == "partial" and "a verdict needs 5 finished seeds" in why, (
        "under 5 seeds there is no verdict"
    )


def test_pass_rule_all_needs_a_published_source(tmp_path):
    suites = tmp_path / "suites.toml"
    suites.write_text(
        TINY.replace(
            'pass_rule_source = "a published result that asks the threshold of every seed (test)"\n',
            "",
        )
    )
    with pytest.raises(SystemExit, match="needs a pass_rule_source"):
        load_suite("tiny", suites)


def test_settings_hash_identifies_the_run():
    assert _cell().digest == _cell().digest
    assert _cell().digest != _cell(settings={"learning_rate": 1e-3}).digest
    assert _cell().digest != _cell(steps=2000).digest
    assert _cell().digest == _cell(threshold=5.0, seeds=[7], note="why").digest, (
        "verdict fields do not change what runs"
    )


def test_suites_declare_every_algorithm_on_its_canonical_tasks():
    raw = load_suites()
    assert {"classic", "continuous", "mujoco", "atari", "atari_cpu", "minatar"} <= set(raw)
    atari = {(c.algo, c.env) for c in load_suite("atari").cells}
    assert {("dqn", f"{g}NoFrameskip-v4") for g in ("Breakout", "Pong", "BeamRider")} <= atari
    minatar = {(c.algo, c.env) for c in load_suite("minatar").cells}
    games = ("Breakout", "SpaceInvaders", "Freeway", "Asterix", "Seaquest")
    assert {(a, f"MinAtar/{g}-v1") for a in ("dqn", "a2c") for g in games} <= minatar
    classic = {(c.algo, c.env) for c in load_suite("classic").cells}
    for algo in ("dqn", "n_step_q", "sarsa", "a2c"):
        for env in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3"):
            assert (algo, env) in classic
    for algo in ("ddpg", "naf", "a2c"):
        for env in ("Pendulum-v1", "MountainCarContinuous-v0", "InvertedPendulum-v5"):
            assert (algo, env) in classic
    mujoco = {(c.algo, c.env) for c in load_suite("mujoco").cells}
    assert {
        (a, e)
        for a in ("ddpg", "naf", "a2c")
        for e in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
    } <= mujoco
    continuous = load_suite("continuous")
    assert all(c.env not in ("CartPole-v1", "Acrobot-v1") for c in continuous.cells)


def test_every_reference_exists_and_every_setting_is_an_args_field():
    refs = load_references()
    for r in refs.values():
        assert (
            r["convention"] in ("train", "eval", "train100")
            and r["source"]
            and r["url"]
            and r["env_note"]
        )
    for name in ("classic", "continuous", "mujoco", "atari", "atari_cpu", "minatar"):
        for cell in load_suite(name).cells:
            assert set(cell.references) <= set(refs), (name, cell.algo, cell.env)
            assert cell.threshold is None or cell.threshold_source, (
                "a threshold says where it comes from"
            )
            if script_path(cell.algo).exists():
                fields = {
                    f.name for f in dataclasses.fields(importlib.import_module(cell.algo).Args)
                }
                assert set(cell.settings) <= fields, (
                    name,
                    cell.algo,
                    cell.env,
                    set(cell.settings) - fields,
                )


def test_speed_records_the_ratios_its_summary_shows(tmp_path, monkeypatch, capsys):
    """A comparison ends with one JSON line (`--json-line`): its closing lines and each pair's median ratio as
    its line shows it; run_one puts them in the record and leaves the line out of the log. A child that never
    gets there (timed out) leaves its last lines and no ratio."""
    rates = {"ours": [1000.0, 1000.0, 1000.0], "sb3": [300.0, 290.0, 310.0]}  # per repeat

    def run_side(opts, side, setting, seed, scratch):  # a run's record, as a child process gives it
        rate = rates[side][int(scratch.name)] * int(setting)
        times = {"cpu_seconds": 1.0, "wall_seconds": 1.0}
        return {
            "side": side,
            "setting": setting,
            "seed": seed,
            **times,
            "returncode": 0,
            "rate": rate,
        }

    monkeypatch.setattr(speed, "run_side", run_side)
    raw = tmp_path / "raw.json"
    argv = ["dqn", "--repeats", "3", "--threads", "1", "2", "--out", str(raw), "--json-line"]
    assert speed.main(argv) == 0
    stdout = capsys.readouterr().out
    closing = json.loads(stdout.splitlines()[-1])
    assert closing["summary_lines"] == json.loads(raw.read_text())["summary"]
    assert stdout.splitlines()[-len(closing["summary_lines"]) - 1 : -1] == closing["summary_lines"]
    shown = [
        float(x)
        for line in closing["summary_lines"]
        for x in re.findall(r"ratio .* (\d+\.\d\d)x", line)
    ]
    assert closing["ratios"] == shown == [3.33, 3.33]

    def child(argv, **kwargs):  # the comparison's child process, as run_one runs it
        assert argv[-1] == "--json-line"
        return subprocess.CompletedProcess(argv, 0, stdout, "a warning\n")

    monkeypatch.setattr(speed.subprocess, "run", child)
    opts = speed.argparse.Namespace(quick=True, cleanrl=None, cleanrl_python=None, timeout=0)
    record = speed.run_one("dqn", opts, tmp_path)
    assert record["summary_lines"] == closing["summary_lines"] and record["ratios"] == [3.33, 3.33]
    assert "--json-line" not in record["command"] and record["returncode"] == 0
    assert json.loads((tmp_path / "dqn.json").read_text()) == record
    log = (tmp_path / "dqn.log").read_text()
    assert log == stdout[: stdout.rindex(stdout.splitlines()[-1])] + "a warning\n"

    def timed_out(argv, **kwargs):
        raise subprocess.TimeoutExpired(
            argv, 5, output=b"header\nrun 1/3 a\nrun 2/3 b\nrun 3/3 c\n"
        )

    monkeypatch.setattr(speed.subprocess, "run", timed_out)
    record = speed.run_one(
        "dqn", speed.argparse.Namespace(**{**vars(opts), "timeout": 5}), tmp_path
    )
    assert (
        record["summary_lines"] == ["run 1/3 a", "run 2/3 b", "run 3/3 c"]
        and record["ratios"] == []
    )
    assert record["returncode"] is None and record["error"] == "timed out after 5 s"


def test_speed_sides_of_ours_name_their_scripts_args():
    """speed.toml: each side says what runs it, and our sides' settings are their scripts' Args fields (a
    misspelt one would fail only when the comparison runs). dqn-atari's MSE side leaves clip_grad_norm at
    dqn's default, no clipping, as its description says."""
    for name, comparison in speed.COMPARISONS.items():
        for side, spec in comparison.get("sides", {}).items():
            assert len({"script", "sb3", "cleanrl", "about"} & set(spec)) == 1, (name, side)
            if "script" in spec:
                fields = {
                    f.name for f in dataclasses.fields(importlib.import_module(spec["script"]).Args)
                }
                assert set(spec) - {"script"} <= fields, (name, side, set(spec) - fields)
    assert "clip_grad_norm" not in speed.COMPARISONS["dqn-atari"]["sides"]["ours-mse"]
    assert importlib.import_module("dqn").Args().clip_grad_norm is None


@pytest.mark.parametrize("lib", ["numpy", "torch", "torch-linear"])
def test_speed_gemm_launcher_prints_one_json_line(lib):
    r = subprocess.run(
        [sys.executable, str(speed.LAUNCHERS / "gemm.py"), lib, "8"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)
    assert figures["lib"] == lib and figures["us"] > 0 and figures["gflops"] >= 0


def test_speed_cleanrl_launcher_runs_the_script_as_itself_and_times_its_loop(tmp_path):
    """cleanrl_loop.py runs a script as `python SCRIPT FLAGS` would (its name, its flags, __main__), and
    adds one JSON line: the CPU and wall seconds from its first vector-env reset on."""
    script = tmp_path / "peer.py"
    script.write_text(
        "import sys\nimport gymnasium as gym\n"
        "envs = gym.vector.SyncVectorEnv([lambda: gym.make('CartPole-v1')])\n"
        "envs.reset(seed=1)\nenvs.reset(seed=2)\nprint(__name__, sys.argv)\n"
    )
    r = subprocess.run(
        [sys.executable, str(speed.LAUNCHERS / "cleanrl_loop.py"), str(script), "--env-id", "x"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"__main__ {[str(script), '--env-id', 'x']}"
    times = speed.last_json(r.stdout)
    assert list(times) == ["loop_cpu_seconds", "loop_wall_seconds"] and len(lines) == 2
    assert all(0 <= t < 60 for t in times.values())


def test_speed_minatar_launcher_sets_the_peers_frames_before_its_main(tmp_path):
    peer = tmp_path / "examples" / "dqn.py"
    peer.parent.mkdir()
    peer.write_text(
        "import json, sys\nimport torch\nNUM_FRAMES = 5_000_000\n"
        "def main():\n"
        "    out = {'frames': NUM_FRAMES, 'argv': sys.argv, 'threads': torch.get_num_threads()}\n"
        "    open(sys.argv[-1] + '_data_and_weights', 'w').write(json.dumps(out))\n"
    )
    output = tmp_path / "peer"
    r = subprocess.run(
        [
            sys.executable,
            str(speed.LAUNCHERS / "minatar_peer.py"),
            str(peer),
            "seaquest",
            str(output),
            "1200",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    seen = json.loads((tmp_path / "peer_data_and_weights").read_text())
    assert seen == {
        "frames": 1200,
        "argv": ["dqn.py", "--game", "seaquest", "--output", str(output)],
        "threads": 1,
    }


@pytest.mark.slow
def test_report_of_a_partial_run_says_partial(tiny, tmp_path, current):
    """One seed of a two-seed cell: the report says 'partial: 1 of 2 seeds', not FAIL."""
    import shutil

    results = tmp_path / "results"
    (one,) = tiny["runs"].glob("dqn__CartPole-v1__s1__*")
    shutil.copytree(one, results / "tiny" / "runs" / one.name)
    assert (
        report.main(
            [
                "--suite",
                "tiny",
                "--suites-file",
                tiny["common"][3],
                "--results-dir",
                str(results),
                "--no-plots",
            ]
        )
        == 0
    )
    text = (results / "tiny" / "REPORT.md").read_text()
    row = next(x for x in text.splitlines() if x.startswith("| dqn | CartPole-v1 |"))
    assert "**partial**: 1 of 2 seeds (not run: seed 2)" in row and "FAIL" not in row
    assert "**1 of the suite's 3 cells: 0 PASS, 0 FAIL, 1 partial" in text
    assert "Not listed: 2 cells without runs (dqn Acrobot-v1, no_such_algo CartPole-v1)" in text, (
        "cells never run and not selected are named, not listed as partial"
    )


def test_speed_quick_shortens_every_comparison():
    for name in speed.COLLECTED:
        assert "quick" in speed.COMPARISONS[name], f"{name} has no --quick budget"
        full, quick = (speed.COMPARISONS[name][k].split() for k in ("full", "quick"))
        assert "--total-timesteps" in quick, name
        steps = int(quick[quick.index("--total-timesteps") + 1])
        assert steps <= 3000 and (
            steps < int(full[full.index("--total-timesteps") + 1])
            if "--total-timesteps" in full
            else True
        ), name


def _git_history() -> str | None:
    """Why the committed runs' commits cannot be checked here (not a git checkout, a shallow clone), or None."""
    checker = provenance.Checker()
    return checker.error if checker.head is None or checker.error else None


RESULTS = ROOT / "benchmarks" / "results"
# the suites' own results, and the runs of some suites' cells again under a second kernel set and on the
# other CPU vendor (docs/results.md, "Across CPUs")
REPORTS = sorted(
    p.parent.relative_to(RESULTS).as_posix()
    for folder in ("*", "compatible_kernels/*", "amd_epyc/*")
    for p in RESULTS.glob(f"{folder}/REPORT.md")
)


@pytest.mark.parametrize("where", REPORTS)
def test_committed_report_is_what_report_py_writes_from_the_committed_runs(tmp_path, where):
    """benchmarks/results/[DIR/]<suite>/REPORT.md must be exactly report.py's output for the committed runs and
    speed records, judged against the committed code (the markdown; plots are compared by their names)."""
    if _git_history():
        pytest.skip(f"the runs' commits cannot be checked: {_git_history()}")
    committed = RESULTS / where.rpartition("/")[0]
    suite = where.rpartition("/")[2]
    (tmp_path / suite).mkdir()
    (tmp_path / suite / "runs").symlink_to(committed / suite / "runs")
    if (committed / "speed").is_dir():
        (tmp_path / "speed").symlink_to(committed / "speed")
    try:
        import matplotlib  # noqa: F401

        plots = []
    except ImportError:  # no plots drawn: compare without the learning-curve section
        plots = ["--no-plots"]
    assert report.main(["--suite", suite, "--results-dir", str(tmp_path), *plots]) == 0
    written = (tmp_path / suite / "REPORT.md").read_text()
    # the title's command names the folder read: here a temporary one, in the committed report its own
    own = "" if committed == RESULTS else f" --results-dir {committed.relative_to(ROOT)}"
    written = written.replace(f" --results-dir {tmp_path}", own, 1)
    expected = (committed / suite / "REPORT.md").read_text()
    if plots and "## Learning curves" in expected:
        head, rest = expected.split("## Learning curves", 1)
        expected = head + rest[rest.index("## Failures") :]
    elif not plots:

        def names(folder):  # a suite without current runs draws no plot (and may have no folder)
            return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

        assert names(tmp_path / suite / "plots") == names(committed / suite / "plots")
    assert written == expected, (
        f"regenerate it: python benchmarks/report.py --suite {suite} --results-dir {committed.relative_to(ROOT)}"
    )


def test_speed_devices_rate_is_taken_between_the_logged_rows_past_the_heatup(tmp_path):
    """speed.py devices: env steps per second between the first and last row past learning_starts,
    each row's elapsed time being its global_step over its (rounded) sps."""
    run = tmp_path / "run"
    run.mkdir()
    # 1,000 steps of heatup in 1 s, then 100 steps/s: step 2,000 at 11 s, 4,000 at 31 s
    rows = [(500, 1000), (2000, round(2000 / 11)), (4000, round(4000 / 31))]
    (run / "metrics.csv").write_text(
        "global_step,sps,loss\n" + "".join(f"{s},{r},0.1\n" for s, r in rows) + "4100,,\n"
    )
    rate, n = speed.sps_while_learning(tmp_path, after=1000)
    assert n == 2 and rate == pytest.approx(100, rel=0.01)
    assert speed.sps_while_learning(tmp_path, after=3000) == (None, 1)  # one row: no rate


@pytest.mark.skipif(
    importlib.import_module("torch").cuda.is_available(),
    reason="the refusal is for machines without CUDA",
)
def test_speed_devices_refuses_cuda_without_a_gpu():
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "speed.py"), "devices", "--devices", "cuda"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "speed devices: error: --devices names cuda, but torch sees no CUDA GPU"
    ]


@pytest.mark.parametrize(
    "cells,message",
    [
        ("classic:dqn", "expected suite:algo:env"),
        ("nosuch:dqn:CartPole-v1", "unknown suite 'nosuch'"),
        ("classic:dqn:Nope-v0", "no cell dqn Nope-v0 in suite classic"),
    ],
)
def test_speed_devices_names_a_wrong_cell_in_one_line(cells, message):
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "speed.py"),
            "devices",
            "--devices",
            "cpu",
            "--cells",
            cells,
        ],
        capture_output=True,
        text=True,
    )
    lines = r.stderr.strip().splitlines()
    assert (
        r.returncode == 2
        and len(lines) == 1
        and lines[0].startswith("speed devices: error: --cells")
        and message in lines[0]
    )


def test_device_check_names_only_suite_cells_and_refuses_an_unknown_step(tmp_path):
    """benchmarks/device_check.sh runs on a lent GPU, where a wrong name costs the call: each cell it
    names is a suite cell, every step has its branch, and an unknown step stops it before it starts."""
    script = ROOT / "benchmarks" / "device_check.sh"
    text = script.read_text()
    cells = set(re.findall(r"\b[a-z_]+:[a-z_0-9]+:[\w/-]+-v\d+\b", text))
    assert {c.split(":")[1] for c in cells} == {"dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"}
    for spec in cells:
        speed.find_cell(spec)
    steps = re.search(r'^STEPS="([^"]+)"', text, re.MULTILINE).group(1).split()
    assert steps and all(re.search(rf"^\s+{s}\)", text, re.MULTILINE) for s in steps)
    r = subprocess.run(
        ["bash", str(script), "nosuch"],
        capture_output=True,
        text=True,
        env={"OUT": str(tmp_path / "out"), "PATH": "/usr/bin:/bin"},
    )
    assert (
        r.returncode == 2
        and r.stdout.startswith("unknown step nosuch: ddpg")
        and not (tmp_path / "out").exists()
    )


def test_a_smoke_sweep_ends_with_where_its_runs_are_not_a_report_command(tmp_path, capsys):
    """A report counts no smoke try (it would say "no finished runs yet"): the runner's last line says
    what the smoke try is for and where its figures are; a full sweep ends with its report command."""
    import argparse
    import time

    a = argparse.Namespace(
        total_timesteps=200, results_dir=str(tmp_path), suites_file=str(run.SUITES_FILE)
    )
    assert run.closing("classic", a, [], [], [], [], time.time()) == 0
    out = capsys.readouterr().out
    assert (
        "report: " not in out
        and f"{tmp_path / 'classic' / 'runs'}/<run>/result.json" in out
        and "summary.json" in out
    )
    a.total_timesteps = None
    run.closing("classic", a, [], [], [], [], time.time())
    assert (
        f"report: python benchmarks/report.py --suite classic --results-dir {tmp_path}"
        in capsys.readouterr().out
    )
