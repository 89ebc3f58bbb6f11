"""Speed of algos/ddpg.py beside CleanRL's torch and JAX DDPG and Stable-Baselines3's, side by side.

Settings (every side): Pendulum-v1, 20k env steps, uniform random actions and no learning for the
first 5k, batch 256, [256, 256] MLPs, Adam 3e-4, tau 0.005, gamma 0.99, Gaussian noise 0.1, one
critic update per env step, actor (and targets) every 2 critic updates: CleanRL's DDPG settings.
SB3 gets `policy_delay = 2` on its DDPG object (TD3 with one critic and no target smoothing).
algos/naf.py is timed beside them with the same batch, widths and schedule (it has no peer here).

Each run is a fresh process, timed from start to exit (imports, JAX's compilation, env steps,
training; ours also plays its final 10 evaluation episodes, about 1% of the run), so a compiled
path pays its compile time. Thread settings, per `--threads` entry:
- `1`: every process pinned to one core (`taskset -c 0`); ours `--torch-threads 1`; torch peers
  with OMP_NUM_THREADS=MKL_NUM_THREADS=1 and torch.set_num_threads(1) (SB3); JAX with
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1".
- `2` (or any n): n threads on every side, no pinning (JAX: its default, all cores).
- `default`: every script as a user runs it, no thread setting at all (ours: its --torch-threads
  default; CleanRL and SB3: torch's default, all cores; JAX: all cores).
Within a repeat the sides run one after another, in an order rotated per repeat, so that a
slow spell on the machine does not always hit the same side; ratios are taken per repeat and
reported as median [min, max].

CleanRL's scripts need gymnasium 0.29, so they run from a CleanRL checkout in its own Python
environment, e.g.:
    git clone https://github.com/vwxyzjn/cleanrl ~/cleanrl
    python3 -m venv ~/venv-cleanrl
    ~/venv-cleanrl/bin/pip install torch==2.13.0 gymnasium==0.29.1 stable-baselines3==2.3.2 tyro tensorboard jax jaxlib flax optax
Nothing of CleanRL is copied into this repository.

Run:
    python benchmarks/speed_ddpg.py --cleanrl ~/cleanrl --cleanrl-python ~/venv-cleanrl/bin/python --threads 1 2 default --repeats 3
    python benchmarks/speed_ddpg.py --threads 1 --repeats 1            # ours and SB3 only (no CleanRL checkout)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS, LEARNING_STARTS = 20_000, 5_000
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                  "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
CLEANRL_SCRIPTS = {"cleanrl-torch": "cleanrl/ddpg_continuous_action.py", "cleanrl-jax": "cleanrl/ddpg_continuous_action_jax.py"}


# ---- one run of one side, in this process (the driver starts it as `--side NAME`) ---------------
def run_side(side: str, seed: int, steps: int, learning_starts: int, threads: int | None) -> dict:
    """Train once; returns the side's own figures (the driver times the whole process)."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "algos"))
    with tempfile.TemporaryDirectory() as tmp:
        if side in ("ours", "naf"):
            import ddpg
            import naf

            common = dict(env_id="Pendulum-v1", seed=seed, total_timesteps=steps, learning_starts=learning_starts, batch_size=256,
                          hidden_sizes=(256, 256), device="cpu", run_dir=tmp, progress=False)
            if threads is not None:
                common["torch_threads"] = threads
            if side == "ours":
                args = ddpg.Args(**common, actor_learning_rate=3e-4, critic_learning_rate=3e-4, target_rate=0.005, gamma=0.99,
                                 noise="gaussian", noise_std=0.1, policy_every=2, buffer_size=1_000_000)
                summary = ddpg.train(args)
            else:  # NAF's own defaults for everything else
                summary = naf.train(naf.Args(**common))
            return {"train_sps": summary["sps"], "eval": summary["eval_return_mean"]}
        if side == "sb3":
            import gymnasium as gym
            import numpy as np
            import torch
            from stable_baselines3 import DDPG
            from stable_baselines3.common.noise import NormalActionNoise

            if threads is not None:
                torch.set_num_threads(threads)
            env = gym.make("Pendulum-v1")
            high = env.action_space.high
            model = DDPG(
                "MlpPolicy", env, learning_rate=3e-4, buffer_size=1_000_000, learning_starts=learning_starts, batch_size=256,
                tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, policy_kwargs=dict(net_arch=[256, 256]),
                action_noise=NormalActionNoise(np.zeros_like(high), 0.1 * high), seed=seed, device="cpu", verbose=0,
            )
            model.policy_delay = 2  # actor (and targets) every 2 critic updates, as CleanRL's DDPG
            start = time.perf_counter()
            model.learn(total_timesteps=steps)
            return {"train_sps": steps / (time.perf_counter() - start)}
    raise ValueError(f"unknown side {side}")


# ---- the driver --------------------------------------------------------------------------------
def command(side: str, seed: int, setting: str, opts: argparse.Namespace) -> tuple[list[str], dict, str | None]:
    """(argv, extra environment, working directory) of one run."""
    env, threads = {}, None
    if setting == "1":
        env = dict(ONE_THREAD_ENV)
    if setting != "default":
        threads = int(setting)
        env.setdefault("OMP_NUM_THREADS", setting)
        env.setdefault("MKL_NUM_THREADS", setting)
    pin = ["taskset", "-c", "0"] if setting == "1" else []
    if side in CLEANRL_SCRIPTS:
        script = str(Path(opts.cleanrl).resolve() / CLEANRL_SCRIPTS[side])
        env["PYTHONPATH"] = str(Path(opts.cleanrl).resolve())
        argv = [opts.cleanrl_python, script, "--env-id", "Pendulum-v1", "--seed", str(seed), "--total-timesteps", str(opts.total_timesteps),
                "--learning-starts", str(opts.learning_starts)]
        return pin + argv, env, "tmp"
    argv = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--seed", str(seed), "--total-timesteps", str(opts.total_timesteps),
            "--learning-starts", str(opts.learning_starts)]
    if threads is not None:
        argv += ["--side-threads", str(threads)]
    return pin + argv, env, None


