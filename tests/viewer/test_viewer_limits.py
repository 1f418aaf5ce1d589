"""The viewer's limits (issue 33, items 2 and 3): documents too large to read, links out of the roots.

Item 2: a multi-GiB (sparse) ``summary.json``, ``manifest.json``, ``labels.parquet`` and SkillBank are
shown as "too large to show" and never read, so the real ``shopsimrl view`` process keeps its memory
flat (its peak resident size, ``VmHWM``, is compared before and after those pages). Item 3: a run
folder whose ``traces.jsonl`` (or ``summary.json``) is a symlink pointing out of the root is neither
listed nor served, like a URL path out of the root.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from testkit.core_runkit import record
from testkit.deadlines import Watched

from shopsimrl_core import RunStore, summarize_run
from shopsimrl_core.viewer import PathRefused, ViewerRoots
from shopsimrl_core.viewer._data import IndexCache, RunRows

HUGE = 3 << 30  # 3 GiB, sparse: no disk used, but reading it whole would take GBs of memory
FLAT = 256 << 20  # the viewer's peak resident size may grow by less than this while serving the huge files


def _run(folder: Path, checkpoint: str = "ckpt-limits") -> Path:
    """A small run written by the core: three episodes, its run index and summary.json."""
    store = RunStore(folder)
    for task in range(3):
        rec = record(task, reward=task / 2)
        rec["provenance"] = {"model": {"checkpoint_id": checkpoint, "model": "served-model"}}
        store.append(rec)
    store.close_traces()
    summarize_run(folder, requested=3)
    return folder


def _sparse(path: Path, size: int = HUGE) -> None:
    path.unlink(missing_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def _get(base: str, url_path: str, **params: str) -> httpx.Response:
    return httpx.get(base + url_path, params=params or None, timeout=120, trust_env=False)


@pytest.fixture
def viewer_process(tmp_path: Path):
    """``start(root) -> (process, base_url)``: the real ``shopsimrl view ROOT --port 0``, stopped at teardown."""
    started: list[Watched] = []

    def start(root: Path) -> tuple[Watched, str]:
        argv = [sys.executable, "-m", "shopsimrl_core.cli._main", "view", str(root), "--port", "0"]
        proc = Watched(argv, stall_seconds=120)
        started.append(proc)
        while True:  # the line naming the port comes once the socket is bound
            line = next((x for x in proc.stdout if x.startswith("shopsimrl view: ")), None)
            if line is not None:
                break
            assert proc.process.poll() is None, "".join(proc.stderr)
            assert time.monotonic() - proc.last_output < 120, "the viewer printed nothing for 120 s"
            time.sleep(0.05)
        found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        assert found, line
        return proc, found.group(1)

    yield start
    for proc in started:
        try:
            os.killpg(proc.process.pid, signal.SIGTERM)  # the group Watched started for it, nothing else
            proc.process.wait(30)
        except ProcessLookupError:
            pass


def test_multi_gib_documents_are_too_large_to_show_and_memory_stays_flat(tmp_path: Path, viewer_process) -> None:
    root = tmp_path / "runs"
    _run(root / "val" / "small")
    big = _run(root / "val" / "big")
    bank_dir = root / "skillbanks"
    bank_dir.mkdir()
    proc, base = viewer_process(root)
    pid = proc.process.pid
    # Warm up on sane files first (imports, polars, templates), then take the peak as the baseline.
    assert _get(base, "/").status_code == 200
    assert _get(base, "/run/val/small").status_code == 200
    assert "No summary.json yet" not in _get(base, "/run/val/big").text
    baseline = _peak_rss(pid)

    for name in ("summary.json", "manifest.json", "labels.parquet"):
        _sparse(big / name)
    _sparse(bank_dir / "bank.json")

    listing = _get(base, "/")
    assert listing.status_code == 200
    assert "summary.json is 3.0 GiB, over the viewer&#39;s limit of 16.0 MiB: too large to show" in listing.text
    assert "labels.parquet is 3.0 GiB" in listing.text
    run_page = _get(base, "/run/val/big")
    assert run_page.status_code == 200
    assert 'class="bad too-large">summary.json is 3.0 GiB' in run_page.text
    assert "No summary.json yet" not in run_page.text  # it is there, only too large
    assert "ckpt-limits" in run_page.text  # split and checkpoint from the first trace line instead
    label_page = _get(base, "/run/val/big/label/success")
    assert label_page.status_code == 200 and "labels.parquet is 3.0 GiB" in label_page.text
    bank_page = _get(base, "/skillbank", path="skillbanks/bank.json")
    assert bank_page.status_code == 200 and "bank.json is 3.0 GiB" in bank_page.text
    compare = _get(base, "/compare", a="val/small", b="val/big")
    assert compare.status_code == 200 and "manifest.json is 3.0 GiB" in compare.text

    grown = _peak_rss(pid) - baseline
    assert grown < FLAT, f"the viewer's peak memory grew by {grown / 2**20:.0f} MiB serving the huge documents"


def _planted(root: Path, outside: Path) -> Path:
    """A run folder under *root* whose traces.jsonl is a symlink to a real run's traces outside it."""
    linked = root / "val" / "linked"
    linked.mkdir(parents=True)
    (linked / "traces.jsonl").symlink_to(outside / "traces.jsonl")
    return linked


