"""Which runs a report counts: runs from other code (another commit, a dirty tree) are stale and take
a cell's PASS away, an equivalence check makes an older commit's runs current again, a run whose
final evaluation failed is failed; and the README's result tables are the report's."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import equivalence  # noqa: E402
import job  # noqa: E402
import provenance  # noqa: E402
import report  # noqa: E402
from suite import Cell, Suite  # noqa: E402

# A script whose numbers depend on common/scale.py (imported through common/__init__.py's package),
# with the Args fields the runner and the equivalence check set; wall_seconds and sps are clock readings.
TOY = '''"""A toy script."""
import csv, dataclasses, random, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common.scale import SCALE


@dataclasses.dataclass
class Args:
    env_id: str = "Toy-v0"
    seed: int = 1
    total_timesteps: int = 100
    run_dir: str = "runs"
    eval_every: int = 0


def train(args):
    rng = random.Random(args.seed)
    folder = Path(args.run_dir) / f"{args.env_id}__toy__{args.seed}"
    folder.mkdir(parents=True)
    with open(folder / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["global_step", "wall_seconds", "episodic_return", "sps", "eval_return"])
        for step in range(10, args.total_timesteps + 1, 10):
            w.writerow([step, time.perf_counter(), SCALE * rng.random(), time.perf_counter(), ""])
    return {"completed": True, "eval_return_mean": SCALE * 10.0, "updates": args.total_timesteps // 10}
'''
SUITES = """
[suites.toy]
seeds = [1, 2, 3, 4, 5]
eval_points = 2

[[suites.toy.cells]]
algo = "dqn"
env = "Toy-v0"
steps = 100
threshold = 5.0
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", *files)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository with the toy script as algos/dqn.py (so that the report finds a script of that name)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    return repo


def first(repo: Path) -> str:
    return commit(
        repo,
        {
            "algos/dqn.py": TOY,
            "common/__init__.py": "",
            "common/scale.py": "SCALE = 1.0\n",
            "common/unused.py": "X = 1\n",
            "README.md": "toy\n",
        },
        "toy script",
    )


CELL = Cell(
    algo="dqn",
    env="Toy-v0",
    steps=100,
    settings={},
    seeds=[1, 2, 3, 4, 5],
    eval_every=50,
    threshold=5.0,
)


def fake_runs(runs_dir: Path, code: dict, values=(10.0,) * 5, cell: Cell = CELL) -> None:
    """result.json files of finished runs, one per seed, as the runner writes them."""
    for seed, value in zip(cell.seeds, values):
        d = runs_dir / cell.run_name(seed)
        d.mkdir(parents=True, exist_ok=True)
        spec = {
            "algo": cell.algo,
            "env": cell.env,
            "seed": seed,
            "steps": cell.steps,
            "settings": cell.settings,
            "hash": cell.digest,
            **code,
        }
        summary = {
            "eval_return_mean": value,
            "train_return_last10": value,
            "sps": 100.0,
            "wall_seconds": 1.0,
            "completed": True,
        }
        (d / "result.json").write_text(
            json.dumps(
                {
                    "status": "ok",
                    "spec": spec,
                    "summary": summary,
                    "error": None,
                    "finished": "2026-11-25T10:00:00",
                    **code,
                }
            )
        )


def judge(runs_dir: Path, checker: provenance.Checker) -> report.Judged:
    (judged,), _ = report.judge_suite(Suite("toy", "", [CELL]), runs_dir, checker)
    return judged


def test_deciding_files_are_the_script_and_what_it_imports(repo):
    first(repo)
    checker = provenance.Checker(repo, equivalence_file=None)
    assert sorted(checker.today("dqn")) == [
        "algos/dqn.py",
        "common/__init__.py",
        "common/scale.py",
    ], "its imports, the package's __init__ too; not common/unused.py"
    assert provenance.imported_modules(
        "from . import a\nfrom .b import c\nimport x.y\n", "pkg.sub"
    ) == [
        "pkg",
        "pkg.sub",
        "pkg.sub.a",
        "pkg.sub.b",
        "pkg.sub.b.c",
        "x",
        "x.y",
    ]


@pytest.mark.parametrize("algo", ["dqn", "a2c", "ddpg"])
def test_the_optional_files_that_can_move_a_run_decide_it_in_this_repository(algo):
    """The files a run loads only with a flag (--compile's harness/extras.py, --resume's harness/resume.py and
    the checkpoint writer) still decide its numbers: harness/run.py imports them so that provenance sees it."""
    checker = provenance.Checker(ROOT, equivalence_file=None)
    assert {"harness/extras.py", "harness/resume.py", "harness/checkpoint.py"} <= set(
        checker.today(algo)
    )


