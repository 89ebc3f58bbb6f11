"""Speed against the peers: every comparison of ours with a peer's implementation, one tool.

Each comparison is a row of COMPARISONS (`--help` lists them; commands: benchmarks/README.md); each run of a
side is a fresh child process. The sides alternate (in an order rotated per repeat) so that a slow spell on a
shared machine hits all of them; only the ratio within one invocation means anything. Alone, the tool runs the
collected ones one after another (never in parallel) into <out>/<name>.log and .json, for the reports.
Peers that are not this project's (CleanRL's scripts, MinAtar's examples/dqn.py) run unmodified from a
checkout given by path, in their own Python where they need one (CleanRL's: docs/speed.md, the set-up).
"""

from __future__ import annotations

import argparse
import bisect
import concurrent.futures
import csv
import dataclasses
import functools
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import takewhile
from pathlib import Path
from statistics import median

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT), str(ROOT / "algos")]
from cli import BadInput, cli_flags, fail  # noqa: E402
from job import machine_info  # noqa: E402
from provenance import code_state  # noqa: E402
from render import read_curves  # noqa: E402
from suite import load_suite, metrics_file, script_path  # noqa: E402

RAW = "benchmarks/results/speed/"
ONE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}
ATARI = "BreakoutNoFrameskip-v4"
ATARI_OURS = dict(
    env_id=ATARI,
    buffer_size="steps",
    batch_size=32,
    learning_rate=1e-4,
    train_every=4,
    target_every=1_000,
    end_epsilon=0.01,
    exploration_fraction=0.1,
    double_dqn=False,
    anneal_lr=False,
    eval_episodes=1,
    eval_max_frames=400,
)

