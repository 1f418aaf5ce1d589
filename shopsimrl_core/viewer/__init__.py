"""Viewer: ``shopsimrl view``, a read-only local web app over run directories.

Pages: runs, a run's filterable episode table, one transcript, task and checkpoint comparisons,
failure labels and SkillBanks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "create_app": "_app",
    "create_viewer_app": "_app",
    "serve": "_app",
    "ViewerRoots": "_paths",
    "PathRefused": "_paths",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.viewer._app import create_app as create_app
    from shopsimrl_core.viewer._app import create_viewer_app as create_viewer_app
    from shopsimrl_core.viewer._app import serve as serve
    from shopsimrl_core.viewer._paths import PathRefused as PathRefused
    from shopsimrl_core.viewer._paths import ViewerRoots as ViewerRoots

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
