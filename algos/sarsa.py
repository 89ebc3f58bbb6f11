"""SARSA: on-policy n-step SARSA and Expected SARSA with parallel envs and no replay memory.

Papers: Rummery & Niranjan 1994 (SARSA); the n-step, parallel-env form of Mnih et al. 2016,
"Asynchronous methods for deep reinforcement learning", https://arxiv.org/abs/1602.01783
(one-step SARSA, section 4); van Seijen et al. 2009 (Expected SARSA); AgentNet's sarsa objective.

`num_envs` envs act epsilon-greedily on the online network for `n_steps` steps each; one gradient
step then regresses each step on its forward-view n-step return, bootstrapped from
Q(s_{t+n}, a_{t+n}), a_{t+n} the behaviour policy's action there (the next rollout's first action;
at a truncation, one drawn at the true final observation). `--expected` uses Q's expectation under
that policy instead; `--n-steps 1` is one-step SARSA.

Deviations from the papers:
- One process steps a vector env synchronously instead of asynchronous actor-learner threads, and
  workers under torchrun average their gradients at every update (harness.distributed).
- Adam (learning rate decayed linearly to 0) instead of shared RMSprop;
  MSE loss; an MLP for vectors.
- Truncated episodes bootstrap from the true final observation (the papers predate truncation).
- The bootstrap is the target network's (hard copies every `target_every` env steps), as in Mnih et
  al.'s one-step SARSA; `--no-target-network` bootstraps from the online network, as Rummery &
  Niranjan's SARSA does, and made some seeds collapse (benchmarks/results/n_step_sarsa.md).

Pixels: the torso follows the observation (common.torso). Atari rewards are clipped to
their sign for learning only, a lost life ends the training episode, and the logged
returns are whole-game scores.

Run:
    python algos/sarsa.py --env CartPole-v1 --seed 1
    # benchmarks/results/n_step_sarsa.md
    python algos/sarsa.py --env Acrobot-v1 --seed 1 --n-steps 10 --target-every 1000
    # 2 workers, one network
    torchrun --nproc-per-node 2 algos/sarsa.py --env CartPole-v1 --seed 1
    python algos/sarsa.py --env MinAtar/Breakout-v1 --total-timesteps 1000000   (pixels extra)
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

ALGO = "sarsa"
METRICS = (  # metrics.csv's columns
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
Policy = Callable[[np.ndarray], np.ndarray]  # obs [B, *obs_shape] -> actions [B]


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args(RunArgs):
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id (discrete actions;
    vectors, MinAtar/* or Atari ids such as ALE/Breakout-v5)"""
    num_envs: int = 8
    """parallel envs stepped together (per worker under torchrun)"""

    n_steps: int = 5
    """env steps per env in a rollout; the first step's
    return looks n_steps ahead (1: one-step SARSA)"""
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
    expected: bool = False
    """Expected SARSA: bootstrap from the expectation of Q under the epsilon-greedy policy"""
    target_network: bool = True
    """bootstrap from a target copy of the Q-network instead of the online network"""
    target_every: int = 500
    """env steps between target syncs (hard copies), checked after each gradient step"""
    start_epsilon: float = 1.0
    """exploration epsilon at the start"""
    end_epsilon: float = 0.01
    """exploration epsilon at the end of the schedule"""
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
def linear_epsilon(start: float, end: float, duration: float, step: int) -> float:
    """Epsilon decays linearly from `start` to `end` over `duration` env steps, then stays."""
    return start + (end - start) * min(1.0, step / duration)


def select_actions(
    greedy: Policy, obs: np.ndarray, epsilon: float, n_actions: int, rng: np.random.Generator
) -> np.ndarray:
    """Epsilon-greedy actions [B]; the network is only run when some env acts greedily."""
    explore = rng.random(len(obs)) < epsilon  # [B]
    if explore.all():
        return rng.integers(n_actions, size=len(obs))
    actions = greedy(obs)  # [B]
    if explore.any():
        actions[explore] = rng.integers(n_actions, size=int(explore.sum()))
    return actions


