"""Argument types of the command line: each parses one value or raises ``argparse.ArgumentTypeError`` with the rule."""

from __future__ import annotations

import argparse

__all__ = ["positive", "non_negative", "probability", "positive_float"]


def positive(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1 (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def non_negative(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0 (got {text!r})") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    return value


def probability(text: str) -> float:
    """A number strictly between 0 and 1 (a confidence level, a test level, a power)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1 (got {text!r})") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, exclusive (got {text}); e.g. 0.95")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0 (got {text!r})") from None
    if not value > 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0 (got {text})")
    return value
