"""The trace's clock readings: ``round_ms`` agrees with ``round(x, 3)``, ``utc_now`` with ``isoformat``."""

from __future__ import annotations

import random
import re
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from shopsimrl_core import _clock
from shopsimrl_core._clock import round_ms, utc_now


def test_round_ms_matches_round_to_three_decimals_on_durations() -> None:
    rng = random.Random(11)
    values = [0.0, 0.0004, 1.0, 2.5, 123456.789012]
    values += [rng.random() * 10 ** rng.randint(-2, 6) for _ in range(50_000)]
    mismatched = [v for v in values if round_ms(v) != round(v, 3)]
    assert mismatched == []


@pytest.mark.parametrize("tie", [0.0005, 0.0015, 2.0025, 999.9995])
def test_round_ms_on_a_written_half_stays_within_one_microsecond(tie: float) -> None:
    # round(x, 3) rounds the double's exact value (0.0005 is a hair above the half: 0.001); this
    # rounds x * 1000, which may land on the half itself and go to even (0.0). Either is a
    # microsecond-rounded duration.
    assert abs(round_ms(tie) - round(tie, 3)) <= 0.001 + 1e-12


@pytest.mark.parametrize("value", [0.1234, 17.0, 2_000.0004, 59_999.9996])
def test_round_ms_returns_at_most_three_decimals(value: float) -> None:
    text = repr(round_ms(value))
    assert len(text.partition(".")[2]) <= 3, text


def test_utc_now_has_the_isoformat_shape_and_the_current_time() -> None:
    before = datetime.now(UTC)
    text = utc_now()
    after = datetime.now(UTC)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", text), text
    parsed = datetime.fromisoformat(text)
    assert before - timedelta(microseconds=1) <= parsed <= after


def test_utc_now_formats_a_new_second_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    # 23:59:59.999999 then the next instant: the cached date must not outlive its second
    moments = iter([1_798_761_599_999_999_000, 1_798_761_600_000_000_000, 1_798_761_600_000_001_000])
    monkeypatch.setattr(_clock.time, "time_ns", lambda: next(moments))
    assert utc_now() == "2026-12-31T23:59:59.999999+00:00"
    assert utc_now() == "2027-01-01T00:00:00.000000+00:00"
    assert utc_now() == "2027-01-01T00:00:00.000001+00:00"


def test_utc_now_from_many_threads_never_mixes_seconds() -> None:
    seen: list[tuple[float, str, float]] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(2_000):
            low = time.time()
            text = utc_now()
            high = time.time()
            with lock:
                seen.append((low, text, high))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for low, text, high in seen:
        stamp = datetime.fromisoformat(text).timestamp()
        assert low - 2e-6 <= stamp <= high + 2e-6, (low, text, high)