def test_a_run_from_another_commit_turns_a_passing_cell_stale(repo, tmp_path):
    a = first(repo)
    runs = tmp_path / "runs"
    fake_runs(runs, {"commit": a, "dirty": False, "dirty_files": []})
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert judged.verdict == "PASS", judged.reason

    commit(
        repo,
        {"README.md": "toy, documented\n", "common/unused.py": "X = 2\n"},
        "files that decide nothing",
    )
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert judged.verdict == "PASS", "only the files that decide the run's numbers count"

    b = commit(repo, {"common/scale.py": "SCALE = 2.0\n"}, "a change that moves the numbers")
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert judged.verdict == "stale" and judged.reason == (
        f"5 runs on other code: seeds 1, 2, 3, 4, 5: commit {a[:7]}: common/scale.py changed since"
    )
    assert judged.shown_stale and not judged.current_ok, "the figures shown are marked stale"

    fake_runs(
        runs,
        {"commit": b[:7], "dirty": False, "dirty_files": []},
        cell=Cell(**{**CELL.__dict__, "seeds": [4]}),
    )
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert (
        judged.verdict == "stale"
        and "seeds 1, 2, 3, 5: commit" in judged.reason
        and list(judged.current_ok) == [4]
    )


def test_a_change_to_docstrings_comments_or_layout_leaves_the_runs_current(repo, tmp_path, capsys):
    """Provenance compares the deciding files' syntax trees without their string statements: a docstring, a
    comment, a field's help or a reformat decides no number; a change to a string the code uses does."""
    a = first(repo)
    runs = tmp_path / "runs"
    fake_runs(runs, {"commit": a, "dirty": False, "dirty_files": []})
    edited = (
        TOY.replace('"""A toy script."""', '"""A toy script, documented."""')
        .replace("    seed: int = 1\n", '    seed: int = 1\n    """the seed"""\n')
        .replace(
            "    rng = random.Random(args.seed)",
            "    # one generator for the run\n    rng = random.Random(\n        args.seed,\n    )",
        )
    )
    commit(
        repo,
        {"algos/dqn.py": edited, "common/scale.py": "SCALE = (1.0)  # the scale\n"},
        "docstrings, comments, layout",
    )
    checker = provenance.Checker(repo, equivalence_file=None)
    assert judge(runs, checker).verdict == "PASS", (
        "the same code: its runs count, no equivalence check needed"
    )
    (suites := tmp_path / "suites.toml").write_text(SUITES)
    assert (
        equivalence.check(
            "toy", "dqn", "Toy-v0", a, None, tmp_path / "eq.json", suites_file=suites, root=repo
        )
        == 0
    )
    assert "are the same code (docstrings, comments and layout aside)" in capsys.readouterr().out
    assert not (tmp_path / "eq.json").exists(), "nothing to check, nothing recorded"

    commit(repo, {"algos/dqn.py": edited.replace('"Toy-v0"', '"Toy-v1"')}, "a string the code uses")
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert judged.verdict == "stale" and "algos/dqn.py changed since" in judged.reason


def test_a_run_from_a_dirty_tree_is_stale(repo, tmp_path):
    a = first(repo)
    runs = tmp_path / "runs"
    fake_runs(runs, {"commit": a, "dirty": True, "dirty_files": ["common/scale.py"]})
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert (
        judged.verdict == "stale"
        and f"commit {a[:7]} with a dirty tree (uncommitted changes to common/scale.py)"
        in judged.reason
    )
    fake_runs(runs, {"commit": a[:7] + "+dirty"})  # an older runner's record: which files, unknown
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert judged.verdict == "stale" and "with a dirty tree (uncommitted changes)" in judged.reason
    fake_runs(runs, {"commit": a, "dirty": True, "dirty_files": ["algos/other.py"]})
    assert judge(runs, provenance.Checker(repo, equivalence_file=None)).verdict == "PASS", (
        "uncommitted changes to files the run does not use do not matter"
    )
    fake_runs(runs, {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False})
    judged = judge(runs, provenance.Checker(repo, equivalence_file=None))
    assert judged.verdict == "stale" and "commit 0123456 is not in this repository" in judged.reason


