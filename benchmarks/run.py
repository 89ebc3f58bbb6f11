"""Run a benchmark suite, or part of it: each run in its own process, several at once, resumable.

    python benchmarks/run.py --suite classic                          # the whole suite
    python benchmarks/run.py --suite classic --algos dqn --envs CartPole-v1 --seeds 1
    python benchmarks/run.py --suite classic --workers 2              # two runs at a time
    python benchmarks/run.py --suite classic --dry-run                # what would run, and why not
    python benchmarks/run.py --suite classic --algos dqn --envs CartPole-v1 --results-dir my_results   # into a new folder
    python benchmarks/run.py --suite classic --backend slurm --partition cpu --time-limit 60 --workers 32 --checkpoint-every 50000

Every run is `python benchmarks/run.py --child <spec.json>` in a fresh process, which imports
algos/<algo>.py and calls `train(Args(...))` with the cell's settings; its output goes to log.txt
and its outcome to result.json in the run folder (layout in benchmarks/suite.py).

Backends: `local` (the default) keeps `--workers` runs going as local processes; `slurm` hands
each run to a SLURM job array through submitit (benchmarks/cluster.py: one run per array task,
`--workers` tasks at a time), which starts the same child process on a compute node, and waits
for the array. Both write the same run folders, so report.py reads them alike.

Resume: a run whose result.json says "ok" for the same settings hash is not run again. A run
that was stopped (Ctrl-C, SIGTERM, a SLURM time limit or preemption) or killed after writing a
checkpoint goes on from that checkpoint (the script's `--resume`), which gives the same
metrics and evaluation as a run that was never stopped; `--checkpoint-every N` has every run
write one every N env steps (SIGTERM and SIGUSR1 write one anyway). A run without a checkpoint
starts over. A failed run is kept and reported; it is run again, from the start, only with
--retry-failed (a deterministic failure would only fail again). --force runs everything
selected again from the start.

Exit status: 0 when every selected run is ok; 1 when any failed, or its script is missing;
2 bad input (one line); 130 interrupted (Ctrl-C, or SIGTERM to the runner, which passes it on to
its runs: they write a checkpoint and stop).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import RESULTS_DIR, ROOT, SUITES_FILE, Cell, load_suite, metrics_file, read_result, script_path  # noqa: E402


# --- the child: one run ---------------------------------------------------------------------------
def machine_info() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"python": platform.python_version()}
    for pkg in ("torch", "gymnasium", "numpy", "mujoco", "Box2D"):
        try:
            from importlib.metadata import version

            versions[pkg] = version(pkg if pkg != "Box2D" else "box2d")
        except Exception:
            try:
                versions[pkg] = __import__(pkg).__version__
            except Exception:
                versions[pkg] = None
    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "versions": versions}


def git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "algos", "common"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        return (head + ("+dirty" if dirty else "")) or None
    except Exception:
        return None


def build_args(module, spec: dict):
    """The script's Args from the cell: unknown setting names are an error, lists become tuples. Each run
    gets one torch thread (workers share the cores; DDPG's and NAF's own default of 2 would oversubscribe
    them) unless the cell's settings name `torch_threads`."""
    fields = {f.name: f for f in dataclasses.fields(module.Args)}
    values = dict(spec["settings"])
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown} for {spec['algo']}.Args")
    for k, v in values.items():
        if isinstance(v, list):
            values[k] = tuple(v)
    values.update(env_id=spec["env"], seed=spec["seed"], total_timesteps=spec["steps"], run_dir=spec["run_dir"], progress=True,
                  checkpoint_every=spec.get("checkpoint_every", 0), resume=spec.get("resume"))
    if "eval_every" in fields:
        values["eval_every"] = spec["eval_every"]
    if "torch_threads" in fields:
        values.setdefault("torch_threads", 1)
    return module.Args(**values)


