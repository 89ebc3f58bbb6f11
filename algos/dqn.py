"""DQN: deep Q-network with experience replay and a target network.

Paper: Mnih et al. 2015, "Human-level control through deep reinforcement learning", Nature 518,
https://doi.org/10.1038/nature14236. Double DQN: van Hasselt et al. 2016, arXiv:1509.06461.

The agent acts epsilon-greedily on Q(s, .), stores every transition in a replay memory and every
`train_every` env steps regresses Q(s, a) on the one-step target r + gamma * (1 - terminated) *
max_a' Q_target(s', a') for a random minibatch. The target network moves towards the online one by
`target_rate` (1: a hard copy) every `target_every` env steps. Until `learning_starts` (heatup) the
agent acts uniformly at random, not learning.

Deviations from the paper:
- Defaults are CleanRL's classic-control settings (MSE loss, Adam, 10k memory, [120, 84] MLP), not
  the Atari ones (Huber loss, RMSprop, 1M memory; the pixel suites pass them), except that the step
  size decays linearly to 0 over the learning phase (`--no-anneal-lr`: CleanRL's constant one): the
  final network is a snapshot of an oscillating one, and with the decay the late updates are small
  (benchmarks/results/dqn.md has the runs).
- Truncated episodes bootstrap from the true final observation (the paper predates truncation).

Pixels: the torso follows the observation (common.torso). Atari (common.atari): rewards clipped
to their sign for learning only, a lost life ends the training episode, logged returns are
whole games, a FrameMemory stores each frame once. Protocols as flags (MinAtar's, the Nature
paper's): docs/pixels.md.

Run:
    python algos/dqn.py --env CartPole-v1 --seed 1
    python algos/dqn.py --env MinAtar/Breakout-v1 --total-timesteps 1000000   (pixels extra)
Uses from common: network, replay, autoreset, pixels, torso, fastpath; from harness: cli, run.
"""

# 1. Imports -------------------------------------------------------------------------------------
from __future__ import annotations

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
from common.fastpath import checked, numpy_mlp  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.replay import Batch, ReplayMemory  # noqa: E402
from common.torso import is_image, obs_shape, torso  # noqa: E402
from harness.cli import RunArgs, check, main as run_main  # noqa: E402
from harness.run import Run, vector_env  # noqa: E402

ALGO = "dqn"
Policy = Callable[[np.ndarray], np.ndarray]  # observations [B, *obs_shape] -> actions [B]


# 2. Arguments -----------------------------------------------------------------------------------
@dataclass
class Args(RunArgs):
    env_id: Annotated[str, tyro.conf.arg(aliases=("--env",))] = "CartPole-v1"
    """gymnasium environment id (discrete actions;
    vectors, MinAtar/* or Atari ids such as ALE/Breakout-v5)"""
    eval_epsilon: float = 0.0
    """probability of a random action in evaluation (0:
    greedy; the Nature paper's 0.05, CleanRL's 0.01)"""
    eval_max_frames: Optional[int] = None
    """Atari only: emulator frames per evaluation game
    (None: ALE's 108,000; the Nature paper's 18,000)"""
    checkpoint_memory: bool = True
    """put the replay memory in checkpoints (without: a
    resumed run refills it first; not an exact resume)"""

    learning_rate: float = 2.5e-4
    """the optimizer's step size"""
    anneal_lr: bool = True
    """decay the step size linearly to 0 from
    learning_starts to total_timesteps (--no-anneal-lr: constant)"""
    optimizer: Literal["adam", "rmsprop"] = "adam"
    """optimizer of the Q-network (rmsprop with --rmsprop-centered: the DQN and MinAtar papers')"""
    optimizer_eps: float = 1e-8
    """the optimizer's epsilon (Adam's, or RMSprop's
    added to the root of the squared-gradient average)"""
    rmsprop_alpha: float = 0.99
    """RMSprop's smoothing constant of the squared-gradient average"""
    rmsprop_centered: bool = False
    """RMSprop's centered variant: divide by the
    gradient's estimated std, not its root mean square"""
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
    decay_after_heatup: bool = False
    """start epsilon's decay when heatup ends (MinAtar's agent) instead of at step 0"""
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
    """widths of the Q-network's hidden layers (vectors; image torsos are the papers')"""
    scale_obs: bool = False
    """map each bounded observation component from [low,
    high] to [-1, 1] (vectors; common/pixels.py)"""


# 3. Environment ---------------------------------------------------------------------------------
def make_env(
    env_id: str,
    num_envs: int,
    video_dir: str | None = None,
    training: bool = True,
    scale_obs: bool = False,
    max_frames: int | None = None,
) -> gym.vector.VectorEnv:
    """common.pixels.make envs (`training`: a lost life ends an Atari episode), SAME_STEP autoreset
    (the true final observation in infos["final_obs"]); Discrete actions, Box observations, or
    InputError (vector_env)."""

    def make(render_mode: str | None) -> gym.Env:
        return pixels.make(
            env_id,
            training,
            render_mode,
            scale_obs=scale_obs,
            max_frames=max_frames,
        )

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


