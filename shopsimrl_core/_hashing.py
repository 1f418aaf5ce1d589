"""Canonical JSON, fingerprints, JSON documents on disk and atomic file writes (runtime-semantics §2)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, TextIO, overload

from shopsimrl_core._errors import ConfigError

__all__ = [
    "canonical_json",
    "fingerprint",
    "sha256_file",
    "dumps_pretty",
    "atomic_output",
    "write_bytes_atomic",
    "write_text_atomic",
    "write_json_atomic",
    "parse_json_text",
    "read_json_file",
    "json_object",
    "json_list",
]


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of *value*: sorted keys, no whitespace, non-ASCII literal."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def fingerprint(value: Any) -> str:
    """Return lowercase hex SHA-256 of ``canonical_json(value)``.

    A string is hashed as its JSON encoding, quotes included (runtime-semantics §2.2 quirk), so
    ``fingerprint("abc")`` hashes the 5 bytes ``"abc"``.
    """
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the lowercase hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def dumps_pretty(value: Any) -> str:
    """JSON as written to documents: ``indent=2``, non-ASCII literal, NaN refused, trailing newline."""
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike[str], value: Any) -> Path:
    """Write *value* as a pretty JSON document (:func:`dumps_pretty`) atomically; return the path.

    See :func:`atomic_output` for the guarantee.
    """
    return write_text_atomic(path, dumps_pretty(value))


def write_text_atomic(path: str | os.PathLike[str], chunks: str | Iterable[str]) -> Path:
    """Write *chunks* (one string or an iterable of strings, UTF-8) atomically; return the path.

    Chunks are written as they come, so a large file need not fit in memory; if producing a chunk
    raises, the target is untouched. See :func:`atomic_output` for the guarantee.
    """
    with atomic_output(path, binary=False) as handle:
        for chunk in [chunks] if isinstance(chunks, str) else chunks:
            handle.write(chunk)
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes | Iterable[bytes]) -> Path:
    """Write *data* (bytes or an iterable of byte chunks) atomically; return the path.

    See :func:`atomic_output` for the guarantee.
    """
    with atomic_output(path, binary=True) as handle:
        for chunk in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
            handle.write(chunk)
    return Path(path)


@overload
def atomic_output(path: str | os.PathLike[str], *, binary: Literal[True]) -> AbstractContextManager[BinaryIO]: ...
@overload
def atomic_output(path: str | os.PathLike[str], *, binary: Literal[False] = ...) -> AbstractContextManager[TextIO]: ...
def atomic_output(path: str | os.PathLike[str], *, binary: bool = False) -> AbstractContextManager[IO[Any]]:
    r"""Open a file handle whose contents replace *path* only when the ``with`` block succeeds.

    Readers see the old file or the complete new one, never a half-written one, even after a crash
    (runtime-semantics §2.4): the data go to a uniquely named ``.<name>.<random>.tmp`` in the same
    folder (so concurrent writers never share a temporary file), the file is fsynced, renamed over
    the target, and the folder is fsynced so the rename itself is durable. If the block raises, the
    target is untouched and the temporary file removed. Text handles are UTF-8 with ``\n`` endings.
    """
    return _atomic_output(Path(path), binary)


@contextmanager
def _atomic_output(target: Path, binary: bool) -> Iterator[IO[Any]]:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        if binary:
            handle: IO[Any] = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def _umask() -> int:
    # os.umask can only be read by setting it; do it once, under a lock, and cache the value.
    global _UMASK
    if _UMASK is None:
        with _UMASK_LOCK:
            if _UMASK is None:
                current = os.umask(0o022)
                os.umask(current)
                _UMASK = current
    return _UMASK


_UMASK: int | None = None
_UMASK_LOCK = threading.Lock()


def _fsync_dir(folder: Path) -> None:
    # Makes the rename durable on POSIX; directories cannot be opened for fsync on Windows.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def parse_json_text(text: str, where: str, what: str) -> Any:
    """Parse a JSON document read from *where*.

    Raises:
        ConfigError: ``<where>: <what> is not valid JSON (<reason> at line N)``.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: {what} is not valid JSON ({exc.msg} at line {exc.lineno})") from exc


def read_json_file(path: str | os.PathLike[str], what: str, *, fix: str) -> Any:
    """Read and parse the JSON document at *path* (*what* names it in errors, *fix* says what to change).

    Raises:
        ConfigError: one line naming the file — unreadable (``...; <fix>``), not UTF-8, or not JSON.
    """
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {what} ({exc.strerror}); {fix}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: {what} is not UTF-8 text") from exc
    return parse_json_text(text, where, what)


def json_object(value: Any) -> dict[str, Any]:
    """*value* when it is a JSON object (a dict), else a new empty dict.

    For reading untrusted documents (traces, manifests) where a missing or malformed part must read
    as empty rather than raise.
    """
    return value if isinstance(value, dict) else {}


def json_list(value: Any) -> list[Any]:
    """*value* when it is a JSON array (a list), else a new empty list."""
    return value if isinstance(value, list) else []
