"""The typed public face: each lazy export table, its ``TYPE_CHECKING`` mirror and ``__all__`` agree, and mypy
sees a real type (never ``Any``) behind every public name.

The faces resolve names lazily through ``__getattr__`` (``shopsimrl_core/_lazy.py``), which mypy cannot
follow; the mirror under ``if TYPE_CHECKING:`` is what it reads instead. These tests keep the two from
drifting, and the probe proves the result with mypy itself.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = sorted(
    [init.parent.relative_to(ROOT).as_posix().replace("/", ".") for init in ROOT.glob("shopsimrl_core/**/__init__.py")]
    + ["shopsimrl_dagster"]
)
# names a face adds to __all__ beyond its export table, each declared under TYPE_CHECKING
EXTRA_PUBLIC = {"shopsimrl_core": {"__version__"}}


def _init_tree(package: str) -> ast.Module:
    return ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text(encoding="utf-8"))


def _export_table(tree: ast.Module) -> dict[str, str] | None:
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "_EXPORTS":
            assert node.value is not None
            table = ast.literal_eval(node.value)
            assert isinstance(table, dict)
            return table
    return None


def _type_checking_block(tree: ast.Module) -> list[ast.stmt]:
    blocks = [
        node.body
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) <= 1, "one `if TYPE_CHECKING:` block per face"
    return blocks[0] if blocks else []


def _mirror(block: list[ast.stmt], package: str) -> tuple[dict[str, str], set[str]]:
    """``{name: module relative to package}`` of the block's imports, and the names it only annotates."""
    imported: dict[str, str] = {}
    annotated: set[str] = set()
    for stmt in block:
        if isinstance(stmt, ast.ImportFrom):
            assert stmt.level == 0 and stmt.module is not None, f"{package}: absolute imports in the mirror"
            assert stmt.module.startswith(package + "."), f"{package}: {stmt.module} is outside the package"
            for alias in stmt.names:
                # `Name as Name` marks an explicit re-export (mypy's no_implicit_reexport, pyright)
                assert alias.asname == alias.name, f"{package}: import {alias.name} as {alias.name}"
                assert alias.name not in imported, f"{package}: {alias.name} imported twice"
                imported[alias.name] = stmt.module.removeprefix(package + ".")
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            annotated.add(stmt.target.id)
        else:
            raise AssertionError(f"{package}: only imports and annotations belong in the TYPE_CHECKING mirror")
    return imported, annotated


def _eager_imports(tree: ast.Module, package: str) -> set[str]:
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + ".")
        for alias in node.names
    }


@pytest.mark.parametrize("package", FACES)
def test_all_equals_the_export_table_and_its_type_checking_mirror(package: str) -> None:
    tree = _init_tree(package)
    module = importlib.import_module(package)
    table = _export_table(tree)
    if table is None:  # an eager face (serving) or none (cli): __all__ is what it imports
        assert sorted(getattr(module, "__all__", [])) == sorted(_eager_imports(tree, package))
        return
    imported, annotated = _mirror(_type_checking_block(tree), package)
    assert imported == table, (
        f"{package}: the TYPE_CHECKING imports differ from _EXPORTS: "
        f"missing {sorted(table.keys() - imported.keys())}, extra {sorted(imported.keys() - table.keys())}, "
        f"other module {sorted(n for n in table.keys() & imported.keys() if table[n] != imported[n])}"
    )
    extra = EXTRA_PUBLIC.get(package, set())
    assert annotated == extra
    assert sorted(module.__all__) == sorted([*table, *extra])
    assert sorted(dir(module)) == sorted(table)


@pytest.mark.parametrize("package", FACES)
def test_the_lazy_getattr_is_hidden_from_type_checkers(package: str) -> None:
    # a __getattr__ that mypy sees turns every unknown name into Any; the faces bind it under `if not TYPE_CHECKING`
    tree = _init_tree(package)
    visible = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
        or (isinstance(node, ast.Assign) and any(_binds(t, "__getattr__") for t in node.targets))
    ]
    assert visible == [], f"{package}: __getattr__ is visible to type checkers"


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, ast.Tuple):
        return any(_binds(t, name) for t in target.elts)
    return False


def _public_names() -> list[tuple[str, str]]:
    return [(package, name) for package in FACES for name in getattr(importlib.import_module(package), "__all__", [])]


def test_mypy_sees_a_real_type_behind_every_public_name(tmp_path: Path) -> None:
    names = _public_names()
    lines = [f"import {package}" for package in FACES]
    first = len(lines) + 1
    lines += [f"reveal_type({package}.{name})" for package, name in names]
    # and a wrong call is a type error, which it was not while the faces were Any (issue 25)
    wrong = len(lines) + 1
    lines.append("shopsimrl_core.compare_runs(1, 2, 3, 4, 5)")
    probe = tmp_path / "probe_public_names.py"
    probe.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # the project's settings and cache: `make test` has just run mypy over the same packages, so this takes seconds
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary", str(probe)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    revealed: dict[int, str] = {}
    errors: dict[int, str] = {}
    for line in done.stdout.splitlines():
        if match := re.match(r".*probe_public_names\.py:(\d+): note: Revealed type is \"(.*)\"$", line):
            revealed[int(match.group(1))] = match.group(2)
        elif match := re.match(r".*probe_public_names\.py:(\d+): error: (.*)$", line):
            errors[int(match.group(1))] = match.group(2)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert len(revealed) == len(names), done.stdout + done.stderr
    any_names = [f"{package}.{name}" for i, (package, name) in enumerate(names) if revealed[first + i] == "Any"]
    assert any_names == [], f"mypy sees these public names as Any: {any_names}"
    assert wrong in errors, "mypy accepted shopsimrl_core.compare_runs(1, 2, 3, 4, 5)"
    assert set(errors) == {wrong}, done.stdout
