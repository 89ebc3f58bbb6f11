"""The run of a script, knowing no algorithm: `Run`, made first in train(), owns threads, seeds,
the device, torchrun's workers, the run folder, metrics.csv, evaluation (`evaluate`), the progress
line, stop signals, checkpoints (harness/checkpoint.py, harness/resume.py) and summary.json;
`vector_env` builds the training and evaluation envs. The command line (flags, checks, exit
status) is harness/cli.py."""

from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import functools
import json
import math
import os
import platform
import random
import signal
import sys
import threading
import time
import types
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import AbstractSet, Any, Callable, Iterator

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from harness.cli import RunArgs, device, launched
from harness.errors import InputError, WorkerError

Policy = Callable[[np.ndarray], np.ndarray]  # observations [B, ...] -> actions [B] or [B, A]
# eval_envs(n, video_dir): n evaluation envs, recording into video_dir if given
EvalEnvs = Callable[[int, str | None], gym.vector.VectorEnv]

# MuJoCo's videos without a screen (read when mujoco is imported)
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")


class OneProcess:
    """harness.distributed's calls for a plain run, one process (rank 0 of 1): torch.distributed
    is imported only under torchrun."""

    def init(self, device: torch.device | str = "cpu", timeout: float | None = None) -> int:
        return 1  # the number of workers

    def rank(self) -> int:
        return 0

    def is_main(self) -> bool:
        return True

    def world_size(self) -> int:
        return 1

    def check_same(self, config: dict, what: str = "arguments") -> None:
        pass  # one process agrees with itself

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor  # every worker's rows: this one's

    def shutdown(self, wait: bool | None = None) -> None:
        pass


def check_spaces(
    envs: gym.vector.VectorEnv,
    algo: str,
    env_id: str,
    discrete: bool = True,
    continuous: bool = False,
    bounded: bool = False,
) -> None:
    """InputError (envs closed) unless `envs` fit `algo`: the action kinds asked
    (finite bounds if `bounded`), Box observations, images with Discrete actions only."""
    space = envs.single_action_space
    obs = envs.single_observation_space
    box = isinstance(space, gym.spaces.Box)
    names = ["Discrete"] * discrete + ["1-D Box"] * continuous
    kinds = "continuous (Box)" if names == ["1-D Box"] else " or a ".join(names)
    one_dim = box and len(space.shape or ()) == 1
    fits = (discrete and isinstance(space, gym.spaces.Discrete)) or (continuous and one_dim)
    bounds = (space.low, space.high) if bounded and isinstance(space, gym.spaces.Box) else ()
    finite = all(np.isfinite(bound).all() for bound in bounds)
    images = f"takes image observations with discrete actions only; {env_id} has {space}"
    if not discrete:
        images = f"takes vector observations; {env_id} gives images of shape {obs.shape}"
    for ok, problem in [
        (fits, f"needs a {kinds} action space; {env_id} has {space}"),
        (finite, f"needs finite action bounds to scale its tanh output; {env_id} has {space}"),
        (isinstance(obs, gym.spaces.Box), f"needs a Box observation space; {env_id} has {obs}"),
        (len(obs.shape or ()) != 3 or isinstance(space, gym.spaces.Discrete), images),
    ]:
        if not ok:
            envs.close()
            raise InputError(f"{algo} {problem}")


