"""The `.env` file rule of the evaluation config (runtime-semantics §3.2).

A dotenv file only fills gaps: a value never overrides a variable the process already has, so a
secret exported in the shell always wins over a file on disk.

Why not python-dotenv: §3.2 fixes a simpler, literal format, and python-dotenv (1.x) reads the
same file differently: it drops `` #…`` after an unquoted value (``KEY=pa #ss`` gives ``pa``, so
a secret containing `` #`` would be silently cut), expands ``${VAR}`` references, and turns
backslash escapes inside double quotes into characters. Existing ``.env`` files depend on the
literal reading, so the parser stays ours (and is small).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from shopsimrl_core._errors import ConfigError

__all__ = ["parse_dotenv", "apply_dotenv"]


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in {'"', "'"}:
        return value[1:-1]
    return value


def parse_dotenv(path: Path) -> dict[str, str]:
    """Return the ``NAME -> value`` pairs of a dotenv file, in file order.

    Rules (§3.2): UTF-8 with an optional BOM; blank lines, ``#`` lines and lines without ``=``
    are skipped; an ``export `` prefix is dropped from the name; the value loses surrounding
    whitespace and one layer of matching quotes.

    Raises:
        ConfigError: the file does not exist or is not UTF-8.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: experiment.dotenv: file not found; create it or set experiment.dotenv: null",
            code="dotenv-missing",
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 ({exc.reason}); re-save the file as UTF-8", code="dotenv-missing"
        ) from None
    pairs: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        name = name.strip()
        if name.startswith("export "):
            name = name[len("export ") :].strip()
        if name:
            pairs[name] = _unquote(value)
    return pairs


def apply_dotenv(path: Path | None, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the file's variables that are not yet set in *environ* (default ``os.environ``).

    Returns the names that were set (never their values, which may be secrets).
    """
    if path is None:
        return []
    target = os.environ if environ is None else environ
    applied: list[str] = []
    for name, value in parse_dotenv(path).items():
        if name not in target:
            target[name] = value
            applied.append(name)
    return applied
