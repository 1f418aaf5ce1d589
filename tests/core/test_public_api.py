"""The curated public surface: every name listed in ``__all__`` resolves to a real object."""

from __future__ import annotations

import importlib

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
