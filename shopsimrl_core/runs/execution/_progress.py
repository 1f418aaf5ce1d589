"""Progress of a run: counters, a console display and a callback hook.

The evaluator reports every finished attempt to a :class:`ProgressTracker`, which keeps the
counts (done / failed / reward so far) and forwards a :class:`ProgressEvent` to listeners: the
console display of the CLI, or any callable (the Dagster layer logs through one).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TextIO

__all__ = ["ProgressEvent", "ProgressTracker", "ConsoleProgress", "notice_sink"]


@dataclass(frozen=True)
class ProgressEvent:
    """A snapshot after something happened in the run.

    ``kind``: ``start`` (before the first wave), ``wave`` (a wave begins), ``attempt`` (one attempt
    stored), ``notice`` (a one-line message in ``message``: resets waiting for a slot, an outage
    paused the run, leases of an earlier invocation released) or ``finish`` (all waves over, or
    interrupted).
    """

    kind: str
    total: int
    """Planned episodes."""
    done: int
    """Planned episodes that are complete (earlier invocations included)."""
    failed: int
    """Episodes whose latest attempt failed and that have no attempt left in this invocation."""
    attempts: int
    """Attempts stored by this invocation."""
    failed_attempts: int
    """Failed attempts stored by this invocation."""
    reward_mean: float | None
    """Mean ``final.reward`` over complete planned episodes so far."""
    wave: int
    wave_done: int
    wave_total: int
    elapsed_s: float
    eta_s: float | None
    episode_id: str | None = None
    status: str | None = None
    reward: float | None = None
    message: str | None = None
    """The text of a ``notice`` event (untrusted server text is cut to one line); a notice whose ``status`` is
    ``serving`` is about the run's launched inference server (started, ready, stopped, orphan stopped)."""

    def to_dict(self) -> dict[str, Any]:
        """The event as a JSON-ready dict."""
        return asdict(self)


def notice_sink(listener: Callable[[ProgressEvent], Any] | None, *, status: str | None = None) -> Callable[[str], None]:
    """A one-line message callback that hands each line to *listener* as a ``notice`` event (with *status*).

    For work around a run that has no tracker yet (launching the checkpoint's server); like the
    tracker, a failing listener never breaks the caller.
    """

    def say(message: str) -> None:
        if listener is None:
            return
        event = ProgressEvent(
            kind="notice", total=0, done=0, failed=0, attempts=0, failed_attempts=0, reward_mean=None,
            wave=0, wave_done=0, wave_total=0, elapsed_s=0.0, eta_s=None, status=status, message=message,
        )  # fmt: skip
        try:
            listener(event)
        except Exception:  # a listener's bug must not stop the run
            pass

    return say