def time_run(side: str, seed: int, setting: str, opts: argparse.Namespace) -> dict:
    argv, extra, cwd = command(side, seed, setting, opts)
    with tempfile.TemporaryDirectory() as tmp:  # CleanRL writes runs/ into its working directory
        start = time.perf_counter()
        proc = subprocess.run(argv, env={**os.environ, **extra}, cwd=tmp if cwd else ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
    record = {"side": side, "seed": seed, "setting": setting, "wall_s": round(wall, 2), "returncode": proc.returncode}
    if proc.returncode != 0:
        record["error"] = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    elif side not in CLEANRL_SCRIPTS:
        record.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return record


def summarise(records: list[dict], sides: list[str], settings: list[str]) -> list[str]:
    lines = []
    for setting in settings:
        rows = [r for r in records if r["setting"] == setting and r["returncode"] == 0]
        if not rows:
            continue
        label = {"1": "1 thread, pinned to one core", "default": "every script's defaults"}.get(setting, f"{setting} threads")
        lines.append(f"{label}:")
        for side in sides:
            walls = [r["wall_s"] for r in rows if r["side"] == side]
            if walls:
                lines.append(f"  {side:14s} wall s per run: median {statistics.median(walls):6.1f}  [{min(walls):.1f}, {max(walls):.1f}]  "
                             f"({STEPS / statistics.median(walls):.0f} env steps/s over the whole process)")
        ours = {r["seed"]: r["wall_s"] for r in rows if r["side"] == "ours"}
        for side in sides:
            if side in ("ours", "naf"):
                continue
            ratios = [r["wall_s"] / ours[r["seed"]] for r in rows if r["side"] == side and r["seed"] in ours]
            if ratios:
                lines.append(f"  ratio ours vs {side:14s} (their wall / ours, per repeat): median {statistics.median(ratios):.2f}x "
                             f"[{min(ratios):.2f}, {max(ratios):.2f}] over {len(ratios)}")
    return lines


def main() -> int:
    global STEPS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cleanrl", default=None, help="a CleanRL checkout (adds its torch and JAX DDPG scripts)")
    p.add_argument("--cleanrl-python", default="python3", help="the Python of CleanRL's environment (gymnasium 0.29, jax, flax, optax)")
    p.add_argument("--threads", nargs="+", default=["1", "2", "default"], help="thread settings: a number, or 'default' (see the docstring)")
    p.add_argument("--repeats", type=int, default=3, help="runs per side and setting (seeds seed, seed+1, ...)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-naf", action="store_true", help="skip the NAF timing")
    p.add_argument("--no-sb3", action="store_true", help="skip Stable-Baselines3")
    p.add_argument("--total-timesteps", type=int, default=STEPS, help="env steps per run")
    p.add_argument("--learning-starts", type=int, default=LEARNING_STARTS, help="env steps of uniform random actions before learning")
    p.add_argument("--out", default=None, help="write every run's record to this JSON file")
    p.add_argument("--side", default=None, help=argparse.SUPPRESS)  # internal: one run of ours/naf/sb3 in this process
    p.add_argument("--side-threads", type=int, default=None, help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.side:
        print(json.dumps(run_side(opts.side, opts.seed, opts.total_timesteps, opts.learning_starts, opts.side_threads)))
        return 0
    STEPS = opts.total_timesteps
    for s in opts.threads:
        if s != "default" and not (s.isdigit() and int(s) > 0):
            p.error(f"--threads takes positive numbers or 'default', got {s!r}")
    if "1" in opts.threads and shutil.which("taskset") is None:
        p.error("the 1-thread setting pins processes with taskset, which is not installed")
    sides = ["ours"]
    if opts.cleanrl:
        missing = [s for s in CLEANRL_SCRIPTS.values() if not (Path(opts.cleanrl) / s).exists()]
        if missing:
            p.error(f"--cleanrl {opts.cleanrl} is not a CleanRL checkout (no {missing[0]})")
        sides += list(CLEANRL_SCRIPTS)
    if not opts.no_sb3:
        sides.append("sb3")
    if not opts.no_naf:
        sides.append("naf")
    print(f"DDPG, Pendulum-v1, {STEPS:,} steps, learning from {opts.learning_starts:,}, batch 256, [256, 256], actor every 2; "
          f"{os.cpu_count()} cores; sides {', '.join(sides)}; settings {', '.join(opts.threads)}", flush=True)
    records = []
    for k in range(opts.repeats):
        seed = opts.seed + k
        for setting in opts.threads:
            order = sides[k % len(sides):] + sides[:k % len(sides)]
            for side in order:
                r = time_run(side, seed, setting, opts)
                records.append(r)
                extra = f"  train {r['train_sps']:.0f} steps/s" if "train_sps" in r else ""
                extra += f"  eval {r['eval']:.1f}" if "eval" in r else ""
                status = "" if r["returncode"] == 0 else f"  FAILED ({r['returncode']}): {r.get('error', '')}"
                print(f"run  {side:14s} seed {seed} threads {setting:7s}: {r['wall_s']:6.1f} s{extra}{status}", flush=True)
    if opts.out:
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(json.dumps({"steps": STEPS, "learning_starts": opts.learning_starts, "records": records}, indent=1))
    print()
    for line in summarise(records, sides, opts.threads):
        print(line)
    return 1 if any(r["returncode"] != 0 for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
