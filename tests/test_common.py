"""common/ against brute-force references (STYLE.md section 8)."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from common.autoreset import true_next_obs
from common.network import NetworkWrapper, soft_update
from common.replay import ReplayMemory
from common.returns import n_step_returns


# ---- n-step returns -----------------------------------------------------------------------------
def brute_force_returns(rewards, next_values, terminated, truncated, gamma, n):
    """Row by row, step by step: the definition in common/returns.py, written as plainly as possible."""
    T, B = rewards.shape
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            g, k = 0.0, 0
            while True:
                s = t + k
                g += gamma**k * rewards[s, b]
                if terminated[s, b]:
                    break
                if truncated[s, b] or s == T - 1 or (n is not None and k + 1 == n):
                    g += gamma ** (k + 1) * next_values[s, b]
                    break
                k += 1
            out[t, b] = g
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 7, 20, None])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_n_step_returns_matches_brute_force(n, seed):
    rng = np.random.default_rng(seed)
    T, B, gamma = 7, 5, 0.9
    rewards = rng.normal(size=(T, B))
    next_values = rng.normal(size=(T, B))
    terminated = rng.random((T, B)) < 0.2
    truncated = rng.random((T, B)) < 0.2  # some rows have both flags: termination must win
    expected = brute_force_returns(rewards, next_values, terminated, truncated, gamma, n)
    got = n_step_returns(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(next_values, dtype=torch.float64),
        torch.tensor(terminated),
        torch.tensor(truncated),
        gamma,
        n,
    )
    assert got.shape == (T, B)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_n_step_returns_golden():
    g = 0.5
    # one env, T=4: r = 1, 2, 3, 4; V(s_{t+1}) = 10, 20, 30, 40
    r = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    v = torch.tensor([[10.0], [20.0], [30.0], [40.0]])
    none = torch.zeros(4, 1, dtype=torch.bool)
    # n=None, no episode end: G_3 = 4 + .5*40 = 24; G_2 = 3 + .5*24 = 15; G_1 = 2 + 7.5; G_0 = 1 + 4.75
    assert n_step_returns(r, v, none, none, g).squeeze(1).tolist() == [5.75, 9.5, 15.0, 24.0]
    # n=1: r_t + g V(s_{t+1})
    assert n_step_returns(r, v, none, none, g, n=1).squeeze(1).tolist() == [6.0, 12.0, 18.0, 24.0]
    # n=2: G_0 = 1 + .5*2 + .25*20 = 7; G_1 = 2 + .5*3 + .25*30 = 11; G_2 = 3 + .5*4 + .25*40 = 15
    assert n_step_returns(r, v, none, none, g, n=2).squeeze(1).tolist() == [7.0, 11.0, 15.0, 24.0]
    # termination at t=1: G_0 = 1 + .5*2 (no tail), G_1 = 2
    term = torch.tensor([[False], [True], [False], [False]])
    assert n_step_returns(r, v, term, none, g).squeeze(1).tolist() == [2.0, 2.0, 15.0, 24.0]
    # truncation at t=1: bootstrap from V(final obs) = 20: G_1 = 2 + 10 = 12, G_0 = 1 + 6 = 7
    assert n_step_returns(r, v, none, term, g).squeeze(1).tolist() == [7.0, 12.0, 15.0, 24.0]
    # both set: termination wins
    assert n_step_returns(r, v, term, term, g).squeeze(1).tolist() == [2.0, 2.0, 15.0, 24.0]


def test_n_step_returns_no_gradient_and_bad_input():
    v = torch.ones(3, 2, requires_grad=True)
    out = n_step_returns(torch.ones(3, 2), v * 2, torch.zeros(3, 2), torch.zeros(3, 2), 0.9, n=2)
    assert not out.requires_grad
    with pytest.raises(ValueError):
        n_step_returns(torch.ones(3), torch.ones(3), torch.zeros(3), torch.zeros(3), 0.9)
    with pytest.raises(ValueError):
        n_step_returns(
            torch.ones(3, 2), torch.ones(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), 0.9, n=0
        )


# ---- target sync --------------------------------------------------------------------------------
class NetWithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)  # float running stats and an integer num_batches_tracked

    def forward(self, x):
        return self.bn(self.fc(x))


@pytest.mark.parametrize("rate", [1.0, 0.0, 0.3, 0.005])
def test_soft_update_formula(rate):
    torch.manual_seed(0)
    online, target = NetWithBuffers(), NetWithBuffers()
    online.bn.running_mean.normal_()
    online.bn.num_batches_tracked.fill_(7)
    before = copy.deepcopy(target)
    soft_update(target, online, rate)
    for (name, t), o, b in zip(
        target.state_dict().items(), online.state_dict().values(), before.state_dict().values()
    ):
        if t.is_floating_point():
            torch.testing.assert_close(t, rate * o + (1 - rate) * b, rtol=1e-6, atol=1e-7, msg=name)
        else:
            assert torch.equal(t, o), name
    if rate == 1.0:
        for t, o in zip(target.state_dict().values(), online.state_dict().values()):
            assert torch.equal(t, o)


def test_soft_update_rejects_bad_rate():
    with pytest.raises(ValueError):
        soft_update(nn.Linear(2, 2), nn.Linear(2, 2), 1.5)


# ---- network wrapper ----------------------------------------------------------------------------
def test_wrapper_target_is_a_frozen_copy_outside_the_optimizer():
    torch.manual_seed(0)
    w = NetworkWrapper(nn.Linear(3, 2), lr=0.1, target=True)
    for p, q in zip(w.online.parameters(), w.target.parameters()):
        assert torch.equal(p, q) and not q.requires_grad
    opt_params = {id(p) for g in w.optimizer.param_groups for p in g["params"]}
    assert not opt_params & {id(p) for p in w.target.parameters()}
    x = torch.randn(8, 3)
    w.train_step(w.online(x).pow(2).mean())
    assert not torch.equal(w.online.weight, w.target.weight)
    assert all(p.grad is None for p in w.target.parameters())
    w.sync()
    assert torch.equal(w.online.weight, w.target.weight)


def test_train_step_returns_unclipped_norm_and_clips():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    ref = copy.deepcopy(net)
    w = NetworkWrapper(net, lr=0.1, optimizer="rmsprop", clip_grad_norm=0.01)
    x = torch.randn(8, 3) * 10
    loss, norm = w.train_step(w.online(x).pow(2).mean())
    ref_loss = ref(x).pow(2).mean()
    ref_loss.backward()
    expected = torch.sqrt(sum(p.grad.pow(2).sum() for p in ref.parameters()))
    torch.testing.assert_close(norm, expected)
    torch.testing.assert_close(loss, ref_loss.detach())
    assert norm > 0.01
    clipped = torch.sqrt(sum(p.grad.pow(2).sum() for p in w.online.parameters()))
    torch.testing.assert_close(clipped, torch.tensor(0.01), rtol=1e-4, atol=1e-6)


def test_train_step_averages_a_per_sample_loss_and_l2_is_weight_decay():
    torch.manual_seed(0)
    w = NetworkWrapper(nn.Linear(3, 1), lr=0.1, l2=0.1)
    x = torch.randn(6, 3)
    per_sample = (w.online(x).squeeze(1) - 5.0).pow(2)  # [6]
    loss, _ = w.train_step(per_sample)
    torch.testing.assert_close(loss, per_sample.mean().detach())
    assert w.optimizer.param_groups[0]["weight_decay"] == 0.1


def test_flat_parameters_are_the_modules_weights():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    before = copy.deepcopy(net.state_dict())
    w = NetworkWrapper(net, lr=0.1)
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k])  # flattening does not change values
    assert w.flat_param.numel() == sum(p.numel() for p in net.parameters())
    x = torch.randn(4, 3)
    ref = copy.deepcopy(net)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.1)
    for step in range(3):
        if step == 1:
            net.zero_grad()  # sets .grad to None: the wrapper must re-link, not train on stale zeros
        w.train_step(net(x).pow(2).mean())
        ref_opt.zero_grad()
        ref(x).pow(2).mean().backward()
        ref_opt.step()
    for a, b in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("l2, clip, decay", [(0.0, None, False), (1e-2, 0.5, True)])
def test_adam_steps_and_soft_syncs_match_torch_bit_for_bit(l2, clip, decay):
    """The wrapper syncs its flat target with one lerp: its weights must equal, bit for bit, those of a
    wrapper that syncs with soft_update (buffers included), also across a state_dict round trip in
    the middle (Adam's moments and step count, the schedule)."""
    torch.manual_seed(0)
    net = NetWithBuffers()
    lr_lambda = (lambda u: 1.0 - u / 20) if decay else None

    def wrapper(module):
        return NetworkWrapper(
            module, lr=1e-2, l2=l2, clip_grad_norm=clip, lr_lambda=lr_lambda, target=True
        )

    w, ref = wrapper(copy.deepcopy(net)), wrapper(copy.deepcopy(net))
    assert w.target_flat is not None
    for step in range(8):
        x = torch.randn(16, 3)
        w.train_step(w.online(x).pow(2).mean())
        ref.train_step(ref.online(x).pow(2).mean())
        rate = 1.0 if step == 3 else 0.3
        w.sync(rate)
        soft_update(ref.target, ref.online, rate)
        if step == 4:  # a resumed wrapper goes on identically
            state = copy.deepcopy(w.state_dict())
            w = wrapper(NetWithBuffers())
            w.load_state_dict(state)
    assert (
        w.optimizer.state[w.flat_param]["step"].item() == 8
    )  # Adam's step count survived the round trip
    for mine, theirs in ((w.online, ref.online), (w.target, ref.target)):
        for (name, a), b in zip(mine.state_dict().items(), theirs.state_dict().values()):
            assert torch.equal(a, b), name


@pytest.mark.parametrize("centered, clip, decay", [(False, None, False), (True, 0.5, True)])
def test_rmsprop_steps_resume_bit_for_bit(centered, clip, decay):
    """RMSprop (plain and centered) through a state_dict round trip in the middle gives, bit for bit,
    the weights of a wrapper never interrupted."""
    torch.manual_seed(0)
    net = NetWithBuffers()
    lr_lambda = (lambda u: 1.0 - u / 20) if decay else None

    def wrapper(module):
        return NetworkWrapper(
            module,
            lr=1e-2,
            optimizer="rmsprop",
            alpha=0.95,
            eps=0.01,
            centered=centered,
            clip_grad_norm=clip,
            lr_lambda=lr_lambda,
        )

    w, ref = wrapper(copy.deepcopy(net)), wrapper(copy.deepcopy(net))
    for step in range(8):
        x = torch.randn(16, 3)
        w.train_step(w.online(x).pow(2).mean())
        ref.train_step(ref.online(x).pow(2).mean())
        if step == 4:  # a resumed wrapper goes on identically
            state = copy.deepcopy(w.state_dict())
            w = wrapper(NetWithBuffers())
            w.load_state_dict(state)
    assert w.optimizer.state[w.flat_param]["step"].item() == 8
    for (name, a), b in zip(w.online.state_dict().items(), ref.online.state_dict().values()):
        assert torch.equal(a, b), name
    assert not torch.equal(w.online.fc.weight, net.fc.weight)  # it did learn


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_train_step_steps_through_the_optimizers_public_step(optimizer):
    """No step of the optimizer's own is bypassed: its step hooks run once per train_step."""
    w = NetworkWrapper(nn.Linear(2, 1), lr=0.1, optimizer=optimizer)
    calls = []
    w.optimizer.register_step_post_hook(lambda opt, args, kwargs: calls.append(w.updates))
    for _ in range(3):
        w.train_step(w.online(torch.ones(1, 2)).sum())
    assert calls == [0, 1, 2]


def test_lr_decay_and_bad_optimizer():
    w = NetworkWrapper(nn.Linear(2, 1), lr=1.0, lr_lambda=lambda u: 1.0 - u / 10)
    for _ in range(4):
        w.train_step(w.online(torch.ones(1, 2)).sum())
    assert w.lr == pytest.approx(0.6)
    with pytest.raises(ValueError):
        NetworkWrapper(nn.Linear(2, 1), lr=1.0, optimizer="sgd")


# ---- replay memory ------------------------------------------------------------------------------
def _fill(memory, start, n):
    k = np.arange(start, start + n)
    memory.add(
        np.stack([k, -k], 1).astype(np.float32),
        k % 3,
        k.astype(np.float32),
        np.stack([k + 1, -k - 1], 1).astype(np.float32),
        k % 5 == 0,
    )


def test_replay_wraparound_shapes_dtypes():
    memory = ReplayMemory(10, (2,), seed=0)
    _fill(memory, 0, 4)
    assert len(memory) == 4 and memory.pos == 4
    _fill(memory, 4, 4)
    _fill(memory, 8, 4)  # wraps: rows 0,1 now hold 10, 11
    assert len(memory) == 10 and memory.pos == 2
    assert memory.rewards.tolist() == [10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    assert memory.next_obs[:, 0].tolist() == [11, 12, 3, 4, 5, 6, 7, 8, 9, 10]
    _fill(memory, 12, 25)  # more than the capacity in one add: the newest 10 survive
    assert sorted(memory.rewards.tolist()) == list(range(27, 37))
    batch = memory.sample(32)
    assert batch.obs.shape == (32, 2) and batch.obs.dtype == torch.float32
    assert batch.actions.shape == (32,) and batch.actions.dtype == torch.int64
    assert batch.rewards.shape == (32,) and batch.terminated.dtype == torch.float32
    # every sampled row is a consistent transition
    torch.testing.assert_close(batch.obs[:, 0], batch.rewards)
    torch.testing.assert_close(batch.next_obs[:, 0], batch.rewards + 1)
    torch.testing.assert_close(batch.actions, batch.rewards.long() % 3)
    torch.testing.assert_close(batch.terminated, (batch.rewards.long() % 5 == 0).float())


def test_replay_continuous_actions_and_valid_mask():
    memory = ReplayMemory(5, (3,), action_shape=(2,), discrete=False, seed=0)
    memory.add(
        np.zeros((3, 3)),
        np.ones((3, 2)) * [[1], [2], [3]],
        np.array([1.0, 2, 3]),
        np.zeros((3, 3)),
        np.zeros(3, bool),
        valid=np.array([True, False, True]),
    )
    assert len(memory) == 2
    assert memory.actions[:2].tolist() == [[1, 1], [3, 3]] and memory.actions.dtype == torch.float32


def test_replay_same_seed_same_batches():
    batches = []
    for _ in range(2):
        memory = ReplayMemory(100, (2,), seed=123)
        _fill(memory, 0, 50)
        batches.append([memory.sample(16).rewards for _ in range(3)])
    for a, b in zip(*batches):
        assert torch.equal(a, b)
    other = ReplayMemory(100, (2,), seed=124)
    _fill(other, 0, 50)
    assert not torch.equal(other.sample(16).rewards, batches[0][0])


def test_replay_memory_is_preallocated_and_fixed():
    memory = ReplayMemory(1000, (4,), seed=0)
    ptr = memory.obs.data_ptr()
    for k in range(0, 3000, 7):
        _fill_4 = np.full((7, 4), k, np.float32)
        memory.add(_fill_4, np.zeros(7, int), np.zeros(7), _fill_4, np.zeros(7, bool))
    assert memory.obs.data_ptr() == ptr and memory.obs.shape == (1000, 4)


# ---- autoreset ------------------------------------------------------------------------------------
def test_true_next_obs_takes_the_final_observation_where_an_episode_ended():
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=3)] * 2,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    obs, _ = envs.reset(seed=0)
    for _ in range(2):
        obs, _, _, _, infos = envs.step(np.array([0, 1]))
        assert true_next_obs(obs, infos) is obs  # no episode ended: nothing to replace
    next_obs, _, _, truncated, infos = envs.step(np.array([0, 1]))  # both truncate at step 3
    assert truncated.all()
    real = true_next_obs(next_obs, infos)
    np.testing.assert_array_equal(real, np.stack(infos["final_obs"]))
    assert not np.array_equal(real, next_obs)  # next_obs already holds the reset observations
    assert real is not next_obs
