"""Run plumbing shared by every script: nothing here knows about an algorithm.

- `RunArgs`: the run flags every script's `Args` extends; `check(args, ...)` validates them and
  the script's own; `setup(args)` sets torch's threads, seeds, and picks the device.
- `parse_args(Args, doc)`: the command line (tyro); errors are one line; with `--resume RUN` the
  stored arguments become the defaults, so only the flags given again override them.
- `Run`: the run folder (config.json, metrics.csv, summary.json, model.pt, videos), the progress
  line, signals and checkpoints (what a checkpoint holds is the script's dict; harness/checkpoint.py
  writes and reads it). `with run.training(envs):` frames the loop, `run.finish(...)` ends the run.
- `evaluate(act, make_envs, episodes, seed, video_dir)`: one episode per env; `main(algo, train,
  args)`: the exit status; `workers()`: harness.distributed under torchrun, else a stand-in.

Exit status: 0 done; 1 stopped by a NaN loss, a lost worker or a failed final evaluation
(summary and model kept), or a bug (its traceback; metrics.csv and summary.json keep the error);
2 bad input (`InputError`), one line; 75 stopped by SIGTERM or SIGUSR1 after writing a
checkpoint (resume with `--resume`); 130 interrupted (Ctrl-C).

Signals: SIGTERM and SIGUSR1 (SLURM sends one before a job's time limit) ask for a stop at the
next step boundary (for rollout-based scripts, the end of a rollout and its update), where the
script writes a checkpoint and exits with 75. Ctrl-C stops at once; with `--checkpoint-every` it
first waits for the step boundary and writes a checkpoint (a second Ctrl-C stops at once).
"""

from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import functools
import io
import json
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Callable, Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn

from harness import checkpoint
from harness.errors import InputError, WorkerError

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    # MuJoCo renders (--capture-video) through EGL without a screen; must be set before mujoco is imported
    os.environ.setdefault("MUJOCO_GL", "egl")
    if not os.environ.get("WAYLAND_DISPLAY"):
        # pygame (classic-control and Box2D frames) draws off screen, but SDL still probes for a screen at the
        # first frame and libwayland prints "error: XDG_RUNTIME_DIR is invalid..." on a headless machine;
        # with no screen to find, SDL's dummy driver is what it would end up with anyway
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_PREEMPTED, EXIT_INTERRUPTED = 0, 1, 2, 75, 130
CHECKPOINT_FORMAT = 1
# flags that may change when a run is resumed: its length, evaluation, logging and output
RESUMABLE_CHANGES = {
    "total_timesteps", "eval_every", "eval_episodes", "progress", "track", "wandb_project", "wandb_entity",
    "capture_video", "save_model", "checkpoint_every", "checkpoint_memory", "resume", "run_dir", "torch_threads",
    "tensorboard",
}


