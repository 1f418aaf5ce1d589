"""Task split files: explicit id lists, legacy ranges, roles and split identity (runtime-semantics §4.1, §22.1, §22.6).

A split is identified by its name, the file's version and ``task_ids_sha256`` — the fingerprint of
its id list in file order — so moving the file or reformatting it never changes the identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from shopsimrl_core._errors import ConfigError
from shopsimrl_core._hashing import fingerprint

__all__ = ["TaskSplit", "SplitFile", "load_split_file", "is_guarded"]


def is_guarded(name: str, role: str | None) -> bool:
    """A split is guarded (final test numbers) when its role is ``test``, or it has no role and is named ``test``."""
    return role == "test" or (role is None and name == "test")


@dataclass(frozen=True)
class TaskSplit:
    """One named split of a split file, with its ids in file order."""

    name: str
    task_ids: tuple[int, ...]
    role: str | None
    persona: bool | None
    split_version: str | None
    source_path: Path
    task_ids_sha256: str
    #: True when the file declared the hash (and it was verified), False when it was computed here.
    hash_declared: bool = False

    @property
    def task_count(self) -> int:
        """Number of task ids in the split."""
        return len(self.task_ids)

    @property
    def guarded(self) -> bool:
        """Whether running episodes on this split needs the per-invocation test opt-in (§22.6)."""
        return is_guarded(self.name, self.role)

    def plan_identity(self, persona: bool) -> dict[str, Any]:
        """The semantic ``task_split`` block of a plan (§22.1): no path, persona as resolved."""
        return {
            "name": self.name,
            "split_version": self.split_version,
            "persona": persona,
            "task_count": self.task_count,
        }

    def identity(self) -> dict[str, Any]:
        """The split identity used in ledgers and metadata: name, version, hash, role and size."""
        return {
            "name": self.name,
            "split_version": self.split_version,
            "task_ids_sha256": self.task_ids_sha256,
            "role": self.role,
            "task_count": self.task_count,
        }


@dataclass(frozen=True)
class SplitFile:
    """A parsed split file: its version and every split it declares."""

    path: Path
    version: str | None
    schema_version: str | None
    splits: dict[str, TaskSplit]

    def get(self, name: str) -> TaskSplit:
        """Return the split called *name*.

        Raises:
            ConfigError: no such split; the message lists the available names.
        """
        try:
            return self.splits[name]
        except KeyError:
            available = ", ".join(sorted(self.splits)) or "(none)"
            raise ConfigError(
                f"{self.path}: split {name!r} not found; available splits: {available}; set tasks.split to one of them",
                code="split-unknown",
            ) from None


class _KeyedObject(dict[str, Any]):
    """A JSON object that remembers the keys it was given more than once (the last value wins, as in ``json``)."""

    duplicates: tuple[str, ...] = ()

    @classmethod
    def of(cls, pairs: list[tuple[str, Any]]) -> _KeyedObject:
        made = cls(pairs)
        if len(made) != len(pairs):
            seen: set[str] = set()
            again: list[str] = []
            for key, _ in pairs:
                if key in seen:
                    again.append(key)
                seen.add(key)
            made.duplicates = tuple(again)
        return made


def _first_duplicate(data: Any) -> tuple[str, str] | None:
    """``(dotted path of the object, key)`` of the first object given a key twice, in document order."""
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, _KeyedObject) and value.duplicates:
            return where, value.duplicates[0]
        if isinstance(value, dict):
            items: Any = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            continue
        # only containers can hold an object (a list of a million task ids costs one pass, no pushes)
        children = [(f"{where}.{k}" if where else str(k), v) for k, v in items if isinstance(v, (dict, list))]
        pending.extend(reversed(children))
    return None


def _fail(path: Path, where: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {where}: {message}", code="split-invalid")


#: the largest task id a split may hold (a signed 64-bit integer, as JSON libraries on the way read it)
MAX_TASK_ID = 2**63 - 1

#: the most ids a legacy ``start``/``end`` range may expand to: 40 times the real catalog (22,726 tasks),
#: where ``end: 1000000000000`` would build a list of a trillion ints (MemoryError after minutes; issue 24)
MAX_RANGE_IDS = 1_000_000


def _json_type(value: Any) -> str:
    """How a JSON document names the type of *value* (``null``, ``list``, ``string``, …), for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "list", str: "string", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_split(path: Path, name: str, body: Any, version: str | None) -> TaskSplit:
    where = f"splits.{name}"
    if not isinstance(body, dict):
        raise _fail(path, where, f"must be an object (got {_json_type(body)}); give task_ids or start/end")
    if "task_ids" in body:
        raw_ids = body["task_ids"]
        if not isinstance(raw_ids, list):
            raise _fail(
                path, f"{where}.task_ids", f"must be a list of non-negative ints (got {_json_type(raw_ids)})"
            )
        ids = raw_ids
    elif "start" in body or "end" in body:
        start, end = body.get("start"), body.get("end")
        if not (_is_int(start) and _is_int(end)) or start < 0 or end < start:
            raise _fail(path, where, f"legacy range needs ints 0 <= start <= end (got start={start!r}, end={end!r})")
        if end - start > MAX_RANGE_IDS:
            raise _fail(
                path,
                where,
                f"legacy range {start} … {end} would expand to {end - start} task ids, more than {MAX_RANGE_IDS:,}; "
                "fix end, or list the ids in task_ids",
            )
        ids = list(range(start, end))
    else:
        raise _fail(path, where, "has neither task_ids nor start/end; add one of them")
    seen: set[int] = set()
    for position, task_id in enumerate(ids):
        if not _is_int(task_id) or task_id < 0:
            raise _fail(path, f"{where}.task_ids.{position}", f"must be a non-negative int (got {task_id!r})")
        if task_id > MAX_TASK_ID:
            # what goes on the wire and into every trace line is a signed 64-bit JSON integer (issue 24:
            # 2**70 passed here and broke the run half-way)
            raise _fail(
                path, f"{where}.task_ids.{position}", f"must be at most 2**63 - 1 = {MAX_TASK_ID} (got {task_id})"
            )
        if task_id in seen:
            raise _fail(path, f"{where}.task_ids.{position}", f"duplicate task id {task_id}; task ids must be unique")
        seen.add(task_id)
    persona = body.get("persona")
    if persona is not None and not isinstance(persona, bool):
        raise _fail(path, f"{where}.persona", f"must be true, false or null (got {persona!r})")
    role = body.get("role")
    if role is not None and not isinstance(role, str):
        raise _fail(path, f"{where}.role", f"must be a string (got {role!r})")
    count = body.get("task_count")
    if count is not None and (not _is_int(count) or count != len(ids)):
        raise _fail(
            path,
            f"{where}.task_count",
            f"says {count!r} but the split has {len(ids)} task ids; fix task_count or restore the id list",
        )
    computed = fingerprint(list(ids))
    declared = body.get("task_ids_sha256")
    if declared is not None and declared != computed:
        raise _fail(
            path,
            f"{where}.task_ids_sha256",
            f"does not match the task ids (declared {declared}, computed {computed}); the id list was edited — "
            "restore the frozen file",
        )
    return TaskSplit(
        name=name,
        task_ids=tuple(ids),
        role=role,
        persona=persona,
        split_version=version,
        source_path=path,
        task_ids_sha256=computed,
        hash_declared=declared is not None,
    )