def child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    run_dir = Path(spec["run_dir"])
    result = {"status": "failed", "spec": spec, "summary": None, "error": None, "traceback": None,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine_info(), "commit": spec.get("commit")}
    start = time.perf_counter()
    stop = lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt(f"signal {s}"))  # noqa: E731
    # until train() takes over SIGTERM and SIGUSR1 (checkpoint, then stop), they stop the run here;
    # SIGUSR2 is submitit's signal to the task that started this process (SLURM may send it to every
    # process of the job): that task answers it by sending SIGUSR1 here
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, stop)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        sys.path[:0] = [str(ROOT), str(ROOT / "algos")]
        module = importlib.import_module(spec["algo"])  # algos/<algo>.py
        summary = module.train(build_args(module, spec))
        result["summary"] = summary
        if summary.get("completed"):
            result["status"] = "ok"
        elif summary.get("error") in ("interrupted", "preempted"):  # stopped; with a checkpoint it resumes next time
            result["status"] = result["error"] = summary["error"]
        else:
            result["error"] = f"run did not complete: {summary.get('error')}"
    except KeyboardInterrupt:
        result["status"], result["error"] = "interrupted", "interrupted"
    except BaseException as e:  # recorded, reported, never swallowed: the report shows it
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
        traceback.print_exc()
    for sig in (signal.SIGTERM, signal.SIGUSR1):  # train() is over: the result is written whatever comes now
        signal.signal(sig, signal.SIG_IGN)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["process_seconds"] = round(time.perf_counter() - start, 2)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
    print(f"[run.py] {spec['algo']} {spec['env']} seed {spec['seed']}: {result['status']}"
          + (f" ({result['error']})" if result["error"] else ""), flush=True)
    return {"ok": 0, "interrupted": 130, "preempted": 75}.get(result["status"], 1)


# --- the parent: the sweep ------------------------------------------------------------------------
class Job:
    """One run (cell, seed) and its folder: started as a child process, fresh or resumed, then finished.

    The local backend keeps several going from one loop; a SLURM task (benchmarks/cluster.py) starts
    and waits for one. Both decide, start and record a run with these same methods."""

    def __init__(self, suite: str, cell: Cell, seed: int, results: Path):
        self.suite, self.cell, self.seed = suite, cell, seed
        self.dir = results / suite / "runs" / cell.run_name(seed)
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.log = None
        self.resumed_from: Path | None = None
        self.fresh = False  # start from scratch even where a checkpoint is (--force, --retry-failed)
        self._since: tuple[float, float] | None = None  # (fraction done, time) where this attempt's speed is measured from

    @property
    def label(self) -> str:
        return f"{self.cell.algo} {self.cell.env} s{self.seed}"

    def checkpointed(self) -> Path | None:
        """The script's run folder in this run's folder when it holds a checkpoint to resume from."""
        folders = sorted(self.dir.glob("*/checkpoint.pt"), key=lambda p: p.stat().st_mtime)
        return folders[-1].parent if folders else None

    def start(self, commit: str | None, checkpoint_every: int = 0, fresh: bool = False) -> None:
        """Start the child: resumed from the run's checkpoint when there is one (and not `fresh`), else from scratch."""
        self.resumed_from = None if fresh else self.checkpointed()
        if self.resumed_from is None:
            if self.dir.exists():  # a previous attempt (failed, interrupted without a checkpoint, killed early): start clean
                shutil.rmtree(self.dir)
            self.dir.mkdir(parents=True)
        spec = {"suite": self.suite, "algo": self.cell.algo, "env": self.cell.env, "seed": self.seed, "steps": self.cell.steps,
                "settings": self.cell.settings, "eval_every": self.cell.eval_every, "hash": self.cell.digest,
                "run_dir": str(self.dir), "commit": commit, "checkpoint_every": checkpoint_every,
                "resume": str(self.resumed_from) if self.resumed_from else None}
        (self.dir / "spec.json").write_text(json.dumps(spec, indent=2))
        (self.dir / "result.json").unlink(missing_ok=True)  # a stopped attempt's result is not this attempt's
        self.log = open(self.dir / "log.txt", "a" if self.resumed_from else "w")
        if self.resumed_from:
            self.log.write(f"\n[run.py] {time.strftime('%Y-%m-%dT%H:%M:%S')}: resuming {self.resumed_from.name} from its checkpoint\n")
            self.log.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(self.dir / "spec.json")],
                                     stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        self.started = time.time()
        self._since = None if self.resumed_from else (0.0, self.started)  # a resumed run starts part-way: see eta()

    def progress(self) -> float:
        """Fraction done, from the last global_step in the script's metrics.csv (0 before any row)."""
        path = metrics_file(self.dir)
        if path is None:
            return 0.0
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - 4096))
                lines = f.read().decode(errors="ignore").splitlines()
            for line in reversed(lines[1:] if len(lines) > 1 else []):
                head = line.split(",", 1)[0]
                if head.isdigit():
                    return min(1.0, int(head) / self.cell.steps)
        except OSError:
            pass
        return 0.0

    def eta(self, frac: float) -> float | None:
        """Seconds left at `frac` done, at this attempt's speed so far; None until it has done 2% more.
        A resumed run is measured from its first reading, not from 0: its steps before the checkpoint
        are not this attempt's (and its metrics.csv, cut back to the checkpoint's step on resume, may
        read further at first: the lowest reading is the start)."""
        now = time.time()
        if frac > 0 and (self._since is None or frac < self._since[0]):  # 0: nothing read yet (or a read failed)
            self._since = (frac, now)
        if self._since is None:
            return None
        done = frac - self._since[0]
        return (now - self._since[1]) / done * (1 - frac) if done > 0.02 else None

    def finish(self) -> dict:
        self.log.close()
        result = read_result(self.dir)
        if result is None:
            result = self.died(f"process exited with code {self.proc.returncode} and wrote no result")
        return result

    def died(self, error: str) -> dict:
        """Record a run whose process ended without a result: `killed` when it left a checkpoint (the next
        sweep resumes it), else `failed` (a crash the report must show)."""
        log = self.dir / "log.txt"
        resumable = self.checkpointed() is not None
        result = {"status": "killed" if resumable else "failed",
                  "error": error + ("; it resumes from its checkpoint next time" if resumable else ""),
                  "log_tail": log.read_text(errors="ignore").splitlines()[-20:] if log.exists() else [],
                  "spec": json.loads((self.dir / "spec.json").read_text()) if (self.dir / "spec.json").exists() else None,
                  "summary": None, "process_seconds": round(time.time() - self.started, 2) if self.started else None}
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "result.json").write_text(json.dumps(result, indent=2))
        return result


