"""One backoff helper for every retry loop of the core (issue 25: "one retry helper")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shopsimrl_core._backoff import Backoff
from shopsimrl_core.adapters._model import backoff_delay

ROOT = Path(__file__).resolve().parents[2]


def test_the_schedules() -> None:
    assert [Backoff(0.1, 2.0, "none").delay(n) for n in range(1, 8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert Backoff(0.5, 8.0).delay(1, 0.0) == 0.25 and Backoff(0.5, 8.0).delay(10, 1.0) == 8.0
    assert Backoff(0.5, 8.0).delay(0, 0.5) == Backoff(0.5, 8.0).delay(1, 0.5)  # n ≤ 1 is the first wait
    # the model client's published schedule (runtime-semantics §7.2), a = n − 1
    assert [backoff_delay(a, 1.0, 0.0) for a in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff_delay(6, 1.0, 0.5) == 30.5 and backoff_delay(0, 0.25, 0.999) == pytest.approx(0.25 * 1.999)


def test_no_retry_loop_doubles_its_own_delay() -> None:
    # a hand-written `delay * 2` or `b * 2 ** n` outside the helper is a second schedule nobody documents
    pattern = re.compile(r"\*\s*2\s*\*\*|\bdelay\s*\*\s*2\b|\*=\s*2\b")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("shopsimrl_core", "shopsimrl_dagster", "shopsim_sandbox")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "_backoff.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line.split("#", 1)[0])
    ]
    assert found == [], f"use shopsimrl_core._backoff.Backoff: {found}"
