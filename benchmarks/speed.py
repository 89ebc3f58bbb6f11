"""Speed against the peers: every comparison of ours with a peer's implementation, one tool.

    python benchmarks/speed.py                      # dqn, a2c, ddpg, dqn-atari: logs and ratios to benchmarks/results/speed/
    python benchmarks/speed.py --only dqn a2c       # some of them
    python benchmarks/speed.py --quick              # tiny budgets (~30 s): checks the plumbing, not the speed
    python benchmarks/speed.py --only ddpg --cleanrl ~/cleanrl --cleanrl-python ~/venv-cleanrl/bin/python
    python benchmarks/speed.py dqn --total-timesteps 500000                 # one comparison, its own flags
    python benchmarks/speed.py minatar --peer PATH/dqn.py --frames 105000 --repeats 2
    python benchmarks/speed.py devices --steps 20000 --out benchmarks/results/speed/speed_devices_raw.json

Each comparison is a row of COMPARISONS. The sides alternate (in an order rotated per repeat) so
that a slow spell on a shared machine hits all of them; only the ratio within one invocation means
anything. Alone, the tool runs the collected ones one after another (never in parallel) into
<out>/<name>.log and <out>/<name>.json, which every report shows.

Peers that are not this project's (CleanRL's scripts, MinAtar's examples/dqn.py) run unmodified
from a checkout given by path, in their own Python where they need one. CleanRL needs gymnasium 0.29:
    git clone https://github.com/vwxyzjn/cleanrl ~/cleanrl && python3 -m venv ~/venv-cleanrl
    ~/venv-cleanrl/bin/pip install torch==2.13.0 gymnasium==0.29.1 stable-baselines3==2.3.2 tyro tensorboard \\
        jax jaxlib flax optax "shimmy[atari]<1" ale-py==0.8.1 opencv-python-headless   # then ale-import-roms DIR
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import importlib
import json
import os
import platform
import re
import shutil
from statistics import median
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT), str(ROOT / "algos")]
from cli import cli_flags  # noqa: E402
from provenance import code_state  # noqa: E402
from suite import load_suite, metrics_file  # noqa: E402

RAW = "benchmarks/results/speed/"
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                  "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
CLEANRL = {"cleanrl-torch": "cleanrl/ddpg_continuous_action.py", "cleanrl-jax": "cleanrl/ddpg_continuous_action_jax.py",
           "cleanrl": "cleanrl/dqn_atari.py"}
ATARI = "BreakoutNoFrameskip-v4"

# ---- the comparisons as data --------------------------------------------------------------------
COMPARISONS = {
    "dqn": dict(
        what="DQN, CartPole-v1, CleanRL's DQN settings (lr 2.5e-4, buffer 10k, batch 128, learning from 10k, train every 10, "
             "target copy every 500, epsilon 1 -> 0.05 over half the run, [120, 84], MSE (SB3: Huber, grad norm 10))",
        sides={"ours": "algos/dqn.py train() in this process", "sb3": "stable_baselines3.DQN.learn()"},
        timing="in process, sides alternating; `--threads` torch threads for both",
        figure="env steps/s of the training loop (ours: summary sps; SB3: learn()); ratio of the means",
        defaults=dict(total_timesteps=500_000, learning_starts=10_000, repeats=1, threads=["1"], out="benchmarks/results/speed_dqn.json"),
        full=["--total-timesteps", "500000", "--out", "{dir}/speed_dqn_raw.json"],
        quick=["--total-timesteps", "3000", "--learning-starts", "1000", "--out", "{dir}/speed_dqn_raw.json"]),
    "a2c": dict(
        what="A2C, CartPole-v1, 8 envs, n_steps 5, separate [64, 64] tanh actor and critic, RMSprop 7e-4 (alpha 0.99, eps 1e-5), "
             "gamma 0.99, full-rollout returns, value coef 0.5, no entropy, grad norm 0.5, CPU, 1 thread",
        sides={"ours": "algos/a2c.py train()", "sb3": "stable_baselines3.A2C.learn()"},
        timing="in process, sides alternating, one torch thread",
        figure="env steps/s (ours: summary sps, env reset to last update; SB3: learn()); ratio of the medians",
        defaults=dict(total_timesteps=100_000, repeats=2, threads=["1"]),
        full=["--total-timesteps", "100000", "--repeats", "2"], quick=["--total-timesteps", "2000", "--repeats", "1"]),
    "ddpg": dict(
        what="DDPG, Pendulum-v1, CleanRL's settings (uniform actions for 5k steps, batch 256, [256, 256], Adam 3e-4, tau 0.005, "
             "Gaussian noise 0.1, actor and targets every 2 critic updates; SB3: policy_delay 2); NAF timed beside, same schedule",
        sides={"ours": "algos/ddpg.py", "naf": "algos/naf.py", "sb3": "stable_baselines3.DDPG",
               "cleanrl-torch": CLEANRL["cleanrl-torch"], "cleanrl-jax": CLEANRL["cleanrl-jax"]},
        timing="each run a fresh process timed from start to exit (imports, JAX's compile, training, ours' final evaluation); "
               "`--threads` 1: pinned to one core (taskset), one thread everywhere; n: n threads; default: no setting at all",
        figure="wall seconds per run; ratio their wall / ours per repeat, median [min, max]",
        defaults=dict(total_timesteps=20_000, learning_starts=5_000, repeats=3, threads=["1", "2", "default"]),
        full=["--repeats", "2", "--threads", "1", "default", "--out", "{dir}/speed_ddpg_raw.json"],
        quick=["--repeats", "1", "--threads", "1", "--total-timesteps", "600", "--learning-starts", "300",
               "--out", "{dir}/speed_ddpg_raw.json"]),
    "dqn-atari": dict(
        what=f"DQN, {ATARI}, the DQN paper's preprocessing and Nature net, CleanRL's Atari settings (Adam 1e-4, batch 32, "
             "train every 4, target every 1,000, epsilon 1 -> 0.01 over 10%), memory sized to the run; ours with SB3's loss "
             "(Huber, clip 10) against SB3, with CleanRL's (MSE, no clip) against CleanRL",
        sides={"ours": "algos/dqn.py, Huber", "sb3": "stable_baselines3.DQN", "ours-mse": "algos/dqn.py, MSE",
               "cleanrl": CLEANRL["cleanrl"]},
        timing="each run a fresh process; OMP/MKL threads and torch threads n per `--threads`; CPU time (user + system, "
               "os.wait4) of the whole process and of the training loop alone",
        figure="env steps per CPU second; ratio ours/peer per repeat (whole process); `--profile`: the conv net's kernels' share",
        defaults=dict(total_timesteps=12_000, learning_starts=2_000, repeats=2, threads=["1", "2"], out=RAW + "speed_dqn_atari_raw.json"),
        full=["--total-timesteps", "12000", "--repeats", "2", "--threads", "1", "2", "--profile", "--out", "{dir}/speed_dqn_atari_raw.json"],
        quick=["--total-timesteps", "400", "--learning-starts", "200", "--repeats", "1", "--threads", "1",
               "--out", "{dir}/speed_dqn_atari_raw.json"]),
    "minatar": dict(
        what="DQN, MinAtar, the minatar_paper suite's settings, which are MinAtar's examples/dqn.py's (-v0 ids, sticky 0.1, "
             "batch 32, 100k memory, learning from 5,000 every step, target every 1,000, epsilon 1 -> 0.1 over 100k steps, "
             "Huber, centered RMSprop 2.5e-4); the peer (GPL-3.0, give its path) with its NUM_FRAMES set",
        sides={"ours": "python algos/dqn.py with the cell's flags", "peer": "MinAtar's examples/dqn.py"},
        timing="child processes with one torch thread, alternating or (`--parallel`) both at once; CPU time from os.wait4",
        figure="frames per CPU second, ratio ours/peer per repeat; last-100 training return and its curve (`--plot`)",
        defaults=dict(total_timesteps=105_000, repeats=2, out=RAW + "speed_minatar_raw.json"), full=None, quick=None),
    "devices": dict(
        what="each script at suite cells' settings on the GPU against the CPU of the same machine, learning_starts cut to a "
             "quarter of the steps",
        sides={"cpu": "algos/<algo>.py --device cpu", "cuda": "algos/<algo>.py --device cuda"},
        timing="child processes, one torch thread; CPU runs at once (a core each) beside the GPU runs one after another where "
               "the machine has the cores, else one at a time",
        figure="env steps per wall second while learning: between the first and last metrics.csv row past learning_starts",
        defaults=dict(total_timesteps=12_000, threads=["1"]), full=None, quick=None),
}
COLLECTED = [n for n, c in COMPARISONS.items() if c["full"]]  # what `speed.py` alone runs, into every report
DEFAULT_CELLS = ["classic:dqn:CartPole-v1", "minatar_paper:dqn:MinAtar/Breakout-v0", "atari_cpu:dqn:BreakoutNoFrameskip-v4",
                 "mujoco:ddpg:HalfCheetah-v5", "mujoco:naf:HalfCheetah-v5", "mujoco:a2c:HalfCheetah-v5"]


class BadInput(Exception):
    """A wrong flag value: one line, exit 2."""


# ---- the sides: each run of ours or a peer, in this process --------------------------------------
def dqn_side(side: str, o) -> dict:
    import gymnasium as gym
    import torch

    if side == "ours":
        import dqn

        s = dqn.train(dqn.Args(seed=o.seed, total_timesteps=o.total_timesteps, torch_threads=o.threads, learning_starts=o.learning_starts,
                               buffer_size=10_000, double_dqn=False, anneal_lr=False,  # CleanRL's (our defaults differ)
                               run_dir="/tmp/speed_runs", progress=False))
        return {"sps": s["sps"], "wall_seconds": s["wall_seconds"], "eval_return_mean": s["eval_return_mean"]}
    from stable_baselines3 import DQN
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(o.threads)
    model = DQN("MlpPolicy", gym.make("CartPole-v1"), learning_rate=2.5e-4, buffer_size=10_000, learning_starts=o.learning_starts,
                batch_size=128, tau=1.0, gamma=0.99, train_freq=10, gradient_steps=1, target_update_interval=500,
                exploration_fraction=0.5, exploration_initial_eps=1.0, exploration_final_eps=0.05, max_grad_norm=10,
                policy_kwargs=dict(net_arch=[120, 84]), seed=o.seed, device="cpu", verbose=0)
    seconds = learn_seconds(model, o.total_timesteps)
    mean, _ = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10, deterministic=True)
    return {"sps": round(o.total_timesteps / seconds, 1), "wall_seconds": round(seconds, 2), "eval_return_mean": float(mean)}


def a2c_side(side: str, o, seed: int) -> float:
    import torch

    if side == "ours":
        from a2c import Args, train

        with tempfile.TemporaryDirectory() as run_dir:
            return train(Args(env_id="CartPole-v1", seed=seed, total_timesteps=o.total_timesteps, num_envs=8, n_steps=5, device="cpu",
                              torch_threads=1, run_dir=run_dir, progress=False, eval_episodes=1, learning_rate=7e-4, optimizer="rmsprop",
                              rmsprop_alpha=0.99, optimizer_eps=1e-5, gamma=0.99, value_coef=0.5, entropy_coef=0.0, clip_grad_norm=0.5,
                              hidden_sizes=(64, 64), activation="tanh"))["sps"]
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    envs = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = A2C("MlpPolicy", envs, learning_rate=7e-4, n_steps=5, gamma=0.99, gae_lambda=1.0, ent_coef=0.0, vf_coef=0.5,
                max_grad_norm=0.5, rms_prop_eps=1e-5, use_rms_prop=True, normalize_advantage=False, device="cpu", seed=seed, verbose=0,
                policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh, ortho_init=True))
    seconds = learn_seconds(model, o.total_timesteps)
    envs.close()
    return model.num_timesteps / seconds


def ddpg_side(side: str, o) -> dict:
    """One run of ours, NAF or SB3 (a child process of the driver, which times the whole process)."""
    threads = o.side_threads
    with tempfile.TemporaryDirectory() as tmp:
        if side in ("ours", "naf"):
            import ddpg
            import naf

            common = dict(env_id="Pendulum-v1", seed=o.seed, total_timesteps=o.total_timesteps, learning_starts=o.learning_starts,
                          batch_size=256, hidden_sizes=(256, 256), device="cpu", run_dir=tmp, progress=False)
            if threads is not None:
                common["torch_threads"] = threads
            summary = (ddpg.train(ddpg.Args(**common, actor_learning_rate=3e-4, critic_learning_rate=3e-4, target_rate=0.005, gamma=0.99,
                                            noise="gaussian", noise_std=0.1, policy_every=2, buffer_size=1_000_000))
                       if side == "ours" else naf.train(naf.Args(**common)))  # NAF's own defaults for everything else
            return {"train_sps": summary["sps"], "eval": summary["eval_return_mean"]}
        import gymnasium as gym
        import numpy as np
        import torch
        from stable_baselines3 import DDPG
        from stable_baselines3.common.noise import NormalActionNoise

        if threads is not None:
            torch.set_num_threads(threads)
        env = gym.make("Pendulum-v1")
        high = env.action_space.high
        model = DDPG("MlpPolicy", env, learning_rate=3e-4, buffer_size=1_000_000, learning_starts=o.learning_starts, batch_size=256,
                     tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, policy_kwargs=dict(net_arch=[256, 256]),
                     action_noise=NormalActionNoise(np.zeros_like(high), 0.1 * high), seed=o.seed, device="cpu", verbose=0)
        model.policy_delay = 2  # actor (and targets) every 2 critic updates, as CleanRL's DDPG
        return {"train_sps": o.total_timesteps / learn_seconds(model, o.total_timesteps)}


def atari_side(side: str, o, threads: int) -> dict:
    """One run of ours (`ours`: SB3's Huber loss and clipping; `ours-mse`: CleanRL's) or SB3: CPU seconds of its loop."""
    import torch

    start = time.process_time()
    if side.startswith("ours"):
        import dqn

        huber = side == "ours"
        with tempfile.TemporaryDirectory() as tmp:
            s = dqn.train(dqn.Args(
                env_id=ATARI, seed=o.seed, total_timesteps=o.total_timesteps, torch_threads=threads, learning_starts=o.learning_starts,
                buffer_size=o.total_timesteps, batch_size=32, learning_rate=1e-4, train_every=4, target_every=1_000, end_epsilon=0.01,
                exploration_fraction=0.1, loss="huber" if huber else "mse", clip_grad_norm=10.0 if huber else None, double_dqn=False,
                anneal_lr=False, eval_episodes=1, eval_max_frames=400, run_dir=tmp, progress=False))
        return {"loop_cpu_seconds": time.process_time() - start, "sps": s["sps"]}  # sps: training only, wall time
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)  # gymnasium 1.x finds ALE's ids only once registered
    torch.set_num_threads(threads)
    env = VecFrameStack(make_atari_env(ATARI, n_envs=1, seed=o.seed), n_stack=4)
    model = DQN("CnnPolicy", env, learning_rate=1e-4, buffer_size=o.total_timesteps, learning_starts=o.learning_starts, batch_size=32,
                tau=1.0, gamma=0.99, train_freq=4, gradient_steps=1, target_update_interval=1_000, exploration_fraction=0.1,
                exploration_initial_eps=1.0, exploration_final_eps=0.01, max_grad_norm=10, optimize_memory_usage=False, seed=o.seed,
                device="cpu", verbose=0)
    start = time.process_time()
    wall = learn_seconds(model, o.total_timesteps)
    return {"loop_cpu_seconds": time.process_time() - start, "sps": o.total_timesteps / wall}


# CleanRL's Atari script, unmodified, in its own Python: the first vector-env reset marks the start of its loop
CLEANRL_LOOP = """
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
# MinAtar's examples/dqn.py, unmodified, with its frame budget (a module constant) set before its main()
MINATAR_PEER = """
import sys, torch
torch.set_num_threads(1)
sys.path.insert(0, {folder!r})
sys.argv = ["dqn.py", "--game", {game!r}, "--output", {output!r}]
import dqn
dqn.NUM_FRAMES = {frames}
dqn.main()
"""


