"""The share of a default run's wall time that each script's numpy acting fast path saves.

    python benchmarks/results/speed/fastpath_share.py calls [--repeats 15]      # per-call times
    python benchmarks/results/speed/fastpath_share.py prefix [--repeats 2]      # short runs, both ways
    python benchmarks/results/speed/fastpath_share.py run ALGO fast|plain -- FLAGS   # one run (internal)

`calls`: in one process, one torch thread, each script's acting function built by the script's own
function (`greedy_policy`, `deterministic_policy`, a2c's `numpy_head`) on a freshly built default
network, and the same function with the fast path ruled out (`numpy_mlp` replaced by `lambda *a:
None` in the script's module, so the script falls back to its forward()-based path). Alternating
blocks of calls, median per-call time of each; saved seconds = (t_plain - t_fast) x the acting calls
of a default run (the expected count of calls that run the network: DQN-style epsilon-greedy skips
the network where every env explores), plus the final evaluation's calls at its own batch. The
share divides by the median wall_seconds of the committed `defaults` runs
(benchmarks/results/defaults/runs/*/result.json).

`prefix`: short runs of each script at its defaults (fewer steps), fast and plain alternating, the
run's own wall_seconds from summary.json, against the saving the per-call times predict for them.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
ALGOS = ["dqn", "n_step_q", "sarsa", "a2c", "ddpg", "naf"]


def load(algo: str):
    spec = importlib.util.spec_from_file_location(f"fp_{algo}", ROOT / "algos" / f"{algo}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up
    spec.loader.exec_module(mod)
    return mod


def plain_numpy_mlp(*a, **k):
    return None


def build(algo: str, mod, fast: bool):
    """(training acting call, final-evaluation acting call, the training envs' obs batches,
    the evaluation obs batches) at the script's defaults."""
    import torch

    from common.network import NetworkWrapper

    cpu = torch.device("cpu")
    args = mod.Args()
    envs = mod.make_env(args.env_id, args.num_envs)
    if algo == "ddpg":
        net = NetworkWrapper(mod.build_actor(args, envs), lr=1e-3, target=True).online
    else:
        net = NetworkWrapper(mod.build_network(args, envs), lr=1e-3, target=True).online
    saved = mod.numpy_mlp
    if not fast:
        mod.numpy_mlp = plain_numpy_mlp
    try:
        if algo in ("dqn", "n_step_q", "sarsa"):
            greedy = mod.greedy_policy(net, cpu)
            train_call = eval_call = greedy  # select_actions wraps it (same on both paths)
        elif algo == "a2c":
            head = mod.numpy_head(net, cpu)
            rng = np.random.default_rng(0)
            std = None if net.log_std is None else net.log_std.detach().exp().numpy()

            def train_call(obs):
                return mod.sample_actions(head(obs), std, rng)

            eval_call = mod.greedy_policy(net, cpu, envs.single_action_space)
        else:  # ddpg, naf: mu(s) + noise, clipped (the loop's line), evaluation mu(s)
            policy = mod.deterministic_policy(net, cpu)
            space = envs.single_action_space
            low, high = space.low.astype(np.float32), space.high.astype(np.float32)
            noise = mod.ExplorationNoise(
                args.noise, args.noise_std, args.ou_theta, (high - low) / 2, args.num_envs,
                np.random.default_rng(0),
            )

            def train_call(obs):
                return np.clip(policy(obs) + noise(), low, high).astype(np.float32)

            eval_call = policy
    finally:
        mod.numpy_mlp = saved
    envs.close()
    return args, train_call, eval_call


def obs_pool(mod, args, n_envs: int, n: int = 64) -> list[np.ndarray]:
    """n observation batches [n_envs, ...] from the env under random actions."""
    envs = mod.make_env(args.env_id, n_envs)
    obs, _ = envs.reset(seed=0)
    pool = []
    for _ in range(n):
        pool.append(np.asarray(obs).reshape(n_envs, -1).astype(np.float32))
        obs, *_ = envs.step(envs.action_space.sample())
    envs.close()
    return pool