@contextlib.contextmanager
def stop_on_signals():
    """While a driver (this runner, tune.py and its workers) waits on its runs, SIGTERM (kill's default,
    a scheduler stopping the job) stops it as Ctrl-C does, with a KeyboardInterrupt, instead of killing
    it and leaving its runs going. After the first of the two signals both are ignored, so that
    stopping the runs and writing what is left ends. The previous handlers come back on exit."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum, frame):
        for sig in previous:  # a Python no-op, not SIG_IGN: a signal already on its way would print a warning
            signal.signal(sig, lambda signum, frame: None)
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in previous:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def fmt_time(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def select(suite, algos, envs, seeds) -> list[tuple[Cell, int]]:
    out = []
    for cell in suite.cells:
        if (algos and cell.algo not in algos) or (envs and cell.env not in envs):
            continue
        for seed in (seeds or cell.seeds):
            out.append((cell, seed))
    return out


def report_command(suite: str, a: argparse.Namespace) -> str:
    """The report command for this sweep, with the runner's own --results-dir and --suites-file when they are not the defaults."""
    command = f"python benchmarks/report.py --suite {suite}"
    if Path(a.suites_file).resolve() != SUITES_FILE.resolve():
        command += f" --suites-file {a.suites_file}"
    if Path(a.results_dir).resolve() != RESULTS_DIR.resolve():
        command += f" --results-dir {a.results_dir}"
    return command


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors (unknown flag, bad value) as one line `<name>: error: ...` and exit 2, no usage block."""

    def error(self, message: str):
        print(f"{Path(self.prog).stem}: error: {message}", file=sys.stderr)
        sys.exit(2)


def add_slurm_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the slurm backend (run.py and tune.py)."""
    slurm = p.add_argument_group("slurm backend")
    slurm.add_argument("--time-limit", type=int, default=60,
                       help="minutes per array task; near the limit the task stops its run at a checkpoint and is requeued (default 60)")
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    slurm.add_argument("--cpus-per-task", type=int, default=1, help="CPUs per array task (default 1; a run uses one)")
    slurm.add_argument("--slurm-option", action="append", default=[], metavar="KEY=VALUE",
                       help="any other sbatch option, e.g. account=myproject, qos=low, mem=4G (repeatable)")
    slurm.add_argument("--submitit-dir", help="submitit's job files and logs (default: run.py <results-dir>/<suite>/submitit, tune.py <study-dir>/submitit)")
    slurm.add_argument("--submitit-cluster", choices=("slurm", "local", "debug"), default="slurm",
                       help="slurm; or local/debug: the same tasks as local processes through submitit, to try the SLURM path without a cluster")


