"""SLURM for run.py and tune.py, through submitit (pip install -r benchmarks/requirements-cluster.txt).

A run is one task of a SLURM job array (`CellTask`), a tuning worker too (`StudyTask`); on SIGUSR2 (time
limit, preemption) submitit calls `checkpoint`, which stops the run at a checkpoint and requeues the task.
Details: benchmarks/README.md, "On a SLURM cluster".
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path

import submitit
from job import Job, end_processes, print_end  # the same Job as the local backend
from provenance import code_state
from suite import BENCH, Cell, read_result


def make_executor(a, folder: Path, name: str, parallel: int) -> submitit.AutoExecutor:
    """submitit's executor for the --submitit-cluster, with the time limit, partition, CPUs and the array's parallelism."""
    # the tasks unpickle CellTask and StudyTask (and the function a StudyTask runs) by module name, from benchmarks/
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    executor = submitit.AutoExecutor(folder=folder, cluster=a.submitit_cluster)
    params = dict(name=name, timeout_min=a.time_limit, cpus_per_task=a.cpus_per_task)
    if a.submitit_cluster == "slurm":
        params.update(slurm_array_parallelism=parallel, slurm_partition=a.partition)
        if a.slurm_option:
            params["slurm_additional_parameters"] = dict(x.split("=", 1) for x in a.slurm_option)
    executor.update_parameters(**params)
    return executor


class CellTask(submitit.helpers.Checkpointable):
    """One run (cell, seed) as a SLURM task: skipped when already ok, resumed from its checkpoint, requeued when stopped."""

    def __init__(
        self, suite: str, cell: Cell, seed: int, results: str, checkpoint_every: int, fresh: bool
    ):
        self.suite, self.cell, self.seed, self.results = suite, cell, seed, results
        self.checkpoint_every, self.fresh = checkpoint_every, fresh
        self._job: Job | None = None

    def __call__(self) -> dict:
        job = Job(self.suite, self.cell, self.seed, Path(self.results))
        prev = read_result(job.dir)
        if prev and prev["status"] == "ok" and not self.fresh:
            return prev  # a requeued task whose run had already finished
        self._job = job
        job.start(code_state(), self.checkpoint_every, self.fresh)
        try:
            while (
                job.proc.poll() is None
            ):  # polled, not wait(): checkpoint() waits on the same process from a signal handler
                time.sleep(0.5)
        finally:  # the task is being ended (cancelled, or checkpoint() ran): the run checkpoints first (SIGUSR1)
            end_processes([job.proc], signal.SIGUSR1, 60, 10)
        return job.finish()

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """Called by submitit on SIGUSR2 (time limit or preemption): stop the run at a checkpoint, requeue to resume it."""
        job = self._job
        if job is not None and job.proc is not None:
            end_processes([job.proc], signal.SIGUSR1, 60, 10)
            job.finish()
        print(
            f"[cluster] {self.cell.algo} {self.cell.env} s{self.seed}: stopped at a checkpoint, requeued",
            flush=True,
        )
        return submitit.helpers.DelayedSubmission(
            CellTask(
                self.suite, self.cell, self.seed, self.results, self.checkpoint_every, fresh=False
            )
        )


class StudyTask(submitit.helpers.Checkpointable):
    """One worker of a tuning study as a SLURM task: `work(config, worker, state, interrupted_trial)`
    (tune.py's worker loop, handed in by tune.py); requeued when stopped, its trial tried again."""

    def __init__(self, work, config: dict, worker: int, interrupted_trial: int | None = None):
        self.work, self.config, self.worker, self.interrupted_trial = (
            work,
            config,
            worker,
            interrupted_trial,
        )
        self._state: dict = {}  # the worker keeps the running trial ("trial") and its run's process ("proc") here

    def __call__(self) -> int:
        return self.work(self.config, self.worker, self._state, self.interrupted_trial)

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """Called by submitit on SIGUSR2: end the trial's run (trials are not resumed) and requeue the worker."""
        if (
            self._state.get("proc") is not None
        ):  # a trial's run is not resumed: its parameters are tried again
            end_processes([self._state["proc"]], signal.SIGKILL, 10)
        return submitit.helpers.DelayedSubmission(
            StudyTask(self.work, self.config, self.worker, self._state.get("trial"))
        )


def _failure(sj) -> str:
    """What submitit knows about a task that ended without a result (its exception's first line)."""
    try:
        e = sj.exception()
    except Exception as err:  # noqa: BLE001 - anything submitit raises here is the answer
        e = err
    return (
        (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        if e
        else f"submitit state {sj.state}"
    )


def cancel(jobs: list) -> None:
    """Cancel submitit jobs (Ctrl-C); one line for each that could not be."""
    for sj in jobs:
        try:
            sj.cancel(check=False)
        except Exception:  # noqa: BLE001 - cancel what can be cancelled, say what could not
            print(
                f"  could not cancel {sj.job_id}: {traceback.format_exc().splitlines()[-1]}",
                file=sys.stderr,
            )


def wait_for(jobs: list, poll: float) -> None:
    """Until every tuning worker's job has ended (Ctrl-C cancels them); a worker that failed is one line."""
    try:
        while not all(j.done() for j in jobs):
            time.sleep(poll)
    except KeyboardInterrupt:
        cancel(jobs)
        raise
    for j in jobs:
        if j.exception() is not None:
            print(f"worker {j.job_id} failed: {_failure(j)} (log: {j.paths.stderr})", flush=True)


def run_jobs(suite: str, todo: list[Job], a) -> list[tuple[Job, dict]] | None:
    """Run run.py's selected runs as submitit tasks and wait for them; (job, result) per run, None if interrupted."""
    if not todo:
        return []
    folder = Path(a.submitit_dir or Path(a.results_dir) / suite / "submitit")
    executor = make_executor(a, folder, f"bench-{suite}", a.workers)
    tasks = [
        CellTask(j.suite, j.cell, j.seed, a.results_dir, a.checkpoint_every, j.fresh) for j in todo
    ]
    submitted: dict[int, object] = {}
    pending = list(range(len(todo)))
    if a.submitit_cluster == "slurm":  # one array, `--workers` tasks at a time
        submitted, pending = dict(enumerate(executor.submit_array(tasks))), []
        print(
            f"submitted {len(tasks)} runs as SLURM array job {submitted[0].job_id.split('_')[0]} ({a.workers} at a time, "
            f"{a.time_limit} min per task, requeued to resume where a run outlives it); submitit files: {folder}",
            flush=True,
        )
    finished, done = [], set()
    last_status, poll = time.time(), 5.0 if a.submitit_cluster == "slurm" else 0.5
    try:
        while len(done) < len(todo):
            while (
                pending and len(submitted) - len(done) < a.workers
            ):  # submitit's local executor would start every job at once
                i = pending.pop(0)
                submitted[i] = executor.submit(tasks[i])
                print(
                    f"[{time.strftime('%H:%M:%S')}] submit {todo[i].label} -> {todo[i].dir}",
                    flush=True,
                )
            for i, sj in list(submitted.items()):
                if i in done or not sj.done():
                    continue
                done.add(i)
                job = todo[i]
                result = read_result(job.dir)
                if result is None:  # the task itself died (node failure, out of memory, cancelled)
                    result = job.died(f"its SLURM task ended without a result: {_failure(sj)}")
                elif result["status"] not in ("ok", "failed", "killed"):  # stopped, not requeued
                    result = {
                        **result,
                        "error": f"stopped ({result['status']}) and not requeued ({_failure(sj)}); "
                        "run the same command again to resume it",
                    }
                finished.append((job, result))
                print_end(job, result)
            if time.time() - last_status > a.status_every and len(done) < len(todo):
                running = [
                    f"{todo[i].label} {100 * todo[i].progress():.0f}%"
                    for i in submitted
                    if i not in done
                ]
                print(
                    f"[{time.strftime('%H:%M:%S')}] {len(done)}/{len(todo)} finished, {len(pending)} not submitted yet; "
                    f"not finished: {'; '.join(running) or '-'}",
                    flush=True,
                )
                last_status = time.time()
            time.sleep(poll)
    except KeyboardInterrupt:
        print(
            "\ninterrupted: cancelling the tasks (runs that wrote a checkpoint resume from it next time)",
            flush=True,
        )
        cancel([sj for i, sj in submitted.items() if i not in done])
        return None
    return finished
