"""Probes for tests that run the continuous-action scripts' train() itself: a tiny env with Box
actions, a NetworkWrapper that records every step and sync, and the flush-denormal state.

CountBoxEnv-v0: obs = [steps since reset, episode id, the action the env received], reward
-action^2. Episodes terminate at a random step or are truncated by the time limit, so a few hundred steps hold both kinds of end;
the step count tells a transition that stays in its episode (t -> t + 1) from one that crosses
into the reset observation (t -> 0).
"""

import gymnasium as gym
import numpy as np
import torch

ENV_ID = "CountBoxEnv-v0"
LOW, HIGH = -0.5, 0.5  # the action bounds
TIME_LIMIT = 6


class CountBoxEnv(gym.Env):
    observation_space = gym.spaces.Box(-1e3, 1e3, (3,), np.float32)
    action_space = gym.spaces.Box(LOW, HIGH, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.np_random.integers(1, 1000) / 1000  # small inputs for the networks
        self.end = self.np_random.integers(2, 12)  # sometimes beyond the time limit (truncation)
        return np.array([self.t, self.episode, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        a = float(np.asarray(action).reshape(-1)[0])
        obs = np.array([self.t, self.episode, a], np.float32)
        return obs, -a * a, bool(self.t == self.end), False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CountBoxEnv, max_episode_steps=TIME_LIMIT)


def flat(module) -> torch.Tensor:
    """A copy of every floating parameter and buffer of `module`, as one vector."""
    return torch.cat([t.detach().reshape(-1).clone() for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()])


def recording_wrapper(base: type, events: list, wrappers: dict) -> type:
    """A NetworkWrapper subclass that appends to `events`, for every train_step and sync,
    (kind, name, rate, before, after): `name` is the network's class name, `before` and `after`
    map every wrapper's name to (online, target) vectors taken around the call. `wrappers`
    collects the instances by name."""

    def snapshot():
        return {n: (flat(w.online), None if w.target is None else flat(w.target)) for n, w in wrappers.items()}

    class RecordingWrapper(base):
        def __init__(self, net, **kw):
            super().__init__(net, **kw)
            self.name = type(net).__name__
            wrappers[self.name] = self

        def train_step(self, loss, weights=None):
            before = snapshot()
            out = super().train_step(loss, weights)
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
                    raise AssertionError(f"{n}'s {what} network moved between {kind} {name} and {next_kind} {next_name}")