def test_code_state_records_the_commit_and_which_code_files_are_dirty(repo):
    a = first(repo)
    assert provenance.code_state(repo) == {"commit": a, "dirty": False, "dirty_files": []}
    (repo / "common" / "scale.py").write_text("SCALE = 3.0\n")
    (repo / "harness").mkdir()
    (repo / "harness" / "new.py").write_text("")
    (repo / "README.md").write_text("edited\n")
    assert provenance.code_state(repo) == {
        "commit": a,
        "dirty": True,
        "dirty_files": ["common/scale.py", "harness/new.py"],
    }


def test_an_equivalence_check_makes_an_older_commits_runs_current(repo, tmp_path, capsys):
    a = first(repo)
    suites, record = tmp_path / "suites.toml", tmp_path / "equivalence.json"
    suites.write_text(SUITES)
    runs = tmp_path / "runs"
    fake_runs(runs, {"commit": a, "dirty": False, "dirty_files": []})
    b = commit(
        repo,
        {"algos/dqn.py": TOY.replace("random.Random(args.seed)", "random.Random(int(args.seed))")},
        "code that gives the same numbers",
    )
    assert judge(runs, provenance.Checker(repo, equivalence_file=record)).verdict == "stale"

    assert equivalence.check("toy", "dqn", "Toy-v0", a[:7], None, record, suites, root=repo) == 0
    assert "50 steps" in (out := capsys.readouterr().out) and "IDENTICAL: 5 metrics rows" in out, (
        "the default prefix: half the budget"
    )
    (r,) = json.loads(record.read_text())["records"]
    assert (r["old"]["commit"], r["new"]["commit"], r["steps"], r["hash"]) == (
        a,
        b,
        50,
        CELL.digest,
    )
    assert (
        r["new"]["files"] == provenance.Checker(repo, equivalence_file=None).today("dqn")
        and r["machine"]["cpu_count"]
    )
    judged = judge(runs, provenance.Checker(repo, equivalence_file=record))
    assert judged.verdict == "PASS", judged.reason
    assert (
        judged.runs[1]["current_by"]
        == f"current by equivalence check of {a[:7]} with {b[:7]}, 50 steps"
    )

    assert equivalence.check("toy", "dqn", "Toy-v0", a, 5, record, suites, root=repo) == 1
    assert "took no gradient step" in capsys.readouterr().out, (
        "a prefix without learning proves nothing"
    )
    assert len(json.loads(record.read_text())["records"]) == 1

    commit(repo, {"common/scale.py": "SCALE = 2.0\n"}, "a change that moves the numbers")
    assert equivalence.check("toy", "dqn", "Toy-v0", b, 30, record, suites, root=repo) == 1
    assert "DIFFERENT: row 1 (global_step 10): episodic_return" in capsys.readouterr().out
    assert len(json.loads(record.read_text())["records"]) == 1, "nothing recorded"
    assert judge(runs, provenance.Checker(repo, equivalence_file=record)).verdict == "stale", (
        "a record holds only while today's files are its new side"
    )
    assert (
        equivalence.main(
            [
                "--suite",
                "toy",
                "--algo",
                "dqn",
                "--env",
                "Toy-v0",
                "--old",
                "nope",
                "--suites-file",
                str(suites),
                "--record-file",
                str(record),
            ]
        )
        == 2
    )


def test_a_run_whose_final_evaluation_failed_is_failed_and_the_report_says_why(tmp_path):
    """An older runner called such a run ok; the report must not crash on it (statistics over None)."""
    suites = tmp_path / "suites.toml"
    suites.write_text(SUITES.replace('env = "Toy-v0"', 'env = "CartPole-v1"'))
    cell = Cell(**{**CELL.__dict__, "env": "CartPole-v1"})
    runs = tmp_path / "results" / "toy" / "runs"
    head = provenance.Checker().head
    if head is None:
        pytest.skip("not a git checkout")
    fake_runs(
        runs,
        {"commit": head, "dirty": False, "dirty_files": []},
        values=(10.0, 10.0, None, 10.0, 10.0),
        cell=cell,
    )
    assert (
        report.main(
            [
                "--suite",
                "toy",
                "--suites-file",
                str(suites),
                "--results-dir",
                str(tmp_path / "results"),
                "--no-plots",
            ]
        )
        == 0
    )
    text = (tmp_path / "results" / "toy" / "REPORT.md").read_text()
    row = next(x for x in text.splitlines() if x.startswith("| dqn | CartPole-v1 |"))
    assert "| 4/5 |" in row and "**FAIL**: seed 3 failed: its final evaluation failed" in row, row
    assert "- `dqn` `CartPole-v1` seed 3: **failed**: its final evaluation failed" in text


