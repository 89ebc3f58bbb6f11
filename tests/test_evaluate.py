"""tools/evaluate.py: by default it repeats a run's final evaluation from its saved model."""

import importlib
import subprocess
import sys
from pathlib import Path

import evaluate
import probes
import pytest


@pytest.mark.parametrize(
    "algo, kw",
    [
        (
            "a2c",
            dict(total_timesteps=200, num_envs=2, normalize_obs=True),
        ),  # the saved model carries the observation statistics
        (
            "ddpg",
            dict(total_timesteps=150, learning_starts=100, batch_size=16, hidden_sizes=(16, 16)),
        ),
    ],
)
def test_defaults_reproduce_the_runs_eval_return(tmp_path, capsys, monkeypatch, algo, kw):
    module = importlib.import_module(algo)
    monkeypatch.setitem(
        sys.modules, algo, module
    )  # tools/evaluate.py loads the script afresh under this name
    summary = module.train(
        module.Args(
            env_id="Pendulum-v1",
            seed=3,
            eval_episodes=3,
            save_model=True,
            run_dir=str(tmp_path),
            progress=False,
            device="cpu",
            **kw,
        )
    )
    capsys.readouterr()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]))) == 0
    expected = f"return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} over 3 episodes"
    assert expected in capsys.readouterr().out


def test_capture_video_says_where_the_videos_went(tmp_path, capsys, monkeypatch):
    pytest.importorskip("moviepy")
    import dqn

    monkeypatch.setitem(sys.modules, "dqn", dqn)
    summary = dqn.train(
        probes.tiny_args(
            dqn,
            "dqn",
            tmp_path,
            seed=3,
            total_timesteps=300,
            eval_episodes=1,
            save_model=True,
            device="cpu",
        )
    )
    capsys.readouterr()
    assert (
        evaluate.main(
            evaluate.EvalArgs(run=Path(summary["run_dir"]), episodes=2, capture_video=True)
        )
        == 0
    )
    videos = Path(summary["run_dir"]) / "eval_videos"
    assert (
        f"videos: {videos}/ (2 MP4 files)" in capsys.readouterr().out
        and len(list(videos.glob("*.mp4"))) == 2
    )


@pytest.mark.parametrize("algo", ["dqn", "n_step_q", "sarsa"])
def test_scale_obs_reaches_every_env_of_the_run_and_evaluate_py(
    tmp_path, capsys, monkeypatch, algo
):
    """--scale-obs rescales the training envs, the evaluation envs and tools/evaluate.py's envs alike:
    every env the run and tools/evaluate.py make is asked for it, and tools/evaluate.py repeats the run's return."""
    from common import pixels

    module = importlib.import_module(algo)
    monkeypatch.setitem(sys.modules, algo, module)
    asked = []
    make = pixels.make
    monkeypatch.setattr(
        pixels, "make", lambda *a, **kw: asked.append(kw.get("scale_obs", False)) or make(*a, **kw)
    )
    summary = module.train(
        probes.tiny_args(
            module,
            algo,
            tmp_path,
            seed=3,
            total_timesteps=400,
            eval_episodes=3,
            save_model=True,
            scale_obs=True,
            device="cpu",
        )
    )
    assert summary["completed"] and len(asked) >= 5 and all(asked), (
        asked
    )  # 2 training envs, 3 evaluation envs
    asked.clear()
    capsys.readouterr()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]))) == 0
    assert len(asked) == 4 and all(asked), (
        asked
    )  # the policy's env (for its shapes), 3 evaluation envs
    expected = f"return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} over 3 episodes"
    assert expected in capsys.readouterr().out


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "files, kw, says",
    [
        ({"config.json": '{"algo": "dqn"}'}, {}, "has no model.pt (train with --save-model)"),
        ({"model.pt": ""}, {}, "has no config.json (not a run folder)"),
        (
            {},
            {},
            "has no config.json and no model.pt (not a run folder; a run writes model.pt with --save-model)",
        ),
        (
            {"config.json": "{}", "model.pt": ""},
            {},
            "config.json names no algorithm (not the config.json of a run)",
        ),
        ({"config.json": "{not json", "model.pt": ""}, {}, "config.json cannot be read"),
        (
            {"config.json": '{"algo": "nosuch"}', "model.pt": ""},
            {},
            "algos/nosuch.py for the run's algorithm 'nosuch'; give the script with --script PATH",
        ),
        (
            {"config.json": '{"algo": "dqn"}', "model.pt": ""},
            {"script": Path("elsewhere/dqn.py")},
            "--script elsewhere/dqn.py: no such file",
        ),
        (
            {"config.json": '{"algo": "dqn"}', "model.pt": ""},
            {"episodes": 0},
            "--episodes must be positive, got 0",
        ),
    ],
)
def test_bad_input_is_one_line_naming_what_is_wrong(tmp_path, capsys, files, kw, says):
    run = tmp_path / "run"
    run.mkdir()
    for name, text in files.items():
        (run / name).write_text(text)
    assert evaluate.main(evaluate.EvalArgs(run=run, **kw)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaluate: error: ") and says in lines[0], lines


def test_bad_input_is_found_before_torch_is_imported(tmp_path):
    """The line comes at once, not after the seconds torch takes to import."""
    (tmp_path / "config.json").write_text('{"algo": "dqn"}')
    code = "import sys, evaluate; rc = evaluate.main(evaluate.EvalArgs(run=evaluate.Path(sys.argv[1]))); assert 'torch' not in sys.modules; sys.exit(rc)"
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT / "tools",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        r.returncode == 2
        and r.stderr.strip()
        == f"evaluate: error: {tmp_path} has no model.pt (train with --save-model)"
    ), r.stderr


