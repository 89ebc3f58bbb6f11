"""Where a run came from, and whether its numbers still hold for today's code.

A run is current when it ran on a clean commit whose deciding files (its script and what it imports,
transitively) are HEAD's as code: the same syntax trees once docstrings are dropped (comments, blank lines and
formatting are not in a syntax tree), or an equivalence record says they give the same metrics. Everything is
read from git, never from the working tree. Details: benchmarks/README.md, "The report".
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import json
import subprocess
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("algos", "common", "harness")  # where the files that decide a run's numbers live
EQUIVALENCE_FILE = ROOT / "benchmarks" / "results" / "equivalence.json"


class GitError(RuntimeError):
    """git is missing, or the folder is not a repository."""


def git(args: list[str], root: Path = ROOT, text: bool = True, check: bool = True):
    try:
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=text, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise GitError(f"git {' '.join(args)}: {e}") from None
    if check and r.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {(r.stderr or '').strip()}")
    return r


def code_state(root: Path = ROOT) -> dict:
    """What a run records of the code it starts on: the commit (full hash) and the uncommitted
    changes (modified, staged or untracked files) under algos/, common/ and harness/."""
    try:
        head = git(
            ["rev-parse", "HEAD"], root
        ).stdout.strip()  # renames as a deletion and an addition: both paths
        status = git(
            [
                "status",
                "--porcelain",
                "-z",
                "--no-renames",
                "--untracked-files=all",
                "--",
                *CODE_DIRS,
            ],
            root,
        ).stdout
    except GitError:
        return {"commit": None, "dirty": None, "dirty_files": None}
    files = sorted({entry[3:] for entry in status.split("\0") if len(entry) > 3})
    return {"commit": head, "dirty": bool(files), "dirty_files": files}


def recorded_state(result: dict) -> dict:
    """The code state a result.json records: today's keys, or the older `commit` string with a `+dirty` suffix."""
    spec = result.get("spec") or {}
    commit = result.get("commit") or spec.get("commit")
    dirty = result.get("dirty", spec.get("dirty"))
    files = result.get("dirty_files", spec.get("dirty_files"))
    if isinstance(commit, str) and commit.endswith("+dirty"):
        commit, dirty, files = commit.removesuffix("+dirty"), True, None
    return {"commit": commit, "dirty": bool(dirty), "dirty_files": files}


