"""The fingerprint of a plan and the "same plan" test, fast for a plan of a million jobs (issue 33).

A plan's fingerprint is ``fingerprint(semantic)``: SHA-256 of its canonical JSON (``_hashing.py``). At a
million jobs the standard library's encoder spends seconds on the job list, and a resume did it twice
(once for the plan built from the config, once for the manifest's stored plan). Here the job list is
encoded by orjson, and only where that gives the canonical bytes exactly:

- :func:`plan_fingerprint` encodes the jobs of :class:`EpisodeJob` objects, whose fields are ints and one
  split name; it checks their types and that orjson writes the split name as ``json`` does, else it
  falls back to :func:`fingerprint`. The other keys go through :func:`canonical_json` as before.
- :func:`same_plan` answers ``canonical_json(a) == canonical_json(b)``: the job lists are compared as
  orjson bytes, which are equal only for equal JSON values of equal JSON types (an int never encodes
  like a float, nor ``1`` like ``true``); the rest is compared canonically. A value orjson cannot encode
  (an integer beyond 64 bits, a non-string key) sends the comparison to :func:`canonical_json`.

``tests/core/test_plan_hash.py`` compares both with the standard encoder on varied plans.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import orjson

from shopsimrl_core._hashing import canonical_json, fingerprint
from shopsimrl_core.runs.planning._jobs import EpisodeJob

__all__ = ["plan_fingerprint", "same_plan"]

_FAST_MIN_JOBS = 1_000
"""Shorter job lists are encoded by the standard library: nothing to gain."""
_MARK = "\x00shopsimrl-plan-jobs\x00"
"""Stands in for the job list in the canonical text of the other keys (a control character never in a plan)."""


def plan_fingerprint(semantic: dict[str, Any], jobs: Sequence[EpisodeJob]) -> str:
    """``fingerprint(semantic)``, the same hex, where ``semantic["jobs"]`` is ``[job.to_dict() for job in jobs]``."""
    encoded = _jobs_json(semantic.get("jobs"), jobs)
    if encoded is None:
        return fingerprint(semantic)
    head = canonical_json({**semantic, "jobs": _MARK})
    mark = canonical_json(_MARK)
    if head.count(mark) != 1:
        return fingerprint(semantic)
    before, after = head.split(mark)
    digest = hashlib.sha256(before.encode("utf-8"))
    digest.update(encoded)
    digest.update(after.encode("utf-8"))
    return digest.hexdigest()


def same_plan(stored: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether the two plans have the same canonical JSON (and so the same fingerprint)."""
    if ("jobs" in stored) != ("jobs" in current):
        return False
    rest = canonical_json({k: v for k, v in stored.items() if k != "jobs"})
    if rest != canonical_json({k: v for k, v in current.items() if k != "jobs"}):
        return False
    if "jobs" not in stored:
        return True
    try:
        first = orjson.dumps(stored["jobs"], option=orjson.OPT_SORT_KEYS)
        second = orjson.dumps(current["jobs"], option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: a value it cannot encode
        return canonical_json(stored["jobs"]) == canonical_json(current["jobs"])
    if first != second:
        return False
    # orjson writes NaN and infinities as null, which canonical JSON refuses: equal bytes then prove nothing
    return b"null" not in first or canonical_json(stored["jobs"]) == canonical_json(current["jobs"])


def _jobs_json(listed: Any, jobs: Sequence[EpisodeJob]) -> bytes | None:
    """The canonical JSON of *listed* (the dicts of *jobs*) by orjson, or None where it might differ."""
    if not isinstance(listed, list) or len(listed) != len(jobs) or len(jobs) < _FAST_MIN_JOBS:
        return None
    for name in ("task_id", "sample_id", "seed"):
        if set(map(type, map(attrgetter(name), jobs))) != {int}:
            return None
    try:
        for split in set(map(attrgetter("split"), jobs)):
            if type(split) is not str or orjson.dumps(split).decode("utf-8") != json.dumps(split, ensure_ascii=False):
                return None
        return orjson.dumps(listed, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: an int beyond 64 bits, a string that is not valid UTF-8
        return None
