"""The command line every script shares: `RunArgs` (the run flags each script's `Args` extends),
`check` (one-line input checks), `parse_args` (tyro, and `--resume RUN`'s stored arguments) and
`main` (train, then the exit status). Exit status: 0 done; 1 a NaN loss, a lost worker, a failed
final evaluation (summary and model kept) or a bug (its traceback; metrics.csv and summary.json keep
the error); 2 bad input (`InputError`, one line; tyro's own message for a flag it cannot parse); 75
stopped by SIGTERM or SIGUSR1 (SLURM's before a time limit) at the next step boundary, after a
checkpoint; 130 Ctrl-C (with `--checkpoint-every`: at the step boundary, after a checkpoint)."""

from __future__ import annotations

import dataclasses
import operator
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, TypeVar

import torch
import tyro

from harness.errors import InputError, WorkerError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_PREEMPTED = 75
EXIT_INTERRUPTED = 130
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


# a script's Args: RunArgs or a subclass
ArgsT = TypeVar("ArgsT", bound=RunArgs)


def device(args: RunArgs) -> torch.device:
    """--device; auto is cuda only where a GPU was measured faster than a CPU core
    (Atari: docs/speed.md)."""
    atari = args.env_id.startswith("ALE/") or "NoFrameskip" in args.env_id
    gpu = args.device == "cuda" or (args.device == "auto" and atari and torch.cuda.is_available())
    return torch.device("cuda" if gpu else "cpu")


def launched() -> bool:
    """True in one of several torchrun workers."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def in_unit_interval(x: float) -> bool:
    return 0.0 < x <= 1.0


def all_positive(sizes: tuple[int, ...]) -> bool:
    return all(h > 0 for h in sizes)


# the conditions on fields several scripts share, checked where a script's Args has the fields
SHARED_CHECKS: list[tuple[tuple[str, ...], Callable[..., bool], str]] = [
    (("batch_size", "buffer_size"), operator.le, "--batch-size {} is larger than --buffer-size {}"),
    (
        ("exploration_fraction",),
        in_unit_interval,
        "--exploration-fraction must be in (0, 1], got {}",
    ),
    (("ou_theta",), in_unit_interval, "--ou-theta must be in (0, 1], got {}"),
    (("target_rate",), in_unit_interval, "--target-rate must be in (0, 1], got {}"),
    (
        ("learning_starts", "total_timesteps"),
        operator.lt,
        "--learning-starts {} leaves no step to learn in --total-timesteps {}",
    ),
    (("hidden_sizes",), all_positive, "--hidden-sizes must be positive, got {}"),
]


def check(
    args: RunArgs,
    conditions: list[tuple[bool, str]] | tuple = (),
    positive: tuple[str, ...] = (),
    fractions: tuple[str, ...] = (),
    nonnegative: tuple[str, ...] = (),
    single_process: str | None = None,
) -> None:
    """InputError naming the first bad value: the run flags, the fields named in `positive` (> 0,
    or None where allowed), `fractions` (in [0, 1]), `nonnegative` (>= 0), SHARED_CHECKS,
    `conditions` ((ok, message) pairs); `single_process`: the script's name if it trains in one
    process only (torchrun refused)."""
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
        (
            args.device != "cuda" or torch.cuda.is_available(),
            "--device cuda was asked for but CUDA is not available",
        ),
    ]
    if args.compile or args.cudagraphs:
        import harness.extras as extras  # a copy without it: imported with these flags only

        checks += extras.compile_checks(args, device(args))
    for name in positive:
        value = getattr(args, name)
        checks.append((value is None or value > 0, f"{flag(name)} must be positive, got {value}"))
    for name in fractions:
        value = getattr(args, name)
        checks.append((0.0 <= value <= 1.0, f"{flag(name)} must be in [0, 1], got {value}"))
    for name in nonnegative:
        value = getattr(args, name)
        checks.append((value >= 0, f"{flag(name)} must be >= 0, got {value}"))
    for names, holds, message in SHARED_CHECKS:
        if all(hasattr(args, name) for name in names):
            values = [getattr(args, name) for name in names]
            checks.append((holds(*values), message.format(*values)))
    checks += conditions
    if single_process is not None and launched():
        workers = os.environ.get("WORLD_SIZE")
        checks.append(
            (
                False,
                f"{single_process} runs in one process; torchrun started {workers} workers that "
                "would train independent copies (several workers: a2c, n_step_q, sarsa). Run "
                f"`python algos/{single_process}.py` instead",
            )
        )
    for ok, message in checks:
        if not ok:
            raise InputError(message)


def flag(name: str) -> str:
    """The command-line spelling of the field `name`: batch_size -> --batch-size."""
    return "--" + name.replace("_", "-")


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


def parse_args(args_class: type[ArgsT], doc: str) -> ArgsT:
    """tyro's parser with the script's one-line description (tyro's own messages, exit 2, for a
    flag it cannot parse); `--resume RUN`: RUN's arguments as defaults."""
    description = doc.strip().splitlines()[0]
    args: Any = tyro.cli(args_class, description=description)
    if not getattr(args, "resume", None):
        return args
    try:
        import harness.resume as resume

        defaults = resume.stored_arguments(args_class, Path(args.resume))
    except (ModuleNotFoundError, InputError) as e:
        print(f"{Path(sys.argv[0]).stem}: error: {missing_file(e)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    default = args_class(**{**defaults, "resume": args.resume})
    return tyro.cli(args_class, description=description, default=default)


def main(
    algo: str, train: Callable, args_class: type[RunArgs], doc: str, args: RunArgs | None = None
) -> int:
    """Run `train(args)` (`args` given, or the command line's); the exit status from its summary."""
    args = parse_args(args_class, doc) if args is None else args
    try:
        summary = train(args)
    except (InputError, WorkerError, ModuleNotFoundError) as e:
        print(f"{algo}: error: {missing_file(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        if "harness.distributed" in sys.modules:  # imported under torchrun only
            sys.modules["harness.distributed"].shutdown()
    if summary["error"] == "interrupted":
        return EXIT_INTERRUPTED
    if summary["error"] == "preempted":
        return EXIT_PREEMPTED
    if summary["completed"] and summary["error"] is None:
        return EXIT_OK
    return EXIT_FAILED
