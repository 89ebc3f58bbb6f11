"""Suites and results on disk: the core below every command-line tool of benchmarks/.

A suite (suites.toml) is a list of cells (algo, env, steps, settings, seeds, threshold, references). A run
is one (cell, seed), in <results>/<suite>/runs/<algo>__<env>__s<seed>__<hash>/ (spec.json, log.txt,
result.json and the script's own run folder; benchmarks/README.md), <hash> a digest of (algo, env, steps,
settings, eval_every): a cell whose settings change, or a smoke try (`with_budget`), gets new run folders.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SUITES_FILE = BENCH / "suites.toml"
REFERENCES_FILE = BENCH / "references.toml"
LEGEND_FILE = BENCH / "report_legend.md"  # what REPORT.md's columns and verdicts mean
RESULTS_DIR = BENCH / "results"


@dataclass
class Cell:
    algo: str
    env: str
    steps: int
    settings: dict
    seeds: list[int]
    eval_every: int
    threshold: float | None = None
    pass_rule: str = "mean"
    pass_rule_source: str = (
        ""  # the published result that asks the threshold of every seed (pass_rule "all" only)
    )
    threshold_source: str = ""
    settings_source: str = ""
    references: list[str] = field(default_factory=list)
    note: str = ""  # why the cell falls short, once known (shown beside a FAIL, or beside a cell without threshold; not part of the run identity)
    comparable: bool = (
        True  # False: a smoke try on a shrunk budget (with_budget), never counted toward a verdict
    )

    @property
    def digest(self) -> str:
        spec = {
            "algo": self.algo,
            "env": self.env,
            "steps": self.steps,
            "settings": self.settings,
            "eval_every": self.eval_every,
        }
        if not self.comparable:
            spec["comparable"] = False
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]

    def with_budget(self, steps: int) -> Cell:
        """The cell on a smaller budget (a smoke try), its evaluation period shrunk in proportion; not comparable."""
        eval_every = max(1, self.eval_every * steps // self.steps) if self.eval_every else 0
        return dataclasses.replace(self, steps=steps, eval_every=eval_every, comparable=False)

    @property
    def slug(self) -> str:
        """`algo__env` as one file name: ALE/Breakout-v5 -> ALE-Breakout-v5 (a '/' would make a subfolder)."""
        return f"{self.algo}__{self.env.replace('/', '-')}"

    def run_name(self, seed: int) -> str:
        return f"{self.slug}__s{seed}__{self.digest}"


@dataclass
class Suite:
    name: str
    description: str
    cells: list[Cell]
    runnable: bool = True
    not_runnable_reason: str = ""


def load_suites(path: Path | str = SUITES_FILE) -> dict[str, dict]:
    with open(path, "rb") as f:
        return tomllib.load(f)["suites"]


def load_suite(name: str, path: Path | str = SUITES_FILE, raw: dict | None = None) -> Suite:
    raw = (
        load_suites(path) if raw is None else raw
    )  # `raw`: the file's suites, when one includes another
    if name not in raw:
        raise SystemExit(f"unknown suite {name!r}; {path} defines: {', '.join(raw)}")
    s = raw[name]
    cells = []
    if include := s.get(
        "include"
    ):  # another suite's cells, unchanged (same settings: the same run hashes)
        other = load_suite(include["suite"], path, raw)
        envs, algos = include.get("envs"), include.get("algos")
        cells += [
            c
            for c in other.cells
            if (envs is None or c.env in envs) and (algos is None or c.algo in algos)
        ]
    for c in s.get("cells", []):
        if unknown := set(c) - {
            "algo",
            "env",
            "steps",
            "settings",
            "seeds",
            "threshold",
            "pass_rule",
            "pass_rule_source",
            "threshold_source",
            "settings_source",
            "references",
            "note",
        }:
            raise SystemExit(
                f"suite {name}: cell {c.get('algo')}/{c.get('env')} has unknown keys {sorted(unknown)}"
            )
        if c.get("pass_rule", "mean") not in ("mean", "all"):
            raise SystemExit(
                f"suite {name}: cell {c['algo']}/{c['env']}: pass_rule must be 'mean' or 'all'"
            )
        if c.get("pass_rule") == "all" and not c.get("pass_rule_source"):
            raise SystemExit(
                f"suite {name}: cell {c['algo']}/{c['env']}: pass_rule 'all' needs a pass_rule_source, the "
                "published result that asks the threshold of every seed; without one, use 'mean'"
            )
        steps, points = int(c["steps"]), s.get("eval_points", 20)
        cells.append(
            Cell(
                **{
                    **c,
                    "steps": steps,
                    "settings": dict(c.get("settings", {})),  # a key left out: Cell's default
                    "references": list(c.get("references", [])),
                    "seeds": list(c.get("seeds", s.get("seeds", [1, 2, 3]))),
                    "eval_every": max(1, steps // int(points)) if points else 0,
                }
            )
        )
    return Suite(
        name,
        s.get("description", ""),
        cells,
        s.get("runnable", True),
        s.get("not_runnable_reason", ""),
    )


def load_references(path: Path | str = REFERENCES_FILE) -> dict[str, dict]:
    with open(path, "rb") as f:
        return {r["id"]: r for r in tomllib.load(f)["reference"]}


def script_path(algo: str) -> Path:
    return ROOT / "algos" / f"{algo}.py"


def read_result(run_dir: Path, name: str = "result.json") -> dict | None:
    try:
        return json.loads((run_dir / name).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def metrics_file(run_dir: Path) -> Path | None:
    """The script's metrics.csv inside a run folder (newest if several)."""
    files = sorted(run_dir.glob("*/metrics.csv"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None
