r"""The JSON codec of the HTTP clients and trace lines: msgspec and orjson, with the stdlib's values and errors.

Both are several times faster than the stdlib on the payloads we move (observations of a few KB,
growing conversations, trace lines of ~100 KB) but differ from it in a few corners. Decoding uses
msgspec: it reads integer literals of any size exactly and floats as the same doubles as the stdlib
(a fuzz of 300,000 numerals found no difference), and refuses what the stdlib would read
differently or with its own error (NaN/Infinity, overflowing literals, lone surrogates, BOMs).
A body full of ``\uXXXX`` escapes (what Python servers write for Chinese text by default) goes to
orjson first, which reads them ~2.5× faster than msgspec: orjson reads integers beyond 64 bits as
floats, so a walk of the value for floats of that size sends such a body on to msgspec (a fuzz of
300,000 numerals found orjson's doubles identical to the stdlib's too). Encoding uses orjson, which
writes NaN as ``null`` and refuses integers beyond 64 bits. Each function here takes the fast path
wherever that gives the stdlib's result and hands the rest to the stdlib, so callers see ``json``'s
behaviour at the libraries' speed.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Collection
from typing import Any

import msgspec
import orjson

__all__ = [
    "UNDECODED",
    "copy_json",
    "dumps",
    "dumps_line",
    "dumps_strict",
    "fast_loads",
    "has_non_finite",
    "loads",
    "loads_finite",
]


UNDECODED = object()
"""What :func:`fast_loads` returns when the stdlib must decide."""
_decode = msgspec.json.Decoder().decode
_isfinite = math.isfinite


_ESCAPE = b"\\u"
#: orjson reads an integer literal beyond 64 bits as a float at least this large
_LOST_INTEGER = float(2**63)


def _lost_integer(number: float) -> bool:
    # orjson's float for an integer literal beyond 64 bits; a genuine float this large merely
    # takes msgspec's path
    return not -_LOST_INTEGER < number < _LOST_INTEGER


def fast_loads(data: bytes | str) -> Any:
    """The value msgspec (or orjson) decodes from *data* when the stdlib decodes the same, else :data:`UNDECODED`."""
    # escaped text: orjson, unless it lost an integer. (find, not ``in``: ``bytes.__contains__`` first
    # tries the operand as an integer and builds and clears a TypeError, ~2,000 instructions a call.)
    if type(data) is bytes and data.find(_ESCAPE) >= 0:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # msgspec or the stdlib decide, with their own errors
        else:
            if not _holds_float(value, _lost_integer):
                return value
    try:
        return _decode(data)
    except (msgspec.DecodeError, RecursionError):  # ValidationError (an overflowing float) is a DecodeError
        return UNDECODED


def loads(data: bytes | str) -> Any:
    """Decode JSON exactly as ``json.loads`` does, with msgspec wherever that gives the same value.

    The stdlib handles what msgspec refuses (``NaN``, literals beyond the float range, UTF-16 or
    BOM-prefixed bytes, lone surrogate escapes), so callers see the same values and the same error
    texts as with ``json.loads``.
    """
    value = fast_loads(data)
    return json.loads(data) if value is UNDECODED else value


class _NotFinite(ValueError):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _refuse_constant(literal: str) -> float:
    raise _NotFinite(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not _isfinite(value):
        raise _NotFinite(literal)
    return value


def loads_finite(data: bytes | str) -> Any:
    """Decode like :func:`loads`, but refuse numbers that have no finite double.

    ``NaN``, ``Infinity`` and literals beyond the float range (``1e400``) raise
    ``json.JSONDecodeError`` naming the literal; RFC 8259 has no NaN or Infinity, and a trace line
    cannot hold them (runtime-semantics §2.4). The adapters decode every answer with this, so the
    runtime's records are finite by construction and their trace lines need no walk for NaN. The
    msgspec path already refuses all three, so only the stdlib fallback pays for the check.
    """
    value = fast_loads(data)
    if value is not UNDECODED:
        return value
    try:
        return json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotFinite as exc:
        text = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
        position = max(text.find(exc.literal), 0)
        raise json.JSONDecodeError(f"{exc.literal} is not a finite number", text, position) from None


def copy_json(value: Any) -> Any:
    """A deep copy of JSON data: new dicts and lists all the way down, the immutable scalars shared.

    What ``copy.deepcopy`` returns for decoded JSON, ~3× cheaper (10 µs against 31 for a 1.3 KB
    environment answer): no memo, since decoded JSON shares no containers and has no cycles.
    Anything else inside (a tuple, an object) is handed to ``copy.deepcopy``.
    """
    kind = type(value)
    if kind is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if kind is list:
        return [copy_json(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


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
    return _holds_float(value, _not_finite)


def _not_finite(number: float) -> bool:
    return not _isfinite(number)


def _holds_float(value: Any, wanted: Callable[[float], bool]) -> bool:
    # True when a float for which *wanted* is true is anywhere in *value*. Iterative (trace records
    # are deep and large); strings, the bulk of a record, are skipped where they are met instead of
    # being pushed and popped. Only exact floats: orjson refuses float subclasses, so the stdlib
    # decides about those.
    kind = type(value)
    if kind is float:
        return wanted(value)
    if kind is not dict and kind is not list and kind is not tuple:
        return False
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is str:
                continue
            if kind is dict or kind is list or kind is tuple:
                push(child)
            elif kind is float and wanted(child):
                return True
    return False


def dumps_line(record: Any, *, finite: Collection[str] = ()) -> bytes:
    """One JSONL line (newline included) of *record*: UTF-8, non-ASCII literal, NaN refused.

    *finite* names top-level keys whose values the caller vouches hold no NaN or infinite float
    (the episode runtime's decoded parts: its adapters decode with :func:`loads_finite`); they are
    not walked, which is most of a trace line. Every other key is.

    orjson's compact output (runtime-semantics §2.4: readers parse the JSON, any separators do);
    the stdlib writes what orjson refuses (integers beyond 64 bits, non-string keys) and raises
    what it raises (``ValueError`` for NaN/Infinity or lone surrogates, ``TypeError`` for
    non-JSON values), so a record that cannot be stored fails the same way as before.
    """
    checked = record if not finite else [v for k, v in record.items() if k not in finite]
    if has_non_finite(checked):
        raise ValueError("Out of range float values are not JSON compliant")
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
