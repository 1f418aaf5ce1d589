"""The one atomic-write helper: whole files or nothing, unique temporary names, bytes and text."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from shopsimrl_core._hashing import atomic_output, write_bytes_atomic, write_json_atomic, write_text_atomic


def test_text_bytes_and_json_are_written_whole(tmp_path: Path) -> None:
    write_text_atomic(tmp_path / "a" / "t.txt", "héllo\n")
    write_text_atomic(tmp_path / "c.txt", iter(["a", "b\n"]))
    write_bytes_atomic(tmp_path / "b.bin", [b"\x00", b"\xff"])
    write_json_atomic(tmp_path / "d.json", {"k": "值"})
    assert (tmp_path / "a" / "t.txt").read_bytes() == "héllo\n".encode()
    assert (tmp_path / "c.txt").read_text(encoding="utf-8") == "ab\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert (tmp_path / "d.json").read_text(encoding="utf-8") == '{\n  "k": "值"\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b.bin", "c.txt", "d.json"]


def test_a_failure_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    write_text_atomic(target, "old\n")

    def chunks():
        yield "new, half"
        raise RuntimeError("producer failed")

    with pytest.raises(RuntimeError, match="producer failed"):
        write_text_atomic(target, chunks())
    with pytest.raises(ValueError):
        with atomic_output(target, binary=True) as handle:
            handle.write(b"partial")
            raise ValueError("stop")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_concurrent_writers_never_share_a_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "shared.txt"
    texts = [f"writer {i}\n" * 2000 for i in range(16)]
    barrier = threading.Barrier(len(texts))

    def write(text: str) -> None:
        barrier.wait()
        write_text_atomic(target, text)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_text(encoding="utf-8") in texts  # one whole text, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["shared.txt"]


def test_written_files_get_the_usual_mode(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    path = write_text_atomic(tmp_path / "m.txt", "x")
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_parquet_table_goes_through_the_same_helper(tmp_path: Path) -> None:
    import polars as pl

    frame = pl.DataFrame({"a": [1, 2]})
    with atomic_output(tmp_path / "t.parquet", binary=True) as handle:
        frame.write_parquet(handle)
    assert pl.read_parquet(tmp_path / "t.parquet").equals(frame)
