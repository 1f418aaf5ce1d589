#!/usr/bin/env python3
"""Regenerate docs/schemas/ from the document models (``--check``: exit 1 when they are stale)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from shopsimrl_core.documents._schemas import stale_schemas, write_schemas  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` only compare) the JSON Schemas; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 listing stale files")
    args = parser.parse_args(argv)
    folder = REPO / "docs" / "schemas"
    if args.check:
        stale = stale_schemas(folder)
        for name in stale:
            print(f"docs/schemas/{name}: stale; run scripts/generate_schemas.py", file=sys.stderr)
        return 1 if stale else 0
    for path in write_schemas(folder):
        print(path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
