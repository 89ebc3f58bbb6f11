"""One run of a cell (a cell and a seed): its folder, its child process, its result.

The child (`python benchmarks/job.py SPEC.json`, as `Job.start` starts it) calls algos/<algo>.py's
`train(Args(...))` with the spec's settings, into log.txt and result.json (layout in suite.py); run.py,
tune.py and cluster.py start their runs through `Job`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
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
from machine import machine  # noqa: E402
from suite import ROOT, Cell, metrics_file, read_result  # noqa: E402

CODE = (
    "commit",
    "dirty",
    "dirty_files",
)  # what a run records of the code it ran (provenance.code_state())


def machine_info() -> dict:
    """The platform, the package versions, and what machine.machine() records of the CPU and its kernels."""
    versions = {"python": platform.python_version()}
    for pkg in ("torch", "gymnasium", "numpy", "mujoco", "Box2D"):
        versions[pkg] = None
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[pkg] = importlib.metadata.version(pkg.lower())
    return {
        "platform": platform.platform(),
        **machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
    }


def build_args(module, spec: dict):
    """The script's Args from the cell: unknown setting names are an error, lists become tuples. Each run gets
    one torch thread (workers share the cores) unless the cell's settings name `torch_threads`."""
    fields = {f.name for f in dataclasses.fields(module.Args)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["settings"].items()}
    if unknown := sorted(set(values) - fields):
        raise ValueError(f"unknown setting(s) {unknown} for {spec['algo']}.Args")
    values.update(
        env_id=spec["env"],
        seed=spec["seed"],
        total_timesteps=spec["steps"],
        run_dir=spec["run_dir"],
        eval_every=spec["eval_every"],
        progress=True,
        checkpoint_every=spec.get("checkpoint_every", 0),
        resume=spec.get("resume"),
    )
    values.setdefault(
        "torch_threads", 1
    )  # a field of every script's Args, as eval_every is (harness.run.RunArgs)
    return module.Args(**values)


def child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    result = {
        "status": "failed",
        "spec": spec,
        "summary": None,
        "error": None,
        "traceback": None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": machine_info(),
        **{k: spec.get(k) for k in CODE},
        "earlier_code": spec.get("earlier_code", []),
        "comparable": spec.get("comparable", True),
    }
    start = time.perf_counter()
    stop = lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt(f"signal {s}"))  # noqa: E731
    # until train() takes over SIGTERM and SIGUSR1 (checkpoint, then stop), they stop the run here;
    # SIGUSR2 is submitit's signal to the task that started this process (SLURM may send it to every
    # process of the job): that task answers it by sending SIGUSR1 here
    for sig, handler in (
        (signal.SIGTERM, stop),
        (signal.SIGUSR1, stop),
        (signal.SIGUSR2, signal.SIG_IGN),
    ):
        signal.signal(sig, handler)
    try:
        sys.path[:0] = [str(ROOT), str(ROOT / "algos")]
        module = importlib.import_module(spec["algo"])  # algos/<algo>.py
        summary = result["summary"] = module.train(build_args(module, spec))
        summary["machine"] = machine()  # where the run's floats were made (its torch threads set)
        if (
            summary.get("completed") and summary.get("eval_return_mean") is None
        ):  # the verdict rests on this number
            result["error"] = "its final evaluation failed: summary.json has no eval_return_mean"
        elif summary.get("completed"):
            result["status"] = "ok"
        elif summary.get("error") in (
            "interrupted",
            "preempted",
        ):  # stopped; with a checkpoint it resumes next time
            result["status"] = result["error"] = summary["error"]
        else:
            result["error"] = f"run did not complete: {summary.get('error')}"
    except KeyboardInterrupt:
        result["status"], result["error"] = "interrupted", "interrupted"
    except BaseException as e:  # recorded, reported, never swallowed: the report shows it
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
        traceback.print_exc()
    for sig in (
        signal.SIGTERM,
        signal.SIGUSR1,
    ):  # train() is over: the result is written whatever comes now
        signal.signal(sig, signal.SIG_IGN)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["process_seconds"] = round(time.perf_counter() - start, 2)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    (Path(spec["run_dir"]) / "result.json").write_text(json.dumps(result, indent=2, default=str))
    print(
        f"[run] {spec['algo']} {spec['env']} seed {spec['seed']}: {result['status']}"
        + (f" ({result['error']})" if result["error"] else ""),
        flush=True,
    )
    return {"ok": 0, "interrupted": 130, "preempted": 75}.get(result["status"], 1)