# ---- timing: a side in this process (wall seconds of learn()), or a child process (CPU and wall seconds) ----
def learn_seconds(model, steps: int) -> float:
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return time.perf_counter() - start


def run_timed(cmd: list[str], cwd: str, env: dict, label: str | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd` to completion; (the finished process, CPU seconds, wall seconds). With a label, a failure exits
    with its stderr's tail. The CPU time is this child's own (os.wait4's resource usage of that process), so two
    children timed at once from two threads each get their own; CPU time is what a busy machine disturbs least."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
    if done.returncode != 0 and label:
        raise SystemExit(f"{label} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done, usage.ru_utime + usage.ru_stime, wall


def side_cmd(side: str, o, seed: int, **extra) -> list[str]:
    """This tool run as one side in a fresh process (`--side`): it prints the side's figures as its last line."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in extra.items() if v is not None]
    return [sys.executable, str(Path(__file__).resolve()), o.comparison, "--side", side, "--seed", str(seed),
            "--total-timesteps", str(o.total_timesteps), "--learning-starts", str(o.learning_starts), *flags]


def rotated(sides: list, r: int) -> list:
    return sides[r % len(sides):] + sides[:r % len(sides)]


def write(path: str | None, record: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=2))


def machine(**extra) -> dict:
    import torch

    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__, **extra}


# ---- each comparison's driver --------------------------------------------------------------------
def compare_in_process(o) -> int:
    """dqn and a2c: ours and SB3 alternating in this process."""
    import torch

    dqn, o.threads = o.comparison == "dqn", int(o.threads[0])
    results = {"ours": [], "sb3": []}
    for r in range(o.repeats):
        for name in results:
            if dqn:
                res = dqn_side(name, o)
                print(f"run {r + 1}/{o.repeats} {name:>4}: {res['sps']:>8,.0f} steps/s  {res['wall_seconds']:7.1f} s  "
                      f"eval {res['eval_return_mean']:.1f}", flush=True)
            else:
                res = a2c_side(name, o, o.seed + r)
                print(f"repeat {r + 1}: {name:4} {res:,.0f} steps/s", flush=True)
            results[name].append(res)
    if not dqn:
        med = {k: median(v) for k, v in results.items()}
        print(f"\nA2C CartPole-v1, 8 envs, n_steps 5, {o.total_timesteps:,} steps x {o.repeats} (torch {torch.__version__})")
        for k, v in results.items():
            print(f"{k:>5}: median {med[k]:8,.0f} steps/s  runs {', '.join(f'{x:,.0f}' for x in v)}")
        print(f"ratio ours/sb3: {med['ours'] / med['sb3']:.2f}x")
        return 0
    mean = {k: sum(x["sps"] for x in v) / len(v) for k, v in results.items()}
    ratio = mean["ours"] / mean["sb3"]
    print(f"DQN CartPole-v1 {o.total_timesteps:,} steps, {o.threads} torch thread(s): ours {mean['ours']:,.0f} steps/s, "
          f"SB3 {mean['sb3']:,.0f} steps/s, ratio {ratio:.2f}x")
    settings = {k: getattr(o, k) for k in ("total_timesteps", "seed", "repeats", "threads", "learning_starts", "out")}
    write(o.out, {"settings": settings, "results": results, "mean_sps": mean, "ratio": ratio, "torch": torch.__version__})
    return 0


def compare_ddpg(o) -> int:
    for s in o.threads:
        if s != "default" and not (s.isdigit() and int(s) > 0):
            raise BadInput(f"--threads takes positive numbers or 'default', got {s!r}")
    if "1" in o.threads and shutil.which("taskset") is None:
        raise BadInput("the 1-thread setting pins processes with taskset, which is not installed")
    sides = ["ours"] + (["cleanrl-torch", "cleanrl-jax"] if o.cleanrl else []) + ([] if o.no_sb3 else ["sb3"]) + ([] if o.no_naf else ["naf"])
    print(f"DDPG, Pendulum-v1, {o.total_timesteps:,} steps, learning from {o.learning_starts:,}, batch 256, [256, 256], actor every 2; "
          f"{os.cpu_count()} cores; sides {', '.join(sides)}; settings {', '.join(o.threads)}", flush=True)
    records = []
    for k in range(o.repeats):
        seed = o.seed + k
        for setting in o.threads:
            env = (ONE_THREAD_ENV if setting == "1" else {} if setting == "default"
                   else {"OMP_NUM_THREADS": setting, "MKL_NUM_THREADS": setting})
            pin = ["taskset", "-c", "0"] if setting == "1" else []
            for side in rotated(sides, k):
                if side in CLEANRL:
                    argv = [o.cleanrl_python, str(Path(o.cleanrl).resolve() / CLEANRL[side]), "--env-id", "Pendulum-v1", "--seed", str(seed),
                            "--total-timesteps", str(o.total_timesteps), "--learning-starts", str(o.learning_starts)]
                    extra = {**env, "PYTHONPATH": str(Path(o.cleanrl).resolve())}
                else:
                    argv, extra = side_cmd(side, o, seed, side_threads=None if setting == "default" else int(setting)), env
                with tempfile.TemporaryDirectory() as tmp:  # CleanRL writes runs/ into its working directory
                    proc, _, wall = run_timed(pin + argv, tmp if side in CLEANRL else ROOT, {**os.environ, **extra})
                r = {"side": side, "seed": seed, "setting": setting, "wall_s": round(wall, 2), "returncode": proc.returncode}
                if proc.returncode != 0:
                    r["error"] = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
                elif side not in CLEANRL:
                    r.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                records.append(r)
                figs = (f"  train {r['train_sps']:.0f} steps/s" if "train_sps" in r else "") + (f"  eval {r['eval']:.1f}" if "eval" in r else "")
                status = "" if r["returncode"] == 0 else f"  FAILED ({r['returncode']}): {r.get('error', '')}"
                print(f"run  {side:14s} seed {seed} threads {setting:7s}: {r['wall_s']:6.1f} s{figs}{status}", flush=True)
    write(o.out, {"steps": o.total_timesteps, "learning_starts": o.learning_starts, "records": records})
    print()
    for setting in o.threads:
        rows = [r for r in records if r["setting"] == setting and r["returncode"] == 0]
        if not rows:
            continue
        print({"1": "1 thread, pinned to one core", "default": "every script's defaults"}.get(setting, f"{setting} threads") + ":")
        for side in sides:
            walls = [r["wall_s"] for r in rows if r["side"] == side]
            if walls:
                print(f"  {side:14s} wall s per run: median {median(walls):6.1f}  [{min(walls):.1f}, {max(walls):.1f}]  "
                      f"({o.total_timesteps / median(walls):.0f} env steps/s over the whole process)")
        ours = {r["seed"]: r["wall_s"] for r in rows if r["side"] == "ours"}
        for side in [s for s in sides if s not in ("ours", "naf")]:
            ratios = [r["wall_s"] / ours[r["seed"]] for r in rows if r["side"] == side and r["seed"] in ours]
            if ratios:
                print(f"  ratio ours vs {side:14s} (their wall / ours, per repeat): median {median(ratios):.2f}x "
                      f"[{min(ratios):.2f}, {max(ratios):.2f}] over {len(ratios)}")
    return 1 if any(r["returncode"] != 0 for r in records) else 0


KERNELS = ("aten::mkldnn_convolution", "aten::convolution_backward", "aten::addmm", "aten::mm", "aten::thnn_conv2d",
           "aten::_convolution", "aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward")


def compare_dqn_atari(o) -> int:
    import torch

    if o.cleanrl and not (Path(o.cleanrl) / CLEANRL["cleanrl"]).is_file():
        raise BadInput(f"--cleanrl {o.cleanrl} is not a CleanRL checkout (no {CLEANRL['cleanrl']} in it)")
    pairs = ([] if o.no_sb3 else [("ours", "sb3")]) + ([("ours-mse", "cleanrl")] if o.cleanrl else [])
    if not pairs:
        raise BadInput("nothing to compare: give --cleanrl, or leave out --no-sb3")
    sides, threads_list = [s for pair in pairs for s in pair], [int(t) for t in o.threads]
    print(f"DQN {ATARI}, {o.total_timesteps:,} steps, learning from {o.learning_starts:,}; sides {', '.join(sides)}; "
          f"threads {', '.join(o.threads)}; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    results, lines = {}, []
    for threads in threads_list:
        runs = {s: [] for s in sides}
        for r in range(o.repeats):
            for side in rotated(sides, r):
                env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
                if side == "cleanrl":
                    env["PYTHONPATH"] = str(Path(o.cleanrl).resolve())
                    cmd = [o.cleanrl_python, "-c", CLEANRL_LOOP, str(Path(o.cleanrl).resolve() / CLEANRL["cleanrl"]), "--env-id", ATARI,
                           "--seed", str(o.seed), "--total-timesteps", str(o.total_timesteps), "--learning-starts", str(o.learning_starts),
                           "--buffer-size", str(o.total_timesteps), "--learning-rate", "1e-4", "--batch-size", "32", "--train-frequency", "4",
                           "--target-network-frequency", "1000", "--start-e", "1", "--end-e", "0.01", "--exploration-fraction", "0.1", "--no-cuda"]
                else:
                    cmd = side_cmd(side, o, o.seed, side_threads=threads)
                with tempfile.TemporaryDirectory() as tmp:  # CleanRL writes runs/ into its working directory
                    done, cpu, wall = run_timed(cmd, tmp, env, side)
                loop = json.loads(done.stdout.strip().splitlines()[-1])["loop_cpu_seconds"]
                res = {"cpu_seconds": round(cpu, 1), "loop_cpu_seconds": round(loop, 1), "wall_seconds": round(wall, 1),
                       "sps_cpu": round(o.total_timesteps / cpu, 1), "loop_sps_cpu": round(o.total_timesteps / loop, 1)}
                runs[side].append(res)
                print(f"run {r + 1}/{o.repeats} {threads} thread(s) {side:>8}: {res['sps_cpu']:6.1f} steps per CPU second "
                      f"({res['cpu_seconds']} s CPU; training loop {res['loop_cpu_seconds']} s, {res['loop_sps_cpu']} steps/s; "
                      f"{res['wall_seconds']} s wall)", flush=True)
        results[threads] = {"runs": runs}
        for a, b in pairs:
            ratios = [x["sps_cpu"] / y["sps_cpu"] for x, y in zip(runs[a], runs[b])]
            loop = [x["loop_sps_cpu"] / y["loop_sps_cpu"] for x, y in zip(runs[a], runs[b])]
            results[threads][f"{a}/{b}"] = [round(x, 2) for x in ratios]
            results[threads][f"{a}/{b} training loop"] = [round(x, 2) for x in loop]
            mean = {s: sum(x["sps_cpu"] for x in runs[s]) / len(runs[s]) for s in (a, b)}
            lines.append(f"{threads} thread(s): ratio {a}/{b} (steps per CPU second, per repeat): median {median(ratios):.2f}x "
                         f"[{min(ratios):.2f}, {max(ratios):.2f}]; {a} {mean[a]:.1f}, {b} {mean[b]:.1f} steps per CPU second; "
                         f"training loop alone {median(loop):.2f}")
    print("\n" + "\n".join(lines), flush=True)
    profiles = {}
    if o.profile:  # one more run of ours and SB3 under the torch profiler: the conv net's kernels' share of the time
        from torch.profiler import ProfilerActivity, profile

        for name in ("ours", "sb3"):
            start = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                atari_side(name, o, 1)
            wall, events = time.perf_counter() - start, prof.key_averages()
            kernels = sum(e.self_cpu_time_total for e in events if e.key in KERNELS) / 1e6
            top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
            p = profiles[name] = {"wall_seconds": round(wall, 1), "kernel_seconds": round(kernels, 1), "kernel_share": round(kernels / wall, 3),
                                  "top_ops": [(e.key, round(e.self_cpu_time_total / 1e6, 2)) for e in top]}
            print(f"profile {name}: {p['wall_seconds']} s, of which the conv net's kernels {p['kernel_seconds']} s "
                  f"({100 * p['kernel_share']:.0f}%); top ops {p['top_ops'][:5]}", flush=True)
    settings = {"total_timesteps": o.total_timesteps, "learning_starts": o.learning_starts, "seed": o.seed, "repeats": o.repeats,
                "threads": threads_list, "sb3": not o.no_sb3, "cleanrl": o.cleanrl, "cleanrl_python": o.cleanrl_python,
                "profile": o.profile, "out": o.out}
    write(o.out, {"settings": settings, "results": results, "summary": lines, "profiles": profiles, "torch": torch.__version__,
                  "date": time.strftime("%Y-%m-%d"), "code": code_state()})
    return 0


def curve(frames: list[int], returns: list[float], total: int, points: int = 100) -> list[list[float]]:
    """The MinAtar figure's convention as a curve: at every `total / points` frames, the mean of the last 100
    training episodes finished by then; [[frame, mean], ...], from the first point with an episode."""
    out, k = [], 0
    for i in range(1, points + 1):
        at = total * i // points
        while k < len(frames) and frames[k] <= at:
            k += 1
        if k:
            out.append([at, round(sum(returns[max(0, k - 100):k]) / min(k, 100), 3)])
    return out


def minatar_side(side: str, o, scratch: Path) -> dict:
    """One run of ours or the peer as a child process: its times, episodes, final last-100 return and curve."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if side == "ours":
        env_id = "MinAtar/" + "".join(w.capitalize() for w in o.game.split("_")) + "-v0"
        settings = dict(next(c.settings for c in load_suite("minatar_paper").cells if c.env == env_id))
        settings["exploration_fraction"] = min(1.0, 100_000 / o.total_timesteps)  # the peer's 100k steps of decay
        run_dir = scratch / "ours"
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [sys.executable, str(ROOT / "algos" / "dqn.py"), "--env", env_id, "--seed", str(o.seed), "--total-timesteps",
               str(o.total_timesteps), "--torch-threads", "1", "--eval-episodes", "1", "--no-progress", "--run-dir", str(run_dir),
               *cli_flags(settings)]
        _, cpu, wall = run_timed(cmd, str(ROOT), env, str(cmd[:3]))
        with open(metrics_file(run_dir)) as f:
            rows = [r for r in csv.DictReader(f) if r["episodic_return"]]
        returns, frames = [float(r["episodic_return"]) for r in rows], [int(r["global_step"]) for r in rows]
    else:
        import torch

        output = str(scratch / "peer")
        code = MINATAR_PEER.format(folder=str(Path(o.peer).resolve().parent), game=o.game, output=output, frames=o.total_timesteps)
        cmd = [sys.executable, "-c", code]
        _, cpu, wall = run_timed(cmd, str(scratch), env, str(cmd[:3]))
        data = torch.load(output + "_data_and_weights", weights_only=False)
        returns, frames = [float(x) for x in data["returns"]], [int(x) for x in data["frame_stamps"]]
    return {"cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "episodes": len(returns),
            "last_100": sum(returns[-100:]) / len(returns[-100:]) if returns else None, "curve": curve(frames, returns, o.total_timesteps)}


def compare_minatar(o) -> int:
    import torch

    if not Path(o.peer).is_file():
        raise BadInput(f"no peer at {o.peer}: give the path of MinAtar's examples/dqn.py with --peer")
    runs = {"ours": [], "peer": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(o.repeats):
            if o.parallel:  # each child is timed by its own CPU time (os.wait4), so the threads do not mix them
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    futures = {name: pool.submit(minatar_side, name, o, Path(tmp)) for name in runs}
                    results = [(name, f.result()) for name, f in futures.items()]
            else:
                results = [(name, minatar_side(name, o, Path(tmp))) for name in runs]
            for name, res in results:
                res["fps_cpu"] = round(o.total_timesteps / res["cpu_seconds"], 1)
                runs[name].append(res)
                print(f"run {r + 1}/{o.repeats} {name:>4}: {res['fps_cpu']:7.1f} frames per CPU second ({res['cpu_seconds']} s CPU, "
                      f"{res['wall_seconds']} s wall), {res['episodes']} episodes, last-100 training return {res['last_100']}", flush=True)
    ratios = [a["fps_cpu"] / b["fps_cpu"] for a, b in zip(runs["ours"], runs["peer"])]
    print(f"DQN MinAtar {o.game} {o.total_timesteps:,} frames, 1 torch thread: ours/peer {min(ratios):.2f}-{max(ratios):.2f}x in CPU time", flush=True)
    settings = {"peer": o.peer, "game": o.game, "frames": o.total_timesteps, "seed": o.seed, "repeats": o.repeats, "out": o.out,
                "parallel": o.parallel, "plot": o.plot}
    write(o.out, {"settings": settings, "runs": runs, "ratios": [round(x, 2) for x in ratios], "date": time.strftime("%Y-%m-%d"),
                  "code": code_state(), "machine": machine(device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")})
    if o.plot:  # both sides' curves, each repeat a line
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for name, color, label in (("ours", "tab:blue", "ours (algos/dqn.py)"), ("peer", "tab:orange", "MinAtar's dqn.py")):
            for r, res in enumerate(runs[name]):
                xs, ys = zip(*res["curve"]) if res["curve"] else ((), ())
                ax.plot(xs, ys, color=color, alpha=0.8, label=label if r == 0 else None)
        ax.set(xlabel="frames (env steps)", ylabel="mean of the last 100 training episodes", title=f"DQN, MinAtar {o.game}, the example agent's settings")
        ax.legend()
        fig.tight_layout()
        Path(o.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(o.plot, dpi=100)
        plt.close(fig)
    return 0


def sps_while_learning(run_dir: Path, after: int) -> tuple[float | None, int]:
    """Env steps per wall second between the first and last logged rows past step `after`; (rate, rows)."""
    with open(metrics_file(run_dir)) as f:
        rows = [(int(r["global_step"]), int(r["sps"])) for r in csv.DictReader(f) if r.get("sps") and int(r["global_step"]) > after]
    if len(rows) < 2 or rows[0][1] <= 0 or rows[-1][1] <= 0:
        return None, len(rows)
    (s0, r0), (s1, r1) = rows[0], rows[-1]
    return (s1 - s0) / (s1 / r1 - s0 / r0), len(rows)


def find_cell(spec: str):
    parts = spec.split(":", 2)
    if len(parts) != 3:
        raise BadInput(f"--cells {spec!r}: expected suite:algo:env, e.g. mujoco:ddpg:HalfCheetah-v5")
    try:
        cells = load_suite(parts[0]).cells
    except SystemExit as e:  # an unknown suite
        raise BadInput(f"--cells {spec!r}: {e}") from None
    for cell in cells:
        if (cell.algo, cell.env) == tuple(parts[1:]):
            return cell
    raise BadInput(f"--cells {spec!r}: no cell {parts[1]} {parts[2]} in suite {parts[0]}")


def device_run(spec: str, cell, device: str, o, scratch: Path) -> dict:
    settings, threads = dict(cell.settings), int(o.threads[0])
    defaults = {f.name: f.default for f in dataclasses.fields(importlib.import_module(cell.algo).Args)}
    after = 0
    if "learning_starts" in defaults:
        settings["learning_starts"] = after = min(int(settings.get("learning_starts", defaults["learning_starts"])), o.total_timesteps // 4)
    run_dir = scratch / f"{spec.replace(':', '_').replace('/', '-')}_{device}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, str(ROOT / "algos" / f"{cell.algo}.py"), "--env", cell.env, "--seed", "1", "--total-timesteps", str(o.total_timesteps),
           "--device", device, "--torch-threads", str(threads), "--eval-episodes", "1", "--eval-every", "0", "--no-progress",
           "--run-dir", str(run_dir), *cli_flags(settings)]
    done, _, wall = run_timed(cmd, str(ROOT), {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    if done.returncode != 0:
        return {"cell": spec, "device": device, "error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    rate, rows = sps_while_learning(run_dir, after)
    summary = json.loads((metrics_file(run_dir).parent / "summary.json").read_text())
    measured = "logged rows past learning_starts"
    if rate is None and after == 0:  # no heatup (a2c, n_step_q, sarsa) and too few logged rows: the whole run's figure
        rate, measured = summary.get("sps"), "the whole run (summary.json)"
    return {"cell": spec, "device": device, "steps": o.total_timesteps, "learning_starts": after, "learning_sps": round(rate, 1) if rate else None,
            "measured_over": measured, "rows": rows, "wall_seconds": round(wall, 1), "summary_device": summary.get("device"),
            "updates": summary.get("updates")}


def compare_devices(o) -> int:
    import torch

    if "cuda" in o.devices and not torch.cuda.is_available():
        raise BadInput("--devices names cuda, but torch sees no CUDA GPU")
    cells = {spec: find_cell(spec) for spec in o.cells}  # a wrong name fails before any run
    cpu_cells = [c for c in o.cells if "cpu" in o.devices]
    parallel = (os.cpu_count() or 1) > len(cpu_cells) + 1  # a core for each CPU run and one for the GPU runs
    scratch, results = Path(tempfile.mkdtemp(prefix="speed_devices_")), {}
    try:
        if parallel:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(cpu_cells) + 1) as pool:
                cpu_jobs = {pool.submit(device_run, c, cells[c], "cpu", o, scratch): (c, "cpu") for c in cpu_cells}
                chain = pool.submit(lambda: {(c, d): device_run(c, cells[c], d, o, scratch) for c in o.cells for d in o.devices if d != "cpu"})
                results.update({key: job.result() for job, key in cpu_jobs.items()})
                results.update(chain.result())
        else:
            results = {(c, d): device_run(c, cells[c], d, o, scratch) for c in o.cells for d in o.devices}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    m = machine(gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, cpu_runs_in_parallel=parallel)
    print(f"{m['gpu'] or 'no GPU'}; {m['cpu_count']} logical CPUs; torch {m['torch']}; {o.total_timesteps:,} steps, {o.threads[0]} torch thread(s)")
    print(f"{'cell':44s}" + "".join(f"{d + ' sps':>12s}" for d in o.devices) + ("   gpu/cpu" if "cpu" in o.devices and len(o.devices) > 1 else ""))
    for c in o.cells:
        line = f"{c:44s}"
        for d in o.devices:
            r = results[(c, d)]
            mark = "*" if r.get("measured_over", "").startswith("the whole run") else ""
            line += f"{'failed' if 'error' in r else str(r['learning_sps']) + mark if r['learning_sps'] else 'too short':>12}"
        cpu, other = results.get((c, "cpu"), {}), [results[(c, d)] for d in o.devices if d != "cpu"]
        if cpu.get("learning_sps") and other and other[0].get("learning_sps"):
            line += f"{other[0]['learning_sps'] / cpu['learning_sps']:>10.2f}"
        print(line)
    if any(r.get("measured_over", "").startswith("the whole run") for r in results.values()):
        print("* the whole run (too few logged rows while learning): start-up included")
    for r in results.values():
        if "error" in r:
            print(f"{r['cell']} on {r['device']} failed: {r['error'][0]}")
    settings = {"cells": o.cells, "devices": o.devices, "steps": o.total_timesteps, "threads": int(o.threads[0]), "out": o.out}
    write(o.out, {"settings": settings, "machine": m, "code": code_state(), "date": time.strftime("%Y-%m-%d"), "runs": list(results.values())})
    return 0


DRIVERS = {"dqn": compare_in_process, "a2c": compare_in_process, "ddpg": compare_ddpg, "dqn-atari": compare_dqn_atari,
           "minatar": compare_minatar, "devices": compare_devices}


# ---- all of the collected comparisons, one after another, into the reports' records -----------------
RATIO_LINE = re.compile(r"ratio|ours/", re.IGNORECASE)
RATIO = re.compile(r"(?<![>=\d.])(?<!>= )(\d+(?:\.\d+)?)x\b")  # not a bound such as ">= 2x"


def parse(output: str) -> tuple[list[str], list[float]]:
    """A comparison's closing lines, and every 'N.NNx' on lines that talk about a ratio."""
    lines = [x.rstrip() for x in output.splitlines() if x.strip() and "warn" not in x.lower()]
    closing = []
    for x in reversed(lines):  # the summary block: trailing lines after the per-run lines
        if x.lower().startswith(("run ", "repeat ", "ours  ", "sb3   ", "[")):
            break
        closing.insert(0, x)
    closing = closing[-30:] or lines[-3:]
    return closing, [float(m) for x in closing if RATIO_LINE.search(x) for m in RATIO.findall(x)]


def run_one(name: str, quick: bool, out_dir: Path, timeout: float, cleanrl: list[str] | None = None) -> dict:
    c = COMPARISONS[name]
    shown = out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir
    argv = [name, *(a.format(dir=shown) for a in (c["quick"] if quick else c["full"]))] + (cleanrl if cleanrl and name == "ddpg" else [])
    command = " ".join(["python", "benchmarks/speed.py", *argv])
    record = {"name": name, "command": command, "quick": quick, "started": time.strftime("%Y-%m-%d %H:%M")}
    print(f"{name}: {command}", flush=True)
    start, log = time.perf_counter(), out_dir / f"{name}.log"
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout or None)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="ignore") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = None
        record["error"] = f"timed out after {timeout:.0f} s"
    log.write_text(output)
    closing, ratios = parse(proc.stdout if code is not None else output)
    record.update(returncode=code, seconds=round(time.perf_counter() - start, 1), summary_lines=closing, ratios=ratios,
                  log=str(log.relative_to(ROOT)) if log.is_relative_to(ROOT) else str(log), finished=time.strftime("%Y-%m-%d %H:%M"))
    if code not in (0, None):
        record["error"] = (output.strip().splitlines() or ["no output"])[-1][:200]
    for x in closing:
        print(f"  {x}")
    print(f"  -> ratios {ratios}, exit {code}, {record['seconds']} s", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="comparisons:\n" + "\n".join(f"  {n}: {c['what']}\n    timing: {c['timing']}\n    figure: {c['figure']}"
                                                                    for n, c in COMPARISONS.items()))
    p.add_argument("comparison", nargs="?", choices=sorted(COMPARISONS), help="run this one comparison (default: the collected ones)")
    p.add_argument("--only", nargs="+", choices=COLLECTED, help="these collected comparisons only")
    p.add_argument("--quick", action="store_true", help="tiny budgets: a plumbing check, the numbers mean nothing")
    p.add_argument("--out", default=None, help="collected: folder for the .json and .log files (default benchmarks/results/speed; "
                   "with --quick a temporary folder); one comparison: its raw JSON file")
    p.add_argument("--timeout", type=float, default=0, help="seconds per collected comparison (0: none)")
    p.add_argument("--cleanrl", default=None, help="a CleanRL checkout: ddpg and dqn-atari also time its scripts")
    p.add_argument("--cleanrl-python", default=None, help="the Python of CleanRL's environment (default python3)")
    p.add_argument("--total-timesteps", "--frames", "--steps", type=int, help="env steps per run")
    p.add_argument("--learning-starts", type=int, help="env steps before learning")
    p.add_argument("--repeats", type=int, help="runs of each side, alternating")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", nargs="+", help="thread settings (ddpg: a number or 'default'; dqn-atari: each measured)")
    p.add_argument("--no-sb3", action="store_true", help="ddpg, dqn-atari: skip Stable-Baselines3")
    p.add_argument("--no-naf", action="store_true", help="ddpg: skip the NAF timing")
    p.add_argument("--profile", action="store_true", help="dqn-atari: one more run of ours and SB3 under the torch profiler")
    p.add_argument("--peer", default="../shared/peers/minatar/dqn.py", help="minatar: path of MinAtar's examples/dqn.py")
    p.add_argument("--game", default="breakout", help="minatar: the game")
    p.add_argument("--parallel", action="store_true", help="minatar: ours and the peer at once (needs two idle cores)")
    p.add_argument("--plot", default=None, help="minatar: draw both sides' return curves to this PNG")
    p.add_argument("--cells", nargs="+", default=DEFAULT_CELLS, help="devices: suite:algo:env cells")
    p.add_argument("--devices", nargs="+", default=["cpu", "cuda"], help="devices: where to run each cell")
    p.add_argument("--side", help=argparse.SUPPRESS)  # internal: one run of one side in this process, its figures printed
    p.add_argument("--side-threads", type=int, default=None, help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    if o.comparison:
        for k, v in COMPARISONS[o.comparison]["defaults"].items():
            if getattr(o, k, None) is None:
                setattr(o, k, v)
        o.learning_starts = 0 if o.learning_starts is None else o.learning_starts
        o.cleanrl_python = o.cleanrl_python or "python3"
        if o.side:
            fn = ddpg_side if o.comparison == "ddpg" else lambda s, o: atari_side(s, o, o.side_threads)
            print(json.dumps(fn(o.side, o)))
            return 0
        try:
            if o.cleanrl and o.comparison == "ddpg":
                missing = [s for s in CLEANRL.values() if "ddpg" in s and not (Path(o.cleanrl) / s).exists()]
                if missing:
                    raise BadInput(f"--cleanrl {o.cleanrl} is not a CleanRL checkout (no {missing[0]})")
            return DRIVERS[o.comparison](o)
        except BadInput as e:
            print(f"speed {o.comparison}: error: {e}", file=sys.stderr)
            return 2
    cleanrl = None
    if o.cleanrl:
        if not (Path(o.cleanrl) / "cleanrl").is_dir():
            p.error(f"--cleanrl {o.cleanrl} is not a CleanRL checkout (no cleanrl/ folder in it)")
        cleanrl = ["--cleanrl", str(Path(o.cleanrl).resolve())] + (["--cleanrl-python", o.cleanrl_python] if o.cleanrl_python else [])
    out_dir = Path(o.out or (Path(tempfile.gettempdir()) / "rl-speed-quick" if o.quick else BENCH / "results" / "speed")).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in o.only or COLLECTED:
        record = run_one(name, o.quick, out_dir, o.timeout, cleanrl)
        (out_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
        failed += record.get("returncode") != 0
    print(f"wrote {out_dir}/*.json; `python benchmarks/report.py --suite classic` puts them in the report")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
