"""Pixel pieces of common/: the frame memory against a brute-force one, the Atari wrappers, MinAtar."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import pixels  # noqa: E402
from common.atari import EpisodicLife, FireReset, FrameMemory  # noqa: E402
from common.autoreset import true_next_obs  # noqa: E402
from common.minatar import MINATAR_MAX_STEPS  # noqa: E402
from common.torso import obs_shape, torso  # noqa: E402


# --- frame memory ------------------------------------------------------------------------------
class NoiseEnv(gym.Env):
    """Random 5x6 uint8 frames; episodes of random length that terminate or truncate."""

    observation_space = gym.spaces.Box(0, 255, (5, 6), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.end = 0, int(self.np_random.integers(1, 9))
        return self.np_random.integers(0, 256, (5, 6), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        frame = self.np_random.integers(0, 256, (5, 6), dtype=np.uint8)
        ended = self.t >= self.end
        terminated = ended and bool(self.np_random.random() < 0.5)
        return frame, float(self.np_random.normal()), terminated, ended and not terminated, {}


def fill(memory: FrameMemory, num_envs: int, stack: int, steps: int, seed: int = 0):
    """Step `num_envs` stacked NoiseEnvs together, adding to `memory`; the brute-force record of
    every transition per env (whole stacks, as CleanRL's and SB3's memories store them)."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.FrameStackObservation(NoiseEnv(), stack)] * num_envs,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    brute = [[] for _ in range(num_envs)]
    for _ in range(steps):
        actions = rng.integers(3, size=num_envs)
        next_obs, rewards, terminated, truncated, infos = envs.step(actions)
        real_next = true_next_obs(next_obs, infos)
        memory.add(obs, actions, rewards, real_next, terminated, done=terminated | truncated)
        for i in range(num_envs):
            brute[i].append(
                (
                    obs[i].copy(),
                    actions[i],
                    np.float32(rewards[i]),
                    real_next[i].copy(),
                    float(terminated[i]),
                )
            )
        obs = next_obs
    return brute


@pytest.mark.parametrize(
    "num_envs,stack,capacity,steps",
    [(1, 4, 40, 25), (1, 4, 40, 300), (3, 4, 60, 200), (2, 3, 1000, 150), (3, 1, 30, 80)],
)
def test_frame_memory_rebuilds_every_stack_the_env_gave(num_envs, stack, capacity, steps):
    memory = FrameMemory(capacity, (5, 6), stack, num_envs, seed=1)
    brute = fill(memory, num_envs, stack, steps)
    env, entry = memory.sampleable()
    got = memory.transitions(env, entry)
    held = 0
    for i in range(num_envs):
        mine = np.flatnonzero(env == i)  # this env's transitions, oldest first: its newest ones
        held += len(mine)
        expected = brute[i][len(brute[i]) - len(mine) :]
        for k, (obs, action, reward, next_obs, terminated) in zip(mine, expected):
            assert np.array_equal(got.obs[k].numpy(), obs)
            assert np.array_equal(got.next_obs[k].numpy(), next_obs)
            assert (
                got.actions[k].item() == action
                and got.rewards[k].item() == reward
                and got.terminated[k].item() == terminated
            )
    assert len(memory) - num_envs * (stack - 1) <= held <= len(memory)
    if steps * num_envs <= capacity // 2:  # nothing overwritten yet: every transition is there
        assert held == len(memory) == num_envs * steps
    # each env keeps capacity / num_envs frames: at most one per transition plus one per episode
    assert len(memory) >= min(num_envs * steps, capacity) // 2
    if steps * num_envs > capacity:  # the ring wrapped around and still gives the right stacks
        assert memory.written.min() > memory.ring


def test_frame_memory_after_envs_restarted_outside_the_loop():
    memory = FrameMemory(400, (5, 6), 4, 2, seed=1)
    fill(memory, 2, 4, 30, seed=0)
    memory.new_episodes()  # as on a resume that could not restore the envs
    brute = fill(memory, 2, 4, 40, seed=7)  # fresh envs: every episode starts anew
    env, entry = memory.sampleable()
    got = memory.transitions(env, entry)
    for i in range(2):
        mine = np.flatnonzero(env == i)[-40:]  # the newest 40 of this env are the second fill's
        for k, (obs, _, _, next_obs, _) in zip(mine, brute[i]):
            assert np.array_equal(got.obs[k].numpy(), obs) and np.array_equal(
                got.next_obs[k].numpy(), next_obs
            )


