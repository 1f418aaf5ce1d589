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
import re
from collections.abc import MutableMapping
from pathlib import Path

from shopsimrl_core._errors import ConfigError

__all__ = ["parse_dotenv", "apply_dotenv"]


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in {'"', "'"}:
        return value[1:-1]
    return value


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_dotenv(path: Path) -> dict[str, str]:
    """Return the ``NAME -> value`` pairs of a dotenv file, in file order.

    Rules (§3.2): UTF-8 with an optional BOM; blank lines and ``#`` lines are skipped; an ``export ``
    prefix is dropped from the name; the value loses surrounding whitespace and one layer of matching
    quotes. Stricter than §3.2 (issue 24), since a line it cannot read is a setting silently lost: a line
    without ``=``, a name that is no environment variable name (``MY KEY``, ``1X``), a value that opens a
    quote it never closes, a value holding a NUL byte and a name given twice are refused.

    Raises:
        ConfigError: the file does not exist or is not UTF-8 (``dotenv-missing``), or a line breaks the
            rules above (``dotenv-invalid``: the file, the line number and what is wrong, on one line —
            never the value, which may be a secret).
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
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise _invalid(path, number, "has no '=' (expected NAME=value)")
        name, _, value = line.partition("=")
        name = name.strip()
        if name.startswith("export "):
            name = name[len("export ") :].strip()
        if not _NAME.fullmatch(name):
            shown = name if len(name) <= 40 else name[:37] + "..."
            raise _invalid(path, number, f"{shown!r} is not an environment variable name (letters, digits, _)")
        stripped = value.strip()
        if stripped[:1] in {'"', "'"} and (len(stripped) < 2 or stripped[-1] != stripped[0]):
            raise _invalid(path, number, f"the value of {name} opens a {stripped[0]} quote it never closes")
        if "\x00" in value:
            # no environment variable can hold a NUL byte: os.environ would raise ValueError at apply time
            raise _invalid(path, number, f"the value of {name} holds a NUL byte, which no environment variable can")
        if name in first_line:
            again = f"{name} is set again (first at line {first_line[name]})"
            raise _invalid(path, number, again, "keep one of the two")
        first_line[name] = number
        pairs[name] = _unquote(value)
    return pairs


def _invalid(path: Path, number: int, problem: str, fix: str = "fix the line") -> ConfigError:
    return ConfigError(f"{path}:{number}: {problem}; {fix} (experiment.dotenv)", code="dotenv-invalid")


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
