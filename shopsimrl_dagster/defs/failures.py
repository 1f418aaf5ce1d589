"""Core errors as Dagster failures: every asset body that calls the core wraps the call in ``as_failure``."""

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

import shopsimrl_core as core

__all__ = ["as_failure"]


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