def test_frame_memory_samples_only_stored_transitions_and_is_seeded():
    memory = FrameMemory(50, (5, 6), 4, 2, seed=3)
    brute = fill(memory, 2, 4, 120)
    known = {(o.tobytes(), n.tobytes()) for b in brute for (o, _, _, n, _) in b}
    batch = memory.sample(256)
    assert (
        batch.obs.dtype == torch.uint8
        and batch.obs.shape == (256, 4, 5, 6)
        and batch.actions.dtype == torch.int64
    )
    assert all(
        (o.numpy().tobytes(), n.numpy().tobytes()) in known
        for o, n in zip(batch.obs, batch.next_obs)
    )
    again = FrameMemory(50, (5, 6), 4, 2, seed=3)
    fill(again, 2, 4, 120)
    assert torch.equal(again.sample(256).obs, batch.obs)  # same seed, same additions: same batch


def test_frame_memory_state_dict_round_trip():
    memory = FrameMemory(40, (5, 6), 4, 2, seed=5)
    fill(memory, 2, 4, 70)
    copy = FrameMemory(40, (5, 6), 4, 2, seed=99)
    copy.load_state_dict(memory.state_dict())
    assert len(copy) == len(memory)
    a, b = memory.sample(64), copy.sample(64)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="shape"):
        FrameMemory(80, (5, 6), 4, 2).load_state_dict(memory.state_dict())


def test_frame_memory_holds_each_frame_once():
    memory = FrameMemory(1000, (84, 84), 4, 1)
    assert memory.frames.nbytes == 1000 * 84 * 84  # a stack-per-row memory: 2 x 4 x this


# --- torso ----------------------------------------------------------------------------------------
def test_torso_follows_the_observation():
    layers, width = torso((4, 84, 84), (64,))
    net = torch.nn.Sequential(*layers)
    assert width == 512 and net(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 512)
    assert sum(isinstance(m, torch.nn.Conv2d) for m in layers) == 3
    layers, width = torso((6, 10, 10), (64,))
    assert width == 128 and torch.nn.Sequential(*layers)(
        torch.ones(3, 6, 10, 10, dtype=torch.uint8)
    ).shape == (3, 128)
    layers, width = torso((8,), (32, 16))
    assert width == 16 and [type(m) for m in layers] == [torch.nn.Linear, torch.nn.ReLU] * 2
    # another activation for the MLP (a2c's tanh); the image torsos keep their papers' ReLU
    assert [type(m) for m in torso((8,), (32, 16), torch.nn.Tanh)[0]] == [
        torch.nn.Linear,
        torch.nn.Tanh,
    ] * 2
    assert torch.nn.Tanh not in {type(m) for m in torso((4, 84, 84), (64,), torch.nn.Tanh)[0]}
    with pytest.raises(ValueError, match="no torso"):
        torso((3, 40, 40), ())
    # Atari frames are scaled to [0, 1], MinAtar's 0/1 kept as they are
    assert torch.equal(layers_out(torso((4, 84, 84), ())[0][0], 255), torch.tensor(1.0))
    assert torch.equal(layers_out(torso((4, 10, 10), ())[0][0], 1), torch.tensor(1.0))
    assert obs_shape(gym.spaces.Box(0, 1, (2, 3))) == (6,) and obs_shape(
        gym.spaces.Box(0, 1, (4, 10, 10))
    ) == (4, 10, 10)


def layers_out(layer, value):
    return layer(torch.tensor(value, dtype=torch.uint8))


# --- Atari wrappers -------------------------------------------------------------------------------
def atari(training: bool) -> gym.Env:
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    return pixels.make("BreakoutNoFrameskip-v4", training=training)