def vector_env(
    make: Callable[[str | None], gym.Env],
    num_envs: int,
    algo: str,
    env_id: str,
    video_dir: str | None = None,
    discrete: bool = True,
    continuous: bool = False,
    bounded: bool = False,
) -> gym.vector.VectorEnv:
    """`num_envs` envs `make(render_mode)` stepped together, SAME_STEP autoreset (the true final
    observation in infos["final_obs"]), first episodes recorded in `video_dir` if given
    (harness/extras.py). An unknown id, an env refusing its settings, spaces that do not fit `algo`
    (`check_spaces`): InputError."""
    makers = [functools.partial(make, None)] * num_envs
    if video_dir is not None:
        import harness.extras as extras  # a copy without it: imported with --capture-video only

        makers = extras.recorded_envs(make, video_dir, num_envs)
    with bad_input(env_id):
        envs = gym.vector.SyncVectorEnv(makers, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    check_spaces(envs, algo, env_id, discrete, continuous, bounded)
    return envs


class Stopped(Exception):
    """A stop signal's reason (the message), raised at a step boundary after the checkpoint."""


def flush_denormals() -> bool:
    """Make torch flush subnormals (< ~1.2e-38) to zero; returns the previous setting
    (read off a product). Adam's and RMSprop's moments of often-zero gradients decay there, where
    x86 arithmetic is ~100x slower."""
    before = (torch.tensor(1e-30) * 1e-10).item() == 0.0
    torch.set_flush_denormal(True)
    return before


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


@contextlib.contextmanager
def bad_input(env_id: str = "") -> Iterator[None]:
    """A ValueError or gymnasium error inside becomes InputError: around what fails only on bad
    input."""
    try:
        yield
    except InputError:
        raise
    except gym.error.UnregisteredEnv as e:
        raise InputError(f"unknown environment id {env_id!r} ({_first_line(e)})") from None
    except (ValueError, gym.error.Error) as e:
        message = _first_line(e) or type(e).__name__
        extra = next((name for name in ("box2d", "mujoco") if name in message.lower()), None)
        if isinstance(e, gym.error.DependencyNotInstalled) and extra:
            message += (
                f" (this project's extra: pip install -r requirements/requirements-{extra}.txt)"
            )
        raise InputError(message) from None


def evaluate(
    act: Policy, make_envs: EvalEnvs, episodes: int, seed: int, video_dir: str | None = None
) -> np.ndarray:
    """[episodes] returns of the policy `act`:
    the first episode of each env of `make_envs(n, video_dir)`."""
    with contextlib.closing(make_envs(episodes, video_dir)) as envs:
        obs, _ = envs.reset(seed=seed)
        returns = np.zeros(episodes)
        finished = np.zeros(episodes, dtype=bool)
        while not finished.all():
            obs, rewards, terminated, truncated, _ = envs.step(act(obs))
            returns += np.where(finished, 0.0, rewards)  # envs past their first episode are ignored
            finished |= terminated | truncated
    return returns


class Run:
    """The run folder `<run_dir>/<env>__<algo>__<seed>__<time>/` (or the one `--resume` reopens),
    its files, progress line, signals, checkpoints. Made first in train(): sets torch's threads,
    seeds every generator (`device`, `seed`), joins torchrun's `workers` if asked (`world`: how
    many; rank 0 alone writes, as with `write=False`). It writes from begin() on: a failure before
    leaves nothing behind."""

    def __init__(
        self,
        algo: str,
        args: RunArgs,
        fields: tuple[str, ...],
        workers: bool = False,
        write: bool = True,
    ) -> None:
        absent = ", ".join(f.name for f in dataclasses.fields(RunArgs) if not hasattr(args, f.name))
        if absent:
            reads = f"Run reads {absent} from the script's Args"
            raise TypeError(f"{reads}, which lacks them (harness.cli.RunArgs)")
        if isinstance(fields, str):
            raise TypeError(f"Run's fields are a tuple of metric names, not the string {fields!r}")
        torch.set_num_threads(args.torch_threads)
        self.device = device(args)
        # harness.distributed under torchrun (imported only there),
        # else a stand-in with the same calls
        self.workers = (
            import_module("harness.distributed") if workers and launched() else OneProcess()
        )
        self.world: int = self.workers.init(self.device)  # 1 in a plain process
        self.workers.check_same(dataclasses.asdict(args))  # mismatched command lines fail here
        # worker r's env i gets seed + r * num_envs + i:
        # no two envs share a seed; rank 0 is a plain run
        self.seed: int = args.seed + self.workers.rank() * args.num_envs
        random.seed(self.seed)  # a worker's network is overwritten by rank 0's
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)
        self.algo = algo
        self.args = args
        self.write = write and self.workers.is_main()
        # metrics.csv's columns; a row naming another metric is refused (_check_metrics)
        self.fields = ["global_step", "wall_seconds", *fields]
        self.columns = set(fields)
        self.path: Path = None  # type: ignore[assignment]  # set by begin() where the run writes files
        # the training envs' running episodes: return and length so far [B]; the last 10 returns
        self.ep_return = np.zeros(args.num_envs)
        self.ep_length = np.zeros(args.num_envs, dtype=np.int64)
        self.recent_returns: list[float] = []
        self.start = time.perf_counter()
        self.next_check = 0
        self.checkpoint_every = args.checkpoint_every
        self.stop_reason: str | None = None  # set by a stop signal's handler
        self.resumes: list[int] = []  # the steps it was resumed at
        # the note on the envs of a resumed run; the last checkpoint's time and size
        self.env_note: str | None = None
        self.checkpoint_seconds: float | None = None
        self.checkpoint_bytes: int | None = None
        self._final_checkpoint: dict | None = None
        self.extras: Any = None  # harness.extras.Sinks with --tensorboard or --track
        # the checkpoint a resumed run continues from (read here, put back by begin())
        self.saved: dict | None = None
        # whether begin() reset the envs (a new run, or envs not captured by the checkpoint)
        self.envs_reset = True
        self._handlers: dict = {}
        # the outcome, set by stoppable() and final_evaluation(), read by finish()
        self.step = 0
        self.completed = False
        self.eval_returns = np.array([])
        self.train_seconds = 0.0
        self.error: str | None = None
        # first calls of what compile() compiled, kept out of train_seconds
        self.compile_seconds = 0.0
        # the ETA's rate is this phase's (heatup, learning)
        self.heatup = getattr(args, "learning_starts", 0)
        self.marks: collections.deque[tuple[float, int]] = collections.deque(maxlen=64)
        if self.checkpoint_every or args.resume:
            if launched():
                why = (
                    "--checkpoint-every and --resume work in one process; "
                    "under torchrun leave them out"
                )
                raise InputError(why)
            import harness.checkpoint as checkpoint  # noqa: F401  # a copy without it stops here
        # a missing package: bad input, found now
        if args.tensorboard or args.track or args.capture_video:
            import harness.extras as extras

            extras.check_packages(args)
        self.config = {"algo": algo, **json.loads(json.dumps(dataclasses.asdict(args)))}
        # the folder and checkpoint checked now, before anything is written
        if args.resume and self.write:
            import harness.resume as resume

            self.path = Path(args.resume)
            defaults = {f.name: f.default for f in dataclasses.fields(RunArgs)}
            self.saved = resume.checked_checkpoint(
                self.path, algo, self.config, self.fields, defaults
            )
            self.resumes = [*self.saved["resumes"], self.saved["global_step"]]

    def _open(self) -> None:
        """The run folder (or the one --resume reopens), its files and first line, for begin()."""
        args = self.args
        algo = self.algo
        config = self.config
        self.start = time.perf_counter()
        # metrics.csv cut back; config.json rewritten, with the new length or logging flags
        if self.saved is not None:
            import harness.resume as resume

            self.start = time.perf_counter() - self.saved["wall_seconds"]
            self.file = resume.reopen_metrics(self.path, self.saved, config)
        else:
            # <run_dir>/<env>__<algo>__<seed>__<time>;
            # ALE/Breakout-v5 as ALE-Breakout-v5 (one folder)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            env = args.env_id.replace("/", "-")
            base = path = Path(args.run_dir) / f"{env}__{algo}__{args.seed}__{stamp}"
            k = 1
            try:
                while path.exists():  # two runs started in the same second
                    path = Path(f"{base}-{k}")
                    k = k + 1
                path.mkdir(parents=True)
                (path / "config.json").write_text(json.dumps(config, indent=2))
            except OSError as e:
                raise InputError(
                    f"cannot write the run folder {path} ({e.strerror or e}); "
                    "choose another --run-dir"
                ) from None
            self.path = path
            self.file = open(path / "metrics.csv", "w", newline="")
            csv.DictWriter(self.file, self.fields).writeheader()
        self.csv = csv.DictWriter(self.file, self.fields)
        if args.tensorboard or args.track:
            import harness.extras as extras

            resumed_step = self.saved["global_step"] if self.saved is not None else None
            self.extras = extras.Sinks(algo, args, config, self.path, resumed_step)
        self.total = args.total_timesteps
        self.show = args.progress
        self.tty = sys.stdout.isatty()
        self.last_print = self.last_flush = time.perf_counter()
        self.next_mark = 0.1
        self.printed_step = -1
        # from here on Ctrl-C and stop signals end the loop at a step boundary
        self._catch_signals()
        workers = f" x {self.world} workers" if self.world > 1 else ""
        steps = f"{args.total_timesteps:,} steps on {self.device}{workers}"
        print(
            f"{algo}: {args.env_id}, seed {args.seed}, {steps}; run folder {self.path}", flush=True
        )

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def compile(self, fn: Callable[..., Any]) -> Any:
        """`fn` under torch.compile with --compile or --cudagraphs
        (harness.extras.compiled), else `fn`."""
        if not (self.args.compile or self.args.cudagraphs):
            return fn
        import harness.extras as extras

        return extras.compiled(
            fn,
            cuda=self.device.type == "cuda",
            cudagraphs=self.args.cudagraphs,
            count_compile_time=self._count_compile_time,
        )

    def _count_compile_time(self, seconds: float) -> None:
        """A compiled function's first call (compile()), kept out of the training time."""
        self.compile_seconds += seconds

    def _check_metrics(self, names: AbstractSet[str]) -> None:
        unknown = names - self.columns
        if unknown:  # a metric added to the script without its column
            raise ValueError(
                f"Run.log: {', '.join(sorted(unknown))} not among the metrics.csv columns "
                f"{self.fields[2:]}; add {'it' if len(unknown) == 1 else 'them'} to the list of "
                "fields the script passes to Run(...)"
            )

    def log(self, global_step: int, **metrics: Any) -> None:
        """A row of metrics.csv (and TensorBoard, wandb): numbers, or tensors and numpy scalars
        (their .item()); `sps` (a column): env steps a second so far."""
        metrics = {k: v.item() if hasattr(v, "item") else v for k, v in metrics.items()}
        if "sps" in self.columns:
            metrics.setdefault("sps", round(global_step / self.elapsed()))
        self._row(global_step, **metrics)

    def _row(self, global_step: int, **metrics: float) -> None:
        self._check_metrics(metrics.keys())
        if not self.write:
            return
        self.csv.writerow(
            {"global_step": global_step, "wall_seconds": round(self.elapsed(), 3), **metrics}
        )
        if self.extras is not None:
            self.extras.log(metrics, global_step)

    def episodes(self, global_step: int, rewards: np.ndarray, done: np.ndarray) -> None:
        """Add one vector step's rewards [B] to the running episodes; log and restart those that
        ended [B]. The run's step (where a stop or a bug ends it) is `global_step` from here on."""
        self.step = global_step
        self.ep_return += rewards
        self.ep_length += 1
        for i in np.flatnonzero(done):
            episodic_return = float(self.ep_return[i])
            episodic_length = int(self.ep_length[i])
            self.recent_returns = (self.recent_returns + [episodic_return])[-10:]
            self._row(global_step, episodic_return=episodic_return, episodic_length=episodic_length)
            self.ep_return[i] = 0.0
            self.ep_length[i] = 0

    def _eta(self, global_step: int, now: float) -> float:
        """Seconds left at the last minute's rate in this phase
        (learning steps cost more than heatup's)."""
        if self.marks and (self.marks[-1][1] <= self.heatup) != (global_step <= self.heatup):
            self.marks.clear()  # a new phase
        self.marks.append((now, global_step))
        while len(self.marks) > 2 and now - self.marks[1][0] > 60.0:
            self.marks.popleft()
        (t0, s0) = self.marks[0]
        elapsed = now - self.start
        recent = now - t0 > 1e-3 and global_step > s0
        rate = (global_step - s0) / (now - t0) if recent else global_step / max(elapsed, 1e-9)
        return (self.total - global_step) / max(rate, 1e-9)

    def progress(self, global_step: int, force: bool = False) -> None:
        """Steps, steps/s, ETA, recent return: redrawn on a terminal, every 10% in a log."""
        if not self.write or (global_step < self.next_check and not force):
            return
        self.next_check = global_step + 1000
        now = time.perf_counter()
        eta_seconds = self._eta(global_step, now) if self.show else 0.0  # a rate mark at every call
        if now - self.last_flush > 5.0:
            self._flush()
            self.last_flush = now
        frac = global_step / self.total
        early = now - self.last_print < 0.5 if self.tty else frac < self.next_mark
        if not self.show or (force and self.printed_step == global_step) or (not force and early):
            return
        self.printed_step = global_step
        self.last_print = now
        recent_return = float(np.mean(self.recent_returns)) if self.recent_returns else float("nan")
        elapsed = now - self.start
        # random actions: no rate yet
        heatup = global_step < self.total and global_step <= self.heatup
        eta = f"heatup to {self.heatup:,}" if heatup else f"ETA {eta_seconds:6.0f}s"
        sps = global_step / max(elapsed - self.compile_seconds, 1e-9)
        line = f"{self.algo} {global_step:>10,}/{self.total:,} steps ({100 * frac:5.1f}%)  "
        line += (
            f"{sps:>7,.0f} steps/s  elapsed {elapsed:6.0f}s  {eta}  "
            f"return(last 10) {recent_return:8.2f}"
        )
        line += f"  (compiling took {self.compile_seconds:.0f}s)" if self.compile_seconds else ""
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)
        while self.next_mark <= frac:
            self.next_mark += 0.1

    def _flush(self) -> None:
        self.file.flush()
        if self.extras is not None:
            self.extras.flush()

    def evaluate(self, act: Policy, global_step: int) -> np.ndarray:
        """An evaluation of `act` on begin()'s eval envs (rank 0), logged as eval_return;
        videos by step."""
        if not self.write:
            return np.array([])
        video_dir = (
            str(self.path / "videos" / f"step-{global_step:09d}")
            if self.args.capture_video
            else None
        )
        returns = evaluate(
            act, self.eval_envs, self.args.eval_episodes, self.args.seed + 100_000, video_dir
        )
        self._row(
            global_step, eval_return=float(returns.mean()), eval_return_std=float(returns.std())
        )
        return returns

    def _catch_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread() or launched():
            return  # torchrun workers keep the default: all must stop at the same update
        boundary = "writing a checkpoint at the next step boundary (Ctrl-C again to stop now)"

        def preempt(signum: int, frame: types.FrameType | None) -> None:
            self.stop_reason = "preempted"

        def interrupt(signum: int, frame: types.FrameType | None) -> None:
            if self.stop_reason is not None or not self.checkpoint_every:
                raise KeyboardInterrupt(f"signal {signum}")
            self.stop_reason = "interrupted"
            print(f"\n{self.algo}: interrupt: {boundary}", file=sys.stderr)

        handlers = {signal.SIGTERM: preempt, signal.SIGUSR1: preempt, signal.SIGINT: interrupt}
        self._handlers = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}

    def evaluation_due(self, prev_step: int, global_step: int) -> bool:
        """Every `--eval-every` env steps crossed, except at the end
        (the final evaluation comes then)."""
        every = self.args.eval_every
        total = self.args.total_timesteps
        return bool(every) and global_step // every > prev_step // every and global_step < total

    def stop_if_nan(self, global_step: int, loss: torch.Tensor, **others: torch.Tensor) -> None:
        """FloatingPointError (the run stops; its summary says why)
        if `loss` or an `others` is not finite."""
        values = {"loss": loss.item(), **{name: value.item() for name, value in others.items()}}
        if not all(math.isfinite(v) for v in values.values()):
            extra = ", ".join(
                f"{name.replace('_', ' ')} {v}" for name, v in values.items() if name != "loss"
            )
            where = f"{values['loss']}{f' ({extra})' if extra else ''} at step {global_step}"
            raise FloatingPointError(
                f"loss became {where}; lower the learning rate or clip gradients"
            )

    def checkpoint_due(self, prev_step: int, global_step: int) -> bool:
        """Every `--checkpoint-every` steps, at the end
        (so the run can be extended), on a stop signal."""
        every = self.checkpoint_every
        end = global_step >= self.args.total_timesteps
        due = bool(every) and (end or global_step // every > prev_step // every)
        return self.stop_reason is not None or due

    def save_checkpoint(self, global_step: int, obs: np.ndarray, objects: dict) -> None:
        """Checkpoint `objects` with the step, envs, `obs`, episodes, generators (written now, or,
        at the end of a run no signal stopped, after the final evaluation, so that a run extended
        from it keeps that); then Stopped on a signal."""
        # a copy without it writes none, even on a signal
        if self.write and find_spec("harness.checkpoint"):
            import harness.checkpoint as checkpoint

            episodes = {
                "return": self.ep_return,
                "length": self.ep_length,
                "recent": self.recent_returns,
            }
            content = checkpoint.content(
                self.algo, global_step, self.resumes, self.envs, obs, episodes, objects
            )
            if self.stop_reason is None and global_step >= self.args.total_timesteps:
                self._final_checkpoint = content  # nothing it holds changes during the evaluation
            else:
                self._write_checkpoint(content)
        if self.stop_reason is not None:
            raise Stopped(self.stop_reason)

    def _write_checkpoint(self, content: dict) -> None:
        """`content` saved in the run folder, after metrics.csv (and TensorBoard's events) up to it
        are flushed and synced, so they survive a kill; its time and size go to the summary."""
        import harness.checkpoint as checkpoint

        t0 = time.perf_counter()
        self._flush()
        os.fsync(self.file.fileno())
        content = {**content, "metrics_bytes": self.file.tell(), "wall_seconds": self.elapsed()}
        checkpoint.save(self.path / "checkpoint.pt", content)
        self.checkpoint_seconds = round(time.perf_counter() - t0, 3)
        self.checkpoint_bytes = (self.path / "checkpoint.pt").stat().st_size

    def begin(
        self, envs: gym.vector.VectorEnv, eval_envs: EvalEnvs, checkpoint: dict
    ) -> tuple[np.ndarray, int]:
        """(obs, global_step) of the training `envs` (action spaces seeded): a new run's reset with
        `seed` at 0, or a resumed run's, the `checkpoint` objects, generators, envs, episodes put
        back (`envs_reset`: envs reset, in a new run or where their state was not captured).
        `eval_envs(n, video_dir)` makes evaluation envs. The run folder is written from here on
        (first line printed, signals caught)."""
        self.envs = envs
        self.eval_envs = eval_envs
        if self.write:
            self._open()
        envs.action_space.seed(self.seed)
        envs.single_action_space.seed(self.seed)
        if self.saved is None:
            return envs.reset(seed=self.seed)[0], 0
        import harness.resume as resume

        restored = resume.restore(self.saved, envs, checkpoint, self.args.seed)
        self.saved = None
        self.envs_reset = restored.envs_reset
        if restored.ep_return is not None and restored.ep_length is not None:
            self.ep_return = restored.ep_return
            self.ep_length = restored.ep_length
        self.recent_returns = restored.recent_returns
        self.env_note = restored.env_note
        print(
            f"{self.algo}: resumed {self.path} at step {restored.global_step:,} "
            f"(envs: {self.env_note})",
            flush=True,
        )
        return restored.obs, restored.global_step

    def after_step(
        self,
        prev_step: int,
        global_step: int,
        obs: np.ndarray,
        act: Policy,
        checkpoint: Callable[[], dict],
    ) -> None:
        """A step's tail, the run's step now `global_step`: evaluate `act`;
        save checkpoint() with `obs` (Stopped on a signal); progress."""
        self.step = global_step
        if self.evaluation_due(prev_step, global_step):
            self.evaluate(act, global_step)
        if self.checkpoint_due(prev_step, global_step):
            self.save_checkpoint(global_step, obs, checkpoint())
        self.progress(global_step)

    def _stopped(self, e: BaseException) -> str:
        """The summary's `error` for an exception that ended training, with one line on stderr."""
        how = "resuming it needs harness/resume.py beside the script"  # a copy may lack the files
        if find_spec("harness.resume"):
            how = f"resume with --resume {self.path}"
        line = f"stopped: {e}"
        error = str(e)
        if isinstance(e, Stopped):
            where = ": no checkpoint written: that needs harness/checkpoint.py beside the script"
            if find_spec("harness.checkpoint"):
                where = f": checkpoint written; {how}"
            line = f"{e} at step {self.step:,}{where if self.write else ''}"
        elif isinstance(e, KeyboardInterrupt):
            if self.write and self.checkpoint_every and (self.path / "checkpoint.pt").is_file():
                how = f"its last checkpoint is written; {how}"
            else:
                how = (
                    "it cannot be resumed: no checkpoint was written "
                    "(--checkpoint-every N writes one every N steps)"
                )
            line = f"interrupted at step {self.step:,}; writing logs; {how}"
            error = "interrupted"
        print(f"\n{self.algo}: {line}", file=sys.stderr)
        return error

    @contextlib.contextmanager
    def stoppable(self) -> Iterator[None]:
        """The loop's frame (subnormals flushed, envs closed after): Ctrl-C, a stop signal, a NaN
        loss, a lost worker end it in a line (finish() writes the summary); other exceptions are
        bugs, recorded, raised."""
        flush_before = flush_denormals()
        try:
            yield
        except (KeyboardInterrupt, Stopped, FloatingPointError, WorkerError) as e:
            self.error = self._stopped(e)
        except Exception as e:
            # recorded as far as it goes: the original error matters more than a second one
            with contextlib.suppress(Exception):
                self.error = f"{type(e).__name__}: {_first_line(e)}"
                self.completed = False
                self.eval_returns = np.array([])
                self.train_seconds = 0.0
                self.finish(self.step)
            raise
        finally:
            self.envs.close()
            torch.set_flush_denormal(flush_before)

    def final_evaluation(self, act: Policy, global_step: int) -> None:
        """The last evaluation, after the training time is taken;
        its failure costs it, not the run."""
        self.train_seconds = self.elapsed() - self.compile_seconds
        message = None
        try:
            returns = self.evaluate(act, global_step)
        except KeyboardInterrupt:
            self.error = self._stopped(KeyboardInterrupt())
            return
        except Exception as e:  # the run's model and summary are written whatever happens here
            returns = np.array([])
            message = f"final evaluation failed: {type(e).__name__}: {_first_line(e)}"
            print(f"{self.algo}: {message}", file=sys.stderr)
        if self._final_checkpoint is not None:
            self._write_checkpoint(self._final_checkpoint)
            self._final_checkpoint = None
        self.eval_returns = returns
        self.error = message
        self.completed = True

    def finish(
        self,
        global_step: int,
        act: Policy | None = None,
        model: nn.Module | dict | None = None,
        **fields: Any,
    ) -> dict:
        """The final evaluation of `act` unless stopped; model.pt (`model`: a module or state
        dicts) with --save-model unless NaN or a bug stopped it; summary.json
        (common fields, `fields`); signals reset."""
        if act is not None and self.error is None:
            self.final_evaluation(act, global_step)
        kept = self.completed or self.error in ("interrupted", "preempted")
        if model is not None and self.write and self.args.save_model and kept:
            torch.save(
                model.state_dict() if isinstance(model, nn.Module) else model,
                self.path / "model.pt",
            )
        args = self.args
        returns = self.eval_returns
        train_seconds = self.train_seconds or self.elapsed()
        mean, std = (float(returns.mean()), float(returns.std())) if len(returns) else (None, None)
        recent = float(np.mean(self.recent_returns)) if self.recent_returns else None
        summary = {
            "algo": self.algo,
            "env": args.env_id,
            "seed": args.seed,
            "total_timesteps": global_step,
        }
        summary |= {"num_envs": args.num_envs, "wall_seconds": round(self.elapsed(), 2)}
        summary |= {
            "sps": round(global_step / max(train_seconds, 1e-9), 1),
            "eval_return_mean": mean,
        }
        summary |= {
            "eval_return_std": std,
            "eval_episodes": len(returns),
            "train_return_last10": recent,
        }
        summary |= {
            **fields,
            "completed": self.completed,
            "error": self.error,
            "run_dir": str(self.path),
        }
        summary |= {"resumed_at": self.resumes, "envs_on_resume": self.env_note}
        summary |= {
            "checkpoint_seconds": self.checkpoint_seconds,
            "checkpoint_bytes": self.checkpoint_bytes,
        }
        if args.compile or args.cudagraphs:
            summary["compile_seconds"] = round(self.compile_seconds, 2)
        versions = {
            "torch": torch.__version__,
            "gymnasium": gym.__version__,
            "numpy": np.__version__,
        }
        summary["versions"] = versions
        # where the floats were made: other CPUs and thread counts give other floats
        cpuinfo = Path("/proc/cpuinfo")
        lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
        models = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
        summary["machine"] = {
            "cpu": models[0] if models else platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(),
        }
        while self._handlers:  # the handlers from before begin() put back
            signal.signal(*self._handlers.popitem())
        # a Run whose begin() never came writes nothing
        if not self.write or not hasattr(self, "file"):
            return summary
        self.progress(global_step, force=True)
        if self.show and self.tty:
            print()
        self.file.close()
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
        if self.extras is not None:
            self.extras.close(summary)
        if summary["completed"] and summary["eval_return_mean"] is not None:
            done = f"done in {summary['wall_seconds']:.1f}s ({summary['sps']:,.0f} steps/s)"
            evaluation = (
                f"eval return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f}"
            )
            print(
                f"{self.algo}: {done}; {evaluation} over {summary['eval_episodes']} episodes",
                flush=True,
            )
        return summary
