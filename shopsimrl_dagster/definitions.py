"""The code location: the defs folder ``shopsimrl_dagster/defs/``, loaded the way ``dg`` loads a project.

``workspace.yaml`` at the repository root, and ``dg dev`` / ``dg check defs`` through ``[tool.dg]``
in pyproject.toml (``shopsimrl_dagster/dg.toml`` for an installed package), point at ``defs``. It
calls ``dg.load_from_defs_folder``, so every module of the folder contributes: ``defs/location.py``
everything the pipeline settings decide, and any file ``dg scaffold defs …`` adds its own
definitions. ``build_definitions`` builds the pipeline's definitions for an explicit settings object
(tests, benchmarks) without the folder scan.
"""

from pathlib import Path

import dagster as dg

from .defs.location import build_definitions
from .settings import pipeline_config_path

__all__ = ["defs", "build_definitions"]

_DEFS_FOLDER = Path(__file__).resolve().parent / "defs"
_CACHE: dict[tuple[object, ...], dg.Definitions] = {}


def _version() -> tuple[object, ...]:
    # What the loaded definitions depend on: the settings file in use and the files of the defs folder.
    stamps: list[object] = []
    for path in [pipeline_config_path(), *sorted(_DEFS_FOLDER.rglob("*"))]:
        try:
            stamps.append((str(path), path.stat().st_mtime_ns))
        except OSError:
            stamps.append((str(path), -1))
    return tuple(stamps)


@dg.definitions
def defs() -> dg.Definitions:
    """All definitions of the defs folder: the pipeline's (for the settings file in use) and any scaffolded ones.

    Loaded once per version of the settings file and of the folder's files: Dagster reconstructs the
    repository several times per run, and a rescan costs ~0.2 s each time (measured on 2 busy cores).
    """
    key = _version()
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = dg.load_from_defs_folder(path_within_project=Path(__file__).resolve().parent)
    return _CACHE[key]
