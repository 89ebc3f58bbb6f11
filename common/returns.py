"""n-step references (AgentNet's n-step return, Mnih et al. 2016's A3C/n-step Q target).

Time-major [T, B]: row t is the transition out of s_t, and `next_values[t] = V(s_{t+1})`
evaluated at the true next observation (the final observation where the episode ended).

    G_t = r_t + g r_{t+1} + ... + g^(m-1) r_{t+m-1} + g^m V(s_{t+m})

with m = n, cut short where the episode or the rollout ends first:
- termination at step t+k: the sum stops there and nothing is bootstrapped (tail 0);
- truncation at step t+k: bootstrap from next_values[t+k] (the final observation) and stop;
- both flags set: termination wins;
- the rollout's last row T-1: bootstrap from next_values[T-1].
n = 1 is the one-step TD target; n = None (or n >= T) runs to the end of the rollout.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def n_step_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    n: int | None = None,
) -> torch.Tensor:
    """n-step returns [T, B] from rewards, next_values, terminated, truncated, all [T, B].

    No gradient flows into the result. One vectorised pass per lookahead step k < min(n, T):
    at step k every row t accumulates g^k r_{t+k} while it is still "alive" (its episode and
    its n-step window have not ended before t+k).
    """
    if rewards.dim() != 2:
        raise ValueError(
            f"expected time-major [T, B] tensors, got rewards of shape {tuple(rewards.shape)}"
        )
    for name, x in (
        ("next_values", next_values),
        ("terminated", terminated),
        ("truncated", truncated),
    ):
        if x.shape != rewards.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, rewards {tuple(rewards.shape)}")
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1 or None, got {n}")
    T = rewards.shape[0]
    m = T if n is None else min(n, T)
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    rewards = rewards.to(dtype)
    next_values = next_values.to(dtype)
    term = terminated.to(torch.bool)
    trunc = truncated.to(torch.bool) & ~term  # terminated wins when both are set
    if m == T:
        return _returns_to_rollout_end(rewards, next_values, term, trunc, gamma)
    ended = term | trunc
    returns = torch.zeros_like(rewards)
    alive = torch.ones_like(rewards)  # [T, B] 1.0 while row t is still accumulating
    discount = 1.0
    for k in range(m):
        rows = T - k  # rows t = 0..T-k-1 look at step t+k
        a = alive[:rows]
        returns[:rows] += discount * a * rewards[k:]
        # bootstrap at step t+k if it truncates, or it is the window's last step (k = m-1),
        # or it is the rollout's last row (t+k = T-1); never if it terminates
        cut = trunc[k:].clone()
        if k == m - 1:
            cut |= ~term[k:]
        else:
            cut[-1] |= ~term[-1]
        returns[:rows] += (discount * gamma) * a * cut.to(dtype) * next_values[k:]
        alive[:rows] = a * (~ended[k:]).to(dtype)
        discount *= gamma
    return returns


def _returns_to_rollout_end(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    term: torch.Tensor,
    trunc: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """n >= T: the backward recursion G_t = r_t + g (1 - term_t)
    [V_t if trunc_t or t = T-1 else G_{t+1}].

    Same result as the windowed loop, with ~3 tensor ops per row instead of ~10 per lookahead
    step (the A2C/A3C case: dispatch, not arithmetic, is the cost for small rollouts).
    """
    T = rewards.shape[0]
    discounts = gamma * (~term).to(rewards.dtype)  # [T, B] 0 where the episode terminated
    returns = torch.empty_like(rewards)
    tail = next_values[T - 1]  # [B] the rollout's last row always bootstraps
    for t in range(T - 1, -1, -1):
        if t < T - 1:
            tail = torch.where(trunc[t], next_values[t], returns[t + 1])
        torch.addcmul(rewards[t], discounts[t], tail, out=returns[t])
    return returns