def test_the_runner_calls_a_run_without_a_final_evaluation_failed(tmp_path, monkeypatch):
    fake = types.ModuleType("no_eval_algo")
    fake.Args = lambda **kw: kw
    fake.train = lambda args: {"completed": True, "eval_return_mean": None}
    monkeypatch.setitem(sys.modules, "no_eval_algo", fake)
    monkeypatch.setattr(job, "build_args", lambda module, spec: {})
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "algo": "no_eval_algo",
                "env": "CartPole-v1",
                "seed": 1,
                "run_dir": str(tmp_path),
                "commit": "abc",
                "dirty": False,
                "dirty_files": [],
            }
        )
    )
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    try:
        assert job.child(str(spec)) == 1
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "failed" and "final evaluation failed" in result["error"]
    assert (result["commit"], result["dirty"], result["dirty_files"]) == ("abc", False, [])


def test_the_readme_tables_are_what_report_py_writes():
    checker = provenance.Checker()
    if checker.head is None or checker.error:
        pytest.skip(f"the runs' commits cannot be checked: {checker.error}")
    text = report.README.read_text()
    suites = [m.group(2) for m in report.MARKER.finditer(text)]
    assert "defaults" in suites  # the README's one headline table: every script with its defaults
    assert report.readme_text(text) == text, "regenerate them: python benchmarks/report.py --readme"


def test_the_algorithm_pages_tables_are_what_report_py_writes():
    checker = provenance.Checker()
    if checker.head is None or checker.error:
        pytest.skip(f"the runs' commits cannot be checked: {checker.error}")
    pages = sorted(report.ALGO_PAGES.glob("*.md"))
    assert pages
    for page in pages:
        text = page.read_text()
        assert [m.group(2) for m in report.ALGO_MARKER.finditer(text)] == [page.stem], page.name
        assert report.algo_page_text(text) == text, (
            f"regenerate {page.name}: python benchmarks/report.py --readme"
        )


def test_a_hand_edit_of_an_algorithm_page_table_is_caught():
    text = (report.ALGO_PAGES / "dqn.md").read_text()
    edited = text.replace("| CartPole-v1 |", "| CartPole-v1 (by hand) |", 1)
    assert edited != text and report.algo_page_text(edited) != edited


def test_generated_tables_live_only_where_report_py_writes_them():
    """report.py --readme rewrites the README's blocks; a block in a docs/ page would go stale unseen
    (the docs pages link each suite's report instead, which holds its table)."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert not report.MARKER.search(page.read_text()), (
            f"{page.name}: link the suite's REPORT.md instead"
        )
    linked = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for suite_report in sorted((ROOT / "benchmarks" / "results").glob("*/REPORT.md")):
        assert f"../benchmarks/results/{suite_report.parent.name}/REPORT.md" in linked, (
            f"no docs page links {suite_report}"
        )


def test_a_hand_edit_of_a_readme_table_is_caught():
    text = report.README.read_text()
    start = text.index("<!-- results:defaults:start -->")
    row = text.index("| dqn | CartPole-v1 |", start)
    edited = text[:row] + text[row:].replace(
        "| dqn | CartPole-v1 |", "| dqn | CartPole-v1 (by hand) |", 1
    )
    assert report.readme_text(edited) != edited


def test_train_last_is_the_mean_of_the_last_n_training_episodes(tmp_path):
    """MinAtar's figure plots the moving average of the last 100 training episodes; rows without an
    episode (losses, evaluations) are skipped."""
    folder = tmp_path / "run" / "MinAtar-Breakout__dqn__1"
    folder.mkdir(parents=True)
    rows = ["global_step,wall_seconds,episodic_return,loss,eval_return"]
    for k in range(150):
        rows.append(f"{10 * k},0.1,{k},,")
        rows.append(f"{10 * k + 5},0.1,,0.5,{1000 + k}")
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    assert report.train_last(tmp_path / "run", 100) == pytest.approx(sum(range(50, 150)) / 100)
    assert report.train_last(tmp_path / "run", 1000) == pytest.approx(sum(range(150)) / 150)
    assert report.train_last(tmp_path / "empty", 100) is None


def test_least_margin_is_the_worst_seed_against_the_threshold_with_its_share_of_the_scale():
    import render

    assert render.least_margin([500.0, 481.0, 490.0], 475.0) == "+6.0 (+1.3%)"
    assert render.least_margin([-150.0, -198.0, -160.0], -200.0) == "+2.0 (+1.0%)"
    assert render.least_margin([-150.0, -210.0], -200.0) == "-10.0 (-5.0%)"
    assert render.least_margin([], 475.0) == "-" and render.least_margin([1.0], None) == "-"
