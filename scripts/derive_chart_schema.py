#!/usr/bin/env python3
"""Derive the facts of a Helm chart's ``values.schema.json`` into our key-path file, and check values against it.

``derive SCHEMA -o OUT``: reads a local copy of the chart's JSON Schema (``helm pull dagster/dagster --version V
--untar`` puts it at ``dagster/values.schema.json``) and writes one entry per value path: its JSON types, enum,
``required`` keys, whether unknown keys are allowed, the Kubernetes object it passes through, and the schema's
``type``-conditional requirements. ``$ref``/``anyOf`` are resolved; titles and descriptions are not carried over.

``check VALUES [--against OUT]``: validates a values file against such a derived file the way ``helm`` would
see it merged with the chart's own defaults (see :func:`check_values`); prints one line per problem, exit 1.

Why one module: the derivation and the check share the path syntax and are only ever used together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DERIVED = REPO / "deploy" / "helm" / "chart-schema-1.13.json"
SUMMARY = "Derive a Helm chart's values.schema.json into key-path facts; check values against them."
ROOT = "."  # the path of the values document itself
_PY_TO_JSON = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (type(None), "null"),
               (dict, "object"), (list, "array"))


class SchemaShapeError(ValueError):
    """The schema uses a construct this derivation does not understand (named in the message)."""


class BadInputError(ValueError):
    """An input file is unreadable, does not parse or has the wrong shape: one line naming file and fix."""


def _child(path: str, key: str) -> str:
    return key if path == ROOT else f"{path}.{key}"


class _Deriver:
    """Walks a JSON Schema from its root and collects one entry per value path."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = {**schema.get("definitions", {}), **schema.get("$defs", {})}
        self.paths: dict[str, dict[str, Any]] = {}

    def _resolve(self, node: dict[str, Any], chain: tuple[str, ...]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Follows local ``$ref`` chains; an external ``$ref`` (a Kubernetes definition) stays as ``k8s``."""
        while isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in self.defs:
                raise SchemaShapeError(f"$ref {node['$ref']} names no definition")
            if name in chain:
                raise SchemaShapeError(f"recursive $ref {name} (via {' > '.join(chain)})")
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            node, chain = {**self.defs[name], **siblings}, (*chain, name)
        return node, chain

    def _alternatives(self, node: dict[str, Any], chain: tuple[str, ...]) -> Iterator[tuple[dict[str, Any], tuple]]:
        node, chain = self._resolve(node, chain)
        branches = node.get("anyOf") or node.get("oneOf")
        if branches:
            for branch in branches:
                yield from self._alternatives(branch, chain)
        else:
            yield node, chain

    def walk(self, node: dict[str, Any], path: str, chain: tuple[str, ...], guaranteed: bool) -> None:
        """Records *path* (every alternative of *node* merged) and descends into properties, maps and items."""
        alternatives = list(self._alternatives(node, chain))
        entry: dict[str, Any] = {}
        types: list[str] = []
        enums: list[Any] | None = []
        objects = []
        for alt, _ in alternatives:
            declared = alt.get("type", "object" if "properties" in alt else None)
            for kind in [declared] if isinstance(declared, str) else (declared or []):
                if kind not in types:
                    types.append(kind)
            allowed = alt.get("enum", [alt["const"]] if "const" in alt else None)
            if enums is not None and alt.get("type") != "null":
                enums = None if allowed is None else enums + [v for v in allowed if v not in enums]
            if declared == "object" or "properties" in alt:
                objects.append(alt)
        if types:
            entry["type"] = types
        if enums:
            entry["enum"] = enums
        for alt, _ in alternatives:
            external = alt.get("$ref")
            if isinstance(external, str) and not external.startswith("#/"):
                entry["k8s"] = external.rsplit("/definitions/", 1)[-1]
            for bound in ("minItems", "exclusiveMinimum", "minimum", "maximum"):
                if bound in alt:
                    entry[bound] = alt[bound]
        guaranteed = guaranteed and "null" not in types  # a null default holds no required keys
        if objects:
            self._object(entry, objects, path)
            entry["guaranteed"] = guaranteed
        self.paths[path] = entry
        single = len(objects) == 1
        for alt, alt_chain in alternatives:
            if "if" in alt or "then" in alt:
                raise SchemaShapeError(f"{path}: a bare if/then (only allOf of if/then is understood)")
            if "items" in alt:
                self.walk(alt["items"], f"{path}[]", alt_chain, False)
            extra = alt.get("additionalProperties")
            if isinstance(extra, dict):
                self.walk(extra, f"{path}.*", alt_chain, False)
            for key, sub in alt.get("properties", {}).items():
                required = key in alt.get("required", [])
                self.walk(sub, _child(path, key), alt_chain, guaranteed and required and single)

    @staticmethod
    def _object(entry: dict[str, Any], objects: list[dict[str, Any]], path: str) -> None:
        """Adds an object's ``required``, ``additional`` and ``conditions`` (all its alternatives merged)."""
        required = [set(o.get("required", [])) for o in objects]
        common = sorted(set.intersection(*required)) if required else []
        if common:
            entry["required"] = [k for k in objects[0].get("required", []) if k in common]
        entry["additional"] = any(o.get("additionalProperties", True) is not False for o in objects)
        conditions = []
        for obj in objects:
            for rule in obj.get("allOf", []):
                when = {k: v["const"] for k, v in rule.get("if", {}).get("properties", {}).items() if "const" in v}
                then = {k: v["required"] for k, v in rule.get("then", {}).get("properties", {}).items()
                        if "required" in v}
                if not when or not then:
                    raise SchemaShapeError(f"{path}: an allOf rule other than 'if <key> is const then require'")
                conditions.append({"when": when, "require": then})
        if conditions:
            entry["conditions"] = conditions


def derive(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Returns ``{path: facts}`` for every value path of *schema*, root first (``.``), in schema order.

    Paths are dotted keys; ``[]`` is any list item and ``*`` any key of a map. ``guaranteed`` is true where
    the chart's own defaults must already hold the object's required keys: the object lies on a chain of
    required, non-nullable properties from the root (the chart's defaults pass its own schema).
    """
    deriver = _Deriver(schema)
    deriver.walk(schema, ROOT, (), True)
    return deriver.paths


def _keys(paths: dict[str, dict[str, Any]], path: str) -> list[str]:
    """The named keys the schema gives the object at *path*."""
    prefix = _child(path, "")
    return [p[len(prefix):] for p in paths
            if p != ROOT and p.startswith(prefix) and not any(c in p[len(prefix):] for c in ".[*")]


def _json_type(value: Any) -> str:
    return next(name for kind, name in _PY_TO_JSON if isinstance(value, kind))


def check_values(values: Any, paths: dict[str, dict[str, Any]]) -> list[str]:
    """Problems of a values document against derived *paths*; empty when the chart's schema accepts it.

    Helm validates our values merged with the chart's defaults: maps merge key by key, lists replace. So
    every key we set must exist (where the schema closes the object) with an accepted type and enum value;
    required keys must be ours where the chart's defaults are not bound to hold them (list items, nullable
    or optional objects); and a ``type`` we set must come with the sub-object the schema then requires.
    """
    problems: list[str] = []

    def visit(value: Any, shown: str, path: str) -> None:
        entry = paths[path]
        kinds = entry.get("type", [])
        kind = _json_type(value)
        if kinds and kind not in kinds and not (kind == "integer" and "number" in kinds):
            problems.append(f"{shown}: a {kind} ({value!r}), the chart takes {' or '.join(kinds)}")
            return
        if "enum" in entry and value is not None and value not in entry["enum"]:
            options = ", ".join(str(v) for v in entry["enum"])
            problems.append(f"{shown}: {value!r} is not one of {options}")
        if isinstance(value, list) and f"{path}[]" in paths:
            for index, item in enumerate(value):
                visit(item, f"{shown}[{index}]", f"{path}[]")
        if not isinstance(value, dict):
            return
        for key, sub in value.items():
            named, mapped = _child(path, str(key)), f"{path}.*"
            label = _child(shown, str(key)) if shown != ROOT else str(key)
            if named in paths:
                visit(sub, label, named)
            elif mapped in paths:
                visit(sub, label, mapped)
            elif entry.get("additional") is False:
                problems.append(f"{label}: not a key the chart takes here (it takes: {', '.join(_keys(paths, path))})")
        if not entry.get("guaranteed", False):
            missing = [k for k in entry.get("required", []) if k not in value]
            if missing:
                problems.append(f"{shown}: missing required {', '.join(missing)}")
        for rule in entry.get("conditions", []):
            if all(value.get(k) == v for k, v in rule["when"].items()):
                for sub, keys in rule["require"].items():
                    have = value.get(sub) if isinstance(value.get(sub), dict) else {}
                    for key in keys:
                        if key not in have and not paths.get(_child(_child(path, sub), key), {}).get("guaranteed"):
                            when = ", ".join(f"{k}: {v}" for k, v in rule["when"].items())
                            problems.append(f"{_child(shown, sub)}: missing {key}, required with {when}")

    visit(values, ROOT, ROOT)
    return problems


def _write_atomic(path: Path, text: str) -> None:
    """Writes *text* to *path* through a temporary file in the same folder: never a half-written file."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)


def render(paths: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    """The derived file's text: ``meta`` then ``paths``, one path per line (reviewable diffs on a bump)."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in paths.items()]
    return ('{\n "meta": ' + json.dumps(meta, indent=2).replace("\n", "\n ") + ',\n "paths": {\n'
            + ",\n".join(lines) + "\n }\n}\n")


def _load(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8"
        raise BadInputError(f"{path}: cannot read the {what} ({reason}); give the path of a readable file") from exc
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0]
        raise BadInputError(f"{path}: the {what} does not parse ({first}); fix or re-download it") from exc


def main(argv: list[str] | None = None) -> int:
    """Runs ``derive`` or ``check``; returns the exit code (problems: 1, bad input: a one-line message, 2)."""
    parser = argparse.ArgumentParser(description=SUMMARY)
    verbs = parser.add_subparsers(dest="verb", required=True)
    make = verbs.add_parser("derive", help="write the derived key-path file from a values.schema.json")
    make.add_argument("schema", type=Path, help="a local copy of the chart's values.schema.json")
    make.add_argument("-o", "--output", type=Path, default=DEFAULT_DERIVED)
    make.add_argument("--chart-version", required=True, help="the chart version the schema belongs to")
    make.add_argument("--source", required=True, help="where the schema came from (repository@commit, archive)")
    test = verbs.add_parser("check", help="check a values file against a derived key-path file")
    test.add_argument("values", type=Path)
    test.add_argument("--against", type=Path, default=DEFAULT_DERIVED)
    args = parser.parse_args(argv)
    try:
        if args.verb == "derive":
            schema = _load(args.schema, "chart schema")
            if not isinstance(schema, dict) or "properties" not in schema:
                raise BadInputError(f"{args.schema}: not a JSON Schema with top-level properties")
            try:
                paths = derive(schema)
            except SchemaShapeError as exc:
                raise BadInputError(f"{args.schema}: {exc}") from exc
            meta = {"chart": "dagster", "chart_version": args.chart_version, "source": args.source,
                    "generated_by": "scripts/derive_chart_schema.py derive", "path_syntax":
                    "dotted keys; [] = any list item; * = any key of a map; . = the document"}
            _write_atomic(args.output, render(paths, meta))
            print(f"{args.output}: {len(paths)} paths")
            return 0
        derived = _load(args.against, "derived chart schema")
        if not isinstance(derived, dict) or not isinstance(derived.get("paths"), dict):
            raise BadInputError(f"{args.against}: no 'paths' object; regenerate it with 'derive'")
        problems = check_values(_load(args.values, "values file"), derived["paths"])
    except BadInputError as exc:
        print(exc, file=sys.stderr)
        return 2
    for problem in problems:
        print(f"{args.values}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
