"""Speed against the peers: every comparison of ours with a peer's implementation, one tool.

Each comparison is a table of speed.toml (`--help` lists them; commands: benchmarks/README.md); each run of a
side is a fresh child process. The sides alternate (in an order rotated per repeat) so that a slow spell on a
shared machine hits all of them; only the ratio within one invocation means anything. Alone, the tool runs the
collected ones one after another (never in parallel) into <out>/<name>.log and .json, for the reports; each
one ends with a JSON line of its closing lines and ratios, which goes into its .json.
Peers that are not this project's (CleanRL's scripts, MinAtar's examples/dqn.py) run unmodified from a
checkout given by path, in their own Python where they need one (CleanRL's: docs/speed.md, the set-up), by the
small programs in benchmarks/launchers/.
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
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
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

COMPARISONS = tomllib.loads((BENCH / "speed.toml").read_text())
# what `speed.py` alone runs, into every report
COLLECTED = [name for name, comparison in COMPARISONS.items() if "full" in comparison]
LAUNCHERS = BENCH / "launchers"  # the peers' and the libraries' child programs
ONE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}
# the conv net's kernels to profile_atari
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
SECOND_KERNELS = {
    "MKL_CBWR": "COMPATIBLE",
    "ATEN_CPU_CAPABILITY": "avx2",
    "OPENBLAS_CORETYPE": "Haswell",
}
GEMM_SIZE = 256


def side_run(opts, name: str, threads: int | None) -> dict:
    """One run of a side in speed.toml on the CPU: its env steps/s of training (ours: the summary's sps;
    SB3: around learn()), its evaluation if it has one, and timed by CPU, its training loop's CPU seconds."""
    import torch

    side = COMPARISONS[opts.comparison]["sides"][name]
    settings = {k: opts.total_timesteps if v == "steps" else v for k, v in side.items()}
    script, sb3_class = settings.pop("script", None), settings.pop("sb3", None)
    run = dict(
        seed=opts.seed,
        total_timesteps=opts.total_timesteps,
        learning_starts=opts.learning_starts,
        torch_threads=threads,
        device="cpu",
    )
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.process_time()
    if (
        script
    ):  # our script's train(), without the run's values its Args lack (A2C's learning_starts)
        module = importlib.import_module(script)
        fields = {f.name for f in dataclasses.fields(module.Args)}
        run = {k: v for k, v in run.items() if k in fields and v is not None}
        settings = {
            k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()
        }  # Args' tuples
        with tempfile.TemporaryDirectory() as tmp:
            summary = module.train(module.Args(**run, **settings, run_dir=tmp, progress=False))
        result = {"sps": summary["sps"], "eval": summary["eval_return_mean"]}
    else:  # Stable-Baselines3's learn()
        import gymnasium as gym
        import numpy as np
        import stable_baselines3
        from stable_baselines3.common import env_util, evaluation, noise, vec_env

        cls, env_id, episodes = (
            getattr(stable_baselines3, sb3_class),
            settings.pop("env"),
            settings.pop("eval_episodes", 0),
        )
        n_envs, later = settings.pop("n_envs", 1), settings.pop("set", {})
        if "NoFrameskip" in env_id:  # Atari: the DQN paper's preprocessing, four frames stacked
            import ale_py

            gym.register_envs(ale_py)  # gymnasium 1.x finds ALE's ids only once registered
            env = vec_env.VecFrameStack(
                env_util.make_atari_env(env_id, n_envs=1, seed=opts.seed), n_stack=4
            )
        else:
            env = env_util.make_vec_env(env_id, n_envs=n_envs, seed=opts.seed)
        if "action_noise" in settings:
            std = settings["action_noise"] * env.action_space.high
            settings["action_noise"] = noise.NormalActionNoise(np.zeros_like(std), std)
        run = {
            k: v for k, v in run.items() if k in inspect.signature(cls).parameters and v is not None
        }
        model = cls(env=env, **run, **settings, verbose=0)
        for k, v in later.items():
            setattr(model, k, v)
        start, wall = time.process_time(), time.perf_counter()
        model.learn(total_timesteps=opts.total_timesteps)
        result = {"sps": model.num_timesteps / (time.perf_counter() - wall)}
        if episodes:
            result["eval"] = float(
                evaluation.evaluate_policy(
                    model, gym.make(env_id), n_eval_episodes=episodes, deterministic=True
                )[0]
            )
    if COMPARISONS[opts.comparison]["rate"] == "cpu":
        result["loop_cpu_seconds"] = time.process_time() - start
    return result


