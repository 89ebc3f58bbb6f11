"""Run plumbing shared by every script: nothing here knows about an algorithm.

- `parse_args(Args, doc)`: the command line (tyro); with `--resume RUN` the stored arguments
  become the defaults, so only the flags given again override them.
- `Run`: the run folder (config.json, metrics.csv, summary.json, model and videos), the
  progress line, wandb, signals, and checkpoints (what a checkpoint holds is the script's dict;
  writing it atomically, loading it without code, generators and env state are
  harness/checkpoint.py's). It reads the fields of the script's Args named in `RUN_FIELDS`.
- `evaluate(act, make_envs, episodes, seed, video_dir)`: greedy episodes, one per env.
- `main(algo, train, args)`: runs `train` and turns its outcome into the exit status.
- `flush_denormals()`: subnormal floats become 0 while a script trains (much faster on x86);
  returns the caller's setting, which the script restores when it returns.
- `tensorboard_tag(algo, name)`, `write_tensorboard(folder, writer)`: the TensorBoard tags of the
  metrics (CleanRL's names) and metrics.csv's rows as scalars, for `--tensorboard` and
  tensorboard_export.py.

Exit status: 0 done; 1 stopped by a NaN loss, a lost worker or a failed final evaluation
(summary and model kept), or a bug (its traceback; metrics.csv and summary.json keep the error);
2 bad input (`InputError`: a flag, an env id, a run folder), one line; 75 stopped by SIGTERM or SIGUSR1 after writing
a checkpoint (resume with `--resume`); 130 interrupted (Ctrl-C).

Signals: SIGTERM and SIGUSR1 (SLURM sends one before a job's time limit) ask for a stop at the
next step boundary (for rollout-based scripts, the end of a rollout and its update): the script
writes a checkpoint there and exits with 75. Ctrl-C stops at once as before (logs, summary,
model kept); with `--checkpoint-every` on it also waits for the step boundary and writes a
checkpoint first (a second Ctrl-C stops at once).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import netrc
import os
import re
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import gymnasium as gym
import numpy as np
import torch

from harness import checkpoint, distributed
from harness.errors import InputError

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
# TensorBoard tags: CleanRL's where CleanRL logs the same quantity, charts/<name> for the others
TENSORBOARD_TAGS = {
    "episodic_return": "charts/episodic_return", "episodic_length": "charts/episodic_length", "sps": "charts/SPS",
    "epsilon": "charts/epsilon", "loss": "losses/td_loss", "q_values": "losses/q_values", "critic_loss": "losses/qf1_loss",
    "actor_loss": "losses/actor_loss", "policy_loss": "losses/policy_loss", "value_loss": "losses/value_loss",
    "entropy": "losses/entropy", "grad_norm": "losses/grad_norm", "eval_return": "eval/episodic_return",
    "eval_return_std": "eval/episodic_return_std",
}
TENSORBOARD_TAGS_BY_ALGO = {
    "a2c": {"loss": "losses/loss"},  # the total loss (policy + value - entropy), not a TD loss
    "ddpg": {"q_values": "losses/qf1_values"},  # CleanRL's DDPG name for the critic's Q(s, a)
}


# What Run reads from a script's Args, by name: every script's Args declares these fields.
RUN_FIELDS = {
    "env_id": "gymnasium id (the run folder's name, the summary)",
    "seed": "the run's seed (folder name, evaluation seeds)",
    "total_timesteps": "env steps to train for (progress, ETA)",
    "num_envs": "parallel training envs (running episode returns)",
    "eval_episodes": "episodes per evaluation",
    "run_dir": "parent folder of the run folders",
    "progress": "print the progress line",
    "checkpoint_every": "env steps between checkpoints (0: none)",
    "resume": "run folder to continue, or None",
    "capture_video": "record evaluation videos",
    "tensorboard": "write TensorBoard scalars",
    "track": "log to wandb",
    "wandb_project": "wandb project",
    "wandb_entity": "wandb team or user",
}


class Stopped(Exception):
    """A signal asked the run to stop; raised at a step boundary, after the checkpoint is written."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def flush_denormals() -> bool:
    """Make torch flush subnormal floats (below ~1.2e-38) to zero; returns the previous setting.

    Adam's and RMSprop's moment estimates of gradients that are often zero (sparse inputs such as
    MinAtar's boolean grids, dead ReLUs) decay geometrically into the subnormal range, where x86
    arithmetic is ~100x slower: without flushing, the optimizer's step can cost as much as the
    backward pass. Results differ only where a value would have been below 1.2e-38
    (benchmarks/results/speed.md has the measurements). Each script calls this when training starts
    and gives the returned setting back to `torch.set_flush_denormal` in its `finally`, so a caller
    of `train()` keeps its own setting; torch has no getter, so it is read off a product that is
    subnormal unless flushed. On a CPU that cannot flush, nothing changes.
    """
    before = (torch.tensor(1e-30) * 1e-10).item() == 0.0
    torch.set_flush_denormal(True)
    return before


