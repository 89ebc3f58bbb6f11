"""Score or watch a saved model: the evaluation phase of a finished (or interrupted) run.

    python tools/evaluate.py runs/CartPole-v1__dqn__1__20261122-211249 --episodes 10 --capture-video

Reads the run folder's config.json to rebuild the algorithm's network, loads model.pt (written
by `--save-model`, a state dict loaded with weights_only=True) and runs the deterministic policy
(greedy / mean action) for --episodes episodes. By default it repeats the run's final evaluation
(the run's --eval-episodes, on envs seeded with the run's seed + 100_000, as the scripts
evaluate), so it prints summary.json's eval_return_mean; --seed and --episodes score other
episodes. --capture-video writes an MP4 of every episode into <run folder>/eval_videos.

The network comes from the algorithm's script: algos/<algo>.py of this repository (<algo> from
config.json), or the file given with --script, e.g. a copy of the script trained in another
project (with its common/ and harness/ beside it).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent  # the repository: algos/, common/, harness/


@dataclass
class EvalArgs:
    run: tyro.conf.Positional[Path]
    """run folder holding config.json and model.pt"""
    episodes: Annotated[
        Optional[int],
        tyro.conf.arg(metavar="N", help_behavior_hint="(default: the run's --eval-episodes)"),
    ] = None
    """episodes to evaluate"""
    seed: Annotated[
        Optional[int],
        tyro.conf.arg(
            metavar="S",
            help_behavior_hint=(
                "(default: the run's seed + 100_000, the seed of its own evaluations)"
            ),
        ),
    ] = None
    """seed of the evaluation envs, env i gets seed + i"""
    script: Annotated[
        Optional[Path],
        tyro.conf.arg(
            metavar="PATH",
            help_behavior_hint=(
                "(default: algos/<algo>.py of this repository, <algo> from config.json)"
            ),
        ),
    ] = None
    """the algorithm's script that trained the run, whose network
    and env maker are used (e.g. a copy in another project)"""
    capture_video: bool = False
    """write videos into <run folder>/eval_videos"""
    device: str = "cpu"
    """where to run the network"""


def check(a: EvalArgs) -> tuple[dict, Path]:
    """The run's config.json and the script to load, or ValueError naming what is wrong:
    checked before the script (and torch with it) is imported, so bad input is one line at once."""
    missing = [name for name in ("config.json", "model.pt") if not (a.run / name).is_file()]
    if not a.run.is_dir():
        raise ValueError(
            f"{a.run} is not a folder (give a run folder holding config.json and model.pt)"
        )
    if missing == ["model.pt"]:
        raise ValueError(f"{a.run} has no model.pt (train with --save-model)")
    if missing:
        also = "; a run writes model.pt with --save-model" if "model.pt" in missing else ""
        raise ValueError(f"{a.run} has no {' and no '.join(missing)} (not a run folder{also})")
    if a.capture_video and importlib.util.find_spec("moviepy") is None:
        raise ValueError(
            "--capture-video needs moviepy: pip install -r requirements/requirements-video.txt"
        )
    if a.episodes is not None and a.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {a.episodes}")
    try:
        config = json.loads((a.run / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{a.run / 'config.json'} cannot be read ({e})") from None
    if not isinstance(config, dict) or not isinstance(config.get("algo"), str):
        raise ValueError(
            f"{a.run / 'config.json'} names no algorithm (not the config.json of a run)"
        )
    script = a.script if a.script is not None else ROOT / "algos" / f"{config['algo']}.py"
    if not script.is_file():
        if a.script is not None:
            raise ValueError(f"--script {script}: no such file")
        raise ValueError(
            f"no script {script} for the run's algorithm {config['algo']!r}; "
            "give the script with --script PATH"
        )
    return config, script


def main(a: EvalArgs) -> int:
    try:
        config, script = check(a)
    except ValueError as e:
        print(f"evaluate: error: {e}", file=sys.stderr)
        return 2
    model_path = a.run / "model.pt"
    algo = config.pop("algo")
    spec = importlib.util.spec_from_file_location(algo, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[algo] = module  # dataclasses look their module up while the file executes
    sys.path.insert(0, str(ROOT))
    spec.loader.exec_module(module)
    known = {f.name for f in fields(module.Args)}
    args = module.Args(**{k: v for k, v in config.items() if k in known})
    episodes = args.eval_episodes if a.episodes is None else a.episodes
    seed = (
        args.seed + 100_000 if a.seed is None else a.seed
    )  # the scripts' evaluation seed, apart from the training envs'
    try:
        act = module.load_policy(args, str(model_path), a.device)
    except RuntimeError as e:  # load_state_dict: missing, unexpected or resized weights
        if "state_dict" not in str(e):
            raise
        where = (
            f"--script {script}"
            if a.script is not None
            else f"{script.relative_to(ROOT)} (this repository's)"
        )
        print(
            f"evaluate: error: the run's model.pt does not fit the network of {where}: "
            f"{str(e).splitlines()[0].rstrip(':.')}; "
            "give the script that trained the run with --script PATH",
            file=sys.stderr,
        )
        return 2
    video_dir = str(a.run / "eval_videos") if a.capture_video else None
    from harness.run import evaluate

    env_flags = inspect.signature(module.make_env).parameters
    as_in_the_run = (
        {"training": False} if "training" in env_flags else {}
    )  # Atari: whole games, as the run's evaluations
    if "scale_obs" in env_flags:
        as_in_the_run["scale_obs"] = args.scale_obs
    returns = evaluate(
        act,
        functools.partial(module.make_env, args.env_id, **as_in_the_run),
        episodes,
        seed,
        video_dir,
    )
    print(
        f"{algo} on {args.env_id}: return {returns.mean():.2f} +- {returns.std():.2f} "
        f"over {episodes} episodes"
    )
    if video_dir:
        print(f"videos: {video_dir}/ ({len(list(Path(video_dir).glob('*.mp4')))} MP4 files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(EvalArgs, description=__doc__.strip().splitlines()[0])))