def per_call(fns: dict, pool, calls: int, repeats: int) -> dict:
    """median us per call of each function, alternating blocks of `calls` calls: wall time
    (perf_counter, `k`) and this thread's CPU time (thread_time, `k_cpu`: not the time the loaded
    machine's scheduler gives to other processes)."""
    times = {k: [] for k in fns} | {f"{k}_cpu": [] for k in fns}
    for f in fns.values():  # warm-up
        for i in range(200):
            f(pool[i % len(pool)])
    for _ in range(repeats):
        for k, f in fns.items():
            t, c = time.perf_counter(), time.thread_time()
            for i in range(calls):
                f(pool[i % len(pool)])
            times[f"{k}_cpu"].append((time.thread_time() - c) / calls * 1e6)
            times[k].append((time.perf_counter() - t) / calls * 1e6)
    return {k: statistics.median(v) for k, v in times.items()} | {
        f"{k}_all": [round(x, 2) for x in v] for k, v in times.items()
    }


def expected_calls(algo: str, mod, steps: int, eval_calls: int) -> tuple[float, int]:
    """(expected network calls in training, at most calls in training) for a run of `steps` env
    steps (--total-timesteps) at the defaults otherwise; the final evaluation adds its own calls
    (the longest of its episodes)."""
    args = mod.Args()
    B = args.num_envs
    if algo in ("a2c",):
        n = int(np.ceil(steps / B))
        return float(n), n
    if algo in ("ddpg", "naf"):
        n = max(0, steps - args.learning_starts) // B
        return float(n), n
    decay = args.exploration_fraction * steps  # the run's total_timesteps (a prefix's own)
    if algo == "dqn":
        t = np.arange(args.learning_starts + B, steps + 1, B, dtype=np.float64)
        eps = args.start_epsilon + (args.end_epsilon - args.start_epsilon) * np.minimum(1, t / decay)
        return float((1 - eps**B).sum()), len(t)
    t = np.arange(B, steps + 1, B, dtype=np.float64)
    frac = np.minimum(1, t / decay)[:, None]
    if algo == "n_step_q":  # per-env final epsilons, the run rng's first draw (paper_epsilons)
        totals = []
        for seed in range(1, 11):
            ends = mod.final_epsilons(args, np.random.default_rng(seed))[None, :]
            eps = args.start_epsilon + (ends - args.start_epsilon) * frac  # [steps/B, B]
            totals.append((1 - eps.prod(1)).sum())
        return float(np.mean(totals)), len(t)
    # sarsa: one call per step (the next actions) plus the first actions
    eps = args.start_epsilon + (args.end_epsilon - args.start_epsilon) * frac[:, 0]
    return float((1 - eps**B).sum() + 1), len(t) + 1


def committed(algo: str) -> dict:
    """the median wall_seconds of the committed defaults runs of `algo`, and their machines."""
    walls, machines, dates, load = [], set(), set(), []
    for f in sorted((ROOT / "benchmarks/results/defaults/runs").glob(f"{algo}__*/result.json")):
        r = json.loads(f.read_text())
        walls.append(r["summary"]["wall_seconds"])
        m = r.get("machine", {})
        machines.add(f"{m.get('cpu')} x{m.get('cpu_count')}")
        dates.add(r.get("started", "")[:10])
        load.append(m.get("load_average", [None])[0])
    return {
        "wall_median": statistics.median(walls),
        "wall_min": min(walls),
        "wall_max": max(walls),
        "runs": len(walls),
        "machines": sorted(machines),
        "dates": sorted(dates),
        "load_1min": load,
    }


def eval_calls_of(algo: str) -> int:
    return 500 if algo in ("dqn", "n_step_q", "sarsa", "a2c") else 200  # solved CartPole; Pendulum


