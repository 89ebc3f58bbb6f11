"""DQN speed, side by side in one invocation: ours against Stable-Baselines3 with matched settings.

    python benchmarks/speed_dqn.py --total-timesteps 500000

Settings are CleanRL's DQN defaults on CartPole-v1 (lr 2.5e-4, buffer 10k, batch 128, learning
starts 10k, train every 10 env steps, hard target copy every 500, epsilon 1 -> 0.05 over half
the run, [120, 84] MLP, gamma 0.99, 1 env), CPU, `--threads` torch threads for both (default 1;
CleanRL's script sets none, so its recorded ~4,900 steps/s ran on torch's default, all cores). Differences that
cannot be matched: SB3's loss is Huber (ours MSE, as CleanRL's) and SB3 always clips the
gradient norm (set to 10 here, the default; ours computes the norm but does not clip).
Prints steps/s of each and the ratio. Runs alternate (ours, SB3, ours, SB3, ...) with --repeats.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "algos"))
sys.path.insert(0, str(ROOT))


@dataclass
class SpeedArgs:
    total_timesteps: int = 500_000
    """env steps per run"""
    seed: int = 1
    repeats: int = 1
    """runs of each, alternating"""
    threads: int = 1
    """torch threads, for both"""
    learning_starts: int = 10_000
    """env steps before learning (CleanRL's 10k; speed.py --quick lowers it)"""
    out: str = "benchmarks/results/speed_dqn.json"
    """where to write the figures"""


def ours(a: SpeedArgs) -> dict:
    import dqn

    s = dqn.train(dqn.Args(seed=a.seed, total_timesteps=a.total_timesteps, torch_threads=a.threads, learning_starts=a.learning_starts,
                             buffer_size=10_000, double_dqn=False, anneal_lr=False,  # CleanRL's (our defaults differ)
                             run_dir="/tmp/speed_runs", progress=False))
    return {"sps": s["sps"], "wall_seconds": s["wall_seconds"], "eval_return_mean": s["eval_return_mean"]}


def sb3(a: SpeedArgs) -> dict:
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(a.threads)
    env = gym.make("CartPole-v1")
    model = DQN(
        "MlpPolicy", env, learning_rate=2.5e-4, buffer_size=10_000, learning_starts=a.learning_starts, batch_size=128,
        tau=1.0, gamma=0.99, train_freq=10, gradient_steps=1, target_update_interval=500,
        exploration_fraction=0.5, exploration_initial_eps=1.0, exploration_final_eps=0.05,
        max_grad_norm=10, policy_kwargs=dict(net_arch=[120, 84]), seed=a.seed, device="cpu", verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=a.total_timesteps)
    seconds = time.perf_counter() - start
    mean, std = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10, deterministic=True)
    return {"sps": round(a.total_timesteps / seconds, 1), "wall_seconds": round(seconds, 2), "eval_return_mean": float(mean)}


def main(a: SpeedArgs) -> None:
    results = {"ours": [], "sb3": []}
    for r in range(a.repeats):
        for name, fn in (("ours", ours), ("sb3", sb3)):
            res = fn(a)
            results[name].append(res)
            print(f"run {r + 1}/{a.repeats} {name:>4}: {res['sps']:>8,.0f} steps/s  {res['wall_seconds']:7.1f} s  eval {res['eval_return_mean']:.1f}", flush=True)
    mean = {k: sum(x["sps"] for x in v) / len(v) for k, v in results.items()}
    ratio = mean["ours"] / mean["sb3"]
    print(f"DQN CartPole-v1 {a.total_timesteps:,} steps, {a.threads} torch thread(s): ours {mean['ours']:,.0f} steps/s, SB3 {mean['sb3']:,.0f} steps/s, ratio {ratio:.2f}x")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(a), "results": results, "mean_sps": mean, "ratio": ratio,
                               "torch": torch.__version__}, indent=2))


if __name__ == "__main__":
    main(tyro.cli(SpeedArgs))
