"""A2C: synchronous advantage actor-critic, for discrete and continuous actions.

Paper: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", ICML,
https://arxiv.org/abs/1602.01783 (A3C), run synchronously as in OpenAI Baselines' A2C
(Wu et al. 2017, https://openai.com/index/openai-baselines-acktr-a2c/). GAE: Schulman et
al. 2016, arXiv:1506.02438.

`num_envs` envs are stepped together for `n_steps` steps with the current policy; the rollout then
gives one gradient step on -A_t log pi(a_t|s_t) + value_coef (G_t - V(s_t))^2 - entropy_coef
H(pi(.|s_t)), where G_t is the n-step return (to the end of the rollout by default, from
common.n_step_returns) or the GAE(lambda) return, and A_t = G_t - V(s_t). The policy is categorical
for Discrete actions and a diagonal Gaussian with a state-independent log-std for Box actions
(sampled unclipped, clipped at the env).

Deviations from the paper:
- Synchronous: parallel envs in one process, or several processes under torchrun that average
  their gradients every update (harness.distributed), instead of asynchronous workers.
- Separate actor and critic MLPs with tanh and orthogonal init by default (Stable-Baselines3's
  A2C); `--shared-torso` gives the paper's shared torso with two heads.
- torch's RMSprop (eps outside the square root) with its own statistics, not shared between threads.
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).
- The step size decays linearly to 0 by default (OpenAI Baselines'; `--no-anneal-lr`: constant, as
  SB3's): with a constant one late updates can undo what a seed learned
  (benchmarks/results/a2c.md, step-size decay).
- Optional running observation and reward normalisation (OpenAI Baselines' VecNormalize). The
  observation statistics are network buffers (a saved model carries them), refreshed after each
  update so a rollout acts and learns with one policy; under torchrun both pool all workers' data.
- Optional tanh-bounded Gaussian mean (`--bounded-mean`): an unbounded mean can drift far past
  the action bounds, where every sample clips to the same action and exploration stops.

Pixels (discrete actions): the torso follows the observation (MLP for vectors, MinAtar's conv for
MinAtar grids, the DQN paper's conv net for Atari's 84x84 frame stacks, preprocessed by
common.pixels as that paper did). Images stay uint8 until the network, so `--normalize-obs` is for
vectors. Atari rewards are clipped to their sign for learning only, a lost life ends the training
episode, and logged returns are whole games.

Run:
    python algos/a2c.py --env CartPole-v1 --seed 1
    torchrun --nproc-per-node 2 algos/a2c.py --env CartPole-v1 --seed 1   # 2 workers, one network
    python algos/a2c.py --env MinAtar/Breakout-v1 --shared-torso \
        --total-timesteps 1000000   (pixels extra)
Uses from common: network, returns, autoreset, pixels, torso, fastpath; from harness: cli, run.
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
import tyro
from torch import Tensor, nn

# common/, harness/: beside a copied script, a folder up in this repo
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE if (_HERE / "common").is_dir() else _HERE.parent))
from common import pixels  # noqa: E402
from common.autoreset import true_next_obs  # noqa: E402
from common.fastpath import checked, numpy_mlp, probe_batch  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.returns import n_step_returns  # noqa: E402
from common.torso import is_image, obs_shape, torso  # noqa: E402

if TYPE_CHECKING:  # for the type checker; --normalize-obs imports it where it is used
    from common.normalize import ObsNormalizer
from harness.cli import RunArgs, check, main as run_main  # noqa: E402
from harness.errors import InputError  # noqa: E402
from harness.run import Run, vector_env  # noqa: E402

ALGO = "a2c"
Policy = Callable[[np.ndarray], np.ndarray]  # obs [B, *obs_shape] -> actions [B] or [B, A]


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args(RunArgs):
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id (discrete or continuous
    actions; MinAtar/* or Atari ids: discrete)"""
    num_envs: int = 8
    """parallel envs stepped together (per worker under torchrun)"""

    learning_rate: float = 7e-4
    """optimizer step size"""
    anneal_lr: bool = True
    """decay the step size linearly to 0 over the run
    (--no-anneal-lr: constant, Stable-Baselines3's)"""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """optimizer of the actor-critic network"""
    rmsprop_alpha: float = 0.99
    """RMSprop's smoothing constant"""
    optimizer_eps: float = 1e-5
    """the optimizer's epsilon (RMSprop's or Adam's)"""
    gamma: float = 0.99
    """discount"""
    n_steps: int = 5
    """env steps per env in one rollout (the rollout length T)"""
    n_step_return: Optional[int] = None
    """lookahead n of the n-step return, in env steps (None: to the end of the rollout)"""
    gae_lambda: Optional[float] = None
    """use GAE(lambda) advantages with this lambda instead of n-step returns (None: n-step)"""
    value_coef: float = 0.5
    """weight of the value loss"""
    entropy_coef: float = 0.0
    """weight of the entropy bonus"""
    clip_grad_norm: Optional[float] = 0.5
    """clip the global gradient norm to this value (None: no clipping)"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """widths of the actor's and critic's hidden layers
    (vector observations; image torsos: the papers')"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden-layer activation of vector torsos (image torsos use ReLU)"""
    shared_torso: bool = False
    """one torso with a policy head and a value head
    (the paper) instead of separate actor and critic"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy (Box actions)"""
    bounded_mean: bool = False
    """squash the Gaussian mean into the action bounds with tanh (the sample stays unclipped)"""
    normalize_obs: bool = False
    """normalise vector observations by a running mean and std (saved with the model)"""
    normalize_reward: bool = False
    """scale rewards by a running std of the discounted return"""


# 3. Environment ---------------------------------------------------------------------------------
def make_env(
    env_id: str, num_envs: int, video_dir: str | None = None, training: bool = True
) -> gym.vector.VectorEnv:
    """Vector env with SAME_STEP autoreset (the true final observation in infos["final_obs"]); pixel
    ids preprocessed by common.pixels, `training=False` playing whole Atari games (evaluation);
    Discrete or 1-D Box actions (images: Discrete only), or InputError (harness.run.vector_env)."""

    def make(render_mode: str | None) -> gym.Env:
        return pixels.make(env_id, training, render_mode)

    return vector_env(make, num_envs, ALGO, env_id, video_dir, continuous=True)


# 4. Networks ------------------------------------------------------------------------------------
class ActorCritic(nn.Module):
    """Policy head (logits [N, A] or Gaussian mean [N, A])
    and value head [N], from an observation."""

    obs_norm: ObsNormalizer | None
    log_std: nn.Parameter | None
    mean_center: Tensor | None  # buffers: the bounded mean's, or None
    mean_half_range: Tensor | None

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_dim: int,
        discrete: bool,
        hidden_sizes: tuple[int, ...],
        shared_torso: bool = False,
        activation: str = "tanh",
        normalize_obs: bool = False,
        log_std_init: float = 0.0,
        mean_bounds: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        super().__init__()
        act = nn.Tanh if activation == "tanh" else nn.ReLU
        self.discrete = discrete
        self.obs_shape = tuple(obs_shape)
        if normalize_obs and is_image(obs_shape):
            raise InputError(
                "--normalize-obs is for vector observations; these are images of shape "
                f"{tuple(obs_shape)}"
            )
        if normalize_obs:  # common/normalize.py, imported with the flag only
            from common.normalize import ObsNormalizer
        self.obs_norm = ObsNormalizer(obs_shape[0]) if normalize_obs else None
        # images: the papers' conv torsos, with ReLU
        layers, width = torso(obs_shape, hidden_sizes, act)
        self.actor_torso = nn.Sequential(*layers)
        self.critic_torso = (
            None if shared_torso else nn.Sequential(*torso(obs_shape, hidden_sizes, act)[0])
        )
        self.policy_head = nn.Linear(width, action_dim)
        self.value_head = nn.Linear(width, 1)
        self.log_std = (
            None if discrete else nn.Parameter(torch.full((action_dim,), float(log_std_init)))
        )
        mean_center = None
        mean_half_range = None
        if mean_bounds is not None:
            low = torch.as_tensor(mean_bounds[0]).float()
            high = torch.as_tensor(mean_bounds[1]).float()
            mean_center = (high + low) / 2
            mean_half_range = (high - low) / 2
        self.register_buffer("mean_center", mean_center)
        self.register_buffer("mean_half_range", mean_half_range)
        # orthogonal init (Baselines, SB3);
        # a small policy head starts the policy near uniform / zero-mean
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(m.weight, math.sqrt(2))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.orthogonal_(self.policy_head.weight, 0.01)
        nn.init.orthogonal_(self.value_head.weight, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs if self.obs_norm is None else self.obs_norm(obs)
        h = self.actor_torso(x)
        hv = h if self.critic_torso is None else self.critic_torso(x)
        head = self.policy_head(h)  # [N, A]
        # --bounded-mean: inside the action bounds
        if self.mean_center is not None and self.mean_half_range is not None:
            head = self.mean_center + self.mean_half_range * torch.tanh(head)
        return head, self.value_head(hv).squeeze(-1)  # [N, A], [N]

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs if self.obs_norm is None else self.obs_norm(obs)
        h = self.actor_torso(x) if self.critic_torso is None else self.critic_torso(x)
        return self.value_head(h).squeeze(-1)  # [N]


def build_network(args: Args, envs: gym.vector.VectorEnv) -> ActorCritic:
    space = envs.single_action_space
    bounds: tuple[np.ndarray, np.ndarray] | None = None  # --bounded-mean's
    if isinstance(space, gym.spaces.Discrete):
        action_dim = int(space.n)
    else:
        assert isinstance(space, gym.spaces.Box)  # vector_env refused any other
        action_dim = int(space.shape[0])
        if args.bounded_mean:
            if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
                raise InputError(
                    f"--bounded-mean needs finite action bounds; {args.env_id} has {space}"
                )
            bounds = (space.low, space.high)
    return ActorCritic(
        obs_shape(envs.single_observation_space),
        action_dim,
        discrete=isinstance(space, gym.spaces.Discrete),
        hidden_sizes=tuple(args.hidden_sizes),
        shared_torso=args.shared_torso,
        activation=args.activation,
        normalize_obs=args.normalize_obs,
        log_std_init=args.log_std_init,
        mean_bounds=bounds,
    )


# 5. Algorithm -----------------------------------------------------------------------------------
def a2c_targets(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    n: int | None = None,
    gae_lambda: float | None = None,
) -> tuple[Tensor, Tensor]:
    """(advantages, returns), both [T, B], from a rollout's [T, B] tensors; no gradient.

    `values[t] = V(s_t)`, `next_values[t] = V(s_{t+1})` at the true next observation. n-step
    (`gae_lambda` None): n_step_returns with lookahead `n` (None: to the rollout's end),
    advantages = returns - values. GAE(lambda): A_t = delta_t + gamma lambda (1 - done_t) A_{t+1},
    A_T = 0, delta_t = r_t + gamma (1 - terminated_t) next_values_t - values_t, returns = A + values
    (lambda = 1: the n-step return to the rollout's end). Under SAME_STEP autoreset the row after an
    episode's end is already the new episode."""
    with torch.no_grad():
        values = values.to(rewards.dtype)
        if gae_lambda is None:
            returns = n_step_returns(rewards, next_values, terminated, truncated, gamma, n)
            return returns - values, returns
        not_terminated = 1.0 - terminated.to(rewards.dtype)
        not_done = not_terminated * (1.0 - truncated.to(rewards.dtype))  # [T, B]
        deltas = rewards + gamma * not_terminated * next_values - values  # [T, B]
        advantages = torch.zeros_like(rewards)
        running = torch.zeros_like(rewards[0])  # [B]
        for t in reversed(range(rewards.shape[0])):
            running = deltas[t] + gamma * gae_lambda * not_done[t] * running
            advantages[t] = running
        return advantages, advantages + values


def log_prob_entropy(
    head: Tensor, log_std: Tensor | None, actions: Tensor
) -> tuple[Tensor, Tensor]:
    """log pi(a|s) [N] and entropy [N]: categorical over logits `head` [N, A] (log_std None), else
    diagonal Gaussian with mean `head` [N, A] and log-std [A], of the unclipped actions [N, A]."""
    if log_std is None:
        logp_all = F.log_softmax(head, dim=-1)  # [N, A]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(1, actions.long().unsqueeze(1)).squeeze(1), entropy
    z = (actions - head) * torch.exp(-log_std)  # [N, A]
    logp = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum().expand(head.shape[0])
    return logp, entropy


def a2c_loss(
    logp: Tensor,
    entropy: Tensor,
    values: Tensor,
    advantages: Tensor,
    returns: Tensor,
    value_coef: float,
    entropy_coef: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(loss, policy_loss, value_loss, mean entropy);
    tensors [N], advantages and returns without gradient."""
    policy_loss = -(advantages * logp).mean()
    value_loss = F.mse_loss(values, returns)
    entropy_mean = entropy.mean()
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy_mean
    return loss, policy_loss, value_loss, entropy_mean


def a2c_rollout_loss(
    ac: ActorCritic,
    obs: Tensor,
    actions: Tensor,
    rewards: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    n: int | None,
    gae_lambda: float | None,
    value_coef: float,
    entropy_coef: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """a2c_loss's (loss, policy_loss, value_loss, mean entropy) of a rollout: obs
    [T, B, *obs_shape], actions [T, B] or [T, B, A], rewards, next_values (V(true s_{t+1}), no
    gradient), terminated, truncated [T, B]."""
    head, values = ac(obs.flatten(0, 1))  # [T * B, A], [T * B]
    advantages, returns = a2c_targets(
        rewards,
        values.detach().reshape_as(rewards),
        next_values,
        terminated,
        truncated,
        gamma,
        n,
        gae_lambda,
    )
    logp, entropy = log_prob_entropy(head, ac.log_std, actions.flatten(0, 1))
    return a2c_loss(
        logp, entropy, values, advantages.flatten(), returns.flatten(), value_coef, entropy_coef
    )


def sample_actions(
    head: np.ndarray, std: np.ndarray | None, rng: np.random.Generator
) -> np.ndarray:
    """Actions from the policy head [B, A]: categorical over logits (std None) -> [B]
    int64, else Gaussian mean + std * noise -> [B, A] float32, unclipped (the env clips,
    the loss sees this sample)."""
    if std is None:
        p = np.exp(head - head.max(1, keepdims=True))  # [B, A]
        cdf = np.cumsum(p, 1)
        u = rng.random((len(head), 1)) * cdf[:, -1:]  # inverse-CDF sampling, one uniform per env
        return np.minimum((cdf < u).sum(1), head.shape[1] - 1)
    return (head + std * rng.standard_normal(head.shape)).astype(np.float32)


def numpy_head(net: ActorCritic, device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, *obs_shape] -> policy head [B, A] without gradient, as a numpy function:
    forward()'s, or on CPU a numpy copy of a plain MLP actor (common.fastpath.numpy_mlp: at a few
    envs torch's per-op dispatch costs more than the arithmetic) on zero-copy views of the
    parameters and normaliser buffers, checked against forward() on a probe batch. Build it again
    after loading weights."""

    def head_forward(obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, device=device).reshape(len(obs), *net.obs_shape)
        with torch.no_grad():  # images stay uint8: the torso converts them
            return net(x if x.dtype == torch.uint8 else x.float())[0].cpu().numpy()

    actor = [*net.actor_torso, net.policy_head]
    mlp = numpy_mlp(actor, device, net, net.critic_torso, net.value_head, net.log_std)
    if mlp is None:  # not on CPU, or not a plain MLP actor
        return head_forward
    norm = net.obs_norm
    # zero-copy views of the running statistics, and the normaliser's constants
    stats = None if norm is None else (norm.mean.numpy(), norm.var.numpy(), norm.eps, norm.clip)
    bounds = None
    if net.mean_center is not None and net.mean_half_range is not None:
        bounds = (net.mean_center.numpy(), net.mean_half_range.numpy())

    def head_numpy(obs: np.ndarray) -> np.ndarray:  # forward(): normalise, the MLP, bound the mean
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        if stats is not None:
            mean, var, eps, clip = stats
            z = (x - mean) / np.sqrt(var + eps)
            x = np.clip(z, -clip, clip).astype(np.float32)
        x = mlp(x)  # [B, A]
        return x if bounds is None else bounds[0] + bounds[1] * np.tanh(x)

    return checked(head_numpy, head_forward, f"{ALGO} policy", probe=probe_batch(net.obs_shape))


def greedy_policy(net: ActorCritic, device: torch.device, action_space: gym.Space) -> Policy:
    """obs [B, *obs_shape] -> argmax of the logits [B],
    or the Gaussian mean clipped to the bounds [B, A]."""
    head = numpy_head(net, device)
    if isinstance(action_space, gym.spaces.Discrete):

        def argmax(obs: np.ndarray) -> np.ndarray:
            return head(obs).argmax(1)  # [B]

        return argmax
    assert isinstance(action_space, gym.spaces.Box)  # vector_env refused any other
    low = action_space.low
    high = action_space.high

    def clipped_mean(obs: np.ndarray) -> np.ndarray:
        return np.clip(head(obs), low, high)  # [B, A]

    return clipped_mean


# 6. Training ------------------------------------------------------------------------------------
def train(args: Args) -> dict:
    validate(args)
    columns = (  # of metrics.csv
        "episodic_return",
        "episodic_length",
        "loss",
        "policy_loss",
        "value_loss",
        "entropy",
        "grad_norm",
        "sps",
        "eval_return",
        "eval_return_std",
    )
    # the run folder (rank 0's); torch threads, device;
    # torchrun's workers joined, each with its own seed
    run = Run(ALGO, args, columns, workers=True)
    device = run.device
    dist = run.workers
    world = run.world
    rng = np.random.default_rng(run.seed)  # action sampling

    envs = make_env(args.env_id, args.num_envs)
    space = envs.single_action_space
    assert space.shape is not None  # Discrete: (), Box: (A,)
    shape = obs_shape(envs.single_observation_space)  # vectors flattened
    atari = pixels.kind(args.env_id) == "atari"
    discrete = isinstance(space, gym.spaces.Discrete)
    B = args.num_envs
    T = args.n_steps
    # each update: every worker's rollout
    num_updates = math.ceil(args.total_timesteps / (B * T * world))

    def linear_decay(update: int) -> float:
        """the step size's multiplier: 1 at the first update, 0 after the last"""
        return 1.0 - update / num_updates

    net = NetworkWrapper(
        build_network(args, envs),
        lr=args.learning_rate,
        optimizer=args.optimizer,
        eps=args.optimizer_eps,
        alpha=args.rmsprop_alpha,
        clip_grad_norm=args.clip_grad_norm,
        device=device,
        workers=dist,
        lr_lambda=linear_decay if args.anneal_lr else None,
    )
    ac = net.online
    if args.normalize_reward:  # common/normalize.py, imported with the flag only
        from common.normalize import RewardScaler
    reward_scaler = RewardScaler(B, args.gamma, dist.gather) if args.normalize_reward else None
    # the rollout, preallocated, time-major [T, B] (torch.as_tensor shares it on CPU);
    # images stay uint8
    rollout_obs, rollout_next_obs = np.zeros(
        (2, T, B, *shape), np.uint8 if is_image(shape) else np.float32
    )
    rollout_actions = np.zeros((T, B, *space.shape), dtype=np.int64 if discrete else np.float32)
    rollout_rewards, rollout_terminated, rollout_truncated = np.zeros((3, T, B), dtype=np.float32)
    rollout = (rollout_obs, rollout_actions, rollout_rewards, rollout_terminated, rollout_truncated)

    def eval_envs(num_envs: int, video_dir: str | None) -> gym.vector.VectorEnv:
        return make_env(args.env_id, num_envs, video_dir, training=False)

    # themselves unless --compile
    acting_net = run.compile(ac)
    rollout_loss = run.compile(a2c_rollout_loss)

    # what the next rollout needs: run.after_step saves it, run.begin restores it
    def checkpoint() -> dict:
        return {"net": net, "rng": rng, "reward_scaler": reward_scaler}

    # reset, or a resumed run's put back
    obs, global_step = run.begin(envs, eval_envs, checkpoint())
    obs = obs.reshape(B, *shape)
    # numpy_head checks its fast path against forward() on these weights
    policy_head = numpy_head(acting_net, device)
    greedy = greedy_policy(acting_net, device, space)
    # [A], refreshed after every update (no log_std: Discrete actions)
    std = None if ac.log_std is None else ac.log_std.detach().exp().cpu().numpy()
    # Ctrl-C, a stop signal or a NaN loss ends the loop there (harness/run.py)
    with run.stoppable():
        while global_step < args.total_timesteps:
            prev_step = global_step
            # rollout: T steps of all envs with the current policy
            # (one numpy actor forward per step)
            for t in range(T):
                global_step += B * world  # all workers step in lockstep
                actions = sample_actions(policy_head(obs), std, rng)
                if isinstance(space, gym.spaces.Box):  # the env gets the Gaussian sample clipped
                    env_actions = np.clip(actions, space.low, space.high)
                else:
                    env_actions = actions
                next_obs, rewards, terminated, truncated, infos = envs.step(env_actions)
                next_obs = next_obs.reshape(B, *shape)
                rollout_obs[t] = obs
                rollout_actions[t] = actions
                # truncation bootstraps from its value
                rollout_next_obs[t] = true_next_obs(next_obs, infos)
                # Atari: rewards clipped to their sign for learning (the paper), not for logging
                learn_rewards = np.sign(rewards) if atari else rewards
                if reward_scaler is not None:
                    learn_rewards = reward_scaler(learn_rewards, terminated | truncated)
                rollout_rewards[t] = learn_rewards
                rollout_terminated[t] = terminated
                rollout_truncated[t] = truncated
                obs = next_obs  # already the new episode's first observation where one ended
                run.episodes(global_step, rewards, pixels.game_over(terminated, truncated, infos))

            # learn: one gradient step on the whole rollout [T * B]
            obs_t, actions_t, rewards_t, terminated_t, truncated_t = (
                torch.as_tensor(x, device=device) for x in rollout
            )
            with torch.no_grad():  # V(true s_{t+1}) [T * B]
                next_values = ac.value(
                    torch.as_tensor(rollout_next_obs, device=device).flatten(0, 1)
                )
            loss, policy_loss, value_loss, entropy_mean = rollout_loss(
                ac,
                obs=obs_t,
                actions=actions_t,
                rewards=rewards_t,
                next_values=next_values.view(T, B),
                terminated=terminated_t,
                truncated=truncated_t,
                gamma=args.gamma,
                n=args.n_step_return,
                gae_lambda=args.gae_lambda,
                value_coef=args.value_coef,
                entropy_coef=args.entropy_coef,
            )
            loss, grad_norm = net.train_step(loss)
            # a NaN policy would feed NaN actions to the envs; grad_norm is shared by all workers,
            # so a NaN on any one of them stops every worker at this same update
            run.stop_if_nan(global_step, loss, gradient_norm=grad_norm)
            std = None if ac.log_std is None else ac.log_std.detach().exp().cpu().numpy()
            # after the update, so the rollout acted and learned with one policy
            if ac.obs_norm is not None:
                ac.obs_norm.update(dist.gather(obs_t))  # all workers' observations
            if net.updates % 100 == 0:
                run.log(
                    global_step,
                    loss=loss,
                    policy_loss=policy_loss,
                    value_loss=value_loss,
                    entropy=entropy_mean,
                    grad_norm=grad_norm,
                )

            # evaluate greedy (rank 0), save checkpoint()
            # (then stop, on a stop signal), show progress
            run.after_step(prev_step, global_step, obs, greedy, checkpoint)
    return run.finish(
        global_step, greedy, model=ac, world_size=world, device=str(device), updates=net.updates
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
    make_env(args.env_id, 1).close()  # an unknown id, the wrong action space
    gae_lambda = args.gae_lambda
    n_step = args.n_step_return
    conditions = [  # checked after harness.cli.SHARED_CHECKS
        (
            gae_lambda is None or 0.0 <= gae_lambda <= 1.0,
            f"--gae-lambda must be in [0, 1], got {gae_lambda}",
        ),
        (
            gae_lambda is None or n_step is None,
            "--gae-lambda and --n-step-return cannot be used together",
        ),
        (
            0.0 < args.rmsprop_alpha < 1.0,
            f"--rmsprop-alpha must be in (0, 1), got {args.rmsprop_alpha}",
        ),
        (
            math.isfinite(args.log_std_init),
            f"--log-std-init must be finite, got {args.log_std_init}",
        ),
        (
            min(args.hidden_sizes, default=0) > 0,
            f"--hidden-sizes must be positive, got {args.hidden_sizes}",
        ),
    ]
    positive = ("n_steps", "n_step_return", "optimizer_eps", "learning_rate", "clip_grad_norm")
    check(
        args,
        conditions,
        positive=positive,
        fractions=("gamma",),
        nonnegative=("value_coef", "entropy_coef"),
    )


def load_policy(args: Args, model_path: str, device: str = "cpu") -> Policy:
    """Greedy policy from a `--save-model` file (observation statistics included),
    for tools/evaluate.py."""
    envs = make_env(args.env_id, 1)
    net = build_network(args, envs)
    space = envs.single_action_space
    envs.close()
    net.load_state_dict(torch.load(model_path, map_location=device, weights_only=True))
    return greedy_policy(net.to(device).eval(), torch.device(device), space)


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main())
