"""Where one DQN env step's time goes with CleanRL's settings, against the time a given speed-up leaves.

    python benchmarks/investigations/budget_dqn.py --sb3-sps 3115 --cleanrl-sps 4900

Could dqn.py run at 3x Stable-Baselines3's or 2x CleanRL's steps/s on CartPole-v1 with CleanRL's DQN
settings (one update of a [120, 84] MLP on 128 transitions every 10 env steps)? A speed in steps/s
is a budget in microseconds per env step. This script measures, with algos/dqn.py itself:

1. the loop without updates: `dqn.train` with the same settings but `train_every` beyond the run,
   so the env, epsilon-greedy acting (the numpy forward on the live weights), replay writes,
   episode bookkeeping and logging all run and only the gradient steps are skipped. Its policy
   never learns, so its episodes are short and it resets more often than a learning run: this
   *over*-states the loop's cost per step, which makes (2) an *under*-estimate;
2. the update as it costs inside the loop: (training seconds of the full run - those of the run
   without updates) / number of updates;
3. the same update hot: sample, target, forward, `train_step`, called back to back;
4. the cold-cache effect behind the difference of (2) and (3): one env step with its action
   right after an update, against one right after another env step.

and prints how many microseconds per update such a speed-up leaves once the loop's own cost is paid:
(1 / wanted steps/s - (1)) * steps / updates.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "algos"))
sys.path.insert(0, str(ROOT))

import dqn  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.replay import ReplayMemory  # noqa: E402


def run_seconds(steps: int, seed: int, updates: bool) -> tuple[float, int]:
    """Training seconds and number of updates of dqn.py with CleanRL's settings (its defaults)."""
    with tempfile.TemporaryDirectory() as run_dir:
        args = dqn.Args(seed=seed, total_timesteps=steps, run_dir=run_dir, progress=False,
                        train_every=dqn.Args.train_every if updates else 10 * steps)
        s = dqn.train(args)
    return steps / s["sps"], s["updates"]


def update_and_step() -> tuple[Callable[[], None], Callable[[], None], gym.vector.VectorEnv]:
    """dqn.py's update and one env step with its epsilon-greedy action, with dqn.py's default
    (CleanRL's) settings on CartPole-v1 and a full replay memory."""
    args = dqn.Args()
    torch.manual_seed(0)
    envs = dqn.make_env(args.env_id, 1)
    obs_dim, n_actions = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
    q_net = NetworkWrapper(dqn.QNetwork((obs_dim,), n_actions, args.hidden_sizes), lr=args.learning_rate, target=True)
    memory = ReplayMemory(args.buffer_size, (obs_dim,), (), discrete=True, seed=0)
    rng = np.random.default_rng(0)
    n = args.buffer_size
    memory.add(rng.normal(size=(n, obs_dim)), rng.integers(n_actions, size=n), np.ones(n), rng.normal(size=(n, obs_dim)), np.zeros(n))
    greedy = dqn.greedy_policy(q_net.online, torch.device("cpu"))
    loss_fn = F.mse_loss if args.loss == "mse" else F.smooth_l1_loss
    state = {"obs": envs.reset(seed=0)[0]}

    def update() -> None:  # as in dqn.py's training loop
        batch = memory.sample(args.batch_size)
        targets = dqn.dqn_targets(q_net.target, q_net.online, batch.rewards, batch.next_obs, batch.terminated, args.gamma, args.double_dqn)
        q = q_net.online(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        q_net.train_step(loss_fn(q, targets))

    def env_step() -> None:
        actions = dqn.select_actions(greedy, state["obs"], args.end_epsilon, n_actions, rng)
        state["obs"] = envs.step(actions)[0]

    return update, env_step, envs


def hot_update_seconds(reps: int) -> float:
    update, _, envs = update_and_step()
    for _ in range(100):
        update()
    start = time.perf_counter()
    for _ in range(reps):
        update()
    envs.close()
    return (time.perf_counter() - start) / reps


def env_step_seconds(reps: int) -> tuple[float, float]:
    """Mean seconds of one env step + action right after an update, and right after another env step."""
    update, env_step, envs = update_and_step()
    after_update = after_step = 0.0
    for i in range(reps + 100):
        update()
        t0 = time.perf_counter()
        env_step()
        t1 = time.perf_counter()
        env_step()
        t2 = time.perf_counter()
        if i >= 100:
            after_update += t1 - t0
            after_step += t2 - t1
    envs.close()
    return after_update / reps, after_step / reps


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=500_000, help="env steps of each of the two dqn.py runs (speed_dqn.py's 500k)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--reps", type=int, default=2000, help="calls timed for (3) and (4)")
    p.add_argument("--sb3-sps", type=float, default=None, help="SB3's steps/s from speed_dqn.py (prints the budget of 3x it)")
    p.add_argument("--cleanrl-sps", type=float, default=None, help="CleanRL's recorded steps/s (~4,900 on this kind of machine; prints the budget of 2x it)")
    a = p.parse_args(argv)
    if a.steps <= dqn.Args.learning_starts + dqn.Args.train_every:
        p.error(f"--steps must exceed dqn.py's {dqn.Args.learning_starts:,} heatup steps, got {a.steps:,}")
    torch.set_num_threads(1)  # as dqn.py's default
    full_s, n_updates = run_seconds(a.steps, a.seed, updates=True)
    loop_s, _ = run_seconds(a.steps, a.seed, updates=False)
    hot = hot_update_seconds(a.reps)
    after_update, after_step = env_step_seconds(a.reps)
    per_step_full, per_step_loop = full_s / a.steps, loop_s / a.steps
    in_loop = (full_s - loop_s) / n_updates
    us = 1e6
    print(f"dqn.py, CartPole-v1, CleanRL's settings, {a.steps:,} steps, 1 torch thread:")
    print(f"  full run: {a.steps / full_s:,.0f} steps/s = {per_step_full * us:.1f} us per env step, {n_updates:,} updates "
          f"(one per {a.steps / n_updates:.2f} env steps, counting the heatup)")
    print(f"  (1) the loop without updates: {a.steps / loop_s:,.0f} steps/s = {per_step_loop * us:.1f} us per env step")
    print(f"  (2) one update inside the loop: {in_loop * us:.0f} us (at least)")
    print(f"  (3) one update hot, back to back: {hot * us:.0f} us")
    print(f"  (4) one env step + action: {after_update * us:.1f} us right after an update, {after_step * us:.1f} us after another env step")
    targets = []
    if a.sb3_sps:
        targets.append((f"3x SB3 ({a.sb3_sps:,.0f} steps/s)", 3 * a.sb3_sps))
    if a.cleanrl_sps:
        targets.append((f"2x CleanRL ({a.cleanrl_sps:,.0f} steps/s)", 2 * a.cleanrl_sps))
    for name, sps in targets:
        budget = 1 / sps  # seconds per env step
        left = (budget - per_step_loop) * a.steps / n_updates  # seconds per update, once the loop's own cost is paid
        print(f"{name} = {sps:,.0f} steps/s: {budget * us:.1f} us per env step; after the loop's {per_step_loop * us:.1f} us, "
              f"{left * us:.0f} us per update (cold caches included) against {in_loop * us:.0f} us in the loop and {hot * us:.0f} us hot")


if __name__ == "__main__":
    main()
