"""harness/'s shape, read from its source: no import circle between its modules (imports inside
functions count), and only harness/run.py, where `Run` is defined, assigns Run's attributes."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = sorted((ROOT / "harness").glob("*.py"))


def harness_imports(path: Path) -> set[str]:
    """The harness modules `path` imports anywhere (module level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("harness.")}
        elif isinstance(node, ast.ImportFrom) and node.module == "harness":
            found |= {f"harness.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness."):
            found.add(node.module)
    return {name.split(".")[1] for name in found}


def test_no_import_circle_between_harness_modules():
    graph = {path.stem: harness_imports(path) - {path.stem} for path in HARNESS}
    done: set[str] = set()

    def visit(module: str, chain: list[str]) -> None:
        assert module not in chain, "import circle: " + " -> ".join([*chain, module])
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*chain, module])
        done.add(module)

    for module in graph:
        visit(module, [])


def run_attributes() -> set[str]:
    """The attributes `Run`'s methods give `self`, and its methods."""
    tree = ast.parse((ROOT / "harness" / "run.py").read_text())
    (run,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Run"]
    names = {n.name for n in run.body if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(run):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "self" and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return names


def assigned_attributes(path: Path) -> list[tuple[int, str]]:
    """(line, `obj.attr`) of each assignment to an attribute of something other than `self`, and
    of each setattr call."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr":
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_the_module_defining_run_assigns_its_attributes():
    attributes = run_attributes()
    assert {"step", "saved", "resumes", "compile_seconds", "ep_return"} <= attributes
    outside = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for path in [*HARNESS, *sorted((ROOT / "algos").glob("*.py"))]
        if path.name != "run.py" or path.parent.name != "harness"
        for line, target in assigned_attributes(path)
        if target.startswith("setattr(run") or target.split(".")[-1] in attributes
    ]
    assert outside == []
    # nor calls Run's private methods
    private = [
        f"{path.relative_to(ROOT)}: {ast.unparse(node)}"
        for path in HARNESS
        if path.name != "run.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "run"
        and node.attr.startswith("_")
    ]
    assert private == []


def test_no_harness_module_reads_its_callers_source():
    for path in HARNESS:
        source = path.read_text()
        assert "sys._getframe" not in source and "import inspect" not in source, path
        assert "return setattr" not in source, path