# sides: one this tool runs (`--side`): (our script, its Args settings) or (the SB3 class, its settings:
# env, n_envs, eval_episodes, action_noise as a share of the action range, `set`: attributes set after);
# "steps": the run's steps. A peer's script: its path in a CleanRL checkout (run with the `cleanrl` flags),
# or in words (MinAtar's).
# rate: how a run's env steps per second are taken: "loop" (the side's own training-loop figure),
# "wall" or "cpu" (the whole child process); pairs: (ours, peer) whose rates are compared per repeat
COMPARISONS = {
    "dqn": dict(
        what="DQN, CartPole-v1, CleanRL's DQN settings (lr 2.5e-4, buffer 10k, batch 128, learning from 10k, train every 10, "
        "target copy every 500, epsilon 1 -> 0.05 over half the run, [120, 84], MSE (SB3: Huber, grad norm 10))",
        sides={
            "ours": (
                "dqn",
                dict(buffer_size=10_000, double_dqn=False, anneal_lr=False),
            ),  # CleanRL's (our defaults differ)
            "sb3": (
                "DQN",
                dict(
                    policy="MlpPolicy",
                    env="CartPole-v1",
                    eval_episodes=10,
                    learning_rate=2.5e-4,
                    buffer_size=10_000,
                    batch_size=128,
                    tau=1.0,
                    gamma=0.99,
                    train_freq=10,
                    gradient_steps=1,
                    target_update_interval=500,
                    exploration_fraction=0.5,
                    exploration_initial_eps=1.0,
                    exploration_final_eps=0.05,
                    max_grad_norm=10,
                    policy_kwargs=dict(net_arch=[120, 84]),
                ),
            ),
        },
        timing="each run a child process, sides alternating; `--threads` torch threads for both",
        figure="env steps/s of the training loop (ours: summary sps; SB3: learn()); ratio ours/sb3 per repeat",
        rate="loop",
        pairs=[("ours", "sb3")],
        defaults=dict(
            total_timesteps=500_000,
            learning_starts=10_000,
            repeats=1,
            threads=["1"],
            out="benchmarks/results/speed_dqn.json",
        ),
        full="--total-timesteps 500000 --out {raw}".split(),
        quick="--total-timesteps 3000 --learning-starts 1000 --out {raw}".split(),
    ),
    "a2c": dict(
        what="A2C, CartPole-v1, 8 envs, n_steps 5, separate [64, 64] tanh actor and critic, RMSprop 7e-4 (alpha 0.99, eps 1e-5), "
        "gamma 0.99, full-rollout returns, value coef 0.5, no entropy, grad norm 0.5, CPU, 1 thread",
        sides={
            "ours": (
                "a2c",
                dict(
                    env_id="CartPole-v1",
                    num_envs=8,
                    n_steps=5,
                    eval_episodes=1,
                    learning_rate=7e-4,
                    optimizer="rmsprop",
                    rmsprop_alpha=0.99,
                    optimizer_eps=1e-5,
                    gamma=0.99,
                    value_coef=0.5,
                    entropy_coef=0.0,
                    clip_grad_norm=0.5,
                    hidden_sizes=(64, 64),
                    activation="tanh",
                ),
            ),
            "sb3": (
                "A2C",
                dict(
                    policy="MlpPolicy",
                    env="CartPole-v1",
                    n_envs=8,
                    learning_rate=7e-4,
                    n_steps=5,
                    gamma=0.99,
                    gae_lambda=1.0,
                    ent_coef=0.0,
                    vf_coef=0.5,
                    max_grad_norm=0.5,
                    rms_prop_eps=1e-5,
                    use_rms_prop=True,
                    normalize_advantage=False,  # the policy's defaults: tanh, orthogonal initialisation
                    policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64])),
                ),
            ),
        },
        timing="each run a child process, sides alternating, one torch thread, another seed each repeat",
        figure="env steps/s (ours: summary sps, env reset to last update; SB3: learn()); ratio ours/sb3 per repeat, median",
        rate="loop",
        pairs=[("ours", "sb3")],
        new_seeds=True,
        defaults=dict(total_timesteps=100_000, repeats=2, threads=["1"]),
        full="--total-timesteps 100000 --repeats 2".split(),
        quick="--total-timesteps 2000 --repeats 1".split(),
    ),
    "ddpg": dict(
        what="DDPG, Pendulum-v1, CleanRL's settings (uniform actions for 5k steps, batch 256, [256, 256], Adam 3e-4, tau 0.005, "
        "Gaussian noise 0.1, actor and targets every 2 critic updates; SB3: policy_delay 2); NAF timed beside, same schedule",
        sides={
            "ours": (
                "ddpg",
                dict(
                    env_id="Pendulum-v1",
                    batch_size=256,
                    hidden_sizes=(256, 256),
                    actor_learning_rate=3e-4,
                    critic_learning_rate=3e-4,
                    target_rate=0.005,
                    gamma=0.99,
                    noise="gaussian",
                    noise_std=0.1,
                    policy_every=2,
                    buffer_size=1_000_000,
                ),
            ),
            "naf": (
                "naf",
                dict(env_id="Pendulum-v1", batch_size=256, hidden_sizes=(256, 256)),
            ),  # NAF's own defaults otherwise
            "sb3": (
                "DDPG",
                dict(
                    policy="MlpPolicy",
                    env="Pendulum-v1",
                    learning_rate=3e-4,
                    buffer_size=1_000_000,
                    batch_size=256,
                    tau=0.005,
                    gamma=0.99,
                    train_freq=1,
                    gradient_steps=1,
                    policy_kwargs=dict(net_arch=[256, 256]),
                    action_noise=0.1,
                    set=dict(policy_delay=2),
                ),
            ),  # actor (and targets) every 2 critic updates
            "cleanrl-torch": "cleanrl/ddpg_continuous_action.py",
            "cleanrl-jax": "cleanrl/ddpg_continuous_action_jax.py",
        },
        cleanrl=["--env-id", "Pendulum-v1"],
        timing="each run a fresh process timed from start to exit (imports, JAX's compile, training, ours' final evaluation); "
        "`--threads` 1: pinned to one core (taskset), one thread everywhere; n: n threads; default: no setting at all",
        figure="wall seconds per run; ratio their wall / ours per repeat, median [min, max]",
        rate="wall",
        pairs=[("ours", "sb3"), ("ours", "cleanrl-torch"), ("ours", "cleanrl-jax")],
        new_seeds=True,
        pin=True,
        defaults=dict(
            total_timesteps=20_000, learning_starts=5_000, repeats=3, threads=["1", "2", "default"]
        ),
        full="--repeats 2 --threads 1 default --out {raw}".split(),
        quick="--repeats 1 --threads 1 --total-timesteps 600 --learning-starts 300 --out {raw}".split(),
    ),
    "dqn-atari": dict(
        what=f"DQN, {ATARI}, the DQN paper's preprocessing and Nature net, CleanRL's Atari settings (Adam 1e-4, batch 32, "
        "train every 4, target every 1,000, epsilon 1 -> 0.01 over 10%), memory sized to the run; ours with SB3's loss "
        "(Huber, clip 10) against SB3, with CleanRL's (MSE, no clip) against CleanRL",
        sides={
            "ours": ("dqn", dict(ATARI_OURS, loss="huber", clip_grad_norm=10.0)),
            "sb3": (
                "DQN",
                dict(
                    policy="CnnPolicy",
                    env=ATARI,
                    learning_rate=1e-4,
                    buffer_size="steps",
                    batch_size=32,
                    tau=1.0,
                    gamma=0.99,
                    train_freq=4,
                    gradient_steps=1,
                    target_update_interval=1_000,
                    exploration_fraction=0.1,
                    exploration_initial_eps=1.0,
                    exploration_final_eps=0.01,
                    max_grad_norm=10,
                    optimize_memory_usage=False,
                ),
            ),
            "ours-mse": ("dqn", dict(ATARI_OURS, loss="mse", clip_grad_norm=None)),
            "cleanrl": "cleanrl/dqn_atari.py",
        },
        cleanrl=f"--env-id {ATARI} --buffer-size steps --learning-rate 1e-4 --batch-size 32 --train-frequency 4 "
        "--target-network-frequency 1000 --start-e 1 --end-e 0.01 --exploration-fraction 0.1 --no-cuda".split(),
        timing="each run a fresh process; OMP/MKL threads and torch threads n per `--threads`; CPU time (user + system, "
        "os.wait4) of the whole process and of the training loop alone",
        figure="env steps per CPU second; ratio ours/peer per repeat (whole process); `--profile`: the conv net's kernels' share",
        rate="cpu",
        pairs=[("ours", "sb3"), ("ours-mse", "cleanrl")],
        defaults=dict(
            total_timesteps=12_000,
            learning_starts=2_000,
            repeats=2,
            threads=["1", "2"],
            out=RAW + "speed_dqn_atari_raw.json",
        ),
        full="--total-timesteps 12000 --repeats 2 --threads 1 2 --profile --out {raw}".split(),
        quick="--total-timesteps 400 --learning-starts 200 --repeats 1 --threads 1 --out {raw}".split(),
    ),
    "minatar": dict(
        what="DQN, MinAtar, the minatar_paper suite's settings, which are MinAtar's examples/dqn.py's (-v0 ids, sticky 0.1, "
        "batch 32, 100k memory, learning from 5,000 every step, target every 1,000, epsilon 1 -> 0.1 over 100k steps, "
        "Huber, centered RMSprop 2.5e-4); the peer (GPL-3.0, give its path) with its NUM_FRAMES set",
        sides={"ours": "python algos/dqn.py with the cell's flags", "peer": "MinAtar's examples/dqn.py"},
        timing="child processes with one torch thread, alternating or (`--parallel`) both at once; CPU time from os.wait4",
        figure="frames per CPU second, ratio ours/peer per repeat; last-100 training return and its curve (`--plot`)",
        rate="cpu",
        pairs=[("ours", "peer")],
        defaults=dict(total_timesteps=105_000, repeats=2, threads=["1"], out=RAW + "speed_minatar_raw.json"),
        full=None,
        quick=None,
    ),
    "devices": dict(
        what="each script at suite cells' settings on the GPU against the CPU of the same machine, learning_starts cut to a "
        "quarter of the steps",
        timing="child processes, one torch thread; CPU runs at once (a core each) beside the GPU runs one after another where "
        "the machine has the cores, else one at a time",
        figure="env steps per wall second while learning: between the first and last metrics.csv row past learning_starts",
        defaults=dict(total_timesteps=12_000, threads=["1"]),
        full=None,
        quick=None,
    ),
    "gemm": dict(
        what="the 256-wide layers' arithmetic floor: fp32 [256, 256] @ [256, 256] on one thread, in torch (MKL: its matmul and "
        "nn.Linear), numpy (its OpenBLAS) and JAX/XLA (with --cleanrl-python, CleanRL's environment), each under both "
        "kernel sets (the CPU's own, and SECOND_KERNELS: MKL_CBWR=COMPATIBLE, ATen at AVX2, OpenBLAS as Haswell)",
        timing="a child process per library and kernel set, one thread, pinned to one core; the best of 7 blocks of calls",
        figure="microseconds per product and GFLOP/s",
        defaults=dict(threads=["1"]),
        full=None,
        quick=None,
    ),
}
COLLECTED = [n for n, c in COMPARISONS.items() if c["full"]]  # what `speed.py` alone runs, into every report
DEFAULT_CELLS = [
    "classic:dqn:CartPole-v1",
    "minatar_paper:dqn:MinAtar/Breakout-v0",
    "atari_cpu:dqn:BreakoutNoFrameskip-v4",
    "mujoco:ddpg:HalfCheetah-v5",
    "mujoco:naf:HalfCheetah-v5",
    "mujoco:a2c:HalfCheetah-v5",
]
# the conv net's kernels to profile_atari; the lines and figures that parse takes for a ratio
KERNELS = (
    "aten::mkldnn_convolution",
    "aten::convolution_backward",
    "aten::addmm",
    "aten::mm",
    "aten::thnn_conv2d",
    "aten::_convolution",
    "aten::_slow_conv2d_forward",
    "aten::_slow_conv2d_backward",
)
SECOND_KERNELS = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell"}
GEMM_SIZE = 256
# one library's product, timed in its own process: the best of 7 blocks, each long enough to time
GEMM_CHILD = """
import json, sys, time
lib, n = sys.argv[1], int(sys.argv[2])
if lib == "jax":
    import jax, jax.numpy as jnp
    a, b = (jax.random.normal(jax.random.PRNGKey(i), (n, n), jnp.float32) for i in (0, 1))
    product = jax.jit(lambda x, y: x @ y)
    call = lambda: product(a, b).block_until_ready()
elif lib == "numpy":
    import numpy as np
    a, b = (np.random.default_rng(i).standard_normal((n, n), dtype=np.float32) for i in (0, 1))
    call = lambda: a @ b
else:
    import torch
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    a, b, layer = torch.randn(n, n), torch.randn(n, n), torch.nn.Linear(n, n)
    call = (lambda: a @ b) if lib == "torch" else (lambda: layer(a))
calls = 200
blocks = []
for _ in range(8):
    start = time.perf_counter()
    for _ in range(calls):
        call()
    blocks.append((time.perf_counter() - start) / calls)
best = min(blocks[1:])  # the first block warms up (JAX compiles)
print(json.dumps({"lib": lib, "us": round(best * 1e6, 1), "gflops": round(2 * n ** 3 / best / 1e9, 1)}))
"""
RATIO_LINE = re.compile(r"ratio|ours/", re.IGNORECASE)
RATIO = re.compile(r"(?<![>=\d.])(?<!>= )(\d+(?:\.\d+)?)x\b")  # not a bound such as ">= 2x"

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


