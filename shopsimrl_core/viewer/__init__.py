"""Viewer: ``shopsimrl view``, a read-only local web app over run directories.

Pages: runs, a run's filterable episode table, one transcript, task and checkpoint comparisons,
failure labels and SkillBanks.
"""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "create_app": "_app",
    "create_viewer_app": "_app",
    "serve": "_app",
    "ViewerRoots": "_paths",
    "PathRefused": "_paths",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
