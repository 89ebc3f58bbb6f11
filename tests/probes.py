"""Probes for tests that run the scripts' train() itself: tiny envs, NetworkWrappers that record
every step and sync, and the flush-denormal state.

Chain-v0 (dqn, n_step_q, sarsa): obs = [steps since reset, episode id in [0, 1)]; the reward is
the action taken (0 or 1); terminates at a random step, truncated by the time limit at 6.

CountBoxEnv-v0 (a2c, ddpg, naf): obs = [steps since reset, episode id, the action the env received], reward
-action^2. Episodes terminate at a random step or are truncated by the time limit, so a few hundred steps hold both kinds of end;
the step count tells a transition that stays in its episode (t -> t + 1) from one that crosses
into the reset observation (t -> 0).

ImageBox-v0 (ddpg and naf refuse it, a2c too): [3, 84, 84] uint8 images with continuous actions.
"""

import gymnasium as gym
import numpy as np
import torch

from common.network import NetworkWrapper

ENV_ID = "CountBoxEnv-v0"
LOW, HIGH = -0.5, 0.5  # the action bounds
TIME_LIMIT = 6


class CountBoxEnv(gym.Env):
    observation_space = gym.spaces.Box(-1e3, 1e3, (3,), np.float32)
    action_space = gym.spaces.Box(LOW, HIGH, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = (
            0,
            self.np_random.integers(1, 1000) / 1000,
        )  # small inputs for the networks
        self.end = self.np_random.integers(2, 12)  # sometimes beyond the time limit (truncation)
        return np.array([self.t, self.episode, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        a = float(np.asarray(action).reshape(-1)[0])
        obs = np.array([self.t, self.episode, a], np.float32)
        return obs, -a * a, bool(self.t == self.end), False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CountBoxEnv, max_episode_steps=TIME_LIMIT)


class ChainEnv(gym.Env):
    """Discrete actions; `ChainEnv.steps` counts the env steps of all instances."""

    observation_space = gym.spaces.Box(0.0, 100.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.np_random.random()
        self.end = self.np_random.integers(2, 12)  # sometimes beyond the time limit (truncation)
        return np.array([self.t, self.episode], np.float32), {}

    def step(self, action):
        ChainEnv.steps += 1
        self.t += 1
        return (
            np.array([self.t, self.episode], np.float32),
            float(action),
            bool(self.t == self.end),
            False,
            {},
        )


CHAIN_ID = "Chain-v0"
if CHAIN_ID not in gym.registry:
    gym.register(CHAIN_ID, entry_point=ChainEnv, max_episode_steps=TIME_LIMIT)


class ImageBoxEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (3, 84, 84), np.uint8)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((3, 84, 84), np.uint8), {}

    def step(self, action):
        return np.zeros((3, 84, 84), np.uint8), 0.0, False, False, {}


IMAGE_BOX_ID = "ImageBox-v0"
if IMAGE_BOX_ID not in gym.registry:
    gym.register(IMAGE_BOX_ID, entry_point=ImageBoxEnv, max_episode_steps=TIME_LIMIT)


class RecordingWrapper(NetworkWrapper):
    """Records the env step (ChainEnv.steps) and both networks' weights around every gradient step
    and target sync; `RecordingWrapper.made` collects the instances."""

    made: list = []

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.events = []
        RecordingWrapper.made.append(self)

    def record(self, kind: str):
        target = None if self.target is None else flat(self.target)
        self.events.append(
            dict(kind=kind, step=ChainEnv.steps, online=flat(self.online), target=target)
        )

    def train_step(self, loss, *a, **kw):
        self.record("before update")
        out = super().train_step(loss, *a, **kw)
        self.record("after update")
        return out

    def sync(self, *a, **kw):
        self.record("before sync")
        super().sync(*a, **kw)
        self.record("after sync")


def flat(module) -> torch.Tensor:
    """A copy of every floating parameter and buffer of `module`, as one vector."""
    return torch.cat(
        [
            t.detach().reshape(-1).clone()
            for t in (*module.parameters(), *module.buffers())
            if t.is_floating_point()
        ]
    )


def recording_wrapper(base: type, events: list, wrappers: dict) -> type:
    """A NetworkWrapper subclass that appends to `events`, for every train_step and sync,
    (kind, name, rate, before, after): `name` is the network's class name, `before` and `after`
    map every wrapper's name to (online, target) vectors taken around the call. `wrappers`
    collects the instances by name."""

    def snapshot():
        return {
            n: (flat(w.online), None if w.target is None else flat(w.target))
            for n, w in wrappers.items()
        }

    class RecordingWrapper(base):
        def __init__(self, net, **kw):
            super().__init__(net, **kw)
            self.name = type(net).__name__
            wrappers[self.name] = self

        def train_step(self, loss):
            before = snapshot()
            out = super().train_step(loss)
            events.append(("step", self.name, None, before, snapshot()))
            return out

        def sync(self, rate=1.0):
            before = snapshot()
            super().sync(rate)
            events.append(("sync", self.name, rate, before, snapshot()))

    return RecordingWrapper


def flushes_denormals() -> bool:
    """Whether torch flushes subnormal floats to zero now (torch has no getter)."""
    return (torch.tensor(1e-30) * 1e-10).item() == 0.0


def assert_only_recorded_calls_move_the_networks(events: list) -> None:
    """Each recorded call starts from the weights the previous one left: nothing else moved them."""
    for (kind, name, *_, after), (next_kind, next_name, _, before, _) in zip(events, events[1:]):
        for n in after:
            for k, what in enumerate(("online", "target")):
                if after[n][k] is not None and not torch.equal(after[n][k], before[n][k]):
                    raise AssertionError(
                        f"{n}'s {what} network moved between {kind} {name} and {next_kind} {next_name}"
                    )


def tiny_args(module, algo: str, run_dir, **overrides):
    """A 200-step run of `algo` on a classic env (Pendulum-v1 for the continuous-action scripts) that
    still learns; `overrides` replace or add Args fields."""
    kw = {
        "env_id": "Pendulum-v1" if algo in ("ddpg", "naf") else "CartPole-v1",
        "total_timesteps": 200,
        "run_dir": str(run_dir),
        "progress": False,
        "eval_episodes": 1,
    }
    kw.update(
        {
            k: v
            for k, v in {"learning_starts": 100, "batch_size": 32, "num_envs": 2}.items()
            if k in module.Args.__dataclass_fields__
        }
    )
    return module.Args(**{**kw, **overrides})


def pid_of_run(spec) -> int | None:
    """The process running a benchmark run's spec.json (`run.py --child SPEC`), found in /proc; None if none."""
    from pathlib import Path

    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(spec) in (proc / "cmdline").read_bytes().decode(
                errors="ignore"
            ):
                return int(proc.name)
        except OSError:
            continue
    return None