def imported_modules(source: str, package: str | None) -> list[str]:
    """Every module an import statement of `source` may load, in functions too: `import a.b` gives a and a.b;
    `from a.b import c` gives a, a.b and a.b.c (c may be a module); relative imports resolve against `package`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level and package is None:
                continue
            parts = (
                package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            )
            base = ".".join(parts + ([node.module] if node.module else []))
            names += [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]
    prefixes = (
        p for name in names for p in itertools.accumulate(name.split("."), lambda a, b: f"{a}.{b}")
    )
    return list(dict.fromkeys(p for p in prefixes if p))


def code_digest(source: str) -> str:
    """What of a Python file can decide a run's numbers, as a digest: its syntax tree without the string
    statements (docstrings, the dataclass fields' help), so that a comment, a docstring or a reformat leaves a run
    current; the text's own digest where it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return hashlib.sha1(source.encode()).hexdigest()
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and any(is_string_statement(x) for x in body):
                setattr(
                    node, field, [x for x in body if not is_string_statement(x)] or [ast.Pass()]
                )
    return hashlib.sha1(ast.dump(tree).encode()).hexdigest()


def is_string_statement(
    node: ast.AST,
) -> bool:  # a docstring, or a string on its own line: no effect on a run
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def deciding_paths(script: str, files: dict[str, str], read) -> list[str]:
    """`script` and the files of the tree (`files`: path -> blob, `read(blob)`: its text) it imports, transitively,
    a module resolving against the repository's root and the script's own folder (the scripts' sys.path)."""
    roots = ["", script.rpartition("/")[0] + "/" if "/" in script else ""]
    found, todo = [], [script]
    while todo:
        path = todo.pop()
        if path in found or path not in files:
            continue
        found.append(path)
        package = (
            path.rpartition("/")[0].replace("/", ".") or None
        )  # what a relative import is relative to
        for module in imported_modules(read(files[path]), package):
            stem = module.replace(".", "/")
            todo += [
                c for r in roots for c in (f"{r}{stem}.py", f"{r}{stem}/__init__.py") if c in files
            ]
    return sorted(found)


class Freshness(NamedTuple):
    current: bool
    why: str  # for a stale run: its commit and what changed since (or "dirty tree"); for a current one, "" or the equivalence check


class Checker:
    """Whether a run with a recorded code state is current for its cell; caches every git lookup."""

    def __init__(
        self,
        root: Path = ROOT,
        equivalence_file: Path | None = EQUIVALENCE_FILE,
        head: str = "HEAD",
    ):
        self.root = Path(root)
        for name in (
            "resolve",
            "tree",
            "read",
            "deciding",
            "code",
        ):  # each git lookup once per checker
            setattr(self, name, functools.cache(getattr(self, name)))
        try:
            self.head = git(
                ["rev-parse", "--verify", f"{head}^{{commit}}"], self.root
            ).stdout.strip()
            shallow = (
                git(["rev-parse", "--is-shallow-repository"], self.root).stdout.strip() == "true"
            )
            self.error = "a shallow clone: older commits are missing" if shallow else None
        except GitError as e:
            self.head, self.error = None, f"no git history ({e})"
        self.records = load_records(equivalence_file) if equivalence_file else []

    def resolve(self, commit: str) -> str | None:
        r = git(
            ["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], self.root, check=False
        )
        return r.stdout.strip() if r.returncode == 0 else None

    def tree(self, commit: str) -> dict[str, str]:
        entries = [
            e.split("\t", 1)
            for e in git(["ls-tree", "-r", "-z", commit], self.root).stdout.split("\0")
            if e
        ]
        return {path: meta.split()[2] for meta, path in entries if meta.split()[1] == "blob"}

    def read(self, blob: str) -> str:
        return git(["cat-file", "blob", blob], self.root).stdout

    def code(self, blob: str) -> str:
        """The blob's code_digest (the blob itself where git no longer has it)."""
        try:
            return code_digest(self.read(blob))
        except GitError:
            return blob

    def as_code(self, files: dict[str, str]) -> frozenset:
        """path -> blob as (path, code_digest) pairs: what two sets of deciding files are compared by."""
        return frozenset((path, self.code(blob)) for path, blob in files.items())

    def same_code(self, old: dict[str, str], new: dict[str, str]) -> bool:
        return old == new or (set(old) == set(new) and self.as_code(old) == self.as_code(new))

    def deciding(self, commit: str, algo: str) -> dict[str, str]:
        """path -> blob of the files that decide a run of `algo` at `commit`."""
        files = self.tree(commit)
        return {p: files[p] for p in deciding_paths(f"algos/{algo}.py", files, self.read)}

    def today(self, algo: str) -> dict[str, str]:
        return self.deciding(self.head, algo) if self.head else {}

    def freshness(self, state: dict, algo: str, cell_key: tuple[str, str, str]) -> Freshness:
        """Whether a run with recorded code `state` (recorded_state) of cell `cell_key` = (algo, env, hash) counts today."""
        commit = state.get("commit")
        if self.head is None:
            return Freshness(False, f"cannot check its code: {self.error}")
        if not commit:
            return Freshness(False, "its commit was not recorded")
        short = commit[:7]
        if (full := self.resolve(commit)) is None:
            return Freshness(
                False,
                f"commit {short} is not in this repository"
                + (f" ({self.error})" if self.error else ""),
            )
        old, new = self.deciding(full, algo), self.today(algo)
        if state.get("dirty"):
            dirty = state.get("dirty_files")
            touched = None if dirty is None else sorted(set(dirty) & (set(old) | set(new)))
            if touched is None or touched:
                what = (
                    "uncommitted changes"
                    if touched is None
                    else f"uncommitted changes to {', '.join(touched)}"
                )
                return Freshness(False, f"commit {short} with a dirty tree ({what})")
        if self.same_code(old, new):
            return Freshness(True, "")
        if via := self.equivalent(old, new, cell_key):
            return Freshness(
                True,
                "current by equivalence check "
                + "; then ".join(
                    f"of {r['old']['commit'][:7]} with {r['new']['commit'][:7]}, {r['steps']:,} steps"
                    for r in via
                ),
            )
        changed = sorted(
            p
            for p in set(old) | set(new)
            if p not in old or p not in new or self.code(old[p]) != self.code(new[p])
        )
        return Freshness(False, f"commit {short}: {', '.join(changed)} changed since")

    def equivalent(
        self, old: dict[str, str], new: dict[str, str], cell_key: tuple[str, str, str]
    ) -> list[dict] | None:
        """The chain of this cell's equivalence records (old files -> new files, same metrics) from `old` to `new`; None if none.
        Files are compared as code (as_code): a record holds for files that differ from its own in docstrings and layout only."""
        records = [r for r in self.records if (r["algo"], r["env"], r["hash"]) == cell_key]
        start, goal = self.as_code(old), self.as_code(new)
        paths, todo = {start: []}, [start]  # files reached -> the records from `old` to them
        for at in todo:  # breadth first: todo grows while it is walked
            if at == goal:
                return paths[at]
            for r in records:
                nxt = self.as_code(r["new"]["files"])
                if self.as_code(r["old"]["files"]) == at and nxt not in paths:
                    paths[nxt] = paths[at] + [r]
                    todo.append(nxt)
        return None


def load_records(path: Path) -> list[dict]:
    return json.loads(Path(path).read_text())["records"] if Path(path).exists() else []
