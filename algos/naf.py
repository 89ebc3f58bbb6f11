"""NAF: normalized advantage functions (continuous deep Q-learning).

Paper: Gu, Lillicrap, Sutskever, Levine 2016, "Continuous Deep Q-Learning with Model-based
Acceleration", arXiv:1603.00748, https://arxiv.org/abs/1603.00748.

One network outputs a state value V(s), the greedy action mu(s) (tanh output scaled to the action
bounds) and a lower-triangular L(s) with a positive (exponentiated) diagonal. With P = L L^T, the
Q-function is Q(s, a) = V(s) - 1/2 (a - mu(s))^T P(s) (a - mu(s)) (paper eq. 3-5): a quadratic in
the action whose maximum, V(s), sits at mu(s), so the max of Q-learning's target is V_target(s').
The agent acts with mu(s) plus noise, stores transitions in a replay memory, and takes
`gradient_steps` regression steps of Q(s, a) on r + gamma * (1 - terminated) * V_target(s') per
`train_every` env steps; the target moves by `target_rate` after each.

Deviations from the paper:
- Gaussian noise by default (the paper's Ornstein-Uhlenbeck is a flag);
  no batch norm or imagination rollouts.
- `--twin-q` (off by default; later work): two NAF networks regressed on r + gamma *
  min(V1_target(s'), V2_target(s')), TD3's clipped double Q against the overestimation that makes Q
  grow without bound on some MuJoCo seeds; it doubles the update's cost.
- `--layer-norm` (off by default; later work): LayerNorm after each hidden Linear layer keeps the
  features the value head reads at unit scale (the paper tried batch norm); `--reward-scale`
  scales the targets' rewards.
- Defaults (Adam 1e-3, batch 256, [256, 256], a gradient step per env step, target rate 0.005)
  learn Pendulum in 50k steps; the paper's [200, 200] net and Coach's 5 gradient steps per env
  step at rate 0.001 are flags.
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).
- L's exponentiated diagonal is kept within [e^-5, e^10] (`lower_triangular`): the cap stops |L^T
  (a - mu)|^2 overflowing, the floor stops P collapsing to 0, which freezes the policy
  (benchmarks/results/ddpg_naf.md).

Run:
    python algos/naf.py --env Pendulum-v1 --seed 1
Uses from common: network, replay, autoreset, fastpath; from harness: cli, run.
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

import math
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

# common/ and harness/ sit beside a copied script, one folder up in this repo
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE if (_HERE / "common").is_dir() else _HERE.parent))
from common.autoreset import true_next_obs  # noqa: E402
from common.fastpath import checked, numpy_mlp, probe_batch  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.replay import Batch, ReplayMemory  # noqa: E402
from harness.cli import RunArgs, check, main as run_main  # noqa: E402
from harness.run import Run, vector_env  # noqa: E402

ALGO = "naf"


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

    learning_rate: float = 1e-3
    """Adam step size"""
    buffer_size: int = 1_000_000
    """replay memory capacity, transitions"""
    gamma: float = 0.99
    """discount"""
    target_rate: float = 0.005
    """weight of the online network in the soft target update after every gradient step"""
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
    """gradient steps per training round"""
    clip_grad_norm: Optional[float] = None
    """clip the global gradient norm to this value (None: no clipping)"""
    twin_q: bool = False
    """two NAF networks on the targets r + gamma *
    min(V1_target(s'), V2_target(s')); the first acts"""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """widths of the shared hidden layers"""
    layer_norm: bool = False
    """LayerNorm after each hidden Linear layer, before its ReLU (against value over-estimation)"""
    reward_scale: float = 1.0
    """multiplies the rewards in the targets (Q-values in scaled units; logged returns unscaled)"""


# 3. Environment ---------------------------------------------------------------------------------
def make_env(env_id: str, num_envs: int, video_dir: str | None = None) -> gym.vector.VectorEnv:
    """Vector env with SAME_STEP autoreset (the true final observation is in infos["final_obs"]);
    a 1-D Box action space with finite bounds, or InputError (harness.run.vector_env)."""

    def make(render_mode: str | None) -> gym.Env:
        # refused before making it
        if env_id.startswith(("ALE/", "MinAtar/")) or "NoFrameskip" in env_id:
            image_algos = "(dqn, n_step_q, sarsa and a2c take images)"
            raise ValueError(
                f"{ALGO} takes vector observations; {env_id} is a pixel env {image_algos}"
            )
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
class NAFNetwork(nn.Module):
    """Shared trunk (Linear-ReLU layers, or Linear-LayerNorm-ReLU with `layer_norm`)
    with three heads: V(s) [B], mu(s) [B, A] and L(s) [B, A, A]."""

    action_scale: torch.Tensor  # buffers [A]
    action_bias: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        action_space: gym.spaces.Box,
        hidden_sizes: tuple[int, ...],
        layer_norm: bool = False,
    ):
        super().__init__()
        self.obs_dim = obs_dim
        layers: list[nn.Module] = []
        width = obs_dim
        for h in hidden_sizes:
            norm = [nn.LayerNorm(h)] if layer_norm else []
            # ReLU in place: one buffer less per layer
            layers += [nn.Linear(width, h), *norm, nn.ReLU(inplace=True)]
            width = h
        self.trunk = nn.Sequential(*layers)
        self.action_dim = A = int(np.prod(action_space.shape))
        self.value_head = nn.Linear(width, 1)
        self.mu_head = nn.Linear(width, A)
        self.l_head = nn.Linear(width, A * (A + 1) // 2)  # the lower triangle, row by row
        bounds = (action_space.low, action_space.high)
        low, high = (torch.as_tensor(x, dtype=torch.float32).flatten() for x in bounds)
        self.register_buffer("action_scale", (high - low) / 2)  # [A]
        self.register_buffer("action_bias", (high + low) / 2)  # [A]

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)  # [B, H]
        values = self.value_head(h).squeeze(1)  # [B]
        mu = self.action_bias + self.action_scale * torch.tanh(self.mu_head(h))  # [B, A]
        return values, mu, lower_triangular(self.l_head(h), self.action_dim)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.trunk(obs)).squeeze(1)  # [B]


def build_network(args: Args, envs: gym.vector.VectorEnv) -> NAFNetwork:
    """The NAF network for `envs`' spaces; train() and load_policy() both build it here."""
    obs_space = envs.single_observation_space
    action_space = envs.single_action_space
    # vector_env refused any other
    assert isinstance(obs_space, gym.spaces.Box) and isinstance(action_space, gym.spaces.Box)
    obs_dim = int(np.prod(obs_space.shape))
    return NAFNetwork(
        obs_dim,
        action_space,
        tuple(args.hidden_sizes),
        layer_norm=args.layer_norm,
    )


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


