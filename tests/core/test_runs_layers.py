"""``shopsimrl_core/runs/`` is layered: a module imports only its own layer and the layers below it.

Following one config from the CLI into the evaluator then moves down the layers — configuration,
planning, storage, leases and endpoints, execution — never back up (issue 25: "a config followed
from the CLI into the evaluator moves down the layers, not back and forth").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUNS = Path(__file__).resolve().parents[2] / "shopsimrl_core" / "runs"
# rank of each layer; equal ranks are siblings and may not import each other
LAYERS = {"config": 1, "planning": 2, "storage": 3, "leases": 4, "endpoints": 4, "execution": 5}


def _runs_imports(path: Path) -> set[str]:
    """The layers under ``shopsimrl_core.runs`` a module imports (function-level imports included)."""
    layers: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["shopsimrl_core", "runs"] and len(parts) > 2:
                layers.add(parts[2])
    return layers


def test_every_runs_module_lives_in_a_layer() -> None:
    stray = sorted(p.name for p in RUNS.glob("*.py") if p.name != "__init__.py")
    assert stray == [], f"put these modules into one of the layers {sorted(LAYERS)}"
    assert sorted(p.name for p in RUNS.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(LAYERS)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_imports_only_itself_and_the_layers_below(layer: str) -> None:
    wrong: dict[str, set[str]] = {}
    for module in sorted((RUNS / layer).glob("*.py")):
        for imported in _runs_imports(module):
            assert imported in LAYERS, f"{module.name} imports shopsimrl_core.runs.{imported}, which is no layer"
            if imported != layer and LAYERS[imported] >= LAYERS[layer]:
                wrong.setdefault(module.name, set()).add(imported)
    assert wrong == {}, f"runs/{layer} imports a layer at or above its own: {wrong}"
