"""The run's optional features, imported only when a flag asks for one: TensorBoard scalars
(`--tensorboard`, tools/tensorboard_export.py), evaluation videos (`--capture-video`) and wandb's
login check (`--track`). A copied script runs without this file until one of those flags is given.

- `tensorboard_tag(algo, name)`, `write_tensorboard(folder, writer)`: the TensorBoard tags of the
  metrics (CleanRL's names) and metrics.csv's rows as scalars.
- `record_first_episode(env, video_dir, index)`: an env that records its first episode;
  `recorded_envs(make, video_dir, num_envs)`: harness.run.vector_env's makers of such envs.
- `open_wandb(args, config, folder)`: the run's wandb run; offline, with a warning, when wandb has
  no login (`wandb_mode()`).
- `open_tensorboard(folder, resumed_step)`: the run's SummaryWriter.
- `Sinks`: the run's TensorBoard writer and wandb run, fed what metrics.csv gets (harness.run.Run).
- `check_packages(args)`: each flag's package is there, or one line naming its requirements file.
- `compile_checks(args, device)`, `compiled(fn, cuda, cudagraphs, count_compile_time)`: what
  `--compile` and `--cudagraphs` need (checked with the run flags), and `fn` under torch.compile,
  its first call timed.
"""

from __future__ import annotations

import csv
import functools
import json
import netrc
import os
import re
import shutil
import sys
import time
import typing
import warnings
from pathlib import Path
from urllib.parse import urlparse

import gymnasium as gym
import torch
from torch import nn

from harness.errors import InputError

if typing.TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

if sys.platform.startswith("linux") and not (
    os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
):
    # SDL (pygame's frames, drawn for videos) probes for a screen at the first frame and libwayland
    # prints "error: XDG_RUNTIME_DIR is invalid..." where there is none; SDL ends up with the dummy
    # driver anyway
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

# TensorBoard tags: CleanRL's where CleanRL logs the same quantity, charts/<name> for the others
TENSORBOARD_TAGS = {
    "episodic_return": "charts/episodic_return",
    "episodic_length": "charts/episodic_length",
    "sps": "charts/SPS",
    "epsilon": "charts/epsilon",
    "loss": "losses/td_loss",
    "q_values": "losses/q_values",
    "critic_loss": "losses/qf1_loss",
    "actor_loss": "losses/actor_loss",
    "policy_loss": "losses/policy_loss",
    "value_loss": "losses/value_loss",
    "entropy": "losses/entropy",
    "grad_norm": "losses/grad_norm",
    "eval_return": "eval/episodic_return",
    "eval_return_std": "eval/episodic_return_std",
}
TENSORBOARD_TAGS_BY_ALGO = {
    "a2c": {"loss": "losses/loss"},  # the total loss (policy + value - entropy), not a TD loss
    "ddpg": {"q_values": "losses/qf1_values"},  # CleanRL's DDPG name for the critic's Q(s, a)
}


class _FirstEpisodeVideo(gym.wrappers.RecordVideo):
    """RecordVideo writing its one recording as <name_prefix>.mp4
    (its own names add "-episode-<k>")."""

    def start_recording(self, video_name: str) -> None:
        super().start_recording(self.name_prefix)


def record_first_episode(env: gym.Env, video_dir: str, index: int) -> gym.Env:
    """`env` (made with render_mode="rgb_array") writing its first episode to
    video_dir/episode-<index>.mp4: env i of an evaluation plays its episode i."""
    with warnings.catch_warnings():  # every env of the evaluation writes into the same folder
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
        return _FirstEpisodeVideo(
            env,
            video_dir,
            episode_trigger=lambda episode: episode == 0,
            name_prefix=f"episode-{index}",
            disable_logger=True,
        )


def _recorded_env(
    make: typing.Callable[[str | None], gym.Env], video_dir: str, index: int
) -> gym.Env:
    return record_first_episode(make("rgb_array"), video_dir, index)


def recorded_envs(
    make: typing.Callable[[str | None], gym.Env], video_dir: str, num_envs: int
) -> list:
    """vector_env's makers with a `video_dir`:
    env i, `make("rgb_array")`, records its first episode."""
    return [functools.partial(_recorded_env, make, video_dir, i) for i in range(num_envs)]


# TensorBoard -----------------------------------------------------------------------------------
def tensorboard_tag(algo: str, name: str) -> str:
    """The TensorBoard tag of metrics.csv's column `name` in a run of `algo`."""
    return TENSORBOARD_TAGS_BY_ALGO.get(algo, {}).get(name) or TENSORBOARD_TAGS.get(
        name, f"charts/{name}"
    )


