"""Time and size of a checkpoint with a full replay memory, as the scripts write it.

    python benchmarks/investigations/checkpoint_cost.py

Builds each case's networks (with Adam state after one step) and a replay memory filled to
capacity with random rows of the env's shapes, then writes the checkpoint the script would write
(harness.checkpoint.save: temporary file, fsync, rename) and reads it back (weights_only). Cases:
DQN's defaults on CartPole-v1 (10k transitions) and DDPG on HalfCheetah-v5 with 1M transitions.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[2] / "algos")]
import ddpg  # noqa: E402
import dqn  # noqa: E402
from common.network import NetworkWrapper  # noqa: E402
from common.replay import ReplayMemory  # noqa: E402
from harness import checkpoint  # noqa: E402


def filled(capacity: int, obs_dim: int, action_shape: tuple, discrete: bool) -> ReplayMemory:
    memory = ReplayMemory(capacity, (obs_dim,), action_shape, discrete=discrete, seed=0)
    for store in (memory.obs, memory.next_obs, memory.rewards):
        store.normal_()
    if not discrete:
        memory.actions.uniform_(-1, 1)
    memory.pos, memory.size = 0, capacity
    return memory


def stepped(net: NetworkWrapper, loss) -> NetworkWrapper:
    net.train_step(loss(net.online))
    return net


def measure(name: str, state: dict, repeats: int = 3) -> None:
    with tempfile.TemporaryDirectory(dir=".") as folder:
        path = Path(folder) / "checkpoint.pt"
        content = {"format": 1, "algo": name, "rng": checkpoint.rng_state(), "state": checkpoint.pack(state)}
        writes, reads = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            checkpoint.save(path, content)
            writes.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            checkpoint.load(path)
            reads.append(time.perf_counter() - t0)
        size = path.stat().st_size
    print(f"{name}: {size / 2**20:8.1f} MiB  write {min(writes):6.3f} s (median {sorted(writes)[repeats // 2]:.3f})  "
          f"read {min(reads):6.3f} s", flush=True)


def main() -> None:
    torch.set_num_threads(1)
    a = dqn.Args()
    q = stepped(NetworkWrapper(dqn.QNetwork((4,), 2, a.hidden_sizes), lr=a.learning_rate, target=True),
                lambda m: m(torch.randn(8, 4)).pow(2).mean())
    measure("dqn CartPole-v1, defaults (10,000 transitions)", {"q_net": q.state_dict(), "memory": filled(a.buffer_size, 4, (), True).state_dict()})
    d = ddpg.Args()
    import gymnasium as gym

    space = gym.spaces.Box(-1.0, 1.0, (6,))
    actor = stepped(NetworkWrapper(ddpg.Actor(17, space, d.hidden_sizes), lr=d.actor_learning_rate, target=True),
                    lambda m: m(torch.randn(8, 17)).pow(2).mean())
    critic = stepped(NetworkWrapper(ddpg.Critic(17, 6, d.hidden_sizes), lr=d.critic_learning_rate, target=True),
                     lambda m: m(torch.randn(8, 17), torch.randn(8, 6)).pow(2).mean())
    memory = filled(1_000_000, 17, (6,), False)
    measure("ddpg HalfCheetah-v5 (1,000,000 transitions)", {"actor": actor.state_dict(), "critic": critic.state_dict(), "memory": memory.state_dict()})
    measure("ddpg HalfCheetah-v5 (--no-checkpoint-memory)", {"actor": actor.state_dict(), "critic": critic.state_dict(), "memory": None})


if __name__ == "__main__":
    main()