def test_a_traces_symlink_out_of_the_root_is_refused(tmp_path: Path, viewer_for) -> None:
    root = tmp_path / "runs"
    _run(root / "val" / "inside")
    outside = _run(tmp_path / "elsewhere" / "secret", checkpoint="ckpt-secret")
    _planted(root, outside)
    summary_link = _run(root / "val" / "summary-link")
    (summary_link / "summary.json").unlink()
    (summary_link / "summary.json").symlink_to(outside / "summary.json")
    # A link that stays inside the root is fine.
    ok_link = root / "val" / "ok-link"
    ok_link.mkdir()
    (ok_link / "traces.jsonl").symlink_to(root / "val" / "inside" / "traces.jsonl")

    server = viewer_for([root])
    listing = _get(server.base_url, "/")
    assert listing.status_code == 200
    assert "val/inside" in listing.text and "val/ok-link" in listing.text
    assert "val/linked" not in listing.text and "val/summary-link" not in listing.text
    assert "ckpt-secret" not in listing.text
    for path in ("/run/val/linked", "/run/val/linked/episode/task-000001__sample-000", "/run/val/summary-link",
                 "/compare?a=val/inside&b=val/linked"):
        response = _get(server.base_url, path)
        assert response.status_code == 404, path
        assert "task-000001" not in response.text and "ckpt-secret" not in response.text, path
    assert "symlink pointing out of the viewer roots" in _get(server.base_url, "/run/val/linked").text
    assert _get(server.base_url, "/run/val/ok-link").status_code == 200

    roots = ViewerRoots([root])
    assert [r.rel for r in roots.runs()] == ["val/inside", "val/ok-link"]
    for rel in ("val/linked", "val/summary-link"):
        with pytest.raises(PathRefused, match="symlink pointing out"):
            roots.run(rel)
    # A run directory given itself as the root: a link to its parent's other files is out of it too.
    with pytest.raises(PathRefused):
        ViewerRoots([root / "val" / "ok-link"]).run("ok-link")
    assert ViewerRoots([root / "val" / "ok-link"]).runs() == []


def test_a_link_planted_after_listing_is_not_read_for_the_run_list(tmp_path: Path, viewer_for) -> None:
    root = tmp_path / "runs"
    later = _run(root / "val" / "later")
    outside = _run(tmp_path / "elsewhere" / "secret", checkpoint="ckpt-secret")
    server = viewer_for([root])
    assert "ckpt-limits" in _get(server.base_url, "/").text
    (later / "summary.json").unlink()  # the run folder changes, its parent (what the listing watches) does not
    (later / "summary.json").symlink_to(outside / "summary.json")
    manifest = outside / "manifest.json"
    manifest.write_text(json.dumps({"plan": {"model": {"checkpoint_id": "ckpt-secret"}}}), encoding="utf-8")
    (later / "manifest.json").symlink_to(manifest)
    listing = _get(server.base_url, "/")
    assert "ckpt-secret" not in listing.text  # rescanned (not listed) or listed with its row refused
    assert _get(server.base_url, "/run/val/later").status_code == 404
    # The row of a run listed before the link came is not read from it.
    (later / "summary.json").unlink()
    (later / "manifest.json").unlink()
    listed = ViewerRoots([root]).runs()
    assert [r.rel for r in listed] == ["val/later"]
    (later / "summary.json").symlink_to(outside / "summary.json")
    (later / "manifest.json").symlink_to(manifest)
    row = RunRows(IndexCache()).row(listed[0])
    assert row["checkpoint"] == "?" and row.get("completed") is None
    assert "is a symlink pointing out of the viewer roots" in row["refused"]


def test_skillbank_candidates_linked_out_of_the_root_are_not_read(tmp_path: Path, viewer_for) -> None:
    bank_dir = tmp_path / "runs" / "skillbanks"
    bank_dir.mkdir(parents=True)
    bank = {
        "schema_version": "shopsimrl-skillbank-v1",
        "bank_version": "b1",
        "skills": [{"skill_id": "chunk-1", "version": "v1", "content": "先选规格", "metadata": {}}],
    }
    (bank_dir / "bank.json").write_text(json.dumps(bank, ensure_ascii=False), encoding="utf-8")
    secret = tmp_path / "secret_candidates.json"
    evidence = {"episode_id": "task-000777__sample-000", "step_index": 2}
    secret.write_text(json.dumps({"candidates": [{"candidate_id": "chunk-1", "evidence": [evidence]}]}))
    (bank_dir / "skill_candidates.json").symlink_to(secret)
    server = viewer_for([tmp_path / "runs"])
    page = _get(server.base_url, "/skillbank", path="skillbanks/bank.json")
    assert page.status_code == 200 and "先选规格" in page.text
    assert "task-000777" not in page.text
