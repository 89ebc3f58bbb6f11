"""DQN on MinAtar, side by side in one invocation: ours against MinAtar's own example agent, same settings.

    python benchmarks/speed_minatar.py --peer ../shared/peers/minatar/dqn.py --frames 105000 --repeats 2
    python benchmarks/speed_minatar.py --peer ../shared/peers/minatar/dqn.py --frames 1000000 --repeats 1 \
        --parallel --out benchmarks/results/speed/speed_minatar_1m_raw.json --plot benchmarks/results/speed/speed_minatar_1m.png

The peer is the MinAtar repository's `examples/dqn.py` (GPL-3.0: not part of this project; give
its path), the agent behind the MinAtar paper's curves, run unmodified as a separate program with
its frame budget (`NUM_FRAMES`, a module constant) set before its `main()`. Ours is `algos/dqn.py`
with the `minatar_paper` suite's settings, which are the peer's: all 6 actions (`MinAtar/<Game>-v0`),
sticky actions 0.1, batch 32, 100k memory, learning from step 5,000 with one gradient step per env
step, target copy every 1,000, epsilon 1 -> 0.1 over the 100k steps after the heatup, Huber
loss, centered RMSprop 2.5e-4 (alpha 0.95, eps 0.01), MinAtar's conv net, gamma 0.99. Differences
that remain: the peer counts its target copies in updates (ours in env steps: the same cadence
once learning runs every step) and has no time limit (ours truncates at 10,000 steps); neither
matters at these lengths.

Both run as child processes with one torch thread (OMP_NUM_THREADS=1 and torch.set_num_threads(1)),
alternating (ours, peer, ours, peer, ...), or with `--parallel` both at once (on two idle cores; each
child's CPU time is its own). Speed is frames (env steps) per second of the child's
CPU time (user + system, from os.wait4), which a busy machine disturbs far less than wall time;
wall time is recorded too. Returns: the mean of the last 100 training episodes, the figure's
convention, at the end and as a curve (every 1% of the frames; `--plot` draws both sides' curves).
The epsilon schedule is the peer's only from 105,000 frames on (its decay takes the 100k steps
after the heatup; ours is a fraction of the run, at most all of it): shorter runs explore less on
our side, which makes ours look faster than it is (fewer network evaluations per step).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from childproc import run_timed  # noqa: E402
from provenance import code_state  # noqa: E402
from suite import load_suite, metrics_file  # noqa: E402

PEER_RUNNER = """
import sys, torch
torch.set_num_threads(1)
sys.path.insert(0, {folder!r})
sys.argv = ["dqn.py", "--game", {game!r}, "--output", {output!r}]
import dqn
dqn.NUM_FRAMES = {frames}
dqn.main()
"""


@dataclass
class SpeedArgs:
    peer: str = "../shared/peers/minatar/dqn.py"
    """path of MinAtar's examples/dqn.py"""
    game: str = "breakout"
    """MinAtar game (asterix, breakout, freeway, seaquest, space_invaders)"""
    frames: int = 105_000
    """env steps per run (the first 5,000 are the heatup; from 105,000 on, epsilon follows the peer's schedule)"""
    seed: int = 1
    """our seed (the peer seeds nothing)"""
    repeats: int = 2
    """runs of each, alternating"""
    out: str = "benchmarks/results/speed/speed_minatar_raw.json"
    """where to write the figures (with both sides' training-return curves)"""
    parallel: bool = False
    """run ours and the peer at the same time (each on a core of its own: needs two idle cores), not one after the other"""
    plot: str | None = None
    """also draw the return curves of both sides (the mean of the last 100 training episodes against frames) to this PNG"""


def child(cmd: list[str], cwd: str) -> tuple[float, float]:
    """Run `cmd`; (CPU seconds, wall seconds) of the child."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    _, cpu, wall = run_timed(cmd, cwd, env, str(cmd[:3]))
    return cpu, wall


def last_100(returns: list[float]) -> float | None:
    return sum(returns[-100:]) / len(returns[-100:]) if returns else None


def curve(frames: list[int], returns: list[float], total: int, points: int = 100) -> list[list[float]]:
    """The figure's convention as a curve: at every `total / points` frames, the mean of the last 100
    training episodes finished by then; [[frame, mean], ...], from the first point with an episode."""
    out, k = [], 0
    for i in range(1, points + 1):
        at = total * i // points
        while k < len(frames) and frames[k] <= at:
            k += 1
        if k:
            out.append([at, round(sum(returns[max(0, k - 100):k]) / min(k, 100), 3)])
    return out


def side_result(cpu: float, wall: float, frames: list[int], returns: list[float], total: int) -> dict:
    """One side's run: its times, episode count, final last-100 return and return curve."""
    return {"cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "episodes": len(returns), "last_100": last_100(returns),
            "curve": curve(frames, returns, total)}


