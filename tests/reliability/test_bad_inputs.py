"""Every malformed input of bad_inputs.CASES gets its exit code, exactly one line on stderr, and
writes nothing; and the line is the one docs/errors.md shows for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bad_inputs import CASES, SPLITS, Case, Servers, documented_rows, html_server, normalise, run_case, tls_server


@pytest.fixture(scope="module")
def servers(sandbox: Any) -> Iterator[Servers]:
    with html_server() as html, tls_server() as (tls, _):
        yield Servers(sandbox.env_url, sandbox.policy_url, sandbox.served_model, html, tls)


def test_the_catalogue_is_big_enough() -> None:
    assert len(CASES) >= 225
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gets_one_line_and_writes_nothing(case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    srv = request.getfixturevalue("servers") if case.needs_servers else None
    folder = tmp_path / "case"
    outcome = run_case(case, folder, srv)
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith(f"{case.program}: error[{case.code}]: "), lines[0]
    assert outcome.exit == case.exit, lines[0]
    assert outcome.changed == [], f"written: {outcome.changed}"
    rows = documented_rows()
    number = CASES.index(case) + 1
    row = next((r for r in rows if r.startswith(f"| {number} | ")), None)
    assert row is not None, "case missing from docs/errors.md; run tests/reliability/bad_inputs.py"
    shown = normalise(lines[0], folder, srv).replace("|", "\\|")
    assert row == f"| {number} | {case.what} | {case.exit} | `{shown}` |", (
        "docs/errors.md is stale; run tests/reliability/bad_inputs.py"
    )


def test_a_split_file_with_a_byte_order_mark_reads_like_one_without(tmp_path: Path) -> None:
    """Windows editors start UTF-8 files with a BOM; the split reader skips it (as the YAML and .env readers
    do) instead of refusing the file as "not valid JSON"."""
    import json

    from shopsimrl_core.runs.planning._splits import load_split_file

    plain, marked = tmp_path / "plain.json", tmp_path / "marked.json"
    plain.write_text(json.dumps(SPLITS), encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    want, got = load_split_file(plain).get("val"), load_split_file(marked).get("val")
    assert (got.task_ids, got.task_ids_sha256, got.persona) == (want.task_ids, want.task_ids_sha256, want.persona)