def play(env: gym.Env, steps: int, seed: int = 0):
    """Random actions; (reward, terminated, truncated, info, lives, frame number) per step."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        ale = env.unwrapped.ale
        out.append((reward, terminated, truncated, info, ale.lives(), ale.getEpisodeFrameNumber()))
        if terminated or truncated:
            return out
    return out


def test_atari_observations_are_the_papers():
    env = atari(training=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all(
        np.array_equal(obs[0], obs[k]) for k in range(4)
    )  # a new episode is padded with its first frame
    assert (
        pixels.kind("ALE/Pong-v5") == "atari"
        and pixels.kind("MinAtar/Breakout-v1") == "minatar"
        and pixels.kind("CartPole-v1") is None
    )
    with pytest.raises(ValueError, match="unknown environment id"):
        pixels.kind("ALE/NoSuchGame-v5")


def test_a_lost_life_ends_a_training_episode_and_the_game_goes_on():
    env = atari(training=True)
    env.reset(seed=1)
    steps = play(env, 5000)
    reward, terminated, truncated, info, lives, frame = steps[-1]
    assert terminated and info.get("life_lost") and lives == 4  # Breakout starts with 5
    assert sum(s[1] for s in steps) == 1  # nothing ended the episode earlier
    env.reset()
    assert (
        env.unwrapped.ale.lives() == 4 and env.unwrapped.ale.getEpisodeFrameNumber() >= frame
    )  # same game
    lives_seen = [4]
    for _ in range(10):
        steps = play(env, 5000)
        lives_seen.append(steps[-1][4])
        if not steps[-1][3].get("life_lost"):
            break
        env.reset()
    assert (
        lives_seen == [4, 3, 2, 1, 0] and steps[-1][1]
    )  # the last life ends the game, without the flag
    env.reset()
    assert (
        env.unwrapped.ale.lives() == 5 and env.unwrapped.ale.getEpisodeFrameNumber() < 100
    )  # a new game


def test_an_evaluation_game_is_played_to_its_end():
    env = atari(training=False)
    env.reset(seed=1)
    steps = play(env, 20_000)
    assert steps[-1][1] and steps[-1][4] == 0  # terminated only at the game's end
    assert [s[4] for s in steps].count(4) > 0 and not any(s[1] for s in steps[:-1])
    assert not any(s[3].get("life_lost") for s in steps)


class ActionLog(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.actions = []

    def step(self, action):
        self.actions.append(int(action))
        return self.env.step(action)


def test_fire_is_pressed_on_reset_and_after_a_lost_life():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    pixels.kind("BreakoutNoFrameskip-v4")
    inner = gym.wrappers.AtariPreprocessing(
        gym.make("BreakoutNoFrameskip-v4"), noop_max=30, frame_skip=4
    )
    log = ActionLog(inner)
    env = FireReset(log)
    env.reset(seed=2)
    assert log.actions == [1]  # FIRE, after the no-ops AtariPreprocessing did itself
    rng = np.random.default_rng(0)
    lives = env.unwrapped.ale.lives()
    while env.unwrapped.ale.lives() == lives:
        n = len(log.actions)
        env.step(int(rng.choice([0, 2, 3])))  # never FIRE on its own
    assert log.actions[n:] == [
        log.actions[n],
        1,
    ]  # the step that lost the life pressed FIRE after it
    assert 1 not in log.actions[1 : n + 1]


def test_game_over_counts_whole_games_for_the_logged_returns():
    pytest.importorskip("ale_py")
    envs = gym.vector.SyncVectorEnv(
        [lambda: pixels.make("BreakoutNoFrameskip-v4", training=True)] * 2,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=3)
    rng = np.random.default_rng(0)
    ends = games = 0
    for _ in range(1500):
        _, _, terminated, truncated, infos = envs.step(rng.integers(4, size=2))
        ends += int((terminated | truncated).sum())
        over = pixels.game_over(terminated, truncated, infos)
        games += int(over.sum())
        for i in np.flatnonzero(terminated | truncated):
            assert over[i] == (infos["final_info"]["lives"][i] == 0)
    assert games >= 2
    assert (
        5 * games <= ends <= 5 * games + 2 * 4
    )  # five training episodes per game (plus the unfinished games')


def test_minatar_observations_are_channels_first_uint8_with_a_time_limit():
    pytest.importorskip("minatar")
    env = pixels.make("MinAtar/SpaceInvaders-v1")
    obs, _ = env.reset(seed=0)
    assert (
        obs.dtype == np.uint8
        and obs.shape == env.observation_space.shape
        and obs.shape[1:] == (10, 10)
    )
    raw = env.unwrapped.game.state()  # [10, 10, C] booleans
    assert np.array_equal(obs, np.moveaxis(raw, -1, 0).astype(np.uint8))
    assert env.spec.max_episode_steps == MINATAR_MAX_STEPS


# --- observation scaling (vector envs) ----------------------------------------------------------
def test_scale_obs_maps_bounded_components_to_unit_range_and_leaves_unbounded_ones():
    for env_id in (
        "MountainCar-v0",
        "CartPole-v1",
    ):  # fully bounded; two bounded and two unbounded components
        raw, scaled = pixels.make(env_id), pixels.make(env_id, scale_obs=True)
        low, high = raw.observation_space.low, raw.observation_space.high
        bounded = np.isfinite(low) & np.isfinite(high)
        assert np.array_equal(scaled.observation_space.low, np.where(bounded, -1.0, low))
        assert np.array_equal(scaled.observation_space.high, np.where(bounded, 1.0, high))
        o_raw, _ = raw.reset(seed=5)
        o_scaled, _ = scaled.reset(seed=5)
        for _ in range(30):  # the same trajectory, seen through the affine map
            expected = np.where(
                bounded, 2 * (o_raw - low) / np.where(bounded, high - low, 1) - 1, o_raw
            )
            assert o_scaled.dtype == np.float32
            np.testing.assert_allclose(o_scaled, expected, rtol=1e-5, atol=1e-6)
            a = raw.action_space.sample()
            o_raw, _, terminated, truncated, _ = raw.step(a)
            o_scaled, *_ = scaled.step(a)
            if terminated or truncated:
                break
        # the ends of each bounded range land on -1 and 1
        if env_id == "MountainCar-v0":
            np.testing.assert_allclose(scaled.observation(low), -1.0, atol=1e-6)
            np.testing.assert_allclose(scaled.observation(high), 1.0, atol=1e-6)


def test_scale_obs_refuses_pixel_envs():
    with pytest.raises(
        ValueError,
        match="--scale-obs is for vector observations; MinAtar/Breakout-v1 is a minatar env",
    ):
        pixels.make("MinAtar/Breakout-v1", scale_obs=True)


# --- the Atari wrappers over whole games ----------------------------------------------------------
class InnerLog(gym.Wrapper):
    """Sits under FireReset: each action it passes on, with that step's reward and the lives left after it."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = []  # (action, reward, lives after)

    def step(self, action):
        out = self.env.step(action)
        self.steps.append((int(action), float(out[1]), self.env.unwrapped.ale.lives()))
        return out