def run_timed(
    cmd: list[str], cwd: str, env: dict
) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd`; (the finished process, CPU seconds, wall seconds). CPU time, which a busy machine disturbs
    least, is the child's own (os.wait4): children timed at once from two threads each get theirs."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(
            status
        )  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
    return done, usage.ru_utime + usage.ru_stime, wall


def write(path: str | None, record: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=2))


def curve(
    frames: list[int], returns: list[float], total: int, points: int = 100
) -> list[list[float]]:
    """The MinAtar figure's convention as a curve: at every `total / points` frames, the mean of the last 100
    training episodes finished by then; [[frame, mean], ...], from the first point with an episode."""
    ends = [
        (at, bisect.bisect_right(frames, at))
        for at in (total * i // points for i in range(1, points + 1))
    ]
    return [[at, round(sum(returns[max(0, k - 100) : k]) / min(k, 100), 3)] for at, k in ends if k]


def command(opts, side: str, threads: int | None, scratch: Path) -> list[str]:
    """A run of `side` as a command line: a peer's own script (by its launcher where it needs one), or this
    tool as one side (`--side`)."""
    steps = [
        "--seed",
        str(opts.seed),
        "--total-timesteps",
        str(opts.total_timesteps),
        "--learning-starts",
        str(opts.learning_starts),
    ]
    comparison = COMPARISONS[opts.comparison]
    if side.startswith(
        "cleanrl"
    ):  # timed by CPU: its loop from its first env reset on (cleanrl_loop.py)
        timed = comparison["rate"] in ("cpu", "loop")
        loop = [str(LAUNCHERS / "cleanrl_loop.py")] if timed else []
        script = Path(opts.cleanrl).resolve() / comparison["sides"][side]["cleanrl"]
        flags = [
            str(opts.total_timesteps) if a == "steps" else a
            for a in comparison["cleanrl_flags"].split()
        ]
        return [opts.cleanrl_python, *loop, str(script), *flags, *steps]
    if opts.comparison == "minatar" and side == "peer":
        peer = [
            str(Path(opts.peer).resolve()),
            opts.game,
            str(scratch / "peer"),
            str(opts.total_timesteps),
        ]
        return [sys.executable, str(LAUNCHERS / "minatar_peer.py"), *peer]
    if opts.comparison == "minatar":
        env_id = "MinAtar/" + "".join(w.capitalize() for w in opts.game.split("_")) + "-v0"
        cell = next(cell for cell in load_suite("minatar_paper").cells if cell.env == env_id)
        shutil.rmtree(scratch / "ours", ignore_errors=True)
        flags = dict(
            cell.settings,
            env=env_id,
            seed=opts.seed,
            total_timesteps=opts.total_timesteps,
            torch_threads=1,
            eval_episodes=1,
            progress=False,
            run_dir=scratch / "ours",
            exploration_fraction=min(1.0, 100_000 / opts.total_timesteps),
        )  # decay over the peer's 100k steps
        return [sys.executable, str(script_path("dqn")), *cli_flags(flags)]
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        opts.comparison,
        "--side",
        side,
        *steps,
        *([] if threads is None else [f"--side-threads={threads}"]),
    ]


def run_side(opts, side: str, setting: str, seed: int, scratch: Path) -> dict:
    """One run of a side as a child process, timed: its record (times, the figures it printed, or its error)."""
    comparison, threads = (
        COMPARISONS[opts.comparison],
        None if setting == "default" else int(setting),
    )
    env = dict(
        ONE_THREAD_ENV
        if setting == "1"
        else {}
        if setting == "default"
        else {"OMP_NUM_THREADS": setting, "MKL_NUM_THREADS": setting}
    )
    if side.startswith("cleanrl"):
        env["PYTHONPATH"] = str(Path(opts.cleanrl).resolve())
    opts = argparse.Namespace(**{**vars(opts), "seed": seed})
    pin = ["taskset", "-c", "0"] if comparison.get("pin") and setting == "1" else []
    folder = scratch / side
    folder.mkdir(parents=True, exist_ok=True)
    cwd = (
        str(ROOT) if opts.comparison == "minatar" and side == "ours" else str(folder)
    )  # CleanRL writes runs/ where it runs
    proc, cpu, wall = run_timed(
        pin + command(opts, side, threads, folder), cwd, {**os.environ, **env}
    )
    result = {
        "side": side,
        "setting": setting,
        "seed": seed,
        "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
        "returncode": proc.returncode,
    }
    if proc.returncode != 0:
        return {**result, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    if opts.comparison == "minatar":  # its training returns and the frames they ended at
        if side == "ours":
            episodes = read_curves(metrics_file(folder / "ours"))[1]
            returns, frames = [x for _, x in episodes], [step for step, _ in episodes]
        else:
            import torch

            data = torch.load(str(folder / "peer") + "_data_and_weights", weights_only=False)
            returns, frames = (
                [float(x) for x in data["returns"]],
                [int(x) for x in data["frame_stamps"]],
            )
        result.update(
            episodes=len(returns),
            last_100=sum(returns[-100:]) / len(returns[-100:]) if returns else None,
            curve=curve(frames, returns, opts.total_timesteps),
        )
    else:  # the figures it printed (--side, cleanrl_loop.py), if any
        result.update(last_json(proc.stdout) or {})
    if side.startswith("cleanrl") and "loop_wall_seconds" in result:  # its loop's wall time
        result["sps"] = opts.total_timesteps / result["loop_wall_seconds"]
    loop_seconds = opts.total_timesteps / result["sps"] if result.get("sps") else None
    seconds = {"loop": loop_seconds, "wall": wall, "cpu": cpu}[comparison["rate"]]
    result["rate"] = round(opts.total_timesteps / seconds, 1) if seconds else None
    if "loop_cpu_seconds" in result:
        result["loop_rate"] = round(opts.total_timesteps / result["loop_cpu_seconds"], 1)
    return result


def last_json(stdout: str) -> dict | None:
    """The JSON object a child's output ends with: its figures, for the parent; None where it ends otherwise."""
    lines = stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None


def spread(xs: list[float], unit: str = "x") -> str:
    f = "{:.2f}" if unit else "{:,.1f}"
    return f"median {f.format(median(xs))}{unit} [{f.format(min(xs))}, {f.format(max(xs))}]"


def compare(opts) -> int:
    """The sides' runs, `--repeats` times for each `--threads` setting, then each pair's ratio per repeat."""
    import torch  # for the record's version only: the runs are child processes

    comparison = COMPARISONS[opts.comparison]
    for s in opts.threads:
        if not (
            s.isdigit() and int(s) > 0 or s == "default" and s in comparison["defaults"]["threads"]
        ):
            raise BadInput(f"--threads takes positive numbers (ddpg: or 'default'), got {s!r}")
    if comparison.get("pin") and "1" in opts.threads and shutil.which("taskset") is None:
        raise BadInput("the 1-thread setting pins processes with taskset, which is not installed")
    cleanrl = {k for k in comparison["sides"] if k.startswith("cleanrl")}
    missing = [
        comparison["sides"][k]["cleanrl"]
        for k in cleanrl
        if opts.cleanrl and not (Path(opts.cleanrl) / comparison["sides"][k]["cleanrl"]).is_file()
    ]
    if missing:
        raise BadInput(
            f"--cleanrl {opts.cleanrl} is not a CleanRL checkout (no {missing[0]} in it)"
        )
    if opts.comparison == "minatar" and not Path(opts.peer).is_file():
        raise BadInput(
            f"no peer at {opts.peer}: give the path of MinAtar's examples/dqn.py with --peer"
        )
    dropped = {s for s, off in (("sb3", opts.no_sb3), ("naf", opts.no_naf)) if off} | (
        set() if opts.cleanrl else cleanrl
    )
    pairs = [(a, b) for a, b in comparison["pairs"] if not {a, b} & dropped]
    if not pairs:
        raise BadInput("nothing to compare: give --cleanrl, or leave out --no-sb3")
    paired = {s for pair in comparison["pairs"] for s in pair}
    sides = [
        s
        for s in comparison["sides"]
        if s not in dropped and (s not in paired or any(s in pair for pair in pairs))
    ]
    unit = "frames" if opts.comparison == "minatar" else "steps"
    print(
        f"{comparison['what'].split(' (')[0]}: {opts.total_timesteps:,} {unit}, learning from {opts.learning_starts:,}; sides {', '.join(sides)}; "
        f"threads {', '.join(opts.threads)}; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    runs, lines, ratios = [], [], []  # ratios: each pair's median ratio, as its line shows it
    with tempfile.TemporaryDirectory() as tmp:
        for setting in opts.threads:
            for k in range(opts.repeats):
                seed = opts.seed + k if comparison.get("new_seeds") else opts.seed
                order = sides[k % len(sides) :] + sides[: k % len(sides)]
                # --parallel: at once, each child timed by its own CPU time (os.wait4); else one by one
                with concurrent.futures.ThreadPoolExecutor(
                    len(order) if opts.parallel else 1
                ) as pool:
                    done = list(
                        pool.map(
                            functools.partial(
                                run_side,
                                opts,
                                setting=setting,
                                seed=seed,
                                scratch=Path(tmp) / str(k),
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
                        f"run {k + 1}/{opts.repeats} {setting} thread(s) {r['side']:>13}: "
                        + (
                            f"FAILED ({r['returncode']}): {r['error']}"
                            if "error" in r
                            else f"{r['rate'] or 0:,.1f} {unit}/s ({comparison['rate']}; {r['cpu_seconds']} s CPU, {r['wall_seconds']} s wall{figs})"
                        ),
                        flush=True,
                    )
            ok = [r for r in runs if r["setting"] == setting and "error" not in r]
            for side in sides:
                if rates := [r["rate"] for r in ok if r["side"] == side and r["rate"]]:
                    lines.append(
                        f"{setting} thread(s): {side} {unit}/s ({comparison['rate']}) {spread(rates, '')}"
                    )
            for a, b in pairs:
                by = {(r["side"], r["repeat"]): r for r in ok}
                both = [
                    (by[a, k], by[b, k])
                    for k in range(opts.repeats)
                    if (a, k) in by and (b, k) in by
                ]
                if both:
                    per_repeat = [x["rate"] / y["rate"] for x, y in both]
                    ratios.append(round(median(per_repeat), 2))
                    lines.append(
                        f"{setting} thread(s): ratio {a}/{b} per repeat: {spread(per_repeat)}"
                        + (
                            "; training loop alone "
                            + spread([x["loop_rate"] / y["loop_rate"] for x, y in both], " (ratio)")
                            if all("loop_rate" in x and "loop_rate" in y for x, y in both)
                            else ""
                        )
                    )
    print("\n" + "\n".join(lines), flush=True)
    closing = list(lines)  # and the profiles' lines
    profiles = profile_atari(opts, closing) if opts.profile else {}
    settings = {
        k: getattr(opts, k)
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
        opts.out,
        {
            "comparison": opts.comparison,
            "settings": settings,
            "runs": runs,
            "summary": lines,
            "profiles": profiles,
            "date": time.strftime("%Y-%m-%d"),
            "code": code_state(),
            "machine": {**machine_info(), "torch": torch.__version__},
        },
    )
    if opts.plot:
        plot_curves(opts, runs)
    if opts.json_line:  # the last line, for run_one's record
        print(json.dumps({"summary_lines": closing, "ratios": ratios}))
    return 1 if any("error" in r for r in runs) else 0


def profile_atari(opts, closing: list[str]) -> dict:
    """dqn-atari: one more run of ours and SB3 under the torch profiler, one thread: the conv net's kernels' share.
    Each side's line is printed and added to `closing`."""
    from torch.profiler import ProfilerActivity, profile

    profiles = {}
    for name in ("ours", "sb3"):
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            side_run(opts, name, 1)
        wall, events = time.perf_counter() - start, prof.key_averages()
        kernels = sum(e.self_cpu_time_total for e in events if e.key in KERNELS) / 1e6
        top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
        p = profiles[name] = {
            "wall_seconds": round(wall, 1),
            "kernel_seconds": round(kernels, 1),
            "kernel_share": round(kernels / wall, 3),
            "top_ops": [(e.key, round(e.self_cpu_time_total / 1e6, 2)) for e in top],
        }
        closing.append(
            f"profile {name}: {p['wall_seconds']} s, of which the conv net's kernels {p['kernel_seconds']} s "
            f"({100 * p['kernel_share']:.0f}%); top ops {p['top_ops'][:5]}"
        )
        print(closing[-1], flush=True)
    return profiles


def plot_curves(opts, runs: list[dict]) -> None:
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
        title=f"DQN, MinAtar {opts.game}, the example agent's settings",
    )
    ax.legend()
    fig.tight_layout()
    Path(opts.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(opts.plot, dpi=100)


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
        raise BadInput(
            f"--cells {spec!r}: expected suite:algo:env, e.g. mujoco:ddpg:HalfCheetah-v5"
        )
    try:
        cells = load_suite(parts[0]).cells
    except SystemExit as e:  # an unknown suite
        raise BadInput(f"--cells {spec!r}: {e}") from None
    if cell := next((c for c in cells if (c.algo, c.env) == tuple(parts[1:])), None):
        return cell
    raise BadInput(f"--cells {spec!r}: no cell {parts[1]} {parts[2]} in suite {parts[0]}")


def device_run(spec: str, cell, device: str, opts, scratch: Path) -> dict:
    """The cell's script on `device`[:mode] (a flag: --compile, --cudagraphs), its learning_starts cut to
    a quarter of the steps: its rate while learning (sps_while_learning) and its summary's figures."""
    threads, (where, _, mode) = int(opts.threads[0]), device.partition(":")
    run_dir = scratch / f"{spec.replace(':', '_').replace('/', '-')}_{device}"
    flags = dict(
        cell.settings,
        env=cell.env,
        seed=1,
        total_timesteps=opts.total_timesteps,
        device=where,
        torch_threads=threads,
        eval_episodes=1,
        eval_every=0,
        progress=False,
        run_dir=run_dir,
    )
    flags.update({mode: True} if mode else {})
    defaults = {
        f.name: f.default for f in dataclasses.fields(importlib.import_module(cell.algo).Args)
    }
    after = 0
    if "learning_starts" in defaults:
        flags["learning_starts"] = after = min(
            int(flags.get("learning_starts", defaults["learning_starts"])),
            opts.total_timesteps // 4,
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
        "steps": opts.total_timesteps,
        "learning_starts": after,
        "learning_sps": round(rate, 1) if rate else None,
        "measured_over": measured,
        "rows": rows,
        "wall_seconds": round(wall, 1),
        "summary_device": summary.get("device"),
        "updates": summary.get("updates"),
        "compile_seconds": summary.get("compile_seconds"),
    }


def compare_devices(opts) -> int:
    import torch

    if any(d.startswith("cuda") for d in opts.devices) and not torch.cuda.is_available():
        raise BadInput("--devices names cuda, but torch sees no CUDA GPU")
    cells = {spec: find_cell(spec) for spec in opts.cells}  # a wrong name fails before any run
    cpu_runs = [
        (c, d) for c in opts.cells for d in opts.devices if d.startswith("cpu")
    ]  # device[:compile|cudagraphs]
    parallel = (os.cpu_count() or 1) > len(
        cpu_runs
    ) + 1  # a core for each CPU run and one for the GPU runs
    # the CPU runs, then the others one after another: all in one chain where the machine lacks the cores
    with (
        tempfile.TemporaryDirectory(prefix="speed_devices_", ignore_cleanup_errors=True) as scratch,
        concurrent.futures.ThreadPoolExecutor(len(cpu_runs) + 1 if parallel else 1) as pool,
    ):
        cpu_jobs = {
            (c, d): pool.submit(device_run, c, cells[c], d, opts, Path(scratch))
            for c, d in cpu_runs
        }
        chain = pool.submit(
            lambda: {
                (c, d): device_run(c, cells[c], d, opts, Path(scratch))
                for c in opts.cells
                for d in opts.devices
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
        f"{m['gpu'] or 'no GPU'}; {m['cpu_count']} logical CPUs; torch {m['torch']}; {opts.total_timesteps:,} steps, {opts.threads[0]} torch thread(s)"
    )
    others = [d for d in opts.devices if d != "cpu"] if "cpu" in opts.devices else []
    print(
        f"{'cell':44s}"
        + "".join(f"{d + ' sps':>20s}" for d in opts.devices)
        + "".join(f"{d + '/cpu':>20s}" for d in others)
    )
    for (
        c
    ) in opts.cells:  # each device's rate (*: the whole run's), then each one's against the CPU's
        rates = [
            "failed"
            if "error" in r
            else "too short"
            if not r["learning_sps"]
            else f"{r['learning_sps']}{'*' if r['measured_over'].startswith('the whole run') else ''}"
            for r in (results[(c, d)] for d in opts.devices)
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
        "cells": opts.cells,
        "devices": opts.devices,
        "steps": opts.total_timesteps,
        "threads": int(opts.threads[0]),
        "out": opts.out,
    }
    write(
        opts.out,
        {
            "settings": settings,
            "machine": m,
            "code": code_state(),
            "date": time.strftime("%Y-%m-%d"),
            "runs": list(results.values()),
        },
    )
    return 0


def compare_gemm(opts) -> int:
    """gemm: each library's [256, 256] product under the CPU's own kernels and under SECOND_KERNELS."""
    libs = [("torch", sys.executable), ("torch-linear", sys.executable), ("numpy", sys.executable)]
    libs += [("jax", opts.cleanrl_python)] if opts.cleanrl_python != "python3" else []
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    results = []
    for kernels, variables in (("own", {}), ("second", SECOND_KERNELS)):
        for lib, python in libs:
            env = {**os.environ, **ONE_THREAD_ENV, "OPENBLAS_NUM_THREADS": "1", **variables}
            done = subprocess.run(
                [*pin, python, str(LAUNCHERS / "gemm.py"), lib, str(GEMM_SIZE)],
                env=env,
                capture_output=True,
                text=True,
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
        opts.out,
        {
            "settings": {"size": GEMM_SIZE, "threads": 1},
            "machine": machine_info(),
            "code": code_state(),
            "date": time.strftime("%Y-%m-%d"),
            "runs": results,
        },
    )
    return 0


def run_one(name: str, opts: argparse.Namespace, out_dir: Path) -> dict:
    """One collected comparison in a child process (`opts`: --quick, --timeout, --cleanrl): its log, and its
    record (<out>/<name>.json) with the closing lines and ratios of the JSON line the child ends with."""
    shown = out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir
    raw = f"{shown}/speed_{name.replace('-', '_')}_raw.json"  # `{raw}` in the flags: the raw JSON beside the record
    flags = COMPARISONS[name]["quick" if opts.quick else "full"].split()
    argv = [name, *(a.format(raw=raw) for a in flags)]
    if opts.cleanrl and name in ("dqn", "ddpg"):
        argv += ["--cleanrl", str(Path(opts.cleanrl).resolve())] + (
            ["--cleanrl-python", opts.cleanrl_python] if opts.cleanrl_python else []
        )
    command = " ".join(["python", "benchmarks/speed.py", *argv])
    record = {
        "name": name,
        "command": command,
        "quick": opts.quick,
        "started": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(f"{name}: {command}", flush=True)
    start, log = time.perf_counter(), out_dir / f"{name}.log"
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *argv, "--json-line"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=opts.timeout or None,
        )
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        stdout = (e.stdout or b"").decode(errors="ignore")  # bytes, whatever `text` says
        stderr, code = "", None
        record["error"] = f"timed out after {opts.timeout:.0f} s"
    if closing := last_json(stdout):  # the record's line, not the log's
        stdout = stdout.rstrip("\n").rpartition("\n")[0] + "\n"
    else:  # it stopped before its end (timed out, refused its input, crashed): its last lines
        lines = [x.rstrip() for x in stdout.splitlines() if x.strip() and "warn" not in x.lower()]
        closing = {"summary_lines": lines[-3:], "ratios": []}
    log.write_text(stdout + stderr)
    record.update(
        returncode=code,
        seconds=round(time.perf_counter() - start, 1),
        summary_lines=closing["summary_lines"],
        ratios=closing["ratios"],
        log=f"{shown}/{name}.log",
        finished=time.strftime("%Y-%m-%d %H:%M"),
    )
    if code not in (0, None):
        record["error"] = ((stdout + stderr).strip().splitlines() or ["no output"])[-1][:200]
    for x in closing["summary_lines"]:
        print(f"  {x}")
    print(f"  -> ratios {closing['ratios']}, exit {code}, {record['seconds']} s", flush=True)
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
        "--quick",
        action="store_true",
        help="tiny budgets: a plumbing check, the numbers mean nothing",
    )
    p.add_argument(
        "--out",
        default=None,
        help="collected: folder for the .json and .log files (default benchmarks/results/speed; "
        "with --quick a temporary folder); one comparison: its raw JSON file",
    )
    p.add_argument(
        "--timeout", type=float, default=0, help="seconds per collected comparison (0: none)"
    )
    p.add_argument(
        "--cleanrl",
        default=None,
        help="a CleanRL checkout: dqn, ddpg and dqn-atari also time its scripts",
    )
    p.add_argument(
        "--cleanrl-python",
        default=None,
        help="the Python of CleanRL's environment (default python3)",
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
        "--peer",
        default="../shared/peers/minatar/dqn.py",
        help="minatar: path of MinAtar's examples/dqn.py",
    )
    p.add_argument("--game", default="breakout", help="minatar: the game")
    p.add_argument(
        "--parallel",
        action="store_true",
        help="the sides of a repeat at once (needs an idle core each)",
    )
    p.add_argument(
        "--plot", default=None, help="minatar: draw both sides' return curves to this PNG"
    )
    p.add_argument("--cells", nargs="+", help="devices: suite:algo:env cells")
    p.add_argument(
        "--devices",
        nargs="+",
        help="devices: where to run each cell, each device[:compile|cudagraphs] (e.g. cuda:cudagraphs)",
    )
    # internal: one run of one side in this process, its figures printed as JSON
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--side-threads", type=int, default=None, help=argparse.SUPPRESS)
    # internal (run_one): end with one JSON line of the closing lines and ratios
    p.add_argument("--json-line", action="store_true", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.comparison:
        unset = {
            "learning_starts": 0,
            "cleanrl_python": "python3",
            **COMPARISONS[opts.comparison]["defaults"],
        }
        vars(opts).update({k: v for k, v in unset.items() if getattr(opts, k) is None})
        if opts.side:
            print(json.dumps(side_run(opts, opts.side, opts.side_threads)))
            return 0
        try:
            return {"devices": compare_devices, "gemm": compare_gemm}.get(opts.comparison, compare)(
                opts
            )
        except BadInput as e:
            return fail(f"speed {opts.comparison}", e)
    if opts.cleanrl and not (Path(opts.cleanrl) / "cleanrl").is_dir():
        p.error(f"--cleanrl {opts.cleanrl} is not a CleanRL checkout (no cleanrl/ folder in it)")
    out_dir = Path(
        opts.out
        or (
            Path(tempfile.gettempdir()) / "rl-speed-quick"
            if opts.quick
            else BENCH / "results" / "speed"
        )
    ).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    codes = [run_one(name, opts, out_dir)["returncode"] for name in opts.only or COLLECTED]
    if out_dir == (BENCH / "results" / "speed").resolve():
        print(
            f"wrote {out_dir}/*.json; `python benchmarks/report.py --suite classic` puts them in the report"
        )
    elif out_dir.name == "speed":  # a report reads <results-dir>/speed
        report = f"python benchmarks/report.py --suite classic --results-dir {out_dir.parent}"
        print(f"wrote {out_dir}/*.json; `{report}` puts them in that folder's report")
    else:
        print(f"wrote {out_dir}/*.json (no report reads it: a report reads <results-dir>/speed)")
    return 1 if any(code != 0 for code in codes) else 0


if __name__ == "__main__":
    sys.exit(main())