def dqn_targets(
    q_target: nn.Module,
    q_online: nn.Module,
    rewards: Tensor,
    next_obs: Tensor,
    terminated: Tensor,
    gamma: float,
    double_dqn: bool,
) -> Tensor:
    """One-step targets [B], r + gamma * (1 - terminated) * Q_target(s', a*), from the tensors
    `rewards`, `terminated` [B], `next_obs` [B, *obs_shape]. a* = argmax Q_target(s', .) for
    DQN, argmax Q_online(s', .) for Double DQN (which removes the max operator's
    overestimation). `next_obs` is the true next observation, so truncated transitions bootstrap
    and terminated ones do not."""
    with torch.no_grad():
        next_q = q_target(next_obs)  # [B, A]
        if double_dqn:
            best = q_online(next_obs).argmax(1, keepdim=True)  # [B, 1]
            next_value = next_q.gather(1, best).squeeze(1)  # [B]
        else:
            next_value = next_q.max(1).values  # [B]
        return rewards + gamma * (1.0 - terminated) * next_value


def dqn_loss(
    q_online: nn.Module,
    q_target: nn.Module,
    batch: Batch,
    gamma: float,
    double_dqn: bool,
    loss: str,
) -> tuple[Tensor, Tensor]:
    """Q(s, a) regressed on the targets (MSE or Huber; Double DQN's if `double_dqn`),
    and the mean Q (logged)."""
    targets = dqn_targets(
        q_target,
        q_online,
        batch.rewards,
        batch.next_obs,
        batch.terminated,
        gamma,
        double_dqn,
    )
    q = q_online(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)  # [B]
    return (F.mse_loss if loss == "mse" else F.smooth_l1_loss)(q, targets), q.mean()


def greedy_policy(q_net: QNetwork, device: torch.device) -> Policy:
    """obs [B, *obs_shape] -> argmax_a Q(obs, a) [B] in numpy: through `forward()`, or on
    CPU a numpy MLP while it gives forward()'s Q-values (common.fastpath). Build it again
    after loading weights."""

    def q_forward(obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, device=device)
        with torch.no_grad():
            return q_net(x if x.dtype == torch.uint8 else x.float()).cpu().numpy()  # [B, A]

    fast = numpy_mlp(list(getattr(q_net, "net", [])), device, q_net)
    q_values = checked(fast, q_forward, f"{ALGO} greedy policy")

    def greedy(obs: np.ndarray) -> np.ndarray:
        return q_values(obs).argmax(1)  # [B]

    return greedy


def evaluation_policy(
    greedy: Policy, epsilon: float, n_actions: int, seed: int, step: int
) -> Policy:
    """`greedy`, or epsilon-greedy on a generator of its own,
    seeded from the run's seed and the step."""
    if epsilon == 0.0:
        return greedy
    rng = np.random.default_rng([seed, step])

    def epsilon_greedy(obs: np.ndarray) -> np.ndarray:
        return select_actions(greedy, obs, epsilon, n_actions, rng)

    return epsilon_greedy


