"""The run directory: manifest, append-only traces, lock and invocations.

Layout of ``<output_dir>/<experiment>/`` (runtime-semantics §6.1, §22):

- ``manifest.json``     plan, fingerprint and the creating invocation's execution settings
- ``traces.jsonl``      one line per attempt; append-only, fsynced by group commit, torn tail healed (§6.5)
- ``summary.json``      ``shopsimrl-eval-summary-v2``
- ``run.lock``          exclusive ``flock`` held by the one writer (§22.4)
- ``invocations.jsonl`` one line per invocation that touched the directory (§22.1)

Readers stream ``traces.jsonl``: the index keeps byte offsets of each episode's latest line, never
the records themselves. The line stream is ``runs/storage/_jsonl.py``, the index view ``runs/storage/_trace_index.py``;
the project-level test-access ledger lives in ``runs/storage/_ledger.py``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import threading
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from shopsimrl_core._errors import RunLockedError, ShopSimRLError, TraceFormatError
from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core._versions import INVOCATION_SCHEMA, MANIFEST_SCHEMA
from shopsimrl_core.adapters._json import dumps_line, loads
from shopsimrl_core.episode._trace import is_complete, utc_now
from shopsimrl_core.runs.storage._durability import append_whole, request_fsync
from shopsimrl_core.runs.storage._jsonl import _append_jsonl, _read_jsonl, iter_trace_lines
from shopsimrl_core.runs.storage._run_folder import cut_torn_tail, refuse_symlinks
from shopsimrl_core.runs.storage._trace_index import TraceIndex

__all__ = [
    "RunStore",
    "is_complete",
    "utc_now",
]


class RunStore:
    """One run directory. Create it with the path; nothing is written until a method says so.

    Only the process holding ``run.lock`` may write (see :meth:`lock`). Appends are serialised by an
    in-process lock as well, so one ``RunStore`` can be shared by many asyncio tasks or threads.
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self._append_lock = threading.Lock()
        self._handle: BinaryIO | None = None
        self._lock_fd: int | None = None
        self._lock_mode: str | None = None
        self.lock_takeover: dict[str, Any] | None = None
        from shopsimrl_core.runs.storage._index import IndexAppender

        self._index_appender = IndexAppender(self.run_dir)

    # ---------------------------------------------------------------- paths
    @property
    def manifest_path(self) -> Path:
        return self.run_dir / "manifest.json"

    @property
    def traces_path(self) -> Path:
        return self.run_dir / "traces.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.run_dir / "summary.json"

    @property
    def lock_path(self) -> Path:
        return self.run_dir / "run.lock"

    @property
    def invocations_path(self) -> Path:
        return self.run_dir / "invocations.jsonl"

    # ---------------------------------------------------------------- lock
    def acquire_lock(self, invocation_id: str) -> None:
        """Take the exclusive run-directory lock at once, or fail.

        A lock left by a dead process is taken over (the OS drops a ``flock`` when its holder dies;
        the takeover is recorded in ``self.lock_takeover``).

        Raises:
            RunLockedError: another live process holds the lock; the message names it.
            ShopSimRLError: ``path-wrong-type`` when a file stands where the run folder belongs.
        """
        if self._lock_fd is not None:
            return
        if self.run_dir.exists() and not self.run_dir.is_dir():
            # mkdir would fail with a bare "File exists" (exit 8); say what stands there (exit 6)
            raise ShopSimRLError(
                f"{self.run_dir}: the run folder is a file, not a directory; move the file away or use another "
                "experiment.name",
                code="path-wrong-type",
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        refuse_symlinks(self.run_dir)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read_holder()
            os.close(fd)
            raise RunLockedError(
                f"{self.run_dir}: run directory is locked by {self._describe(holder)}; "
                "wait for that run to finish, or use another experiment.name",
                code="run-locked",
                holder=holder,
            ) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                self._acquire_exclusive_file(invocation_id)
                return
            raise
        previous = self._read_holder()
        if previous:
            self.lock_takeover = previous  # a dead holder's record, or {"unreadable": ...} for garbage
        content = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "started_at": utc_now(), "invocation_id": invocation_id}
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, content + b"\n", 0)
        os.fsync(fd)
        self._lock_fd = fd
        self._lock_mode = "flock"

    def _acquire_exclusive_file(self, invocation_id: str) -> None:
        # File systems without flock: exclusive creation; a lock of a dead pid on this host is stale.
        holder = self._read_holder()
        if "unreadable" in holder:
            raise RunLockedError(
                f"{self.lock_path}: holds no readable holder record ({holder['unreadable']}) and this file system "
                "has no flock, so whether a run still holds it cannot be told; delete run.lock once you are sure "
                "no run uses this folder",
                code="run-locked",
                holder=holder,
            )
        if not holder:
            self.lock_path.unlink(missing_ok=True)  # empty: nobody's (the flock attempt above created it)
        else:
            same_host = holder.get("host") == socket.gethostname()
            pid = holder.get("pid")
            alive = True
            if same_host and isinstance(pid, int):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    alive = False
                except PermissionError:
                    alive = True
            if alive:
                raise RunLockedError(
                    f"{self.run_dir}: run directory is locked by {self._describe(holder)} (no flock on this file "
                    "system); "
                    "wait for it, or delete run.lock once you are sure the holder is gone",
                    code="run-locked",
                    holder=holder,
                )
            self.lock_takeover = holder
            self.lock_path.unlink(missing_ok=True)
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            raise RunLockedError(
                f"{self.run_dir}: run directory was locked by another process just now (no flock on this file "
                "system); wait for it to finish, or use another experiment.name",
                code="run-locked",
                holder=self._read_holder(),
            ) from None
        content = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": utc_now(),
            "invocation_id": invocation_id,
        }
        os.write(fd, json.dumps(content).encode() + b"\n")
        os.fsync(fd)
        self._lock_fd = fd
        self._lock_mode = "exclusive-file"

    def _read_holder(self) -> dict[str, Any]:
        """The holder record in ``run.lock``.

        ``{}`` when empty or missing, ``{"unreadable": <first bytes>}`` when the file holds anything else
        (garbage, not UTF-8, not a JSON object).
        """
        try:
            with open(self.lock_path, "rb") as handle:
                raw = handle.read(4096)
        except OSError:
            return {}
        if not raw.strip():
            return {}
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            value = None
        if isinstance(value, dict) and value:
            return value
        return {"unreadable": repr(raw[:40])}

    def _describe(self, holder: dict[str, Any]) -> str:
        if "unreadable" in holder and len(holder) == 1:
            return (
                f"another process; {self.lock_path} names no holder (it holds {holder['unreadable']}, not a "
                "{pid, host, started_at, invocation_id} record)"
            )
        if not holder:
            return "another process (holder unknown)"
        return (
            f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started_at')} "
            f"(invocation {holder.get('invocation_id')})"
        )

    def release_lock(self) -> None:
        """Release the lock (the file stays; its content is cleared before unlocking)."""
        self.close_traces()
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        try:
            if self._lock_mode == "flock":
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        finally:
            if self._lock_mode == "exclusive-file":
                self.lock_path.unlink(missing_ok=True)
            self._lock_mode = None

    @contextmanager
    def lock(self, invocation_id: str) -> Iterator[RunStore]:
        """Hold the run-directory lock for the body of a ``with`` block."""
        self.acquire_lock(invocation_id)
        try:
            yield self
        finally:
            self.release_lock()

    @property
    def locked(self) -> bool:
        """Whether this store currently holds the lock."""
        return self._lock_fd is not None

    # ---------------------------------------------------------------- manifest
    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when the directory has none.

        Raises:
            TraceFormatError: unreadable JSON or an unknown manifest schema.
        """
        try:
            text = self.manifest_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            # A plan of a million jobs is ~70 MB of JSON: orjson, the stdlib deciding whatever it refuses
            manifest = loads(text.encode("utf-8"))
        except ValueError as exc:
            # UnicodeDecodeError too: the stdlib fallback guesses UTF-16 for bytes that start with a NUL
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not JSON text"
            raise TraceFormatError(
                f"{self.manifest_path}: not valid JSON ({why}); restore it from backup", code="manifest-invalid"
            ) from None
        if not isinstance(manifest, dict):
            kind = {list: "list", str: "string", bool: "boolean"}.get(type(manifest), "number")
            shown = "null" if manifest is None else f"a JSON {kind}"
            raise TraceFormatError(
                f"{self.manifest_path}: is {shown}, not a manifest object; this directory was not written by shopsimrl "
                "(or the file was damaged) — restore it from backup or use another experiment.name",
                code="manifest-invalid",
            )
        if manifest.get("schema_version") != MANIFEST_SCHEMA:
            got = manifest.get("schema_version")
            raise TraceFormatError(
                f"{self.manifest_path}: schema_version {got!r} is not {MANIFEST_SCHEMA!r}; this directory was not "
                "written by shopsimrl",
                code="manifest-invalid",
            )
        if not isinstance(manifest.get("plan"), dict):
            raise TraceFormatError(
                f"{self.manifest_path}: plan: missing or not an object; the file was damaged — restore it from backup "
                "or use another experiment.name",
                code="manifest-invalid",
            )
        return manifest

    def has_content(self) -> bool:
        """Whether the directory holds a manifest or at least one trace byte."""
        if self.manifest_path.exists():
            return True
        try:
            return self.traces_path.stat().st_size > 0
        except FileNotFoundError:
            return False

    def check_resumable(self, plan: dict[str, Any], plan_fingerprint: str, *, resume: bool) -> str:
        """Decide, without writing, how a run of *plan* may use this directory: ``"new"`` or ``"resume"``.

        See :func:`shopsimrl_core.runs.storage._resumable.check_resumable` for the rules and the errors.
        """
        from shopsimrl_core.runs.storage._resumable import check_resumable

        return check_resumable(self, plan, plan_fingerprint, resume=resume)

    def write_manifest(
        self,
        plan: dict[str, Any],
        plan_fingerprint: str,
        execution: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write a new ``manifest.json`` atomically (``fingerprint_scheme: semantic-v2``)."""
        from shopsimrl_core.runs.planning._plan import FINGERPRINT_SCHEME

        manifest: dict[str, Any] = {
            "schema_version": MANIFEST_SCHEMA,
            "created_at": utc_now(),
            "plan_fingerprint": plan_fingerprint,
            "fingerprint_scheme": FINGERPRINT_SCHEME,
            "plan": plan,
            "execution": execution,
        }
        if extra:
            manifest.update(extra)
        write_json_atomic(self.manifest_path, manifest)
        return manifest

    def archive_existing(self) -> Path | None:
        """Move every file of the run (not ``run.lock``) into ``superseded/<UTC stamp>/``.

        Used by ``--overwrite``: nothing is ever deleted. Returns the archive folder, or None.
        """
        self.close_traces()
        names = (
            # server-logs/ may hold the log a launched server is writing right now (shopsimrl_core.serving).
            [p for p in self.run_dir.iterdir() if p.name not in {"run.lock", "superseded", "server-logs"}]
            if self.run_dir.exists()
            else []
        )
        if not names:
            return None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = self.run_dir / "superseded" / stamp
        target.mkdir(parents=True)
        for path in names:
            shutil.move(str(path), str(target / path.name))
        return target

    # ---------------------------------------------------------------- traces
    def _open_for_append(self) -> BinaryIO:
        if self._handle is None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: a traces.jsonl that is a symbolic link is refused, never written through
            fd = os.open(self.traces_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            handle = os.fdopen(fd, "a+b")
            cut_torn_tail(handle.fileno())
            self._handle = handle
        return self._handle

    def append(self, record: dict[str, Any], *, finite: Collection[str] = ()) -> None:
        """Append one trace line: serialise first, then write it whole; the fsync follows as a group commit.

        The line is built before anything is written, so a record that cannot be serialised
        (NaN, a non-JSON value) raises without touching the file. When this returns the line is in
        the OS page cache (a killed process loses nothing, no torn line is left); its fsync runs on
        the worker thread of :mod:`shopsimrl_core.runs.storage._durability`, and
        :func:`~shopsimrl_core.runs.storage._durability.wait_durable` waits for it.

        *finite*: top-level keys the caller vouches hold no NaN or infinite float (see
        :func:`~shopsimrl_core.adapters._json.dumps_line`); the rest of the record is checked.

        Raises:
            ValueError / TypeError: the record is not valid JSON data.
        """
        if not isinstance(record.get("episode_id"), str):
            raise TraceFormatError("trace record has no string episode_id; refusing to append it", code="trace-format")
        line = dumps_line(record, finite=finite)
        with self._append_lock:
            handle = self._open_for_append()
            fd = handle.fileno()
            try:
                offset = append_whole(fd, line, str(self.traces_path))  # ENOSPC / EFBIG: no torn line left
            except OSError:
                self._handle = None
                handle.close()
                raise
            # The line is in the page cache (a killed process keeps it); the fsync against a machine
            # crash is a group commit on a worker thread, so the event loop never waits for the disk.
            request_fsync(fd, str(self.traces_path))
            self._index_appender.after_write(offset, line, record, locked=self.locked)

    def close_traces(self) -> None:
        """Close the append handle (appends reopen it)."""
        with self._append_lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            self._index_appender.reset()

    def _scan(self) -> Iterator[tuple[int, int, dict[str, Any] | None]]:
        # A counted line is a JSON object with a string episode_id; anything else is skipped (§6.5).
        for line in iter_trace_lines(self.traces_path):
            value = line.value
            record = value if isinstance(value, dict) and isinstance(value.get("episode_id"), str) else None
            yield line.offset, line.length, record

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """Every counted line, in file order (lines that do not parse are skipped)."""
        for _, _, record in self._scan():
            if record is not None:
                yield record

    def index(self, *, persist: bool | None = None) -> TraceIndex:
        """The latest-record-wins index, read from the run index sidecar (``_index.py``).

        The sidecar is caught up with ``traces.jsonl`` by streaming only the bytes it does not yet
        cover (all of them when it is missing or stale) and written back when this store holds the
        lock or nobody does; ``persist=False`` never writes.
        """
        from shopsimrl_core.runs.storage._index import open_run_index

        return TraceIndex(open_run_index(self.run_dir, persist=persist, locked=self.locked))

    def latest_records(
        self, index: TraceIndex | None = None, episode_ids: Iterable[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Yield the latest record of each episode, sorted by ``episode_id`` (one record in memory at a time)."""
        index = index if index is not None else self.index()
        wanted = sorted(index.entries) if episode_ids is None else sorted(set(episode_ids) & set(index.entries))
        if not wanted:
            return
        with open(self.traces_path, "rb") as handle:
            for eid in wanted:
                entry = index.entries[eid]
                handle.seek(entry.offset)
                yield loads(handle.read(entry.length))

    # ---------------------------------------------------------------- invocations
    def append_invocation(self, entry: dict[str, Any]) -> None:
        """Append one line to ``invocations.jsonl`` (fsynced)."""
        _append_jsonl(self.invocations_path, {"schema_version": INVOCATION_SCHEMA, **entry})

    def read_invocations(self) -> list[dict[str, Any]]:
        """All invocation lines that parse."""
        return list(_read_jsonl(self.invocations_path))

