"""n-step Q-learning: parallel envs, no replay memory, n-step returns and a target network.

Paper: Mnih et al. 2016, "Asynchronous methods for deep reinforcement learning", ICML,
https://arxiv.org/abs/1602.01783, algorithm S2 ("asynchronous n-step Q-learning").

`num_envs` envs act epsilon-greedily on the online network for `n_steps` steps each. Every step of
that rollout is then regressed on its forward-view n-step return: the first step of the rollout on
an n-step return, the last on a one-step return, all bootstrapped from max_a Q_target(s, a) at the
state where the rollout (or a truncated episode) ends, and not at all past a termination. One
gradient step per rollout, on all num_envs * n_steps transitions; the target network is a hard copy
of the online network, refreshed every `target_every` env steps. Each env decays its epsilon to its
own final value, drawn as the paper's threads draw theirs (0.1, 0.01 or 0.5 with probabilities 0.4,
0.3, 0.3): the envs that keep exploring keep states off the greedy path in every rollout. With one
final epsilon of 0.01 for every env (`--no-paper-epsilons`), a solved CartPole policy can forget how
to correct a slow drift of the cart, which no 500-step episode punishes until the cart leaves the
track, and fall from 500 to ~280 late in a run (benchmarks/results/margins.md).

Deviations from the paper:
- One process steps a vector env synchronously (A2C-style) instead of asynchronous
  actor-learner threads (Hogwild); workers under torchrun average their gradients at every
  update (harness.distributed).
- Adam (learning rate decayed linearly to 0, as the paper decays its RMSprop learning rate)
  instead of shared RMSprop; MSE loss; an MLP for vector observations.
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).

Pixels: the torso follows the observation (common.torso). Atari rewards are clipped to
their sign for learning only, a lost life ends the training episode, and the logged
returns are whole-game scores.

Run:
    python algos/n_step_q.py --env CartPole-v1 --seed 1
    # benchmarks/results/n_step_sarsa.md
    python algos/n_step_q.py --env Acrobot-v1 --seed 1 --n-steps 10
    # 2 workers, one network
    torchrun --nproc-per-node 2 algos/n_step_q.py --env CartPole-v1 --seed 1
    python algos/n_step_q.py --env MinAtar/Breakout-v1 --total-timesteps 1000000   (pixels extra)
Uses from common: network, returns, autoreset, pixels, torso; from harness: cli, run.
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
import tyro
from torch import Tensor, nn

# common/ and harness/: beside a copied script, one folder up here
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE if (_HERE / "common").is_dir() else _HERE.parent))
from common import pixels  # noqa: E402
from common.autoreset import true_next_obs  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.returns import n_step_returns  # noqa: E402
from common.torso import is_image, obs_shape, torso  # noqa: E402
from harness.cli import RunArgs, check, main as run_main  # noqa: E402
from harness.run import Run, vector_env  # noqa: E402

ALGO = "n_step_q"
Policy = Callable[[np.ndarray], np.ndarray]  # observations [B, *obs_shape] -> actions [B]


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args(RunArgs):
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id (discrete actions;
    vectors, MinAtar/* or Atari ids such as ALE/Breakout-v5)"""
    num_envs: int = 8
    """parallel envs stepped together (per worker under torchrun)"""

    n_steps: int = 5
    """env steps per env in a rollout (the paper's t_max);
    the first step's return looks n_steps ahead"""
    learning_rate: float = 1e-3
    """the optimizer's step size at the start"""
    optimizer: Literal["adam", "rmsprop"] = "adam"
    """optimizer of the Q-network (rmsprop with --rmsprop-centered: the DQN and MinAtar papers')"""
    optimizer_eps: float = 1e-8
    """the optimizer's epsilon (Adam's, or RMSprop's,
    added to the root of the squared-gradient average)"""
    rmsprop_alpha: float = 0.99
    """RMSprop's smoothing constant of the squared-gradient average"""
    rmsprop_centered: bool = False
    """RMSprop's centered variant: divide by an estimate
    of the gradient's std, not its root mean square"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount"""
    target_every: int = 500
    """env steps between target syncs (hard copies), checked after each gradient step"""
    start_epsilon: float = 1.0
    """exploration epsilon at the start"""
    end_epsilon: float = 0.01
    """exploration epsilon at the end of the schedule, for every env (with --no-paper-epsilons)"""
    paper_epsilons: bool = True
    """give each env its own final epsilon, 0.1, 0.01 or
    0.5 with probability 0.4, 0.3, 0.3 (the paper's); off: end_epsilon"""
    exploration_fraction: float = 0.2
    """fraction of total_timesteps over which epsilon decays linearly"""
    loss: Literal["mse", "huber"] = "mse"
    """regression loss on the TD error"""
    clip_grad_norm: Optional[float] = 10.0
    """clip the global gradient norm to this value (None: no clipping)"""
    hidden_sizes: tuple[int, ...] = (120, 84)
    """widths of the Q-network's hidden layers
    (vector observations; image torsos are the papers')"""
    scale_obs: bool = False
    """map each bounded observation component from [low,
    high] to [-1, 1] (vector envs; common/pixels.py)"""