def tensorboard_writer(folder: Path | None = None, purge_step: int | None = None):
    """A SummaryWriter on <folder>/tensorboard (each run folder is one run under
    `tensorboard --logdir runs`); without a folder only checks that the tensorboard package
    is there (ValueError if not)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise InputError(
            "--tensorboard needs the tensorboard package: "
            "pip install -r requirements/requirements-viz.txt"
        ) from None
    return (
        None
        if folder is None
        else SummaryWriter(str(folder / "tensorboard"), purge_step=purge_step)
    )


def write_tensorboard(folder: Path, writer: SummaryWriter) -> int:
    """Every metric of <folder>/metrics.csv as a scalar at its global_step; returns the
    number of scalars. Wall times are the run's start (from the folder name, else 0) plus
    the row's wall_seconds."""
    algo = json.loads((folder / "config.json").read_text())["algo"]
    stamp = re.search(r"__(\d{8}-\d{6})(-\d+)?$", folder.name)
    start = time.mktime(time.strptime(stamp.group(1), "%Y%m%d-%H%M%S")) if stamp else 0.0
    count = 0
    with open(folder / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            step = int(row.pop("global_step"))
            wall = start + float(row.pop("wall_seconds"))
            for name, value in row.items():
                if value != "":
                    writer.add_scalar(
                        tensorboard_tag(algo, name), float(value), step, walltime=wall
                    )
                    count += 1
    return count


def wandb_mode() -> typing.Literal["offline"] | None:
    """None (wandb decides) when a key or an offline mode is set;
    "offline", with a warning, when not logged in."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        if netrc.netrc().authenticators(host):
            return None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    print(
        "wandb: not logged in (run `wandb login` or set WANDB_API_KEY); "
        "logging offline into the run folder, upload later with `wandb sync`",
        file=sys.stderr,
    )
    return "offline"


def open_wandb(args: typing.Any, config: dict, folder: Path) -> typing.Any:
    """The wandb run of a run folder:
    its name and id from the folder, resumable, offline without a login."""
    import wandb

    return wandb.init(
        project=args.wandb_project,
        entity=args.wandb_entity,
        config=config,
        name=folder.name,
        id=re.sub(r"[^A-Za-z0-9_-]", "-", folder.name),
        resume="allow",
        dir=str(folder),
        save_code=True,
        mode=wandb_mode(),
    )


def open_tensorboard(folder: Path, resumed_step: int | None) -> SummaryWriter:
    """The run's SummaryWriter. On resume events cannot be cut back like metrics.csv:
    purge_step makes TensorBoard drop the events of steps after the checkpoint's (the rows cut
    from metrics.csv); a run that wrote no events before gets the kept rows of metrics.csv
    first, so its history is whole."""
    if resumed_step is None:
        return tensorboard_writer(folder)
    wrote = any((folder / "tensorboard").glob("events.out.tfevents.*"))
    writer = tensorboard_writer(folder, purge_step=resumed_step + 1 if wrote else None)
    if not wrote:
        write_tensorboard(folder, writer)
    return writer


class Sinks:
    """The run's TensorBoard writer (`--tensorboard`) and wandb run (`--track`),
    fed what metrics.csv gets."""

    def __init__(
        self, algo: str, args: typing.Any, config: dict, folder: Path, resumed_step: int | None
    ) -> None:
        self.algo = algo
        self.tensorboard = open_tensorboard(folder, resumed_step) if args.tensorboard else None
        self.wandb = open_wandb(args, config, folder) if args.track else None

    def log(self, metrics: dict, step: int) -> None:
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)
        if self.tensorboard is not None:
            for name, value in metrics.items():
                self.tensorboard.add_scalar(tensorboard_tag(self.algo, name), value, step)

    # with metrics.csv: the events up to a checkpoint survive a kill, as the rows do
    def flush(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.flush()

    def close(self, summary: dict) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.summary.update(
                {k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))}
            )
            self.wandb.finish(exit_code=0 if summary["completed"] and not summary["error"] else 1)


def check_packages(args: typing.Any) -> None:
    """InputError (one line, exit 2) where a flag's package is missing,
    before the run writes anything."""
    import importlib.util

    if args.tensorboard:
        tensorboard_writer()
    if args.capture_video and importlib.util.find_spec("moviepy") is None:
        raise InputError(
            "--capture-video needs moviepy: pip install -r requirements/requirements-video.txt"
        )


def compile_checks(args: typing.Any, device: torch.device) -> list[tuple[bool, str]]:
    """harness.cli.check's (ok, message) pairs for --compile and --cudagraphs on `device`."""
    compiler = any(
        shutil.which(cc) for cc in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++")
    )
    return [
        (
            not args.cudagraphs or device.type == "cuda",
            "--cudagraphs needs a CUDA device (--device cuda, or auto on an Atari id)",
        ),
        (
            device.type == "cuda" or compiler,
            "--compile on a CPU needs a C++ compiler "
            "(torch.compile's inductor builds C++ kernels); none found",
        ),
    ]


def compiled(
    fn: typing.Callable[..., typing.Any],
    cuda: bool,
    cudagraphs: bool,
    count_compile_time: typing.Callable[[float], None],
) -> typing.Any:
    """`fn` under torch.compile. A function (the update's loss) is compiled everywhere; a network
    (acting) on CUDA only, since on a CPU acting runs through a numpy fast path. `cudagraphs`:
    mode="reduce-overhead", torch's own CUDA graphs of what it compiled. A first call compiles: its
    seconds go to `count_compile_time` (summary.json, progress), not to the training time."""
    module = isinstance(fn, nn.Module)
    if module and not cuda:
        return fn
    compiled_fn: typing.Any = torch.compile(
        fn, mode="reduce-overhead" if cudagraphs else None, dynamic=False
    )
    call_compiled = compiled_fn.forward if module else compiled_fn
    first = True

    def call(*args: typing.Any, **kwargs: typing.Any) -> typing.Any:
        nonlocal first
        if not first:
            return call_compiled(*args, **kwargs)
        start = time.perf_counter()
        out = call_compiled(*args, **kwargs)
        first = False
        count_compile_time(time.perf_counter() - start)
        return out

    if module:
        compiled_fn.forward = (
            call  # the OptimizedModule keeps the network's attributes (fast paths read its layers)
        )
        return compiled_fn
    return functools.wraps(fn)(call)
