"""DDPG: deep deterministic policy gradient.

Paper: Lillicrap et al. 2015, "Continuous control with deep reinforcement learning",
arXiv:1509.02971, https://arxiv.org/abs/1509.02971.

A deterministic actor mu(s) (tanh output scaled to the action bounds) acts with added exploration
noise; transitions go into a replay memory. Every `train_every` env steps the critic Q(s, a)
regresses on r + gamma * (1 - terminated) * Q_target(s', mu_target(s')) for a random minibatch;
every `policy_every` critic updates the actor climbs the deterministic policy gradient
(maximises Q(s, mu(s))) and both target copies move towards their online networks by `target_rate`.
Before `learning_starts` it acts at random (heatup).

Deviations from the paper:
- Defaults are CleanRL's (Adam 3e-4 for both networks, [256, 256] MLPs, batch 256, Gaussian
  noise 0.1, actor every 2 critic updates, no critic L2), not the paper's (actor 1e-4, critic
  1e-3 with L2 1e-2, [400, 300], batch 64, Ornstein-Uhlenbeck noise, batch norm); OU noise and
  L2 are flags, no batch norm.
- The targets move after each actor update, every `policy_every` critic updates, as in
  CleanRL's ddpg_continuous_action.py (and TD3); the paper moves them after every critic
  update (`--policy-every 1`).
- The action enters the critic's first layer (the paper feeds it to the second).
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).

Run:
    python algos/ddpg.py --env Pendulum-v1 --seed 1
Uses from common: network, replay, autoreset, fastpath; from harness: cli, run.
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Callable, Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
import tyro
from torch import nn

# common/ and harness/: beside a copied script, one folder up here
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE if (_HERE / "common").is_dir() else _HERE.parent))
from common.autoreset import true_next_obs  # noqa: E402
from common.fastpath import checked, numpy_mlp, probe_batch  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.replay import Batch, ReplayMemory  # noqa: E402
from harness.cli import RunArgs, check, main as run_main  # noqa: E402
from harness.run import Run, vector_env  # noqa: E402

ALGO = "ddpg"


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args(RunArgs):
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "Pendulum-v1"
    """gymnasium environment id (continuous actions, vector observations)"""
    total_timesteps: int = 50_000
    """env steps to train for, summed over all envs"""
    eval_episodes: int = 0
    """episodes per evaluation (0: eval_episodes_for the
    env, 100 where an episode lasts at most 200 steps, else 10)"""
    checkpoint_memory: bool = True
    """include the replay memory in checkpoints (without it a resume refills it first: not exact)"""

    actor_learning_rate: float = 3e-4
    """Adam step size of the actor"""
    critic_learning_rate: float = 3e-4
    """Adam step size of the critic"""
    critic_l2: float = 0.0
    """L2 penalty on the critic's weights (the paper: 1e-2)"""
    buffer_size: int = 1_000_000
    """replay memory capacity, transitions"""
    gamma: float = 0.99
    """discount"""
    target_rate: float = 0.005
    """weight of the online networks in the soft target update after every actor update"""
    batch_size: int = 256
    """transitions per gradient step"""
    noise: Literal["gaussian", "ou"] = "gaussian"
    """exploration noise: independent Gaussian, or
    Ornstein-Uhlenbeck (the paper's), reset at episode ends"""
    noise_std: float = 0.1
    """Gaussian std, or OU sigma, in units of half the action range"""
    ou_theta: float = 0.15
    """OU mean-reversion rate per env step"""
    learning_starts: int = 10_000
    """env steps of heatup (uniform random actions, no learning)"""
    train_every: int = 1
    """env steps between training rounds"""
    gradient_steps: int = 1
    """critic updates per training round"""
    policy_every: int = 2
    """critic updates between actor updates (and target updates)"""
    clip_grad_norm: Optional[float] = None
    """clip the global gradient norm of each network to this value (None: no clipping)"""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """widths of the actor's and the critic's hidden layers"""


# 3. Environment ---------------------------------------------------------------------------------
def make_env(env_id: str, num_envs: int, video_dir: str | None = None) -> gym.vector.VectorEnv:
    """Vector env with SAME_STEP autoreset (the true final observation is in infos["final_obs"]);
    a 1-D Box action space with finite bounds, or InputError (harness.run.vector_env)."""

    def make(render_mode: str | None) -> gym.Env:
        # refused before making it
        if env_id.startswith(("ALE/", "MinAtar/")) or "NoFrameskip" in env_id:
            message = f"{ALGO} takes vector observations; {env_id} is a pixel env"
            raise ValueError(f"{message} (dqn, n_step_q, sarsa and a2c take images)")
        return (
            gym.make(env_id) if render_mode is None else gym.make(env_id, render_mode=render_mode)
        )

    return vector_env(
        make, num_envs, ALGO, env_id, video_dir, discrete=False, continuous=True, bounded=True
    )


