"""Core errors as Dagster failures: every asset body that calls the core wraps the call in ``as_failure``."""

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

import shopsimrl_core as core

__all__ = ["as_failure", "interrupt_is_final"]


@contextmanager
def as_failure() -> Iterator[None]:
    """Turn a ``ShopSimRLError`` raised in the body into a ``dg.Failure`` showing ``[code] message``.

    Core errors already say what is wrong and how to fix it; the run shows that line, not a
    traceback. Such errors are about configuration or data, so the step is not retried.
    """
    try:
        yield
    except core.ShopSimRLError as exc:
        raise dg.Failure(description=f"[{exc.code}] {exc.one_line()}", allow_retries=False) from exc


@contextmanager
def interrupt_is_final(what: str) -> Iterator[None]:
    """A terminated rollout stays stopped: the core's clean stop becomes a failure that is not retried.

    The UI's Terminate (or SIGINT/SIGTERM) reaches the core, which stops cleanly — in-flight episodes
    release their leases, a launched server is stopped — and raises ``KeyboardInterrupt`` /
    ``RunTerminated``. Dagster applies a step's RetryPolicy to interrupts, so without this the rollout
    was started again and the terminated run could end SUCCESS. Completed episodes are kept: a later
    materialization of the partition resumes.
    """
    try:
        yield
    except KeyboardInterrupt as exc:
        how = "SIGTERM" if isinstance(exc, core.RunTerminated) else "Terminate / SIGINT"
        raise dg.Failure(
            description=f"[run-interrupted] {what} was stopped ({how}) after a clean shutdown; completed episodes "
            "are kept — materialize the partition again to resume",
            allow_retries=False,
        ) from None
