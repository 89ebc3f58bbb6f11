"""DQN on Atari, side by side in one invocation: ours against Stable-Baselines3, same game and settings.

    python benchmarks/speed_dqn_atari.py --total-timesteps 12000 --repeats 2 --threads 1 2 --profile

Game BreakoutNoFrameskip-v4; both sides use the DQN paper's preprocessing (no-op starts, frame
skip 4 with max-pooling, 84x84 grayscale, 4 stacked frames, a lost life ends the training
episode, FIRE on reset, rewards clipped for learning) and the Nature conv net; CleanRL's Atari
settings (Adam 1e-4, batch 32, a gradient step every 4 env steps, target copy every 1,000,
epsilon 1 -> 0.01) with a shorter heatup (`--learning-starts`) and a memory sized to the run.
Ours runs with SB3's loss and clipping (Huber, gradient norm clipped at 10) so that both do the
same arithmetic; what differs is everything around the network: acting, storing, sampling (ours
rebuilds the frame stacks from single frames, SB3 stores whole stacks), the optimizer step.

steps/s counts the whole training run (heatup included, final evaluation not) at each torch thread count in `--threads`;
runs alternate (ours, SB3, ours, SB3, ...). With `--profile`, one more run of each under the
torch profiler says which share of the time the conv net's own kernels take (convolutions and
matrix products, forward and backward), the same work on both sides.
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

ENV = "BreakoutNoFrameskip-v4"
KERNELS = ("aten::mkldnn_convolution", "aten::convolution_backward", "aten::addmm", "aten::mm", "aten::thnn_conv2d",
           "aten::_convolution", "aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward")


@dataclass
class SpeedArgs:
    total_timesteps: int = 12_000
    """env steps per run"""
    learning_starts: int = 2_000
    """env steps before learning"""
    seed: int = 1
    repeats: int = 2
    """runs of each, alternating"""
    threads: tuple[int, ...] = (1, 2)
    """torch thread counts to measure, for both"""
    profile: bool = False
    """one more run of each under the torch profiler: the conv net's kernels' share of the time"""
    out: str = "benchmarks/results/speed/speed_dqn_atari_raw.json"
    """where to write the figures"""


def ours(a: SpeedArgs, threads: int) -> float:
    import dqn

    s = dqn.train(dqn.Args(
        env_id=ENV, seed=a.seed, total_timesteps=a.total_timesteps, torch_threads=threads, learning_starts=a.learning_starts,
        buffer_size=a.total_timesteps, batch_size=32, learning_rate=1e-4, train_every=4, target_every=1_000,
        end_epsilon=0.01, exploration_fraction=0.1, loss="huber", clip_grad_norm=10.0, double_dqn=False, eval_episodes=1,
        run_dir="/tmp/speed_runs", progress=False))
    return s["sps"]  # training only, as SB3's learn() below


def sb3(a: SpeedArgs, threads: int) -> float:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    torch.set_num_threads(threads)
    env = VecFrameStack(make_atari_env(ENV, n_envs=1, seed=a.seed), n_stack=4)
    model = DQN("CnnPolicy", env, learning_rate=1e-4, buffer_size=a.total_timesteps, learning_starts=a.learning_starts,
                batch_size=32, tau=1.0, gamma=0.99, train_freq=4, gradient_steps=1, target_update_interval=1_000,
                exploration_fraction=0.1, exploration_initial_eps=1.0, exploration_final_eps=0.01, max_grad_norm=10,
                optimize_memory_usage=False, seed=a.seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=a.total_timesteps)
    return a.total_timesteps / (time.perf_counter() - start)


def kernel_share(fn, a: SpeedArgs) -> dict:
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(a, 1)
    wall = time.perf_counter() - start
    events = prof.key_averages()
    kernels = sum(e.self_cpu_time_total for e in events if e.key in KERNELS) / 1e6
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    return {"wall_seconds": round(wall, 1), "kernel_seconds": round(kernels, 1), "kernel_share": round(kernels / wall, 3),
            "top_ops": [(e.key, round(e.self_cpu_time_total / 1e6, 2)) for e in top]}


def main(a: SpeedArgs) -> None:
    results = {}
    for threads in a.threads:
        runs = {"ours": [], "sb3": []}
        for r in range(a.repeats):
            for name, fn in (("ours", ours), ("sb3", sb3)):
                sps = fn(a, threads)
                runs[name].append(round(sps, 1))
                print(f"{threads} thread(s), run {r + 1}/{a.repeats} {name:>4}: {sps:7.1f} steps/s", flush=True)
        ratios = [o / s for o, s in zip(runs["ours"], runs["sb3"])]
        results[threads] = {**runs, "ratios": [round(x, 2) for x in ratios]}
        print(f"DQN {ENV} {a.total_timesteps:,} steps, {threads} torch thread(s): ours/SB3 "
              f"{min(ratios):.2f}-{max(ratios):.2f}x (ours {sum(runs['ours']) / a.repeats:.1f}, SB3 {sum(runs['sb3']) / a.repeats:.1f} steps/s)", flush=True)
    profiles = {}
    if a.profile:
        for name, fn in (("ours", ours), ("sb3", sb3)):
            profiles[name] = kernel_share(fn, a)
            p = profiles[name]
            print(f"profile {name}: {p['wall_seconds']} s, of which the conv net's kernels {p['kernel_seconds']} s "
                  f"({100 * p['kernel_share']:.0f}%); top ops {p['top_ops'][:5]}", flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(a), "results": results, "profiles": profiles, "torch": torch.__version__}, indent=2))


if __name__ == "__main__":
    main(tyro.cli(SpeedArgs))
