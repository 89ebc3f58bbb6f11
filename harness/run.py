"""Run plumbing shared by every script; nothing here knows an algorithm: the run flags (`RunArgs`, `check`,
`parse_args`), the envs' maker (`vector_env`), the run folder, seeds, workers, progress line, signals and
checkpoints (`Run`), `evaluate`, `main`.

Exit status: 0 done; 1 a NaN loss, a lost worker, a failed final evaluation (summary and model kept) or a bug
(its traceback; metrics.csv and summary.json keep the error); 2 bad input (`InputError`), one line; 75 stopped
by SIGTERM or SIGUSR1 (SLURM's before a time limit) at the next step boundary, after writing a checkpoint;
130 Ctrl-C, which with `--checkpoint-every` first waits for the step boundary and writes a checkpoint.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import csv
import dataclasses
import functools
import importlib.util
import inspect
import io
import json
import math
import os
import platform
import random
import re
import signal
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn

from harness.errors import InputError, WorkerError

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # MuJoCo's videos without a screen; read when mujoco is imported

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_PREEMPTED, EXIT_INTERRUPTED = 0, 1, 2, 75, 130
CHECKPOINT_FORMAT = 1


@dataclasses.dataclass
class RunArgs:
    """The run flags every script's `Args` extends (giving a field another default where it needs one)."""

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


# the conditions on fields several scripts share, checked where a script's Args has the fields
SHARED_CHECKS: list[tuple[tuple[str, ...], Callable[..., bool], str]] = [
    (("batch_size", "buffer_size"), lambda batch, buffer: batch <= buffer,
     "--batch-size {} is larger than --buffer-size {}"),
    (("exploration_fraction",), lambda x: 0.0 < x <= 1.0, "--exploration-fraction must be in (0, 1], got {}"),
    (("ou_theta",), lambda x: 0.0 < x <= 1.0, "--ou-theta must be in (0, 1], got {}"),
    (("target_rate",), lambda x: 0.0 < x <= 1.0, "--target-rate must be in (0, 1], got {}"),
    (("learning_starts", "total_timesteps"), lambda start, total: start < total,
     "--learning-starts {} leaves no step to learn in --total-timesteps {}"),
    (("hidden_sizes",), lambda sizes: all(h > 0 for h in sizes), "--hidden-sizes must be positive, got {}"),
]


def check(args: RunArgs, conditions: Sequence[tuple[bool, str]] = (), positive: tuple[str, ...] = (),
          fractions: tuple[str, ...] = (), nonnegative: tuple[str, ...] = (), single_process: str | None = None) -> None:
    """InputError naming the first bad value: the run flags, then the fields in `positive` (> 0, or None where
    allowed), `fractions` (in [0, 1]), `nonnegative` (>= 0), SHARED_CHECKS, then `conditions` ((ok, message)
    pairs). `single_process`: the script's name where it trains in one process only (torchrun refused)."""
    if args.compile or args.cudagraphs:  # harness/extras.py: imported with the flags only
        from harness.extras import compile_checks
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
        *(compile_checks(args, _device(args)) if args.compile or args.cudagraphs else ()),
        *((value(n) is None or value(n) > 0, f"{flag(n)} must be positive, got {value(n)}") for n in positive),
        *((0.0 <= value(n) <= 1.0, f"{flag(n)} must be in [0, 1], got {value(n)}") for n in fractions),
        *((value(n) >= 0, f"{flag(n)} must be >= 0, got {value(n)}") for n in nonnegative),
        *((ok(*map(value, names)), message.format(*map(value, names))) for names, ok, message in SHARED_CHECKS
          if all(hasattr(args, n) for n in names)),
        *conditions,
        (single_process is None or not launched(), f"{single_process} runs in one process; torchrun started "
         f"{os.environ.get('WORLD_SIZE')} workers that would train independent copies (several workers: a2c, "
         f"n_step_q, sarsa). Run `python algos/{single_process}.py` instead"),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)