def _shared_task(
    path: Path, first: TaskSplit, second: TaskSplit, why: str
) -> ConfigError | None:
    """The error for the first id of *second* (in file order) that *first* also holds, or None."""
    held = set(first.task_ids)
    for position, task_id in enumerate(second.task_ids):
        if task_id in held:
            return _fail(
                path,
                f"splits.{second.name}.task_ids.{position}",
                f"task {task_id} is also in split {first.name!r}; {why} — remove it from one of them or "
                "restore the frozen file",
            )
    return None


def _check_guarded_tasks_stay_out(path: Path, splits: dict[str, TaskSplit]) -> None:
    """Refuse a file where a guarded (test) task also sits in an unguarded split.

    Such a task would be played without the test opt-in (issue 33: a test id added to val, val's hash
    dropped, ran silently). Held whatever the file declares, so deleting its ``checks`` block does not
    open the way either.
    """
    for guarded in (s for s in splits.values() if s.guarded):
        for other in splits.values():
            if other.name != guarded.name and not other.guarded:
                error = _shared_task(path, guarded, other, f"split {guarded.name!r} is guarded (test)")
                if error is not None:
                    raise error


def _declared_flag(path: Path, checks: dict[str, Any], key: str) -> bool:
    value = checks.get(key)
    if value is not None and not isinstance(value, bool):
        raise _fail(path, f"checks.{key}", f"must be true or false (got {value!r}); restore the frozen file")
    return value is True


