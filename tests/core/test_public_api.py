"""The curated public surface: every name listed in ``__all__`` resolves to a real object."""

from __future__ import annotations

import importlib
import importlib.resources

import pytest


@pytest.mark.parametrize("package", ["shopsimrl_core", "shopsimrl_dagster"])
def test_every_public_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ lists names that do not resolve: {missing}"


def test_private_modules_are_not_the_public_path() -> None:
    import shopsimrl_core

    # Re-exported objects keep their defining module; the public path is the package itself.
    assert shopsimrl_core.RunStore is importlib.import_module("shopsimrl_core.runs._store").RunStore
    assert "RunStore" in dir(shopsimrl_core)
    with pytest.raises(AttributeError, match="no attribute 'NotAThing'"):
        shopsimrl_core.NotAThing  # noqa: B018


LAYERS = ("adapters", "episode", "runs", "analysis", "skills", "export", "cli", "documents")


def test_the_layers_are_subpackages_with_a_lazy_public_face() -> None:
    import shopsimrl_core

    root = importlib.resources.files("shopsimrl_core")
    for layer in LAYERS:
        assert root.joinpath(layer, "__init__.py").is_file(), layer
        face = importlib.import_module(f"shopsimrl_core.{layer}")
        exports = getattr(face, "_EXPORTS", {})
        for name, module in exports.items():
            value = getattr(face, name)
            assert getattr(importlib.import_module(f"shopsimrl_core.{layer}.{module}"), name) is value, name
    # every top-level name that comes from a layer is the layer's object
    for name, where in shopsimrl_core._EXPORTS.items():
        if where in LAYERS:
            assert getattr(shopsimrl_core, name) is getattr(importlib.import_module(f"shopsimrl_core.{where}"), name)


def test_importing_the_core_stays_cheap() -> None:
    import subprocess
    import sys

    # every face, the eager serving one included: the TYPE_CHECKING mirrors must import nothing at run time
    faces = ", ".join(["shopsimrl_core", *(f"shopsimrl_core.{layer}" for layer in LAYERS), "shopsimrl_core.serving",
                       "shopsimrl_core.viewer", "shopsimrl_core.skills.trace2skill"])
    code = (f"import sys, {faces};"
            "print(sorted(m for m in ('polars', 'httpx', 'numpy', 'dagster', 'starlette') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_no_module_over_500_lines_without_a_reason_at_its_top() -> None:
    import ast
    from pathlib import Path

    core = Path(__file__).resolve().parents[2] / "shopsimrl_core"
    long = set()
    for path in sorted(core.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 520 and "Why one module" not in (ast.get_docstring(ast.parse(text)) or ""):
            long.add(path.relative_to(core).as_posix())
    assert long == set(), (
        'split these modules or say at the top why they stay whole ("Why one module …")'
    )