def check_spaces(envs: gym.vector.VectorEnv, algo: str, env_id: str, discrete: bool = True, continuous: bool = False,
                 bounded: bool = False) -> None:
    """InputError (envs closed) unless `envs` fit `algo`: the action kinds asked (finite bounds if `bounded`),
    Box observations, images with Discrete actions only."""
    space, obs = envs.single_action_space, envs.single_observation_space
    box, names = isinstance(space, gym.spaces.Box), ["Discrete"] * discrete + ["1-D Box"] * continuous
    kinds = "continuous (Box)" if names == ["1-D Box"] else " or a ".join(names)
    for ok, problem in [
        ((discrete and isinstance(space, gym.spaces.Discrete)) or (continuous and box and len(space.shape or ()) == 1),
         f"needs a {kinds} action space; {env_id} has {space}"),
        (not (bounded and isinstance(space, gym.spaces.Box))
         or (np.isfinite(space.low).all() and np.isfinite(space.high).all()),
         f"needs finite action bounds to scale its tanh output; {env_id} has {space}"),
        (isinstance(obs, gym.spaces.Box), f"needs a Box observation space; {env_id} has {obs}"),
        (len(obs.shape or ()) != 3 or isinstance(space, gym.spaces.Discrete),
         f"takes image observations with discrete actions only; {env_id} has {space}" if discrete
         else f"takes vector observations; {env_id} gives images of shape {obs.shape}"),
    ]:
        if not ok:
            envs.close()
            raise InputError(f"{algo} {problem}")


