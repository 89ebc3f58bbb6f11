"""DQN on Atari, side by side in one invocation: ours against Stable-Baselines3 and CleanRL, same game and settings.

    python benchmarks/speed_dqn_atari.py --total-timesteps 12000 --repeats 2 --threads 1 2 --profile
    python benchmarks/speed_dqn_atari.py --threads 1 --no-sb3 --cleanrl ~/cleanrl --cleanrl-python ~/venv-cleanrl/bin/python

Game BreakoutNoFrameskip-v4; every side uses the DQN paper's preprocessing (no-op starts, frame
skip 4 with max-pooling, 84x84 grayscale, 4 stacked frames, a lost life ends the training
episode, FIRE on reset, rewards clipped for learning) and the Nature conv net; CleanRL's Atari
settings (Adam 1e-4, batch 32, a gradient step every 4 env steps, target copy every 1,000,
epsilon 1 -> 0.01 over the first 10% of the run, plain DQN targets) with a shorter heatup
(`--learning-starts`) and a memory sized to the run. What differs is everything around the
network: acting, storing, sampling (ours rebuilds the frame stacks from single frames, SB3 and
CleanRL store whole stacks), the optimizer step. Ours runs twice per repeat, once with each
peer's loss and clipping, so that each pair does the same arithmetic:
- against SB3 (`ours`): Huber loss, gradient norm clipped at 10, SB3's own;
- against CleanRL (`ours-mse`): MSE loss, no clipping, CleanRL's own.
Differences that remain with CleanRL: it acts epsilon-greedily from step 0 (ours and SB3 act
uniformly at random until `--learning-starts`, so CleanRL runs the network on the greedy steps of
the heatup, ~90% of its steps after the first 10% of the run); it converts each observation to
float before the network (ours and SB3 pass uint8); it writes TensorBoard scalars every 100 steps.

CleanRL's dqn_atari.py (MIT; not part of this project) runs unmodified from a CleanRL checkout
given with `--cleanrl PATH`, in its own Python environment given with `--cleanrl-python` (it needs
gymnasium 0.29), e.g.:
    ~/venv-cleanrl/bin/pip install torch gymnasium==0.29.1 "shimmy[atari]<1" ale-py==0.8.1 \
        opencv-python-headless stable-baselines3==2.3.2 tyro tensorboard
    ~/venv-cleanrl/bin/ale-import-roms DIR        # a folder holding breakout.bin

Every run is a fresh child process with its working directory in a scratch folder, one at a time;
the sides alternate, in an order rotated per repeat. Threads, per `--threads` entry n:
OMP_NUM_THREADS=MKL_NUM_THREADS=n for every side, plus `--torch-threads n` for ours and
torch.set_num_threads(n) for SB3 (CleanRL sets no thread count: the variables decide). Speed is
env steps per second of the child's CPU time (user + system of all its threads, from getrusage),
which a busy machine disturbs far less than wall time: the whole process (imports, env and
network construction, ours' final evaluation, capped at 400 emulator frames) and, separately,
the training loop alone (ours: `train()`; SB3: `learn()`; CleanRL: from its first env reset,
which comes just before its loop, to its exit). Ratios are ours over the peer, per repeat, from
whole-process CPU; above 1 ours is faster. With `--profile`, one more run of ours and SB3 under
the torch profiler says which share of the time the conv net's own kernels take (convolutions
and matrix products, forward and backward), the same work on both sides.

Measured 2026-11-25 on a 2-core Intel Xeon VM busy with other jobs, torch 2.13.0, 12,000 steps
learning from 2,000, 1 thread, 2 repeats (`--threads 1 --no-sb3 --cleanrl ...`): ours-mse 108.6
and 99.7, CleanRL 81.7 and 85.1 steps per CPU second, ours-mse/cleanrl 1.25x [1.17, 1.33]. Both
spend most of their time in the conv net; CleanRL's default (for-loop) Adam takes ~25% of its run
against ~8% for ours' fused Adam on one flat parameter (py-spy).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "algos"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from childproc import run_timed  # noqa: E402
from provenance import code_state  # noqa: E402

ENV = "BreakoutNoFrameskip-v4"
CLEANRL_SCRIPT = "cleanrl/dqn_atari.py"
KERNELS = ("aten::mkldnn_convolution", "aten::convolution_backward", "aten::addmm", "aten::mm", "aten::thnn_conv2d",
           "aten::_convolution", "aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward")
# ours and SB3 in a child process: the functions below, then their figures as the last line of output
SIDE_RUNNER = """
import json, sys
sys.path.insert(0, {bench!r})
import speed_dqn_atari as s
a = s.SpeedArgs(**json.loads({args!r}))
print(json.dumps(s.{fn}(a, {threads}{extra})))
"""
# CleanRL's script, unmodified, in its own Python: the first vector-env reset marks the start of its loop
CLEANRL_RUNNER = """
import json, runpy, sys, time
import gymnasium as gym
start = []
reset = gym.vector.SyncVectorEnv.reset
def first_reset(self, *args, **kwargs):
    start.append(time.process_time())
    return reset(self, *args, **kwargs)
