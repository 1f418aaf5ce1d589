"""The code location: every definition of ``shopsimrl_dagster/defs/``, loaded in one place.

``workspace.yaml`` at the repository root points ``dagster dev`` here.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

__all__ = ["defs"]


@dg.definitions
def defs() -> dg.Definitions:
    """All assets, checks, jobs, sensors, schedules and resources of ``shopsimrl_dagster.defs``."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