def calls_cmd(repeats: int, only: list[str]) -> dict:
    import torch

    torch.set_num_threads(1)
    out = {}
    for algo in only:
        mod = load(algo)
        args, fast_train, fast_eval = build(algo, mod, fast=True)
        _, plain_train, plain_eval = build(algo, mod, fast=False)
        assert fast_train is not plain_train
        eval_batch = mod.eval_episodes_for(args.env_id) if algo in ("ddpg", "naf") else args.eval_episodes
        pool = obs_pool(mod, args, args.num_envs)
        epool = obs_pool(mod, args, eval_batch)
        n = 2000 if args.num_envs <= 8 else 500
        tr = per_call({"fast": fast_train, "plain": plain_train}, pool, n, repeats)
        ev = per_call({"fast": fast_eval, "plain": plain_eval}, epool, 200, repeats)
        calls, at_most = expected_calls(algo, mod, args.total_timesteps, 0)
        ecalls = eval_calls_of(algo)
        def saved_s(sfx, tr=tr, ev=ev, calls=calls, ecalls=ecalls):
            return ((tr["plain" + sfx] - tr["fast" + sfx]) * calls
                    + (ev["plain" + sfx] - ev["fast" + sfx]) * ecalls) * 1e-6

        saved, saved_cpu = saved_s(""), saved_s("_cpu")
        c = committed(algo)
        row = {
            "batch": args.num_envs,
            "t_fast_us": round(tr["fast"], 2),
            "t_plain_us": round(tr["plain"], 2),
            "t_fast_cpu_us": round(tr["fast_cpu"], 2),
            "t_plain_cpu_us": round(tr["plain_cpu"], 2),
            "train_blocks_us": {k: tr[f"{k}_all"] for k in ("fast", "plain", "fast_cpu", "plain_cpu")},
            "eval_batch": eval_batch,
            "eval_t_fast_us": round(ev["fast"], 2),
            "eval_t_plain_us": round(ev["plain"], 2),
            "eval_t_fast_cpu_us": round(ev["fast_cpu"], 2),
            "eval_t_plain_cpu_us": round(ev["plain_cpu"], 2),
            "saved_cpu_s": round(saved_cpu, 2),
            "share_cpu_pct": round(100 * saved_cpu / c["wall_median"], 2),
            "train_calls_expected": round(calls),
            "train_calls_at_most": at_most,
            "eval_calls": ecalls,
            "saved_s": round(saved, 2),
            "committed": c,
            "share_pct": round(100 * saved / c["wall_median"], 2),
        }
        out[algo] = row
        print(algo, json.dumps({k: v for k, v in row.items() if k != "train_blocks_us"}), flush=True)
    return out


PREFIX_STEPS = {"dqn": 30_000, "n_step_q": 100_000, "sarsa": 100_000, "a2c": 100_000,
                "ddpg": 15_000, "naf": 15_000}


