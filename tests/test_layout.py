"""The tree is the architecture: what pyproject.toml installs, the imports between modules
(no cycles, the coordinator free of the wire), and the size of a module.

Imports are read from the source (``ast``), every one of them: at module level, inside
functions (imported when first needed) and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 620  # "no module over ~600 lines"


def package_dirs() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        setuptools = tomllib.load(f)["tool"]["setuptools"]
    return dict(setuptools["package-dir"])


def installed_packages() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["tool"]["setuptools"]["packages"])


def modules() -> dict[str, Path]:
    """Installed module name -> source file, for every module of the package folders."""
    found: dict[str, Path] = {}
    for package, folder in package_dirs().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [package, *rel.parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of ours that ``name`` (at ``path``) imports, anywhere in the file."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(name, path, known)) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_pyproject_installs_every_package_folder() -> None:
    expected = sorted(name for name, path in modules().items() if path.name == "__init__.py")
    assert sorted(installed_packages()) == expected


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_the_coordinator_and_assignors_import_nothing_of_the_wire_or_above() -> None:
    """The coordinator is pure: no aiokafka, no sockets, no layer above it; the assignors
    import nothing of the broker at all."""
    for name, path in modules().items():
        if name.startswith("kgroupd.broker.coordinator"):
            allowed = ("kgroupd.broker.coordinator", "kgroupd.assignors", "kgroupd.protocol.errors")
        elif name.startswith("kgroupd.assignors"):
            allowed = ("kgroupd.assignors",)
        else:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for imported in names:
                if name != "kgroupd.assignors.adapters":  # adapters for aiokafka's clients
                    assert not imported.startswith(("aiokafka", "socket")), name
                if imported.startswith("kgroupd"):
                    assert imported.startswith(allowed), f"{name} imports {imported}"


def test_no_module_over_about_600_lines() -> None:
    folders = [*package_dirs().values(), "bench", "tests"]
    long = {
        str(path.relative_to(ROOT)): n
        for folder in folders
        for path in (ROOT / folder).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
