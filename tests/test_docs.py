"""The documents a user reads: their links resolve, their commands run, and they speak about the project."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run  # noqa: E402
from suite import load_suite  # noqa: E402

PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "algorithms").glob("*.md")),
]  # the README and the pages it links by subject and by script
DOCS = [
    *PAGES,
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "benchmarks" / "results").glob("*.md")),
    *sorted((ROOT / "benchmarks" / "results").glob("*/REPORT.md")),
    *sorted((ROOT / "benchmarks" / "results").glob("*/superseded/README.md")),
]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        return [ROOT / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):  # not a git checkout: every file
        return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]


def test_the_documents_exist():
    for doc in DOCS:
        assert doc.exists(), doc
    assert len(DOCS) >= 10


def test_every_relative_link_in_the_documents_resolves():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith(
                "#"
            ):  # web links and anchors in the same page
                continue
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


# Docs speak to users about the project: no work items, work periods or internal targets.
WORDING = re.compile(
    r"\bissues? ?#?\d|\bissue #|results_issue|results/issue\d|target:? *\**not met|\*\*not met|"
    r"REFERENCES\.md|\bsession\b|other helpers",
    re.IGNORECASE,
)
TEXT = {".md", ".py", ".toml", ".txt", ".json", ".cfg", ".yml", ".yaml", ".sh", ".ini", ""}


def test_no_work_item_wording_in_docs_suites_or_code():
    found = []
    for path in tracked_files():
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "tests" or path.suffix not in TEXT or not path.is_file():
            continue
        if path.suffix == ".log" or (
            path.name == "log.txt" and "runs" in rel.parts
        ):  # raw output of past runs
            continue
        text = path.read_text(errors="ignore")
        for m in WORDING.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{rel}:{line}: {m.group(0)!r}")
    assert not found, found


def test_the_wording_check_can_fail():
    for bad in (
        "see issue 2",
        "Issue #7",
        "benchmarks/results_issue5.md",
        "target: not met",
        "3x SB3: **not met**",
        "REFERENCES.md",
        "in the previous session",
    ):
        assert WORDING.search(bad), bad
    for fine in (
        "known issues",
        "a target network",
        "the env's reward_threshold",
        "references.toml",
    ):
        assert not WORDING.search(fine), fine


def readme_block(heading: str, page: str = "README.md") -> str:
    """The first bash block after `heading` in the README (or in another page, e.g. docs/tools.md)."""
    text = (ROOT / page).read_text()
    section = text[text.index(heading) :]
    return section[
        section.index("```bash") + 7 : section.index("```", section.index("```bash") + 7)
    ]


@pytest.mark.slow
def test_readme_quick_start_runs_and_evaluate_scores_its_run_folder(tmp_path):
    """The quick start's train command with a tiny budget (exit 0, a run folder with model.pt), then
    tools/evaluate.py on that folder, as the README shows them."""
    block = readme_block("## Quick start")
    train = next(
        x for x in block.splitlines() if x.startswith("python algos/dqn.py --env CartPole-v1")
    )
    assert "--save-model" in train and any(
        x.startswith("python tools/evaluate.py runs/") for x in block.splitlines()
    )
    argv = shlex.split(train.split("#")[0])[1:] + [
        "--total-timesteps",
        "2000",
        "--learning-starts",
        "500",
        "--run-dir",
        str(tmp_path),
        "--no-progress",
    ]
    r = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith("CartPole-v1__dqn__1__") and (folder / "model.pt").exists()
    r = subprocess.run(
        [sys.executable, "tools/evaluate.py", str(folder), "--episodes", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "over 3 episodes" in r.stdout


def test_readme_tensorboard_commands_follow_from_the_quick_start():
    """Each command of the TensorBoard block (docs/tools.md, after the README's quick start) reads run
    folders that a command before it writes: the export takes runs trained without --tensorboard,
    tools/plot.py runs that exist."""
    trained = {}  # seed -> trained with --tensorboard, for every dqn CartPole-v1 command up to here
    for block in (
        readme_block("## Quick start"),
        readme_block("## TensorBoard and plots", "docs/tools.md"),
    ):
        for line in block.splitlines():
            argv = shlex.split(line.split("#")[0])
            if argv[:2] == ["python", "algos/dqn.py"] and "--help" not in argv:
                seed = argv[argv.index("--seed") + 1] if "--seed" in argv else "1"
                trained[seed] = trained.get(seed, False) or "--tensorboard" in argv
            elif argv[:2] in (
                ["python", "tools/tensorboard_export.py"],
                ["python", "tools/plot.py"],
            ):
                folders = [a for a in argv[2:] if a.startswith("runs/")]
                assert folders, line
                for folder in folders:
                    env, algo, seed = folder.split("/")[1].split("__")[:3]
                    assert (env, algo) == ("CartPole-v1", "dqn"), line
                    seeds = list(trained) if seed == "*" else [seed]
                    assert seeds and all(s in trained for s in seeds), (line, trained)
                    if argv[1] == "tools/tensorboard_export.py":
                        assert not any(trained[s] for s in seeds), (
                            f"{line}: exports a run that --tensorboard already wrote"
                        )
    assert any(trained.values()), "the block shows --tensorboard too"


def test_the_readme_links_every_docs_page_and_names_every_extra():
    """The README is the front page: each docs/ page is one link away, and each extra is named where
    it is needed (an env family, a flag)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for page in PAGES[1:]:
        rel = page.relative_to(ROOT).as_posix()
        assert f"]({rel}" in text, f"the README does not link {rel}"
    for extra, where in (
        ("requirements/requirements-box2d.txt", "LunarLander"),
        ("requirements/requirements-mujoco.txt", "HalfCheetah"),
        ("requirements/requirements-video.txt", "--capture-video"),
        ("requirements/requirements-pixels.txt", "MinAtar"),
        ("requirements/requirements-viz.txt", "--tensorboard"),
    ):
        assert (ROOT / extra).exists(), extra
        line = next((x for x in text.splitlines() if f"pip install -r {extra}" in x), "")
        assert where in line, f"the README's install line for {extra} should say it is for {where}"


def test_the_readme_carries_no_dates_outside_links():
    """Dates belong to the results pages and the reports (the README links them)."""
    text = re.sub(r"\]\([^)]*\)", "]()", (ROOT / "README.md").read_text())
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text)


