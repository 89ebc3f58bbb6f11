"""Speed of algos/ddpg.py beside Stable-Baselines3's DDPG, with CleanRL's DDPG settings, in one invocation.

Settings (both sides): Pendulum-v1, 20k env steps, uniform random actions and no learning for the
first 5k, batch 256, [256, 256] MLPs, Adam 3e-4, tau 0.005, gamma 0.99, Gaussian noise 0.1,
one critic update per env step, actor every 2 critic updates (SB3: `policy_delay = 2` set on its
DDPG object, which is TD3 with one critic and no target smoothing), CPU, `--threads` torch threads
for both (default 1; CleanRL's script does not set a thread count, so its recorded 249 steps/s ran
on torch's default, all cores: compare it with `--threads 2` on a 2-core machine).
Also times algos/naf.py with the same batch, network widths and schedule.

The machine is shared and noisy: runs are interleaved (ours, SB3, ours, SB3, ...) and the ratio is
taken per pair. "wall" steps/s is env steps over training wall time (our final evaluation
excluded); "cpu" steps/s is env steps over the process's CPU time during training (our final
evaluation of 10 short episodes included), which other processes on the machine disturb less.

Run:
    python benchmarks/speed_ddpg.py --repeats 2
    python benchmarks/speed_ddpg.py --repeats 2 --threads 2   # torch's default on 2 cores, as CleanRL ran
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "algos"))

CLEANRL_SPS = 249.0  # references.toml, cleanrl-ddpg-pendulum-speed: CleanRL's DDPG, these settings, this kind of machine
STEPS, LEARNING_STARTS = 20_000, 5_000  # the defaults; --total-timesteps and --learning-starts change them (speed.py --quick)


def run_ours(seed: int, run_dir: str, threads: int) -> tuple[float, float, float]:
    import ddpg

    args = ddpg.Args(
        env_id="Pendulum-v1", seed=seed, total_timesteps=STEPS, learning_starts=LEARNING_STARTS, batch_size=256,
        hidden_sizes=(256, 256), actor_learning_rate=3e-4, critic_learning_rate=3e-4, target_rate=0.005, gamma=0.99,
        noise="gaussian", noise_std=0.1, policy_every=2, buffer_size=1_000_000, device="cpu", torch_threads=threads,
        run_dir=run_dir, progress=False,
    )
    cpu = time.process_time()
    summary = ddpg.train(args)
    return summary["sps"], STEPS / (time.process_time() - cpu), summary["eval_return_mean"]


def run_naf(seed: int, run_dir: str, threads: int) -> tuple[float, float, float]:
    import naf

    args = naf.Args(
        env_id="Pendulum-v1", seed=seed, total_timesteps=STEPS, learning_starts=LEARNING_STARTS, batch_size=256,
        hidden_sizes=(256, 256), device="cpu", torch_threads=threads, run_dir=run_dir, progress=False,
    )
    cpu = time.process_time()
    summary = naf.train(args)
    return summary["sps"], STEPS / (time.process_time() - cpu), summary["eval_return_mean"]


def run_sb3(seed: int, threads: int) -> tuple[float, float, float]:
    import gymnasium as gym
    from stable_baselines3 import DDPG
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(threads)
    env = gym.make("Pendulum-v1")
    high = env.action_space.high
    model = DDPG(
        "MlpPolicy", env, learning_rate=3e-4, buffer_size=1_000_000, learning_starts=LEARNING_STARTS, batch_size=256,
        tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, policy_kwargs=dict(net_arch=[256, 256]),
        action_noise=NormalActionNoise(np.zeros_like(high), 0.1 * high), seed=seed, device="cpu", verbose=0,
    )
    model.policy_delay = 2  # actor (and targets) every 2 critic updates, as CleanRL's DDPG
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=STEPS)
    sps, cpu_sps = STEPS / (time.perf_counter() - start), STEPS / (time.process_time() - cpu)
    mean, _ = evaluate_policy(model, gym.make("Pendulum-v1"), n_eval_episodes=10, deterministic=True)
    return sps, cpu_sps, float(mean)


def main() -> None:
    global STEPS, LEARNING_STARTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="interleaved (ours, SB3) pairs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-naf", action="store_true", help="skip the NAF timing")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, for both sides")
    parser.add_argument("--total-timesteps", type=int, default=STEPS, help="env steps per run (CleanRL's figure is for 20k)")
    parser.add_argument("--learning-starts", type=int, default=LEARNING_STARTS, help="env steps of uniform random actions before learning")
    opts = parser.parse_args()
    STEPS, LEARNING_STARTS = opts.total_timesteps, opts.learning_starts
    torch.set_num_threads(opts.threads)
    ours, sb3, ratios, cpu_ratios = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(opts.repeats):
            seed = opts.seed + k
            sps, cpu_sps, ret = run_ours(seed, tmp, opts.threads)
            ours.append((sps, cpu_sps))
            print(f"ours  DDPG seed {seed}: {sps:7.1f} steps/s wall  {cpu_sps:7.1f} steps/s cpu  eval {ret:8.1f}", flush=True)
            sps, cpu_sps, ret = run_sb3(seed, opts.threads)
            sb3.append((sps, cpu_sps))
            ratios.append(ours[-1][0] / sps)
            cpu_ratios.append(ours[-1][1] / cpu_sps)
            print(f"SB3   DDPG seed {seed}: {sps:7.1f} steps/s wall  {cpu_sps:7.1f} steps/s cpu  eval {ret:8.1f}   "
                  f"ours/SB3 {ratios[-1]:.2f}x wall, {cpu_ratios[-1]:.2f}x cpu", flush=True)
        if not opts.no_naf:
            sps, cpu_sps, ret = run_naf(opts.seed, tmp, opts.threads)
            print(f"ours  NAF  seed {opts.seed}: {sps:7.1f} steps/s wall  {cpu_sps:7.1f} steps/s cpu  eval {ret:8.1f}", flush=True)
    wall, cpu = statistics.median(s for s, _ in ours), statistics.median(c for _, c in ours)
    print(f"\nDDPG, Pendulum-v1, {STEPS:,} steps, learning from {LEARNING_STARTS:,}, batch 256, [256, 256], actor every 2, {opts.threads} torch thread(s):")
    print(f"  ours   median {wall:7.1f} steps/s wall, {cpu:7.1f} cpu: {wall / CLEANRL_SPS:.2f}x (wall), {cpu / CLEANRL_SPS:.2f}x (cpu) "
          f"CleanRL's recorded {CLEANRL_SPS:.0f} (20k steps)")
    print(f"  SB3    median {statistics.median(s for s, _ in sb3):7.1f} steps/s wall, {statistics.median(c for _, c in sb3):7.1f} cpu")
    print(f"  ours/SB3 per pair: {', '.join(f'{r:.2f}x' for r in ratios)} wall, {', '.join(f'{r:.2f}x' for r in cpu_ratios)} cpu; "
          f"median {statistics.median(ratios):.2f}x wall, {statistics.median(cpu_ratios):.2f}x cpu")


if __name__ == "__main__":
    main()
