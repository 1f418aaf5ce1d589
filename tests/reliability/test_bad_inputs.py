"""Every malformed input of bad_inputs.CASES gets its exit code, exactly one line on stderr, and
writes nothing; and the line is the one docs/errors.md shows for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bad_inputs import CASES, Case, Servers, documented_rows, html_server, normalise, run_case, tls_server


@pytest.fixture(scope="module")
def servers(sandbox: Any) -> Iterator[Servers]:
    with html_server() as html, tls_server() as (tls, _):
        yield Servers(sandbox.env_url, sandbox.policy_url, sandbox.served_model, html, tls)


def test_the_catalogue_is_big_enough() -> None:
    assert len(CASES) >= 140
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gets_one_line_and_writes_nothing(case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    srv = request.getfixturevalue("servers") if case.needs_servers else None
    folder = tmp_path / "case"
    outcome = run_case(case, folder, srv)
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith(f"shopsimrl: error[{case.code}]: "), lines[0]
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
