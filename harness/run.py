"""Run plumbing shared by every script, knowing no algorithm: run flags (`RunArgs`, `check`,
`parse_args`), envs (`vector_env`), the run folder, seeds, workers, progress line, signals,
checkpoints (`Run`), `evaluate`, `main`. Exit status: 0 done; 1 a NaN loss, a lost worker, a failed
final evaluation (summary and model kept) or a bug (its traceback; metrics.csv and summary.json keep
the error); 2 bad input (`InputError`), one line; 75 stopped by SIGTERM or SIGUSR1 (SLURM's before a
time limit) at the next step boundary, after a checkpoint; 130 Ctrl-C (with `--checkpoint-every`: at
the step boundary, after a checkpoint)."""

from __future__ import annotations

import ast
import collections
import contextlib
import csv
import dataclasses
import functools
import inspect
import io
import json
import math
import operator
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
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn

from harness.errors import InputError, WorkerError

# MuJoCo's videos without a screen (read when mujoco is imported)
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_PREEMPTED, EXIT_INTERRUPTED = 0, 1, 2, 75, 130
CHECKPOINT_FORMAT = 1
# the environment variables that choose MKL's, ATen's and OpenBLAS's CPU kernels (`machine`)
KERNEL_VARIABLES = (
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ATEN_CPU_CAPABILITY",
    "OPENBLAS_CORETYPE",
)
MUJOCO_WARNINGS: dict[str, bool] = {}  # MuJoCo's warnings (it prints its own): message -> shown yet
# the files a copied script imports only for some flags or envs (README, "Copying a script")
OPTIONAL = {
    "harness.checkpoint": "--checkpoint-every and --resume",
    "harness.resume": "--resume",
    "harness.distributed": "torchrun",
    "common.atari": "Atari ids",
    "harness.extras": "--tensorboard, --track, --capture-video, --compile and --cudagraphs",
    "common.minatar": "MinAtar ids",
    "common.normalize": "--normalize-obs and --normalize-reward",
}
# the conditions on fields several scripts share, checked where a script's Args has the fields
SHARED_CHECKS: list[tuple[tuple[str, ...], Callable[..., bool], str]] = [
    (("batch_size", "buffer_size"), operator.le, "--batch-size {} is larger than --buffer-size {}"),
    (
        ("exploration_fraction",),
        lambda x: 0.0 < x <= 1.0,
        "--exploration-fraction must be in (0, 1], got {}",
    ),
    (("ou_theta",), lambda x: 0.0 < x <= 1.0, "--ou-theta must be in (0, 1], got {}"),
    (("target_rate",), lambda x: 0.0 < x <= 1.0, "--target-rate must be in (0, 1], got {}"),
    (
        ("learning_starts", "total_timesteps"),
        operator.lt,
        "--learning-starts {} leaves no step to learn in --total-timesteps {}",
    ),
    (
        ("hidden_sizes",),
        lambda sizes: all(h > 0 for h in sizes),
        "--hidden-sizes must be positive, got {}",
    ),
]
# harness.distributed's calls for one process (rank 0 of 1):
# torch.distributed is imported only under torchrun
_ONE_PROCESS = types.SimpleNamespace(
    WorkerError=WorkerError,
    init=lambda device=None, timeout=None: 1,
    rank=lambda: 0,
    is_main=lambda: True,
    world_size=lambda: 1,
    check_same=lambda config, what="arguments": None,
    gather=lambda tensor: tensor,
    shutdown=lambda wait=None: None,
)


def optional(name: str) -> types.ModuleType:
    """harness.<name> (extras, resume or checkpoint), imported only where a flag asks for it: a
    copy may lack the file. Static imports, so that benchmarks/provenance.py counts the file among
    those that decide a run."""
    if name == "extras":
        import harness.extras  # noqa: F401
    elif name == "resume":
        import harness.resume  # noqa: F401
    else:
        import harness.checkpoint  # noqa: F401
    return sys.modules[f"harness.{name}"]