gym.vector.SyncVectorEnv.reset = first_reset
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print(json.dumps({"loop_cpu_seconds": time.process_time() - start[0]}))
"""


@dataclass
class SpeedArgs:
    total_timesteps: int = 12_000
    """env steps per run"""
    learning_starts: int = 2_000
    """env steps before learning"""
    seed: int = 1
    repeats: int = 2
    """runs of each side, alternating"""
    threads: tuple[int, ...] = (1, 2)
    """torch thread counts to measure, for every side"""
    sb3: bool = True
    """time Stable-Baselines3 (--no-sb3: skip it, and ours with its settings)"""
    cleanrl: Optional[str] = None
    """a CleanRL checkout: also time its cleanrl/dqn_atari.py (and ours with its settings)"""
    cleanrl_python: str = "python3"
    """the Python of CleanRL's environment (gymnasium 0.29, ale-py 0.8, opencv, stable-baselines3, tyro, tensorboard)"""
    profile: bool = False
    """one more run of ours and SB3 under the torch profiler: the conv net's kernels' share of the time"""
    out: str = "benchmarks/results/speed/speed_dqn_atari_raw.json"
    """where to write the figures"""


def ours(a: SpeedArgs, threads: int, loss: str = "huber") -> dict:
    """One run of algos/dqn.py in this process; `loss` "huber": SB3's loss and clipping, "mse": CleanRL's."""
    import dqn

    start = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        s = dqn.train(dqn.Args(
            env_id=ENV, seed=a.seed, total_timesteps=a.total_timesteps, torch_threads=threads, learning_starts=a.learning_starts,
            buffer_size=a.total_timesteps, batch_size=32, learning_rate=1e-4, train_every=4, target_every=1_000,
            end_epsilon=0.01, exploration_fraction=0.1, loss=loss, clip_grad_norm=10.0 if loss == "huber" else None,
            double_dqn=False, anneal_lr=False, eval_episodes=1, eval_max_frames=400, run_dir=tmp, progress=False))
    return {"loop_cpu_seconds": time.process_time() - start, "sps": s["sps"]}  # sps: training only, wall time


def sb3(a: SpeedArgs, threads: int) -> dict:
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)  # gymnasium 1.x finds ALE's ids only once registered
    torch.set_num_threads(threads)
    env = VecFrameStack(make_atari_env(ENV, n_envs=1, seed=a.seed), n_stack=4)
    model = DQN("CnnPolicy", env, learning_rate=1e-4, buffer_size=a.total_timesteps, learning_starts=a.learning_starts,
                batch_size=32, tau=1.0, gamma=0.99, train_freq=4, gradient_steps=1, target_update_interval=1_000,
                exploration_fraction=0.1, exploration_initial_eps=1.0, exploration_final_eps=0.01, max_grad_norm=10,
                optimize_memory_usage=False, seed=a.seed, device="cpu", verbose=0)
    start, wall = time.process_time(), time.perf_counter()
    model.learn(total_timesteps=a.total_timesteps)
    return {"loop_cpu_seconds": time.process_time() - start, "sps": a.total_timesteps / (time.perf_counter() - wall)}


