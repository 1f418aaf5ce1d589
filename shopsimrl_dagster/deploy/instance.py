"""A PostgreSQL-backed Dagster instance folder: the project's template plus ``dagster-postgres.yaml``.

    export DAGSTER_PG_HOST=db.internal DAGSTER_PG_PORT=5432 DAGSTER_PG_USER=dagster DAGSTER_PG_DB=dagster
    export DAGSTER_PG_PASSWORD=…            # from your secret store
    python -m shopsimrl_dagster.deploy.instance /srv/dagster_home   # prints the folder; DAGSTER_HOME=it

The laptop default stays ``shopsimrl_dagster.instance.prepare_dagster_home`` (SQLite in the folder).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from shopsimrl_core import ConfigError, write_text_atomic

from ..instance import INSTANCE_TEMPLATE

__all__ = [
    "POSTGRES_INSTANCE_OVERLAY",
    "POSTGRES_ENV_VARS",
    "postgres_instance_yaml",
    "missing_postgres_env",
    "prepare_postgres_home",
]

POSTGRES_INSTANCE_OVERLAY = INSTANCE_TEMPLATE.with_name("dagster-postgres.yaml")
POSTGRES_ENV_VARS = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB")
"""Read by every process that opens the instance (webserver, daemon, run and Celery workers)."""


def postgres_instance_yaml() -> str:
    """The text of the PostgreSQL instance's ``dagster.yaml``: the project template, then the storage block.

    Raises:
        ConfigError: the two files define the same top-level key (the overlay must only add storage).
    """
    base = INSTANCE_TEMPLATE.read_text(encoding="utf-8")
    overlay = POSTGRES_INSTANCE_OVERLAY.read_text(encoding="utf-8")
    shared = set(yaml.safe_load(base) or {}) & set(yaml.safe_load(overlay) or {})
    if shared:
        raise ConfigError(
            f"{POSTGRES_INSTANCE_OVERLAY}: {', '.join(sorted(shared))}: also set in {INSTANCE_TEMPLATE}; "
            "keep run settings in the template and only storage in the overlay",
            code="pipeline-config-invalid",
        )
    return f"{base.rstrip()}\n\n# --- {POSTGRES_INSTANCE_OVERLAY.name} ---\n{overlay}"


def missing_postgres_env(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The connection variables of :data:`POSTGRES_ENV_VARS` that are unset (the password may be empty)."""
    return [
        name
        for name in POSTGRES_ENV_VARS
        if name not in environ or (name != "DAGSTER_PG_PASSWORD" and not environ[name])
    ]


def prepare_postgres_home(home: str | Path) -> Path:
    """Create *home* and write its ``dagster.yaml`` for the PostgreSQL instance; return the folder.

    The file holds ``{env: …}`` references only; the connection values are read by each process.
    Rewritten atomically when it differs, so a running webserver never reads half a file.
    """
    target = Path(home).expanduser().resolve()
    target.mkdir(parents=True, exist_ok=True)
    text = postgres_instance_yaml()
    config = target / "dagster.yaml"
    if not config.exists() or config.read_text(encoding="utf-8") != text:
        write_text_atomic(config, text)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m shopsimrl_dagster.deploy.instance HOME``: prepare *HOME*, print it; exit 2 on bad use."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m shopsimrl_dagster.deploy.instance DAGSTER_HOME", file=sys.stderr)
        return 2
    missing = missing_postgres_env()
    if missing:
        print(
            f"deploy.instance: {', '.join(missing)} not set; export the PostgreSQL connection settings "
            "(docs/scaling.md) before preparing the instance",
            file=sys.stderr,
        )
        return 2
    print(prepare_postgres_home(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
