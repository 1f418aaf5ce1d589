"""No import cycle among the modules of ``shopsimrl_core`` (issue 33, item 16).

A cycle means a lower module reaches back up: ``_http`` importing the h1 engine that imports ``_http``,
the summary importing its category rows that import the summary, a storage module importing the
``runs`` face that names the evaluator. Python tolerates many such cycles at run time (function-level
imports, lazy faces), so only a static graph finds them. The graph is deliberately strict:

- every ``import`` counts: at module level, inside functions, and under ``if TYPE_CHECKING:`` (a type
  that only a higher module defines is a dependency on that module all the same);
- ``from <package> import <name>`` of a face (a package ``__init__``) depends on the face, and a face
  depends on every module it re-exports (its ``TYPE_CHECKING`` mirror imports them all): importing a
  face pulls in everything it names;
- importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; that counts when such an
  ``__init__`` imports modules at run time (an eager face), not for the lazy faces (``_lazy.py``),
  whose run-time import is only ``_lazy``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = "shopsimrl_core"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of *tree*, anywhere in it, with whether it sits under ``if TYPE_CHECKING:``."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def walk(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, typing_only))
            walk(child, typing_only or (isinstance(child, ast.If) and _is_type_checking(child.test)))

    walk(tree, False)
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: set[str]) -> list[str]:
    """The modules *node* (a statement of *module*) imports: a submodule when the name is one, else the package."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative import: resolved against the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """``{module: {imported module: line}}`` over the ``shopsimrl_core`` tree under *root*, by the rules above."""
    paths = {_module_name(path, root): path for path in sorted((root / CORE).rglob("*.py"))}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    statements = {name: _imports(ast.parse(path.read_text(encoding="utf-8"))) for name, path in paths.items()}
    eager = {
        package
        for package in packages
        if any(
            not typing_only and target in paths and target != f"{CORE}._lazy"
            for node, typing_only in statements[package]
            for target in _targets(package, True, node, set(paths))
        )
    }
    graph: dict[str, dict[str, int]] = {}
    for module in paths:
        edges: dict[str, int] = {}
        for node, _typing_only in statements[module]:
            for target in _targets(module, module in packages, node, set(paths)):
                if target not in paths:
                    continue
                parts = target.split(".")
                ancestors = [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in eager]
                for imported in [target, *ancestors]:
                    # a module's own packages are already being imported when it runs
                    if imported != module and not module.startswith(imported + "."):
                        edges.setdefault(imported, node.lineno)
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of *graph* with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
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
                    cycles.append(sorted(component))
    return cycles


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(cycle)
    return "\n".join(
        f"  {module} imports "
        + ", ".join(f"{target} (line {line})" for target, line in sorted(graph[module].items()) if target in members)
        for module in cycle
    )


def test_the_core_has_no_import_cycle() -> None:
    graph = import_graph(ROOT)
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles among shopsimrl_core modules (a lower module must not import a higher one, " \
        "nor a face that names one):\n" + "\n\n".join(_describe(cycle, graph) for cycle in cycles)


def test_the_cycle_finder_finds_each_kind_of_cycle(tmp_path: Path) -> None:
    """The finder itself: a function-level cycle, a TYPE_CHECKING cycle, one through a lazy face, one through
    an eager face; and no false cycle from a lazy face that is merely a parent package."""
    core = tmp_path / CORE
    files = {
        "__init__.py": "",
        "_lazy.py": "",
        # function-level import back
        "a/__init__.py": "",
        "a/_low.py": "def f():\n    from shopsimrl_core.a._high import g\n",
        "a/_high.py": "from shopsimrl_core.a._low import f\n",
        # TYPE_CHECKING import back
        "b/__init__.py": "",
        "b/_store.py": "def f():\n    from shopsimrl_core.b._check import c\n",
        "b/_check.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from shopsimrl_core.b._store import S\n",
        # a lazy face that names a higher module
        "c/__init__.py": "from typing import TYPE_CHECKING\nfrom shopsimrl_core._lazy import lazy_face\n"
        "if TYPE_CHECKING:\n    from shopsimrl_core.c._top import T as T\n",
        "c/_top.py": "from shopsimrl_core.d._base import B\n",
        "d/__init__.py": "",
        "d/_base.py": "def f():\n    from shopsimrl_core.c import T\n",
        # an eager face imported as a parent package
        "e/__init__.py": "from shopsimrl_core.e._launch import L\n",
        "e/_launch.py": "from shopsimrl_core.f._plan import P\n",
        "e/_weights.py": "",
        "f/__init__.py": "",
        "f/_plan.py": "def f():\n    from shopsimrl_core.e._weights import W\n",
        # parent packages that are lazy faces make no cycle
        "g/__init__.py": "from typing import TYPE_CHECKING\nfrom shopsimrl_core._lazy import lazy_face\n"
        "if TYPE_CHECKING:\n    from shopsimrl_core.g._one import O as O\n",
        "g/_one.py": "from shopsimrl_core.g._two import T\n",
        "g/_two.py": "",
    }
    for name, text in files.items():
        (core / name).parent.mkdir(parents=True, exist_ok=True)
        (core / name).write_text(text, encoding="utf-8")
    cycles = import_cycles(import_graph(tmp_path))
    assert sorted(cycles) == sorted(
        [
            [f"{CORE}.a._high", f"{CORE}.a._low"],
            [f"{CORE}.b._check", f"{CORE}.b._store"],
            [f"{CORE}.c", f"{CORE}.c._top", f"{CORE}.d._base"],
            [f"{CORE}.e", f"{CORE}.e._launch", f"{CORE}.f._plan"],
        ]
    )
