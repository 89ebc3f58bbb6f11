"""A2C: synchronous advantage actor-critic, for discrete and continuous actions.

Paper: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", ICML,
https://arxiv.org/abs/1602.01783 (A3C), run synchronously as in OpenAI Baselines' A2C
(Wu et al. 2017, https://openai.com/index/openai-baselines-acktr-a2c/). GAE: Schulman et al.
2016, arXiv:1506.02438.

`num_envs` envs are stepped together for `n_steps` steps with the current policy; the rollout
then gives one gradient step on -A_t log pi(a_t|s_t) + value_coef (G_t - V(s_t))^2
- entropy_coef H(pi(.|s_t)), where G_t is the n-step return (to the end of the rollout by default,
from common.n_step_returns) or the GAE(lambda) return, and A_t = G_t - V(s_t). The policy is
categorical for Discrete actions and a diagonal Gaussian with a state-independent log-std for Box
actions (sampled unclipped, clipped to the bounds only at the env).

Deviations from the paper:
- Synchronous: parallel envs in one process, or several processes under torchrun that average
  their gradients every update (harness.distributed), instead of asynchronous workers.
- Separate actor and critic MLPs with tanh and orthogonal init by default (Stable-Baselines3's
  A2C); `--shared-torso` gives the paper's shared torso with two heads.
- torch's RMSprop (eps added outside the square root) with its own statistics, not the paper's
  RMSprop statistics shared between threads.
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).
- The step size decays linearly to 0 over the run by default (OpenAI Baselines' A2C schedule;
  Stable-Baselines3's A2C, whose other defaults these are, keeps it constant: `--no-anneal-lr`).
  With a constant step size seed 7 of 1-10 on CartPole-v1 ended at a greedy 60.3 (its training
  return rose to ~300 by 100k steps, then fell to ~150); with the decay all ten reach 500
  (2026-11-25, `python algos/a2c.py --seed S`, 2-core CPU; benchmarks suite `defaults`).
- Optional running observation and reward normalisation (OpenAI Baselines' VecNormalize); the
  observation statistics live in the network as buffers, so a saved model carries them, and they
  are refreshed once per rollout, after its update, so acting and learning see one policy. Under
  torchrun both statistics pool every worker's data, so all workers normalise alike.
- Optional tanh-bounded Gaussian mean (`--bounded-mean`): an unbounded mean can drift far past
  the action bounds, where every sample clips to the same action and exploration stops.

Pixels (discrete actions): the torso follows the observation (MLP for vectors, MinAtar's conv for
MinAtar grids, the DQN paper's conv net for Atari's 84x84 frame stacks; common.pixels
preprocesses Atari as that paper did). The rollout keeps images as uint8 and the network turns
them into floats, so `--normalize-obs` is for vectors only. Atari rewards are clipped to their
sign for learning only, a lost life ends the training episode, and the logged returns are
whole-game scores.

Run:
    python algos/a2c.py --env CartPole-v1 --seed 1
    torchrun --nproc-per-node 2 algos/a2c.py --env CartPole-v1 --seed 1   # 2 workers, one network
    python algos/a2c.py --env MinAtar/Breakout-v1 --shared-torso --total-timesteps 1000000   (pixels extra)

Uses from common (the algorithm parts): NetworkWrapper (network, RMSprop/Adam, clipping),
n_step_returns, true_next_obs (the final observation at episode ends), pixels (Atari and MinAtar
envs), torso (the network's feature layers), fastpath (the numpy actor, checked against
forward()). From harness (run plumbing): run (run folder, logging, evaluation, signals,
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

ALGO = "a2c"


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args:
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id (discrete or continuous actions; MinAtar/* or Atari ids such as ALE/Breakout-v5 with discrete actions)"""
    seed: int = 1
    """seed of python, numpy, torch, the envs and the action sampler (worker r of several: seed + r * num_envs)"""
    total_timesteps: int = 500_000
    """env steps to train for, summed over all envs of all workers"""
    num_envs: int = 8
    """parallel envs stepped together (per worker under torchrun)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """where the networks live (auto: cuda if available)"""
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

    learning_rate: float = 7e-4
    """optimizer step size"""
    anneal_lr: bool = True
    """decay the step size linearly to 0 over the run (--no-anneal-lr: a constant step size, Stable-Baselines3's default)"""
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
    """widths of the actor's and the critic's hidden layers (vector observations; image torsos are the papers')"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden-layer activation of vector torsos (image torsos use ReLU)"""
    shared_torso: bool = False
    """one torso with a policy head and a value head (the paper) instead of separate actor and critic"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy (Box actions)"""
    bounded_mean: bool = False
    """squash the Gaussian mean into the action bounds with tanh (the sample stays unclipped)"""
    normalize_obs: bool = False
    """normalise vector observations by a running mean and std (saved with the model)"""
    normalize_reward: bool = False
    """scale rewards by a running std of the discounted return"""


def validate(args: Args) -> None:
    """Raise InputError (one line, exit 2) naming the first bad value."""
    checks = [
        (args.total_timesteps > 0, f"--total-timesteps must be positive, got {args.total_timesteps}"),
        (args.num_envs > 0, f"--num-envs must be positive, got {args.num_envs}"),
        (args.n_steps > 0, f"--n-steps must be positive, got {args.n_steps}"),
        (args.n_step_return is None or args.n_step_return > 0, f"--n-step-return must be positive, got {args.n_step_return}"),
        (args.gae_lambda is None or 0.0 <= args.gae_lambda <= 1.0, f"--gae-lambda must be in [0, 1], got {args.gae_lambda}"),
        (args.gae_lambda is None or args.n_step_return is None, "--gae-lambda and --n-step-return cannot be used together"),
        (args.value_coef >= 0, f"--value-coef must be >= 0, got {args.value_coef}"),
        (args.entropy_coef >= 0, f"--entropy-coef must be >= 0, got {args.entropy_coef}"),
        (0.0 < args.rmsprop_alpha < 1.0, f"--rmsprop-alpha must be in (0, 1), got {args.rmsprop_alpha}"),
        (args.optimizer_eps > 0, f"--optimizer-eps must be positive, got {args.optimizer_eps}"),
        (math.isfinite(args.log_std_init), f"--log-std-init must be finite, got {args.log_std_init}"),
        (args.learning_rate > 0, f"--learning-rate must be positive, got {args.learning_rate}"),
        (0.0 <= args.gamma <= 1.0, f"--gamma must be in [0, 1], got {args.gamma}"),
        (args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {args.checkpoint_every}"),
        (args.eval_every >= 0, f"--eval-every must be >= 0, got {args.eval_every}"),
        (args.eval_episodes > 0, f"--eval-episodes must be positive, got {args.eval_episodes}"),
        (args.torch_threads > 0, f"--torch-threads must be positive, got {args.torch_threads}"),
        (len(args.hidden_sizes) > 0 and all(h > 0 for h in args.hidden_sizes), f"--hidden-sizes must be positive, got {args.hidden_sizes}"),
        (args.clip_grad_norm is None or args.clip_grad_norm > 0, f"--clip-grad-norm must be positive, got {args.clip_grad_norm}"),
        (args.device != "cuda" or torch.cuda.is_available(), "--device cuda was asked for but CUDA is not available"),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)


# 3. Environment ---------------------------------------------------------------------------------
def make_env(env_id: str, num_envs: int, video_dir: str | None = None, training: bool = True) -> gym.vector.VectorEnv:
    """Vector env with SAME_STEP autoreset: the true final observation is in infos["final_obs"].

    Pixel ids get their standard preprocessing (common.pixels); `training=False` plays whole
    Atari games (evaluation), `training=True` ends an episode at each lost life."""
    with bad_input():  # an unknown id
        pixels.kind(env_id)

    def thunk(i: int) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            if video_dir is not None:
                return record_first_episode(pixels.make(env_id, training, render_mode="rgb_array"), video_dir, i)
            return pixels.make(env_id, training)

        return make

    with bad_input():  # an env that refuses the settings, or a missing env package
        envs = gym.vector.SyncVectorEnv([thunk(i) for i in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    space = envs.single_action_space
    if not (isinstance(space, gym.spaces.Discrete) or (isinstance(space, gym.spaces.Box) and len(space.shape) == 1)):
        envs.close()
        raise InputError(f"{ALGO} needs a Discrete or a 1-D Box action space; {env_id} has {space}")
    if not isinstance(envs.single_observation_space, gym.spaces.Box):
        envs.close()
        raise InputError(f"{ALGO} needs a Box observation space; {env_id} has {envs.single_observation_space}")
    if is_image(obs_shape(envs.single_observation_space)) and not isinstance(space, gym.spaces.Discrete):
        envs.close()
        raise InputError(f"{ALGO} takes image observations with discrete actions only; {env_id} has {space}")
    return envs


class RewardScaler:
    """Divides rewards by the running std of each env's discounted return (OpenAI Baselines'
    VecNormalize): the scale of the value targets becomes ~1 whatever the task's reward scale.

    `gather` (harness.distributed.gather under torchrun) gives the statistics every worker's
    discounted returns, so all workers scale by the same statistics before their gradients are
    averaged, as they normalise observations by the same statistics."""

    def __init__(
        self, num_envs: int, gamma: float, gather: Callable[[torch.Tensor], torch.Tensor] = lambda x: x,
        clip: float = 10.0, eps: float = 1e-8,
    ):
        self.gamma, self.gather, self.clip, self.eps = gamma, gather, clip, eps
        self.discounted = np.zeros(num_envs)  # [B] running discounted return of each env
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.discounted = self.discounted * self.gamma + rewards
        everyone = self.gather(torch.from_numpy(self.discounted)).numpy()  # [world * B]; one all_gather per env step
        self.mean, self.var, self.count = merge_moments(self.mean, self.var, self.count, everyone)
        self.discounted[done] = 0.0
        return np.clip(rewards / math.sqrt(self.var + self.eps), -self.clip, self.clip)

    def state_dict(self) -> dict:
        return {"discounted": self.discounted, "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.discounted, self.mean, self.var, self.count = state["discounted"], state["mean"], state["var"], state["count"]


def merge_moments(mean, var, count, batch):
    """Running mean/var merged with a batch [N, ...] (Chan et al.'s parallel algorithm)."""
    n = batch.shape[0]
    batch_mean = batch.mean(0)
    batch_var = ((batch - batch_mean) ** 2).mean(0)  # population variance in numpy and torch alike
    delta, total = batch_mean - mean, count + n
    m2 = var * count + batch_var * n + delta**2 * count * n / total
    return mean + delta * n / total, m2 / total, total


# 4. Networks ------------------------------------------------------------------------------------
class ObsNormalizer(nn.Module):
    """(obs - running mean) / running std, clipped to +-clip. Buffers, so the state dict carries them."""

    def __init__(self, obs_dim: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(obs_dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(obs_dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Merge a batch of observations [N, obs_dim] in place (numpy views of the buffers stay valid)."""
        mean, var, count = merge_moments(self.mean, self.var, self.count, obs.to(torch.float64).reshape(-1, self.mean.shape[0]))
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(count)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip).to(obs.dtype)


def build_torso(obs_shape: tuple[int, ...], hidden_sizes: tuple[int, ...], activation: type[nn.Module]) -> tuple[nn.Sequential, int]:
    """common.torso's feature layers and their width: the papers' conv torsos (ReLU) for images,
    and for vectors its MLP with `activation` in place of ReLU."""
    layers, width = torso(obs_shape, hidden_sizes)
    if not is_image(obs_shape):
        layers = [activation() if isinstance(m, nn.ReLU) else m for m in layers]
    return nn.Sequential(*layers), width


class ActorCritic(nn.Module):
    """Policy head (logits [N, A] or Gaussian mean [N, A]) and value head [N], from an observation."""

    def __init__(
        self, obs_shape: tuple[int, ...], action_dim: int, discrete: bool, hidden_sizes: tuple[int, ...],
        shared_torso: bool = False, activation: str = "tanh", normalize_obs: bool = False, log_std_init: float = 0.0,
        mean_bounds: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        super().__init__()
        act = nn.Tanh if activation == "tanh" else nn.ReLU
        self.discrete, self.obs_shape = discrete, tuple(obs_shape)
        if normalize_obs and is_image(obs_shape):
            raise InputError(f"--normalize-obs is for vector observations; these are images of shape {tuple(obs_shape)}")
        self.obs_norm = ObsNormalizer(obs_shape[0]) if normalize_obs else None
        self.actor_torso, width = build_torso(obs_shape, hidden_sizes, act)
        self.critic_torso = None if shared_torso else build_torso(obs_shape, hidden_sizes, act)[0]
        self.policy_head = nn.Linear(width, action_dim)
        self.value_head = nn.Linear(width, 1)
        self.log_std = None if discrete else nn.Parameter(torch.full((action_dim,), float(log_std_init)))
        # optional mean = center + half_range * tanh(.): an unbounded mean can run far outside the
        # bounds, where every sample is clipped to the same action and exploration stops there
        low, high = (None, None) if mean_bounds is None else (torch.as_tensor(np.asarray(b, dtype=np.float32)) for b in mean_bounds)
        self.register_buffer("mean_center", None if low is None else (high + low) / 2)
        self.register_buffer("mean_half_range", None if low is None else (high - low) / 2)
        # orthogonal init (as Baselines and SB3): sqrt(2) in the torso, small policy head so the
        # initial policy is near uniform / near zero-mean, unit gain for the value
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(m.weight, math.sqrt(2))
                nn.init.zeros_(m.bias)
        nn.init.orthogonal_(self.policy_head.weight, 0.01)
        nn.init.orthogonal_(self.value_head.weight, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs if self.obs_norm is None else self.obs_norm(obs)
        h = self.actor_torso(x)
        hv = h if self.critic_torso is None else self.critic_torso(x)
        return self.policy(h), self.value_head(hv).squeeze(-1)  # [N, A], [N]

    def policy(self, h: torch.Tensor) -> torch.Tensor:
        head = self.policy_head(h)  # [N, A]
        return head if self.mean_center is None else self.mean_center + self.mean_half_range * torch.tanh(head)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs if self.obs_norm is None else self.obs_norm(obs)
        return self.value_head(self.actor_torso(x) if self.critic_torso is None else self.critic_torso(x)).squeeze(-1)  # [N]


# 5. Algorithm -----------------------------------------------------------------------------------
def a2c_targets(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    n: int | None = None,
    gae_lambda: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [T, B], from a rollout's [T, B] tensors; no gradient.

    `values[t] = V(s_t)`, `next_values[t] = V(s_{t+1})` at the true next observation. n-step:
    returns = n_step_returns (termination: no bootstrap; truncation: bootstrap from
    next_values and stop; the rollout's end: bootstrap), advantages = returns - values.
    GAE(lambda): delta_t = r_t + gamma (1 - terminated_t) next_values_t - values_t,
    A_t = delta_t + gamma lambda (1 - done_t) A_{t+1} (A_T = 0), returns = A + values.
    lambda = 1 equals the n-step return to the end of the rollout. Under SAME_STEP autoreset the
    row after an episode's end is already the new episode, so no junk autoreset row exists.
    """
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
    head: torch.Tensor, log_std: torch.Tensor | None, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(a|s) [N] and entropy [N]: categorical over logits `head` [N, A] (log_std None),
    else diagonal Gaussian with mean `head` [N, A] and log-std [A], of the unclipped actions [N, A]."""
    if log_std is None:
        logp_all = F.log_softmax(head, dim=-1)  # [N, A]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(1, actions.long().unsqueeze(1)).squeeze(1), entropy
    z = (actions - head) * torch.exp(-log_std)  # [N, A]
    logp = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum().expand(head.shape[0])
    return logp, entropy


def a2c_loss(
    logp: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
    value_coef: float, entropy_coef: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, policy_loss, value_loss, mean entropy); all inputs [N], advantages and returns without gradient."""
    policy_loss = -(advantages * logp).mean()
    value_loss = F.mse_loss(values, returns)
    entropy_mean = entropy.mean()
    return policy_loss + value_coef * value_loss - entropy_coef * entropy_mean, policy_loss, value_loss, entropy_mean


def sample_actions(head: np.ndarray, std: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Actions from the policy head [B, A]: categorical over logits (std None) -> [B] int64, else
    Gaussian mean + std * noise -> [B, A] float32, unclipped (the env clips, the loss sees this sample)."""
    if std is None:
        p = np.exp(head - head.max(1, keepdims=True))  # [B, A]
        cdf = np.cumsum(p, 1)
        u = rng.random((len(head), 1)) * cdf[:, -1:]  # inverse-CDF sampling, one uniform per env
        return np.minimum((cdf < u).sum(1), head.shape[1] - 1)
    return (head + std * rng.standard_normal(head.shape)).astype(np.float32)


def numpy_head(net: ActorCritic, device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, *obs_shape] -> policy head [B, A] without gradient, as a numpy function.

    Through `forward()` (its first output), except on CPU where an MLP actor (Linear, Tanh and
    ReLU layers, no parameters beyond the actor's, the critic's and log_std) runs in numpy on
    zero-copy views of the parameters and normaliser buffers, which the optimizer and the
    normaliser update in place. At a batch of a few envs torch's per-op dispatch costs more than
    the arithmetic. The numpy path is used only while it gives forward()'s head on a probe batch
    (common.fastpath.checked): build the head again after loading weights.
    """
    def head_forward(obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, device=device).reshape(len(obs), *net.obs_shape)
        with torch.no_grad():
            return net(x if x.dtype == torch.uint8 else x.float())[0].cpu().numpy()  # images stay uint8: the torso converts them

    parts = [getattr(net, name, None) for name in ("actor_torso", "critic_torso", "policy_head", "value_head")]
    known = sum(len(list(p.parameters())) for p in parts if p is not None) + (getattr(net, "log_std", None) is not None)
    plain_mlp = (
        parts[0] is not None and parts[2] is not None and all(isinstance(m, (nn.Linear, nn.Tanh, nn.ReLU)) for m in parts[0])
        and len(list(net.parameters())) == known
    )
    if device.type != "cpu" or not plain_mlp:
        return head_forward
    layers = []
    for m in [*net.actor_torso, net.policy_head]:
        if isinstance(m, nn.Linear):
            layers.append((m.weight.detach().numpy().T, m.bias.detach().numpy()))  # [in, out], [out]
        else:
            layers.append(np.tanh if isinstance(m, nn.Tanh) else _relu)
    if net.mean_center is not None:
        center, half_range = net.mean_center.numpy(), net.mean_half_range.numpy()
        layers.append(lambda x: center + half_range * np.tanh(x))
    norm = net.obs_norm
    stats = None if norm is None else (norm.mean.numpy(), norm.var.numpy())

    def head_numpy(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        if stats is not None:
            x = np.clip((x - stats[0]) / np.sqrt(stats[1] + norm.eps), -norm.clip, norm.clip).astype(np.float32)
        for layer in layers:
            x = layer(x) if callable(layer) else x @ layer[0] + layer[1]
        return x

    return checked(head_numpy, head_forward, probe_batch(net.obs_shape), f"{ALGO} policy")


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


def greedy_policy(net: ActorCritic, device: torch.device, action_space: gym.Space) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, *obs_shape] -> deterministic actions: argmax of the logits [B], or the Gaussian mean
    clipped to the action bounds [B, A]."""
    head = numpy_head(net, device)
    if isinstance(action_space, gym.spaces.Discrete):
        return lambda obs: head(obs).argmax(1)
    low, high = action_space.low, action_space.high
    return lambda obs: np.clip(head(obs), low, high)


def load_policy(args: Args, model_path: str, device: str = "cpu") -> Callable[[np.ndarray], np.ndarray]:
    """Greedy policy from a `--save-model` file (state dict with the observation statistics, weights_only)."""
    envs = make_env(args.env_id, 1)
    net = build_network(args, envs)
    space = envs.single_action_space
    envs.close()
    net.load_state_dict(torch.load(model_path, map_location=device, weights_only=True))
    return greedy_policy(net.to(device).eval(), torch.device(device), space)


def build_network(args: Args, envs: gym.vector.VectorEnv) -> ActorCritic:
    space = envs.single_action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    if args.bounded_mean and not discrete and not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
        raise InputError(f"--bounded-mean needs finite action bounds; {args.env_id} has {space}")
    return ActorCritic(
        obs_shape(envs.single_observation_space), int(space.n) if discrete else int(space.shape[0]), discrete,
        tuple(args.hidden_sizes), args.shared_torso, args.activation, args.normalize_obs, args.log_std_init,
        (space.low, space.high) if args.bounded_mean and not discrete else None,
    )


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
    rng = np.random.default_rng(seed)  # action sampling

    envs = make_env(args.env_id, args.num_envs)
    envs.action_space.seed(seed)
    envs.single_action_space.seed(seed)
    shape = obs_shape(envs.single_observation_space)  # images as they are, vectors flattened
    atari = pixels.kind(args.env_id) == "atari"
    space = envs.single_action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    B, T = args.num_envs, args.n_steps
    num_updates = math.ceil(args.total_timesteps / (B * T * world))  # each update: every worker's rollout

    net = NetworkWrapper(
        build_network(args, envs), lr=args.learning_rate, optimizer=args.optimizer, eps=args.optimizer_eps,
        alpha=args.rmsprop_alpha, clip_grad_norm=args.clip_grad_norm, device=device, workers=distributed,
        lr_lambda=(lambda u: 1.0 - u / num_updates) if args.anneal_lr else None,
    )
    ac = net.online
    policy_head = numpy_head(ac, device)
    std = None if discrete else ac.log_std.detach().exp().cpu().numpy()  # [A], refreshed after every update
    greedy = greedy_policy(ac, device, space)
    reward_scaler = RewardScaler(B, args.gamma, distributed.gather) if args.normalize_reward else None  # equal statistics on all workers
    # the rollout, preallocated; time-major [T, B]; torch.from_numpy shares the memory on CPU;
    # images stay uint8 (the network converts them)
    action_shape = () if discrete else space.shape
    obs_dtype = np.uint8 if is_image(shape) else np.float32
    rollout_obs = np.zeros((T, B, *shape), dtype=obs_dtype)
    rollout_next_obs = np.zeros((T, B, *shape), dtype=obs_dtype)  # true next observations
    rollout_actions = np.zeros((T, B, *action_shape), dtype=np.int64 if discrete else np.float32)
    rollout_rewards = np.zeros((T, B), dtype=np.float32)
    rollout_terminated = np.zeros((T, B), dtype=np.float32)
    rollout_truncated = np.zeros((T, B), dtype=np.float32)
    eval_envs = functools.partial(make_env, args.env_id, training=False)
    run = Run(ALGO, args, ["episodic_return", "episodic_length", "loss", "policy_loss", "value_loss", "entropy", "grad_norm", "sps", "eval_return", "eval_return_std"], write=distributed.is_main())
    if run.write:
        workers = f" x {world} workers" if world > 1 else ""
        print(f"{ALGO}: {args.env_id}, seed {args.seed}, {args.total_timesteps:,} steps on {device}{workers}; run folder {run.path}", flush=True)

    global_step = 0
    state = run.restore(envs)  # None for a new run; generators, envs and running episodes are already restored
    if state is None:
        obs, _ = envs.reset(seed=seed)
    else:
        net.load_state_dict(state["net"])
        policy_head, greedy = numpy_head(ac, device), greedy_policy(ac, device, space)  # the fast path checked again, on the loaded weights
        rng.bit_generator.state = state["rng"]
        if reward_scaler is not None:
            reward_scaler.load_state_dict(state["reward_scaler"])
        if std is not None:
            std = ac.log_std.detach().exp().cpu().numpy()
        obs, global_step = state["obs"], state["global_step"]
    obs = obs.reshape(B, *shape)
    error, completed, eval_returns, train_seconds = None, False, np.array([]), 0.0
    flush_before = flush_denormals()  # subnormals become 0 (x86 is ~100x slower on them); the caller's setting comes back in `finally`
    try:
        while global_step < args.total_timesteps:
            prev_step = global_step
            # rollout: T steps of all envs with the current policy (one numpy actor forward per step)
            for t in range(T):
                global_step += B * world  # all workers step in lockstep
                actions = sample_actions(policy_head(obs), std, rng)
                env_actions = actions if discrete else np.clip(actions, space.low, space.high)
                next_obs, rewards, terminated, truncated, infos = envs.step(env_actions)
                next_obs = next_obs.reshape(B, *shape)
                rollout_obs[t] = obs
                rollout_actions[t] = actions
                rollout_next_obs[t] = true_next_obs(next_obs, infos)  # the value of this state is bootstrapped at truncation
                learn_rewards = np.sign(rewards) if atari else rewards  # Atari: clipped to their sign for learning (the paper), not for logging
                rollout_rewards[t] = learn_rewards if reward_scaler is None else reward_scaler(learn_rewards, terminated | truncated)
                rollout_terminated[t] = terminated
                rollout_truncated[t] = truncated
                obs = next_obs  # already the new episode's first observation where one ended

                run.episodes(global_step, rewards, pixels.game_over(terminated, truncated, infos))  # logs whole games

            # learn: one gradient step on the whole rollout [T * B]
            obs_t = torch.from_numpy(rollout_obs).to(device).reshape(T * B, *shape)
            rewards_t, terminated_t, truncated_t = (torch.from_numpy(x).to(device) for x in (rollout_rewards, rollout_terminated, rollout_truncated))
            with torch.no_grad():
                next_values = ac.value(torch.from_numpy(rollout_next_obs).to(device).reshape(T * B, *shape)).reshape(T, B)
            head, values = ac(obs_t)  # [T * B, A], [T * B]
            advantages, returns = a2c_targets(
                rewards_t, values.detach().reshape(T, B), next_values, terminated_t, truncated_t, args.gamma, args.n_step_return, args.gae_lambda,
            )
            actions_t = torch.from_numpy(rollout_actions).to(device).reshape(T * B, *action_shape)
            logp, entropy = log_prob_entropy(head, ac.log_std, actions_t)
            loss, policy_loss, value_loss, entropy_mean = a2c_loss(
                logp, entropy, values, advantages.reshape(-1), returns.reshape(-1), args.value_coef, args.entropy_coef,
            )
            loss, grad_norm = net.train_step(loss)
            # a NaN policy would feed NaN actions to the envs; grad_norm is shared by all workers, so
            # a NaN on any one of them stops every worker at this same update
            if not (math.isfinite(loss.item()) and math.isfinite(grad_norm.item())):
                raise FloatingPointError(f"loss became {loss.item()} (gradient norm {grad_norm.item()}) at step {global_step}; lower --learning-rate or clip gradients")
            if std is not None:
                std = ac.log_std.detach().exp().cpu().numpy()
            if ac.obs_norm is not None:  # after the update, so the rollout acted and learned with one policy
                ac.obs_norm.update(distributed.gather(torch.from_numpy(rollout_obs).to(device)))  # every worker's obs: equal statistics
            if net.updates % 100 == 0:
                run.log(global_step, loss=loss.item(), policy_loss=policy_loss.item(), value_loss=value_loss.item(),
                        entropy=entropy_mean.item(), grad_norm=grad_norm.item(), sps=round(global_step / run.elapsed()))

            if args.eval_every and global_step // args.eval_every > prev_step // args.eval_every and global_step < args.total_timesteps:
                run.evaluate(greedy, eval_envs, global_step)
            if run.checkpoint_due(prev_step, global_step):  # at a rollout's end: everything the next rollout depends on
                run.save_checkpoint(global_step, envs, obs, {
                    "net": net.state_dict(), "rng": rng.bit_generator.state,
                    "reward_scaler": reward_scaler.state_dict() if reward_scaler is not None else None,
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
        torch.save(ac.state_dict(), run.path / "model.pt")
    summary = run.summary(global_step, train_seconds or run.elapsed(), eval_returns, world_size=world,
                          device=str(device), completed=completed, error=error, updates=net.updates)
    return run.finish(summary, global_step)


def main(args: Args) -> int:
    """Exit status: 0 done, 1 stopped by a NaN loss, a lost worker or a failed final evaluation, 2 bad input,
    75 stopped by SIGTERM/SIGUSR1 after a checkpoint, 130 interrupted."""
    return run_main(ALGO, train, args)


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main(parse_args(Args, __doc__)))
