"""JSON Schemas of the document models, as written into ``docs/schemas/``.

One file per document, named after its ``schema_version`` (``shopsimrl-episode-v4.schema.json``),
generated from the pydantic models so the schema and the reader never disagree.
"""

from __future__ import annotations

from pathlib import Path

from shopsimrl_core._hashing import dumps_pretty, write_text_atomic
from shopsimrl_core.documents._registry import DOCUMENTS

__all__ = ["render_schemas", "write_schemas", "stale_schemas"]


def render_schemas() -> dict[str, str]:
    """``file name -> JSON text`` of every document's schema (validation mode, pretty, trailing newline)."""
    out: dict[str, str] = {}
    for version, model in sorted(DOCUMENTS.items()):
        schema = model.model_json_schema(mode="validation")
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"{version}.schema.json",
                  "description": (model.__doc__ or "").strip().splitlines()[0], **schema}
        out[f"{version}.schema.json"] = dumps_pretty(schema)
    return out


def write_schemas(folder: Path) -> list[Path]:
    """Write every schema into *folder* and remove schema files of documents that no longer exist."""
    rendered = render_schemas()
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.schema.json"):
        if stale.name not in rendered:
            stale.unlink()
    return [write_text_atomic(folder / name, text) for name, text in rendered.items()]


def stale_schemas(folder: Path) -> list[str]:
    """Names of schema files in *folder* that are missing, different or left over (empty: current)."""
    rendered = render_schemas()
    present = {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.schema.json")}
    return sorted({n for n, text in rendered.items() if present.get(n) != text} | (set(present) - set(rendered)))