def sarsa_targets(
    q_values: nn.Module,
    rewards: Tensor,
    next_obs: Tensor,
    next_actions: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    expected: bool = False,
    epsilon: Tensor | None = None,
    q_policy: nn.Module | None = None,
) -> Tensor:
    """Forward-view n-step SARSA references [T, B]: next_values[t] is Q(s_{t+1}, a_{t+1}) at the
    true next observation `next_obs[t]` [T, B, *obs_shape] and the behaviour policy's action there
    `next_actions[t]` [T, B]; Expected SARSA replaces it by sum_a pi(a | s_{t+1}) Q(s_{t+1}, a), pi
    epsilon-greedy (`epsilon` [T, 1] or [T, B], the value used when acting) on `q_policy`
    (default `q_values`). n_step_returns sums rewards to the rollout's end (n = None), stops at a
    termination and bootstraps at a truncation."""
    with torch.no_grad():
        # convolutions take [N, C, H, W]
        flat_next_obs = next_obs.flatten(0, 1)
        lead = next_obs.shape[:2]
        next_q = q_values(flat_next_obs).unflatten(0, lead)  # [T, B, A]
        if expected:
            if epsilon is None:
                raise ValueError("Expected SARSA needs the acting policy's epsilon")
            # the greedy action: q_values' own, or q_policy's
            if q_policy is None or q_policy is q_values:
                policy_q = next_q
            else:
                policy_q = q_policy(flat_next_obs).unflatten(0, lead)  # [T, B, A]
            greedy = policy_q.argmax(-1, keepdim=True)  # [T, B, 1]
            # [T, B, A]
            probs = (epsilon / next_q.shape[-1]).unsqueeze(-1).expand_as(next_q).clone()
            probs.scatter_add_(-1, greedy, (1.0 - epsilon).unsqueeze(-1).expand_as(greedy))
            next_values = (probs * next_q).sum(-1)  # [T, B]
        else:
            next_values = next_q.gather(-1, next_actions.unsqueeze(-1)).squeeze(-1)  # [T, B]
    return n_step_returns(rewards, next_values, terminated, truncated, gamma, n=None)


def sarsa_loss(
    q_online: nn.Module,
    q_target: nn.Module | None,
    gamma: float,
    expected: bool,
    loss: str,
    obs: Tensor,
    actions: Tensor,
    rewards: Tensor,
    next_obs: Tensor,
    next_actions: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    epsilon: Tensor,
) -> tuple[Tensor, Tensor]:
    """The regression of Q(s_t, a_t) on the references over a rollout (MSE or Huber),
    and mean Q (logged); the references bootstrap from `q_target`, or from the online
    network where there is none. The rollout's tensors are [T, B, ...], `epsilon` [T, 1]."""
    q_target = q_online if q_target is None else q_target
    targets = sarsa_targets(
        q_target,
        rewards,
        next_obs,
        next_actions,
        terminated,
        truncated,
        gamma,
        expected,
        epsilon,
        q_online,
    )  # [T, B]
    # Q(s_t, a_t) [T, B]
    q = q_online(obs.flatten(0, 1)).gather(1, actions.view(-1, 1)).view_as(actions)
    return (F.mse_loss if loss == "mse" else F.smooth_l1_loss)(q, targets), q.mean()


