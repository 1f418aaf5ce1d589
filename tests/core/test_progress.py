"""Progress: counters, the TTY bar, plain lines off a TTY, and a broken listener never stops a run."""

from __future__ import annotations

import io

from shopsimrl_core.runs.execution._progress import ConsoleProgress, ProgressTracker


def _drive(listener) -> ProgressTracker:
    tracker = ProgressTracker(3, [listener])
    tracker.preload(1, [1.0])
    tracker.start()
    tracker.start_wave(2)
    tracker.attempt("task-000002__sample-000", complete=False, reward=None, exhausted=False)
    tracker.attempt("task-000003__sample-000", complete=True, reward=0.5, exhausted=False)
    tracker.start_wave(1)
    tracker.attempt("task-000002__sample-000", complete=False, reward=None, exhausted=True)
    tracker.finish()
    return tracker


def test_counters() -> None:
    events = []
    _drive(events.append)
    last = events[-1]
    assert (last.kind, last.done, last.failed, last.attempts, last.failed_attempts) == ("finish", 2, 1, 3, 2)
    assert last.reward_mean == 0.75 and last.wave == 2


def test_plain_lines_off_a_tty() -> None:
    out, err = io.StringIO(), io.StringIO()
    _drive(ConsoleProgress(err, lines=out, tty=False))
    assert out.getvalue().splitlines() == [
        "[1/2] task-000002__sample-000 status=failed reward=None",
        "[2/2] task-000003__sample-000 status=completed reward=0.5",
        "[1/1] task-000002__sample-000 status=failed reward=None",
    ]
    assert (
        err.getvalue()
        .rstrip()
        .splitlines()[-1]
        .startswith("[################........] 2/3 done  1 failed  reward 0.750")
    )


def test_single_updating_line_on_a_tty() -> None:
    err, out = io.StringIO(), io.StringIO()
    _drive(ConsoleProgress(err, lines=out, tty=True, refresh_s=0.0, per_attempt_lines=False))
    text = err.getvalue()
    assert out.getvalue() == ""
    assert text.count("\n") == 1 and text.endswith("\n")  # redrawn in place, one newline at the end
    assert "\r\x1b[2K" in text and "2/3 done" in text


def test_broken_listener_is_contained() -> None:
    def broken(event):
        raise RuntimeError("display gone")

    tracker = _drive(broken)
    assert tracker.attempts == 3 and tracker.listener_errors[0] == "RuntimeError: display gone"