def eval_episodes_for(env_id: str) -> int:
    """Greedy episodes per evaluation: 100 where the time limit is at most 200 steps, else 10. A
    short episode's return depends much on its start state (a swing-up from the bottom costs far
    more than a start near the top), so 10 such episodes score one policy tens of points apart; 100
    cost 20,000 env steps."""
    try:
        limit = gym.spec(env_id).max_episode_steps
    except gym.error.Error:  # an unknown id: validate() names it
        return 10
    return 100 if limit is not None and limit <= 200 else 10


# 4. Networks ------------------------------------------------------------------------------------
def mlp(in_dim: int, hidden_sizes: tuple[int, ...], out_dim: int) -> nn.Sequential:
    """Linear-ReLU layers, then a linear output layer initialised to U(-3e-3, 3e-3) as in the
    paper (initial actions and Q-values near zero). In-place ReLUs: one [B, 256] buffer less per
    layer, ~5% of an update."""
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden_sizes:
        layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
        width = h
    out = nn.Linear(width, out_dim)
    nn.init.uniform_(out.weight, -3e-3, 3e-3)
    nn.init.uniform_(out.bias, -3e-3, 3e-3)
    return nn.Sequential(*layers, out)


class Actor(nn.Module):
    """Deterministic policy mu(s) = center + half_range * tanh(MLP(s)), within the action bounds."""

    action_scale: torch.Tensor  # buffers [A]
    action_bias: torch.Tensor

    def __init__(self, obs_dim: int, action_space: gym.spaces.Box, hidden_sizes: tuple[int, ...]):
        super().__init__()
        self.obs_dim = obs_dim
        self.net = mlp(obs_dim, hidden_sizes, int(np.prod(action_space.shape)))
        low = torch.as_tensor(action_space.low, dtype=torch.float32).flatten()
        high = torch.as_tensor(action_space.high, dtype=torch.float32).flatten()
        self.register_buffer("action_scale", (high - low) / 2)  # [A]
        self.register_buffer("action_bias", (high + low) / 2)  # [A]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action_bias + self.action_scale * torch.tanh(self.net(obs))  # [B, A]


def build_actor(args: Args, envs: gym.vector.VectorEnv) -> Actor:
    """The actor for `envs`' spaces; train() and load_policy() both build it here."""
    obs_space = envs.single_observation_space
    action_space = envs.single_action_space
    # vector_env refused any other
    assert isinstance(obs_space, gym.spaces.Box) and isinstance(action_space, gym.spaces.Box)
    obs_dim = int(np.prod(obs_space.shape))
    return Actor(obs_dim, action_space, tuple(args.hidden_sizes))


class Critic(nn.Module):
    """Q(s, a): an MLP on the concatenated observation and action."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: tuple[int, ...]):
        super().__init__()
        self.net = mlp(obs_dim + action_dim, hidden_sizes, 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], 1)).squeeze(1)  # [B]


# 5. Algorithm -----------------------------------------------------------------------------------
class ExplorationNoise:
    """Gaussian or Ornstein-Uhlenbeck noise [B, A] in action units (`std` times half the range).
    OU (dt = 1): x <- x - theta * x + sigma * N(0, 1) per env and action dimension, reset to 0
    where an episode ended."""

    def __init__(
        self,
        kind: str,
        std: float,
        theta: float,
        scale: np.ndarray,
        num_envs: int,
        rng: np.random.Generator,
    ):
        self.kind = kind
        self.theta = theta
        self.rng = rng
        self.sigma = std * scale  # [A]
        self.state = np.zeros((num_envs, len(scale)))  # [B, A], OU only

    def __call__(self) -> np.ndarray:
        z = self.rng.standard_normal(self.state.shape)  # [B, A]
        if self.kind == "gaussian":
            return self.sigma * z
        self.state += -self.theta * self.state + self.sigma * z
        return self.state

    def reset(self, done: np.ndarray) -> None:
        self.state[done] = 0.0


def ddpg_targets(
    critic_target: nn.Module,
    actor_target: nn.Module,
    rewards: torch.Tensor,
    next_obs: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """One-step critic targets [B]: r + gamma * (1 - terminated) * Q_target(s', mu_target(s'))
    (paper eq. 6); `next_obs` is the true next observation, so truncated transitions bootstrap and
    terminated ones do not."""
    with torch.no_grad():
        next_q = critic_target(next_obs, actor_target(next_obs))  # [B]
        return rewards + gamma * (1.0 - terminated) * next_q


def critic_loss(
    critic_online: nn.Module,
    critic_target: nn.Module,
    actor_target: nn.Module,
    batch: Batch,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The critic's regression of Q(s, a) on the targets (MSE),
    and the batch's mean Q(s, a) (logged)."""
    target = ddpg_targets(
        critic_target, actor_target, batch.rewards, batch.next_obs, batch.terminated, gamma
    )
    q = critic_online(batch.obs, batch.actions)  # [B]
    return F.mse_loss(q, target), q.mean()


