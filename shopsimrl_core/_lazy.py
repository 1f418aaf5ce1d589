"""Lazy re-exports for the package faces of ``shopsimrl_core``.

Each layer's ``__init__`` names its public symbols and the private module that defines them; the
symbol is imported on first access. This keeps ``import shopsimrl_core.runs`` cheap: ``shopsimrl plan``
must not pay for polars or an HTTP stack it never uses.

Every face mirrors its table under ``if TYPE_CHECKING:`` with real imports (``from
shopsimrl_core.runs.storage._store import RunStore as RunStore``), and binds the returned ``__getattr__``
only when not type checking. Type checkers and editors therefore see each public name's real type,
and a name missing from the mirror is an error rather than ``Any``. ``tests/core/test_typed_api.py``
keeps the table, the mirror and ``__all__`` equal and runs mypy on a probe of every public name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_face(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """Return ``(__getattr__, __dir__, __all__)`` for a package that re-exports ``exports`` lazily.

    ``exports`` maps a public name to the module (relative to ``package``) that defines it. The
    returned ``__getattr__`` imports that module on first use and caches the value in the package.
    """
    names = sorted(exports)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return list(names)

    return __getattr__, __dir__, names