# 6. Training ------------------------------------------------------------------------------------
def train(args: Args) -> dict:
    validate(args)
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
    run = Run(ALGO, args, fields)  # the run folder; torch threads, seeds, device
    # streams apart from env 0's seed
    explore_seed, replay_seed = np.random.SeedSequence(args.seed).spawn(2)
    rng = np.random.default_rng(explore_seed)  # exploration

    envs = make_env(args.env_id, args.num_envs, scale_obs=args.scale_obs)
    shape = obs_shape(envs.single_observation_space)  # images as they are, vectors flattened
    action_space = envs.single_action_space
    assert isinstance(action_space, gym.spaces.Discrete)  # vector_env refused any other
    n_actions = int(action_space.n)
    B = args.num_envs
    atari = pixels.kind(args.env_id) == "atari"

    learning_rounds = (
        args.total_timesteps // args.train_every - args.learning_starts // args.train_every
    )
    num_updates = max(1, learning_rounds * args.gradient_steps)

    def linear_decay(update: int) -> float:
        """the step size's multiplier: 1 at the first update, 0 at the last"""
        return max(0.0, 1.0 - update / num_updates)

    q_net = NetworkWrapper(
        build_network(args, envs),
        lr=args.learning_rate,
        optimizer=args.optimizer,
        eps=args.optimizer_eps,
        alpha=args.rmsprop_alpha,
        centered=args.rmsprop_centered,
        clip_grad_norm=args.clip_grad_norm,
        target=True,
        device=run.device,
        lr_lambda=linear_decay if args.anneal_lr else None,
    )
    memory: ReplayMemory | FrameMemory
    if atari:  # frame stacks: each frame stored once
        from common.atari import FrameMemory

        stack, height, width = shape  # [C, H, W], C the frames stacked
        memory = FrameMemory(
            args.buffer_size, (height, width), stack, B, device=run.device, seed=replay_seed
        )
    else:  # discrete actions (the default); images stay uint8 (the network converts them)
        dtype = torch.uint8 if is_image(shape) else torch.float32
        memory = ReplayMemory(
            args.buffer_size, shape, device=run.device, seed=replay_seed, obs_dtype=dtype
        )
    # transitions stored before learning starts
    min_memory = min(args.learning_starts, args.buffer_size)

    def eval_envs(num_envs: int, video_dir: str | None) -> gym.vector.VectorEnv:
        return make_env(
            args.env_id,
            num_envs,
            video_dir,
            training=False,
            scale_obs=args.scale_obs,
            max_frames=args.eval_max_frames,
        )

    # themselves unless --compile
    acting_net = run.compile(q_net.online)
    loss_fn = run.compile(dqn_loss)

    # what the next step depends on: run.after_step saves checkpoint(), run.begin restores it
    def checkpoint() -> dict:
        return {
            "q_net": q_net,
            "memory": memory if args.checkpoint_memory else None,
            "rng": rng,
        }

    # reset, or a resumed run's put back
    obs, global_step = run.begin(envs, eval_envs, checkpoint())
    if run.envs_reset and not isinstance(memory, ReplayMemory):  # Atari's FrameMemory
        # after a resume, the new observations must not be stacked onto the old frames
        memory.new_episodes()
    # fast path checked post-load
    obs = obs.reshape(B, *shape)
    greedy = greedy_policy(acting_net, run.device)

    def policy_at(step: int) -> Policy:
        return evaluation_policy(greedy, args.eval_epsilon, n_actions, args.seed, step)

    # epsilon's, from step 0 or heatup's end
    decay_steps = args.exploration_fraction * args.total_timesteps
    # Ctrl-C, a stop signal or a NaN loss ends the loop where it happens (harness.run)
    with run.stoppable():
        while global_step < args.total_timesteps:
            prev_step = global_step
            global_step = global_step + B
            # act: uniform during heatup, then epsilon-greedy on the online network
            elapsed = (
                max(0, global_step - args.learning_starts)
                if args.decay_after_heatup
                else global_step
            )
            epsilon = linear_epsilon(args.start_epsilon, args.end_epsilon, decay_steps, elapsed)
            if global_step <= args.learning_starts:
                actions = rng.integers(n_actions, size=B)
            else:
                actions = select_actions(greedy, obs, epsilon, n_actions, rng)
            next_obs, rewards, terminated, truncated, infos = envs.step(actions)
            next_obs = next_obs.reshape(B, *shape)

            # store: with the true final observation where an episode ended,
            # not the new episode's first
            real_next_obs = true_next_obs(next_obs, infos)
            # Atari: sign-clipped, for learning only
            learn_rewards = np.sign(rewards) if atari else rewards
            memory.add(
                obs, actions, learn_rewards, real_next_obs, terminated, done=terminated | truncated
            )
            obs = next_obs
            # whole games
            run.episodes(global_step, rewards, pixels.game_over(terminated, truncated, infos))

            # learn: gradient_steps per `train_every` steps crossed,
            # once the memory holds learning_starts
            if global_step > args.learning_starts and len(memory) >= min_memory:
                rounds = global_step // args.train_every - prev_step // args.train_every
                for _ in range(rounds * args.gradient_steps):
                    loss, q_mean = loss_fn(
                        q_net.online,
                        q_net.target,
                        memory.sample(args.batch_size),
                        gamma=args.gamma,
                        double_dqn=args.double_dqn,
                        loss=args.loss,
                    )
                    loss, grad_norm = q_net.train_step(loss)
                    if q_net.updates % 100 == 0:
                        run.stop_if_nan(global_step, loss)
                        run.log(
                            global_step,
                            loss=loss,
                            q_values=q_mean,
                            grad_norm=grad_norm,
                            epsilon=epsilon,
                        )
                # sync: every `target_every` env steps crossed
                if global_step // args.target_every > prev_step // args.target_every:
                    q_net.sync(args.target_rate)

            # evaluate policy_at(global_step), save checkpoint()
            # (then stop, on a stop signal), show progress
            run.after_step(prev_step, global_step, obs, policy_at(global_step), checkpoint)
    policy = policy_at(global_step)
    return run.finish(
        global_step, policy, model=q_net.online, device=str(run.device), updates=q_net.updates
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
    max_frames_ok = args.eval_max_frames is None or pixels.kind(args.env_id) == "atari"
    conditions = [  # checked after harness.cli.SHARED_CHECKS (batch <= buffer, target rate, ...)
        (
            0.0 <= args.rmsprop_alpha < 1.0,
            f"--rmsprop-alpha must be in [0, 1), got {args.rmsprop_alpha}",
        ),
        (rmsprop_ok, "--rmsprop-alpha and --rmsprop-centered need --optimizer rmsprop"),
        (max_frames_ok, f"--eval-max-frames is for Atari ids; {args.env_id} is not one"),
    ]
    positive = (
        "batch_size",
        "buffer_size",
        "target_every",
        "train_every",
        "gradient_steps",
        "learning_rate",
        "optimizer_eps",
        "eval_max_frames",
        "clip_grad_norm",
    )
    fractions = ("start_epsilon", "end_epsilon", "gamma", "eval_epsilon")
    check(
        args,
        conditions,
        positive,
        fractions,
        nonnegative=("learning_starts",),
        single_process=ALGO,
    )


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