def actor_loss(actor: nn.Module, critic: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """-mean Q(s, mu(s)): its gradient in the actor's weights is the deterministic policy
    gradient (paper eq. 6's companion, Silver et al. 2014). The caller freezes the critic's
    weights: only dQ/da flows back."""
    return -critic(obs, actor(obs)).mean()


def deterministic_policy(actor: Actor, device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, *obs_shape] -> mu(obs) [B, A], no noise, in numpy: through `forward()`, or on CPU
    a numpy copy of a plain MLP actor while they agree (common.fastpath: faster at batch 1).
    Rebuild it after a load."""

    def act_forward(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.as_tensor(obs, dtype=torch.float32, device=device).reshape(len(obs), -1)
            return actor(x).cpu().numpy()

    # None: act through forward()
    net_numpy = numpy_mlp(list(getattr(actor, "net", [])), device, actor)
    if net_numpy is None:
        return act_forward
    scale = actor.action_scale.numpy()  # [A], zero-copy views
    bias = actor.action_bias.numpy()

    def act_numpy(obs: np.ndarray) -> np.ndarray:
        return bias + scale * np.tanh(net_numpy(obs))

    return checked(act_numpy, act_forward, f"{ALGO} policy", probe_batch((actor.obs_dim,)))


# 6. Training ------------------------------------------------------------------------------------
def train(args: Args) -> dict:
    args = replace(args, eval_episodes=args.eval_episodes or eval_episodes_for(args.env_id))
    validate(args)
    # metrics.csv
    fields = (
        "episodic_return",
        "episodic_length",
        "critic_loss",
        "actor_loss",
        "q_values",
        "grad_norm",
        "sps",
        "eval_return",
        "eval_return_std",
    )
    # run folder; torch threads, seeds, device
    run = Run(ALGO, args, fields)
    device = run.device
    # independent streams from one seed
    noise_seed, replay_seed = np.random.SeedSequence(args.seed).spawn(2)
    rng = np.random.default_rng(noise_seed)  # exploration

    envs = make_env(args.env_id, args.num_envs)
    obs_space = envs.single_observation_space
    space = envs.single_action_space
    # vector_env refused any other
    assert isinstance(obs_space, gym.spaces.Box) and isinstance(space, gym.spaces.Box)
    obs_dim = int(np.prod(obs_space.shape))
    B = args.num_envs
    action_shape = space.shape
    action_dim = int(np.prod(space.shape))
    # [A]
    low, high = (bound.reshape(action_dim).astype(np.float32) for bound in (space.low, space.high))

    # both networks: Adam, a target copy, the same gradient clipping
    actor = NetworkWrapper(
        build_actor(args, envs),
        lr=args.actor_learning_rate,
        optimizer="adam",
        clip_grad_norm=args.clip_grad_norm,
        target=True,
        device=device,
    )
    critic = NetworkWrapper(
        Critic(obs_dim, action_dim, args.hidden_sizes),
        lr=args.critic_learning_rate,
        l2=args.critic_l2,
        optimizer="adam",
        clip_grad_norm=args.clip_grad_norm,
        target=True,
        device=device,
    )
    noise = ExplorationNoise(args.noise, args.noise_std, args.ou_theta, (high - low) / 2, B, rng)
    memory = ReplayMemory(
        args.buffer_size, (obs_dim,), (action_dim,), discrete=False, device=device, seed=replay_seed
    )
    # held before learning (a resume refills them)
    min_stored = min(args.learning_starts, args.buffer_size)

    def eval_envs(num_envs: int, video_dir: str | None) -> gym.vector.VectorEnv:
        return make_env(args.env_id, num_envs, video_dir)

    acting_net = run.compile(actor.online)  # these three: themselves unless --compile
    critic_loss_fn = run.compile(critic_loss)
    actor_loss_fn = run.compile(actor_loss)
    actor_loss_value = torch.zeros(())

    # all the next step depends on: run.after_step saves it, run.begin restores it
    def checkpoint() -> dict:
        return {
            "actor": actor,
            "critic": critic,
            "memory": memory if args.checkpoint_memory else None,
            "rng": rng,
            "noise": noise.state,
            "actor_loss": actor_loss_value,
        }

    # reset, or a resumed run's put back
    obs, global_step = run.begin(envs, eval_envs, checkpoint())
    obs = obs.reshape(B, obs_dim)
    policy = deterministic_policy(acting_net, device)  # the fast path checks these weights
    # Ctrl-C, a stop signal or a NaN loss ends the loop where it happens (harness.run)
    with run.stoppable():
        while global_step < args.total_timesteps:
            prev_step = global_step
            global_step = global_step + B
            # act: uniform during heatup, then mu(s) + noise, clipped to the bounds
            if global_step <= args.learning_starts:
                actions = rng.uniform(low, high, size=(B, action_dim)).astype(np.float32)  # [B, A]
            else:
                actions = np.clip(policy(obs) + noise(), low, high).astype(np.float32)  # [B, A]
            next_obs, rewards, terminated, truncated, infos = envs.step(
                actions.reshape(B, *action_shape)
            )
            next_obs = next_obs.reshape(B, obs_dim)

            # store the true final observation at episode ends
            # (next_obs already holds the reset one)
            memory.add(obs, actions, rewards, true_next_obs(next_obs, infos), terminated)
            obs = next_obs
            done = terminated | truncated
            run.episodes(global_step, rewards, done)  # logs the episodes that ended
            noise.reset(done)

            # learn: gradient_steps critic updates per `train_every` steps;
            # actor + syncs every `policy_every`
            if global_step > args.learning_starts and len(memory) >= min_stored:
                rounds = global_step // args.train_every - prev_step // args.train_every
                for _ in range(rounds * args.gradient_steps):
                    batch = memory.sample(args.batch_size)
                    loss, q_mean = critic_loss_fn(
                        critic.online, critic.target, actor.target, batch, args.gamma
                    )
                    loss, grad_norm = critic.train_step(loss)
                    if critic.updates % args.policy_every == 0:
                        # no critic gradients from the actor's loss
                        critic.online.requires_grad_(False)
                        actor_loss_value = actor_loss_fn(actor.online, critic.online, batch.obs)
                        actor_loss_value, _ = actor.train_step(actor_loss_value)
                        critic.online.requires_grad_(True)
                        critic.sync(args.target_rate)
                        actor.sync(args.target_rate)
                    if critic.updates % 100 == 0:
                        run.stop_if_nan(global_step, loss, actor=actor_loss_value)
                        run.log(
                            global_step,
                            critic_loss=loss,
                            actor_loss=actor_loss_value,
                            q_values=q_mean,
                            grad_norm=grad_norm,
                        )

            # evaluate policy, save checkpoint() (then stop, on a stop signal), show progress
            run.after_step(prev_step, global_step, obs, policy, checkpoint)
    model = {"actor": actor.online.state_dict(), "critic": critic.online.state_dict()}
    return run.finish(global_step, policy, model=model, device=str(device), updates=critic.updates)


# main(args), or main() for the command line's;
# exit 0 done, 1 failed, 2 bad input, 75 stopped, 130 Ctrl-C
def main(args: Args | None = None) -> int:
    """Train on the command line's arguments (or `args`); the exit status (harness.cli.main)."""
    return run_main(ALGO, train, Args, __doc__, args)


# Input checks and saved policies -----------------------------------------------------------------
def validate(args: Args) -> None:
    """Raise InputError (one line, exit 2) naming the first bad value:
    the env first, then the numbers."""
    make_env(args.env_id, 1).close()  # a pixel env, an unknown id, the wrong action space
    positive = (
        "batch_size",
        "buffer_size",
        "train_every",
        "gradient_steps",
        "policy_every",
        "actor_learning_rate",
        "critic_learning_rate",
        "clip_grad_norm",
    )
    nonnegative = ("noise_std", "learning_starts", "critic_l2")  # check() adds SHARED_CHECKS
    check(
        args,
        positive=positive,
        fractions=("gamma",),
        nonnegative=nonnegative,
        single_process=ALGO,
    )


def load_policy(
    args: Args, model_path: str, device: str = "cpu"
) -> Callable[[np.ndarray], np.ndarray]:
    """Deterministic policy from a `--save-model` file (state dicts, weights_only=True),
    for tools/evaluate.py."""
    envs = make_env(args.env_id, 1)
    actor = build_actor(args, envs)
    envs.close()
    actor.load_state_dict(torch.load(model_path, map_location=device, weights_only=True)["actor"])
    return deterministic_policy(actor.to(device).eval(), torch.device(device))


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main())