class Job:
    """One run (cell, seed) and its folder: started as a child process, fresh or resumed, then finished;
    the local backend and a SLURM task (cluster.py) start and record their runs alike."""

    def __init__(self, suite: str, cell: Cell, seed: int, results: Path):
        self.suite, self.cell, self.seed = suite, cell, seed
        self.dir = results / suite / "runs" / cell.run_name(seed)
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.log = None
        self.resumed_from: Path | None = None
        self.fresh = (
            False  # start from scratch even where a checkpoint is (--force, --retry-failed)
        )
        self._since: tuple[float, float] | None = (
            None  # (fraction done, time) where this attempt's speed is measured from
        )

    @property
    def label(self) -> str:
        return f"{self.cell.algo} {self.cell.env} s{self.seed}"

    def checkpointed(self) -> Path | None:
        """The script's run folder in this run's folder when it holds a checkpoint to resume from."""
        folders = sorted(self.dir.glob("*/checkpoint.pt"), key=lambda p: p.stat().st_mtime)
        return folders[-1].parent if folders else None

    def start(self, code: dict, checkpoint_every: int = 0, fresh: bool = False) -> None:
        """Start the child, recording `code` (provenance.code_state()): resumed from the run's checkpoint
        when there is one (and not `fresh`), else from scratch."""
        self.resumed_from = None if fresh else self.checkpointed()
        if self.resumed_from is None:
            if self.dir.exists():  # a previous attempt (failed, interrupted without a checkpoint, killed early): start clean
                shutil.rmtree(self.dir)
            self.dir.mkdir(parents=True)
        earlier = []  # a resumed run ran its first part on the code its earlier attempts recorded
        if self.resumed_from and (before := read_result(self.dir, "spec.json")):
            earlier = [*before.get("earlier_code", []), {k: before.get(k) for k in CODE}]
        spec = {
            "suite": self.suite,
            "algo": self.cell.algo,
            "env": self.cell.env,
            "seed": self.seed,
            "steps": self.cell.steps,
            "settings": self.cell.settings,
            "eval_every": self.cell.eval_every,
            "hash": self.cell.digest,
            "comparable": self.cell.comparable,
            "run_dir": str(self.dir),
            **{k: code.get(k) for k in CODE},
            "earlier_code": earlier,
            "checkpoint_every": checkpoint_every,
            "resume": str(self.resumed_from) if self.resumed_from else None,
        }
        (self.dir / "spec.json").write_text(json.dumps(spec, indent=2))
        (self.dir / "result.json").unlink(
            missing_ok=True
        )  # a stopped attempt's result is not this attempt's
        self.log = open(self.dir / "log.txt", "a" if self.resumed_from else "w")
        if self.resumed_from:
            print(
                f"\n[run] {time.strftime('%Y-%m-%dT%H:%M:%S')}: resuming {self.resumed_from.name} from its checkpoint",
                file=self.log,
                flush=True,
            )
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled"),
        }
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(self.dir / "spec.json")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
        self.started = time.time()
        self._since = (
            None if self.resumed_from else (0.0, self.started)
        )  # a resumed run starts part-way: see eta()

    def progress(self) -> float:
        """Fraction done, from the last global_step in the script's metrics.csv (0 before any row)."""
        path = metrics_file(self.dir)
        if path is None:
            return 0.0
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - 4096))
                lines = f.read().decode(errors="ignore").splitlines()
        except OSError:
            return 0.0
        heads = [
            line.split(",", 1)[0] for line in lines[1:]
        ]  # the first line may be cut, or the header
        return next(
            (min(1.0, int(h) / self.cell.steps) for h in reversed(heads) if h.isdigit()), 0.0
        )

    def eta(self, frac: float) -> float | None:
        """Seconds left at `frac` done, at this attempt's speed so far; None until it has done 2% more. A resumed
        run is measured from its lowest reading (its metrics.csv, cut back to the checkpoint, may read further at first)."""
        now = time.time()
        if frac > 0 and (
            self._since is None or frac < self._since[0]
        ):  # 0: nothing read yet (or a read failed)
            self._since = (frac, now)
        if self._since is None:
            return None
        done = frac - self._since[0]
        return (now - self._since[1]) / done * (1 - frac) if done > 0.02 else None

    def finish(self) -> dict:
        self.log.close()
        error = f"process exited with code {self.proc.returncode} and wrote no result"
        return read_result(self.dir) or self.died(error)

    def died(self, error: str) -> dict:
        """Record a run whose process ended without a result: `killed` when it left a checkpoint (the next sweep
        resumes it), else `failed`."""
        log = self.dir / "log.txt"
        resumable = self.checkpointed() is not None
        result = {
            "status": "killed" if resumable else "failed",
            "error": error + ("; it resumes from its checkpoint next time" if resumable else ""),
            "log_tail": log.read_text(errors="ignore").splitlines()[-20:] if log.exists() else [],
            "spec": read_result(self.dir, "spec.json"),
            "summary": None,
            "process_seconds": round(time.time() - self.started, 2) if self.started else None,
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "result.json").write_text(json.dumps(result, indent=2))
        return result


@contextlib.contextmanager
def stop_on_signals():
    """While a driver (run.py, tune.py, its workers) waits on its runs, SIGTERM stops it as Ctrl-C does (a
    KeyboardInterrupt); after the first signal both are ignored until the block ends."""
    if (
        threading.current_thread() is not threading.main_thread()
    ):  # only the main thread may set handlers
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum, frame):
        for sig in (
            previous
        ):  # a Python no-op, not SIG_IGN: a signal already on its way would print a warning
            signal.signal(sig, lambda signum, frame: None)
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in previous:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def end_processes(procs: list, sig: int, grace: float, kill_wait: float | None = None) -> None:
    """Send `sig` to each process (Popen) still going, then kill each one not ended `grace` s later."""
    procs = [p for p in procs if p.poll() is None]
    for p in procs:
        p.send_signal(sig)
    deadline = time.time() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(kill_wait)


def fmt_time(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def print_end(job: Job, result: dict) -> None:
    s = result.get("summary") or {}
    what = (
        f"eval {s.get('eval_return_mean'):.2f}, {s.get('sps'):,.0f} steps/s, {s.get('wall_seconds'):.0f} s"
        if result["status"] == "ok"
        else f"{result['error']} (log: {job.dir / 'log.txt'})"
    )
    print(
        f"[{time.strftime('%H:%M:%S')}] {result['status'].upper():6} {job.label}: {what}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(child(sys.argv[1]))