def test_the_core_requirements_are_the_core():
    """requirements.txt installs what `python algos/dqn.py --env CartPole-v1` needs and nothing
    else; each extra's packages sit in its own file, and requirements/requirements-dev.txt (CI) installs them all."""

    def reqs(name: str) -> set[str]:
        out = set()
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("-r "):
                out |= reqs(str((ROOT / name).parent.relative_to(ROOT) / line[3:].strip()))
            elif line:
                out.add(re.split(r"[<>=!~ ]", line)[0].lower())
        return out

    core = reqs("requirements.txt")
    assert core == {"torch", "gymnasium[classic-control]", "numpy", "tyro", "wandb"}, core
    assert "torch==2.13.0" in (ROOT / "requirements.txt").read_text()
    dev = reqs("requirements/requirements-dev.txt")
    for extra, package in (
        ("requirements/requirements-box2d.txt", "gymnasium[box2d]"),
        ("requirements/requirements-mujoco.txt", "gymnasium[mujoco]"),
        ("requirements/requirements-video.txt", "moviepy"),
        ("requirements/requirements-pixels.txt", "minatar"),
        ("requirements/requirements-viz.txt", "tensorboard"),
        ("benchmarks/requirements-cluster.txt", "optuna"),
    ):
        assert package in reqs(extra) and package in dev, (extra, package)
    others = [
        ROOT / "requirements.txt",
        *(f for f in (ROOT / "requirements").glob("*.txt") if f.name != "requirements-dev.txt"),
    ]
    assert "pytest" in dev and not any("pytest" in reqs(str(f.relative_to(ROOT))) for f in others)