def child(side: str, a: SpeedArgs, threads: int) -> dict:
    """One run of `side` in a fresh process: CPU seconds (whole process and training loop) and wall seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    settings = json.dumps({k: v for k, v in vars(a).items() if k in ("total_timesteps", "learning_starts", "seed")})
    if side == "cleanrl":
        checkout = Path(a.cleanrl).resolve()
        env["PYTHONPATH"] = str(checkout)
        cmd = [a.cleanrl_python, "-c", CLEANRL_RUNNER, str(checkout / CLEANRL_SCRIPT), "--env-id", ENV, "--seed", str(a.seed),
               "--total-timesteps", str(a.total_timesteps), "--learning-starts", str(a.learning_starts),
               "--buffer-size", str(a.total_timesteps), "--learning-rate", "1e-4", "--batch-size", "32", "--train-frequency", "4",
               "--target-network-frequency", "1000", "--start-e", "1", "--end-e", "0.01", "--exploration-fraction", "0.1",
               "--no-cuda"]
    else:
        fn, extra = {"ours": ("ours", ""), "ours-mse": ("ours", ", 'mse'"), "sb3": ("sb3", "")}[side]
        code = SIDE_RUNNER.format(bench=str(ROOT / "benchmarks"), args=settings, fn=fn, threads=threads, extra=extra)
        cmd = [sys.executable, "-c", code]
    with tempfile.TemporaryDirectory() as tmp:  # CleanRL writes runs/ into its working directory
        done, cpu, wall = run_timed(cmd, tmp, env, side)
    loop = json.loads(done.stdout.strip().splitlines()[-1])["loop_cpu_seconds"]
    return {"cpu_seconds": round(cpu, 1), "loop_cpu_seconds": round(loop, 1), "wall_seconds": round(wall, 1),
            "sps_cpu": round(a.total_timesteps / cpu, 1), "loop_sps_cpu": round(a.total_timesteps / loop, 1)}


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


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def main(a: SpeedArgs) -> None:
    if a.cleanrl and not (Path(a.cleanrl) / CLEANRL_SCRIPT).is_file():
        raise SystemExit(f"--cleanrl {a.cleanrl} is not a CleanRL checkout (no {CLEANRL_SCRIPT} in it)")
    pairs = ([("ours", "sb3")] if a.sb3 else []) + ([("ours-mse", "cleanrl")] if a.cleanrl else [])
    if not pairs:
        raise SystemExit("nothing to compare: give --cleanrl, or leave out --no-sb3")
    sides = [s for pair in pairs for s in pair]
    print(f"DQN {ENV}, {a.total_timesteps:,} steps, learning from {a.learning_starts:,}; sides {', '.join(sides)}; "
          f"threads {', '.join(map(str, a.threads))}; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    results, lines = {}, []
    for threads in a.threads:
        runs = {s: [] for s in sides}
        for r in range(a.repeats):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                res = child(side, a, threads)
                runs[side].append(res)
                print(f"run {r + 1}/{a.repeats} {threads} thread(s) {side:>8}: {res['sps_cpu']:6.1f} steps per CPU second "
                      f"({res['cpu_seconds']} s CPU; training loop {res['loop_cpu_seconds']} s, {res['loop_sps_cpu']} steps/s; "
                      f"{res['wall_seconds']} s wall)", flush=True)
        results[threads] = {"runs": runs}
        for o, p in pairs:
            ratios = [x["sps_cpu"] / y["sps_cpu"] for x, y in zip(runs[o], runs[p])]
            loop = [x["loop_sps_cpu"] / y["loop_sps_cpu"] for x, y in zip(runs[o], runs[p])]
            results[threads][f"{o}/{p}"] = [round(x, 2) for x in ratios]
            results[threads][f"{o}/{p} training loop"] = [round(x, 2) for x in loop]
            mean = {s: sum(x["sps_cpu"] for x in runs[s]) / len(runs[s]) for s in (o, p)}
            lines.append(f"{threads} thread(s): ratio {o}/{p} (steps per CPU second, per repeat): median {median(ratios):.2f}x "
                         f"[{min(ratios):.2f}, {max(ratios):.2f}]; {o} {mean[o]:.1f}, {p} {mean[p]:.1f} steps per CPU second; "
                         f"training loop alone {median(loop):.2f}")
    print()
    for line in lines:
        print(line, flush=True)
    profiles = {}
    if a.profile:
        for name, fn in (("ours", ours), ("sb3", sb3)):
            profiles[name] = kernel_share(fn, a)
            p = profiles[name]
            print(f"profile {name}: {p['wall_seconds']} s, of which the conv net's kernels {p['kernel_seconds']} s "
                  f"({100 * p['kernel_share']:.0f}%); top ops {p['top_ops'][:5]}", flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(a), "results": results, "summary": lines, "profiles": profiles,
                               "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                               "code": code_state()}, indent=2))


if __name__ == "__main__":
    main(tyro.cli(SpeedArgs))