class ProgressTracker:
    """Counts attempts and notifies listeners; never raises out of a listener."""

    def __init__(self, total: int, listeners: list[Callable[[ProgressEvent], Any]] | None = None) -> None:
        self.total = total
        self.listeners = [listener for listener in (listeners or []) if listener is not None]
        self.done = 0
        self.failed = 0
        self.attempts = 0
        self.failed_attempts = 0
        self.reward_sum = 0.0
        self.reward_n = 0
        self.wave = 0
        self.wave_done = 0
        self.wave_total = 0
        self._started = time.monotonic()
        self._done_at_start = 0
        self.listener_errors: list[str] = []

    def preload(self, done: int, rewards: list[float]) -> None:
        """Account for episodes completed by earlier invocations."""
        self.done = done
        self._done_at_start = done
        self.reward_sum = float(sum(rewards))
        self.reward_n = len(rewards)

    def _snapshot(self, kind: str, **extra: Any) -> ProgressEvent:
        elapsed = time.monotonic() - self._started
        new_done = self.done - self._done_at_start
        remaining = self.total - self.done
        eta = (elapsed / new_done * remaining) if new_done > 0 and remaining > 0 else (0.0 if remaining <= 0 else None)
        return ProgressEvent(
            kind=kind,
            total=self.total,
            done=self.done,
            failed=self.failed,
            attempts=self.attempts,
            failed_attempts=self.failed_attempts,
            reward_mean=(self.reward_sum / self.reward_n) if self.reward_n else None,
            wave=self.wave,
            wave_done=self.wave_done,
            wave_total=self.wave_total,
            elapsed_s=elapsed,
            eta_s=eta,
            **extra,
        )

    def _emit(self, event: ProgressEvent) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception as exc:  # a broken display must not stop the run
                self.listener_errors.append(f"{type(exc).__name__}: {exc}")

    def start(self) -> None:
        """Emit ``start``."""
        self._emit(self._snapshot("start"))

    def start_wave(self, size: int) -> None:
        """A new wave of *size* attempts begins."""
        self.wave += 1
        self.wave_done = 0
        self.wave_total = size
        self._emit(self._snapshot("wave"))

    def attempt(self, episode_id: str, *, complete: bool, reward: float | None, exhausted: bool) -> None:
        """One attempt was stored. *exhausted*: it failed and no attempt is left for it now."""
        self.attempts += 1
        self.wave_done += 1
        if complete:
            self.done += 1
            if reward is not None:
                self.reward_sum += reward
                self.reward_n += 1
        else:
            self.failed_attempts += 1
            if exhausted:
                self.failed += 1
        self._emit(
            self._snapshot(
                "attempt", episode_id=episode_id, status="completed" if complete else "failed", reward=reward
            )
        )

    def notice(self, message: str) -> None:
        """Emit a ``notice`` carrying *message* folded onto one line."""
        self._emit(self._snapshot("notice", message=" ".join(str(message).split())))

    def finish(self) -> None:
        """Emit ``finish``."""
        self._emit(self._snapshot("finish"))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class ConsoleProgress:
    """Console display: a single updating bar on a TTY, plain lines otherwise.

    On a TTY the bar is redrawn in place (at most ``refresh_s`` apart) on *stream*. Otherwise one
    line per attempt, ``[<done>/<wave_total>] <episode_id> status=<status> reward=<reward>`` (the
    legacy format), goes to *lines*, and a status line every ``interval_s`` seconds to *stream*.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        lines: TextIO | None = None,
        tty: bool | None = None,
        refresh_s: float = 0.1,
        interval_s: float = 30.0,
        per_attempt_lines: bool = True,
        width: int = 24,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.lines = lines if lines is not None else sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.refresh_s = refresh_s
        self.interval_s = interval_s
        self.per_attempt_lines = per_attempt_lines
        self.width = width
        self._last_draw = 0.0
        self._last_line = time.monotonic()
        self._drawn = False

    def bar(self, event: ProgressEvent) -> str:
        """The one-line status text for *event*."""
        fraction = event.done / event.total if event.total else 1.0
        filled = int(round(fraction * self.width))
        reward = "-" if event.reward_mean is None else f"{event.reward_mean:.3f}"
        return (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {event.done}/{event.total} done"
            f"  {event.failed} failed  reward {reward}  wave {event.wave} {event.wave_done}/{event.wave_total}"
            f"  {_duration(event.elapsed_s)} elapsed  eta {_duration(event.eta_s)}"
        )

    def __call__(self, event: ProgressEvent) -> None:
        now = time.monotonic()
        if event.kind == "notice":
            self._clear()
            self.stream.write(f"shopsimrl: {event.message}\n")
            self.stream.flush()
            return
        if self.tty:
            if event.kind == "attempt" and event.status == "failed" and self.per_attempt_lines:
                self._clear()
                self.stream.write(f"{event.episode_id} failed (attempt stored)\n")
            if (
                event.kind in {"start", "wave", "finish"}
                or now - self._last_draw >= self.refresh_s
                or event.done == event.total
            ):
                self._clear()
                self.stream.write(self.bar(event))
                self._drawn = True
                self._last_draw = now
                if event.kind == "finish":
                    self.stream.write("\n")
                    self._drawn = False
            self.stream.flush()
            return
        if event.kind == "attempt" and self.per_attempt_lines:
            reward = "None" if event.reward is None else repr(event.reward)
            self.lines.write(
                f"[{event.wave_done}/{event.wave_total}] {event.episode_id} status={event.status} reward={reward}\n"
            )
            self.lines.flush()
        if event.kind == "finish" or now - self._last_line >= self.interval_s:
            self.stream.write(self.bar(event) + "\n")
            self.stream.flush()
            self._last_line = now

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[2K")
            self._drawn = False