@dataclasses.dataclass
class RunArgs:
    """The run flags every script's `Args` extends
    (giving a field another default where it needs one)."""

    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id"""
    seed: int = 1
    """seed of python, numpy, torch, the envs and the script's generators"""
    total_timesteps: int = 500_000
    """env steps to train for, summed over all envs (and all workers under torchrun)"""
    num_envs: int = 1
    """parallel envs stepped together (per worker under
    torchrun, for the scripts that take torchrun)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """where the networks live (auto: cuda for Atari ids
    when CUDA is available, the one setting where a GPU was measured faster than a CPU core; else
    cpu)"""
    compile: bool = False
    """torch.compile the update (loss, its backward) and,
    on a GPU, acting; compile time is reported apart"""
    cudagraphs: bool = False
    """--compile with the compiled graphs replayed as CUDA
    graphs (torch's mode="reduce-overhead"; needs a CUDA device)"""
    torch_threads: int = 1
    """CPU threads for torch (small networks are fastest
    on 1; a seed's result depends on the thread count)"""
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
    """env steps between checkpoints in the run folder
    (0: none; SIGTERM/SIGUSR1 write one anyway)"""
    resume: Optional[str] = None
    """run folder to continue from its last checkpoint,
    with its stored arguments (only the run length, evaluation and logging flags may change)"""


def check(
    args, conditions=(), positive="", fractions="", nonnegative="", single_process=None
) -> None:
    """InputError naming the first bad value: run flags, the fields named in `positive` (> 0, or
    None where allowed), `fractions` (in [0, 1]), `nonnegative` (>= 0), SHARED_CHECKS,
    `conditions` ((ok, message) pairs); `single_process`: the script's name if it trains in one
    process only (torchrun refused)."""
    compiling = args.compile or args.cudagraphs  # harness/extras.py: imported with these flags only
    compile_checks = optional("extras").compile_checks(args, _device(args)) if compiling else []
    value = lambda name: getattr(args, name)  # noqa: E731
    must = lambda name, what: f"--{name.replace('_', '-')} must be {what}, got {value(name)}"  # noqa: E731
    device_ok = args.device != "cuda" or torch.cuda.is_available()
    shared = [rule for rule in SHARED_CHECKS if all(hasattr(args, name) for name in rule[0])]
    alone = (
        f"{single_process} runs in one process; "
        f"torchrun started {os.environ.get('WORLD_SIZE')} workers"
    )
    alone += " that would train independent copies (several workers: a2c, n_step_q, sarsa). Run "
    alone += f"`python algos/{single_process}.py` instead"
    checks = [
        (
            args.total_timesteps > 0,
            f"--total-timesteps must be positive, got {args.total_timesteps}",
        ),
        (args.num_envs > 0, f"--num-envs must be positive, got {args.num_envs}"),
        (args.eval_every >= 0, f"--eval-every must be >= 0, got {args.eval_every}"),
        (args.eval_episodes > 0, f"--eval-episodes must be positive, got {args.eval_episodes}"),
        (
            args.checkpoint_every >= 0,
            f"--checkpoint-every must be >= 0, got {args.checkpoint_every}",
        ),
        (args.torch_threads > 0, f"--torch-threads must be positive, got {args.torch_threads}"),
        (device_ok, "--device cuda was asked for but CUDA is not available"),
        *compile_checks,
        *((value(n) is None or value(n) > 0, must(n, "positive")) for n in positive.split()),
        *((0.0 <= value(n) <= 1.0, must(n, "in [0, 1]")) for n in fractions.split()),
        *((value(n) >= 0, must(n, ">= 0")) for n in nonnegative.split()),
        *(
            (ok(*map(value, names)), message.format(*map(value, names)))
            for names, ok, message in shared
        ),
        *conditions,
        (single_process is None or not launched(), alone),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)


def check_spaces(
    envs: gym.vector.VectorEnv,
    algo: str,
    env_id: str,
    discrete=True,
    continuous=False,
    bounded=False,
) -> None:
    """InputError (envs closed) unless `envs` fit `algo`: the action kinds asked
    (finite bounds if `bounded`), Box observations, images with Discrete actions only."""
    space, obs = envs.single_action_space, envs.single_observation_space
    box, names = (
        isinstance(space, gym.spaces.Box),
        ["Discrete"] * discrete + ["1-D Box"] * continuous,
    )
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
    make: Callable,
    num_envs,
    algo,
    env_id,
    video_dir=None,
    discrete=True,
    continuous=False,
    bounded=False,
) -> gym.vector.VectorEnv:
    """`num_envs` envs `make(render_mode)` stepped together, SAME_STEP autoreset (the true final
    observation in infos["final_obs"]), first episodes recorded in `video_dir` if given
    (harness/extras.py). An unknown id, an env refusing its settings, spaces that do not fit `algo`
    (`check_spaces`): InputError."""
    makers = [functools.partial(make, None)] * num_envs
    if video_dir is not None:
        makers = optional("extras").recorded_envs(make, video_dir, num_envs)
    with bad_input(env_id):
        envs = gym.vector.SyncVectorEnv(makers, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    check_spaces(envs, algo, env_id, discrete, continuous, bounded)
    return envs


def _device(args: RunArgs) -> torch.device:
    """--device; auto is cuda only where a GPU was measured faster than a CPU core
    (Atari: docs/speed.md)."""
    atari = args.env_id.startswith("ALE/") or "NoFrameskip" in args.env_id
    gpu = args.device == "cuda" or (args.device == "auto" and atari and torch.cuda.is_available())
    return torch.device("cuda" if gpu else "cpu")


def machine() -> dict:
    """What a run's floats depend on:
    MKL, oneDNN, ATen pick kernels by CPU and KERNEL_VARIABLES (`kind`)."""
    cpu: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            cpu.setdefault(key.strip(), value.strip())
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    info: dict[str, Any] = {
        "cpu": cpu.get("model name") or platform.processor() or platform.machine()
    }
    info["vendor"] = cpu.get("vendor_id") or platform.machine()
    info |= {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "blas": blas.group(1) if blas else None,
    }
    info |= {"torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()}
    info["kernel_variables"] = {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ}
    variables = " ".join(f"{k}={v}" for k, v in info["kernel_variables"].items())
    parts = (info["vendor"], info["cpu"], info["capability"], info["blas"], variables)
    info["kind"] = " ".join(filter(None, parts))
    return info


def launched() -> bool:  # one of several torchrun workers
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


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


def _cli(args_class, description: str, default=None):
    """tyro.cli; its boxed errors (an unparsable value, an unknown flag)
    become one `error:` line, exit 2."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(args_class, description=description, default=default)
    except BrokenPipeError:
        # `--help | head` closed the pipe: stop quietly, as other command-line tools do;
        # stdout to devnull, as the flush at exit would fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_OK)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        # the box's first section is the message (wrapped to the terminal),
        # a later one the flag's usage
        box = [
            re.sub(r"^[\s│╭╰]+|[\s│╮╯]+$", "", line)
            for line in captured.getvalue().splitlines()[1:-1]
        ]
        sections = " ".join(line if line.strip("─") else "\n" for line in box).split("\n")
        message = " ".join(sections[0].split()).removeprefix("Error parsing ") or "bad command line"
        hint = next((line for line in box if line.startswith("--")), None)
        short = re.match(r"Unrecognized options: --([a-z]{2,4})\b(?!-)", message)
        if short:  # --lr: the flags it abbreviates (--learning-rate) before tyro's closest spelling
            names = [f.name for f in dataclasses.fields(args_class)]
            initials = {
                "--" + n.replace("_", "-"): "".join(w[0] for w in n.split("_")) for n in names
            }
            hint = ", ".join(f for f, i in initials.items() if i.endswith(short.group(1))) or hint
        if hint:
            message += (
                f" (did you mean {hint}?)" if "Unrecognized" in message else f" (expected: {hint})"
            )
        print(f"{Path(sys.argv[0]).stem}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def missing_file(e: Exception) -> Exception:
    """`e`, or InputError naming the OPTIONAL file a copy lacks (another missing module: raised)."""
    if not isinstance(e, ModuleNotFoundError):
        return e
    if e.name not in OPTIONAL:
        raise e
    return InputError(
        f"this copy lacks {e.name.replace('.', '/')}.py, which {OPTIONAL[e.name]} need; copy it "
        "beside the script's other files (README, 'Copying a script')"
    )


def parse_args(args_class, doc: str):
    """tyro's parser with the script's one-line description;
    `--resume RUN`: RUN's arguments as defaults."""
    description = doc.strip().splitlines()[0]
    args = _cli(args_class, description)
    if not getattr(args, "resume", None):
        return args
    try:
        defaults = optional("resume").stored_arguments(args_class, Path(args.resume))
    except (ModuleNotFoundError, InputError) as e:
        print(f"{Path(sys.argv[0]).stem}: error: {missing_file(e)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    return _cli(args_class, description, default=args_class(**{**defaults, "resume": args.resume}))


@contextlib.contextmanager
def bad_input(env_id: str = ""):
    """A ValueError or gymnasium error inside becomes InputError: around what fails only on bad
    input. Before a MuJoCo env is made, its warnings are caught, for the Run to show each once
    after its run-folder line."""
    with contextlib.suppress(gym.error.Error, ValueError):
        if (
            str(gym.spec(env_id).entry_point).startswith("gymnasium.envs.mujoco")
            and not MUJOCO_WARNINGS
        ):
            catch = lambda message: MUJOCO_WARNINGS.setdefault(message.strip(), False)  # noqa: E731
            import_module("mujoco").set_mju_user_warning(catch)
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
    act: Callable, make_envs: Callable, episodes: int, seed: int, video_dir=None
) -> np.ndarray:
    """[episodes] returns of the policy `act`:
    the first episode of each env of `make_envs(n, video_dir)`."""
    with contextlib.closing(make_envs(episodes, video_dir)) as envs:
        obs, _ = envs.reset(seed=seed)
        returns, finished = np.zeros(episodes), np.zeros(episodes, dtype=bool)
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

    def __init__(self, algo: str, args, fields: str, workers: bool = False, write: bool = True):
        absent = ", ".join(f.name for f in dataclasses.fields(RunArgs) if not hasattr(args, f.name))
        if absent:
            reads = f"Run reads {absent} from the script's Args"
            raise TypeError(f"{reads}, which lacks them (harness.run.RunArgs)")
        torch.set_num_threads(args.torch_threads)
        self.device = _device(args)
        # harness.distributed under torchrun (imported only there),
        # else a stand-in with the same calls
        self.workers = (
            import_module("harness.distributed") if workers and launched() else _ONE_PROCESS
        )
        self.world: int = self.workers.init(self.device)  # 1 in a plain process
        self.workers.check_same(dataclasses.asdict(args))  # mismatched command lines fail here
        # worker r's env i gets seed + r * num_envs + i:
        # no two envs share a seed; rank 0 is a plain run
        self.seed: int = args.seed + self.workers.rank() * args.num_envs
        random.seed(self.seed)  # a worker's network is overwritten by rank 0's
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)
        self.algo, self.args, self.write = algo, args, write and self.workers.is_main()
        self.fields, self.columns = (
            ["global_step", "wall_seconds", *fields.split()],
            set(fields.split()),
        )
        # the caller's run.log metrics are columns
        with contextlib.suppress(OSError, TypeError, SyntaxError):
            tree = ast.parse(textwrap.dedent(inspect.getsource(sys._getframe(1).f_code)))
            logs = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.Call) and ast.unparse(n.func) == "run.log"
            ]
            self._check_metrics({k.arg for call in logs for k in call.keywords if k.arg})
        self.path: Path = None  # type: ignore[assignment]  # set by begin() where the run writes files
        # the training envs' running episodes: return and length so far [B]; the last 10 returns
        self.ep_return, self.ep_length = (
            np.zeros(args.num_envs),
            np.zeros(args.num_envs, dtype=np.int64),
        )
        self.recent_returns: list[float] = []
        self.start = time.perf_counter()
        self.next_check, self.stop_reason, self.checkpoint_every = 0, None, args.checkpoint_every
        self.resumes: list[int] = []  # the steps it was resumed at (harness.resume)
        # harness.resume's note on the envs;
        # the last checkpoint's time and size (harness.checkpoint.write)
        self.env_note = self.checkpoint_seconds = self.checkpoint_bytes = None
        self._final_checkpoint: dict | None = None
        self.extras: Any = None  # harness.extras.Sinks with --tensorboard or --track
        # the checkpoint a resumed run continues from (harness.resume.check_folder)
        self.saved: Any = None
        self._handlers: dict = {}
        # the outcome, set by stoppable() and final_evaluation(), read by finish()
        self.step, self.completed, self.eval_returns, self.train_seconds = (
            0,
            False,
            np.array([]),
            0.0,
        )
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
            optional("checkpoint")  # a copy without it stops here, before writing anything
        # a missing package: bad input, found now
        if args.tensorboard or args.track or args.capture_video:
            optional("extras").check_packages(args)
        self.config = {"algo": algo, **json.loads(json.dumps(dataclasses.asdict(args)))}
        # the folder and checkpoint checked now, before anything is written
        if args.resume and self.write:
            optional("resume").check_folder(self, self.config)

    def _open(self) -> None:
        """The run folder (or the one --resume reopens), its files and first line, for begin()."""
        args, algo, config = self.args, self.algo, self.config
        self.start = time.perf_counter()
        # metrics.csv cut back; config.json rewritten, with the new length or logging flags
        if args.resume:
            self.file = optional("resume").reopen(self)
        else:
            # <run_dir>/<env>__<algo>__<seed>__<time>;
            # ALE/Breakout-v5 as ALE-Breakout-v5 (one folder)
            stamp, env = time.strftime("%Y%m%d-%H%M%S"), args.env_id.replace("/", "-")
            base = path = Path(args.run_dir) / f"{env}__{algo}__{args.seed}__{stamp}"
            k = 1
            try:
                while path.exists():  # two runs started in the same second
                    path, k = Path(f"{base}-{k}"), k + 1
                path.mkdir(parents=True)
                (path / "config.json").write_text(json.dumps(config, indent=2))
            except OSError as e:
                raise InputError(
                    f"cannot write the run folder {path} ({e.strerror or e}); "
                    "choose another --run-dir"
                ) from None
            self.path, self.file = path, open(path / "metrics.csv", "w", newline="")
            csv.DictWriter(self.file, self.fields).writeheader()
        self.csv = csv.DictWriter(self.file, self.fields)
        if args.tensorboard or args.track:
            resumed_step = self.saved["global_step"] if args.resume else None
            self.extras = optional("extras").Sinks(algo, args, config, self.path, resumed_step)
        self.total, self.show, self.tty = args.total_timesteps, args.progress, sys.stdout.isatty()
        self.last_print = self.last_flush = time.perf_counter()
        self.next_mark, self.printed_step = 0.1, -1
        # from here on Ctrl-C and stop signals end the loop at a step boundary
        self._catch_signals()
        workers = f" x {self.world} workers" if self.world > 1 else ""
        steps = f"{args.total_timesteps:,} steps on {self.device}{workers}"
        print(
            f"{algo}: {args.env_id}, seed {args.seed}, {steps}; run folder {self.path}", flush=True
        )
        self.show_warnings()

    def show_warnings(self) -> None:
        """MuJoCo's warnings caught by bad_input() and not shown yet, each in one line."""
        for message in [m for m, shown in MUJOCO_WARNINGS.items() if not shown]:
            MUJOCO_WARNINGS[message] = True
            print(f"{self.algo}: MuJoCo warning: {message}", file=sys.stderr)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def compile(self, fn):
        """`fn` under torch.compile with --compile or --cudagraphs
        (harness.extras.compiled), else `fn`."""
        if not (self.args.compile or self.args.cudagraphs):
            return fn
        return optional("extras").compiled(self, fn, cuda=_device(self.args).type == "cuda")

    def _check_metrics(self, names) -> None:
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
        """Add one vector step's rewards [B] to the running episodes;
        log and restart those that ended [B]."""
        self.step = global_step
        self.ep_return += rewards
        self.ep_length += 1
        for i in np.flatnonzero(done):
            episodic_return, episodic_length = float(self.ep_return[i]), int(self.ep_length[i])
            self.recent_returns = (self.recent_returns + [episodic_return])[-10:]
            self._row(global_step, episodic_return=episodic_return, episodic_length=episodic_length)
            self.ep_return[i], self.ep_length[i] = 0.0, 0

    def _eta(self, global_step: int, now: float) -> float:
        """Seconds left at the last minute's rate in this phase
        (learning steps cost more than heatup's)."""
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
        self.printed_step, self.last_print = global_step, now
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

    def evaluate(self, act, global_step: int) -> np.ndarray:
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

        def preempt(signum, frame):
            self.stop_reason = "preempted"

        def interrupt(signum, frame):
            if self.stop_reason is not None or not self.checkpoint_every:
                raise KeyboardInterrupt(f"signal {signum}")
            self.stop_reason = "interrupted"
            print(f"\n{self.algo}: interrupt: {boundary}", file=sys.stderr)

        handlers = {signal.SIGTERM: preempt, signal.SIGUSR1: preempt, signal.SIGINT: interrupt}
        self._handlers = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}

    def evaluation_due(self, prev_step: int, global_step: int) -> bool:
        """Every `--eval-every` env steps crossed, except at the end
        (the final evaluation comes then)."""
        every, total = self.args.eval_every, self.args.total_timesteps
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
        self.step, every, end = (
            global_step,
            self.checkpoint_every,
            global_step >= self.args.total_timesteps,
        )
        due = bool(every) and (end or global_step // every > prev_step // every)
        return self.stop_reason is not None or due

    def save_checkpoint(self, global_step: int, obs: np.ndarray, objects: dict) -> None:
        """Checkpoint `objects` with the step, envs, `obs`, episodes, generators;
        then Stopped on a signal."""
        # a copy without it writes none, even on a signal
        if self.write and find_spec("harness.checkpoint"):
            optional("checkpoint").keep(self, global_step, obs, objects)
        if self.stop_reason is not None:
            raise Stopped(self.stop_reason)

    def _write_checkpoint(self, content: dict) -> None:
        optional("checkpoint").write(self, content)

    def begin(
        self, envs: gym.vector.VectorEnv, eval_envs, checkpoint: dict
    ) -> tuple[np.ndarray, int]:
        """(obs, global_step) of the training `envs` (action spaces seeded): a new run's reset with
        `seed` at 0, or a resumed run's, the `checkpoint` objects, generators, envs, episodes put
        back (`envs_reset`: envs reset, in a new run or where their state was not captured).
        `eval_envs(n, video_dir)` makes evaluation envs. The run folder is written from here on
        (first line printed, signals caught)."""
        self.envs, self.eval_envs, self.envs_reset = envs, eval_envs, True
        if self.write:
            self._open()
        envs.action_space.seed(self.seed)
        envs.single_action_space.seed(self.seed)
        if self.saved is None:
            return envs.reset(seed=self.seed)[0], 0
        return optional("resume").restore(self, envs, checkpoint)

    def after_step(
        self, prev_step: int, global_step: int, obs: np.ndarray, act, checkpoint
    ) -> None:
        """A step's tail: evaluate `act`;
        save checkpoint() with `obs` (Stopped on a signal); progress."""
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
        line, error = f"stopped: {e}", str(e)
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
            line, error = f"interrupted at step {self.step:,}; writing logs; {how}", "interrupted"
        print(f"\n{self.algo}: {line}", file=sys.stderr)
        return error

    @contextlib.contextmanager
    def stoppable(self):
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
                self.completed, self.eval_returns, self.train_seconds = False, np.array([]), 0.0
                self.finish(self.step)
            raise
        finally:
            self.envs.close()
            torch.set_flush_denormal(flush_before)

    def final_evaluation(self, act, global_step: int) -> None:
        """The last evaluation, after the training time is taken;
        its failure costs it, not the run."""
        self.train_seconds, message = self.elapsed() - self.compile_seconds, None
        try:
            returns = self.evaluate(act, global_step)
        except KeyboardInterrupt:
            return setattr(self, "error", self._stopped(KeyboardInterrupt()))
        except Exception as e:  # the run's model and summary are written whatever happens here
            returns, message = (
                np.array([]),
                f"final evaluation failed: {type(e).__name__}: {_first_line(e)}",
            )
            print(f"{self.algo}: {message}", file=sys.stderr)
        if self._final_checkpoint is not None:
            self._write_checkpoint(self._final_checkpoint)
            self._final_checkpoint = None
        self.eval_returns, self.error, self.completed = returns, message, True

    def finish(
        self, global_step: int, act=None, model: nn.Module | dict | None = None, **fields
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
        args, returns, train_seconds = (
            self.args,
            self.eval_returns,
            self.train_seconds or self.elapsed(),
        )
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
        summary |= {"versions": versions, "machine": machine()}
        while self._handlers:  # the handlers from before begin() put back
            signal.signal(*self._handlers.popitem())
        # a Run whose begin() never came writes nothing
        if not self.write or not hasattr(self, "file"):
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
            done = f"done in {summary['wall_seconds']:.1f}s ({summary['sps']:,.0f} steps/s)"
            evaluation = (
                f"eval return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f}"
            )
            print(
                f"{self.algo}: {done}; {evaluation} over {summary['eval_episodes']} episodes",
                flush=True,
            )
        return summary


def main(algo: str, train: Callable, args_class: type, doc: str, args=None) -> int:
    """Run `train(args)` (`args` given, or the command line's); the exit status from its summary."""
    args = parse_args(args_class, doc) if args is None else args
    try:
        summary = train(args)
    except (InputError, WorkerError, ModuleNotFoundError) as e:
        print(f"{algo}: error: {missing_file(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        sys.modules.get("harness.distributed", _ONE_PROCESS).shutdown()
    done = EXIT_OK if summary["completed"] and summary["error"] is None else EXIT_FAILED
    return {"interrupted": EXIT_INTERRUPTED, "preempted": EXIT_PREEMPTED}.get(
        summary["error"], done
    )
