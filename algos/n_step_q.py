"""n-step Q-learning: parallel envs, no replay memory, n-step returns and a target network.

Paper: Mnih et al. 2016, "Asynchronous methods for deep reinforcement learning", ICML,
https://arxiv.org/abs/1602.01783, algorithm S2 ("asynchronous n-step Q-learning").

`num_envs` envs act epsilon-greedily on the online network for `n_steps` steps each. Every step
of that rollout is then regressed on its forward-view n-step return: the first step of the
rollout on an n-step return, the last on a one-step return, all bootstrapped from
max_a Q_target(s, a) at the state where the rollout (or a truncated episode) ends, and not at all
past a termination. One gradient step per rollout, on all num_envs * n_steps transitions; the
target network is a hard copy of the online network, refreshed every `target_every` env steps.

Deviations from the paper:
- One process steps a vector env synchronously (A2C-style) instead of asynchronous actor-learner
  threads with Hogwild updates; the batch of one gradient step is the rollout of every env.
- Several workers under torchrun stay synchronous too: every update averages all workers'
  gradients (harness.distributed) where the paper's threads update shared weights asynchronously.
- Adam (learning rate decayed linearly to 0, as the paper decays its RMSprop learning rate)
  instead of shared RMSprop; MSE loss; an MLP for vector observations.
- Epsilon decays linearly from `start_epsilon` to `end_epsilon` for every env by default; the
  paper's per-thread final epsilons {0.1, 0.01, 0.5} with probabilities {0.4, 0.3, 0.3} are
  `--paper-epsilons`.
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).

Pixels: the network's torso follows the observation (MLP for vectors, MinAtar's conv for MinAtar
grids, the DQN paper's conv net for Atari's 84x84 frame stacks; common.pixels preprocesses Atari
as that paper did). The rollout keeps images as uint8 and the network turns them into floats.
Atari rewards are clipped to their sign for learning only, a lost life ends the training
episode, and the logged returns are whole-game scores.

Run:
    python algos/n_step_q.py --env CartPole-v1 --seed 1
    python algos/n_step_q.py --env Acrobot-v1 --seed 1 --n-steps 10 --paper-epsilons   # eval -93 at 500k; the defaults fail there
    torchrun --nproc-per-node 2 algos/n_step_q.py --env CartPole-v1 --seed 1   # 2 workers, one network
    python algos/n_step_q.py --env MinAtar/Breakout-v1 --total-timesteps 1000000   (pixels extra)

Uses from common (the algorithm parts): NetworkWrapper (online/target network, Adam, clipping, lr
decay), n_step_returns, true_next_obs (the final observation at episode ends), pixels (Atari and
MinAtar envs), torso (the network's feature layers), fastpath (the numpy greedy policy, checked
against forward()). From harness (run plumbing): run (run folder, logging, evaluation, signals,
checkpoints), distributed (torchrun workers).
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

import functools
import math
import random
import sys
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

_HERE = Path(__file__).resolve().parent  # common/ and harness/ sit beside a copied script, one folder up in this repo
sys.path.insert(0, str(_HERE if (_HERE / "common").is_dir() else _HERE.parent))
from common import pixels  # noqa: E402
from common.autoreset import true_next_obs  # noqa: E402
from common.fastpath import checked, probe_batch  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.returns import n_step_returns  # noqa: E402
from common.torso import is_image, obs_shape, torso  # noqa: E402
from harness import distributed  # noqa: E402
from harness.run import InputError, Run, Stopped, bad_input, flush_denormals, parse_args, record_first_episode  # noqa: E402
from harness.run import main as run_main  # noqa: E402

ALGO = "n_step_q"


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args:
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id (discrete actions; vectors, MinAtar/* or Atari ids such as ALE/Breakout-v5)"""
    seed: int = 1
    """seed of python, numpy, torch, the envs and the exploration (worker r of several: seed + r * num_envs)"""
    total_timesteps: int = 500_000
    """env steps to train for, summed over all envs of all workers"""
    num_envs: int = 8
    """parallel envs stepped together (per worker under torchrun)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """where the networks and the rollout live (auto: cuda if available)"""
    torch_threads: int = 1
    """CPU threads for torch (small networks are fastest on 1)"""
    track: bool = False
    """log to Weights & Biases (works offline with WANDB_MODE=offline)"""
    tensorboard: bool = False
    """also write TensorBoard scalars into <run folder>/tensorboard (needs the tensorboard extra)"""
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
    checkpoint_every: int = 0
    """env steps between checkpoints in the run folder (0: none; SIGTERM/SIGUSR1 write one anyway)"""
    resume: Optional[str] = None
    """run folder to continue from its last checkpoint, with its stored arguments (only the run length, evaluation and logging flags may change)"""

    n_steps: int = 5
    """env steps per env in a rollout (the paper's t_max); the first step's return looks n_steps ahead"""
    learning_rate: float = 1e-3
    """the optimizer's step size at the start"""
    optimizer: Literal["adam", "rmsprop"] = "adam"
    """optimizer of the Q-network (rmsprop with --rmsprop-centered: the DQN and MinAtar papers')"""
    optimizer_eps: float = 1e-8
    """the optimizer's epsilon (Adam's, or RMSprop's, added to the root of the squared-gradient average)"""
    rmsprop_alpha: float = 0.99
    """RMSprop's smoothing constant of the squared-gradient average"""
    rmsprop_centered: bool = False
    """RMSprop's centered variant: divide by an estimate of the gradient's std instead of its root mean square"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount"""
    target_every: int = 500
    """env steps between target syncs (hard copies), checked after each gradient step"""
    start_epsilon: float = 1.0
    """exploration epsilon at the start"""
    end_epsilon: float = 0.01
    """exploration epsilon at the end of the schedule (every env)"""
    paper_epsilons: bool = False
    """give each env its own final epsilon, 0.1, 0.01 or 0.5 with probability 0.4, 0.3, 0.3 (the paper's)"""
    exploration_fraction: float = 0.2
    """fraction of total_timesteps over which epsilon decays linearly"""
    loss: Literal["mse", "huber"] = "mse"
    """regression loss on the TD error"""
    clip_grad_norm: Optional[float] = 10.0
    """clip the global gradient norm to this value (None: no clipping)"""
    hidden_sizes: tuple[int, ...] = (120, 84)
    """widths of the Q-network's hidden layers (vector observations; image torsos are the papers')"""
    scale_obs: bool = False
    """map each bounded observation component from its [low, high] to [-1, 1] (vector envs; see common/pixels.py)"""


def validate(args: Args) -> None:
    """Raise InputError (one line, exit 2) naming the first bad value."""
    checks = [
        (args.total_timesteps > 0, f"--total-timesteps must be positive, got {args.total_timesteps}"),
        (args.num_envs > 0, f"--num-envs must be positive, got {args.num_envs}"),
        (args.n_steps > 0, f"--n-steps must be positive, got {args.n_steps}"),
        (0.0 <= args.start_epsilon <= 1.0, f"--start-epsilon must be in [0, 1], got {args.start_epsilon}"),
        (0.0 <= args.end_epsilon <= 1.0, f"--end-epsilon must be in [0, 1], got {args.end_epsilon}"),
        (0.0 < args.exploration_fraction <= 1.0, f"--exploration-fraction must be in (0, 1], got {args.exploration_fraction}"),
        (args.target_every > 0, f"--target-every must be positive, got {args.target_every}"),
        (args.learning_rate > 0, f"--learning-rate must be positive, got {args.learning_rate}"),
        (args.optimizer_eps > 0, f"--optimizer-eps must be positive, got {args.optimizer_eps}"),
        (0.0 <= args.rmsprop_alpha < 1.0, f"--rmsprop-alpha must be in [0, 1), got {args.rmsprop_alpha}"),
        (args.optimizer == "rmsprop" or (args.rmsprop_alpha == 0.99 and not args.rmsprop_centered), "--rmsprop-alpha and --rmsprop-centered need --optimizer rmsprop"),
        (0.0 <= args.gamma <= 1.0, f"--gamma must be in [0, 1], got {args.gamma}"),
        (args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {args.checkpoint_every}"),
        (args.eval_every >= 0, f"--eval-every must be >= 0, got {args.eval_every}"),
        (args.eval_episodes > 0, f"--eval-episodes must be positive, got {args.eval_episodes}"),
        (args.torch_threads > 0, f"--torch-threads must be positive, got {args.torch_threads}"),
        (all(h > 0 for h in args.hidden_sizes), f"--hidden-sizes must be positive, got {args.hidden_sizes}"),
        (args.clip_grad_norm is None or args.clip_grad_norm > 0, f"--clip-grad-norm must be positive, got {args.clip_grad_norm}"),
        (args.device != "cuda" or torch.cuda.is_available(), "--device cuda was asked for but CUDA is not available"),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)


# 3. Environment ---------------------------------------------------------------------------------
def make_env(env_id: str, num_envs: int, video_dir: str | None = None, training: bool = True, scale_obs: bool = False) -> gym.vector.VectorEnv:
    """Vector env with SAME_STEP autoreset: the true final observation is in infos["final_obs"].

    Pixel ids get their standard preprocessing (common.pixels); `training=False` plays whole
    Atari games (evaluation), `training=True` ends an episode at each lost life; `scale_obs`
    rescales bounded vector observations to [-1, 1]."""
    with bad_input():  # an unknown id
        pixels.kind(env_id)

    def thunk(i: int) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            if video_dir is not None:
                return record_first_episode(pixels.make(env_id, training, render_mode="rgb_array", scale_obs=scale_obs), video_dir, i)
            return pixels.make(env_id, training, scale_obs=scale_obs)

        return make

    with bad_input():  # an env that refuses the settings, or a missing env package
        envs = gym.vector.SyncVectorEnv([thunk(i) for i in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        envs.close()
        raise InputError(f"{ALGO} needs a Discrete action space; {env_id} has {envs.single_action_space}")
    if not isinstance(envs.single_observation_space, gym.spaces.Box):
        envs.close()
        raise InputError(f"{ALGO} needs a Box observation space; {env_id} has {envs.single_observation_space}")
    return envs


# 4. Networks ------------------------------------------------------------------------------------
class QNetwork(nn.Module):
    """Torso chosen from the observation (MLP, MinAtar conv, Nature conv) and one Q-value per action."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int, hidden_sizes: tuple[int, ...]):
        super().__init__()
        layers, width = torso(obs_shape, hidden_sizes)
        self.net = nn.Sequential(*layers, nn.Linear(width, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)  # [B, A]


# 5. Algorithm -----------------------------------------------------------------------------------
def linear_epsilon(start: float, end: float | np.ndarray, duration: float, step: int) -> float | np.ndarray:
    """Epsilon decays linearly from `start` to `end` over `duration` env steps, then stays (per env if `end` is [B])."""
    return start + (end - start) * min(1.0, step / duration)


PAPER_EPSILONS = np.array([0.1, 0.01, 0.5])  # the paper's final epsilons ...
PAPER_EPSILON_PROBS = np.array([0.4, 0.3, 0.3])  # ... and the probability of each


def final_epsilons(args: Args, rng: np.random.Generator) -> np.ndarray:
    """Final epsilon of each env [B]: `end_epsilon`, or one of the paper's drawn per env."""
    if args.paper_epsilons:
        return rng.choice(PAPER_EPSILONS, size=args.num_envs, p=PAPER_EPSILON_PROBS)
    return np.full(args.num_envs, args.end_epsilon)


def select_actions(
    greedy: Callable[[np.ndarray], np.ndarray], obs: np.ndarray, epsilon: float | np.ndarray, n_actions: int, rng: np.random.Generator
) -> np.ndarray:
    """Epsilon-greedy actions [B] (epsilon a scalar or [B]); the network is only run when some env acts greedily."""
    explore = rng.random(len(obs)) < epsilon  # [B]
    if explore.all():
        return rng.integers(n_actions, size=len(obs))
    actions = greedy(obs)  # [B]
    if explore.any():
        actions[explore] = rng.integers(n_actions, size=int(explore.sum()))
    return actions


def n_step_q_targets(
    q_target: nn.Module,
    rewards: torch.Tensor,
    next_obs: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """Forward-view n-step Q-learning references [T, B] for a rollout of T steps (algorithm S2).

    next_values[t] = max_a Q_target(s_{t+1}, a) at the true next observation `next_obs[t]`
    [T, B, *obs_shape]; n_step_returns then sums rewards to the rollout's end (n = None: row t looks
    T - t steps ahead), stops at a termination and bootstraps at a truncation.
    """
    with torch.no_grad():
        next_q = q_target(next_obs.flatten(0, 1)).unflatten(0, next_obs.shape[:2])  # [T, B, A]; convolutions take [N, C, H, W]
        next_values = next_q.max(-1).values  # [T, B]
    return n_step_returns(rewards, next_values, terminated, truncated, gamma, n=None)


def greedy_policy(q_net: QNetwork, device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, *obs_shape] -> argmax_a Q(obs, a) [B], as a numpy function.

    Through `forward()`, except on CPU where a plain MLP (Linear and ReLU layers, no other
    parameters) runs in numpy on zero-copy views of its parameters, which the optimizer and the
    target sync update in place. At batch size 1 torch's dispatch (~3 us for each of ~8 ops)
    costs more than the arithmetic; the numpy path is ~4x faster. It is used only while it gives
    forward()'s Q-values on a probe batch (common.fastpath.checked): build the policy again after
    loading weights.
    """
    def q_forward(obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, device=device)
        with torch.no_grad():
            return q_net(x if x.dtype == torch.uint8 else x.float()).cpu().numpy()  # [B, A]

    layers = list(getattr(q_net, "net", []))
    linear = [m for m in layers if isinstance(m, nn.Linear)]
    plain_mlp = bool(linear) and all(isinstance(m, (nn.Linear, nn.ReLU)) for m in layers) and len(list(q_net.parameters())) == 2 * len(linear)
    q_numpy = None
    if device.type == "cpu" and plain_mlp:
        weights = [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in linear]  # [in, out], [out]

        def q_numpy(obs: np.ndarray) -> np.ndarray:
            x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
            for k, (w, b) in enumerate(weights):
                x = x @ w + b
                if k < len(weights) - 1:
                    np.maximum(x, 0.0, out=x)
            return x  # [B, A]

    q_values = checked(q_numpy, q_forward, probe_batch((linear[0].in_features,)) if q_numpy else None, f"{ALGO} greedy policy")
    return lambda obs: q_values(obs).argmax(1)


def load_policy(args: Args, model_path: str, device: str = "cpu") -> Callable[[np.ndarray], np.ndarray]:
    """Greedy policy from a `--save-model` file (state dict, loaded with weights_only=True)."""
    envs = make_env(args.env_id, 1, scale_obs=args.scale_obs)
    q_net = QNetwork(obs_shape(envs.single_observation_space), int(envs.single_action_space.n), tuple(args.hidden_sizes))
    envs.close()
    q_net.load_state_dict(torch.load(model_path, map_location=device, weights_only=True))
    return greedy_policy(q_net.to(device).eval(), torch.device(device))


# 6. Training ------------------------------------------------------------------------------------
def train(args: Args) -> dict:
    validate(args)
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu")
    torch.set_num_threads(args.torch_threads)
    world = distributed.init(device)  # torchrun workers; 1 (no process group) in a plain process
    distributed.check_same(asdict(args))  # mismatched command lines fail here, on every worker
    # worker r seeds env i with seed + r * num_envs + i: no two envs share a seed; rank 0 is the one-process run
    seed = args.seed + distributed.rank() * args.num_envs
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # the network's init is overwritten by rank 0's anyway
    rng = np.random.default_rng(seed)  # exploration

    envs = make_env(args.env_id, args.num_envs, scale_obs=args.scale_obs)
    envs.action_space.seed(seed)
    envs.single_action_space.seed(seed)
    shape = obs_shape(envs.single_observation_space)  # images as they are, vectors flattened
    n_actions = int(envs.single_action_space.n)
    B = args.num_envs
    atari = pixels.kind(args.env_id) == "atari"

    T = args.n_steps
    num_updates = math.ceil(args.total_timesteps / (T * B * world))  # each update: every worker's rollout

    q_net = NetworkWrapper(
        QNetwork(shape, n_actions, args.hidden_sizes), lr=args.learning_rate, optimizer=args.optimizer,
        eps=args.optimizer_eps, alpha=args.rmsprop_alpha, centered=args.rmsprop_centered,
        lr_lambda=(lambda update: 1.0 - update / num_updates) if args.anneal_lr else None,
        clip_grad_norm=args.clip_grad_norm, target=True, device=device, workers=distributed,
    )
    greedy = greedy_policy(q_net.online, device)
    end_epsilons = final_epsilons(args, rng)  # [B]
    # the rollout, time-major [T, B]; rewritten in place every rollout; images stay uint8 (the network converts them)
    obs_dtype = np.uint8 if is_image(shape) else np.float32
    rollout_obs = np.zeros((T, B, *shape), dtype=obs_dtype)
    rollout_next_obs = np.zeros((T, B, *shape), dtype=obs_dtype)  # true next observations
    rollout_actions = np.zeros((T, B), dtype=np.int64)
    rollout_rewards = np.zeros((T, B), dtype=np.float32)
    rollout_terminated = np.zeros((T, B), dtype=bool)
    rollout_truncated = np.zeros((T, B), dtype=bool)
    eval_envs = functools.partial(make_env, args.env_id, training=False, scale_obs=args.scale_obs)
    run = Run(ALGO, args, ["episodic_return", "episodic_length", "loss", "q_values", "grad_norm", "epsilon", "sps", "eval_return", "eval_return_std"], write=distributed.is_main())
    if run.write:
        workers = f" x {world} workers" if world > 1 else ""
        print(f"{ALGO}: {args.env_id}, seed {args.seed}, {args.total_timesteps:,} steps on {device}{workers}; run folder {run.path}", flush=True)

    def to_device(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x).to(device)  # zero-copy on CPU

    global_step = 0
    state = run.restore(envs)  # None for a new run; generators, envs and running episodes are already restored
    if state is None:
        obs, _ = envs.reset(seed=seed)
    else:
        q_net.load_state_dict(state["q_net"])
        greedy = greedy_policy(q_net.online, device)  # the fast path checked again, on the loaded weights
        rng.bit_generator.state = state["rng"]
        obs, global_step = state["obs"], state["global_step"]
    obs = obs.reshape(B, *shape)
    error, completed, eval_returns, train_seconds = None, False, np.array([]), 0.0
    flush_before = flush_denormals()  # subnormals become 0 (x86 is ~100x slower on them); the caller's setting comes back in `finally`
    try:
        while global_step < args.total_timesteps:
            rollout_start = global_step
            for t in range(T):
                global_step += B * world  # all workers step in lockstep
                # act: epsilon-greedy on the online network, one batched forward for all envs
                epsilon = linear_epsilon(args.start_epsilon, end_epsilons, args.exploration_fraction * args.total_timesteps, global_step)
                actions = select_actions(greedy, obs, epsilon, n_actions, rng)
                next_obs, rewards, terminated, truncated, infos = envs.step(actions)
                next_obs = next_obs.reshape(B, *shape)

                # store: row t is the transition out of obs; its next observation is the true one;
                # Atari rewards are clipped to their sign for learning (the paper), not for logging
                rollout_obs[t] = obs
                rollout_actions[t] = actions
                rollout_rewards[t] = np.sign(rewards) if atari else rewards
                rollout_terminated[t] = terminated
                rollout_truncated[t] = truncated
                rollout_next_obs[t] = true_next_obs(next_obs, infos)
                obs = next_obs

                run.episodes(global_step, rewards, pixels.game_over(terminated, truncated, infos))  # logs whole games

            # learn: one gradient step on the whole rollout [T, B]
            targets = n_step_q_targets(
                q_net.target, to_device(rollout_rewards), to_device(rollout_next_obs),
                to_device(rollout_terminated), to_device(rollout_truncated), args.gamma,
            )  # [T, B]
            q_all = q_net.online(to_device(rollout_obs).flatten(0, 1)).unflatten(0, (T, B))  # [T, B, A]
            q = q_all.gather(2, to_device(rollout_actions).unsqueeze(2)).squeeze(2)  # [T, B]
            loss_fn = F.mse_loss if args.loss == "mse" else F.smooth_l1_loss
            loss, grad_norm = q_net.train_step(loss_fn(q, targets))
            if q_net.updates % 25 == 0:  # every 1,000 env steps at the defaults, as often as DQN
                if not math.isfinite(loss.item()):
                    raise FloatingPointError(f"loss became {loss.item()} at step {global_step}; lower --learning-rate or clip gradients")
                run.log(global_step, loss=loss.item(), q_values=q.mean().item(), grad_norm=grad_norm.item(),
                        epsilon=float(np.mean(epsilon)), sps=round(global_step / run.elapsed()))
            # sync: every `target_every` env steps crossed
            if global_step // args.target_every > rollout_start // args.target_every:
                q_net.sync()

            if args.eval_every and global_step // args.eval_every > rollout_start // args.eval_every and global_step < args.total_timesteps:
                run.evaluate(greedy, eval_envs, global_step)
            if run.checkpoint_due(rollout_start, global_step):  # at a rollout's end: everything the next rollout depends on
                run.save_checkpoint(global_step, envs, obs, {
                    "q_net": q_net.state_dict(), "rng": rng.bit_generator.state,
                })
            if global_step >= run.next_check:
                run.progress(global_step)
        train_seconds = run.elapsed()
        eval_returns, error = run.final_evaluation(greedy, eval_envs, global_step)  # rank 0 evaluates for all workers
        completed = True
    except (KeyboardInterrupt, Stopped, FloatingPointError, distributed.WorkerError) as e:
        error = run.stopped(e, global_step)
    except Exception as e:  # a bug: metrics.csv and summary.json keep the error, then the traceback
        run.crashed(e, global_step)
        raise
    finally:
        envs.close()
        torch.set_flush_denormal(flush_before)
    if args.save_model and run.write and (completed or error in ("interrupted", "preempted")):  # a NaN model is not worth keeping
        torch.save(q_net.online.state_dict(), run.path / "model.pt")
    summary = run.summary(global_step, train_seconds or run.elapsed(), eval_returns, world_size=world,
                          device=str(device), completed=completed, error=error, updates=q_net.updates)
    return run.finish(summary, global_step)


def main(args: Args) -> int:
    """Exit status: 0 done, 1 stopped by a NaN loss, a lost worker or a failed final evaluation, 2 bad input,
    75 stopped by SIGTERM/SIGUSR1 after a checkpoint, 130 interrupted."""
    return run_main(ALGO, train, args)


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main(parse_args(Args, __doc__)))
