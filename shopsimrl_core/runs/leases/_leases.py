"""The lease journal: the client, not the server, owns the cleanup of every environment lease.

ShopSimulator frees a slot only on an explicit ``release_one`` (it has no lease expiry), so a run that
dies holding leases leaves slots taken for good and the next run waits forever. The runs layer
therefore keeps ``leases.jsonl`` in the run directory:

- every lease a reset grants is written to the journal **before the episode uses it** (before the
  first ``interact``; fsynced by group commit, see ``_durability.py``), and a ``released`` line
  follows once ``release_one`` succeeded (a 409 counts as released: the server no longer knows the
  lease);
- ``release_one`` is retried with exponential backoff for ``environment.release_retry_seconds``;
- at the next start of the same run directory every lease still outstanding in the journal is
  released first (this is what heals a SIGKILL), and the journal is compacted.

A reset also has a bounded wait for a free slot (``environment.reset_wait_seconds``) and the run is
told (one notice) when resets start waiting.

The rules that keep a SIGKILL from leaking slots on a server without lease expiry (a client-side slot
budget, a reset journaled before it is sent, the reconciliation at the start) live with the journaled
environment in :mod:`._journaled_env`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from shopsimrl_core._hashing import write_bytes_atomic as _write_bytes_atomic
from shopsimrl_core.runs.storage._durability import append_whole, request_fsync

__all__ = ["LeaseJournal", "JOURNAL_NAME"]

JOURNAL_NAME = "leases.jsonl"


def _now() -> str:
    from shopsimrl_core.episode._trace import utc_now

    return utc_now()


def _line(entry: dict[str, Any]) -> bytes:
    # sorted keys, compact, non-ASCII literal; the stdlib for what orjson refuses (a hand-edited
    # journal read back by compact() may hold integers beyond 64 bits)
    try:
        return orjson.dumps(entry, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(entry, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


class LeaseJournal:
    """Append-only ``leases.jsonl`` of one run directory (group-committed fsync; a torn tail is ignored)."""

    def __init__(self, run_dir: str | os.PathLike[str], invocation_id: str) -> None:
        self.path = Path(run_dir) / JOURNAL_NAME
        self.invocation_id = invocation_id
        # One descriptor for the whole run (two lines per episode): opening the file, checking its
        # tail and closing it again for every line cost more than writing the line.
        self._fd: int | None = None
        self._torn = False  # the file ends in a torn line (a killed writer): the next line starts one

    def _open(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            self._torn = end > 0 and os.pread(fd, 1, end - 1) != b"\n"
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        return fd

    def close(self) -> None:
        """Close the journal's descriptor (a later line opens it again)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _append(self, entry: dict[str, Any], *, durable: bool = True) -> None:
        line = _line(entry)
        fd = self._fd if self._fd is not None else self._open()
        if self._torn:
            line = b"\n" + line  # end the torn line left by a killed writer
        try:
            append_whole(fd, line, str(self.path))  # disk full / file too large: never half a line
        except OSError:
            self.close()  # the next line checks the tail afresh
            raise
        self._torn = False
        # The line is in the page cache now, so a killed process keeps it; the fsync (against a
        # machine crash) is a group commit on a worker thread, since the event loop must stay free
        # to read the next reset answer: a lease granted but not yet journaled can leak.
        if durable:
            request_fsync(fd, str(self.path))

    def intent(self, key: str, base_url: str) -> None:
        """Record a reset about to be sent (``op: reset``); its answer settles *key* (``acquired`` / ``no-lease``).

        Not fsynced: a killed process keeps the line (page cache); only a machine crash could lose it.
        """
        self._append(
            {"op": "reset", "key": key, "base_url": base_url, "invocation_id": self.invocation_id, "at": _now()},
            durable=False,
        )

    def no_lease(self, key: str, base_url: str) -> None:
        """Record that the reset *key* ended without a lease this run knows of (error answer, give-up)."""
        self._append(
            {"op": "no-lease", "key": key, "base_url": base_url, "invocation_id": self.invocation_id, "at": _now()},
            durable=False,
        )

    def lost(self, key: str, base_url: str) -> None:
        """Record that the answer to reset *key* was lost or cut after the server may have granted it.

        The reset stays unanswered, and unlike other unanswered resets of a run that ended normally it is
        kept by :meth:`compact` until a start finds its server with every slot free.
        """
        self._append(
            {"op": "lost", "key": key, "base_url": base_url, "invocation_id": self.invocation_id, "at": _now()}
        )

    def acquired(self, env_idx: int, lease_id: str, base_url: str, key: str | None = None) -> None:
        """Record a granted lease (call before the lease is used); *key* settles the reset that asked for it."""
        entry: dict[str, Any] = {
            "op": "acquired",
            "env_idx": env_idx,
            "lease_id": lease_id,
            "base_url": base_url,
            "invocation_id": self.invocation_id,
            "at": _now(),
        }
        if key is not None:
            entry["key"] = key
        self._append(entry)

    def released(self, env_idx: int, lease_id: str, base_url: str) -> None:
        """Record that the server no longer holds *lease_id*.

        Not fsynced: the line is in the page cache at once (a killed process keeps it), and losing it
        in a machine crash only costs a harmless 409 at the next start; one fsync less per episode
        keeps the event loop free to read reset answers.
        """
        self._append(
            {
                "op": "released",
                "env_idx": env_idx,
                "lease_id": lease_id,
                "base_url": base_url,
                "invocation_id": self.invocation_id,
                "at": _now(),
            },
            durable=False,
        )

    def _entries(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries = []
        for line in raw.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # torn tail of a killed writer
            if isinstance(entry, dict):
                entries.append(entry)
        return entries

    def outstanding(self) -> list[dict[str, Any]]:
        """Acquired leases without a ``released`` line, in journal order."""
        return self._state()[0]

    def unanswered(self, base_url: str | None = None) -> list[dict[str, Any]]:
        """Resets sent (``op: reset``) whose answer never settled them (of *base_url* only, when given).

        After a SIGKILL these are the resets whose lease, if the server granted one, nobody knows.
        """
        left = self._state()[1]
        if base_url is None:
            return left
        return [e for e in left if str(e.get("base_url", "")).rstrip("/") == base_url.rstrip("/")]

    def _state(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        held: dict[str, dict[str, Any]] = {}
        asked: dict[str, dict[str, Any]] = {}
        for entry in self._entries():
            op, key = entry.get("op"), entry.get("key")
            if op == "reset" and isinstance(key, str):
                asked[key] = entry
                continue
            if op == "no-lease" and isinstance(key, str):
                asked.pop(key, None)
                continue
            if op == "lost" and isinstance(key, str):
                if key in asked:
                    asked[key] = {**asked[key], "lost": True}
                continue
            if not isinstance(entry.get("lease_id"), str):
                continue
            if op == "acquired":
                held[entry["lease_id"]] = entry
                if isinstance(key, str):
                    asked.pop(key, None)
            elif op == "released":
                held.pop(entry["lease_id"], None)
        return list(held.values()), list(asked.values())

    def compact(
        self,
        *,
        keep_unanswered: Callable[[dict[str, Any]], bool] | None = None,
        drop_lost: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Rewrite the journal atomically; remove the file when nothing is left.

        It keeps the outstanding leases, the unanswered resets *keep_unanswered* selects (none by default)
        and every reset whose answer was lost (:meth:`lost`) unless *drop_lost* selects it. Unanswered
        resets of a killed invocation, and lost ones, stay until a start finds their server with every slot
        free (:meth:`JournaledEnvironment.reconcile`): until then they explain the missing slots.
        """
        self.close()  # the file is replaced or removed: later lines go to the new one
        held, asked = self._state()
        left = held + [
            e
            for e in asked
            if (e.get("lost") and not (drop_lost is not None and drop_lost(e)))
            or (keep_unanswered is not None and keep_unanswered(e))
        ]
        if not left:
            self.path.unlink(missing_ok=True)
            return
        data = b"".join(_line(entry) for entry in left)
        _write_bytes_atomic(self.path, data)