def code_blocks(page: Path) -> list[str]:
    """The commands of a page's bash blocks, continued lines joined, comments dropped."""
    text = page.read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_every_script_command_the_pages_show_parses():
    """Every `python algos/<script>.py ...` (or torchrun ... algos/<script>.py ...) in a bash block of
    the README and docs/*.md names a script that exists and gives flags that script accepts; every
    other `python <file>` names a file that exists."""
    import importlib

    import tyro

    sys.path[:0] = [str(ROOT / "algos"), str(ROOT)]
    checked = 0
    for page in PAGES:
        for line in code_blocks(page):
            argv = shlex.split(line.split(" #")[0])
            while argv and re.fullmatch(
                r"[A-Z_]+=\S*", argv[0]
            ):  # an environment variable before the command
                argv = argv[1:]
            if not argv or argv[0] not in ("python", "torchrun"):
                continue
            script = next((a for a in argv[1:] if a.endswith(".py")), None)
            if script is None:  # python -m pytest ...
                continue
            assert (ROOT / script).exists(), f"{page.relative_to(ROOT)}: {line}: no {script}"
            if script.startswith("algos/") and "--help" not in argv:
                args = argv[argv.index(script) + 1 :]
                module = importlib.import_module(Path(script).stem)
                tyro.cli(module.Args, args=args)
                checked += 1
    assert checked >= 8, checked


def test_readme_benchmark_command_runs_the_cell_in_a_new_folder(tmp_path, capsys):
    """The committed results count as done: the README's command must still have something to run."""
    line = next(
        x
        for x in readme_block("## Benchmarks").splitlines()
        if x.startswith("python benchmarks/run.py")
    )
    argv = shlex.split(line.split("#")[0])[2:]
    assert "--results-dir" in argv
    argv[argv.index("--results-dir") + 1] = str(tmp_path / "my_results")
    assert run.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    seeds = next(
        c.seeds for c in load_suite("classic").cells if (c.algo, c.env) == ("dqn", "CartPole-v1")
    )
    assert len(seeds) >= 3  # every seed of the cell, none skipped as done
    assert (
        "0 already ok" in out
        and f"{len(seeds)} to run" in out
        and out.count("would run: dqn CartPole-v1") == len(seeds)
    )


def test_readme_test_commands_are_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    tests_section = readme_block("## Tests")
    for command in (
        "pip install -r requirements/requirements-dev.txt",
        "python -m pytest -q tests",
    ):
        assert command in tests_section and command in ci


def test_readme_gives_the_fast_subset_and_the_marker_is_registered(pytestconfig):
    text = (ROOT / "README.md").read_text()
    tests_section = text[text.index("## Tests") :]
    assert 'python -m pytest -q -m "not slow" tests' in tests_section
    assert any(line.startswith("slow:") for line in pytestconfig.getini("markers"))


ALGO_PAGES = sorted((ROOT / "docs" / "algorithms").glob("*.md"))
SCRIPTS = sorted(p.stem for p in (ROOT / "algos").glob("*.py"))
# [`name`](../../algos/dqn.py#L120) or #L120-L140: `name` must be on line 120 of that file
LINE_LINK = re.compile(
    r"\[`([^`]+)`[^\]]*\]\(((?:\.\./)+(?:algos|common|harness)/[\w/]+\.py)#L(\d+)(?:-L(\d+))?\)"
)


def test_every_script_has_a_page_linked_from_the_readme():
    assert [p.stem for p in ALGO_PAGES] == SCRIPTS
    text = (ROOT / "README.md").read_text()
    for script in SCRIPTS:
        assert f"](docs/algorithms/{script}.md)" in text, (
            f"the README's algorithm table should link {script}.md"
        )