def side_run(o, name: str, threads: int | None) -> dict:
    """One run of a side of COMPARISONS on the CPU: its env steps/s of training (ours: the summary's sps;
    SB3: around learn()), its evaluation if it has one, and timed by CPU, its training loop's CPU seconds."""
    import torch

    target, settings = COMPARISONS[o.comparison]["sides"][name]
    settings = {k: o.total_timesteps if v == "steps" else v for k, v in settings.items()}
    run = dict(
        seed=o.seed,
        total_timesteps=o.total_timesteps,
        learning_starts=o.learning_starts,
        torch_threads=threads,
        device="cpu",
    )
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.process_time()
    if (
        target.islower()
    ):  # our script's train(), without the run's values its Args lack (A2C's learning_starts)
        module = importlib.import_module(target)
        fields = {f.name for f in dataclasses.fields(module.Args)}
        run = {k: v for k, v in run.items() if k in fields and v is not None}
        with tempfile.TemporaryDirectory() as tmp:
            s = module.train(module.Args(**run, **settings, run_dir=tmp, progress=False))
        r = {"sps": s["sps"], "eval": s["eval_return_mean"]}
    else:  # Stable-Baselines3's learn()
        import gymnasium as gym
        import numpy as np
        import stable_baselines3
        from stable_baselines3.common import env_util, evaluation, noise, vec_env

        cls, env_id, episodes = (
            getattr(stable_baselines3, target),
            settings.pop("env"),
            settings.pop("eval_episodes", 0),
        )
        n_envs, later = settings.pop("n_envs", 1), settings.pop("set", {})
        if env_id == ATARI:  # the DQN paper's preprocessing, four frames stacked
            import ale_py

            gym.register_envs(ale_py)  # gymnasium 1.x finds ALE's ids only once registered
            env = vec_env.VecFrameStack(env_util.make_atari_env(env_id, n_envs=1, seed=o.seed), n_stack=4)
        else:
            env = env_util.make_vec_env(env_id, n_envs=n_envs, seed=o.seed)
        if "action_noise" in settings:
            std = settings["action_noise"] * env.action_space.high
            settings["action_noise"] = noise.NormalActionNoise(np.zeros_like(std), std)
        run = {k: v for k, v in run.items() if k in inspect.signature(cls).parameters and v is not None}
        model = cls(env=env, **run, **settings, verbose=0)
        for k, v in later.items():
            setattr(model, k, v)
        start, wall = time.process_time(), time.perf_counter()
        model.learn(total_timesteps=o.total_timesteps)
        r = {"sps": model.num_timesteps / (time.perf_counter() - wall)}
        if episodes:
            r["eval"] = float(
                evaluation.evaluate_policy(
                    model, gym.make(env_id), n_eval_episodes=episodes, deterministic=True
                )[0]
            )
    if COMPARISONS[o.comparison]["rate"] == "cpu":
        r["loop_cpu_seconds"] = time.process_time() - start
    return r


