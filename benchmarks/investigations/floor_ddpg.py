"""The arithmetic floor of one DDPG env step with CleanRL's settings: how fast *any* implementation can be.

    python benchmarks/investigations/floor_ddpg.py

One env step of DDPG on Pendulum-v1 with CleanRL's settings (batch 256, [256, 256] MLPs, one
critic update per env step, an actor update every 2) has to do these matrix products, whatever
the framework: the critic target (target actor and target critic forwards on s'), the critic's
forward and backward (weight and input gradients), and every other step the actor's forward, a
critic forward, the critic's input gradient and the actor's backward. This script times exactly
those products (torch.mm on the same shapes, 1 thread, hot caches, no autograd, no Python
bookkeeping); then, separately, the other unavoidable passes over memory as bare kernels: the
ReLUs and their backward, one Adam step of each network that updates, and the soft updates of the
two target networks (every env step: see the note below). Every faithful fp32 implementation does this work per env step, so
1 / (products + the rest) bounds its steps/s from above; one that fused the small kernels (a ReLU
into its product, Adam and the soft update into one pass) could go a little under the ~0.25 ms
they take here, never under the products. It also times our whole update (autograd, fused Adam,
soft target updates) on the same inputs, to show how close to the floor it runs. Compare with
`python benchmarks/speed_ddpg.py`.

Note: this script models the update as ddpg.py did when it was measured (2026-11-23): both targets
moved after every critic update. ddpg.py now moves them only after actor updates (every
`policy_every` = 2 critic updates), as CleanRL's and SB3's DDPG do; its soft updates cost about half
of what `our_update` and the floor count here (the soft updates were ~0.17 ms of a ~3.5 ms update).
The code is kept as it was, so that it reproduces the published measurement (benchmarks/results/ddpg_naf.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "algos"))
sys.path.insert(0, str(ROOT))


def products(batch: int, obs_dim: int, act_dim: int, hidden: int):
    """The matrix products of one env step, as a list of (a, b) pairs to multiply."""
    B, H, O, A = batch, hidden, obs_dim, act_dim
    r = lambda *s: torch.randn(*s)  # noqa: E731
    # an MLP i -> H -> H -> o: its 3 forward products, the 3 weight gradients (output layer first)
    # and the 3 input gradients (output layer first; the last is the gradient at the MLP's input)
    fwd = lambda i, o: [(r(B, i), r(i, H)), (r(B, H), r(H, H)), (r(B, H), r(H, o))]  # noqa: E731
    w_grads = lambda i, o: [(r(o, B), r(B, H)), (r(H, B), r(B, H)), (r(H, B), r(B, i))]  # noqa: E731
    x_grads = lambda i, o: [(r(B, o), r(o, H)), (r(B, H), r(H, H)), (r(B, H), r(H, i))]  # noqa: E731
    critic, actor = (O + A, 1), (O, A)  # (input width, output width)
    critic_step = (
        fwd(*actor) + fwd(*critic)  # target: mu'(s') then Q'(s', mu'(s'))
        + fwd(*critic) + w_grads(*critic) + x_grads(*critic)[:2]  # Q(s, a) and its backward (no dX at the input)
    )
    actor_step = (
        fwd(*actor) + fwd(*critic)  # Q(s, mu(s))
        + x_grads(*critic)  # back through the critic to the action (critic weights frozen)
        + w_grads(*actor) + x_grads(*actor)[:2]  # the actor's backward
    )
    return critic_step, actor_step


def seconds_per_call(one_env_step, reps: int) -> float:
    """Mean seconds of `one_env_step(k)` over `reps` calls, after 50 warm-up calls (k counts env steps)."""
    for k in range(50):
        one_env_step(k)
    start = time.perf_counter()
    for k in range(reps):
        one_env_step(k)
    return (time.perf_counter() - start) / reps


def time_products(critic_step, actor_step, policy_every: int, reps: int) -> float:
    def one_env_step(k: int) -> None:
        for a, b in critic_step:
            torch.mm(a, b)
        if k % policy_every == 0:
            for a, b in actor_step:
                torch.mm(a, b)

    return seconds_per_call(one_env_step, reps)


def time_elementwise(batch: int, hidden: int, n_critic: int, n_actor: int, policy_every: int, reps: int) -> float:
    """Bare kernels of one env step besides the products: ReLU forward and backward on every hidden
    layer that a forward or backward pass goes through, Adam on the critic (every step) and the actor
    (every `policy_every`), soft updates of both target networks (every step, as ddpg.py did when measured)."""
    h, g = torch.randn(batch, hidden), torch.randn(batch, hidden)
    nets = {"critic": n_critic, "actor": n_actor}
    p = {k: torch.randn(n) for k, n in nets.items()}
    grads = {k: torch.randn(n) * 1e-3 for k, n in nets.items()}
    m = {k: torch.zeros(n) for k, n in nets.items()}
    v = {k: torch.zeros(n) for k, n in nets.items()}
    step = {k: torch.zeros(()) for k in nets}
    targets = {k: torch.randn(n) for k, n in nets.items()}

    def adam(k: str) -> None:
        step[k] += 1  # as torch.optim does before the fused kernel (at step 0 the bias correction divides by 0)
        torch._fused_adam_([p[k]], [grads[k]], [m[k]], [v[k]], [], [step[k]], amsgrad=False, lr=3e-4, beta1=0.9,
                           beta2=0.999, weight_decay=0.0, eps=1e-8, maximize=False)

    def one_env_step(k: int) -> None:
        actor_step = k % policy_every == 0
        # critic step: 2 hidden layers in each of target actor, target critic, critic forward; critic backward
        # actor step: actor and critic forwards; backward through the critic and the actor
        for _ in range(6 + (4 if actor_step else 0)):
            torch.relu(h)
        for _ in range(2 + (4 if actor_step else 0)):
            torch.ops.aten.threshold_backward(g, h, 0.0)
        adam("critic")
        if actor_step:
            adam("actor")
        torch._foreach_lerp_(list(targets.values()), list(p.values()), 0.005)

    return seconds_per_call(one_env_step, reps)


def our_update(batch: int, hidden: int, act_dim: int = 1, mark=None):
    """One env step's worth of our DDPG update (ddpg.py's functions and NetworkWrapper) on fixed random data
    (3-dimensional observations, as Pendulum's). `mark(stage)`, if given, is called at the end of each stage."""
    import gymnasium as gym

    import ddpg
    from common.network import NetworkWrapper

    space = gym.spaces.Box(-2.0, 2.0, (act_dim,))
    actor = NetworkWrapper(ddpg.Actor(3, space, (hidden, hidden)), lr=3e-4, target=True)
    critic = NetworkWrapper(ddpg.Critic(3, act_dim, (hidden, hidden)), lr=3e-4, target=True)
    obs, next_obs, actions = torch.randn(batch, 3), torch.randn(batch, 3), torch.rand(batch, act_dim) * 4 - 2
    rewards, terminated = torch.randn(batch), torch.zeros(batch)

    mark = mark or (lambda stage: None)

    def update() -> None:  # as ddpg.py's loop was when measured (targets now move only after actor updates)
        targets = ddpg.ddpg_targets(critic.target, actor.target, rewards, next_obs, terminated, 0.99)
        mark("critic target (target actor and critic forwards)")
        critic.train_step(F.mse_loss(critic.online(obs, actions), targets))
        mark("critic forward, backward, Adam")
        if critic.updates % 2 == 0:
            critic.online.requires_grad_(False)
            actor.train_step(ddpg.actor_loss(actor.online, critic.online, obs))
            critic.online.requires_grad_(True)
        mark("actor forward, backward, Adam (every 2nd step)")
        critic.sync(0.005)
        actor.sync(0.005)
        mark("soft target updates")

    return update


def time_our_update(batch: int, hidden: int, reps: int) -> float:
    update = our_update(batch, hidden)
    torch.set_flush_denormal(True)  # as ddpg.py does
    try:
        return seconds_per_call(lambda k: update(), reps)
    finally:
        torch.set_flush_denormal(False)


def time_our_update_stages(batch: int, hidden: int, reps: int) -> dict[str, float]:
    """Seconds per env step of each stage of our update (the `mark`s in `our_update`)."""
    spent: dict[str, float] = {}
    last = [0.0]

    def mark(stage: str) -> None:
        now = time.perf_counter()
        spent[stage] = spent.get(stage, 0.0) + now - last[0]
        last[0] = now

    update = our_update(batch, hidden, mark=mark)
    torch.set_flush_denormal(True)  # as ddpg.py does
    try:
        for k in range(50 + reps):
            if k == 50:  # after the warm-up
                spent.clear()
            last[0] = time.perf_counter()
            update()
    finally:
        torch.set_flush_denormal(False)
    return {stage: s / reps for stage, s in spent.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--reps", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20_000, help="speed_ddpg.py's env steps")
    p.add_argument("--learning-starts", type=int, default=5_000, help="speed_ddpg.py's heatup steps (no updates)")
    p.add_argument("--sb3-sps", type=float, default=None, help="SB3's steps/s from speed_ddpg.py, to print the budget of 2x it against the floor")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    critic_step, actor_step = products(a.batch, 3, 1, a.hidden)
    flops = 2 * (sum(x.shape[0] * x.shape[1] * y.shape[1] for x, y in critic_step)
                 + sum(x.shape[0] * x.shape[1] * y.shape[1] for x, y in actor_step) / 2)
    n_critic = (3 + 1 + 1) * a.hidden + (a.hidden + 1) * a.hidden + a.hidden + 1
    n_actor = (3 + 1) * a.hidden + (a.hidden + 1) * a.hidden + a.hidden + 1
    products_s = min(time_products(critic_step, actor_step, 2, a.reps) for _ in range(3))
    rest_s = min(time_elementwise(a.batch, a.hidden, n_critic, n_actor, 2, a.reps) for _ in range(3))
    floor = products_s + rest_s
    ours = min(time_our_update(a.batch, a.hidden, a.reps) for _ in range(3))
    print(f"{a.threads} thread(s), batch {a.batch}, [{a.hidden}, {a.hidden}], per env step, hot caches:")
    print(f"  matrix products: {flops / 1e6:.0f} MFLOP in {products_s * 1e3:.3f} ms ({flops / products_s / 1e9:.0f} GFLOP/s)")
    print(f"  ReLUs, Adam, soft target updates as bare kernels: {rest_s * 1e3:.3f} ms")
    print(f"  floor: {floor * 1e3:.3f} ms, so at most {1 / floor:,.0f} steps/s for any fp32 implementation, before the env and replay")
    print(f"  our whole update (autograd, fused Adam, soft updates): {ours * 1e3:.3f} ms = {floor / ours:.0%} of it is the floor's work")
    for stage, s in time_our_update_stages(a.batch, a.hidden, a.reps).items():
        print(f"    {stage}: {s * 1e3:.3f} ms")
    # speed_ddpg.py's schedule: `--steps` env steps, the first `--learning-starts` without updates
    learning = a.steps - a.learning_starts
    print(f"  on speed_ddpg.py's schedule ({a.steps:,} steps, updates from step {a.learning_starts:,}): at most "
          f"{a.steps / (learning * floor):,.0f} steps/s for any implementation; ours hot would allow {a.steps / (learning * ours):,.0f}")
    if a.sb3_sps:
        need = 2 * a.sb3_sps
        per_step = a.steps / need / learning  # seconds per learning step, counting the heatup steps as free
        print(f"2x SB3 ({a.sb3_sps:g} steps/s) = {need:,.0f} steps/s on that schedule: at most {per_step * 1e3:.3f} ms per learning step "
              f"for everything (update, env, replay), against the floor's {floor * 1e3:.3f} ms and our update's {ours * 1e3:.3f} ms (hot)")


if __name__ == "__main__":
    main()
