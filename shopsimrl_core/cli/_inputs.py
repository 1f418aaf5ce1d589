"""The paths a verb is given, checked before it reads or writes anything: one line per mistake.

Each check turns the mistake into a ``ShopSimRLError`` whose code sets the exit code
(docs/errors.md): a path that holds no run (``run-dir-missing``), an input file that is missing, a
directory or not UTF-8 (``input-*``), an output path that is a directory (``path-wrong-type``). Without
them a verb failed deep inside with a code about something else (``trace-format: traces file not
found`` for a mistyped run folder) or with the bare OS error of a temporary file.
"""

from __future__ import annotations

from pathlib import Path

from shopsimrl_core._errors import ShopSimRLError

__all__ = ["require_run_dir", "require_input_file", "require_output_file", "require_output_dir"]


def require_run_dir(raw: str) -> Path:
    """*raw* when it is a folder holding a run (``manifest.json`` or ``traces.jsonl``).

    Raises:
        ShopSimRLError: ``run-dir-missing``, saying whether the path is missing, a file or a plain folder.
    """
    run_dir = Path(raw)
    if not run_dir.exists():
        raise ShopSimRLError(
            f"{run_dir}: no such run directory; pass the folder holding traces.jsonl", code="run-dir-missing"
        )
    if not run_dir.is_dir():
        raise ShopSimRLError(
            f"{run_dir}: not a directory; pass the run directory (the folder holding traces.jsonl)",
            code="run-dir-missing",
        )
    if not (run_dir / "manifest.json").exists() and not (run_dir / "traces.jsonl").exists():
        raise ShopSimRLError(
            f"{run_dir}: not a run directory (no manifest.json or traces.jsonl); pass the folder `shopsimrl run` wrote",
            code="run-dir-missing",
        )
    return run_dir


def require_input_file(raw: str, what: str, fix: str) -> Path:
    """*raw* when it is a readable UTF-8 file; *what* names it and *fix* says what to pass instead.

    Raises:
        ConfigError: ``input-missing``, ``input-not-a-file``, ``input-unreadable`` or ``input-not-utf8``.
    """
    from shopsimrl_core.runs.config._config import read_text_input

    path = Path(raw)
    read_text_input(path, what, fix)
    return path


def require_output_file(raw: str, flag: str) -> Path:
    """*raw* when nothing but a file could be written there (*flag* names the argument in the message).

    Raises:
        ShopSimRLError: ``path-wrong-type`` when *raw* is a directory.
    """
    path = Path(raw)
    if path.is_dir():
        raise ShopSimRLError(f"{path}: {flag} is a directory; pass a file path", code="path-wrong-type")
    return path


def require_output_dir(raw: str, flag: str) -> Path:
    """*raw* when a folder can be made or used there (*flag* names the argument in the message).

    Raises:
        ShopSimRLError: ``path-wrong-type`` when *raw* (or a parent of it) is a file.
    """
    path = Path(raw)
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ShopSimRLError(
                    f"{folder}: {flag} is {'a file' if folder == path else 'under a file'}, not a directory; "
                    "pass a folder path",
                    code="path-wrong-type",
                )
            break
    return path