def run_timed(cmd: list[str], cwd: str, env: dict) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd`; (the finished process, CPU seconds, wall seconds). CPU time, which a busy machine disturbs
    least, is the child's own (os.wait4): children timed at once from two threads each get theirs."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
    return done, usage.ru_utime + usage.ru_stime, wall


def write(path: str | None, record: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=2))


def curve(frames: list[int], returns: list[float], total: int, points: int = 100) -> list[list[float]]:
    """The MinAtar figure's convention as a curve: at every `total / points` frames, the mean of the last 100
    training episodes finished by then; [[frame, mean], ...], from the first point with an episode."""
    ends = [
        (at, bisect.bisect_right(frames, at)) for at in (total * i // points for i in range(1, points + 1))
    ]
    return [[at, round(sum(returns[max(0, k - 100) : k]) / min(k, 100), 3)] for at, k in ends if k]


def command(o, side: str, threads: int | None, scratch: Path) -> list[str]:
    """A run of `side` as a command line: a peer's own script, or this tool as one side (`--side`)."""
    steps = [
        "--seed",
        str(o.seed),
        "--total-timesteps",
        str(o.total_timesteps),
        "--learning-starts",
        str(o.learning_starts),
    ]
    c = COMPARISONS[o.comparison]
    if side.startswith("cleanrl"):  # timed by CPU: its loop from its first env reset on (CLEANRL_LOOP)
        loop = ["-c", CLEANRL_LOOP] if c["rate"] == "cpu" else []
        flags = [str(o.total_timesteps) if a == "steps" else a for a in c["cleanrl"]]
        return [o.cleanrl_python, *loop, str(Path(o.cleanrl).resolve() / c["sides"][side]), *flags, *steps]
    if o.comparison == "minatar" and side == "peer":
        return [
            sys.executable,
            "-c",
            MINATAR_PEER.format(
                folder=str(Path(o.peer).resolve().parent),
                game=o.game,
                output=str(scratch / "peer"),
                frames=o.total_timesteps,
            ),
        ]
    if o.comparison == "minatar":
        env_id = "MinAtar/" + "".join(w.capitalize() for w in o.game.split("_")) + "-v0"
        cell = next(cell for cell in load_suite("minatar_paper").cells if cell.env == env_id)
        shutil.rmtree(scratch / "ours", ignore_errors=True)
        flags = dict(
            cell.settings,
            env=env_id,
            seed=o.seed,
            total_timesteps=o.total_timesteps,
            torch_threads=1,
            eval_episodes=1,
            progress=False,
            run_dir=scratch / "ours",
            exploration_fraction=min(1.0, 100_000 / o.total_timesteps),
        )  # decay over the peer's 100k steps
        return [sys.executable, str(script_path("dqn")), *cli_flags(flags)]
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        o.comparison,
        "--side",
        side,
        *steps,
        *([] if threads is None else [f"--side-threads={threads}"]),
    ]


def run_side(o, side: str, setting: str, seed: int, scratch: Path) -> dict:
    """One run of a side as a child process, timed: its record (times, the figures it printed, or its error)."""
    c, threads = COMPARISONS[o.comparison], None if setting == "default" else int(setting)
    env = dict(
        ONE_THREAD_ENV
        if setting == "1"
        else {}
        if setting == "default"
        else {"OMP_NUM_THREADS": setting, "MKL_NUM_THREADS": setting}
    )
    if side.startswith("cleanrl"):
        env["PYTHONPATH"] = str(Path(o.cleanrl).resolve())
    o = argparse.Namespace(**{**vars(o), "seed": seed})
    pin = ["taskset", "-c", "0"] if c.get("pin") and setting == "1" else []
    folder = scratch / side
    folder.mkdir(parents=True, exist_ok=True)
    cwd = (
        str(ROOT) if o.comparison == "minatar" and side == "ours" else str(folder)
    )  # CleanRL writes runs/ where it runs
    proc, cpu, wall = run_timed(pin + command(o, side, threads, folder), cwd, {**os.environ, **env})
    r = {
        "side": side,
        "setting": setting,
        "seed": seed,
        "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
        "returncode": proc.returncode,
    }
    if proc.returncode != 0:
        return {**r, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    if o.comparison == "minatar":  # its training returns and the frames they ended at
        if side == "ours":
            episodes = read_curves(metrics_file(folder / "ours"))[1]
            returns, frames = [x for _, x in episodes], [step for step, _ in episodes]
        else:
            import torch

            data = torch.load(str(folder / "peer") + "_data_and_weights", weights_only=False)
            returns, frames = [float(x) for x in data["returns"]], [int(x) for x in data["frame_stamps"]]
        r.update(
            episodes=len(returns),
            last_100=sum(returns[-100:]) / len(returns[-100:]) if returns else None,
            curve=curve(frames, returns, o.total_timesteps),
        )
    elif proc.stdout.strip() and proc.stdout.strip().splitlines()[-1].startswith("{"):
        r.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    seconds = {"loop": o.total_timesteps / r["sps"] if r.get("sps") else None, "wall": wall, "cpu": cpu}[
        c["rate"]
    ]
    r["rate"] = round(o.total_timesteps / seconds, 1) if seconds else None
    if "loop_cpu_seconds" in r:
        r["loop_rate"] = round(o.total_timesteps / r["loop_cpu_seconds"], 1)
    return r


def spread(xs: list[float], unit: str = "x") -> str:
    f = "{:.2f}" if unit else "{:,.1f}"
    return f"median {f.format(median(xs))}{unit} [{f.format(min(xs))}, {f.format(max(xs))}]"


def compare(o) -> int:
    """The sides' runs, `--repeats` times for each `--threads` setting, then each pair's ratio per repeat."""
    import torch  # for the record's version only: the runs are child processes

    c = COMPARISONS[o.comparison]
    for s in o.threads:
        if not (s.isdigit() and int(s) > 0 or s == "default" and s in c["defaults"]["threads"]):
            raise BadInput(f"--threads takes positive numbers (ddpg: or 'default'), got {s!r}")
    if c.get("pin") and "1" in o.threads and shutil.which("taskset") is None:
        raise BadInput("the 1-thread setting pins processes with taskset, which is not installed")
    cleanrl = {k for k in c["sides"] if k.startswith("cleanrl")}
    missing = [
        c["sides"][k] for k in cleanrl if o.cleanrl and not (Path(o.cleanrl) / c["sides"][k]).is_file()
    ]
    if missing:
        raise BadInput(f"--cleanrl {o.cleanrl} is not a CleanRL checkout (no {missing[0]} in it)")
    if o.comparison == "minatar" and not Path(o.peer).is_file():
        raise BadInput(f"no peer at {o.peer}: give the path of MinAtar's examples/dqn.py with --peer")
    dropped = {s for s, off in (("sb3", o.no_sb3), ("naf", o.no_naf)) if off} | (
        set() if o.cleanrl else cleanrl
    )
    pairs = [(a, b) for a, b in c["pairs"] if not {a, b} & dropped]
    if not pairs:
        raise BadInput("nothing to compare: give --cleanrl, or leave out --no-sb3")
    paired = {s for pair in c["pairs"] for s in pair}
    sides = [
        s for s in c["sides"] if s not in dropped and (s not in paired or any(s in pair for pair in pairs))
    ]
    unit = "frames" if o.comparison == "minatar" else "steps"
    print(
        f"{c['what'].split(' (')[0]}: {o.total_timesteps:,} {unit}, learning from {o.learning_starts:,}; sides {', '.join(sides)}; "
        f"threads {', '.join(o.threads)}; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    runs, lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for setting in o.threads:
            for k in range(o.repeats):
                seed = o.seed + k if c.get("new_seeds") else o.seed
                order = sides[k % len(sides) :] + sides[: k % len(sides)]
                # --parallel: at once, each child timed by its own CPU time (os.wait4); else one by one
                with concurrent.futures.ThreadPoolExecutor(len(order) if o.parallel else 1) as pool:
                    done = list(
                        pool.map(
                            functools.partial(
                                run_side, o, setting=setting, seed=seed, scratch=Path(tmp) / str(k)
                            ),
                            order,
                        )
                    )
                for r in done:
                    r["repeat"] = k
                    runs.append(r)
                    figs = "".join(
                        f", {key} {r[key]:.1f}"
                        for key in ("eval", "last_100", "loop_rate")
                        if r.get(key) is not None
                    )
                    print(
                        f"run {k + 1}/{o.repeats} {setting} thread(s) {r['side']:>13}: "
                        + (
                            f"FAILED ({r['returncode']}): {r['error']}"
                            if "error" in r
                            else f"{r['rate'] or 0:,.1f} {unit}/s ({c['rate']}; {r['cpu_seconds']} s CPU, {r['wall_seconds']} s wall{figs})"
                        ),
                        flush=True,
                    )
            ok = [r for r in runs if r["setting"] == setting and "error" not in r]
            for side in sides:
                if rates := [r["rate"] for r in ok if r["side"] == side and r["rate"]]:
                    lines.append(f"{setting} thread(s): {side} {unit}/s ({c['rate']}) {spread(rates, '')}")
            for a, b in pairs:
                by = {(r["side"], r["repeat"]): r for r in ok}
                both = [(by[a, k], by[b, k]) for k in range(o.repeats) if (a, k) in by and (b, k) in by]
                if both:
                    lines.append(
                        f"{setting} thread(s): ratio {a}/{b} per repeat: {spread([x['rate'] / y['rate'] for x, y in both])}"
                        + (
                            "; training loop alone "
                            + spread([x["loop_rate"] / y["loop_rate"] for x, y in both], " (ratio)")
                            if all("loop_rate" in x and "loop_rate" in y for x, y in both)
                            else ""
                        )
                    )
    print("\n" + "\n".join(lines), flush=True)
    profiles = profile_atari(o) if o.profile else {}
    settings = {
        k: getattr(o, k)
        for k in (
            "total_timesteps",
            "learning_starts",
            "seed",
            "repeats",
            "threads",
            "cleanrl",
            "parallel",
            "out",
        )
    }
    write(
        o.out,
        {
            "comparison": o.comparison,
            "settings": settings,
            "runs": runs,
            "summary": lines,
            "profiles": profiles,
            "date": time.strftime("%Y-%m-%d"),
            "code": code_state(),
            "machine": {**machine_info(), "torch": torch.__version__},
        },
    )
    if o.plot:
        plot_curves(o, runs)
    return 1 if any("error" in r for r in runs) else 0


def profile_atari(o) -> dict:
    """dqn-atari: one more run of ours and SB3 under the torch profiler, one thread: the conv net's kernels' share."""
    from torch.profiler import ProfilerActivity, profile

    profiles = {}
    for name in ("ours", "sb3"):
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            side_run(o, name, 1)
        wall, events = time.perf_counter() - start, prof.key_averages()
        kernels = sum(e.self_cpu_time_total for e in events if e.key in KERNELS) / 1e6
        top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
        p = profiles[name] = {
            "wall_seconds": round(wall, 1),
            "kernel_seconds": round(kernels, 1),
            "kernel_share": round(kernels / wall, 3),
            "top_ops": [(e.key, round(e.self_cpu_time_total / 1e6, 2)) for e in top],
        }
        print(
            f"profile {name}: {p['wall_seconds']} s, of which the conv net's kernels {p['kernel_seconds']} s "
            f"({100 * p['kernel_share']:.0f}%); top ops {p['top_ops'][:5]}",
            flush=True,
        )
    return profiles


def plot_curves(o, runs: list[dict]) -> None:
    """minatar --plot: both sides' last-100 training return against frames, each repeat a line."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing to close

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for name, color, label in (
        ("ours", "tab:blue", "ours (algos/dqn.py)"),
        ("peer", "tab:orange", "MinAtar's dqn.py"),
    ):
        for i, r in enumerate(r for r in runs if r["side"] == name and r.get("curve")):
            ax.plot(*zip(*r["curve"]), color=color, alpha=0.8, label=label if i == 0 else None)
    ax.set(
        xlabel="frames (env steps)",
        ylabel="mean of the last 100 training episodes",
        title=f"DQN, MinAtar {o.game}, the example agent's settings",
    )
    ax.legend()
    fig.tight_layout()
    Path(o.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(o.plot, dpi=100)


def sps_while_learning(run_dir: Path, after: int) -> tuple[float | None, int]:
    """Env steps per wall second between the first and last logged rows past step `after`; (rate, rows)."""
    with open(metrics_file(run_dir)) as f:
        rows = [
            (int(r["global_step"]), int(r["sps"]))
            for r in csv.DictReader(f)
            if r.get("sps") and int(r["global_step"]) > after
        ]
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
    if cell := next((c for c in cells if (c.algo, c.env) == tuple(parts[1:])), None):
        return cell
    raise BadInput(f"--cells {spec!r}: no cell {parts[1]} {parts[2]} in suite {parts[0]}")


def device_run(spec: str, cell, device: str, o, scratch: Path) -> dict:
    """The cell's script on `device`[:mode] (a flag: --compile, --cudagraphs), its learning_starts cut to
    a quarter of the steps: its rate while learning (sps_while_learning) and its summary's figures."""
    threads, (where, _, mode) = int(o.threads[0]), device.partition(":")
    run_dir = scratch / f"{spec.replace(':', '_').replace('/', '-')}_{device}"
    flags = dict(
        cell.settings,
        env=cell.env,
        seed=1,
        total_timesteps=o.total_timesteps,
        device=where,
        torch_threads=threads,
        eval_episodes=1,
        eval_every=0,
        progress=False,
        run_dir=run_dir,
    )
    flags.update({mode: True} if mode else {})
    defaults = {f.name: f.default for f in dataclasses.fields(importlib.import_module(cell.algo).Args)}
    after = 0
    if "learning_starts" in defaults:
        flags["learning_starts"] = after = min(
            int(flags.get("learning_starts", defaults["learning_starts"])), o.total_timesteps // 4
        )
    done, _, wall = run_timed(
        [sys.executable, str(script_path(cell.algo)), *cli_flags(flags)],
        str(ROOT),
        {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)},
    )
    if done.returncode != 0:
        return {
            "cell": spec,
            "device": device,
            "error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"],
        }
    rate, rows = sps_while_learning(run_dir, after)
    summary = json.loads((metrics_file(run_dir).parent / "summary.json").read_text())
    measured = "logged rows past learning_starts"
    if (
        rate is None and after == 0
    ):  # no heatup (a2c, n_step_q, sarsa) and too few logged rows: the whole run's figure
        rate, measured = summary.get("sps"), "the whole run (summary.json)"
    return {
        "cell": spec,
        "device": device,
        "steps": o.total_timesteps,
        "learning_starts": after,
        "learning_sps": round(rate, 1) if rate else None,
        "measured_over": measured,
        "rows": rows,
        "wall_seconds": round(wall, 1),
        "summary_device": summary.get("device"),
        "updates": summary.get("updates"),
        "compile_seconds": summary.get("compile_seconds"),
    }


def compare_devices(o) -> int:
    import torch

    if any(d.startswith("cuda") for d in o.devices) and not torch.cuda.is_available():
        raise BadInput("--devices names cuda, but torch sees no CUDA GPU")
    cells = {spec: find_cell(spec) for spec in o.cells}  # a wrong name fails before any run
    cpu_runs = [
        (c, d) for c in o.cells for d in o.devices if d.startswith("cpu")
    ]  # device[:compile|cudagraphs]
    parallel = (os.cpu_count() or 1) > len(cpu_runs) + 1  # a core for each CPU run and one for the GPU runs
    # the CPU runs, then the others one after another: all in one chain where the machine lacks the cores
    with (
        tempfile.TemporaryDirectory(prefix="speed_devices_", ignore_cleanup_errors=True) as scratch,
        concurrent.futures.ThreadPoolExecutor(len(cpu_runs) + 1 if parallel else 1) as pool,
    ):
        cpu_jobs = {(c, d): pool.submit(device_run, c, cells[c], d, o, Path(scratch)) for c, d in cpu_runs}
        chain = pool.submit(
            lambda: {
                (c, d): device_run(c, cells[c], d, o, Path(scratch))
                for c in o.cells
                for d in o.devices
                if not d.startswith("cpu")
            }
        )
        results = {**{key: job.result() for key, job in cpu_jobs.items()}, **chain.result()}
    m = {
        **machine_info(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu_runs_in_parallel": parallel,
    }
    print(
        f"{m['gpu'] or 'no GPU'}; {m['cpu_count']} logical CPUs; torch {m['torch']}; {o.total_timesteps:,} steps, {o.threads[0]} torch thread(s)"
    )
    others = [d for d in o.devices if d != "cpu"] if "cpu" in o.devices else []
    print(
        f"{'cell':44s}"
        + "".join(f"{d + ' sps':>20s}" for d in o.devices)
        + "".join(f"{d + '/cpu':>20s}" for d in others)
    )
    for c in o.cells:  # each device's rate (*: the whole run's), then each one's against the CPU's
        rates = [
            "failed"
            if "error" in r
            else "too short"
            if not r["learning_sps"]
            else f"{r['learning_sps']}{'*' if r['measured_over'].startswith('the whole run') else ''}"
            for r in (results[(c, d)] for d in o.devices)
        ]
        cpu = results.get((c, "cpu"), {}).get("learning_sps")
        ratios = [
            f"{rate / cpu:.2f}" if (rate := results[(c, d)].get("learning_sps")) and cpu else "-"
            for d in others
        ]
        print(f"{c:44s}" + "".join(f"{x:>20}" for x in rates + ratios))
    if any(r.get("measured_over", "").startswith("the whole run") for r in results.values()):
        print("* the whole run (too few logged rows while learning): start-up included")
    for r in results.values():
        if "error" in r:
            print(f"{r['cell']} on {r['device']} failed: {r['error'][0]}")
    settings = {
        "cells": o.cells,
        "devices": o.devices,
        "steps": o.total_timesteps,
        "threads": int(o.threads[0]),
        "out": o.out,
    }
    write(
        o.out,
        {
            "settings": settings,
            "machine": m,
            "code": code_state(),
            "date": time.strftime("%Y-%m-%d"),
            "runs": list(results.values()),
        },
    )
    return 0


def compare_gemm(o) -> int:
    """gemm: each library's [256, 256] product under the CPU's own kernels and under SECOND_KERNELS."""
    libs = [("torch", sys.executable), ("torch-linear", sys.executable), ("numpy", sys.executable)]
    libs += [("jax", o.cleanrl_python)] if o.cleanrl_python != "python3" else []
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    results = []
    for kernels, variables in (("own", {}), ("second", SECOND_KERNELS)):
        for lib, python in libs:
            env = {**os.environ, **ONE_THREAD_ENV, "OPENBLAS_NUM_THREADS": "1", **variables}
            done = subprocess.run(
                [*pin, python, "-c", GEMM_CHILD, lib, str(GEMM_SIZE)], env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                raise BadInput(
                    f"{lib} under the {kernels} kernels failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
                )
            results.append(
                {
                    **json.loads(done.stdout.strip().splitlines()[-1]),
                    "kernels": kernels,
                    "variables": variables,
                }
            )
            print(
                f"{kernels:7s} kernels  {lib:13s} {results[-1]['us']:8.1f} us  {results[-1]['gflops']:6.1f} GFLOP/s",
                flush=True,
            )
    write(
        o.out,
        {
            "settings": {"size": GEMM_SIZE, "threads": 1},
            "machine": machine_info(),
            "code": code_state(),
            "date": time.strftime("%Y-%m-%d"),
            "runs": results,
        },
    )
    return 0


def parse(output: str) -> tuple[list[str], list[float]]:
    """A comparison's closing lines, and every 'N.NNx' on lines that talk about a ratio."""
    lines = [x.rstrip() for x in output.splitlines() if x.strip() and "warn" not in x.lower()]
    per_run = (
        "run ",
        "repeat ",
        "ours  ",
        "sb3   ",
        "[",
    )  # the summary block: the trailing lines after the per-run lines
    closing = [*takewhile(lambda x: not x.lower().startswith(per_run), lines[::-1])][::-1][-30:] or lines[-3:]
    return closing, [float(m) for x in closing if RATIO_LINE.search(x) for m in RATIO.findall(x)]


def run_one(name: str, o: argparse.Namespace, out_dir: Path) -> dict:
    """One collected comparison in a child process (`o`: --quick, --timeout, --cleanrl): its log, and its record
    (<out>/<name>.json) with its closing lines and ratios."""
    shown = out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir
    raw = f"{shown}/speed_{name.replace('-', '_')}_raw.json"  # `{raw}` in the flags: the raw JSON beside the record
    argv = [name, *(a.format(raw=raw) for a in COMPARISONS[name]["quick" if o.quick else "full"])]
    if o.cleanrl and name == "ddpg":
        argv += ["--cleanrl", str(Path(o.cleanrl).resolve())] + (
            ["--cleanrl-python", o.cleanrl_python] if o.cleanrl_python else []
        )
    command = " ".join(["python", "benchmarks/speed.py", *argv])
    record = {"name": name, "command": command, "quick": o.quick, "started": time.strftime("%Y-%m-%d %H:%M")}
    print(f"{name}: {command}", flush=True)
    start, log = time.perf_counter(), out_dir / f"{name}.log"
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=o.timeout or None,
        )
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        output, code = (e.stdout or b"").decode(errors="ignore"), None  # bytes, whatever `text` says
        record["error"] = f"timed out after {o.timeout:.0f} s"
    log.write_text(output)
    closing, ratios = parse(proc.stdout if code is not None else output)
    record.update(
        returncode=code,
        seconds=round(time.perf_counter() - start, 1),
        summary_lines=closing,
        ratios=ratios,
        log=f"{shown}/{name}.log",
        finished=time.strftime("%Y-%m-%d %H:%M"),
    )
    if code not in (0, None):
        record["error"] = (output.strip().splitlines() or ["no output"])[-1][:200]
    for x in closing:
        print(f"  {x}")
    print(f"  -> ratios {ratios}, exit {code}, {record['seconds']} s", flush=True)
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="comparisons:\n"
        + "\n".join(
            f"  {n}: {c['what']}\n    timing: {c['timing']}\n    figure: {c['figure']}"
            for n, c in COMPARISONS.items()
        ),
    )
    p.add_argument(
        "comparison",
        nargs="?",
        choices=sorted(COMPARISONS),
        help="run this one comparison (default: the collected ones)",
    )
    p.add_argument("--only", nargs="+", choices=COLLECTED, help="these collected comparisons only")
    p.add_argument(
        "--quick", action="store_true", help="tiny budgets: a plumbing check, the numbers mean nothing"
    )
    p.add_argument(
        "--out",
        default=None,
        help="collected: folder for the .json and .log files (default benchmarks/results/speed; "
        "with --quick a temporary folder); one comparison: its raw JSON file",
    )
    p.add_argument("--timeout", type=float, default=0, help="seconds per collected comparison (0: none)")
    p.add_argument(
        "--cleanrl", default=None, help="a CleanRL checkout: ddpg and dqn-atari also time its scripts"
    )
    p.add_argument(
        "--cleanrl-python", default=None, help="the Python of CleanRL's environment (default python3)"
    )
    p.add_argument("--total-timesteps", "--frames", "--steps", type=int, help="env steps per run")
    p.add_argument("--learning-starts", type=int, help="env steps before learning")
    p.add_argument("--repeats", type=int, help="runs of each side, alternating")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--threads",
        nargs="+",
        help="thread settings, each measured: a number, or 'default' (no setting at all)",
    )
    p.add_argument("--no-sb3", action="store_true", help="ddpg, dqn-atari: skip Stable-Baselines3")
    p.add_argument("--no-naf", action="store_true", help="ddpg: skip the NAF timing")
    p.add_argument(
        "--profile",
        action="store_true",
        help="dqn-atari: one more run of ours and SB3 under the torch profiler",
    )
    p.add_argument(
        "--peer", default="../shared/peers/minatar/dqn.py", help="minatar: path of MinAtar's examples/dqn.py"
    )
    p.add_argument("--game", default="breakout", help="minatar: the game")
    p.add_argument(
        "--parallel", action="store_true", help="the sides of a repeat at once (needs an idle core each)"
    )
    p.add_argument("--plot", default=None, help="minatar: draw both sides' return curves to this PNG")
    p.add_argument("--cells", nargs="+", default=DEFAULT_CELLS, help="devices: suite:algo:env cells")
    p.add_argument(
        "--devices",
        nargs="+",
        default=["cpu", "cuda"],
        help="devices: where to run each cell, each device[:compile|cudagraphs] (e.g. cuda:cudagraphs)",
    )
    p.add_argument(
        "--side", help=argparse.SUPPRESS
    )  # internal: one run of one side in this process, its figures printed
    p.add_argument("--side-threads", type=int, default=None, help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    if o.comparison:
        unset = {"learning_starts": 0, "cleanrl_python": "python3", **COMPARISONS[o.comparison]["defaults"]}
        vars(o).update({k: v for k, v in unset.items() if getattr(o, k) is None})
        if o.side:
            print(json.dumps(side_run(o, o.side, o.side_threads)))
            return 0
        try:
            return {"devices": compare_devices, "gemm": compare_gemm}.get(o.comparison, compare)(o)
        except BadInput as e:
            return fail(f"speed {o.comparison}", e)
    if o.cleanrl and not (Path(o.cleanrl) / "cleanrl").is_dir():
        p.error(f"--cleanrl {o.cleanrl} is not a CleanRL checkout (no cleanrl/ folder in it)")
    out_dir = Path(
        o.out or (Path(tempfile.gettempdir()) / "rl-speed-quick" if o.quick else BENCH / "results" / "speed")
    ).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    codes = [run_one(name, o, out_dir)["returncode"] for name in o.only or COLLECTED]
    print(f"wrote {out_dir}/*.json; `python benchmarks/report.py --suite classic` puts them in the report")
    return 1 if any(code != 0 for code in codes) else 0


if __name__ == "__main__":
    sys.exit(main())