def prefix_cmd(repeats: int, only: list[str], per_call_rows: dict | None, timed: bool = False,
               tag: str = "") -> dict:
    """with `timed`, each run also sums the time of its acting calls (by batch size)."""
    import os

    out = {}
    for algo in only:
        steps = PREFIX_STEPS[algo]
        walls = {"fast": [], "plain": []}
        acting: dict = {"fast": [], "plain": []}
        for r in range(repeats):
            for kind in (("fast", "plain") if r % 2 == 0 else ("plain", "fast")):
                run_dir = f"/tmp/fastpath_share/{algo}_{kind}_{r}{tag}"
                cmd = [sys.executable, __file__, "run", algo, kind, "--", "--seed", "1",
                       "--total-timesteps", str(steps), "--run-dir", run_dir, "--no-progress"]
                env = dict(os.environ)
                if timed:
                    env["FASTPATH_TIMES"] = f"{run_dir}.acting.json"
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
                s = json.loads(next(Path(run_dir).glob("*/summary.json")).read_text())
                walls[kind].append(s["wall_seconds"])
                if timed:
                    acting[kind].append(json.loads(Path(f"{run_dir}.acting.json").read_text()))
        fast, plain = statistics.median(walls["fast"]), statistics.median(walls["plain"])
        row = {"steps": steps, "walls": walls, "plain_over_fast": round(plain / fast, 3),
               "measured_saved_s": round(plain - fast, 2)}
        if timed:
            row["acting"] = acting
            B = mod_args_batch(algo)
            per = {k: [a[str(B)]["wall_s"] / a[str(B)]["calls"] * 1e6 for a in v] for k, v in acting.items()}
            cpu = {k: [a[str(B)]["cpu_s"] / a[str(B)]["calls"] * 1e6 for a in v] for k, v in acting.items()}
            row["in_loop_us"] = {k: round(statistics.median(v), 2) for k, v in per.items()}
            row["in_loop_cpu_us"] = {k: round(statistics.median(v), 2) for k, v in cpu.items()}
        if per_call_rows and algo in per_call_rows:
            p = per_call_rows[algo]
            calls, _ = expected_calls(algo, load(algo), steps, 0)
            row["predicted_saved_s"] = round(
                (p["t_plain_us"] - p["t_fast_us"]) * 1e-6 * calls
                + (p["eval_t_plain_us"] - p["eval_t_fast_us"]) * 1e-6 * p["eval_calls"], 2)
        out[algo] = row
        print(algo, json.dumps(row), flush=True)
    return out


ACTING_BUILDERS = {"dqn": "greedy_policy", "n_step_q": "greedy_policy", "sarsa": "greedy_policy",
                   "a2c": "numpy_head", "ddpg": "deterministic_policy", "naf": "deterministic_policy"}


def time_acting(mod, algo: str, path: str) -> None:
    """Wrap the script's acting-function builder so that every acting call inside the run is
    timed (perf_counter and thread_time, summed by batch size), written to `path` at exit."""
    import atexit
    import os  # noqa: F401

    name = ACTING_BUILDERS[algo]
    build_fn = getattr(mod, name)
    acc: dict = {}

    def builder(*a, **k):
        f = build_fn(*a, **k)

        def timed(obs):
            t, c = time.perf_counter(), time.thread_time()
            out = f(obs)
            cell = acc.setdefault(len(obs), [0, 0.0, 0.0])
            cell[0] += 1
            cell[1] += time.perf_counter() - t
            cell[2] += time.thread_time() - c
            return out

        return timed

    setattr(mod, name, builder)
    atexit.register(lambda: Path(path).write_text(json.dumps(
        {str(b): {"calls": n, "wall_s": w, "cpu_s": c} for b, (n, w, c) in acc.items()})))


def mod_args_batch(algo: str) -> int:
    return load(algo).Args().num_envs


def run_cmd(algo: str, kind: str, flags: list[str]) -> int:
    import os

    mod = load(algo)
    if kind == "plain":
        mod.numpy_mlp = plain_numpy_mlp  # train() builds its acting function through this name
    if os.environ.get("FASTPATH_TIMES"):
        time_acting(mod, algo, os.environ["FASTPATH_TIMES"])
    sys.argv = [str(ROOT / "algos" / f"{algo}.py"), *flags]
    return mod.main()


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "run":
        sep = sys.argv.index("--")
        sys.exit(run_cmd(sys.argv[2], sys.argv[3], sys.argv[sep + 1:]))
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--only", nargs="*", default=ALGOS)
    p.add_argument("--calls-json", default=None, help="calls' output, for prefix's prediction")
    p.add_argument("--out", default=None)
    p.add_argument("--timed", action="store_true", help="prefix: time the acting calls in the runs")
    p.add_argument("--tag", default="", help="prefix: suffix of the run folders")
    a = p.parse_args()
    if a.cmd == "calls":
        res = calls_cmd(a.repeats, a.only)
    else:
        rows = json.loads(Path(a.calls_json).read_text()) if a.calls_json else None
        res = prefix_cmd(a.repeats, a.only, rows, a.timed, a.tag)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