def line_link_errors(page: Path) -> list[str]:
    """Each line link's quoted name missing from the line it points at, with where the name is now."""
    errors = []
    for name, target, start, end in LINE_LINK.findall(page.read_text()):
        path = (page.parent / target).resolve()
        lines = path.read_text().splitlines()
        start = int(start)
        if not 1 <= start <= len(lines) or name not in lines[start - 1]:
            now = [i + 1 for i, line in enumerate(lines) if name in line]
            errors.append(
                f"{page.name}: `{name}` is not on {target}#L{start} (it is on lines {now[:5]})"
            )
        elif end and not start < int(end) <= len(lines):
            errors.append(f"{page.name}: {target}#L{start}-L{end} is not a range of the file")
    return errors


def test_every_line_link_of_the_algorithm_pages_points_at_what_it_names():
    """A page's implementation details link script lines, each with a name or a short quote in backticks
    that the linked line holds: an edit that moves the lines fails here, naming where they went."""
    counted = 0
    for page in ALGO_PAGES:
        links = LINE_LINK.findall(page.read_text())
        assert len(links) >= 5, f"{page.name}: its implementation details link the script's lines"
        counted += len(links)
    errors = [e for page in ALGO_PAGES for e in line_link_errors(page)]
    assert not errors, "\n".join(errors)


def test_a_line_link_that_moved_is_caught(tmp_path):
    page = tmp_path / "docs" / "algorithms" / "x.md"
    page.parent.mkdir(parents=True)
    (tmp_path / "algos").mkdir()
    (tmp_path / "algos" / "x.py").write_text("import torch\n\n\ndef dqn_loss():\n    pass\n")
    page.write_text(
        "[`dqn_loss`](../../algos/x.py#L4) and [`import torch`](../../algos/x.py#L1-L2)\n"
    )
    assert line_link_errors(page) == []
    page.write_text("[`dqn_loss`](../../algos/x.py#L3)\n")
    assert line_link_errors(page) == [
        "x.md: `dqn_loss` is not on ../../algos/x.py#L3 (it is on lines [4])"
    ]


def script_columns(module) -> list[str]:
    """metrics.csv's columns as the script's train() declares them to Run (caught before a run starts)."""

    class Declared(Exception):
        pass

    def capture(algo, args, fields, *rest, **kwargs):
        raise Declared(fields)

    original, module.Run = module.Run, capture
    try:
        module.train(module.Args())
    except Declared as e:
        fields = e.args[0]
    finally:
        module.Run = original
    return ["global_step", "wall_seconds", *(fields.split() if isinstance(fields, str) else fields)]


def test_every_algorithm_page_names_its_metrics_and_flags():
    """A page says what each of metrics.csv's columns holds (the columns the script declares), and each
    `--flag` it names is one of the script's flags."""
    import dataclasses
    import importlib

    sys.path[:0] = [str(ROOT / "algos"), str(ROOT)]
    for page in ALGO_PAGES:
        text = page.read_text()
        module = importlib.import_module(page.stem)
        for column in script_columns(module):
            assert f"`{column}`" in text, (
                f"{page.name} does not say what metrics.csv's {column} holds"
            )
        flags = {"--env", "--help"}
        for f in dataclasses.fields(module.Args):
            flags |= {"--" + f.name.replace("_", "-"), "--no-" + f.name.replace("_", "-")}
        for flag in set(re.findall(r"`(--[a-z][a-z0-9-]*)", text)):
            assert flag in flags, f"{page.name}: {flag} is not a flag of algos/{page.stem}.py"


# docs/ says what holds and links to where it was measured: when, on which commit and beside what load a
# figure was measured belong to the lab notes (benchmarks/results/*.md) and the suites' reports.
MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
    r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
DATED = {
    "a date": re.compile(
        rf"\b20\d\d-\d\d-\d\d\b|\b{MONTH} (?:[0-3]?\d(?:st|nd|rd|th)?|20\d\d)\b|\b[0-3]?\d {MONTH} 20\d\d\b"
    ),
    "a commit": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    "a remark on the machine's load": re.compile(
        r"\b(?:busy|idle|quiet)\b(?: [\w-]+)?? (?:machine|CPU|VM|box|cores?)\b|\bmachine (?:was|is) (?:busy|idle|quiet)"
        r"|\bother (?:benchmark )?(?:processes|runs|jobs)\b|\bload average\b|\bunder load\b",
        re.IGNORECASE,
    ),
}