def next_actions(
    greedy: Policy,
    next_obs: np.ndarray,
    real_next_obs: np.ndarray,
    truncated: np.ndarray,
    epsilon: float,
    n_actions: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The behaviour policy's (actions to take next [B], bootstrap actions [B]): equal, except
    where the episode was truncated: `next_obs` is then the new episode's first observation, and
    the bootstrap action is sampled at the true final observation `real_next_obs` (never taken), in
    the same batched forward."""
    cut = np.flatnonzero(truncated)
    if len(cut) == 0:  # the common case: no copy of the observations
        actions = select_actions(greedy, next_obs, epsilon, n_actions, rng)
        return actions, actions
    both = select_actions(
        greedy, np.concatenate([next_obs, real_next_obs[cut]]), epsilon, n_actions, rng
    )
    actions = both[: len(next_obs)]  # both: [B + len(cut)]
    bootstrap = both[: len(next_obs)].copy()
    bootstrap[cut] = both[len(next_obs) :]
    return actions, bootstrap


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
    # the run folder (rank 0's), METRICS its columns; torch threads, device;
    # torchrun's workers joined
    run = Run(ALGO, args, METRICS, workers=True)  # each worker seeded with its own seed
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
    # epsilon's linear decay, in env steps
    decay_steps = args.exploration_fraction * args.total_timesteps

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
        target=args.target_network,
        device=device,
        workers=dist,
    )
    # the rollout, time-major [T, B], rewritten in place;
    # images stay uint8 (the network converts them)
    rollout_obs, rollout_next_obs = np.zeros(
        (2, T, B, *shape), np.uint8 if is_image(shape) else np.float32
    )
    # next: at the true next obs
    rollout_actions, rollout_next_actions = np.zeros((2, T, B), dtype=np.int64)
    rollout_rewards = np.zeros((T, B), dtype=np.float32)
    rollout_epsilon = np.zeros((T, 1), dtype=np.float32)
    rollout_terminated, rollout_truncated = np.zeros((2, T, B), dtype=bool)
    # the actions the next step takes (restored in place on resume)
    actions = np.zeros(B, dtype=np.int64)

    def eval_envs(num_envs: int, video_dir: str | None) -> gym.vector.VectorEnv:
        return make_env(args.env_id, num_envs, video_dir, training=False, scale_obs=args.scale_obs)

    # themselves unless --compile
    acting_net = run.compile(q_net.online)
    loss_fn = run.compile(sarsa_loss)

    # what the next rollout needs: run.after_step saves it, run.begin restores it
    def checkpoint() -> dict:
        return {"q_net": q_net, "rng": rng, "actions": actions}

    # reset, or a resumed run's put back
    obs, global_step = run.begin(envs, eval_envs, checkpoint())
    obs = obs.reshape(B, *shape)
    greedy = greedy_policy(acting_net, device)
    if run.envs_reset:  # a new run, or envs restarted on resume: choose their first actions
        epsilon = linear_epsilon(args.start_epsilon, args.end_epsilon, decay_steps, global_step)
        actions = select_actions(greedy, obs, epsilon, n_actions, rng)
    # Ctrl-C, a stop signal or a NaN loss ends the loop there (harness/run.py)
    with run.stoppable():
        while global_step < args.total_timesteps:
            rollout_start = global_step
            for t in range(T):
                global_step += B * world  # all workers step in lockstep
                # act: the action chosen at the previous step
                # (on-policy: it is what row t-1 bootstraps from)
                next_obs, rewards, terminated, truncated, infos = envs.step(actions)
                next_obs = next_obs.reshape(B, *shape)
                real_next_obs = true_next_obs(next_obs, infos)
                # choose the next and the bootstrap actions now,
                # epsilon-greedy on the online network
                epsilon = linear_epsilon(
                    args.start_epsilon, args.end_epsilon, decay_steps, global_step
                )
                # the policy at the next observation, for Expected SARSA
                rollout_epsilon[t] = epsilon
                following, bootstrap = next_actions(
                    greedy, next_obs, real_next_obs, truncated, epsilon, n_actions, rng
                )

                # store: row t is the transition out of obs; its next observation is the true
                # one; Atari rewards are clipped to their sign for learning (the paper), not
                # for logging (whole games)
                rollout_obs[t] = obs
                rollout_actions[t] = actions
                rollout_rewards[t] = np.sign(rewards) if atari else rewards
                rollout_terminated[t] = terminated
                rollout_truncated[t] = truncated
                rollout_next_obs[t] = real_next_obs
                rollout_next_actions[t] = bootstrap
                obs = next_obs
                actions = following
                run.episodes(global_step, rewards, pixels.game_over(terminated, truncated, infos))

            # learn: one gradient step on the whole rollout [T, B] (as_tensor: no copy on CPU)
            loss, q_mean = loss_fn(
                q_net.online,
                q_net.target,
                gamma=args.gamma,
                expected=args.expected,
                loss=args.loss,
                obs=torch.as_tensor(rollout_obs, device=device),
                actions=torch.as_tensor(rollout_actions, device=device),
                rewards=torch.as_tensor(rollout_rewards, device=device),
                next_obs=torch.as_tensor(rollout_next_obs, device=device),
                next_actions=torch.as_tensor(rollout_next_actions, device=device),
                terminated=torch.as_tensor(rollout_terminated, device=device),
                truncated=torch.as_tensor(rollout_truncated, device=device),
                epsilon=torch.as_tensor(rollout_epsilon, device=device),
            )
            loss, grad_norm = q_net.train_step(loss)
            if q_net.updates % 25 == 0:  # every 1,000 env steps at the defaults, as often as DQN
                run.stop_if_nan(global_step, loss)
                run.log(
                    global_step, loss=loss, q_values=q_mean, grad_norm=grad_norm, epsilon=epsilon
                )
            # sync: every `target_every` env steps crossed
            if (
                args.target_network
                and global_step // args.target_every > rollout_start // args.target_every
            ):
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
    conditions = [  # and harness.cli.SHARED_CHECKS
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