def vector_env(make: Callable[[str | None], gym.Env], num_envs: int, algo: str, env_id: str,
               video_dir: str | None = None, discrete: bool = True, continuous: bool = False,
               bounded: bool = False) -> gym.vector.VectorEnv:
    """`num_envs` envs `make(render_mode)` stepped together, SAME_STEP autoreset (the true final observation in
    infos["final_obs"]); with `video_dir` each env's first episode is recorded there (harness/extras.py). An
    unknown id or an env that refuses its settings is InputError, and so are spaces that do not fit `algo`
    (`check_spaces`: the action kinds asked, finite bounds if `bounded`)."""
    def one(i: int) -> gym.Env:
        if video_dir is None:
            return make(None)
        from harness.extras import record_first_episode

        return record_first_episode(make("rgb_array"), video_dir, i)

    with bad_input(env_id):
        envs = gym.vector.SyncVectorEnv([functools.partial(one, i) for i in range(num_envs)],
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    check_spaces(envs, algo, env_id, discrete, continuous, bounded)
    return envs


def _device(args: RunArgs) -> torch.device:
    """--device; auto is cuda only where a GPU was measured faster than a CPU core (Atari: docs/speed.md)."""
    atari = args.env_id.startswith("ALE/") or "NoFrameskip" in args.env_id
    gpu = args.device == "cuda" or (args.device == "auto" and atari and torch.cuda.is_available())
    return torch.device("cuda" if gpu else "cpu")


KERNEL_VARIABLES = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")


def machine() -> dict:
    """What a run's floats depend on: MKL, oneDNN, ATen pick kernels by CPU and KERNEL_VARIABLES (`kind`)."""
    cpu: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            cpu.setdefault(key.strip(), value.strip())
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    info: dict[str, Any] = {
        "cpu": cpu.get("model name") or platform.processor() or platform.machine(),
        "vendor": cpu.get("vendor_id") or platform.machine(),
        "capability": torch.backends.cpu.get_cpu_capability(), "blas": blas.group(1) if blas else None,
        "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "kernel_variables": {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ}}
    variables = " ".join(f"{k}={v}" for k, v in info["kernel_variables"].items())
    info["kind"] = " ".join(filter(None, (info["vendor"], info["cpu"], info["capability"], info["blas"], variables)))
    return info


def launched() -> bool:  # one of several torchrun workers
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


# harness.distributed's calls for one process (rank 0 of 1): torch.distributed is imported only under torchrun
_ONE_PROCESS = types.SimpleNamespace(
    WorkerError=WorkerError, init=lambda device=None, timeout=None: 1, rank=lambda: 0, is_main=lambda: True,
    world_size=lambda: 1, check_same=lambda config, what="arguments": None, gather=lambda tensor: tensor,
    shutdown=lambda wait=None: None)


class Stopped(Exception):
    """A signal asked the run to stop (its reason is the message); raised at a step boundary, after the checkpoint."""


def flush_denormals() -> bool:
    """Make torch flush subnormals (< ~1.2e-38) to zero; returns the previous setting (read off a product).
    Adam's and RMSprop's moments of often-zero gradients decay there, where x86 arithmetic is ~100x slower."""
    before = (torch.tensor(1e-30) * 1e-10).item() == 0.0
    torch.set_flush_denormal(True)
    return before


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


def _cli(args_class, description: str, default=None):
    """tyro.cli, its boxed error messages (a value it cannot parse, an unknown flag) one `error:` line, exit 2."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(args_class, description=description, default=default)
    except BrokenPipeError:  # `--help | head` closed the pipe: stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit would fail again
        sys.exit(EXIT_OK)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        # the box's first section is the message (wrapped at the terminal's width), a later one the flag's usage
        box = [re.sub(r"^[\s│╭╰]+|[\s│╮╯]+$", "", line) for line in captured.getvalue().splitlines()[1:-1]]
        sections = " ".join(line if line.strip("─") else "\n" for line in box).split("\n")
        message = " ".join(sections[0].split()).removeprefix("Error parsing ") or "bad command line"
        hint = next((line for line in box if line.startswith("--")), None)
        short = re.match(r"Unrecognized options: --([a-z]{2,4})\b(?!-)", message)
        if short:  # --lr: the flags it abbreviates (--learning-rate) before tyro's closest spelling
            initials = {"--" + f.name.replace("_", "-"): "".join(w[0] for w in f.name.split("_"))
                        for f in dataclasses.fields(args_class)}
            hint = ", ".join(f for f, i in initials.items() if i.endswith(short.group(1))) or hint
        if hint:
            message += f" (did you mean {hint}?)" if "Unrecognized" in message else f" (expected: {hint})"
        print(f"{Path(sys.argv[0]).stem}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


# the files a copied script imports only for some flags or envs (README, "Copying a script")
OPTIONAL = {"harness.checkpoint": "--checkpoint-every and --resume", "harness.resume": "--resume",
            "harness.distributed": "torchrun", "common.atari": "Atari ids",
            "harness.extras": "--tensorboard, --track, --capture-video, --compile and --cudagraphs",
            "common.minatar": "MinAtar ids", "common.normalize": "--normalize-obs and --normalize-reward"}


def missing_file(e: ModuleNotFoundError) -> InputError:
    """The one-line error of a copy that lacks one of the OPTIONAL files; `e` itself for any other module."""
    if e.name not in OPTIONAL:
        raise e
    return InputError(f"this copy lacks {e.name.replace('.', '/')}.py, which {OPTIONAL[e.name]} need; copy it "
                      "beside the script's other files (README, 'Copying a script')")


def parse_args(args_class, doc: str):
    """tyro's parser with the script's one-line description; `--resume RUN` takes RUN's arguments as defaults."""
    description = doc.strip().splitlines()[0]
    args = _cli(args_class, description)
    if not getattr(args, "resume", None):
        return args
    try:
        from harness.resume import stored_arguments

        defaults = stored_arguments(args_class, Path(args.resume))
    except ModuleNotFoundError as e:
        print(f"{Path(sys.argv[0]).stem}: error: {missing_file(e)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except InputError as e:
        print(f"{Path(sys.argv[0]).stem}: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    return _cli(args_class, description, default=args_class(**{**defaults, "resume": args.resume}))


MUJOCO_WARNINGS: dict[str, bool] = {}  # MuJoCo's warnings (it prints its own): message -> shown yet


@contextlib.contextmanager
def bad_input(env_id: str = ""):
    """A ValueError or gymnasium error inside becomes InputError: around what fails only on bad input. Before a
    MuJoCo env is made its warnings are caught, for the Run to show each once after its run-folder line."""
    with contextlib.suppress(gym.error.Error, ValueError):
        if str(gym.spec(env_id).entry_point).startswith("gymnasium.envs.mujoco") and not MUJOCO_WARNINGS:
            import mujoco

            mujoco.set_mju_user_warning(lambda message: MUJOCO_WARNINGS.setdefault(message.strip(), False))
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
            message += f" (this project's extra: pip install -r requirements/requirements-{extra}.txt)"
        raise InputError(message) from None


def evaluate(act: Callable[[np.ndarray], np.ndarray], make_envs: Callable[[int, str | None], gym.vector.VectorEnv],
             episodes: int, seed: int, video_dir: str | None = None) -> np.ndarray:
    """[episodes] returns of the policy `act`: the first episode of each env of `make_envs(n, video_dir)`."""
    envs = make_envs(episodes, video_dir)
    try:
        obs, _ = envs.reset(seed=seed)
        returns, finished = np.zeros(episodes), np.zeros(episodes, dtype=bool)
        while not finished.all():
            obs, rewards, terminated, truncated, _ = envs.step(act(obs))
            returns += np.where(finished, 0.0, rewards)  # envs past their first episode are ignored
            finished |= terminated | truncated
    finally:
        envs.close()
    return returns


class Run:
    """The run folder `<run_dir>/<env>__<algo>__<seed>__<time>/` (or the one `--resume` reopens), its files,
    the progress line, signals and checkpoints. Made first in train(): it sets torch's threads and seeds every
    generator (`device`, `seed`); with `workers` it joins torchrun's workers (`workers`: harness.distributed,
    or a one-process stand-in; `world`: how many), and only rank 0 writes (as with `write=False`). The folder
    is written from begin() on, once the script is set up: a failure before leaves nothing behind."""

    saved: Any = None  # the checkpoint a resumed run continues from (harness.resume.reopen sets it)

    def __init__(self, algo: str, args, fields: list[str], workers: bool = False, write: bool = True):
        missing = [f.name for f in dataclasses.fields(RunArgs) if not hasattr(args, f.name)]
        if missing:
            raise TypeError(f"Run reads {', '.join(missing)} from the script's Args, which lacks them "
                            "(harness.run.RunArgs)")
        torch.set_num_threads(args.torch_threads)
        self.device = _device(args)
        # harness.distributed under torchrun (imported only there), else a one-process stand-in with the same calls
        self.workers = importlib.import_module("harness.distributed") if workers and launched() else _ONE_PROCESS
        self.world: int = self.workers.init(self.device)  # 1 in a plain process
        self.workers.check_same(dataclasses.asdict(args))  # mismatched command lines fail here, on every worker
        # worker r's env i gets seed + r * num_envs + i: no two envs share a seed; rank 0 is a plain run
        self.seed: int = args.seed + self.workers.rank() * args.num_envs
        random.seed(self.seed)  # a worker's network is overwritten by rank 0's
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)
        write = write and self.workers.is_main()
        self.algo, self.args, self.write = algo, args, write
        self.fields, self.columns = ["global_step", "wall_seconds", *fields], set(fields)
        with contextlib.suppress(OSError, TypeError, SyntaxError):  # the metrics the caller's run.log calls name
            tree = ast.parse(textwrap.dedent(inspect.getsource(sys._getframe(1).f_code)))
            self._check_metrics({k.arg for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(
                node.func) == "run.log" for k in node.keywords if k.arg})
        self.path: Path = None  # type: ignore[assignment]  # set by begin() where the run writes files
        # the training envs' running episodes: return and length so far [B]; the last 10 returns
        self.ep_return, self.ep_length = np.zeros(args.num_envs), np.zeros(args.num_envs, dtype=np.int64)
        self.recent_returns: list[float] = []
        self.start = time.perf_counter()
        self.next_check, self.stop_reason, self.checkpoint_every = 0, None, args.checkpoint_every
        self.resumes: list[int] = []  # the steps it was resumed at, and its env note (harness.resume)
        self.env_note: str | None = None
        self.checkpoint_seconds: float | None = None
        self.checkpoint_bytes: int | None = None
        self._final_checkpoint: dict | None = None
        self.extras: Any = None  # harness.extras.Sinks with --tensorboard or --track
        self._handlers: dict = {}
        # the outcome, set by stoppable() and final_evaluation(), read by finish()
        self.step, self.completed, self.eval_returns, self.train_seconds = 0, False, np.array([]), 0.0
        self.error: str | None = None
        self.compile_seconds = 0.0  # first calls of the functions compiled by compile(), kept out of train_seconds
        # the progress line's ETA: the rate since the current phase began (heatup, then learning)
        self.heatup = getattr(args, "learning_starts", 0)
        self.marks: collections.deque[tuple[float, int]] = collections.deque(maxlen=64)
        if (self.checkpoint_every or args.resume) and launched():
            raise InputError("--checkpoint-every and --resume work in one process; under torchrun leave them out")
        if self.checkpoint_every or args.resume:  # a copy without the file stops here, before writing anything
            import harness.checkpoint  # noqa: F401
        if args.tensorboard or args.track or args.capture_video:
            import harness.extras as extras

            extras.check_packages(args)  # a missing package is bad input, found before anything is written
        self.config = {"algo": algo, **json.loads(json.dumps(dataclasses.asdict(args)))}
        if args.resume and write:  # the folder and its checkpoint checked at once, before anything is written
            import harness.resume as resume

            self.path = Path(args.resume)
            resume.check_folder(self, self.config)

    def _open(self) -> None:
        """The run folder (or the one --resume reopens), its files and first line, once the script is set up."""
        args, algo, config = self.args, self.algo, self.config
        self.start = time.perf_counter()
        if args.resume:
            import harness.resume as resume

            self.file = resume.reopen(self)
            (self.path / "config.json").write_text(json.dumps(config, indent=2))  # the new length or logging flags
        else:
            self.path = self._new_folder(config)
            self.file = open(self.path / "metrics.csv", "w", newline="")
            csv.DictWriter(self.file, self.fields).writeheader()
        self.csv = csv.DictWriter(self.file, self.fields)
        if args.tensorboard or args.track:
            import harness.extras as extras

            self.extras = extras.Sinks(algo, args, config, self.path, self.saved["global_step"] if args.resume else None)
        self.total, self.show, self.tty = args.total_timesteps, args.progress, sys.stdout.isatty()
        self.last_print = self.last_flush = time.perf_counter()
        self.next_mark, self.printed_step = 0.1, -1
        self._catch_signals()  # from here on, Ctrl-C and stop signals end the loop at a step boundary (stoppable)
        print(f"{algo}: {args.env_id}, seed {args.seed}, {args.total_timesteps:,} steps on {self.device}"
              f"{f' x {self.world} workers' if self.world > 1 else ''}; run folder {self.path}", flush=True)
        self.show_warnings()

    def show_warnings(self) -> None:
        """MuJoCo's warnings caught by bad_input() and not shown yet, each in one line."""
        for message in [m for m, shown in MUJOCO_WARNINGS.items() if not shown]:
            MUJOCO_WARNINGS[message] = True
            print(f"{self.algo}: MuJoCo warning: {message}", file=sys.stderr)

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

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def compile(self, fn):
        """`fn` under torch.compile with --compile or --cudagraphs (harness.extras.compiled), else `fn` itself."""
        if not (self.args.compile or self.args.cudagraphs):
            return fn
        from harness.extras import compiled

        return compiled(self, fn, cuda=_device(self.args).type == "cuda")

    def _check_metrics(self, names) -> None:
        unknown = names - self.columns
        if unknown:  # a metric added to the script without its column
            raise ValueError(f"Run.log: {', '.join(sorted(unknown))} not among the metrics.csv columns "
                             f"{self.fields[2:]}; add {'it' if len(unknown) == 1 else 'them'} to the list of "
                             "fields the script passes to Run(...)")

    def log(self, global_step: int, **metrics: float) -> None:
        """A row of metrics.csv (and TensorBoard, wandb); `sps`, where it is a column, is filled in: env steps a
        second since the start."""
        if "sps" in self.columns:
            metrics.setdefault("sps", round(global_step / self.elapsed()))
        self._row(global_step, **metrics)

    def _row(self, global_step: int, **metrics: float) -> None:
        self._check_metrics(metrics.keys())
        if not self.write:
            return
        self.csv.writerow({"global_step": global_step, "wall_seconds": round(self.elapsed(), 3), **metrics})
        if self.extras is not None:
            self.extras.log(metrics, global_step)

    def episodes(self, global_step: int, rewards: np.ndarray, done: np.ndarray) -> None:
        """Add one vector step's rewards [B] to the running episodes; log and restart those that ended [B]."""
        self.step = global_step
        self.ep_return += rewards
        self.ep_length += 1
        for i in np.flatnonzero(done):
            self.recent_returns = (self.recent_returns + [float(self.ep_return[i])])[-10:]
            self._row(global_step, episodic_return=float(self.ep_return[i]), episodic_length=int(self.ep_length[i]))
            self.ep_return[i], self.ep_length[i] = 0.0, 0

    def _eta(self, global_step: int, now: float) -> float:
        """Seconds left at the last minute's rate in this phase (learning steps cost more than heatup's)."""
        if self.marks and (self.marks[-1][1] <= self.heatup) != (global_step <= self.heatup):
            self.marks.clear()  # a new phase
        self.marks.append((now, global_step))
        while len(self.marks) > 2 and now - self.marks[1][0] > 60.0:
            self.marks.popleft()
        (t0, s0), elapsed = self.marks[0], now - self.start
        recent = now - t0 > 1e-3 and global_step > s0
        rate = (global_step - s0) / (now - t0) if recent else global_step / max(elapsed, 1e-9)
        return (self.total - global_step) / max(rate, 1e-9)

    def progress(self, global_step: int, force: bool = False) -> None:
        """Steps, steps/s, ETA, recent return: redrawn on a terminal, every 10% in a log."""
        if global_step < self.next_check and not force:
            return
        self.next_check = global_step + 1000
        if not self.write:
            return
        now = time.perf_counter()
        eta_seconds = self._eta(global_step, now) if self.show else 0.0  # a rate mark at every call
        if now - self.last_flush > 5.0:
            self._flush()
            self.last_flush = now
        frac = global_step / self.total
        if not self.show or (force and self.printed_step == global_step):
            return
        if not force and (now - self.last_print < 0.5 if self.tty else frac < self.next_mark):
            return
        self.printed_step, self.last_print = global_step, now
        recent_return = float(np.mean(self.recent_returns)) if self.recent_returns else float("nan")
        elapsed = now - self.start
        heatup = global_step < self.total and global_step <= self.heatup  # random actions: no rate to extrapolate
        eta = f"heatup to {self.heatup:,}" if heatup else f"ETA {eta_seconds:6.0f}s"
        sps = global_step / max(elapsed - self.compile_seconds, 1e-9)
        line = (f"{self.algo} {global_step:>10,}/{self.total:,} steps ({100 * frac:5.1f}%)  {sps:>7,.0f} steps/s  "
                f"elapsed {elapsed:6.0f}s  {eta}  return(last 10) {recent_return:8.2f}")
        line += f"  (compiling took {self.compile_seconds:.0f}s)" if self.compile_seconds else ""
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)
        while self.next_mark <= frac:
            self.next_mark += 0.1

    def _flush(self) -> None:
        self.file.flush()
        if self.extras is not None:
            self.extras.flush()

    def evaluate(self, act, global_step: int) -> np.ndarray:
        """An evaluation of `act` on the eval envs begin() got (rank 0 only), logged as eval_return; videos
        named by step."""
        if not self.write:
            return np.array([])
        video_dir = str(self.path / "videos" / f"step-{global_step:09d}") if self.args.capture_video else None
        returns = evaluate(act, self.eval_envs, self.args.eval_episodes, self.args.seed + 100_000, video_dir)
        self._row(global_step, eval_return=float(returns.mean()), eval_return_std=float(returns.std()))
        return returns

    def _catch_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread() or launched():
            return  # torchrun workers keep the default: all must stop at the same update

        def preempt(signum, frame):
            self.stop_reason = "preempted"

        def interrupt(signum, frame):
            if self.stop_reason is not None or not self.checkpoint_every:
                raise KeyboardInterrupt(f"signal {signum}")
            self.stop_reason = "interrupted"
            print(f"\n{self.algo}: interrupt: writing a checkpoint at the next step boundary "
                  "(Ctrl-C again to stop now)", file=sys.stderr)

        for sig, handler in ((signal.SIGTERM, preempt), (signal.SIGUSR1, preempt), (signal.SIGINT, interrupt)):
            self._handlers[sig] = signal.signal(sig, handler)

    def evaluation_due(self, prev_step: int, global_step: int) -> bool:
        """Every `--eval-every` env steps crossed, except at the end (the final evaluation comes then)."""
        every = self.args.eval_every
        return bool(every) and global_step // every > prev_step // every and global_step < self.args.total_timesteps

    def stop_if_nan(self, global_step: int, loss: torch.Tensor, **others: torch.Tensor) -> None:
        """FloatingPointError (the run stops, its summary says why) if `loss` or one of `others` is not finite."""
        values = {"loss": loss.item(), **{name: value.item() for name, value in others.items()}}
        if not all(math.isfinite(v) for v in values.values()):
            extra = ", ".join(f"{name.replace('_', ' ')} {v}" for name, v in values.items() if name != "loss")
            raise FloatingPointError(f"loss became {values['loss']}{f' ({extra})' if extra else ''} at step "
                                     f"{global_step}; lower the learning rate or clip gradients")

    def checkpoint_due(self, prev_step: int, global_step: int) -> bool:
        """Every `--checkpoint-every` env steps, at the end (so a finished run can be extended), and after a stop signal."""
        self.step, every = global_step, self.checkpoint_every
        if self.stop_reason is not None:
            return True
        return bool(every) and (global_step >= self.args.total_timesteps or global_step // every > prev_step // every)

    def save_checkpoint(self, global_step: int, obs: np.ndarray, objects: dict) -> None:
        """The state of `objects` (harness.checkpoint.state_of) with the step, envs and `obs`, running episodes,
        generators and metrics; then Stopped on a stop signal. The last one is written after the final
        evaluation (which an extended run keeps)."""
        if self.write and importlib.util.find_spec("harness.checkpoint"):  # a copy without it: a signal writes none
            import harness.checkpoint as checkpoint

            state = {name: checkpoint.state_of(obj) for name, obj in objects.items()}
            env, note = checkpoint.env_state(self.envs)
            content = {
                "format": CHECKPOINT_FORMAT, "algo": self.algo, "global_step": global_step, "resumes": self.resumes,
                "rng": checkpoint.rng_state(), "envs": env, "envs_note": note, "obs": checkpoint.pack(obs),
                "episodes": checkpoint.pack({"return": self.ep_return, "length": self.ep_length,
                                             "recent": self.recent_returns}),
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
        self._flush()  # the rows (and TensorBoard events) up to the checkpoint survive a kill
        os.fsync(self.file.fileno())
        content = {**content, "metrics_bytes": self.file.tell(), "wall_seconds": self.elapsed()}
        from harness.checkpoint import save

        save(self.path / "checkpoint.pt", content)
        self.checkpoint_seconds = round(time.perf_counter() - t0, 3)
        self.checkpoint_bytes = (self.path / "checkpoint.pt").stat().st_size

    def begin(self, envs: gym.vector.VectorEnv, eval_envs: Callable[[int, str | None], gym.vector.VectorEnv],
              checkpoint: dict) -> tuple[np.ndarray, int]:
        """(obs, global_step) of the training `envs` (their action spaces seeded): a new run's reset with `seed`
        at 0, or a resumed run's, with the `checkpoint` objects, generators, envs and episodes put back
        (`envs_reset`: the envs were reset, in a new run or where their state was not captured).
        `eval_envs(n, video_dir)` makes the envs of the evaluations. The run folder is written from here on
        (its first line printed, stop signals caught), once the script is set up."""
        self.envs, self.eval_envs, self.envs_reset = envs, eval_envs, True
        if self.write:
            self._open()
        envs.action_space.seed(self.seed)
        envs.single_action_space.seed(self.seed)
        if self.saved is None:
            return envs.reset(seed=self.seed)[0], 0
        from harness.resume import restore

        return restore(self, envs, checkpoint)

    def after_step(self, prev_step: int, global_step: int, obs: np.ndarray, act: Callable[[np.ndarray], np.ndarray],
                   checkpoint: Callable[[], dict]) -> None:
        """The tail of every step: evaluate `act` every `--eval-every` steps; every `--checkpoint-every` steps, at
        the end and on a stop signal save `checkpoint()`'s objects with `obs`, then on a signal raise Stopped
        (the loop ends there); the progress line."""
        if self.evaluation_due(prev_step, global_step):
            self.evaluate(act, global_step)
        if self.checkpoint_due(prev_step, global_step):
            self.save_checkpoint(global_step, obs, checkpoint())
        self.progress(global_step)

    def _stopped(self, e: BaseException) -> str:
        """The summary's `error` for an exception that ended training, with one line on stderr."""
        how = (f"resume with --resume {self.path}" if importlib.util.find_spec("harness.resume")
               else "resuming it needs harness/resume.py beside the script")  # a copy may lack the files
        if isinstance(e, Stopped):
            where = f": checkpoint written; {how}" if importlib.util.find_spec("harness.checkpoint") else (
                ": no checkpoint written: that needs harness/checkpoint.py beside the script")
            print(f"\n{self.algo}: {e} at step {self.step:,}{where if self.write else ''}", file=sys.stderr)
            return str(e)
        if isinstance(e, KeyboardInterrupt):
            if self.write and self.checkpoint_every and (self.path / "checkpoint.pt").is_file():
                how = f"its last checkpoint is written; {how}"
            else:
                how = ("it cannot be resumed: no checkpoint was written "
                       "(--checkpoint-every N writes one every N steps)")
            print(f"\n{self.algo}: interrupted at step {self.step:,}; writing logs; {how}", file=sys.stderr)
            return "interrupted"
        print(f"\n{self.algo}: stopped: {e}", file=sys.stderr)
        return str(e)

    @contextlib.contextmanager
    def stoppable(self):
        """The loop's frame (subnormals flushed): Ctrl-C, a stop signal, a NaN loss (stop_if_nan), a lost worker
        end it where they happen, in a line, and finish() then writes the summary; any other exception is a bug,
        recorded in metrics.csv and summary.json, raised. The training envs closed."""
        flush_before = flush_denormals()
        try:
            yield
        except (KeyboardInterrupt, Stopped, FloatingPointError, WorkerError) as e:
            self.error = self._stopped(e)
        except Exception as e:
            try:
                self.error = f"{type(e).__name__}: {_first_line(e)}"
                self.completed, self.eval_returns, self.train_seconds = False, np.array([]), 0.0
                self.finish(self.step)
            except Exception:  # the original error matters more than a second one while recording it
                pass
            raise
        finally:
            self.envs.close()
            torch.set_flush_denormal(flush_before)

    def final_evaluation(self, act, global_step: int) -> None:
        """The last evaluation, after the training time is taken; its failure costs it, not the run."""
        self.train_seconds, message = self.elapsed() - self.compile_seconds, None
        try:
            returns = self.evaluate(act, global_step)
        except KeyboardInterrupt:
            return setattr(self, "error", self._stopped(KeyboardInterrupt()))
        except Exception as e:  # the run's model and summary are written whatever happens here
            returns, message = np.array([]), f"final evaluation failed: {type(e).__name__}: {_first_line(e)}"
            print(f"{self.algo}: {message}", file=sys.stderr)
        if self._final_checkpoint is not None:
            self._write_checkpoint(self._final_checkpoint)
            self._final_checkpoint = None
        self.eval_returns, self.error, self.completed = returns, message, True

    def finish(self, global_step: int, act: Callable[[np.ndarray], np.ndarray] | None = None,
               model: nn.Module | dict | None = None, **fields) -> dict:
        """The final evaluation of `act` unless the loop was stopped; model.pt (`model`: a module or state dicts)
        with --save-model unless NaN or a bug stopped it; summary.json with the common fields and the script's;
        the signal handlers given back."""
        if act is not None and self.error is None:
            self.final_evaluation(act, global_step)
        kept = self.completed or self.error in ("interrupted", "preempted")
        if model is not None and self.write and self.args.save_model and kept:
            torch.save(model.state_dict() if isinstance(model, nn.Module) else model, self.path / "model.pt")
        train_seconds, returns = self.train_seconds or self.elapsed(), self.eval_returns
        summary = {
            "algo": self.algo, "env": self.args.env_id, "seed": self.args.seed, "total_timesteps": global_step,
            "num_envs": self.args.num_envs, "wall_seconds": round(self.elapsed(), 2),
            "sps": round(global_step / max(train_seconds, 1e-9), 1),
            "eval_return_mean": float(returns.mean()) if len(returns) else None,
            "eval_return_std": float(returns.std()) if len(returns) else None, "eval_episodes": len(returns),
            "train_return_last10": float(np.mean(self.recent_returns)) if self.recent_returns else None,
            **fields, "completed": self.completed, "error": self.error, "run_dir": str(self.path),
            "resumed_at": self.resumes, "envs_on_resume": self.env_note,
            "checkpoint_seconds": self.checkpoint_seconds, "checkpoint_bytes": self.checkpoint_bytes,
            **({"compile_seconds": round(self.compile_seconds, 2)} if self.args.compile or self.args.cudagraphs else {}),
            "versions": {"torch": torch.__version__, "gymnasium": gym.__version__, "numpy": np.__version__},
            "machine": machine(),
        }
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)
        self._handlers = {}
        if not self.write or not hasattr(self, "file"):  # a Run whose begin() never came writes nothing
            return summary
        self.progress(global_step, force=True)
        if self.show and self.tty:
            print()
        self.show_warnings()
        self.file.close()
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
        if self.extras is not None:
            self.extras.close(summary)
        if summary["completed"] and summary["eval_return_mean"] is not None:
            print(f"{self.algo}: done in {summary['wall_seconds']:.1f}s ({summary['sps']:,.0f} steps/s); eval return "
                  f"{summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} "
                  f"over {summary['eval_episodes']} episodes", flush=True)
        return summary


def main(algo: str, train: Callable, args_class: type, doc: str, args=None) -> int:
    """Run `train(args)` (without `args`: the command line's, parse_args); the exit status (module docstring)
    from its summary; 2 on bad input (one line)."""
    args = parse_args(args_class, doc) if args is None else args
    try:
        summary = train(args)
    except (InputError, WorkerError, ModuleNotFoundError) as e:
        print(f"{algo}: error: {missing_file(e) if isinstance(e, ModuleNotFoundError) else e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        sys.modules.get("harness.distributed", _ONE_PROCESS).shutdown()
    if summary["error"] == "interrupted":
        return EXIT_INTERRUPTED
    if summary["error"] == "preempted":
        return EXIT_PREEMPTED
    return EXIT_OK if summary["completed"] and summary["error"] is None else EXIT_FAILED
