"""DQN: deep Q-network with experience replay and a target network.

Paper: Mnih et al. 2015, "Human-level control through deep reinforcement learning", Nature 518,
https://doi.org/10.1038/nature14236. Double DQN: van Hasselt et al. 2016, arXiv:1509.06461.

The agent acts epsilon-greedily on Q(s, .), stores every transition in a replay memory, and every
`train_every` env steps regresses Q(s, a) on the one-step target
r + gamma * (1 - terminated) * max_a' Q_target(s', a') for a random minibatch. The target
network is a copy of the online network, refreshed every `target_every` env steps (hard copy) or
moved towards it by `target_rate` (soft update). Before `learning_starts` the agent acts
uniformly at random (heatup) and does not learn.

Deviations from the paper:
- Defaults are CleanRL's classic-control settings (MSE loss, Adam, 10k memory, [120, 84] MLP),
  not the Atari ones (Huber loss, RMSprop, 1M memory, conv net); both losses are flags.
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).

Run:
    python algos/dqn.py --env CartPole-v1 --seed 1

Uses from common: NetworkWrapper (online/target network, Adam, clipping), ReplayMemory, true_next_obs (the final observation at episode ends).
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

import csv
import json
import math
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Callable, Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
import tyro
from gymnasium.vector import AutoresetMode
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python algos/dqn.py` finds common/
from common import NetworkWrapper, ReplayMemory, true_next_obs  # noqa: E402

ALGO = "dqn"


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args:
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    seed: int = 1
    """seed of python, numpy, torch, the envs and the replay sampler"""
    total_timesteps: int = 500_000
    """env steps to train for, summed over all envs"""
    num_envs: int = 1
    """parallel envs stepped together"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """where the networks and the replay memory live (auto: cuda if available)"""
    torch_threads: int = 1
    """CPU threads for torch (small networks are fastest on 1)"""
    track: bool = False
    """log to Weights & Biases (works offline with WANDB_MODE=offline)"""
    wandb_project: str = "rl-reference"
    """wandb project name"""
    wandb_entity: Optional[str] = None
    """wandb team or user"""
    capture_video: bool = False
    """record videos of evaluation episodes into <run folder>/videos"""
    save_model: bool = False
    """save the online network's state dict to <run folder>/model.pt"""
    eval_every: int = 0
    """env steps between greedy evaluations (0: only at the end)"""
    eval_episodes: int = 10
    """episodes per evaluation"""
    run_dir: str = "runs"
    """parent folder of the run folder"""
    progress: bool = True
    """print a progress line while training"""

    learning_rate: float = 2.5e-4
    """Adam step size"""
    buffer_size: int = 10_000
    """replay memory capacity, transitions"""
    gamma: float = 0.99
    """discount"""
    target_every: int = 500
    """env steps between target syncs"""
    target_rate: float = 1.0
    """weight of the online network in a target sync (1: hard copy)"""
    batch_size: int = 128
    """transitions per gradient step"""
    start_epsilon: float = 1.0
    """exploration epsilon at the start"""
    end_epsilon: float = 0.05
    """exploration epsilon at the end of the schedule"""
    exploration_fraction: float = 0.5
    """fraction of total_timesteps over which epsilon decays linearly"""
    learning_starts: int = 10_000
    """env steps of heatup (random actions, no learning)"""
    train_every: int = 10
    """env steps between training rounds"""
    gradient_steps: int = 1
    """gradient steps per training round"""
    loss: Literal["mse", "huber"] = "mse"
    """regression loss on the TD error"""
    double_dqn: bool = False
    """pick the next action with the online network, value it with the target (Double DQN)"""
    clip_grad_norm: Optional[float] = None
    """clip the global gradient norm to this value (None: no clipping)"""
    hidden_sizes: tuple[int, ...] = (120, 84)
    """widths of the Q-network's hidden layers"""