def _check_declared_checks(path: Path, data: dict[str, Any], splits: dict[str, TaskSplit]) -> None:
    """Hold the file to what its ``checks`` block promises, where the file alone can show it (http-contract §15.1).

    ``pairwise_task_disjoint``: no two splits share a task; ``test_exclusions_respected``: no id of
    ``policy.test_excluded_task_ids`` is in a guarded split; ``persona_task_count`` (with
    ``complete_coverage``): the splits hold that many distinct tasks. ``linked_groups_disjoint`` needs the
    catalog and is not checked here.
    """
    checks = data.get("checks")
    if checks is None:
        return
    if not isinstance(checks, dict):
        raise _fail(path, "checks", f"must be an object (got {_json_type(checks)}); restore the frozen file")
    if _declared_flag(path, checks, "pairwise_task_disjoint"):
        ordered = list(splits.values())
        for index, first in enumerate(ordered):
            for second in ordered[index + 1 :]:
                error = _shared_task(path, first, second, "checks.pairwise_task_disjoint is true")
                if error is not None:
                    raise error
    if _declared_flag(path, checks, "test_exclusions_respected"):
        policy = data.get("policy")
        excluded = policy.get("test_excluded_task_ids") if isinstance(policy, dict) else None
        excluded_ids = set(excluded) if isinstance(excluded, list) else set()
        for guarded in (s for s in splits.values() if s.guarded):
            hit = next((t for t in guarded.task_ids if t in excluded_ids), None)
            if hit is not None:
                raise _fail(
                    path,
                    f"splits.{guarded.name}.task_ids",
                    f"holds task {hit}, which policy.test_excluded_task_ids excludes from test "
                    "(checks.test_exclusions_respected is true); restore the frozen file",
                )
    declared_count = checks.get("persona_task_count")
    if declared_count is not None and _declared_flag(path, checks, "complete_coverage"):
        distinct = len(set().union(*(s.task_ids for s in splits.values() if s.persona is not False)))
        if not _is_int(declared_count) or distinct != declared_count:
            raise _fail(
                path,
                "checks.persona_task_count",
                f"says {declared_count!r} but the persona splits hold {distinct} distinct tasks "
                "(checks.complete_coverage is true); restore the frozen file",
            )


def load_split_file(path: str | Path) -> SplitFile:
    """Load and validate a split file.

    Promises: ids are non-negative, unique ints in file order (legacy ranges expanded, at most
    ``MAX_RANGE_IDS`` of them); every declared ``task_ids_sha256`` and ``task_count`` matches; keys the
    format does not know are ignored; a leading UTF-8 byte-order mark is skipped; no task of a guarded
    (test) split is in another unguarded split, whatever the file declares; the file's ``checks``
    (``pairwise_task_disjoint``, ``test_exclusions_respected``, ``persona_task_count`` with
    ``complete_coverage``) hold. Every caller — CLI, Dagster, exports, training — loads through here, so
    the test-split guard cannot be walked around by editing a split file. (An empty split parses;
    planning a run on it is refused by ``build_plan``.)

    Raises:
        ConfigError: missing file, invalid JSON, or a split that breaks the rules above.
    """
    from shopsimrl_core.runs.config._config import read_text_input

    resolved = Path(path).resolve()
    text = read_text_input(resolved, "split file", "fix tasks.split_file")
    # a byte-order mark (Windows editors write one) is no content: the .env and YAML readers skip it too
    text = text.removeprefix("\ufeff")
    try:
        data = json.loads(text, object_pairs_hook=_KeyedObject.of)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{resolved}: not valid JSON ({exc.msg} at line {exc.lineno}); restore the file", code="split-invalid"
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{resolved}: nested too deep to read (more than ~1,000 levels of lists or objects); a split file is "
            "three levels deep — restore the file",
            code="split-invalid",
        ) from None
    duplicate = _first_duplicate(data)
    if duplicate is not None:
        where, key = duplicate
        raise _fail(
            resolved,
            where or "(top level)",
            f"duplicate key {key!r}; JSON readers keep only one of them, so the file says two things — keep one",
        )
    if not isinstance(data, dict):
        shape = '{"splits": {<name>: {"task_ids": [...]}}}'
        raise _fail(resolved, "(top level)", f"must be an object {shape} (got {_json_type(data)}); restore the file")
    if not isinstance(data.get("splits"), dict):
        problem = f"must be an object mapping split names to splits (got {_json_type(data.get('splits'))})"
        bare = [v for v in data.values() if isinstance(v, dict) and ("task_ids" in v or "start" in v)]
        if "splits" not in data and bare:
            problem += '; the splits sit at the top level — nest them under "splits"'
        raise _fail(resolved, "splits", problem)
    version = data.get("version")
    version = None if version is None else str(version)
    splits = {str(name): _parse_split(resolved, str(name), body, version) for name, body in data["splits"].items()}
    _check_guarded_tasks_stay_out(resolved, splits)
    _check_declared_checks(resolved, data, splits)
    schema = data.get("schema_version")
    return SplitFile(
        path=resolved, version=version, schema_version=None if schema is None else str(schema), splits=splits
    )