# bounds on L's diagonal before exp (lower_triangular)
LOG_DIAGONAL_MIN = -5.0
LOG_DIAGONAL_MAX = 10.0


def lower_triangular(entries: torch.Tensor, action_dim: int) -> torch.Tensor:
    """L [B, A, A] from its A(A+1)/2 lower-triangle entries [B, A(A+1)/2] (row by row), with the
    diagonal exponentiated so that it is positive and P = L L^T is positive definite (paper eq. 5).

    Only the diagonal goes through exp: exponentiating every entry and masking afterwards overflows
    for an off-diagonal entry above ~88 (float32), and the masked inf gives NaN gradients. The
    exponent is capped at LOG_DIAGONAL_MAX (a growing diagonal makes |L^T (a - mu)|^2 overflow and
    the loss NaN; P's diagonal e^20 ~ 5e8 is far beyond any return scale) and floored at
    LOG_DIAGONAL_MIN, a deviation from the paper: mu's gradient is proportional to P, so where L's
    diagonal collapses towards 0 it falls below Adam's eps (1e-8) and the policy freezes at an
    action bound; P's diagonal at the floor, e^-10 ~ 5e-5, is too small to matter to Q. Beyond
    either bound the entry gets no gradient (the other heads still move the shared layers).
    """
    # [A(A+1)/2] each
    rows, cols = torch.tril_indices(action_dim, action_dim, device=entries.device)
    diagonal = rows == cols
    L = entries.new_zeros(len(entries), action_dim, action_dim)
    L[:, rows[~diagonal], cols[~diagonal]] = entries[:, ~diagonal]
    log_diagonal = entries[:, diagonal].clamp(LOG_DIAGONAL_MIN, LOG_DIAGONAL_MAX)
    L[:, rows[diagonal], cols[diagonal]] = log_diagonal.exp()
    return L


