"""The optional tools (requirements/requirements-viz.txt): --tensorboard, tools/tensorboard_export.py and tools/plot.py, read back."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

import a2c
import dqn
import numpy as np
import plot
import pytest

import harness.run
from harness.extras import tensorboard_tag

ROOT = Path(__file__).resolve().parents[1]
# CleanRL's tags for what dqn logs; charts/epsilon, losses/grad_norm and eval/episodic_return_std are ours
DQN_TAGS = {
    "episodic_return": "charts/episodic_return",
    "episodic_length": "charts/episodic_length",
    "loss": "losses/td_loss",
    "q_values": "losses/q_values",
    "grad_norm": "losses/grad_norm",
    "epsilon": "charts/epsilon",
    "sps": "charts/SPS",
    "eval_return": "eval/episodic_return",
    "eval_return_std": "eval/episodic_return_std",
}


def dqn_args(run_dir: Path, **kw) -> dqn.Args:
    # train_every=1: 100 gradient steps by step 200, so the losses are logged too
    base = dict(
        total_timesteps=600,
        learning_starts=100,
        train_every=1,
        eval_every=300,
        eval_episodes=2,
        run_dir=str(run_dir),
        progress=False,
        device="cpu",
    )
    return dqn.Args(**{**base, **kw})


def events(folder: Path, purge: bool = True) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files in `folder`, per tag, as TensorBoard reads them."""
    pytest.importorskip("tensorboard", reason="pip install -r requirements/requirements-viz.txt")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(
        str(folder), size_guidance={"scalars": 0}, purge_orphaned_data=purge
    )  # 0: keep all
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def csv_scalars(run: Path, tags: dict[str, str]) -> dict[str, list[tuple[int, float]]]:
    """metrics.csv's cells under the given tags, as float32 (TensorBoard's scalar type)."""
    out: dict[str, list] = {}
    with open(run / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            for name, value in row.items():
                if name not in ("global_step", "wall_seconds") and value != "":
                    out.setdefault(tags[name], []).append(
                        (int(row["global_step"]), float(np.float32(value)))
                    )
    return out


def test_tensorboard_scalars_equal_metrics_csv_under_cleanrl_tags(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install -r requirements/requirements-viz.txt")
    summary = dqn.train(dqn_args(tmp_path, tensorboard=True))
    run = Path(summary["run_dir"])
    got = events(run / "tensorboard")
    expected = csv_scalars(run, DQN_TAGS)
    assert set(expected) == set(DQN_TAGS.values()), "the tiny run logs every metric at least once"
    assert got == expected
    assert [step for step, _ in got["eval/episodic_return"]] == [300, 600]


def test_tags_depend_on_what_the_algorithm_logs():
    assert (
        tensorboard_tag("dqn", "loss") == "losses/td_loss"
        and tensorboard_tag("naf", "loss") == "losses/td_loss"
    )
    assert tensorboard_tag("a2c", "loss") == "losses/loss"  # a2c's loss is the total loss
    assert (
        tensorboard_tag("ddpg", "critic_loss") == "losses/qf1_loss"
        and tensorboard_tag("ddpg", "q_values") == "losses/qf1_values"
    )
    assert (
        tensorboard_tag("a2c", "value_loss") == "losses/value_loss"
        and tensorboard_tag("a2c", "sps") == "charts/SPS"
    )
    assert tensorboard_tag("naf", "values") == "charts/values"
    assert a2c.Args().tensorboard is False and dqn.Args().tensorboard is False


@pytest.mark.parametrize("first_with_tensorboard", [True, False])
def test_resumed_run_has_one_history_in_tensorboard(tmp_path, monkeypatch, first_with_tensorboard):
    """The first process logs past its last checkpoint (at 400, as if killed after 600): those events are
    dropped on resume like metrics.csv's rows; a run that had no events gets the kept rows first."""
    pytest.importorskip("tensorboard", reason="pip install -r requirements/requirements-viz.txt")
    write = harness.run.Run._write_checkpoint
    with monkeypatch.context() as m:
        m.setattr(
            harness.run.Run,
            "_write_checkpoint",
            lambda self, content: write(self, content) if content["global_step"] <= 400 else None,
        )
        first = dqn.train(
            dqn_args(tmp_path, checkpoint_every=200, tensorboard=first_with_tensorboard)
        )
    run = Path(first["run_dir"])
    if first_with_tensorboard:
        stale = events(run / "tensorboard")["charts/episodic_return"]
        assert max(step for step, _ in stale) > 400, (
            "the first process wrote events after its checkpoint"
        )
    time.sleep(
        1.1
    )  # TensorBoard reads event files in name order, and names hold the time in seconds
    resumed = dqn.train(dqn_args(tmp_path, checkpoint_every=200, tensorboard=True, resume=str(run)))
    assert resumed["completed"] and resumed["resumed_at"] == [400]
    got = events(run / "tensorboard")
    assert got == csv_scalars(run, DQN_TAGS)
    steps = [step for step, _ in got["charts/episodic_return"]]
    assert steps == sorted(steps) and steps[0] < 400 < steps[-1]


@pytest.mark.slow
def test_export_writes_the_same_scalars_as_the_flag(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install -r requirements/requirements-viz.txt")
    run = Path(dqn.train(dqn_args(tmp_path, tensorboard=True))["run_dir"])
    live = events(run / "tensorboard")
    for _ in range(2):  # exporting again replaces the events instead of adding a second copy
        r = subprocess.run(
            [sys.executable, str(ROOT / "tools/tensorboard_export.py"), str(run)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert events(run / "tensorboard") == live


@pytest.mark.slow
def test_export_of_a_folder_without_metrics_is_one_line(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools/tensorboard_export.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = r.stderr.strip().splitlines()
    assert (
        r.returncode == 2 and len(lines) == 1 and lines[0].startswith("tensorboard_export: error: ")
    ), r.stderr


def test_tensorboard_without_the_package_is_one_line_before_anything_is_written(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(
        sys.modules, "torch.utils.tensorboard", None
    )  # what importing it does without the package
    assert dqn.main(dqn_args(tmp_path / "runs", tensorboard=True)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "dqn: error: --tensorboard needs the tensorboard package"
    ), lines
    assert not (tmp_path / "runs").exists()


# tools/plot.py ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    for seed in (1, 2):
        dqn.train(dqn_args(runs, seed=seed, total_timesteps=1000, eval_every=500))
    return runs


def is_png_with_curves(path: Path) -> bool:
    import matplotlib.image

    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 10_000:
        return False
    pixels = matplotlib.image.imread(path)[..., :3].reshape(-1, 3)
    return len(np.unique(pixels, axis=0)) > 50  # lines, a band, text: not a blank canvas


@pytest.mark.slow
def test_plot_of_two_seeds_writes_a_png(tmp_path, two_seeds):
    pytest.importorskip("matplotlib", reason="pip install -r requirements/requirements-viz.txt")
    folders = sorted(str(p) for p in two_seeds.glob("CartPole-v1__dqn__*"))
    assert len(folders) == 2
    for inputs, out in (
        (folders, tmp_path / "curves.png"),
        ([str(two_seeds)], tmp_path / "parent.png"),
    ):
        r = subprocess.run(
            [sys.executable, str(ROOT / "tools/plot.py"), *inputs, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert "2 runs" in r.stdout and is_png_with_curves(out)


def test_plot_of_a_folder_without_metrics_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/plot.py"),
            str(tmp_path / "empty"),
            "--out",
            str(tmp_path / "x.png"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = r.stderr.strip().splitlines()
    assert (
        r.returncode == 2
        and len(lines) == 1
        and lines[0].startswith("plot: error: ")
        and "metrics.csv" in lines[0]
    ), r.stderr
    assert not (tmp_path / "x.png").exists()


def test_seeds_on_a_common_grid_give_mean_and_band():
    a = (np.array([0.0, 10.0, 20.0]), np.array([0.0, 10.0, 20.0]))
    b = (np.array([5.0, 15.0, 30.0]), np.array([10.0, 10.0, 40.0]))
    grid, values = plot.on_common_grid([a, b], grid=np.array([0.0, 5.0, 10.0, 15.0, 20.0, 30.0]))
    assert grid.tolist() == [5.0, 10.0, 15.0, 20.0]  # the range both seeds cover
    assert values.tolist() == [[5.0, 10.0, 15.0, 20.0], [10.0, 10.0, 10.0, 20.0]]
    grid, values = plot.on_common_grid([a, b])
    assert len(grid) == 200 and grid[0] == 5.0 and grid[-1] == 20.0
    assert (
        plot.on_common_grid([a, (np.array([25.0, 30.0]), np.array([1.0, 2.0]))]) is None
    )  # no shared steps


def test_training_returns_are_a_trailing_mean(tmp_path):
    run = tmp_path / "CartPole-v1__dqn__1__20260101-000000"
    run.mkdir()
    (run / "metrics.csv").write_text(
        "global_step,wall_seconds,episodic_return,eval_return\n"
        "10,0.1,1,\n20,0.2,3,\n20,0.2,,7\n30,0.3,5,\n40,0.4,10,\n"
    )
    curves = plot.read_run(run, smooth=2)
    assert (curves.algo, curves.env) == ("dqn", "CartPole-v1")
    assert curves.train[0].tolist() == [10, 20, 30, 40] and curves.train[1].tolist() == [
        1.0,
        2.0,
        4.0,
        7.5,
    ]
    assert curves.eval[0].tolist() == [20] and curves.eval[1].tolist() == [7.0]


def fake_run(
    parent: Path,
    algo: str,
    seed: int,
    steps: int,
    evals: list[int],
    env: str = "CartPole-v1",
    stamp: str = "20260101-000000",
) -> Path:
    """A run folder with an episode every 500 steps (return: steps / 1000 + seed) and the given evaluations."""
    run = parent / f"{env}__{algo}__{seed}__{stamp}"
    run.mkdir(parents=True)
    (run / "config.json").write_text(f'{{"algo": "{algo}", "env_id": "{env}", "seed": {seed}}}')
    rows = [f"{step},0.1,{step / 1000 + seed}," for step in range(500, steps + 1, 500)]
    rows += [f"{step},0.1,,{step / 100}" for step in evals]
    (run / "metrics.csv").write_text(
        "global_step,wall_seconds,episodic_return,eval_return\n" + "\n".join(rows) + "\n"
    )
    return run


def drawn(fig) -> dict[str, tuple[float, float]]:
    """Each labelled line of the figure: its first and last step."""
    return {
        line.get_label(): (line.get_xdata()[0], line.get_xdata()[-1])
        for ax in fig.axes
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def test_runs_with_the_same_seed_are_not_two_seeds(tmp_path, capsys):
    """A 500k and a 15k run, both seed 1: each drawn whole with its evaluation, and tools/plot.py says why they are not averaged."""
    pytest.importorskip("matplotlib", reason="pip install -r requirements/requirements-viz.txt")
    import matplotlib.pyplot as plt

    runs = [
        plot.read_run(
            fake_run(tmp_path, "dqn", 1, 500_000, [500_000], stamp="20260101-000000"), 10
        ),
        plot.read_run(fake_run(tmp_path, "dqn", 1, 15_000, [15_000], stamp="20260102-000000"), 10),
    ]
    fig, said = plot.figure(runs, 10)
    lines = drawn(fig)
    plt.close(fig)
    assert "runs with the same seed are not different seeds" in capsys.readouterr().err
    assert lines == {
        "dqn training (seed 1, 20260101-000000)": (500, 500_000),
        "dqn evaluation (seed 1, 20260101-000000)": (500_000, 500_000),
        "dqn training (seed 1, 20260102-000000)": (500, 15_000),
        "dqn evaluation (seed 1, 20260102-000000)": (15_000, 15_000),
    }
    assert said == [
        "dqn on CartPole-v1: seed 1, 20260101-000000, drawn alone to step 500,000",
        "dqn on CartPole-v1: seed 1, 20260102-000000, drawn alone to step 15,000",
    ]


def test_seeds_are_averaged_over_the_steps_they_share_and_each_is_drawn_whole(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="pip install -r requirements/requirements-viz.txt")
    import matplotlib.pyplot as plt

    runs = [
        plot.read_run(fake_run(tmp_path, "a2c", 1, 15_000, [5_000, 10_000, 15_000]), 1),
        plot.read_run(fake_run(tmp_path, "a2c", 2, 50_000, [5_000, 10_000, 15_000, 50_000]), 1),
    ]
    fig, said = plot.figure(runs, 1)
    lines = drawn(fig)
    mean = next(
        line
        for ax in fig.axes
        for line in ax.get_lines()
        if line.get_label().startswith("a2c training, mean")
    )
    plt.close(fig)
    assert not capsys.readouterr().err
    assert lines == {
        "a2c training, mean of seeds 1, 2 over steps 500-15,000": (500, 15_000),
        "a2c training, each seed alone outside those steps": (
            15_000,
            50_000,
        ),  # seed 2 goes on, from where the mean ends
        "a2c evaluation, mean of seeds 1, 2 over steps 5,000-15,000": (5_000, 15_000),
        "a2c evaluation, each seed alone outside those steps": (50_000, 50_000),
    }
    assert np.allclose(
        mean.get_ydata(), mean.get_xdata() / 1000 + 1.5
    )  # the mean of seed 1's and seed 2's returns
    assert said == [
        "a2c on CartPole-v1: training return averaged over seeds 1, 2, steps 500-15,000; seed 2 alone 15,000-50,000",
        "a2c on CartPole-v1: evaluation return averaged over seeds 1, 2, steps 5,000-15,000; seed 2 alone 15,000-50,000",
    ]


@pytest.mark.parametrize("envs", [1, 4])
def test_the_title_fits_inside_the_figure(tmp_path, envs):
    pytest.importorskip("matplotlib", reason="pip install -r requirements/requirements-viz.txt")
    import matplotlib.pyplot as plt

    runs = [
        plot.read_run(fake_run(tmp_path, "dqn", seed, 5_000, [5_000], env=f"Env{i}-v0"), 10)
        for i in range(envs)
        for seed in (1, 2)
    ]
    fig, _ = plot.figure(runs, 10)
    fig.canvas.draw()
    box, page = fig._suptitle.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    plt.close(fig)
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (
        box,
        page,
    )


def test_plot_counts_runs_in_words(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="pip install -r requirements/requirements-viz.txt")
    run = fake_run(tmp_path / "runs", "dqn", 1, 2_000, [2_000])
    assert plot.main(plot.PlotArgs(runs=(run,), out=tmp_path / "one.png")) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{tmp_path / 'one.png'}: 1 run" and "seed 1" in out