def dated(text: str) -> list[str]:
    """What a docs page must not carry outside its link targets: dates, commit hashes, load remarks."""
    text = re.sub(r"\]\([^)]*\)", "]()", text)
    return [
        f"{what}: {m.group(0)!r}" for what, pattern in DATED.items() for m in pattern.finditer(text)
    ]


def test_the_docs_pages_carry_no_dates_hashes_or_load_remarks():
    """The docs say what holds and link the lab notes and reports, which say when and on what it was measured."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text()
        for line_number, line in enumerate(text.splitlines(), 1):
            found += [f"{page.relative_to(ROOT)}:{line_number}: {hit}" for hit in dated(line)]
    assert not found, "\n".join(found)


def test_the_docs_check_can_fail():
    for bad in (
        "seeds 1-5 ended at 4,997 (2026-11-26)",
        "measured on Nov 28",
        "in November 2026",
        "on 28 Nov 2026",
        "code 34bc63b to 017ef93",
        "CleanRL at commit fe8d8a03",
        "frames per CPU second, busy machine (two other benchmark processes)",
        "2026-11-28, an idle 2-core x86_64 VM",
        "CPU time, because the 2-core machine was busy with other runs",
        "degrades gracefully under load",
    ):
        assert dated(bad), bad
    for fine in (
        "[raw](../benchmarks/results/speed/profiles_dqn_2026-11-25.txt)",
        "[notes](../benchmarks/results/speed.md#dqn-against-cleanrls-dqnpy-2026-11-25)",
        "on a 2-core CPU, an AMD EPYC or an Intel Xeon with AVX-512",
        "beside two CPU-bound processes",
        "a step size of 2.5e-4 decayed to 0 over 1,000,000 steps",
        "BreakoutNoFrameskip-v4, seeds 1-10, Table 1",
        "a run folder such as `ddpg__Pendulum-v1__s1__8ae03d02` (its settings hash)",
        "deadbeef 1234567",
        "Decay 20% of the steps",
    ):
        assert not dated(fine), fine


def test_the_suite_times_in_results_md_are_the_reports():
    """docs/results.md's "How long a suite takes" gives each suite's run time as its report's Time section
    measures it: a suite re-run moves the report's figure, and this fails until the page follows."""
    text = (ROOT / "docs" / "results.md").read_text()
    section = text[text.index("## How long a suite takes") :]
    figures = re.findall(
        r"\(\.\./benchmarks/results/(\w+)/REPORT\.md#time\) ([\d.]+ (?:h|min))", section
    )
    assert len(figures) >= 5, figures
    for suite, figure in figures:
        report = (ROOT / "benchmarks" / "results" / suite / "REPORT.md").read_text()
        measured = re.search(r"Measured: ([\d.]+ (?:h|min)) of run time", report)
        assert measured and measured.group(1) == figure, (
            f"results.md gives {suite} {figure}, its report {measured and measured.group(1)}"
        )


def test_the_summary_keys_the_documents_name_exist():
    """Each `summary.json`'s `KEY` in the README, docs/ and benchmarks/README.md is a key a run writes."""
    keys = set()
    for summary in (ROOT / "benchmarks" / "results" / "defaults" / "runs").glob("*/*/summary.json"):
        keys |= set(json.loads(summary.read_text()))
    assert {"eval_return_mean", "wall_seconds", "machine"} <= keys
    named = []
    for page in [*PAGES, ROOT / "benchmarks" / "README.md"]:
        named += [
            (page.name, k) for k in re.findall(r"summary\.json`?'s `(\w+)`", page.read_text())
        ]
    assert named
    assert [n for n in named if n[1] not in keys] == []
