"""The JSON codec of the HTTP clients and trace lines: orjson, with the stdlib's values and errors.

orjson is several times faster than the stdlib on the payloads we move (observations of a few KB,
growing conversations, trace lines of ~100 KB), but differs in a few corners: it reads integer
literals beyond 64 bits as floats, refuses NaN/Infinity and lone surrogates on input, and writes
NaN as ``null`` on output. Each function here takes orjson's path wherever that gives the stdlib's
result and hands the rest to the stdlib, so callers see ``json``'s behaviour at orjson's speed.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

__all__ = ["UNDECODED", "dumps", "dumps_line", "dumps_strict", "fast_loads", "has_non_finite", "loads"]


#: orjson reads an integer literal beyond 64 bits as a float (the stdlib as an exact int); any float
#: of this magnitude may be such a reading, so a value holding one is decided by the stdlib
_INT64_EDGE = float(2**63)
UNDECODED = object()
"""What :func:`fast_loads` returns when the stdlib must decide."""


def _may_hold_long_int(value: Any) -> bool:
    # A walk of the decoded value, not a scan of the text: scanning ~3 KB observations for digit
    # runs cost more than decoding them, and digits inside strings (ids, prices) are no risk.
    # orjson's floats are otherwise correctly rounded, the same doubles as the stdlib's.
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and (item >= _INT64_EDGE or item <= -_INT64_EDGE):
            return True
    return False


def fast_loads(data: bytes | str) -> Any:
    """The value orjson decodes from *data* when the stdlib decodes the same, else :data:`UNDECODED`."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return UNDECODED
    return UNDECODED if _may_hold_long_int(value) else value


def loads(data: bytes | str) -> Any:
    """Decode JSON exactly as ``json.loads`` does, with orjson wherever that gives the same value.

    The stdlib handles what orjson refuses or reads differently (``NaN``, integers beyond 64 bits,
    UTF-16 or BOM-prefixed bytes, lone surrogate escapes), so callers see the same values and the
    same error texts as with ``json.loads``.
    """
    value = fast_loads(data)
    return json.loads(data) if value is UNDECODED else value


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON for a request body (orjson; the stdlib for values orjson cannot encode).

    Non-ASCII stays literal. Values orjson refuses (integers beyond 64 bits, non-string keys) are
    written by ``json.dumps`` as before. Callers pass data whose floats are finite (conversation
    text, tool schemas, envelopes); the model client checks its float settings once, at start.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def dumps_strict(value: Any) -> bytes:
    """Encode like :func:`dumps`, but keep NaN and ±Infinity as the stdlib writes them.

    They come out as ``NaN``, ``Infinity`` instead of orjson's ``null``, so a request never changes
    meaning.
    """
    if has_non_finite(value):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return dumps(value)


def has_non_finite(value: Any) -> bool:
    """True when *value* (JSON-like data: dicts, lists, tuples) holds a NaN or infinite float anywhere."""
    stack = [value]
    while stack:  # iterative: trace records are deep and large, and recursion costs a frame per node
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is float and not math.isfinite(item):  # orjson refuses float subclasses: the stdlib decides
            return True
    return False


def dumps_line(record: Any) -> bytes:
    """One JSONL line (newline included) of *record*: UTF-8, non-ASCII literal, NaN refused.

    orjson's compact output (runtime-semantics §2.4: readers parse the JSON, any separators do);
    the stdlib writes what orjson refuses (integers beyond 64 bits, non-string keys) and raises
    what it raises (``ValueError`` for NaN/Infinity or lone surrogates, ``TypeError`` for
    non-JSON values), so a record that cannot be stored fails the same way as before.
    """
    if has_non_finite(record):
        raise ValueError("Out of range float values are not JSON compliant")
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
