"""Steps/s of our A2C beside Stable-Baselines3's A2C, matched settings, side by side in one run.

Both: CartPole-v1, 8 envs, n_steps 5 (one gradient step per 40 env steps), separate actor and
critic MLPs [64, 64] with tanh and orthogonal init, RMSprop (lr 7e-4, alpha 0.99, eps 1e-5),
gamma 0.99, full-rollout returns (SB3: gae_lambda 1.0), value coef 0.5, entropy coef 0.0, grad
norm clip 0.5, CPU, 1 torch thread. Runs alternate (ours, SB3, ours, SB3, ...) so that a change
in the machine's load hits both; the ratio is of the medians.

Timed: ours, the training loop (summary["sps"]: from the first env reset to the last update,
without the final evaluation); SB3, `model.learn()` (its env reset and rollout/update loop).

Run:
    python benchmarks/speed_a2c.py --total-timesteps 100000 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algos"))


def ours(total_timesteps: int, seed: int, run_dir: str) -> float:
    from a2c import Args, train

    summary = train(Args(
        env_id="CartPole-v1", seed=seed, total_timesteps=total_timesteps, num_envs=8, n_steps=5, device="cpu",
        torch_threads=1, run_dir=run_dir, progress=False, eval_episodes=1,
        learning_rate=7e-4, optimizer="rmsprop", rmsprop_alpha=0.99, optimizer_eps=1e-5, gamma=0.99,
        value_coef=0.5, entropy_coef=0.0, clip_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
    ))
    return summary["sps"]


def sb3(total_timesteps: int, seed: int) -> float:
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    envs = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = A2C(
        "MlpPolicy", envs, learning_rate=7e-4, n_steps=5, gamma=0.99, gae_lambda=1.0, ent_coef=0.0, vf_coef=0.5,
        max_grad_norm=0.5, rms_prop_eps=1e-5, use_rms_prop=True, normalize_advantage=False,
        policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh, ortho_init=True),
        device="cpu", seed=seed, verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps)
    seconds = time.perf_counter() - start
    envs.close()
    return model.num_timesteps / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    cli = parser.parse_args()
    results: dict[str, list[float]] = {"ours": [], "sb3": []}
    with tempfile.TemporaryDirectory() as run_dir:
        for r in range(cli.repeats):
            results["ours"].append(ours(cli.total_timesteps, cli.seed + r, run_dir))
            print(f"repeat {r + 1}: ours {results['ours'][-1]:,.0f} steps/s", flush=True)
            results["sb3"].append(sb3(cli.total_timesteps, cli.seed + r))
            print(f"repeat {r + 1}: sb3  {results['sb3'][-1]:,.0f} steps/s", flush=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\nA2C CartPole-v1, 8 envs, n_steps 5, {cli.total_timesteps:,} steps x {cli.repeats} (torch {torch.__version__})")
    for k, v in results.items():
        print(f"{k:>5}: median {med[k]:8,.0f} steps/s  runs {', '.join(f'{x:,.0f}' for x in v)}")
    print(f"ratio ours/sb3: {med['ours'] / med['sb3']:.2f}x")


if __name__ == "__main__":
    main()
