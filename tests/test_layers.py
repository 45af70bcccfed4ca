"""The layer rules of docs/architecture.md, read from every module's imports (AST, nothing executed).

An arrow `A -> B` is forbidden when a module of package A imports (anywhere in the file, deferred
imports and `TYPE_CHECKING` blocks included) a module of package B. No import circle may exist among
the modules of `helios/`. `from helios.x import y` imports the module `helios.x.y` when that is a
module, else `helios.x` (its `__init__`); `import helios.x.y` imports `helios.x.y`. (A package's
`__init__` runs before any of its submodules in Python; that is no circle, so it is not an edge.)
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("helios", "conformance")

SERVING = ("helios.server", "helios.runtime", "helios.engine", "helios.frontend", "helios.production",
           "helios.reference", "helios.core", "helios.contract")

# (importer, imported, why): no module under the first may import a module under the second.
FORBIDDEN = [
    ("helios.server", "helios.production", "the server serves any ModelRuntime; the CLI composes it"),
    ("helios.server", "helios.reference", "the server serves any ModelRuntime; the CLI composes it"),
    ("helios.server", "conformance", "the trace recorder is injected by the composition root"),
    ("helios.production", "helios.reference", "the fast path is checked against the spec, not built from it"),
    ("helios.reference", "helios.production", "the executable specification stands alone"),
    ("helios.runtime", "helios.production", "shared host code knows no executor"),
    ("helios.runtime", "helios.reference", "shared host code knows no executor"),
    ("helios.engine", "helios.production", "the host engine drives any executor through the plan"),
    ("helios.engine", "helios.reference", "the host engine drives any executor through the plan"),
    *[(package, "helios.ignition", "serving never needs preparation") for package in SERVING],
    ("helios.program", "helios.ignition", "the operator set is shared by preparation and both runtimes"),
    ("helios.frontend", "helios.server", "the frontend knows no HTTP"),
    ("helios.core", "helios.contract", "the file format knows no contract semantics"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            if "proto" in path.relative_to(ROOT).parts[:2] and path.parts[-2] == "proto":
                continue  # generated protobuf code
            found[module_name(path)] = path
    return found


def imports(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """Every module of `known` that `path` (module `name`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _resolved(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"
                else:
                    yield from _resolved(base, known)


def _resolved(name: str, known: set[str]) -> Iterator[str]:
    """The module `name` names, or its nearest enclosing known package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    if name:
        yield name


@functools.cache
def graph() -> dict[str, frozenset[str]]:
    found = modules()
    known = set(found)
    return {name: frozenset(imports(path, name, known)) - {name} for name, path in found.items()}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize(("importer", "imported", "why"), FORBIDDEN, ids=[f"{a}->{b}" for a, b, _ in FORBIDDEN])
def test_forbidden_arrow(importer: str, imported: str, why: str) -> None:
    edges = graph()
    offenders = sorted(f"{a} imports {b}" for a, targets in edges.items() if _under(a, importer)
                       for b in targets if _under(b, imported))
    assert not offenders, f"{importer} -> {imported} is forbidden ({why}):\n" + "\n".join(offenders)


def strongly_connected(edges: dict[str, frozenset[str]] | dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_import_circle_inside_helios() -> None:
    edges = {a: {b for b in targets if _under(b, "helios")} for a, targets in graph().items() if _under(a, "helios")}
    circles = strongly_connected(edges)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_reader_sees_deferred_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from .sibling import thing\n    import helios.core.frame\n")
    known = {"pkg.sibling", "pkg.sibling.thing", "helios.core", "helios.core.frame"}
    assert set(imports(source, "pkg.m", known)) == {"pkg.sibling.thing", "helios.core.frame"}
    source.write_text("from .sibling import name, thing\n")
    assert set(imports(source, "pkg.m", known)) == {"pkg.sibling", "pkg.sibling.thing"}
