"""gymnasium's own env checker over every kind of env the scripts make (common.pixels.make): vectors, scaled
vectors, Box2D, MuJoCo, Atari for training (a lost life ends the episode) and evaluation, MinAtar."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
from gymnasium.utils.env_checker import check_env

from common import pixels


def extra(module: str, file: str):
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"pip install -r requirements/{file}"
    )


@pytest.mark.parametrize(
    "env_id, kw",
    [
        ("CartPole-v1", {}),
        ("MountainCar-v0", {"scale_obs": True}),
        ("Pendulum-v1", {}),
        pytest.param("LunarLander-v3", {}, marks=extra("Box2D", "requirements-box2d.txt")),
        pytest.param("HalfCheetah-v5", {}, marks=extra("mujoco", "requirements-mujoco.txt")),
        pytest.param(
            "BreakoutNoFrameskip-v4",
            {"training": True},
            marks=extra("ale_py", "requirements-pixels.txt"),
        ),
        pytest.param(
            "BreakoutNoFrameskip-v4",
            {"training": False},
            marks=extra("ale_py", "requirements-pixels.txt"),
        ),
        pytest.param(
            "ALE/Pong-v5", {"training": True}, marks=extra("ale_py", "requirements-pixels.txt")
        ),
        pytest.param(
            "MinAtar/Breakout-v1",
            {},
            marks=[
                extra("minatar", "requirements-pixels.txt"),
                pytest.mark.xfail(
                    raises=AssertionError,
                    strict=True,
                    reason="upstream: the minatar package's reset does not seed np_random",
                ),
            ],
        ),
    ],
)
def test_gymnasiums_env_checker_passes_on_what_the_scripts_make(env_id, kw):
    env = pixels.make(env_id, **kw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # its advice (wrapped envs, unbounded spaces), not failures
            check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_a_training_atari_env_resets_twice_without_a_step_to_the_same_frame():
    """EpisodicLife: a reset without a step in between continues the game from its current frame."""
    pytest.importorskip("ale_py")
    env = pixels.make("BreakoutNoFrameskip-v4", training=True)
    first, _ = env.reset(seed=0)
    again, info = env.reset()
    assert (again == first).all() and "life_lost" not in info
    env.close()