def slurm_flags_error(a: argparse.Namespace) -> str | None:
    if a.time_limit < 1 or a.cpus_per_task < 1:
        return f"--time-limit and --cpus-per-task must be >= 1, got {a.time_limit} and {a.cpus_per_task}"
    if any("=" not in x for x in a.slurm_option):
        return f"--slurm-option takes KEY=VALUE, got {next(x for x in a.slurm_option if '=' not in x)!r}"
    return None


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="benchmarks/run.py", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", help="suite name in the suites file (classic, continuous, mujoco, minatar, atari, atari_cpu)")
    p.add_argument("--algos", nargs="+", help="only these algorithms")
    p.add_argument("--envs", nargs="+", help="only these env ids")
    p.add_argument("--seeds", nargs="+", type=int, help="these seeds instead of the cell's")
    p.add_argument("--workers", type=int, default=1,
                   help="runs at a time: local processes (one torch thread each), or the SLURM array's tasks running at once")
    p.add_argument("--backend", choices=("local", "slurm"), default="local",
                   help="local: processes on this machine; slurm: a SLURM job array through submitit (pip install -r benchmarks/requirements-cluster.txt)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="env steps between each run's checkpoints (0: only when stopped by a signal); a stopped or killed run resumes from its last one")
    p.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    p.add_argument("--force", action="store_true", help="run again even runs that are ok")
    p.add_argument("--timeout", type=float, default=0, help="seconds before a run is stopped and recorded as failed (0: none)")
    p.add_argument("--status-every", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--dry-run", action="store_true", help="list the runs and what would happen to each, run nothing")
    p.add_argument("--suites-file", default=str(SUITES_FILE), help=argparse.SUPPRESS)
    p.add_argument("--results-dir", default=str(RESULTS_DIR), help="parent of the per-suite result folders")
    add_slurm_flags(p)
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child)
    error = None
    if not a.suite:
        error = "--suite is required"
    elif a.workers < 1:
        error = f"--workers must be >= 1, got {a.workers}"
    elif a.checkpoint_every < 0:
        error = f"--checkpoint-every must be >= 0, got {a.checkpoint_every}"
    else:
        error = slurm_flags_error(a)
    if error:
        print(f"run: error: {error}", file=sys.stderr)
        return 2

    try:
        suite = load_suite(a.suite, a.suites_file)
    except SystemExit as e:  # an unknown suite or a malformed cell: suite.py's message
        print(f"run: error: {e}", file=sys.stderr)
        return 2
    results = Path(a.results_dir)
    if not suite.runnable:
        print(f"suite {suite.name} is declared but not runnable here: {suite.not_runnable_reason}")
        return 1
    selected = select(suite, a.algos, a.envs, a.seeds)
    if not selected:
        print("nothing selected (check --algos / --envs against the suite)")
        return 1

    todo, done_ok, known_failed, missing = [], [], [], []
    for cell, seed in selected:
        job = Job(suite.name, cell, seed, results)
        if not script_path(cell.algo).exists():
            missing.append(job)
            continue
        prev = read_result(job.dir)
        status = prev["status"] if prev else None
        if status == "ok" and not a.force:
            done_ok.append(job)
        elif status == "failed" and not (a.retry_failed or a.force):
            known_failed.append((job, prev))
        else:
            job.fresh = a.force or status == "failed"
            todo.append(job)

    print(f"suite {suite.name}: {len(selected)} runs selected: {len(done_ok)} already ok, {len(known_failed)} failed before "
          f"(kept; --retry-failed runs them), {len(missing)} script missing, {len(todo)} to run with {a.workers} worker(s)"
          + ("" if a.backend == "local" else " on SLURM" if a.submitit_cluster == "slurm" else f" through submitit's {a.submitit_cluster} executor"))
    for job in missing:
        print(f"  script missing: algos/{job.cell.algo}.py ({job.label}) - not run")
    for job, prev in known_failed:
        print(f"  failed before: {job.label}: {prev.get('error')}  [{job.dir}]")
    if a.dry_run:
        for job in todo:
            resume = None if job.fresh else job.checkpointed()
            what = f"resume from its checkpoint in {resume}" if resume else f"run: {job.label}"
            print(f"  would {what} ({job.cell.steps:,} steps, settings {job.cell.settings or 'defaults'}) -> {job.dir}")
        return 0
    if a.backend == "slurm":
        try:
            import cluster  # submitit: only this backend needs it
        except ImportError as e:
            print(f"run: error: --backend slurm needs submitit ({e}): pip install -r benchmarks/requirements-cluster.txt", file=sys.stderr)
            return 2
        start = time.time()
        with stop_on_signals():
            finished = cluster.run_jobs(suite.name, todo, a)
        if finished is None:
            return 130
        return closing(suite.name, a, finished, done_ok, known_failed, missing, start)

    pending, running, finished = list(todo), [], []
    start, last_status = time.time(), 0.0
    total = len(todo)

    def status_line() -> str:
        parts = []
        for job in running:
            frac = job.progress()
            left = job.eta(frac)
            eta = f" ETA {fmt_time(left)}" if left is not None else ""
            parts.append(f"{job.label} {100 * frac:.0f}%{eta}")
        ok = sum(r["status"] == "ok" for _, r in finished)
        return (f"[{time.strftime('%H:%M:%S')} +{fmt_time(time.time() - start)}] {len(finished)}/{total} finished "
                f"({ok} ok, {len(finished) - ok} not ok), {len(pending)} waiting; running: {'; '.join(parts) or '-'}")

    with stop_on_signals():  # SIGTERM too: the runs are stopped (with a checkpoint), not left going
        try:
            while pending or running:
                while pending and len(running) < a.workers:
                    job = pending.pop(0)
                    running.append(job)  # before its process exists: a stop that comes while it starts still stops it
                    job.start(git_commit(), a.checkpoint_every, job.fresh)  # per run: the code may change while a long sweep runs
                    print(f"[{time.strftime('%H:%M:%S')}] {'resume' if job.resumed_from else 'start '} {job.label} "
                          f"({job.cell.steps:,} steps) -> {job.dir}", flush=True)
                time.sleep(0.2)
                for job in list(running):
                    timed_out = a.timeout and job.proc.poll() is None and time.time() - job.started > a.timeout
                    if timed_out:
                        job.proc.send_signal(signal.SIGTERM)
                        try:
                            job.proc.wait(30)
                        except subprocess.TimeoutExpired:
                            job.proc.kill()
                            job.proc.wait()
                    if job.proc.poll() is None:
                        continue
                    running.remove(job)
                    result = job.finish()
                    if timed_out:
                        result.update(status="failed", error=f"timed out after {a.timeout:.0f} s (--timeout)")
                        (job.dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
                    finished.append((job, result))
                    print_end(job, result)
                if time.time() - last_status > a.status_every and running:
                    print(status_line(), flush=True)
                    last_status = time.time()
        except KeyboardInterrupt:
            print("\ninterrupted: stopping the running runs (next time they resume from a checkpoint where they wrote one, "
                  "else start over)", flush=True)
            started = [job for job in running if job.proc is not None]
            for job in started:
                job.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 30
            for job in started:
                try:
                    job.proc.wait(max(0.0, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    job.proc.kill()
                    job.proc.wait()
                job.log.close()
            return 130

    return closing(suite.name, a, finished, done_ok, known_failed, missing, start)


def print_end(job: Job, result: dict) -> None:
    s = result.get("summary") or {}
    what = (f"eval {s.get('eval_return_mean'):.2f}, {s.get('sps'):,.0f} steps/s, {s.get('wall_seconds'):.0f} s"
            if result["status"] == "ok" else f"{result['error']} (log: {job.dir / 'log.txt'})")
    print(f"[{time.strftime('%H:%M:%S')}] {result['status'].upper():6} {job.label}: {what}", flush=True)


def closing(suite: str, a: argparse.Namespace, finished, done_ok, known_failed, missing, start: float) -> int:
    """The sweep's last lines (either backend): what ran, what failed, the report command; the exit status."""
    failed = [(j, r) for j, r in finished if r["status"] != "ok"] + known_failed
    print(f"\nsuite {suite}: {sum(r['status'] == 'ok' for _, r in finished)} ran ok, {len(done_ok)} were already ok, "
          f"{len(failed)} failed, {len(missing)} script missing; {fmt_time(time.time() - start)}")
    for job, r in failed:
        print(f"  FAILED {job.label}: {r.get('error')}  (log: {job.dir / 'log.txt'})")
    for job in missing:
        print(f"  MISSING algos/{job.cell.algo}.py: {job.label} not run")
    print(f"report: {report_command(suite, a)}")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