def cli_flags(settings: dict) -> list[str]:
    """A suite cell's settings as the script's command-line flags (booleans as --x / --no-x)."""
    flags = []
    for k, v in settings.items():
        name = k.replace("_", "-")
        if isinstance(v, bool):
            flags.append(f"--{name}" if v else f"--no-{name}")
        elif isinstance(v, (list, tuple)):
            flags += [f"--{name}", *map(str, v)]
        else:
            flags += [f"--{name}", str(v)]
    return flags


def ours(a: SpeedArgs, scratch: Path) -> dict:
    import csv

    env_id = "MinAtar/" + "".join(w.capitalize() for w in a.game.split("_")) + "-v0"
    settings = dict(next(c.settings for c in load_suite("minatar_paper").cells if c.env == env_id))
    settings["exploration_fraction"] = min(1.0, 100_000 / a.frames)  # the peer's 100k steps of decay
    flags = cli_flags(settings)
    run_dir = scratch / "ours"
    shutil.rmtree(run_dir, ignore_errors=True)
    cpu, wall = child([sys.executable, str(ROOT / "algos" / "dqn.py"), "--env", env_id, "--seed", str(a.seed),
                       "--total-timesteps", str(a.frames), "--torch-threads", "1", "--eval-episodes", "1", "--no-progress",
                       "--run-dir", str(run_dir), *flags], cwd=str(ROOT))
    with open(metrics_file(run_dir)) as f:
        rows = [r for r in csv.DictReader(f) if r["episodic_return"]]
    returns, frames = [float(r["episodic_return"]) for r in rows], [int(r["global_step"]) for r in rows]
    return side_result(cpu, wall, frames, returns, a.frames)


def peer(a: SpeedArgs, scratch: Path) -> dict:
    import torch

    peer = Path(a.peer).resolve()
    output = str(scratch / "peer")
    code = PEER_RUNNER.format(folder=str(peer.parent), game=a.game, output=output, frames=a.frames)
    cpu, wall = child([sys.executable, "-c", code], cwd=str(scratch))
    data = torch.load(output + "_data_and_weights", weights_only=False)
    returns, frames = [float(x) for x in data["returns"]], [int(x) for x in data["frame_stamps"]]
    return side_result(cpu, wall, frames, returns, a.frames)


def draw(runs: dict, a: SpeedArgs) -> None:
    """Both sides' curves (each repeat a line) in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, color, label in (("ours", "tab:blue", "ours (algos/dqn.py)"), ("peer", "tab:orange", "MinAtar's dqn.py")):
        for r, res in enumerate(runs[name]):
            xs, ys = zip(*res["curve"]) if res["curve"] else ((), ())
            ax.plot(xs, ys, color=color, alpha=0.8, label=label if r == 0 else None)
    ax.set_xlabel("frames (env steps)")
    ax.set_ylabel("mean of the last 100 training episodes")
    ax.set_title(f"DQN, MinAtar {a.game}, the example agent's settings")
    ax.legend()
    fig.tight_layout()
    Path(a.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.plot, dpi=100)
    plt.close(fig)


def machine() -> dict:
    """Where both sides ran: each takes the GPU when torch sees one (ours by `--device auto`, the peer by its own choice)."""
    import platform

    import torch

    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}


def main(a: SpeedArgs) -> None:
    if not Path(a.peer).is_file():
        raise SystemExit(f"no peer at {a.peer}: give the path of MinAtar's examples/dqn.py with --peer")
    runs = {"ours": [], "peer": []}
    sides = (("ours", ours), ("peer", peer))
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for r in range(a.repeats):
            if a.parallel:  # each child is timed by its own CPU time (os.wait4), so the threads do not mix them
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    futures = [(name, pool.submit(fn, a, scratch)) for name, fn in sides]
                    results = [(name, f.result()) for name, f in futures]
            else:
                results = [(name, fn(a, scratch)) for name, fn in sides]
            for name, res in results:
                res["fps_cpu"] = round(a.frames / res["cpu_seconds"], 1)
                runs[name].append(res)
                print(f"run {r + 1}/{a.repeats} {name:>4}: {res['fps_cpu']:7.1f} frames per CPU second ({res['cpu_seconds']} s CPU, "
                      f"{res['wall_seconds']} s wall), {res['episodes']} episodes, last-100 training return {res['last_100']}", flush=True)
    ratios = [o["fps_cpu"] / p["fps_cpu"] for o, p in zip(runs["ours"], runs["peer"])]
    print(f"DQN MinAtar {a.game} {a.frames:,} frames, 1 torch thread: ours/peer {min(ratios):.2f}-{max(ratios):.2f}x in CPU time", flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(a), "runs": runs, "ratios": [round(x, 2) for x in ratios],
                               "date": time.strftime("%Y-%m-%d"), "code": code_state(), "machine": machine()}, indent=2))
    if a.plot:
        draw(runs, a)


if __name__ == "__main__":
    main(tyro.cli(SpeedArgs))