# 3. Environment ---------------------------------------------------------------------------------
def make_env(
    env_id: str,
    num_envs: int,
    video_dir: str | None = None,
    training: bool = True,
    scale_obs: bool = False,
) -> gym.vector.VectorEnv:
    """common.pixels.make envs, SAME_STEP autoreset (the true final observation in
    infos["final_obs"]); Discrete actions and Box observations, or InputError
    (harness.run.vector_env)."""

    def make(render_mode: str | None) -> gym.Env:
        return pixels.make(env_id, training, render_mode, scale_obs=scale_obs)

    return vector_env(make, num_envs, ALGO, env_id, video_dir)


# 4. Networks ------------------------------------------------------------------------------------
class QNetwork(nn.Module):
    """Torso chosen from the observation (MLP, MinAtar conv, Nature conv)
    and one Q-value per action."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int, hidden_sizes: tuple[int, ...]):
        super().__init__()
        layers, width = torso(obs_shape, hidden_sizes)
        self.net = nn.Sequential(*layers, nn.Linear(width, n_actions))

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(obs)  # [B, A]


def build_network(args: Args, envs: gym.vector.VectorEnv) -> QNetwork:
    """The Q-network for `envs`' spaces; train() and load_policy() both build it here."""
    action_space = envs.single_action_space
    assert isinstance(action_space, gym.spaces.Discrete)  # vector_env refused any other
    n_actions = int(action_space.n)
    return QNetwork(obs_shape(envs.single_observation_space), n_actions, tuple(args.hidden_sizes))


# 5. Algorithm -----------------------------------------------------------------------------------
def linear_epsilon(
    start: float, end: float | np.ndarray, duration: float, step: int
) -> float | np.ndarray:
    """Epsilon decays linearly from `start` to `end` (per env if [B])
    over `duration` steps, then stays."""
    return start + (end - start) * min(1.0, step / duration)


def final_epsilons(args: Args, rng: np.random.Generator) -> np.ndarray:
    """Final epsilon of each env [B]:
    `end_epsilon`, or the paper's 0.1, 0.01 or 0.5 drawn per env."""
    if args.paper_epsilons:
        return rng.choice(
            np.array([0.1, 0.01, 0.5]), size=args.num_envs, p=np.array([0.4, 0.3, 0.3])
        )
    return np.full(args.num_envs, args.end_epsilon)