def naf_advantage(actions: torch.Tensor, mu: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """A(s, a) = -1/2 (a - mu)^T L L^T (a - mu) = -1/2 |L^T (a - mu)|^2 [B] (paper eq. 4), through
    L^T (a - mu) so that P is never formed; A <= 0, with equality at a = mu."""
    diff = (actions - mu).unsqueeze(2)  # [B, A, 1]
    y = L.transpose(1, 2) @ diff  # [B, A, 1]
    return -0.5 * y.square().sum((1, 2))  # [B]


def naf_targets(
    net_target: NAFNetwork,
    rewards: torch.Tensor,
    next_obs: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    twin_target: NAFNetwork | None = None,
) -> torch.Tensor:
    """One-step targets [B]: r + gamma * (1 - terminated) * V_target(s'), since max_a' Q(s', a') =
    V(s'); `next_obs` is the true next observation, so truncated transitions bootstrap and
    terminated ones do not. With `twin_target`, the smaller of the two target networks' values
    (Fujimoto et al. 2018's clipped double Q, arXiv:1802.09477): each network's own max
    overestimates, their minimum less."""
    with torch.no_grad():
        next_value = net_target.value(next_obs)  # [B]
        if twin_target is not None:
            next_value = torch.minimum(next_value, twin_target.value(next_obs))
        return rewards + gamma * (1.0 - terminated) * next_value


def naf_loss(
    q_online: NAFNetwork,
    q_target: NAFNetwork,
    batch: Batch,
    gamma: float,
    reward_scale: float,
    twin_target: NAFNetwork | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The regression of Q(s, a) on the targets (MSE), and the batch's mean Q(s, a) and mean
    V(s) (logged). With `twin_target`, the targets bootstrap from the smaller of the two
    target values (naf_targets)."""
    rewards = batch.rewards * reward_scale  # x 1.0 leaves every float as it is
    targets = naf_targets(q_target, rewards, batch.next_obs, batch.terminated, gamma, twin_target)
    values, mu, L = q_online(batch.obs)
    q = values + naf_advantage(batch.actions, mu, L)  # Q(s, a) = V(s) + A(s, a) [B] (paper eq. 3)
    return F.mse_loss(q, targets), q.mean(), values.mean()


def deterministic_policy(
    net: NAFNetwork, device: torch.device
) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, *obs_shape] -> mu(obs) [B, A] = argmax_a Q(obs, a), no noise, in numpy: through
    `forward()`, or on CPU a numpy copy of the trunk and the mu head (all acting needs) while they
    agree (common.fastpath: faster at batch 1). Rebuild it after a load."""

    def act_forward(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.as_tensor(obs, dtype=torch.float32, device=device).reshape(len(obs), -1)
            return net(x)[1].cpu().numpy()

    layers = [*getattr(net, "trunk", []), getattr(net, "mu_head", None)]
    net_numpy = numpy_mlp(
        layers, device, net, getattr(net, "value_head", None), getattr(net, "l_head", None)
    )
    if net_numpy is None:  # act through forward()
        return act_forward
    scale = net.action_scale.numpy()  # [A], zero-copy views
    bias = net.action_bias.numpy()

    def act_numpy(obs: np.ndarray) -> np.ndarray:
        return bias + scale * np.tanh(net_numpy(obs))

    return checked(act_numpy, act_forward, f"{ALGO} policy", probe_batch((net.obs_dim,)))


# 6. Training ------------------------------------------------------------------------------------
def train(args: Args) -> dict:
    args = replace(args, eval_episodes=args.eval_episodes or eval_episodes_for(args.env_id))
    validate(args)
    columns = (
        "episodic_return",
        "episodic_length",
        "loss",
        "q_values",
        "values",
        "grad_norm",
        "sps",
        "eval_return",
        "eval_return_std",
    )
    # the run folder (metrics.csv's columns); torch threads, seeds, device
    run = Run(ALGO, args, columns)
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

    def make_q() -> NetworkWrapper[NAFNetwork]:  # Adam: NetworkWrapper's default optimizer
        net = build_network(args, envs)
        return NetworkWrapper(
            net,
            lr=args.learning_rate,
            clip_grad_norm=args.clip_grad_norm,
            target=True,
            device=device,
        )

    q_net = make_q()
    # after q_net: q_net's initial weights do not depend on it
    q_twin = make_q() if args.twin_q else None
    noise = ExplorationNoise(args.noise, args.noise_std, args.ou_theta, (high - low) / 2, B, rng)
    memory = ReplayMemory(
        args.buffer_size, (obs_dim,), (action_dim,), discrete=False, device=device, seed=replay_seed
    )
    # transitions stored before learning starts
    min_memory = min(args.learning_starts, args.buffer_size)

    def eval_envs(num_envs: int, video_dir: str | None) -> gym.vector.VectorEnv:
        return make_env(args.env_id, num_envs, video_dir)

    # themselves unless --compile
    acting_net = run.compile(q_net.online)
    naf_loss_fn = run.compile(naf_loss)
    # its own wrapper: the twin's networks compile a graph of their own
    twin_loss_fn = run.compile(naf_loss)

    # everything the next step depends on: run.after_step saves it, run.begin restores it
    def checkpoint() -> dict:
        saved_memory = memory if args.checkpoint_memory else None
        return {
            "q_net": q_net,
            "memory": saved_memory,
            "rng": rng,
            "noise": noise.state,
            "q_twin": q_twin,
        }

    # reset, or a resumed run's put back
    obs, global_step = run.begin(envs, eval_envs, checkpoint())
    obs = obs.reshape(B, obs_dim)
    policy = deterministic_policy(acting_net, device)  # the fast path checks these weights
    # Ctrl-C, a stop signal or a NaN loss ends the loop where it happens (harness/run.py)
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

            # learn: gradient_steps per `train_every` env steps crossed,
            # each followed by a soft target update
            if global_step > args.learning_starts and len(memory) >= min_memory:
                rounds = global_step // args.train_every - prev_step // args.train_every
                for _ in range(rounds * args.gradient_steps):
                    batch = memory.sample(args.batch_size)
                    twin_target = q_twin and q_twin.target  # None without --twin-q
                    loss, q_mean, v_mean = naf_loss_fn(
                        q_net.online,
                        q_net.target,
                        batch,
                        args.gamma,
                        args.reward_scale,
                        twin_target,
                    )
                    # the same batch and targets: before either target network moves
                    if q_twin is not None:
                        twin_loss, _, _ = twin_loss_fn(
                            q_twin.online,
                            q_twin.target,
                            batch,
                            args.gamma,
                            args.reward_scale,
                            q_net.target,
                        )
                        q_twin.train_step(twin_loss)
                        q_twin.sync(args.target_rate)
                    loss, grad_norm = q_net.train_step(loss)
                    q_net.sync(args.target_rate)
                    if q_net.updates % 100 == 0:
                        run.stop_if_nan(global_step, loss)
                        run.log(
                            global_step,
                            loss=loss,
                            q_values=q_mean,
                            values=v_mean,
                            grad_norm=grad_norm,
                        )

            # evaluate policy, save checkpoint() (then stop, on a stop signal), show progress
            run.after_step(prev_step, global_step, obs, policy, checkpoint)
    return run.finish(
        global_step, policy, model=q_net.online, device=str(device), updates=q_net.updates
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
    make_env(args.env_id, 1).close()  # a pixel env, an unknown id, the wrong action space
    scale_ok = args.reward_scale > 0 and math.isfinite(args.reward_scale)
    conditions = [(scale_ok, f"--reward-scale must be positive, got {args.reward_scale}")]
    positive = (
        "batch_size",
        "buffer_size",
        "train_every",
        "gradient_steps",
        "learning_rate",
        "clip_grad_norm",
    )
    nonnegative = ("noise_std", "learning_starts")
    # and harness.cli.SHARED_CHECKS (batch <= buffer, target rate, hidden sizes, ...)
    check(
        args,
        conditions,
        positive=positive,
        fractions=("gamma",),
        nonnegative=nonnegative,
        single_process=ALGO,
    )


def load_policy(
    args: Args, model_path: str, device: str = "cpu"
) -> Callable[[np.ndarray], np.ndarray]:
    """Deterministic policy from a `--save-model` file (a state dict, weights_only=True),
    for tools/evaluate.py."""
    envs = make_env(args.env_id, 1)
    net = build_network(args, envs)
    envs.close()
    net.load_state_dict(torch.load(model_path, map_location=device, weights_only=True))
    return deterministic_policy(net.to(device).eval(), torch.device(device))


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main())
