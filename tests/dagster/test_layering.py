"""The Dagster layer only calls the core: no HTTP client of its own, no private Dagster import without a reason.

Every request the pipeline sends (health checks, preflight, rollouts, the analyst) goes through
``shopsimrl_core``'s HTTP code; ``shopsimrl_dagster`` imports none of the HTTP client libraries.
A private ``dagster._…`` import is allowed only where Dagster 1.13 exports nothing public for the job,
and then the import line says why: ``# private: <reason>``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "shopsimrl_dagster"

HTTP_CLIENTS = ("urllib", "urllib3", "http", "httpx", "httpcore", "aiohttp", "requests")
"""Top-level modules of HTTP clients (``http`` covers ``http.client`` and ``http.server``)."""
NOT_HTTP = ("urllib.parse",)
"""Allowed although under ``urllib``: URL string parsing, no I/O (the registry splits endpoint URLs with it)."""
REASON = re.compile(r"#\s*private:\s*\S")


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: inside the package
        return []
    base = node.module or ""
    # `from dagster import _core` imports a private module as much as `import dagster._core` does.
    return [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name.startswith("_"))]


def layering_problems(root: Path) -> list[str]:
    """``path:line: problem`` for each HTTP-client import and each private Dagster import without a reason."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            where = f"{path.relative_to(root.parent).as_posix()}:{node.lineno}"
            statement = "\n".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)])
            for name in _imported(node):
                top = name.split(".")[0]
                if top in HTTP_CLIENTS and not any(name == ok or name.startswith(ok + ".") for ok in NOT_HTTP):
                    problems.append(f"{where}: imports {name} (HTTP belongs to shopsimrl_core)")
                if name.startswith("dagster._") and not REASON.search(statement):
                    problems.append(f"{where}: imports private {name} without a '# private: <reason>' comment")
    return problems


def test_the_dagster_layer_has_no_http_client_and_no_unexplained_private_dagster_import() -> None:
    assert layering_problems(PACKAGE) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import httpx\n", "imports httpx"),
        ("def f():\n    import urllib.request\n", "imports urllib.request"),
        ("from http.client import HTTPConnection\n", "imports http.client"),
        ("import aiohttp, requests\n", "imports aiohttp"),
        ("from dagster._core.events import EngineEventData\n", "private dagster._core.events"),
        ("from dagster import _check\n", "private dagster._check"),
        ("from dagster._core.events import EngineEventData  # private:\n", "private dagster._core.events"),
        ("from dagster._core.launcher import (  # not a reason\n    WorkerStatus,\n)\n", "private dagster._core"),
    ],
)
def test_the_scan_finds_what_it_forbids(tmp_path: Path, source: str, found: str) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(source, encoding="utf-8")
    [problem] = [p for p in layering_problems(tmp_path / "pkg") if found in p]
    assert problem.startswith("pkg/mod.py:")


def test_the_scan_accepts_what_it_allows(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        "from urllib.parse import urlsplit\n"
        "import dagster as dg\n"
        "from dagster._core.events import EngineEventData  # private: engine-event data is not exported\n"
        "from dagster._core.launcher import (  # private: not exported\n    WorkerStatus,\n)\n"
        "from .http import thing\n",
        encoding="utf-8",
    )
    assert layering_problems(tmp_path / "pkg") == []