def logged_atari(monkeypatch, training: bool, env_id: str = "BreakoutNoFrameskip-v4"):
    """pixels.make's env with an InnerLog between AtariPreprocessing and the wrappers above it."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    real = gym.wrappers.AtariPreprocessing
    logs = []

    def logged(*a, **kw):
        logs.append(InnerLog(real(*a, **kw)))
        return logs[-1]

    monkeypatch.setattr(gym.wrappers, "AtariPreprocessing", logged)
    env = pixels.make(env_id, training=training)
    return env, logs[0]


@pytest.mark.parametrize("training", [True, False])
def test_fire_is_pressed_once_after_each_lost_life_over_a_whole_game(monkeypatch, training):
    """A whole Breakout game of random actions (FIRE among them): each step passes on the agent's
    action alone, except a step that loses a life but not the game, which adds exactly one FIRE;
    its reward is both presses' and it lasts both presses' 4 frames each. A training episode ends
    there and the next reset() continues the game without pressing anything; the game's last
    life ends it without a FIRE. A new game starts with one FIRE."""
    env, log = logged_atari(monkeypatch, training)
    ale = env.unwrapped.ale
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=4)
    assert [a for a, _, _ in log.steps] == [1] and ale.lives() == 5
    fires = episodes = 0
    for _ in range(20_000):
        n, lives, frame = len(log.steps), ale.lives(), ale.getEpisodeFrameNumber()
        action = int(rng.integers(4))
        obs, reward, terminated, truncated, info = env.step(action)
        inner = log.steps[n:]
        lost, game_over = inner[0][2] < lives, inner[0][2] == 0
        if lost and not game_over:
            assert [a for a, _, _ in inner] == [action, 1]
            fires += 1
        else:
            assert [a for a, _, _ in inner] == [action]
        assert reward == sum(r for _, r, _ in inner)
        if not game_over:
            assert ale.getEpisodeFrameNumber() - frame == 4 * len(inner)  # 4 frames per press
        assert not truncated and terminated == (game_over or (training and lost))
        assert bool(info.get("life_lost")) == (training and lost and not game_over)
        if terminated and not game_over:
            n = len(log.steps)
            obs2, info2 = env.reset()
            episodes += 1
            assert (
                len(log.steps) == n and ale.lives() == lives - 1
            )  # the game goes on, nothing pressed
            assert (
                all(np.array_equal(f, obs[-1]) for f in obs2) and "life_lost" not in info2
            )  # padded with the last frame
        if game_over:
            break
    assert game_over and fires == 4 and episodes == (4 if training else 0)
    n = len(log.steps)
    env.reset()
    assert [a for a, _, _ in log.steps[n:]] == [1] and ale.lives() == 5  # a new game, served


def test_games_without_fire_get_no_fire_press(monkeypatch):
    env, log = logged_atari(monkeypatch, True, "MsPacmanNoFrameskip-v4")
    env.reset(seed=0)
    assert log.steps == [] and not any(isinstance(e, FireReset) for e in layers(env))
    env.step(2)
    assert [a for a, _, _ in log.steps] == [2]


def layers(env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def test_resets_with_different_seeds_start_after_different_numbers_of_noops():
    """AtariPreprocessing plays 1-30 no-op frames at the start of a game, drawn from the seed:
    one seed always gives the same start, twelve seeds give many different ones."""
    env = atari(training=True)
    ale = env.unwrapped.ale
    starts = {}
    for seed in range(12):
        obs, _ = env.reset(seed=seed)
        starts[seed] = (
            ale.getEpisodeFrameNumber() - 4
        )  # after the no-ops, FIRE: one step of 4 frames
        if seed < 3:
            again, _ = env.reset(seed=seed)
            assert ale.getEpisodeFrameNumber() - 4 == starts[seed] and np.array_equal(again, obs)
    assert all(0 <= n <= 30 for n in starts.values())
    assert len(set(starts.values())) >= 7 and max(starts.values()) >= 25


def test_a_seeded_reset_starts_a_new_game_even_after_a_lost_life():
    """reset(seed=...) (a run starting, or resuming with envs it could not restore) begins a new
    game; only an unseeded reset after a lost life continues the old one."""
    env = atari(training=True)
    env.reset(seed=1)
    steps = play(env, 5000)
    assert steps[-1][3].get("life_lost")
    env.reset(seed=1)
    assert env.unwrapped.ale.lives() == 5 and env.unwrapped.ale.getEpisodeFrameNumber() <= 34
    steps_again = play(env, 5000)
    assert [s[:3] for s in steps_again] == [s[:3] for s in steps]  # the same game as the first one


def test_a_truncated_training_game_starts_over(monkeypatch):
    """A time limit (here 200 frames, 50 agent steps) that ends a training episode ends the
    game: the next reset starts a new one, and its episode runs again until its own end."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    pixels.kind("BreakoutNoFrameskip-v4")
    real = gym.make
    monkeypatch.setattr(gym, "make", lambda env_id, **kw: real(env_id, max_episode_steps=200, **kw))
    env = pixels.make("BreakoutNoFrameskip-v4", training=True)
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _game in range(2):
        steps = 0
        for _ in range(100):  # across the lives lost (training episodes) of one game
            _, _, terminated, truncated, info = env.step(int(rng.integers(4)))
            steps += 1
            if truncated:
                break
            if terminated:
                assert info["life_lost"]
                env.reset()
        assert (
            truncated and not terminated and 42 <= steps <= 50
        )  # the no-ops and FIRE took up to 34 frames
        env.reset()
        assert env.unwrapped.ale.getEpisodeFrameNumber() <= 34 and env.unwrapped.ale.lives() == 5