# command line ----------------------------------------------------------------------------------
def parse_args(args_class, doc: str):
    """tyro's parser with the script's one-line description; `--resume RUN` takes RUN's arguments as defaults."""
    import tyro

    description = doc.strip().splitlines()[0]
    args = tyro.cli(args_class, description=description)
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
    return tyro.cli(args_class, description=description, default=args_class(**defaults))


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
        raise InputError(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__) from None


def refuse_workers(algo: str) -> None:
    """One line instead of N independent copies writing N run folders under torchrun."""
    if distributed.launched():
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


class _FirstEpisodeVideo(gym.wrappers.RecordVideo):
    """RecordVideo writing its one recording as <name_prefix>.mp4 (its own names add "-episode-<k>")."""

    def start_recording(self, video_name: str):
        super().start_recording(self.name_prefix)


def record_first_episode(env: gym.Env, video_dir: str, index: int) -> gym.Env:
    """`env` (made with render_mode="rgb_array") writing its first episode to video_dir/episode-<index>.mp4:
    env i of an evaluation plays its episode i."""
    with warnings.catch_warnings():  # every env of the evaluation writes into the same folder
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
        return _FirstEpisodeVideo(env, video_dir, episode_trigger=lambda episode: episode == 0,
                                  name_prefix=f"episode-{index}", disable_logger=True)


# TensorBoard -----------------------------------------------------------------------------------
def tensorboard_tag(algo: str, name: str) -> str:
    """The TensorBoard tag of metrics.csv's column `name` in a run of `algo`."""
    return TENSORBOARD_TAGS_BY_ALGO.get(algo, {}).get(name) or TENSORBOARD_TAGS.get(name, f"charts/{name}")


