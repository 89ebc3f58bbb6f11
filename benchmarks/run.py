"""Run a benchmark suite, or part of it: each run in its own process, several at once, resumable.

Every run is `python benchmarks/job.py <spec.json>`, `--workers` at a time, as local processes or a SLURM job
array (cluster.py); ok runs are skipped, stopped ones resumed. Details: benchmarks/README.md.
Exit status: 0 when every selected run is ok; 1 when any failed, or its script is missing; 2 bad input (one
line); 130 interrupted (Ctrl-C, or SIGTERM, passed on to the runs: they write a checkpoint and stop).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import NO_SUBMITIT, OneLineParser, add_slurm_flags, fail, flags_error, no_slurm  # noqa: E402
from job import Job, end_processes, fmt_time, print_end, stop_on_signals  # noqa: E402
from provenance import code_state  # noqa: E402
from suite import RESULTS_DIR, ROOT, SUITES_FILE, load_suite, load_suites, read_result, script_path  # noqa: E402

SMOKE_DIR = (
    ROOT / "runs" / "smoke"
)  # --total-timesteps without --results-dir: untracked (.gitignore's runs/)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(
        prog="benchmarks/run.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--suite", help=f"suite name in the suites file ({', '.join(load_suites())})")
    p.add_argument("--algos", nargs="+", help="only these algorithms")
    p.add_argument("--envs", nargs="+", help="only these env ids")
    p.add_argument("--seeds", nargs="+", type=int, help="these seeds instead of the cell's")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="runs at a time: local processes (one torch thread each), or the SLURM array's tasks running at once",
    )
    p.add_argument(
        "--backend",
        choices=("local", "slurm"),
        default="local",
        help="local: processes on this machine; slurm: a SLURM job array through submitit (pip install -r benchmarks/requirements-cluster.txt)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="env steps between each run's checkpoints (0: only when stopped by a signal); a stopped or killed run resumes from its last one",
    )
    p.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    p.add_argument("--force", action="store_true", help="run again even runs that are ok")
    p.add_argument(
        "--timeout",
        type=float,
        default=0,
        help="seconds before a run is stopped and recorded as failed (0: none)",
    )
    p.add_argument(
        "--status-every", type=float, default=30.0, help="seconds between progress lines"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the runs and what would happen to each, run nothing",
    )
    p.add_argument("--suites-file", default=str(SUITES_FILE), help=argparse.SUPPRESS)
    p.add_argument(
        "--results-dir",
        help=f"parent of the per-suite result folders (default {RESULTS_DIR.relative_to(ROOT)}, "
        f"or {SMOKE_DIR.relative_to(ROOT)} with --total-timesteps)",
    )
    p.add_argument(
        "--total-timesteps",
        type=int,
        metavar="N",
        help="smoke try: N env steps per run instead of the cell's budget (must be smaller); the runs get their "
        "own folders, are marked not comparable and never count toward a verdict",
    )
    add_slurm_flags(p)
    a = p.parse_args(argv)
    a.results_dir = a.results_dir or str(SMOKE_DIR if a.total_timesteps else RESULTS_DIR)
    error = (
        flags_error(a, workers=1, checkpoint_every=0, total_timesteps=1)
        if a.suite
        else "--suite is required"
    )
    if error:
        return fail("run", error)
    try:
        suite = load_suite(a.suite, a.suites_file)
    except SystemExit as e:  # an unknown suite or a malformed cell: suite.py's message
        return fail("run", e)
    if not suite.runnable:
        print(f"suite {suite.name} is declared but not runnable here: {suite.not_runnable_reason}")
        return 1
    selected = [
        (cell, seed)
        for cell in suite.cells
        if (not a.algos or cell.algo in a.algos) and (not a.envs or cell.env in a.envs)
        for seed in a.seeds or cell.seeds
    ]
    if not selected:
        print("nothing selected (check --algos / --envs against the suite)")
        return 1
    if a.total_timesteps:
        too_small = sorted(
            {f"{c.algo} {c.env} ({c.steps:,})" for c, _ in selected if c.steps <= a.total_timesteps}
        )
        if too_small:
            return fail(
                "run",
                f"--total-timesteps {a.total_timesteps:,} must be below the budget of every "
                f"selected cell: {', '.join(too_small)}",
            )
        selected = [(cell.with_budget(a.total_timesteps), seed) for cell, seed in selected]
        print(
            f"smoke try: {a.total_timesteps:,} env steps per run, not comparable: no report counts these runs"
        )

    todo, done_ok, known_failed, missing = [], [], [], []
    for cell, seed in selected:
        job = Job(suite.name, cell, seed, Path(a.results_dir))
        prev = read_result(job.dir)
        status = prev["status"] if prev else None
        if not script_path(cell.algo).exists():
            missing.append(job)
        elif status == "ok" and not a.force:
            done_ok.append(job)
        elif status == "failed" and not (a.retry_failed or a.force):
            known_failed.append((job, prev))
        else:
            job.fresh = a.force or status == "failed"
            todo.append(job)

    print(
        f"suite {suite.name}: {len(selected)} runs selected: {len(done_ok)} already ok, {len(known_failed)} failed before "
        f"(kept; --retry-failed runs them), {len(missing)} script missing, {len(todo)} to run with {a.workers} worker(s)"
        + (
            ""
            if a.backend == "local"
            else " on SLURM"
            if a.submitit_cluster == "slurm"
            else f" through submitit's {a.submitit_cluster} executor"
        )
    )
    for job in missing:
        print(f"  script missing: algos/{job.cell.algo}.py ({job.label}) - not run")
    for job, prev in known_failed:
        print(f"  failed before: {job.label}: {prev.get('error')}  [{job.dir}]")
    if a.dry_run:
        for job in todo:
            resume = None if job.fresh else job.checkpointed()
            what = f"resume from its checkpoint in {resume}" if resume else f"run: {job.label}"
            print(
                f"  would {what} ({job.cell.steps:,} steps, settings {job.cell.settings or 'defaults'}) -> {job.dir}"
            )
        return 0
    if a.backend == "slurm":
        try:
            import cluster  # submitit: only this backend needs it
        except ImportError as e:
            return fail("run", NO_SUBMITIT.format(e))
        if problem := no_slurm(a.submitit_cluster):
            return fail("run", problem)
    start = time.time()
    with stop_on_signals():  # SIGTERM too: the runs are stopped (with a checkpoint), not left going
        ran = (
            cluster.run_jobs(suite.name, todo, a)
            if a.backend == "slurm"
            else run_local(todo, a, start)
        )
    return (
        130 if ran is None else closing(suite.name, a, ran, done_ok, known_failed, missing, start)
    )


def run_local(
    todo: list[Job], a: argparse.Namespace, start: float
) -> list[tuple[Job, dict]] | None:
    """Run the runs as processes here, `--workers` at a time; (job, result) per run, None if interrupted."""
    pending, running, finished = list(todo), [], []
    last_status = 0.0

    def status_line() -> str:
        parts = []
        for job in running:
            frac = job.progress()
            left = job.eta(frac)
            eta = f" ETA {fmt_time(left)}" if left is not None else ""
            parts.append(f"{job.label} {100 * frac:.0f}%{eta}")
        ok = sum(r["status"] == "ok" for _, r in finished)
        return (
            f"[{time.strftime('%H:%M:%S')} +{fmt_time(time.time() - start)}] {len(finished)}/{len(todo)} finished "
            f"({ok} ok, {len(finished) - ok} not ok), {len(pending)} waiting; running: {'; '.join(parts) or '-'}"
        )

    try:
        while pending or running:
            while pending and len(running) < a.workers:
                job = pending.pop(0)
                running.append(
                    job
                )  # before its process exists: a stop that comes while it starts still stops it
                job.start(
                    code_state(), a.checkpoint_every, job.fresh
                )  # per run: the code may change while a long sweep runs
                print(
                    f"[{time.strftime('%H:%M:%S')}] {'resume' if job.resumed_from else 'start '} {job.label} "
                    f"({job.cell.steps:,} steps) -> {job.dir}",
                    flush=True,
                )
            time.sleep(0.2)
            for job in list(running):
                timed_out = (
                    a.timeout and job.proc.poll() is None and time.time() - job.started > a.timeout
                )
                if timed_out:
                    end_processes([job.proc], signal.SIGTERM, 30)
                if job.proc.poll() is None:
                    continue
                running.remove(job)
                result = job.finish()
                if (
                    timed_out
                ):  # stopped by SIGTERM: with a checkpoint written, it goes on from there next time
                    resumable = result["status"] == "preempted" and job.checkpointed() is not None
                    error = f"timed out after {a.timeout:.0f} s (--timeout)"
                    result.update(
                        status="preempted" if resumable else "failed",
                        error=error
                        + ("; it resumes from its checkpoint next time" if resumable else ""),
                    )
                    (job.dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
                finished.append((job, result))
                print_end(job, result)
            if time.time() - last_status > a.status_every and running:
                print(status_line(), flush=True)
                last_status = time.time()
    except KeyboardInterrupt:
        print(
            "\ninterrupted: stopping the running runs (next time they resume from a checkpoint where they wrote one, "
            "else start over)",
            flush=True,
        )
        started = [job for job in running if job.proc is not None]
        end_processes([job.proc for job in started], signal.SIGTERM, 30)
        for job in started:
            job.log.close()
        return None
    return finished


def closing(
    suite: str, a: argparse.Namespace, finished, done_ok, known_failed, missing, start: float
) -> int:
    """The sweep's last lines (either backend): what ran, what failed, the report command; the exit status."""
    failed = [(j, r) for j, r in finished if r["status"] != "ok"] + known_failed
    print(
        f"\nsuite {suite}: {sum(r['status'] == 'ok' for _, r in finished)} ran ok, {len(done_ok)} were already ok, "
        f"{len(failed)} failed, {len(missing)} script missing; {fmt_time(time.time() - start)}"
    )
    for job, r in failed:
        print(f"  FAILED {job.label}: {r.get('error')}  (log: {job.dir / 'log.txt'})")
    for job in missing:
        print(f"  MISSING algos/{job.cell.algo}.py: {job.label} not run")
    if (
        a.total_timesteps
    ):  # no report counts a smoke try: say what it is for and where its results are
        runs = Path(a.results_dir) / suite / "runs"
        print(
            f"smoke try: it checks that the selected cells run end to end; no report counts it. Each run's figures: "
            f"{runs}/<run>/result.json (status, the script's summary) and its run folder (metrics.csv, summary.json)"
        )
    else:  # the report command, with the runner's --suites-file and --results-dir where not the defaults
        flags = {
            "--suites-file": (a.suites_file, SUITES_FILE),
            "--results-dir": (a.results_dir, RESULTS_DIR),
        }
        print(
            f"report: python benchmarks/report.py --suite {suite}"
            + "".join(
                f" {k} {v}"
                for k, (v, default) in flags.items()
                if Path(v).resolve() != default.resolve()
            )
        )
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