def validate(args: Args) -> None:
    """Raise ValueError naming the first bad value."""
    checks = [
        (args.total_timesteps > 0, f"--total-timesteps must be positive, got {args.total_timesteps}"),
        (args.num_envs > 0, f"--num-envs must be positive, got {args.num_envs}"),
        (args.batch_size > 0, f"--batch-size must be positive, got {args.batch_size}"),
        (args.buffer_size > 0, f"--buffer-size must be positive, got {args.buffer_size}"),
        (args.batch_size <= args.buffer_size, f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}"),
        (0.0 <= args.start_epsilon <= 1.0, f"--start-epsilon must be in [0, 1], got {args.start_epsilon}"),
        (0.0 <= args.end_epsilon <= 1.0, f"--end-epsilon must be in [0, 1], got {args.end_epsilon}"),
        (0.0 < args.exploration_fraction <= 1.0, f"--exploration-fraction must be in (0, 1], got {args.exploration_fraction}"),
        (0.0 < args.target_rate <= 1.0, f"--target-rate must be in (0, 1], got {args.target_rate}"),
        (args.target_every > 0, f"--target-every must be positive, got {args.target_every}"),
        (args.train_every > 0, f"--train-every must be positive, got {args.train_every}"),
        (args.gradient_steps > 0, f"--gradient-steps must be positive, got {args.gradient_steps}"),
        (args.learning_starts >= 0, f"--learning-starts must be >= 0, got {args.learning_starts}"),
        (args.learning_rate > 0, f"--learning-rate must be positive, got {args.learning_rate}"),
        (0.0 <= args.gamma <= 1.0, f"--gamma must be in [0, 1], got {args.gamma}"),
        (args.eval_every >= 0, f"--eval-every must be >= 0, got {args.eval_every}"),
        (args.eval_episodes > 0, f"--eval-episodes must be positive, got {args.eval_episodes}"),
        (args.torch_threads > 0, f"--torch-threads must be positive, got {args.torch_threads}"),
        (all(h > 0 for h in args.hidden_sizes), f"--hidden-sizes must be positive, got {args.hidden_sizes}"),
        (args.clip_grad_norm is None or args.clip_grad_norm > 0, f"--clip-grad-norm must be positive, got {args.clip_grad_norm}"),
        (args.device != "cuda" or torch.cuda.is_available(), "--device cuda was asked for but CUDA is not available"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


# 3. Environment ---------------------------------------------------------------------------------
def make_env(env_id: str, num_envs: int, video_dir: str | None = None) -> gym.vector.VectorEnv:
    """Vector env with SAME_STEP autoreset: the true final observation is in infos["final_obs"]."""
    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        raise ValueError(f"unknown environment id {env_id!r} ({e})") from None

    def thunk(i: int) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            if video_dir is not None and i == 0:
                env = gym.make(env_id, render_mode="rgb_array")
                return gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda ep: True, disable_logger=True)
            return gym.make(env_id)

        return make

    envs = gym.vector.SyncVectorEnv([thunk(i) for i in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        envs.close()
        raise ValueError(f"{ALGO} needs a Discrete action space; {env_id} has {envs.single_action_space}")
    if not isinstance(envs.single_observation_space, gym.spaces.Box):
        envs.close()
        raise ValueError(f"{ALGO} needs a Box observation space; {env_id} has {envs.single_observation_space}")
    return envs


# 4. Networks ------------------------------------------------------------------------------------
class QNetwork(nn.Module):
    """MLP from an observation to one Q-value per action."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_sizes: tuple[int, ...]):
        super().__init__()
        layers, width = [], obs_dim
        for h in hidden_sizes:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)  # [B, A]


# 5. Algorithm -----------------------------------------------------------------------------------
def linear_epsilon(start: float, end: float, duration: float, step: int) -> float:
    """Epsilon decays linearly from `start` to `end` over `duration` env steps, then stays."""
    return start + (end - start) * min(1.0, step / duration)


def select_actions(
    greedy: Callable[[np.ndarray], np.ndarray], obs: np.ndarray, epsilon: float, n_actions: int, rng: np.random.Generator
) -> np.ndarray:
    """Epsilon-greedy actions [B]; the network is only run when some env acts greedily."""
    explore = rng.random(len(obs)) < epsilon  # [B]
    if explore.all():
        return rng.integers(n_actions, size=len(obs))
    actions = greedy(obs)  # [B]
    if explore.any():
        actions[explore] = rng.integers(n_actions, size=int(explore.sum()))
    return actions


def dqn_targets(
    q_target: nn.Module,
    q_online: nn.Module,
    rewards: torch.Tensor,
    next_obs: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    double_dqn: bool,
) -> torch.Tensor:
    """One-step targets [B]: r + gamma * (1 - terminated) * Q_target(s', a*).

    a* = argmax Q_target(s', .) for DQN, argmax Q_online(s', .) for Double DQN (which removes the
    max operator's overestimation). `next_obs` is the true next observation, so truncated
    transitions bootstrap and terminated ones do not.
    """
    with torch.no_grad():
        next_q = q_target(next_obs)  # [B, A]
        if double_dqn:
            best = q_online(next_obs).argmax(1, keepdim=True)  # [B, 1]
            next_value = next_q.gather(1, best).squeeze(1)  # [B]
        else:
            next_value = next_q.max(1).values  # [B]
        return rewards + gamma * (1.0 - terminated) * next_value


def evaluate(
    act: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int, seed: int, video_dir: str | None = None
) -> np.ndarray:
    """Return of `episodes` episodes [episodes] of the policy `act`, one episode per env, run in parallel."""
    envs = make_env(env_id, episodes, video_dir)
    obs, _ = envs.reset(seed=seed)
    returns = np.zeros(episodes)
    finished = np.zeros(episodes, dtype=bool)
    while not finished.all():
        obs, rewards, terminated, truncated, _ = envs.step(act(obs))
        returns += np.where(finished, 0.0, rewards)  # envs past their first episode are ignored
        finished |= terminated | truncated
    envs.close()
    return returns


def greedy_policy(q_net: QNetwork, device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, obs_dim] -> argmax_a Q(obs, a) [B], as a numpy function.

    On CPU the MLP runs in numpy on zero-copy views of the parameters, which the optimizer and
    the target sync update in place, so the views always hold the current weights. At batch size
    1, torch's dispatch (~3 us for each of ~8 ops) costs more than the arithmetic; this path is
    ~4x faster and is checked against the torch forward in the tests.
    """
    if device.type != "cpu":
        def act(obs: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return q_net(torch.as_tensor(obs, dtype=torch.float32, device=device)).argmax(1).cpu().numpy()

        return act
    layers = []
    for m in q_net.net:
        if isinstance(m, nn.Linear):
            layers.append((m.weight.detach().numpy().T, m.bias.detach().numpy()))  # [in, out], [out]
        elif not isinstance(m, nn.ReLU):
            raise TypeError(f"numpy policy supports Linear and ReLU layers, not {type(m).__name__}")

    def act_numpy(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32)
        for k, (w, b) in enumerate(layers):
            x = x @ w + b
            if k < len(layers) - 1:
                np.maximum(x, 0.0, out=x)
        return x.argmax(1)

    return act_numpy


def load_policy(args: Args, model_path: str, device: str = "cpu") -> Callable[[np.ndarray], np.ndarray]:
    """Greedy policy from a `--save-model` file (state dict, loaded with weights_only=True)."""
    envs = make_env(args.env_id, 1)
    q_net = QNetwork(int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n), tuple(args.hidden_sizes))
    envs.close()
    q_net.load_state_dict(torch.load(model_path, map_location=device, weights_only=True))
    return greedy_policy(q_net.to(device).eval(), torch.device(device))


# 6. Training ------------------------------------------------------------------------------------
class RunLog:
    """Run folder, config.json, metrics.csv (one row per event), progress line, wandb, summary.json."""

    def __init__(self, args: Args, fields: list[str]):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(args.run_dir) / f"{args.env_id}__{ALGO}__{args.seed}__{stamp}"
        path, k = base, 1
        while path.exists():  # two runs started in the same second
            path, k = Path(f"{base}-{k}"), k + 1
        path.mkdir(parents=True)
        self.path = path
        self.start = time.perf_counter()
        self.fields = ["global_step", "wall_seconds", *fields]
        (path / "config.json").write_text(json.dumps({"algo": ALGO, **asdict(args)}, indent=2))
        self.file = open(path / "metrics.csv", "w", newline="")
        self.csv = csv.DictWriter(self.file, self.fields)
        self.csv.writeheader()
        self.total, self.show = args.total_timesteps, args.progress
        self.tty = sys.stdout.isatty()
        self.last_print, self.last_flush, self.next_mark = self.start, self.start, 0.1
        self.next_check, self.printed_step = 0, -1
        self.wandb = None
        if args.track:
            import wandb

            self.wandb = wandb.init(
                project=args.wandb_project, entity=args.wandb_entity, config=asdict(args),
                name=path.name, dir=str(path), save_code=True,
            )

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, global_step: int, **metrics: float) -> None:
        self.csv.writerow({"global_step": global_step, "wall_seconds": round(self.elapsed(), 3), **metrics})
        if self.wandb is not None:
            self.wandb.log(metrics, step=global_step)

    def progress(self, global_step: int, recent_returns: list[float], force: bool = False) -> None:
        """A line with steps, steps/s, ETA and recent return: redrawn on a terminal, every 10% in a log."""
        self.next_check = global_step + 1000
        now = time.perf_counter()
        if now - self.last_flush > 5.0:
            self.file.flush()
            self.last_flush = now
        if not self.show:
            return
        frac = global_step / self.total
        if not force and (now - self.last_print < 0.5 if self.tty else frac < self.next_mark):
            return
        if force and self.printed_step == global_step:
            return
        self.printed_step = global_step
        recent_return = float(np.mean(recent_returns)) if recent_returns else float("nan")
        elapsed = now - self.start
        sps = global_step / max(elapsed, 1e-9)
        eta = (self.total - global_step) / max(sps, 1e-9)
        line = (
            f"{ALGO} {global_step:>10,}/{self.total:,} steps ({100 * frac:5.1f}%)  {sps:>7,.0f} steps/s  "
            f"elapsed {elapsed:6.0f}s  ETA {eta:6.0f}s  return(last 10) {recent_return:8.2f}"
        )
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)
        self.last_print = now
        while self.next_mark <= frac:
            self.next_mark += 0.1

    def close(self, summary: dict) -> None:
        if self.show and self.tty:
            print()
        self.file.close()
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
        if self.wandb is not None:
            self.wandb.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))})
            self.wandb.finish(exit_code=0 if summary["completed"] else 1)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def train(args: Args) -> dict:
    validate(args)
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu")
    torch.set_num_threads(args.torch_threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)  # exploration

    envs = make_env(args.env_id, args.num_envs)
    envs.action_space.seed(args.seed)
    envs.single_action_space.seed(args.seed)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    n_actions = int(envs.single_action_space.n)
    B = args.num_envs

    q_net = NetworkWrapper(
        QNetwork(obs_dim, n_actions, args.hidden_sizes), lr=args.learning_rate, optimizer="adam",
        clip_grad_norm=args.clip_grad_norm, target=True, device=device,
    )
    greedy = greedy_policy(q_net.online, device)
    memory = ReplayMemory(args.buffer_size, (obs_dim,), (), discrete=True, device=device, seed=args.seed)
    log = RunLog(args, ["episodic_return", "episodic_length", "loss", "q_values", "grad_norm", "epsilon", "sps", "eval_return", "eval_return_std"])
    print(f"{ALGO}: {args.env_id}, seed {args.seed}, {args.total_timesteps:,} steps on {device}; run folder {log.path}", flush=True)
    previous_handler = signal.signal(signal.SIGTERM, _raise_interrupt) if _main_thread() else None

    recent_returns: list[float] = []
    ep_return, ep_length = np.zeros(B), np.zeros(B, dtype=np.int64)
    global_step, error, completed = 0, None, False
    eval_returns = np.array([])
    train_seconds = 0.0
    try:
        obs, _ = envs.reset(seed=args.seed)
        obs = obs.reshape(B, obs_dim)
        for _ in range(math.ceil(args.total_timesteps / B)):
            prev_step, global_step = global_step, global_step + B
            # act: uniform during heatup, then epsilon-greedy on the online network
            epsilon = linear_epsilon(args.start_epsilon, args.end_epsilon, args.exploration_fraction * args.total_timesteps, global_step)
            if global_step <= args.learning_starts:
                actions = rng.integers(n_actions, size=B)
            else:
                actions = select_actions(greedy, obs, epsilon, n_actions, rng)
            next_obs, rewards, terminated, truncated, infos = envs.step(actions)
            next_obs = next_obs.reshape(B, obs_dim)

            # store: the autoreset already put the new episode's first obs in next_obs, so the
            # transition must use the true final observation of the finished episode
            real_next_obs = true_next_obs(next_obs, infos)
            memory.add(obs, actions, rewards, real_next_obs, terminated)
            obs = next_obs

            ep_return += rewards
            ep_length += 1
            for i in np.flatnonzero(terminated | truncated):
                recent_returns = (recent_returns + [float(ep_return[i])])[-10:]
                log.log(global_step, episodic_return=float(ep_return[i]), episodic_length=int(ep_length[i]))
                ep_return[i], ep_length[i] = 0.0, 0

            # learn: gradient_steps per `train_every` env steps crossed in this iteration
            if global_step > args.learning_starts:
                rounds = global_step // args.train_every - prev_step // args.train_every
                for _ in range(rounds * args.gradient_steps):
                    batch = memory.sample(args.batch_size)
                    targets = dqn_targets(q_net.target, q_net.online, batch.rewards, batch.next_obs, batch.terminated, args.gamma, args.double_dqn)
                    q = q_net.online(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)  # [B]
                    loss_fn = F.mse_loss if args.loss == "mse" else F.smooth_l1_loss
                    loss, grad_norm = q_net.train_step(loss_fn(q, targets))
                    if q_net.updates % 100 == 0:
                        if not math.isfinite(loss.item()):
                            raise FloatingPointError(f"loss became {loss.item()} at step {global_step}; lower --learning-rate or clip gradients")
                        log.log(global_step, loss=loss.item(), q_values=q.mean().item(), grad_norm=grad_norm.item(),
                                epsilon=epsilon, sps=round(global_step / log.elapsed()))
                # sync: every `target_every` env steps crossed
                if global_step // args.target_every > prev_step // args.target_every:
                    q_net.sync(args.target_rate)

            if args.eval_every and global_step // args.eval_every > prev_step // args.eval_every and global_step < args.total_timesteps:
                r = evaluate(greedy, args.env_id, args.eval_episodes, args.seed + 100_000)
                log.log(global_step, eval_return=float(r.mean()), eval_return_std=float(r.std()))
            if global_step >= log.next_check:
                log.progress(global_step, recent_returns)
        train_seconds = log.elapsed()
        video_dir = str(log.path / "videos") if args.capture_video else None
        eval_returns = evaluate(greedy, args.env_id, args.eval_episodes, args.seed + 100_000, video_dir)
        log.log(global_step, eval_return=float(eval_returns.mean()), eval_return_std=float(eval_returns.std()))
        completed = True
    except KeyboardInterrupt:
        error = "interrupted"
        print(f"\n{ALGO}: interrupted at step {global_step:,}; writing logs", file=sys.stderr)
    except FloatingPointError as e:
        error = str(e)
        print(f"\n{ALGO}: stopped: {e}", file=sys.stderr)
    finally:
        envs.close()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    if args.save_model and (completed or error == "interrupted"):  # a NaN model is not worth keeping
        torch.save(q_net.online.state_dict(), log.path / "model.pt")
    train_seconds = train_seconds or log.elapsed()
    summary = {
        "algo": ALGO, "env": args.env_id, "seed": args.seed, "total_timesteps": global_step,
        "num_envs": B, "device": str(device), "wall_seconds": round(log.elapsed(), 2),
        "sps": round(global_step / max(train_seconds, 1e-9), 1),
        "eval_return_mean": float(eval_returns.mean()) if len(eval_returns) else None,
        "eval_return_std": float(eval_returns.std()) if len(eval_returns) else None,
        "eval_episodes": len(eval_returns),
        "train_return_last10": float(np.mean(recent_returns)) if recent_returns else None,
        "completed": completed, "error": error, "updates": q_net.updates, "run_dir": str(log.path),
        "versions": {"torch": torch.__version__, "gymnasium": gym.__version__, "numpy": np.__version__},
    }
    log.progress(global_step, recent_returns, force=True)
    log.close(summary)
    if completed:
        print(f"{ALGO}: done in {summary['wall_seconds']:.1f}s ({summary['sps']:,.0f} steps/s); "
              f"eval return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} over {len(eval_returns)} episodes", flush=True)
    return summary


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def main(args: Args) -> int:
    """Exit status: 0 done, 1 stopped by a NaN loss, 2 bad input, 130 interrupted."""
    try:
        summary = train(args)
    except ValueError as e:
        print(f"{ALGO}: error: {e}", file=sys.stderr)
        return 2
    if summary["completed"]:
        return 0
    return 130 if summary["error"] == "interrupted" else 1


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
