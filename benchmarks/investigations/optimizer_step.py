"""What do NetworkWrapper's flat parameter and its functional Adam step buy?

    python benchmarks/investigations/optimizer_step.py [--steps 3000] [--repeats 3]

Times `NetworkWrapper.train_step` (zero the gradient, backward, norm, optional clipping, Adam) on
two networks the scripts train, one torch thread, alternating the variants in each repeat:

- flat, functional: the default; the parameters live in one flat tensor, and after Adam's first
  step the wrapper calls `torch.optim.adam.adam` (the public functional form `Adam.step()` calls,
  the same fused kernel) directly.
- flat, step(): the same flat tensor, updated through `torch.optim.Adam(fused=True).step()`,
  with its per-call bookkeeping (profiler record, hooks, param-group loops).
- flat, private kernel: the same flat tensor, Adam's fused kernel called directly
  (`torch._fused_adam_`, what the wrapper did before it kept to public APIs). Measured here only
  for comparison.
- per-tensor (`flat=False`): the module's own parameters, Adam(fused=True) over the list,
  torch.nn.utils.clip_grad_norm_'s norm; what per-layer groups or another optimizer use.

Prints CPU microseconds per train_step (process time, so that other work on a busy machine
counts less than in wall time; median over repeats) and each variant's ratio to the default.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common.network import NetworkWrapper  # noqa: E402


class PublicStep(NetworkWrapper):
    """Every step through the optimizer's own step()."""

    def _step(self):
        self.optimizer.step()


class PrivateKernel(NetworkWrapper):
    """The previous step: after Adam's first step, its fused kernel called directly on the flat parameter."""

    def _step(self):
        state = self.optimizer.state.get(self.flat_param)
        if not state:
            return torch.optim.Adam.step(self.optimizer)
        group = self.optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        state["step"] += 1
        torch._fused_adam_(
            [self.flat_param], [self.flat_grad], [state["exp_avg"]], [state["exp_avg_sq"]], [], [state["step"]],
            lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
            amsgrad=False, maximize=False,
        )


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


CASES = {  # name: (layer sizes, batch, clip_grad_norm)
    "DQN CartPole-v1 Q-network [4, 120, 84, 2], batch 128": ([4, 120, 84, 2], 128, None),
    "n-step Q CartPole-v1 [4, 64, 64, 2], batch 40, clipping at 10": ([4, 64, 64, 2], 40, 10.0),
    "DDPG HalfCheetah-v5 critic [23, 256, 256, 1], batch 256": ([23, 256, 256, 1], 256, None),
}
VARIANTS = {
    "flat, functional (default)": lambda net, clip: NetworkWrapper(net, lr=1e-4, clip_grad_norm=clip),
    "flat, step()": lambda net, clip: PublicStep(net, lr=1e-4, clip_grad_norm=clip),
    "flat, private kernel (before)": lambda net, clip: PrivateKernel(net, lr=1e-4, clip_grad_norm=clip),
    "per-tensor (flat=False)": lambda net, clip: NetworkWrapper(net, lr=1e-4, clip_grad_norm=clip, flat=False),
}


def time_steps(wrapper: NetworkWrapper, x: torch.Tensor, y: torch.Tensor, steps: int) -> float:
    for _ in range(50):  # warm-up: the optimizer's state exists, caches are hot
        wrapper.train_step(nn.functional.mse_loss(wrapper.online(x), y))
    start = time.process_time()
    for _ in range(steps):
        wrapper.train_step(nn.functional.mse_loss(wrapper.online(x), y))
    return (time.process_time() - start) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    a = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {a.steps} train_steps per timing, median of {a.repeats}, CPU time")
    for case, (sizes, batch, clip) in CASES.items():
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(batch, sizes[0], generator=g), torch.randn(batch, sizes[-1], generator=g)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(a.repeats):
            for name, build in VARIANTS.items():
                torch.manual_seed(0)
                times[name].append(time_steps(build(mlp(sizes), clip), x, y, a.steps))
        base = statistics.median(times["flat, functional (default)"])
        print(f"\n{case}")
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"  {name:32s} {m:8.1f} us/step   {m / base:5.2f}x the default   (each repeat: {', '.join(f'{t:.0f}' for t in ts)})")


if __name__ == "__main__":
    main()
