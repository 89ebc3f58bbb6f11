"""Score or watch a saved model: the evaluation phase of a finished (or interrupted) run.

    python evaluate.py runs/CartPole-v1__dqn__1__20261122-211249 --episodes 10 --capture-video

Reads the run folder's config.json to rebuild the algorithm's network, loads model.pt (written
by `--save-model`, a state dict loaded with weights_only=True) and runs the deterministic policy
(greedy / mean action) for --episodes episodes. By default it repeats the run's final evaluation
(the run's --eval-episodes, on envs seeded with the run's seed + 100_000, as the scripts
evaluate), so it prints summary.json's eval_return_mean; --seed and --episodes score other
episodes. --capture-video writes an MP4 of every episode into <run folder>/eval_videos.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

import tyro

ROOT = Path(__file__).resolve().parent


@dataclass
class EvalArgs:
    run: tyro.conf.Positional[Path]
    """run folder holding config.json and model.pt"""
    episodes: Optional[int] = None
    """episodes to evaluate (default: the run's --eval-episodes)"""
    seed: Optional[int] = None
    """seed of the evaluation envs, env i gets seed + i (default: the run's seed + 100_000, the seed of its own evaluations)"""
    capture_video: bool = False
    """write videos into <run folder>/eval_videos"""
    device: str = "cpu"
    """where to run the network"""


def main(a: EvalArgs) -> int:
    config_path, model_path = a.run / "config.json", a.run / "model.pt"
    if not config_path.exists() or not model_path.exists():
        print(f"evaluate: error: {a.run} has no config.json and model.pt (train with --save-model)", file=sys.stderr)
        return 2
    if a.episodes is not None and a.episodes <= 0:
        print(f"evaluate: error: --episodes must be positive, got {a.episodes}", file=sys.stderr)
        return 2
    config = json.loads(config_path.read_text())
    algo = config.pop("algo")
    spec = importlib.util.spec_from_file_location(algo, ROOT / "algos" / f"{algo}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[algo] = module  # dataclasses look their module up while the file executes
    sys.path.insert(0, str(ROOT))
    spec.loader.exec_module(module)
    known = {f.name for f in fields(module.Args)}
    args = module.Args(**{k: v for k, v in config.items() if k in known})
    episodes = args.eval_episodes if a.episodes is None else a.episodes
    seed = args.seed + 100_000 if a.seed is None else a.seed  # the scripts' evaluation seed, apart from the training envs'
    act = module.load_policy(args, str(model_path), a.device)
    video_dir = str(a.run / "eval_videos") if a.capture_video else None
    from harness.run import evaluate

    env_flags = inspect.signature(module.make_env).parameters
    as_in_the_run = {"training": False} if "training" in env_flags else {}  # Atari: whole games, as the run's evaluations
    if "scale_obs" in env_flags:
        as_in_the_run["scale_obs"] = args.scale_obs
    returns = evaluate(act, functools.partial(module.make_env, args.env_id, **as_in_the_run), episodes, seed, video_dir)
    print(f"{algo} on {args.env_id}: return {returns.mean():.2f} +- {returns.std():.2f} over {episodes} episodes")
    return 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(EvalArgs)))