def tensorboard_writer(folder: Path | None = None, purge_step: int | None = None):
    """A SummaryWriter on <folder>/tensorboard (each run folder is one run under `tensorboard --logdir runs`);
    without a folder only checks that the tensorboard package is there (ValueError if not)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise InputError("--tensorboard needs the tensorboard package: pip install -r requirements-viz.txt") from None
    return None if folder is None else SummaryWriter(str(folder / "tensorboard"), purge_step=purge_step)


def write_tensorboard(folder: Path, writer) -> int:
    """Every metric of <folder>/metrics.csv as a scalar at its global_step; returns the number of scalars.
    Wall times are the run's start (from the folder name, else 0) plus the row's wall_seconds."""
    algo = json.loads((folder / "config.json").read_text())["algo"]
    stamp = re.search(r"__(\d{8}-\d{6})(-\d+)?$", folder.name)
    start = time.mktime(time.strptime(stamp.group(1), "%Y%m%d-%H%M%S")) if stamp else 0.0
    count = 0
    with open(folder / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            step, wall = int(row.pop("global_step")), start + float(row.pop("wall_seconds"))
            for name, value in row.items():
                if value != "":
                    writer.add_scalar(tensorboard_tag(algo, name), float(value), step, walltime=wall)
                    count += 1
    return count


# the run ---------------------------------------------------------------------------------------
def _mujoco_warning(message: str) -> None:
    warnings.warn(f"MuJoCo: {message.strip()}", RuntimeWarning, stacklevel=2)


class Run:
    """Run folder, config.json, metrics.csv (one row per event), progress line, wandb, summary.json,
    signals and checkpoints.

    A new run creates `<run_dir>/<env>__<algo>__<seed>__<time>/`; `args.resume` reopens that
    folder instead: its last checkpoint is read and checked before anything is written, and
    metrics.csv is cut back to the rows the checkpoint had written. `write=False` (torchrun
    workers other than rank 0) makes every call a no-op except the timers.
    """

    def __init__(self, algo: str, args, fields: list[str], write: bool = True):
        missing = [name for name in RUN_FIELDS if not hasattr(args, name)]
        if missing:
            raise TypeError(f"Run reads {', '.join(missing)} from the script's Args, which lacks them (harness.run.RUN_FIELDS)")
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
        if "mujoco" in sys.modules:
            # the script made its MuJoCo envs: MuJoCo's warnings go through Python's, which show each
            # once (gymnasium's HalfCheetah model warns of a deprecated attribute at every load, and
            # every evaluation loads one per episode)
            sys.modules["mujoco"].set_mju_user_warning(_mujoco_warning)
        if (self.checkpoint_every or args.resume) and distributed.launched():
            raise InputError("--checkpoint-every and --resume work in one process; under torchrun leave them out")
        if args.tensorboard:
            tensorboard_writer()  # a missing package is bad input, found before anything is written
        if not write:
            return
        config = {"algo": algo, **json.loads(json.dumps(dataclasses.asdict(args)))}
        wandb_mode = _wandb_mode() if args.track else None
        if args.resume:
            self.path = Path(args.resume)
            self._check_resume(config)
            self.start = time.perf_counter() - self.saved["wall_seconds"]
            self.resumes = [*self.saved["resumes"], self.saved["global_step"]]
            self.file = self._reopen_metrics(self.saved["metrics_bytes"])
            self.csv = csv.DictWriter(self.file, self.fields)
            (self.path / "config.json").write_text(json.dumps(config, indent=2))  # the new length or logging flags
            if args.tensorboard:
                # events cannot be cut back like metrics.csv: purge_step makes TensorBoard drop the events of
                # steps after the checkpoint's (the rows cut from metrics.csv); a run that wrote no events
                # before gets the kept rows of metrics.csv first, so its TensorBoard history is whole
                wrote = any((self.path / "tensorboard").glob("events.out.tfevents.*"))
                self.tensorboard = tensorboard_writer(self.path, purge_step=self.saved["global_step"] + 1 if wrote else None)
                if not wrote:
                    write_tensorboard(self.path, self.tensorboard)
        else:
            self.path = self._new_folder(config)
            self.file = open(self.path / "metrics.csv", "w", newline="")
            self.csv = csv.DictWriter(self.file, self.fields)
            self.csv.writeheader()
            if args.tensorboard:
                self.tensorboard = tensorboard_writer(self.path)
        self.total, self.show = args.total_timesteps, args.progress
        self.tty = sys.stdout.isatty()
        self.last_print, self.last_flush, self.next_mark = time.perf_counter(), time.perf_counter(), 0.1
        self.printed_step = -1
        if args.track:
            import wandb

            self.wandb = wandb.init(
                project=args.wandb_project, entity=args.wandb_entity, config=config, name=self.path.name,
                id=re.sub(r"[^A-Za-z0-9_-]", "-", self.path.name), resume="allow", dir=str(self.path),
                save_code=True, mode=wandb_mode,
            )
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
        for key in sorted(set(stored) | set(config)):
            if key not in RESUMABLE_CHANGES and stored.get(key) != config.get(key):
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
            for name, value in metrics.items():
                self.tensorboard.add_scalar(tensorboard_tag(self.algo, name), value, global_step)

    def episodes(self, global_step: int, rewards: np.ndarray, done: np.ndarray) -> None:
        """Add one vector step's rewards [B] to the running episodes; log and restart those that ended [B]."""
        self.ep_return += rewards
        self.ep_length += 1
        for i in np.flatnonzero(done):
            self.recent_returns = (self.recent_returns + [float(self.ep_return[i])])[-10:]
            self.log(global_step, episodic_return=float(self.ep_return[i]), episodic_length=int(self.ep_length[i]))
            self.ep_return[i], self.ep_length[i] = 0.0, 0

    def progress(self, global_step: int, force: bool = False) -> None:
        """A line with steps, steps/s, ETA and recent return: redrawn on a terminal, every 10% in a log."""
        self.next_check = global_step + 1000
        if not self.write:
            return
        now = time.perf_counter()
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
        sps = global_step / max(elapsed, 1e-9)
        eta = (self.total - global_step) / max(sps, 1e-9)
        line = (
            f"{self.algo} {global_step:>10,}/{self.total:,} steps ({100 * frac:5.1f}%)  {sps:>7,.0f} steps/s  "
            f"elapsed {elapsed:6.0f}s  ETA {eta:6.0f}s  return(last 10) {recent_return:8.2f}"
        )
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
        if threading.current_thread() is not threading.main_thread() or distributed.launched():
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
            print(f"\n{self.algo}: interrupted at step {global_step:,}; writing logs", file=sys.stderr)
            return "interrupted"
        print(f"\n{self.algo}: stopped: {e}", file=sys.stderr)
        return str(e)

    def crashed(self, e: BaseException, global_step: int) -> None:
        """A bug ended training: metrics.csv and summary.json keep what happened, with the error; the
        script re-raises, so the traceback shows and the exit status is 1."""
        try:
            error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            self.finish(self.summary(global_step, self.elapsed(), np.array([]), completed=False, error=error), global_step)
        except Exception:  # the original error matters more than a second one while recording it
            pass

    def final_evaluation(self, act, make_envs, global_step: int) -> tuple[np.ndarray, str | None]:
        """The last evaluation; a failure (e.g. no renderer for the video) costs the evaluation, not the run."""
        try:
            returns, message = self.evaluate(act, make_envs, global_step), None
        except Exception as e:  # the run's model and summary are written whatever happens here
            returns = np.array([])
            message = f"final evaluation failed: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            print(f"{self.algo}: {message}", file=sys.stderr)
        if self._final_checkpoint is not None:
            self._write_checkpoint(self._final_checkpoint)
            self._final_checkpoint = None
        return returns, message

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
            "versions": {"torch": torch.__version__, "gymnasium": gym.__version__, "numpy": np.__version__},
        }
        return summary

    def finish(self, summary: dict, global_step: int) -> dict:
        """Final progress line, summary.json, wandb closed, signal handlers given back."""
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


def _wandb_mode() -> str | None:
    """None (wandb decides) when a key or an offline mode is set; "offline", with a warning, when not logged in."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        if netrc.netrc().authenticators(host):
            return None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    print("wandb: not logged in (run `wandb login` or set WANDB_API_KEY); logging offline into the run folder, "
          "upload later with `wandb sync`", file=sys.stderr)
    return "offline"


def main(algo: str, train: Callable, args) -> int:
    """Run `train(args)`; the exit status (module docstring) from its summary.

    Bad input (InputError) and workers that cannot form a group are one line and exit 2; any
    other exception is a bug: Python prints its traceback and the exit status is 1."""
    try:
        summary = train(args)
    except (InputError, distributed.WorkerError) as e:
        print(f"{algo}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        distributed.shutdown()
    if summary["error"] == "interrupted":
        return EXIT_INTERRUPTED
    if summary["error"] == "preempted":
        return EXIT_PREEMPTED
    return EXIT_OK if summary["completed"] and summary["error"] is None else EXIT_FAILED
