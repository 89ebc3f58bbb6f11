"""Turn a suite's results into its REPORT.md and learning curves, and the README's result tables.

Writes benchmarks/results/<suite>/REPORT.md and plots/*.png (`--suite`), or the README's and the algorithm
pages' tables (`--readme`).
What it shows and which runs count: benchmarks/README.md, "The report".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# also the parts' names most used from here (tests, notebooks): report.verdict, report.bootstrap_ci, ...
from provenance import CODE_DIRS, Checker, code_state  # noqa: E402
from render import (  # noqa: E402,F401
    ALGO_MARKER,
    ALGO_PAGES,
    MARKER,
    README,
    algo_page_text,
    fmt_eval,
    readme_text,
    report_text,
    train_last,
)
from selection import BOOTSTRAP_SEED, Judged, bootstrap_ci, iqm, judge_suite, verdict  # noqa: E402,F401
from suite import RESULTS_DIR, ROOT, SUITES_FILE, load_references, load_suite  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", help="the suite to report (required unless --readme)")
    p.add_argument(
        "--algos", nargs="+", help="list only these algorithms' cells (with runs or not)"
    )
    p.add_argument("--envs", nargs="+", help="list only these envs' cells (with runs or not)")
    p.add_argument(
        "--readme",
        action="store_true",
        help="rewrite the README's result tables (between <!-- results:SUITE:start --> and end) and the algorithm "
        "pages' (docs/algorithms/*.md, between <!-- algo-results:ALGO:start --> and end) from the committed runs",
    )
    p.add_argument("--suites-file", default=str(SUITES_FILE), help=argparse.SUPPRESS)
    p.add_argument("--results-dir", default=str(RESULTS_DIR))
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args(argv)
    if a.readme:
        text = README.read_text()
        new = readme_text(text, Path(a.results_dir), a.suites_file)
        blocks = [m.group(2) for m in MARKER.finditer(text)]
        README.write_text(new)
        print(
            f"{'rewrote' if new != text else 'unchanged:'} {README}'s result tables for {', '.join(blocks) or 'no suite (no markers)'}"
        )
        for page in sorted(ALGO_PAGES.glob("*.md")):
            text = page.read_text()
            new = algo_page_text(text, Path(a.results_dir), a.suites_file)
            page.write_text(new)
            algos = (
                ", ".join(m.group(2) for m in ALGO_MARKER.finditer(text))
                or "no script (no markers)"
            )
            print(f"{'rewrote' if new != text else 'unchanged:'} {page}'s results for {algos}")
    if not a.suite:
        return 0 if a.readme else p.error("--suite is required (or --readme)")

    suite = load_suite(a.suite, a.suites_file)
    results_dir = Path(a.results_dir)
    out_dir = results_dir / suite.name
    out_dir.mkdir(parents=True, exist_ok=True)
    checker = Checker()
    if checker.head is None:
        print(f"report: {checker.error}: every run shows as stale", file=sys.stderr)
    elif (dirty := code_state()).get("dirty"):
        print(
            f"report: uncommitted changes under {', '.join(CODE_DIRS)} ({len(dirty['dirty_files'])} files): runs are "
            "judged against the last commit's files, not these",
            file=sys.stderr,
        )
    judged, left_out = judge_suite(suite, out_dir / "runs", checker, a.algos, a.envs)
    selection = "".join(
        f" --{k} {' '.join(v)}" for k, v in (("algos", a.algos), ("envs", a.envs)) if v
    )
    folder = ""  # the title's command names the folder it read, where not the default
    if results_dir.resolve() != RESULTS_DIR.resolve():
        where = results_dir.resolve()
        folder = f" --results-dir {where.relative_to(ROOT) if where.is_relative_to(ROOT) else a.results_dir}"
    text, counts, plots = report_text(
        suite, results_dir, judged, left_out, load_references(), not a.no_plots, selection + folder
    )
    if (
        not a.no_plots and not selection
    ):  # a plot of a cell no longer listed would stay beside the report
        drawn = {f"{j.cell.slug}.png" for j in judged if j.shown}
        for png in (out_dir / "plots").glob("*.png"):
            if png.name not in drawn:
                png.unlink()
    report = out_dir / "REPORT.md"
    report.write_text(text)
    print(
        f"wrote {report} ({counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['partial']} partial, {counts['stale']} stale, "
        f"{counts['n/a']} n/a; {plots} plots)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
