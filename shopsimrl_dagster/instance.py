"""The project's Dagster instance folder (DAGSTER_HOME) and its ``dagster.yaml``.

``configs/pipeline/dagster.yaml`` is the template (pool limits, telemetry off); this module copies it
into the instance folder, ``.dagster_home/`` in the repository unless ``SHOPSIMRL_DAGSTER_HOME``
names another. ``make demo`` writes materializations there and ``make ui`` serves the UI from there,
so the UI shows what the demo produced.

    python -m shopsimrl_dagster.instance      # prints the prepared folder
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .settings import REPO_ROOT

__all__ = ["DAGSTER_HOME_ENV", "INSTANCE_TEMPLATE", "default_dagster_home", "prepare_dagster_home"]

DAGSTER_HOME_ENV = "SHOPSIMRL_DAGSTER_HOME"
INSTANCE_TEMPLATE = REPO_ROOT / "configs" / "pipeline" / "dagster.yaml"


def default_dagster_home() -> Path:
    """``$SHOPSIMRL_DAGSTER_HOME`` when set, else ``<repo>/.dagster_home``."""
    override = os.environ.get(DAGSTER_HOME_ENV)
    return Path(override).expanduser().resolve() if override else REPO_ROOT / ".dagster_home"


def prepare_dagster_home(home: str | Path | None = None) -> Path:
    """Create the instance folder and install the project's ``dagster.yaml`` in it; return the folder.

    The template always wins (it is the project's configuration, not a user file), and the copy is
    atomic so a running webserver never reads half a file.
    """
    target = Path(home).expanduser().resolve() if home is not None else default_dagster_home()
    target.mkdir(parents=True, exist_ok=True)
    config = target / "dagster.yaml"
    if not config.exists() or config.read_bytes() != INSTANCE_TEMPLATE.read_bytes():
        tmp = target / ".dagster.yaml.tmp"
        shutil.copyfile(INSTANCE_TEMPLATE, tmp)
        tmp.replace(config)
    return target


if __name__ == "__main__":
    print(prepare_dagster_home())