@dataclasses.dataclass
class RunArgs:
    """The run flags every script shares. Each script's `Args` extends this dataclass with its
    algorithm's flags (and gives a field another default where it needs one, e.g. its env)."""

    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id"""
    seed: int = 1
    """seed of python, numpy, torch, the envs and the script's generators"""
    total_timesteps: int = 500_000
    """env steps to train for, summed over all envs (and all workers under torchrun)"""
    num_envs: int = 1
    """parallel envs stepped together (per worker under torchrun)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """where the networks live (auto: cuda for Atari ids when CUDA is available, the one setting where a GPU was measured faster than a CPU core; else cpu)"""
    compile: bool = False
    """torch.compile the update (loss, its backward) and, on a GPU, acting; compile time is reported apart"""
    cudagraphs: bool = False
    """--compile with the compiled graphs replayed as CUDA graphs (torch's mode="reduce-overhead"; needs a CUDA device)"""
    torch_threads: int = 1
    """CPU threads for torch (small networks are fastest on 1; a seed's result depends on the thread count)"""
    track: bool = False
    """log to Weights & Biases (works offline with WANDB_MODE=offline)"""
    tensorboard: bool = False
    """also write TensorBoard scalars into <run folder>/tensorboard (needs the tensorboard extra)"""
    wandb_project: str = "rl-reference"
    """wandb project name"""
    wandb_entity: Optional[str] = None
    """wandb team or user"""
    capture_video: bool = False
    """record videos of evaluation episodes into <run folder>/videos"""
    save_model: bool = False
    """save the trained networks' state dicts to <run folder>/model.pt"""
    eval_every: int = 0
    """env steps between greedy evaluations (0: only at the end)"""
    eval_episodes: int = 10
    """episodes per evaluation"""
    run_dir: str = "runs"
    """parent folder of the run folder"""
    progress: bool = True
    """print a progress line while training"""
    checkpoint_every: int = 0
    """env steps between checkpoints in the run folder (0: none; SIGTERM/SIGUSR1 write one anyway)"""
    resume: Optional[str] = None
    """run folder to continue from its last checkpoint, with its stored arguments (only the run length, evaluation and logging flags may change)"""


def check(args: RunArgs, conditions: list[tuple[bool, str]] = (), positive: tuple[str, ...] = (),
          fractions: tuple[str, ...] = ()) -> None:
    """Raise InputError (one line, exit 2) naming the first bad value: the run flags, then the
    script's fields named in `positive` (> 0, or None where None is allowed), in `fractions` (in
    [0, 1]), then its `conditions` ((ok, message) pairs)."""
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    value = lambda name: getattr(args, name)  # noqa: E731
    checks = [
        (args.total_timesteps > 0, f"--total-timesteps must be positive, got {args.total_timesteps}"),
        (args.num_envs > 0, f"--num-envs must be positive, got {args.num_envs}"),
        (args.eval_every >= 0, f"--eval-every must be >= 0, got {args.eval_every}"),
        (args.eval_episodes > 0, f"--eval-episodes must be positive, got {args.eval_episodes}"),
        (args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {args.checkpoint_every}"),
        (args.torch_threads > 0, f"--torch-threads must be positive, got {args.torch_threads}"),
        (args.device != "cuda" or torch.cuda.is_available(), "--device cuda was asked for but CUDA is not available"),
        (not args.cudagraphs or _device(args).type == "cuda", "--cudagraphs needs a CUDA device (--device cuda, or auto on an Atari id)"),
        (not args.compile or _device(args).type == "cuda" or _has_compiler(),
         "--compile on a CPU needs a C++ compiler (torch.compile's inductor builds C++ kernels); none found"),
        *((value(n) is None or value(n) > 0, f"{flag(n)} must be positive, got {value(n)}") for n in positive),
        *((0.0 <= value(n) <= 1.0, f"{flag(n)} must be in [0, 1], got {value(n)}") for n in fractions),
        *conditions,
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)


def setup(args: RunArgs) -> torch.device:
    """torch's CPU threads, python's, numpy's and torch's generators seeded with --seed, and the
    device (`_device`)."""
    torch.set_num_threads(args.torch_threads)
    seed_all(args.seed)
    return _device(args)


def _device(args: RunArgs) -> torch.device:
    """--device; auto is cuda only where a GPU was measured faster than one CPU core (Atari's conv net,
    docs/speed.md "On a GPU"): elsewhere an update is a few small kernels and every env step a round trip."""
    atari = args.env_id.startswith("ALE/") or "NoFrameskip" in args.env_id
    gpu = args.device == "cuda" or (args.device == "auto" and atari and torch.cuda.is_available())
    return torch.device("cuda" if gpu else "cpu")


def _has_compiler() -> bool:
    return any(shutil.which(cc) for cc in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++"))


def seed_all(seed: int) -> None:
    """Seed python's, numpy's global and torch's generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def launched() -> bool:
    """True in a process started as one of several torchrun workers (WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


class _OneProcess:
    """harness.distributed's calls for a single process, so that a script imports torch.distributed
    only under torchrun: one worker, rank 0, nothing to average or check."""

    WorkerError = WorkerError

    @staticmethod
    def init(device=None, timeout=None) -> int:
        return 1

    rank = staticmethod(lambda: 0)
    is_main = staticmethod(lambda: True)
    world_size = staticmethod(lambda: 1)
    check_same = staticmethod(lambda config, what="arguments": None)
    gather = staticmethod(lambda tensor: tensor)
    shutdown = staticmethod(lambda wait=None: None)


def workers():
    """harness.distributed under torchrun; in a plain process a stand-in with the same calls."""
    if launched():
        from harness import distributed

        return distributed
    return _OneProcess


class Stopped(Exception):
    """A signal asked the run to stop; raised at a step boundary, after the checkpoint is written."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def flush_denormals() -> bool:
    """Make torch flush subnormal floats (below ~1.2e-38) to zero; returns the previous setting.

    Adam's and RMSprop's moment estimates of often-zero gradients (MinAtar's sparse grids, dead
    ReLUs) decay into the subnormal range, where x86 arithmetic is ~100x slower. Results differ only
    where a value would have been below 1.2e-38. torch has no getter: the setting is read off a
    product that is subnormal unless flushed.
    """
    before = (torch.tensor(1e-30) * 1e-10).item() == 0.0
    torch.set_flush_denormal(True)
    return before


# command line ----------------------------------------------------------------------------------
def _cli(args_class, description: str, default=None):
    """tyro.cli, with its boxed error messages (a value it cannot parse, an unknown flag) turned into
    one `error:` line on stderr and exit 2, as every other bad input."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(args_class, description=description, default=default)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        lines = [re.sub(r"^[\s│╭╰─]+|[\s│╮╯─]+$", "", line) for line in captured.getvalue().splitlines()]
        lines = [line for line in lines if line and not line.startswith(("For full helptext", "Argument helptext"))]
        message = lines[1] if len(lines) > 1 else (lines[0] if lines else "bad command line")
        message = message.removeprefix("Error parsing ")
        hint = next((line for line in lines[2:] if line.startswith("--")), None)
        if hint:
            message += f" (expected: {hint})" if "parsing" in captured.getvalue() else f" (did you mean {hint}?)"
        print(f"{Path(sys.argv[0]).stem}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def parse_args(args_class, doc: str):
    """tyro's parser with the script's one-line description; `--resume RUN` takes RUN's arguments as defaults."""
    description = doc.strip().splitlines()[0]
    args = _cli(args_class, description)
    if not getattr(args, "resume", None):
        return args
    try:  # the folder is checked here, before train() builds envs and memory, to fail at once
        stored = _stored_config(Path(args.resume))
        if not (Path(args.resume) / "checkpoint.pt").is_file():
            raise InputError(f"--resume {args.resume}: no checkpoint.pt there (was the run started with --checkpoint-every?)")
    except InputError as e:
        print(f"{Path(sys.argv[0]).stem}: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    defaults = {}
    for f in dataclasses.fields(args_class):
        if f.name in stored:
            value = stored[f.name]
            defaults[f.name] = tuple(value) if isinstance(value, list) else value
    defaults["resume"] = args.resume
    return _cli(args_class, description, default=args_class(**defaults))


def _stored_config(folder: Path) -> dict:
    config = folder / "config.json"
    if not config.is_file():
        raise InputError(f"--resume {folder}: no config.json there (not a run folder)")
    try:
        stored = json.loads(config.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"--resume {folder}: config.json cannot be read ({e})") from None
    if not isinstance(stored, dict) or not stored.get("algo"):
        raise InputError(f"--resume {folder}: its config.json names no algorithm (not the config.json of a run)")
    return stored


@contextlib.contextmanager
def bad_input():
    """Turn a ValueError (or a gymnasium error, e.g. a missing env package) raised inside into InputError.

    For the calls whose failures can only come from what the user asked for: making the envs
    from an id and its flags."""
    try:
        yield
    except InputError:
        raise
    except (ValueError, gym.error.Error) as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        extra = next((name for name in ("box2d", "mujoco") if name in message.lower()), None)
        if isinstance(e, gym.error.DependencyNotInstalled) and extra:
            message += f" (this project's extra: pip install -r requirements-{extra}.txt)"
        raise InputError(message) from None


def refuse_workers(algo: str) -> None:
    """One line instead of N independent copies writing N run folders under torchrun."""
    if launched():
        raise InputError(
            f"{algo} runs in one process; torchrun started {os.environ['WORLD_SIZE']} workers that would train "
            f"independent copies (several workers: a2c, n_step_q, sarsa). Run `python algos/{algo}.py` instead"
        )


# evaluation ------------------------------------------------------------------------------------
def evaluate(
    act: Callable[[np.ndarray], np.ndarray],
    make_envs: Callable[[int, str | None], gym.vector.VectorEnv],
    episodes: int,
    seed: int,
    video_dir: str | None = None,
) -> np.ndarray:
    """Returns [episodes] of the policy `act`, one episode per env, run in parallel.

    `make_envs(n, video_dir)` builds the vector env; with a video folder each env records its
    first (evaluation) episode whole, and nothing of the episodes that follow while the
    other envs finish. The envs are closed on every path.
    """
    envs = make_envs(episodes, video_dir)
    try:
        obs, _ = envs.reset(seed=seed)
        returns = np.zeros(episodes)
        finished = np.zeros(episodes, dtype=bool)
        while not finished.all():
            obs, rewards, terminated, truncated, _ = envs.step(act(obs))
            returns += np.where(finished, 0.0, rewards)  # envs past their first episode are ignored
            finished |= terminated | truncated
    finally:
        envs.close()
    return returns


# the run ---------------------------------------------------------------------------------------
class Run:
    """Run folder, config.json, metrics.csv (one row per event), progress line, wandb, summary.json,
    signals and checkpoints.

    A new run creates `<run_dir>/<env>__<algo>__<seed>__<time>/`; `args.resume` reopens that
    folder instead: its last checkpoint is read and checked before anything is written, and
    metrics.csv is cut back to the rows the checkpoint had written. `write=False` (torchrun
    workers other than rank 0) makes every call a no-op except the timers.
    """

    def __init__(self, algo: str, args, fields: list[str], write: bool = True):
        missing = [f.name for f in dataclasses.fields(RunArgs) if not hasattr(args, f.name)]
        if missing:
            raise TypeError(f"Run reads {', '.join(missing)} from the script's Args, which lacks them (harness.run.RunArgs)")
        self.algo, self.args, self.write = algo, args, write
        self.fields = ["global_step", "wall_seconds", *fields]
        self.columns = set(fields)
        self.path: Path | None = None
        # the running episodes of the training envs: return and length so far [B], last 10 returns
        self.ep_return, self.ep_length = np.zeros(args.num_envs), np.zeros(args.num_envs, dtype=np.int64)
        self.recent_returns: list[float] = []
        self.start = time.perf_counter()
        self.next_check, self.stop_reason = 0, None
        self.checkpoint_every = args.checkpoint_every
        self.saved: dict | None = None  # the checkpoint being resumed
        self.resumes: list[int] = []
        self.env_note = None
        self.checkpoint_seconds, self.checkpoint_bytes = None, None
        self._final_checkpoint: dict | None = None
        self.wandb = None
        self.tensorboard = None  # a SummaryWriter with --tensorboard
        self._handlers: dict = {}
        # the outcome, set by training() and final_evaluation(), read by finish()
        self.step, self.error, self.completed, self.eval_returns, self.train_seconds = 0, None, False, np.array([]), 0.0
        self.compile_seconds = 0.0  # first calls of the functions compiled by compile(), kept out of train_seconds
        # the progress line's ETA: the rate since the current phase began (heatup, then learning)
        self.heatup = getattr(args, "learning_starts", 0)
        self.marks: collections.deque = collections.deque(maxlen=64)
        if "mujoco" in sys.modules:  # MuJoCo's warnings shown once each, not at every model load
            from harness.extras import route_mujoco_warnings

            route_mujoco_warnings()
        if (self.checkpoint_every or args.resume) and launched():
            raise InputError("--checkpoint-every and --resume work in one process; under torchrun leave them out")
        if args.tensorboard or args.track or args.capture_video:
            from harness import extras

            extras.check_packages(args)  # a missing package is bad input, found before anything is written
        if not write:
            return
        config = {"algo": algo, **json.loads(json.dumps(dataclasses.asdict(args)))}
        if args.resume:
            self.path = Path(args.resume)
            self._check_resume(config)
            self.start = time.perf_counter() - self.saved["wall_seconds"]
            self.resumes = [*self.saved["resumes"], self.saved["global_step"]]
            self.file = self._reopen_metrics(self.saved["metrics_bytes"])
            self.csv = csv.DictWriter(self.file, self.fields)
            (self.path / "config.json").write_text(json.dumps(config, indent=2))  # the new length or logging flags
        else:
            self.path = self._new_folder(config)
            self.file = open(self.path / "metrics.csv", "w", newline="")
            self.csv = csv.DictWriter(self.file, self.fields)
            self.csv.writeheader()
        if args.tensorboard:
            self.tensorboard = extras.open_tensorboard(self.path, self.saved["global_step"] if args.resume else None)
        self.total, self.show = args.total_timesteps, args.progress
        self.tty = sys.stdout.isatty()
        self.last_print, self.last_flush, self.next_mark = time.perf_counter(), time.perf_counter(), 0.1
        self.printed_step = -1
        if args.track:
            self.wandb = extras.open_wandb(args, config, self.path)
        self._catch_signals()

    # folder and files
    def _new_folder(self, config: dict) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        env = self.args.env_id.replace("/", "-")  # ALE/Breakout-v5 -> ALE-Breakout-v5: one folder, not two
        base = Path(self.args.run_dir) / f"{env}__{self.algo}__{self.args.seed}__{stamp}"
        path, k = base, 1
        try:
            while path.exists():  # two runs started in the same second
                path, k = Path(f"{base}-{k}"), k + 1
            path.mkdir(parents=True)
            (path / "config.json").write_text(json.dumps(config, indent=2))
        except OSError as e:
            raise InputError(f"cannot write the run folder {path} ({e.strerror or e}); choose another --run-dir") from None
        return path

    def _check_resume(self, config: dict) -> None:
        stored = _stored_config(self.path)
        if stored.get("algo") != self.algo:
            raise InputError(f"--resume {self.path}: that run is {stored.get('algo')!r}, not {self.algo}")
        defaults = {f.name: f.default for f in dataclasses.fields(RunArgs)}  # for folders written before a flag existed
        for key in sorted(set(stored) | set(config)):
            if key not in RESUMABLE_CHANGES and stored.get(key, defaults.get(key)) != config.get(key):
                flag = "--" + key.replace("_", "-")
                raise InputError(
                    f"--resume {self.path}: {flag} was {stored.get(key)!r} in that run, {config.get(key)!r} now; "
                    "only the run length, evaluation and logging flags may change"
                )
        try:
            saved = checkpoint.load(self.path / "checkpoint.pt")
        except ValueError as e:  # missing, truncated or not ours
            raise InputError(f"--resume {self.path}: {e}") from None
        if saved.get("format") != CHECKPOINT_FORMAT or saved.get("algo") != self.algo:
            raise InputError(f"{self.path / 'checkpoint.pt'} is a {saved.get('algo')!r} checkpoint (format {saved.get('format')}), not {self.algo}'s")
        self.saved = saved

    def _reopen_metrics(self, size: int):
        path = self.path / "metrics.csv"
        with open(path, newline="") as f:
            header = f.readline().strip().split(",")
        if header != self.fields:
            raise InputError(f"{path} has columns {header}, expected {self.fields}")
        os.truncate(path, size)  # rows written after the checkpoint are not part of this history
        return open(path, "a", newline="")

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def compile(self, fn):
        """`fn` under torch.compile with --compile, else `fn` itself. A function (the update's loss) is
        compiled everywhere; a network (acting) on CUDA only, since on a CPU acting runs through a numpy
        fast path. --cudagraphs: mode="reduce-overhead", torch's own CUDA graphs of what it compiled. A
        first call compiles: its time goes to compile_seconds (summary.json, progress), not train_seconds."""
        module = isinstance(fn, nn.Module)
        if not (self.args.compile or self.args.cudagraphs) or (module and _device(self.args).type != "cuda"):
            return fn
        compiled = torch.compile(fn, mode="reduce-overhead" if self.args.cudagraphs else None, dynamic=False)
        run, first = compiled.forward if module else compiled, True

        def call(*args, **kwargs):
            nonlocal first
            if not first:
                return run(*args, **kwargs)
            start = time.perf_counter()
            out, first = run(*args, **kwargs), False
            self.compile_seconds += time.perf_counter() - start
            return out

        if module:
            compiled.forward = call  # the OptimizedModule keeps the network's attributes (fast paths read its layers)
            return compiled
        return functools.wraps(fn)(call)

    def video_dir(self, global_step: int) -> str | None:
        if not (self.write and self.args.capture_video):
            return None
        return str(self.path / "videos" / f"step-{global_step:09d}")

    # logging
    def log(self, global_step: int, **metrics: float) -> None:
        unknown = metrics.keys() - self.columns
        if unknown:  # a metric added to the script without its column
            raise ValueError(f"Run.log: {', '.join(sorted(unknown))} not among the metrics.csv columns {self.fields[2:]}; "
                           f"add {'it' if len(unknown) == 1 else 'them'} to the list of fields the script passes to Run(...)")
        if not self.write:
            return
        self.csv.writerow({"global_step": global_step, "wall_seconds": round(self.elapsed(), 3), **metrics})
        if self.wandb is not None:
            self.wandb.log(metrics, step=global_step)
        if self.tensorboard is not None:
            from harness.extras import tensorboard_tag

            for name, value in metrics.items():
                self.tensorboard.add_scalar(tensorboard_tag(self.algo, name), value, global_step)

    def episodes(self, global_step: int, rewards: np.ndarray, done: np.ndarray) -> None:
        """Add one vector step's rewards [B] to the running episodes; log and restart those that ended [B]."""
        self.step = global_step
        self.ep_return += rewards
        self.ep_length += 1
        for i in np.flatnonzero(done):
            self.recent_returns = (self.recent_returns + [float(self.ep_return[i])])[-10:]
            self.log(global_step, episodic_return=float(self.ep_return[i]), episodic_length=int(self.ep_length[i]))
            self.ep_return[i], self.ep_length[i] = 0.0, 0

    def _eta(self, global_step: int, now: float) -> float:
        """Seconds left at the rate of the last minute of the current phase (after heatup: learning
        steps cost more than random ones, so the rate since the start would promise too much)."""
        if self.marks and (self.marks[-1][1] <= self.heatup) != (global_step <= self.heatup):
            self.marks.clear()  # a new phase
        self.marks.append((now, global_step))
        while len(self.marks) > 2 and now - self.marks[1][0] > 60.0:
            self.marks.popleft()
        (t0, s0), elapsed = self.marks[0], now - self.start
        rate = (global_step - s0) / (now - t0) if now - t0 > 1e-3 and global_step > s0 else global_step / max(elapsed, 1e-9)
        return (self.total - global_step) / max(rate, 1e-9)

    def progress(self, global_step: int, force: bool = False) -> None:
        """A line with steps, steps/s, ETA and recent return: redrawn on a terminal, every 10% in a log."""
        self.next_check = global_step + 1000
        if not self.write:
            return
        now = time.perf_counter()
        eta_seconds = self._eta(global_step, now) if self.show else 0.0  # a rate mark at every call, printed or not
        if now - self.last_flush > 5.0:
            self.file.flush()
            if self.tensorboard is not None:
                self.tensorboard.flush()
            self.last_flush = now
        if not self.show:
            return
        frac = global_step / self.total
        if not force and (now - self.last_print < 0.5 if self.tty else frac < self.next_mark):
            return
        if force and self.printed_step == global_step:
            return
        self.printed_step = global_step
        recent_return = float(np.mean(self.recent_returns)) if self.recent_returns else float("nan")
        elapsed = now - self.start
        sps = global_step / max(elapsed - self.compile_seconds, 1e-9)
        if global_step < self.total and global_step <= self.heatup:
            eta = f"heatup to {self.heatup:,}"  # random actions, no learning: its rate says nothing of what follows
        else:
            eta = f"ETA {eta_seconds:6.0f}s"
        line = (
            f"{self.algo} {global_step:>10,}/{self.total:,} steps ({100 * frac:5.1f}%)  {sps:>7,.0f} steps/s  "
            f"elapsed {elapsed:6.0f}s  {eta}  return(last 10) {recent_return:8.2f}"
        ) + (f"  (compiling took {self.compile_seconds:.0f}s)" if self.compile_seconds else "")
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)
        self.last_print = now
        while self.next_mark <= frac:
            self.next_mark += 0.1

    def evaluate(self, act, make_envs, global_step: int) -> np.ndarray:
        """A greedy evaluation (rank 0 only), logged as eval_return; videos named by step."""
        if not self.write:
            return np.array([])
        returns = evaluate(act, make_envs, self.args.eval_episodes, self.args.seed + 100_000, self.video_dir(global_step))
        self.log(global_step, eval_return=float(returns.mean()), eval_return_std=float(returns.std()))
        return returns

    # signals and checkpoints
    def _catch_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread() or launched():
            return  # torchrun workers keep the default: all must stop at the same update

        def preempt(signum, frame):
            self.stop_reason = "preempted"

        def interrupt(signum, frame):
            if self.stop_reason is not None or not self.checkpoint_every:
                raise KeyboardInterrupt(f"signal {signum}")
            self.stop_reason = "interrupted"
            print(f"\n{self.algo}: interrupt: writing a checkpoint at the next step boundary (Ctrl-C again to stop now)", file=sys.stderr)

        for sig, handler in ((signal.SIGTERM, preempt), (signal.SIGUSR1, preempt), (signal.SIGINT, interrupt)):
            self._handlers[sig] = signal.signal(sig, handler)

    def checkpoint_due(self, prev_step: int, global_step: int) -> bool:
        """True every `--checkpoint-every` env steps, at the end of training (so a finished run can be
        extended), and at the step after a stop was asked for."""
        self.step = global_step
        if self.stop_reason is not None:
            return True
        if self.checkpoint_every and global_step >= self.args.total_timesteps:
            return True
        return bool(self.checkpoint_every) and global_step // self.checkpoint_every > prev_step // self.checkpoint_every

    def save_checkpoint(self, global_step: int, envs: gym.vector.VectorEnv, obs: np.ndarray, state: dict) -> None:
        """Write the script's `state` with the step, the envs (their state and current observation `obs`),
        the running episodes, the generators and the metrics written so far; then raise Stopped if a
        signal asked for a stop. At the end of training the file is written after the
        final evaluation, so that a run extended from it keeps that evaluation in its history."""
        if self.write:
            env, note = checkpoint.env_state(envs)
            content = {
                "format": CHECKPOINT_FORMAT, "algo": self.algo, "global_step": global_step, "resumes": self.resumes,
                "rng": checkpoint.rng_state(), "envs": env, "envs_note": note, "obs": checkpoint.pack(obs),
                "episodes": checkpoint.pack({"return": self.ep_return, "length": self.ep_length, "recent": self.recent_returns}),
                "state": checkpoint.pack(state),
            }
            if self.stop_reason is None and global_step >= self.args.total_timesteps:
                self._final_checkpoint = content  # nothing it holds changes during the evaluation
            else:
                self._write_checkpoint(content)
        if self.stop_reason is not None:
            raise Stopped(self.stop_reason)

    def _write_checkpoint(self, content: dict) -> None:
        t0 = time.perf_counter()
        self.file.flush()
        os.fsync(self.file.fileno())
        if self.tensorboard is not None:  # the events up to the checkpoint survive a kill, as the rows do
            self.tensorboard.flush()
        content = {**content, "metrics_bytes": self.file.tell(), "wall_seconds": self.elapsed()}
        checkpoint.save(self.path / "checkpoint.pt", content)
        self.checkpoint_seconds = round(time.perf_counter() - t0, 3)
        self.checkpoint_bytes = (self.path / "checkpoint.pt").stat().st_size

    def restore(self, envs: gym.vector.VectorEnv) -> dict | None:
        """The script's state from the checkpoint being resumed (None for a new run), plus its `obs` and
        `global_step`, with the generators, the envs and the running episodes put back. Where the envs'
        state was not captured, the envs are reset: `obs` and the episodes start anew (`envs_restarted`)."""
        if self.saved is None:
            return None
        saved, self.saved = self.saved, None
        checkpoint.set_rng_state(saved["rng"])
        state = {**checkpoint.unpack(saved["state"]), "global_step": saved["global_step"], "obs": checkpoint.unpack(saved["obs"]),
                 "envs_restarted": saved["envs"] is None}
        if saved["envs"] is not None:
            checkpoint.set_env_state(envs, saved["envs"])
            episodes = checkpoint.unpack(saved["episodes"])
            self.ep_return, self.ep_length, self.recent_returns = episodes["return"], episodes["length"], episodes["recent"]
            self.env_note = "restored"
        else:
            obs, _ = envs.reset(seed=self.args.seed + saved["global_step"])
            state["obs"] = obs.reshape(state["obs"].shape)
            self.recent_returns = checkpoint.unpack(saved["episodes"])["recent"]  # finished episodes still count
            self.env_note = f"episodes restarted on resume: {saved['envs_note']}"
        print(f"{self.algo}: resumed {self.path} at step {saved['global_step']:,} (envs: {self.env_note})", flush=True)
        return state

    def stopped(self, e: BaseException, global_step: int) -> str:
        """The summary's `error` for an exception that ended training, with one line on stderr."""
        if isinstance(e, Stopped):
            where = f"; resume with --resume {self.path}" if self.write else ""
            print(f"\n{self.algo}: {e.reason} at step {global_step:,}: checkpoint written{where}", file=sys.stderr)
            return e.reason
        if isinstance(e, KeyboardInterrupt):
            if self.write and self.checkpoint_every and (self.path / "checkpoint.pt").is_file():
                how = f"--resume {self.path} continues from its last checkpoint"
            else:
                how = "it cannot be resumed: no checkpoint was written (--checkpoint-every N writes one every N steps)"
            print(f"\n{self.algo}: interrupted at step {global_step:,}; writing logs; {how}", file=sys.stderr)
            return "interrupted"
        print(f"\n{self.algo}: stopped: {e}", file=sys.stderr)
        return str(e)

    def crashed(self, e: BaseException, global_step: int) -> None:
        """A bug ended training: metrics.csv and summary.json keep what happened, with the error; the
        script re-raises, so the traceback shows and the exit status is 1."""
        try:
            self.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            self.completed, self.eval_returns, self.train_seconds = False, np.array([]), 0.0
            self.finish(global_step)
        except Exception:  # the original error matters more than a second one while recording it
            pass

    def final_evaluation(self, act, make_envs, global_step: int) -> None:
        """The last evaluation, after the training time is taken; the run is then complete. A failure
        (e.g. no renderer for the video) costs the evaluation, not the run."""
        self.train_seconds = self.elapsed() - self.compile_seconds
        try:
            returns, message = self.evaluate(act, make_envs, global_step), None
        except Exception as e:  # the run's model and summary are written whatever happens here
            returns = np.array([])
            message = f"final evaluation failed: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            print(f"{self.algo}: {message}", file=sys.stderr)
        if self._final_checkpoint is not None:
            self._write_checkpoint(self._final_checkpoint)
            self._final_checkpoint = None
        self.eval_returns, self.error, self.completed = returns, message, True

    @contextlib.contextmanager
    def training(self, envs: gym.vector.VectorEnv):
        """The training loop's frame: subnormal floats flushed to zero while it runs (flush_denormals);
        Ctrl-C, a stop signal, a NaN loss or a lost worker end it with a line on stderr and the
        outcome in `error`; any other exception is a bug, recorded in metrics.csv and summary.json
        and raised again. The envs are closed on every path."""
        flush_before = flush_denormals()
        try:
            yield
        except (KeyboardInterrupt, Stopped, FloatingPointError, WorkerError) as e:
            self.error = self.stopped(e, self.step)
        except Exception as e:
            self.crashed(e, self.step)
            raise
        finally:
            envs.close()
            torch.set_flush_denormal(flush_before)

    def summary(self, global_step: int, train_seconds: float, eval_returns: np.ndarray, **fields) -> dict:
        """The common fields of summary.json; the script adds its own."""
        summary = {
            "algo": self.algo, "env": self.args.env_id, "seed": self.args.seed, "total_timesteps": global_step,
            "num_envs": self.args.num_envs, "wall_seconds": round(self.elapsed(), 2),
            "sps": round(global_step / max(train_seconds, 1e-9), 1),
            "eval_return_mean": float(eval_returns.mean()) if len(eval_returns) else None,
            "eval_return_std": float(eval_returns.std()) if len(eval_returns) else None,
            "eval_episodes": len(eval_returns),
            "train_return_last10": float(np.mean(self.recent_returns)) if self.recent_returns else None,
            **fields,
            "run_dir": str(self.path),
            "resumed_at": self.resumes, "envs_on_resume": self.env_note,
            "checkpoint_seconds": self.checkpoint_seconds, "checkpoint_bytes": self.checkpoint_bytes,
            **({"compile_seconds": round(self.compile_seconds, 2)} if self.args.compile or self.args.cudagraphs else {}),
            "versions": {"torch": torch.__version__, "gymnasium": gym.__version__, "numpy": np.__version__},
        }
        return summary

    def finish(self, global_step: int, model: nn.Module | dict | None = None, **fields) -> dict:
        """The end of a run: `model` (a module's state dict, or a dict of them) in model.pt with
        --save-model unless a NaN loss or a bug stopped the run; summary.json with the common
        fields and the script's `fields`; the final progress line, wandb closed, signal handlers
        given back. Returns the summary."""
        if model is not None and self.write and self.args.save_model and (self.completed or self.error in ("interrupted", "preempted")):
            torch.save(model.state_dict() if isinstance(model, nn.Module) else model, self.path / "model.pt")
        summary = self.summary(global_step, self.train_seconds or self.elapsed(), self.eval_returns, **fields,
                               completed=self.completed, error=self.error)
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)
        self._handlers = {}
        if not self.write:
            return summary
        self.progress(global_step, force=True)
        if self.show and self.tty:
            print()
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
        if self.wandb is not None:
            self.wandb.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))})
            self.wandb.finish(exit_code=0 if summary["completed"] and not summary["error"] else 1)
        if summary["completed"] and summary["eval_return_mean"] is not None:
            print(f"{self.algo}: done in {summary['wall_seconds']:.1f}s ({summary['sps']:,.0f} steps/s); eval return "
                  f"{summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} over {summary['eval_episodes']} episodes", flush=True)
        return summary


def main(algo: str, train: Callable, args) -> int:
    """Run `train(args)`; the exit status (module docstring) from its summary.

    Bad input (InputError) and workers that cannot form a group are one line and exit 2; any
    other exception is a bug: Python prints its traceback and the exit status is 1."""
    try:
        summary = train(args)
    except (InputError, WorkerError) as e:
        print(f"{algo}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        workers().shutdown()
    if summary["error"] == "interrupted":
        return EXIT_INTERRUPTED
    if summary["error"] == "preempted":
        return EXIT_PREEMPTED
    return EXIT_OK if summary["completed"] and summary["error"] is None else EXIT_FAILED
