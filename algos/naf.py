"""NAF: normalized advantage functions (continuous deep Q-learning).

Paper: Gu, Lillicrap, Sutskever, Levine 2016, "Continuous Deep Q-Learning with Model-based
Acceleration", arXiv:1603.00748, https://arxiv.org/abs/1603.00748.

One network outputs a state value V(s), the greedy action mu(s) (tanh output scaled to the action
bounds) and a lower-triangular matrix L(s) with a positive (exponentiated) diagonal. With
P = L L^T, the Q-function is Q(s, a) = V(s) - 1/2 (a - mu(s))^T P(s) (a - mu(s)) (paper eq. 3-5):
a quadratic in the action whose maximum, V(s), sits at mu(s), so the max of Q-learning's target is
V_target(s'). The agent acts with mu(s) plus exploration noise, stores transitions in a replay
memory, and takes `gradient_steps` regression steps of Q(s, a) on r + gamma * (1 - terminated) *
V_target(s') per `train_every` env steps; the target copy moves by `target_rate` after each.

Deviations from the paper:
- Gaussian exploration noise by default (the paper's Ornstein-Uhlenbeck is a flag); no batch norm;
  no imagination rollouts (the paper's model-based acceleration).
- `--twin-q` (off by default; later work, not the paper): two NAF networks, each regressed on
  r + gamma * min(V1_target(s'), V2_target(s')), TD3's clipped double Q against the
  overestimation that makes Q grow without bound on some MuJoCo seeds; it doubles the update's
  cost.
- `--layer-norm` (off by default; later work, not the paper): LayerNorm after each hidden Linear
  layer, which keeps the features the value head reads at unit scale whatever the input; the
  paper tried batch norm instead. `--reward-scale` multiplies the rewards in the targets.
- Defaults (Adam 1e-3, batch 256, [256, 256], one gradient step per env step, target rate 0.005)
  are picked to learn Pendulum within 50k steps; the paper's [200, 200] net and Coach's 5 gradient
  steps per env step at rate 0.001 are flags.
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).
- L's exponentiated diagonal is kept within [e^-5, e^10] (`lower_triangular`): the cap stops
  |L^T (a - mu)|^2 from overflowing, the floor stops P from collapsing to 0, which freezes the
  policy (benchmarks/results/ddpg_naf.md has the runs).
- One torch thread by default; a seed's result depends on the thread count (benchmarks/results/speed.md).

Pixels: none; image observations and MinAtar or Atari ids are refused (dqn, n_step_q, sarsa and a2c take them).

Run:
    python algos/naf.py --env Pendulum-v1 --seed 1

Uses from common (the algorithm parts): NetworkWrapper (online/target network, Adam, soft sync),
ReplayMemory, true_next_obs (the final observation at episode ends), fastpath (the numpy policy,
checked against forward()). From harness: run (run flags, run folder, logging, evaluation,
signals, checkpoints).
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

import functools
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
from gymnasium.vector import AutoresetMode
from torch import nn

_HERE = Path(__file__).resolve().parent  # common/ and harness/ sit beside a copied script, one folder up in this repo
sys.path.insert(0, str(_HERE if (_HERE / "common").is_dir() else _HERE.parent))
from common.autoreset import true_next_obs  # noqa: E402
from common.fastpath import checked, numpy_mlp, probe_batch  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.replay import ReplayMemory  # noqa: E402
from harness.run import InputError, Run, RunArgs, bad_input, check, parse_args, refuse_workers, setup  # noqa: E402
from harness.run import main as run_main  # noqa: E402

ALGO = "naf"


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args(RunArgs):
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "Pendulum-v1"
    """gymnasium environment id (continuous actions, vector observations)"""
    total_timesteps: int = 50_000
    """env steps to train for, summed over all envs"""
    torch_threads: int = 1
    """CPU threads for torch (2 train the [256, 256] networks ~25% faster on an idle machine, far slower on a busy one)"""
    checkpoint_memory: bool = True
    """include the replay memory in checkpoints (without it a resumed run refills the memory for learning_starts steps before learning again: not an exact resume)"""

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
    """exploration noise: independent Gaussian, or Ornstein-Uhlenbeck (the paper's), reset at episode ends"""
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
    """two NAF networks trained on the same targets, r + gamma * min(V1_target(s'), V2_target(s')), against overestimation (TD3's clipped double Q); the first network's mu acts"""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """widths of the shared hidden layers"""
    layer_norm: bool = False
    """LayerNorm after each hidden Linear layer, before its ReLU (later work against value over-estimation, in place of the paper's batch norm)"""
    reward_scale: float = 1.0
    """rewards are multiplied by this in the targets (Q-values are in scaled units; logged returns are not scaled)"""


# 3. Environment ---------------------------------------------------------------------------------
def make_env(env_id: str, num_envs: int, video_dir: str | None = None) -> gym.vector.VectorEnv:
    """Vector env with SAME_STEP autoreset: the true final observation is in infos["final_obs"]."""
    if env_id.startswith(("ALE/", "MinAtar/")) or "NoFrameskip" in env_id:
        raise InputError(f"{ALGO} takes vector observations; {env_id} is a pixel env (dqn, n_step_q, sarsa and a2c take images)")

    def make(i: int) -> gym.Env:
        if video_dir is None:
            return gym.make(env_id)
        from harness.extras import record_first_episode

        return record_first_episode(gym.make(env_id, render_mode="rgb_array"), video_dir, i)

    with bad_input():  # an unknown id, an env that refuses the settings, a missing env package
        try:
            gym.spec(env_id)
        except gym.error.Error as e:
            raise ValueError(f"unknown environment id {env_id!r} ({e})") from None
        envs = gym.vector.SyncVectorEnv([functools.partial(make, i) for i in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    space, obs_space = envs.single_action_space, envs.single_observation_space
    for bad, problem in [
        (not isinstance(space, gym.spaces.Box), f"needs a continuous (Box) action space; {env_id} has {space}"),
        (isinstance(space, gym.spaces.Box) and not (np.isfinite(space.low).all() and np.isfinite(space.high).all()),
         f"needs finite action bounds to scale its tanh output; {env_id} has {space}"),
        (not isinstance(obs_space, gym.spaces.Box), f"needs a Box observation space; {env_id} has {obs_space}"),
        (len(obs_space.shape or ()) == 3, f"takes vector observations; {env_id} gives images of shape {obs_space.shape}"),
    ]:
        if bad:
            envs.close()
            raise InputError(f"{ALGO} {problem}")
    return envs


# 4. Networks ------------------------------------------------------------------------------------
class NAFNetwork(nn.Module):
    """Shared trunk with three heads: V(s) [B], mu(s) [B, A] and L(s) [B, A, A].

    The trunk's hidden layers are Linear-ReLU, or Linear-LayerNorm-ReLU with `layer_norm`.
    """

    def __init__(self, obs_dim: int, action_space: gym.spaces.Box, hidden_sizes: tuple[int, ...], layer_norm: bool = False):
        super().__init__()
        layers, width = [], obs_dim
        for h in hidden_sizes:
            norm = [nn.LayerNorm(h)] if layer_norm else []
            layers += [nn.Linear(width, h), *norm, nn.ReLU(inplace=True)]  # in place: one buffer less per layer
            width = h
        self.trunk = nn.Sequential(*layers)
        self.action_dim = A = int(np.prod(action_space.shape))
        self.value_head = nn.Linear(width, 1)
        self.mu_head = nn.Linear(width, A)
        self.l_head = nn.Linear(width, A * (A + 1) // 2)  # the lower triangle, row by row
        low, high = (torch.as_tensor(x, dtype=torch.float32).flatten() for x in (action_space.low, action_space.high))
        self.register_buffer("action_scale", (high - low) / 2)  # [A]
        self.register_buffer("action_bias", (high + low) / 2)  # [A]

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)  # [B, H]
        values = self.value_head(h).squeeze(1)  # [B]
        mu = self.action_bias + self.action_scale * torch.tanh(self.mu_head(h))  # [B, A]
        return values, mu, lower_triangular(self.l_head(h), self.action_dim)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.trunk(obs)).squeeze(1)  # [B]


# 5. Algorithm -----------------------------------------------------------------------------------
class ExplorationNoise:
    """Gaussian or Ornstein-Uhlenbeck noise [B, A] in action units (`std` times half the range).

    OU (dt = 1): x <- x - theta * x + sigma * N(0, 1), one process per env and action dimension,
    reset to 0 where an episode ended so that episodes do not share their noise.
    """

    def __init__(self, kind: str, std: float, theta: float, scale: np.ndarray, num_envs: int, rng: np.random.Generator):
        self.kind, self.theta, self.rng = kind, theta, rng
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


LOG_DIAGONAL_MIN = -5.0  # floor on L's diagonal before exp (see lower_triangular)
LOG_DIAGONAL_MAX = 10.0  # cap on L's diagonal before exp (see lower_triangular)


def lower_triangular(entries: torch.Tensor, action_dim: int) -> torch.Tensor:
    """L [B, A, A] from its A(A+1)/2 lower-triangle entries [B, A(A+1)/2] (row by row), with the
    diagonal exponentiated so that it is positive and P = L L^T is positive definite (paper eq. 5).

    Only the diagonal entries go through exp: exponentiating every entry and masking afterwards
    overflows for an off-diagonal entry above ~88 (float32), and the masked inf gives NaN gradients.
    The exponent is capped at LOG_DIAGONAL_MAX: a diagonal entry that keeps growing makes
    |L^T (a - mu)|^2 overflow float32 and the loss NaN. A diagonal of e^10 already gives a
    curvature (P's diagonal, e^20 ~ 5e8) far beyond any return scale; below the cap nothing
    changes, and above it the entry gets no gradient.

    The exponent is floored at LOG_DIAGONAL_MIN (a deviation from the paper): mu's gradient is
    proportional to P, so where L's diagonal collapses towards 0 it falls far below Adam's eps
    (1e-8), Adam's steps on mu vanish and the policy freezes (a constant push at an action bound).
    At the floor P's diagonal is e^-10 ~ 5e-5: too small to matter to Q at any action scale, large
    enough for mu's gradient to stay well above Adam's eps. Below the floor the entry gets no
    gradient (the other heads and states still move the shared layers). The runs behind both
    bounds: benchmarks/results/ddpg_naf.md.
    """
    rows, cols = torch.tril_indices(action_dim, action_dim, device=entries.device)  # [A(A+1)/2] each
    diagonal = rows == cols
    L = entries.new_zeros(len(entries), action_dim, action_dim)
    L[:, rows[~diagonal], cols[~diagonal]] = entries[:, ~diagonal]
    L[:, rows[diagonal], cols[diagonal]] = entries[:, diagonal].clamp(LOG_DIAGONAL_MIN, LOG_DIAGONAL_MAX).exp()
    return L


def naf_advantage(actions: torch.Tensor, mu: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """A(s, a) = -1/2 (a - mu)^T L L^T (a - mu) = -1/2 |L^T (a - mu)|^2 [B] (paper eq. 4).

    Written through L^T (a - mu) so that P is never formed; A <= 0, with equality at a = mu.
    """
    diff = (actions - mu).unsqueeze(2)  # [B, A, 1]
    y = L.transpose(1, 2) @ diff  # [B, A, 1]
    return -0.5 * y.square().sum((1, 2))  # [B]


def naf_q_values(net: NAFNetwork, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Q(s, a) = V(s) + A(s, a) [B] (paper eq. 3)."""
    values, mu, L = net(obs)
    return values + naf_advantage(actions, mu, L)


def naf_targets(net_target: NAFNetwork, rewards: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                gamma: float, twin_target: NAFNetwork | None = None) -> torch.Tensor:
    """One-step targets [B]: r + gamma * (1 - terminated) * V_target(s'), since max_a' Q(s', a') = V(s').

    With `twin_target`, the smaller of the two target networks' values (Fujimoto et al. 2018's
    clipped double Q, arXiv:1802.09477): each network's own max overestimates, their minimum less.
    `next_obs` is the true next observation, so truncated transitions bootstrap and terminated
    ones do not.
    """
    with torch.no_grad():
        next_value = net_target.value(next_obs)  # [B]
        if twin_target is not None:
            next_value = torch.minimum(next_value, twin_target.value(next_obs))
        return rewards + gamma * (1.0 - terminated) * next_value


# 6. Training ------------------------------------------------------------------------------------
def train(args: Args) -> dict:
    validate(args)
    device = setup(args)  # torch threads, seeds, device
    noise_seed, replay_seed = np.random.SeedSequence(args.seed).spawn(2)  # independent streams from one seed
    rng = np.random.default_rng(noise_seed)  # exploration

    envs = make_env(args.env_id, args.num_envs)
    envs.action_space.seed(args.seed)
    envs.single_action_space.seed(args.seed)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_shape = envs.single_action_space.shape
    action_dim = int(np.prod(action_shape))
    low = envs.single_action_space.low.reshape(action_dim).astype(np.float32)  # [A]
    high = envs.single_action_space.high.reshape(action_dim).astype(np.float32)  # [A]
    B = args.num_envs

    def make_q() -> NetworkWrapper:
        return NetworkWrapper(NAFNetwork(obs_dim, envs.single_action_space, args.hidden_sizes, args.layer_norm),
                              lr=args.learning_rate, optimizer="adam", clip_grad_norm=args.clip_grad_norm, target=True, device=device)

    q_net = make_q()
    q_twin = make_q() if args.twin_q else None  # after q_net: q_net's initial weights are the same with and without it
    policy = deterministic_policy(q_net.online, device)
    noise = ExplorationNoise(args.noise, args.noise_std, args.ou_theta, (high - low) / 2, B, rng)
    memory = ReplayMemory(args.buffer_size, (obs_dim,), (action_dim,), discrete=False, device=device, seed=replay_seed)
    eval_envs = functools.partial(make_env, args.env_id)
    run = Run(ALGO, args, ["episodic_return", "episodic_length", "loss", "q_values", "values", "grad_norm", "sps", "eval_return", "eval_return_std"])
    print(f"{ALGO}: {args.env_id}, seed {args.seed}, {args.total_timesteps:,} steps on {device}; run folder {run.path}", flush=True)

    global_step = 0
    state = run.restore(envs)  # None for a new run; generators, envs and running episodes are already restored
    if state is None:
        obs, _ = envs.reset(seed=args.seed)
    else:
        q_net.load_state_dict(state["q_net"])
        if q_twin is not None:
            q_twin.load_state_dict(state["q_twin"])
        policy = deterministic_policy(q_net.online, device)  # the fast path checked again, on the loaded weights
        if state["memory"] is not None:
            memory.load_state_dict(state["memory"])
        rng.bit_generator.state = state["rng"]
        noise.state[:] = state["noise"]
        obs, global_step = state["obs"], state["global_step"]
    obs = obs.reshape(B, obs_dim)
    with run.training(envs):
        while global_step < args.total_timesteps:
            prev_step, global_step = global_step, global_step + B
            # act: uniform during heatup, then mu(s) + noise, clipped to the bounds
            if global_step <= args.learning_starts:
                actions = rng.uniform(low, high, size=(B, action_dim)).astype(np.float32)  # [B, A]
            else:
                actions = np.clip(policy(obs) + noise(), low, high).astype(np.float32)  # [B, A]
            next_obs, rewards, terminated, truncated, infos = envs.step(actions.reshape(B, *action_shape))
            next_obs = next_obs.reshape(B, obs_dim)

            # store: the autoreset already put the new episode's first obs in next_obs, so the
            # transition must use the true final observation of the finished episode
            real_next_obs = true_next_obs(next_obs, infos)
            memory.add(obs, actions, rewards, real_next_obs, terminated)
            obs = next_obs

            done = terminated | truncated
            run.episodes(global_step, rewards, done)  # logs the episodes that ended
            if done.any():
                noise.reset(done)

            # learn: gradient_steps per `train_every` env steps crossed in this iteration, each
            # followed by a soft target update
            if global_step > args.learning_starts and len(memory) >= min(args.learning_starts, args.buffer_size):
                rounds = global_step // args.train_every - prev_step // args.train_every
                for _ in range(rounds * args.gradient_steps):
                    batch = memory.sample(args.batch_size)
                    rewards = batch.rewards * args.reward_scale  # x 1.0 leaves every float as it is
                    targets = naf_targets(q_net.target, rewards, batch.next_obs, batch.terminated, args.gamma,
                                          q_twin.target if q_twin is not None else None)
                    values, mu, L = q_net.online(batch.obs)
                    q = values + naf_advantage(batch.actions, mu, L)  # [B]
                    loss, grad_norm = q_net.train_step(F.mse_loss(q, targets))
                    q_net.sync(args.target_rate)
                    if q_twin is not None:  # the same batch and targets
                        q_twin.train_step(F.mse_loss(naf_q_values(q_twin.online, batch.obs, batch.actions), targets))
                        q_twin.sync(args.target_rate)
                    if q_net.updates % 100 == 0:
                        if not math.isfinite(loss.item()):
                            raise FloatingPointError(f"loss became {loss.item()} at step {global_step}; lower --learning-rate or clip gradients")
                        run.log(global_step, loss=loss.item(), q_values=q.mean().item(), values=values.mean().item(),
                                grad_norm=grad_norm.item(), sps=round(global_step / run.elapsed()))

            if args.eval_every and global_step // args.eval_every > prev_step // args.eval_every and global_step < args.total_timesteps:
                run.evaluate(policy, eval_envs, global_step)
            if run.checkpoint_due(prev_step, global_step):  # everything the next step depends on
                run.save_checkpoint(global_step, envs, obs, {
                    "q_net": q_net.state_dict(), "memory": memory.state_dict() if args.checkpoint_memory else None,
                    "rng": rng.bit_generator.state, "noise": noise.state, "q_twin": q_twin.state_dict() if q_twin is not None else None,
                })
            if global_step >= run.next_check:
                run.progress(global_step)
        run.final_evaluation(policy, eval_envs, global_step)
    return run.finish(global_step, model=q_net.online, device=str(device), updates=q_net.updates)


main = functools.partial(run_main, ALGO, train)  # exit status: 0 done, 1 failed, 2 bad input, 75 preempted, 130 interrupted


# Acting, checks and saved policies ---------------------------------------------------------------
def deterministic_policy(net: NAFNetwork, device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    """obs [B, *obs_shape] -> mu(obs) [B, A] (no noise), the greedy action argmax_a Q(obs, a), as a
    numpy function: through `forward()`, or on CPU through a numpy copy of the trunk and the mu
    head (the value and L heads are not needed to act) while it gives forward()'s mu
    (common.fastpath; at a batch of one, torch's per-op dispatch costs more than the arithmetic).
    Build it again after loading weights."""
    def act_forward(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.as_tensor(obs, dtype=torch.float32, device=device).reshape(len(obs), -1)
            return net(x)[1].cpu().numpy()

    layers = [*getattr(net, "trunk", []), getattr(net, "mu_head", None)]
    net_numpy = numpy_mlp(layers, device, net, getattr(net, "value_head", None), getattr(net, "l_head", None))
    if net_numpy is None:  # act through forward()
        return act_forward
    scale, bias = net.action_scale.numpy(), net.action_bias.numpy()  # [A], zero-copy views

    def act_numpy(obs: np.ndarray) -> np.ndarray:
        return bias + scale * np.tanh(net_numpy(obs))

    return checked(act_numpy, act_forward, f"{ALGO} policy", probe_batch((net_numpy.in_features,)))


def validate(args: Args) -> None:
    """Raise InputError (one line, exit 2) naming the first bad value: the env first, then the numbers."""
    make_env(args.env_id, 1).close()  # an unknown id, a pixel env, the wrong action space
    check(args, positive=("batch_size", "buffer_size", "train_every", "gradient_steps", "learning_rate", "clip_grad_norm"),
          fractions=("gamma",), conditions=[
        (args.batch_size <= args.buffer_size, f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}"),
        (args.noise_std >= 0.0, f"--noise-std must be >= 0, got {args.noise_std}"),
        (0.0 < args.ou_theta <= 1.0, f"--ou-theta must be in (0, 1], got {args.ou_theta}"),
        (0.0 < args.target_rate <= 1.0, f"--target-rate must be in (0, 1], got {args.target_rate}"),
        (args.learning_starts >= 0, f"--learning-starts must be >= 0, got {args.learning_starts}"),
        (args.learning_starts < args.total_timesteps,
         f"--learning-starts {args.learning_starts} leaves no step to learn in --total-timesteps {args.total_timesteps}"),
        (all(h > 0 for h in args.hidden_sizes), f"--hidden-sizes must be positive, got {args.hidden_sizes}"),
        (args.reward_scale > 0 and math.isfinite(args.reward_scale), f"--reward-scale must be positive, got {args.reward_scale}"),
    ])
    refuse_workers(ALGO)


def load_policy(args: Args, model_path: str, device: str = "cpu") -> Callable[[np.ndarray], np.ndarray]:
    """Deterministic policy from a `--save-model` file (state dict, loaded with weights_only=True), for evaluate.py."""
    envs = make_env(args.env_id, 1)
    net = NAFNetwork(int(np.prod(envs.single_observation_space.shape)), envs.single_action_space, tuple(args.hidden_sizes),
                     args.layer_norm)
    envs.close()
    net.load_state_dict(torch.load(model_path, map_location=device, weights_only=True))
    return deterministic_policy(net.to(device).eval(), torch.device(device))


# 7. Entry point ---------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main(parse_args(Args, __doc__)))