def test_help_gives_each_default_once_and_names_the_script_option():
    r = subprocess.run(
        [sys.executable, "tools/evaluate.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0
    text = " ".join(r.stdout.replace("│", " ").split())
    assert "(default: None)" not in text and text.count("(default: the run's --eval-episodes)") == 1
    assert "--script PATH" in text and "(default: algos/<algo>.py of this repository" in text


def test_script_option_loads_the_network_from_a_copied_script(tmp_path, capsys, monkeypatch):
    """A run of a script copied out of the repository (its module name is still dqn) is scored with --script."""
    import dqn

    monkeypatch.setitem(sys.modules, "dqn", dqn)
    monkeypatch.setattr(sys, "path", list(sys.path))
    summary = dqn.train(
        probes.tiny_args(
            dqn, "dqn", tmp_path / "runs", seed=3, eval_episodes=3, save_model=True, device="cpu"
        )
    )
    copy = tmp_path / "project" / "dqn.py"
    copy.parent.mkdir()
    copy.write_text((ROOT / "algos" / "dqn.py").read_text() + "\nLOADED_FROM_THE_COPY = True\n")
    capsys.readouterr()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]), script=copy)) == 0
    assert getattr(sys.modules["dqn"], "LOADED_FROM_THE_COPY", False)
    expected = f"return {summary['eval_return_mean']:.2f} +- {summary['eval_return_std']:.2f} over 3 episodes"
    assert expected in capsys.readouterr().out


def test_a_run_whose_network_differs_from_the_repositorys_script_says_so_in_one_line(
    tmp_path, capsys, monkeypatch
):
    """A copied script with an extra layer trained the run; without --script, tools/evaluate.py names the fix, no traceback."""
    import dqn
    import torch

    monkeypatch.setitem(sys.modules, "dqn", dqn)
    monkeypatch.setattr(sys, "path", list(sys.path))
    summary = dqn.train(
        probes.tiny_args(
            dqn, "dqn", tmp_path / "runs", seed=3, eval_episodes=1, save_model=True, device="cpu"
        )
    )
    model = Path(summary["run_dir"]) / "model.pt"
    weights = torch.load(model, weights_only=True)
    torch.save(
        {**weights, "net.9.weight": torch.zeros(2, 2)}, model
    )  # a layer algos/dqn.py does not have
    capsys.readouterr()
    assert evaluate.main(evaluate.EvalArgs(run=Path(summary["run_dir"]))) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1
        and "does not fit the network of algos/dqn.py" in err
        and "--script PATH" in err
    )


def test_capture_video_without_moviepy_is_one_line(tmp_path, capsys, monkeypatch):
    import importlib.util

    (tmp_path / "config.json").write_text('{"algo": "dqn"}')
    (tmp_path / "model.pt").write_bytes(b"")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "moviepy" else real_find_spec(name, *a),
    )
    assert evaluate.main(evaluate.EvalArgs(run=tmp_path, capture_video=True)) == 2
    assert (
        capsys.readouterr().err.strip()
        == "evaluate: error: --capture-video needs moviepy: pip install -r requirements/requirements-video.txt"
    )