def select_actions(
    greedy: Policy,
    obs: np.ndarray,
    epsilon: float | np.ndarray,
    n_actions: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Epsilon-greedy actions [B], epsilon a scalar or [B];
    the network runs only if an env acts greedily."""
    explore = rng.random(len(obs)) < epsilon  # [B]
    if explore.all():
        return rng.integers(n_actions, size=len(obs))
    actions = greedy(obs)  # [B]
    if explore.any():
        actions[explore] = rng.integers(n_actions, size=int(explore.sum()))
    return actions


def n_step_q_targets(
    q_target: QNetwork,
    rewards: Tensor,
    next_obs: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
) -> Tensor:
    """Forward-view n-step Q-learning references [T, B] (algorithm S2): next_values[t] is max_a
    Q_target(s_{t+1}, a) at the true next observation `next_obs[t]` [T, B, *obs_shape];
    n_step_returns sums rewards to the rollout's end (n = None), stops at a termination and
    bootstraps at a truncation."""
    with torch.no_grad():
        # [T, B, A], through one batch of T * B observations: convolutions take [N, C, H, W]
        next_q = q_target(next_obs.flatten(0, 1)).unflatten(0, next_obs.shape[:2])
        next_values = next_q.max(-1).values  # [T, B]
    return n_step_returns(rewards, next_values, terminated, truncated, gamma, n=None)


def n_step_q_loss(
    q_online: QNetwork, q_target: QNetwork, rollout: list[Tensor], gamma: float, loss: str
) -> tuple[Tensor, Tensor]:
    """The regression of Q(s_t, a_t) on the references over a rollout
    (MSE or Huber), and mean Q (logged)."""
    obs, actions, rewards, next_obs, terminated, truncated = rollout  # [T, B, ...]
    targets = n_step_q_targets(q_target, rewards, next_obs, terminated, truncated, gamma)  # [T, B]
    # Q(s_t, a_t) [T, B]
    q = q_online(obs.flatten(0, 1)).gather(1, actions.view(-1, 1)).view_as(actions)
    return (F.mse_loss if loss == "mse" else F.smooth_l1_loss)(q, targets), q.mean()


def greedy_policy(q_net: QNetwork, device: torch.device) -> Policy:
    """obs [B, *obs_shape] -> argmax_a Q(obs, a) [B], as a numpy function through `forward()`."""

    def q_values(obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, device=device)
        with torch.no_grad():
            return q_net(x if x.dtype == torch.uint8 else x.float()).cpu().numpy()  # [B, A]

    def greedy(obs: np.ndarray) -> np.ndarray:
        return q_values(obs).argmax(1)  # [B]

    return greedy


# 6. Training ------------------------------------------------------------------------------------
def train(args: Args) -> dict:
    validate(args)
    # the run folder (rank 0's); torch threads, device;
    # torchrun's workers joined, each with its own seed
    fields = (  # metrics.csv's columns
        "episodic_return",
        "episodic_length",
        "loss",
        "q_values",
        "grad_norm",
        "epsilon",
        "sps",
        "eval_return",
        "eval_return_std",
    )
    run = Run(ALGO, args, fields, workers=True)
    device = run.device
    dist = run.workers
    world = run.world
    rng = np.random.default_rng(run.seed)  # exploration

    envs = make_env(args.env_id, args.num_envs, scale_obs=args.scale_obs)
    shape = obs_shape(envs.single_observation_space)  # images as they are, vectors flattened
    action_space = envs.single_action_space
    assert isinstance(action_space, gym.spaces.Discrete)  # vector_env refused any other
    n_actions = int(action_space.n)
    B = args.num_envs
    T = args.n_steps
    atari = pixels.kind(args.env_id) == "atari"

    # each update: every worker's rollout
    num_updates = math.ceil(args.total_timesteps / (T * B * world))

    def linear_decay(update: int) -> float:
        """the step size's multiplier: 1 at the first update, 0 after the last"""
        return 1.0 - update / num_updates

    q_net = NetworkWrapper(
        build_network(args, envs),
        lr=args.learning_rate,
        optimizer=args.optimizer,
        eps=args.optimizer_eps,
        alpha=args.rmsprop_alpha,
        centered=args.rmsprop_centered,
        lr_lambda=linear_decay if args.anneal_lr else None,
        clip_grad_norm=args.clip_grad_norm,
        target=True,
        device=device,
        workers=dist,
    )
    end_epsilons = final_epsilons(args, rng)  # [B]
    # epsilon's linear decay, in env steps
    decay_steps = args.exploration_fraction * args.total_timesteps
    # the rollout, time-major [T, B], rewritten in place;
    # images stay uint8 (the network converts them)
    rollout_obs, rollout_next_obs = np.zeros(
        (2, T, B, *shape), np.uint8 if is_image(shape) else np.float32
    )
    rollout_actions = np.zeros((T, B), dtype=np.int64)
    rollout_rewards = np.zeros((T, B), dtype=np.float32)
    rollout_terminated, rollout_truncated = np.zeros((2, T, B), dtype=bool)

    def eval_envs(num_envs: int, video_dir: str | None) -> gym.vector.VectorEnv:
        return make_env(args.env_id, num_envs, video_dir, training=False, scale_obs=args.scale_obs)

    # compiled with --compile, otherwise themselves
    acting_net = run.compile(q_net.online)
    n_step_q_loss_fn = run.compile(n_step_q_loss)

    # what the next rollout needs: run.after_step saves it, run.begin restores it
    def checkpoint() -> dict:
        return {"q_net": q_net, "rng": rng}

    # reset, or a resumed run's put back
    obs, global_step = run.begin(envs, eval_envs, checkpoint())
    obs = obs.reshape(B, *shape)
    greedy = greedy_policy(acting_net, device)
    # Ctrl-C, a stop signal or a NaN loss ends the loop where it happens (harness.run)
    with run.stoppable():
        while global_step < args.total_timesteps:
            rollout_start = global_step
            for t in range(T):
                global_step += B * world  # all workers step in lockstep
                # act: epsilon-greedy on the online network, one batched forward for all envs
                epsilon = linear_epsilon(args.start_epsilon, end_epsilons, decay_steps, global_step)
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

                # log the episodes that ended, whole games on Atari
                run.episodes(global_step, rewards, pixels.game_over(terminated, truncated, infos))

            # learn: one gradient step on the whole rollout [T, B] (as_tensor: no copy on CPU)
            arrays = [rollout_obs, rollout_actions, rollout_rewards]
            # n_step_q_loss's order
            arrays += [rollout_next_obs, rollout_terminated, rollout_truncated]
            rollout = [torch.as_tensor(x, device=device) for x in arrays]
            loss, q_mean = n_step_q_loss_fn(
                q_net.online, q_net.target, rollout, args.gamma, args.loss
            )
            loss, grad_norm = q_net.train_step(loss)
            if q_net.updates % 25 == 0:  # every 1,000 env steps at the defaults, as often as DQN
                run.stop_if_nan(global_step, loss)
                run.log(
                    global_step,
                    loss=loss,
                    q_values=q_mean,
                    grad_norm=grad_norm,
                    epsilon=np.mean(epsilon),
                )
            # sync: every `target_every` env steps crossed
            if global_step // args.target_every > rollout_start // args.target_every:
                q_net.sync()

            # evaluate greedy (rank 0), save checkpoint()
            # (then stop, on a stop signal), show progress
            run.after_step(rollout_start, global_step, obs, greedy, checkpoint)
    return run.finish(
        global_step,
        greedy,
        model=q_net.online,
        world_size=world,
        device=str(device),
        updates=q_net.updates,
    )


# main(args), or main() for the command line's;
# exit 0 done, 1 failed, 2 bad input, 75 stopped, 130 Ctrl-C
def main(args: Args | None = None) -> int:
    """Train on the command line's arguments (or `args`); the exit status (harness.cli.main)."""
    return run_main(ALGO, train, Args, __doc__, args)


# Input checks and saved policies -----------------------------------------------------------------
def validate(args: Args) -> None:
    """Raise InputError (one line, exit 2) naming the first bad value:
    the env first, then the numbers."""
    # an unknown id, the wrong action space
    make_env(args.env_id, 1, scale_obs=args.scale_obs).close()
    rmsprop_ok = args.optimizer == "rmsprop" or (
        args.rmsprop_alpha == 0.99 and not args.rmsprop_centered
    )
    conditions = [  # checked after harness.cli.SHARED_CHECKS
        (
            0.0 <= args.rmsprop_alpha < 1.0,
            f"--rmsprop-alpha must be in [0, 1), got {args.rmsprop_alpha}",
        ),
        (rmsprop_ok, "--rmsprop-alpha and --rmsprop-centered need --optimizer rmsprop"),
    ]
    positive = ("n_steps", "target_every", "learning_rate", "optimizer_eps", "clip_grad_norm")
    fractions = ("start_epsilon", "end_epsilon", "gamma")
    check(args, conditions, positive=positive, fractions=fractions)


def load_policy(args: Args, model_path: str, device: str = "cpu") -> Policy:
    """Greedy policy from a `--save-model` file (a state dict, loaded weights_only),
    for tools/evaluate.py."""
    envs = make_env(args.env_id, 1, scale_obs=args.scale_obs)
    q_net = build_network(args, envs)
    envs.close()
    q_net.load_state_dict(torch.load(model_path, map_location=device, weights_only=True))
    return greedy_policy(q_net.to(device).eval(), torch.device(device))


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main())