class ScriptedLives(gym.Env):
    """An ALE-like env: reward 1 per step (10 for FIRE), a life lost on steps 3 and 6 of 3 lives."""

    observation_space = gym.spaces.Box(0, 255, (2,), np.uint8)
    action_space = gym.spaces.Discrete(4)

    class Ale:
        left = 3

        def lives(self):
            return self.left

    def __init__(self):
        self.ale, self.t = self.Ale(), 0

    def reset(self, seed=None, options=None):
        self.ale.left, self.t = 3, 0
        return np.zeros(2, np.uint8), {}

    def step(self, action):
        self.t += 1
        self.ale.left -= self.t in (3, 6, 9)
        return (
            np.full(2, self.t, np.uint8),
            10.0 if action == 1 else 1.0,
            self.ale.left == 0,
            False,
            {},
        )


def test_the_fire_press_adds_its_reward_to_the_step_that_lost_the_life():
    env = EpisodicLife(FireReset(ScriptedLives()))
    env.reset()  # FIRE: step 1
    out = [env.step(0) for _ in range(2)]  # steps 2 and 3: the life lost at 3, FIRE at 4
    assert [o[1] for o in out] == [1.0, 11.0] and out[1][2] and out[1][4]["life_lost"]
    assert out[1][0][0] == 4  # the observation after the FIRE press
