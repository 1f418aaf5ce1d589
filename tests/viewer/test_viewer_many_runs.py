"""The run list with 2,000 runs (issue 24): paginated with the right total, and never in the way of another page.

The viewer is the real ``shopsimrl view`` process on a port it picks itself (``--port 0``). To hold the
run list in flight without a timer, one run's ``summary.json`` is a named pipe: the list blocks reading
it until the test writes the summary, and meanwhile an episode page must be answered. Waits follow the
viewer's progress (its CPU time), never a fixed wall time.
"""

from __future__ import annotations

import errno
import html
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from testkit.core_runkit import record
from testkit.deadlines import Watched

from shopsimrl_core import RunStore, summarize_run

N_RUNS = 2000
PER = 50
STALL_S = 60  # the viewer used no CPU for this long while the test waited on it: it is stuck
T = TypeVar("T")


def _prototype(folder: Path) -> Path:
    """One small run written by the core's own writers: three episodes, its run index and summary.json."""
    store = RunStore(folder)
    for task in range(3):
        rec = record(task, reward=task / 2)
        rec["provenance"] = {"model": {"checkpoint_id": "ckpt-many", "model": "served-model"}}
        store.append(rec)
    store.close_traces()
    summarize_run(folder, requested=3)
    return folder


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<root>/val/run-00000 … run-01999``: copies of one real run folder."""
    root = tmp_path_factory.mktemp("many-runs") / "runs"
    proto = _prototype(root.parent / "proto")
    for i in range(N_RUNS):
        shutil.copytree(proto, root / "val" / f"run-{i:05d}")
    return root


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Viewer:
    """``shopsimrl view ROOT --port 0`` in its own process group; :meth:`wait` fails on a stall, not a clock."""

    def __init__(self, root: Path) -> None:
        argv = [sys.executable, "-m", "shopsimrl_core.cli._main", "view", str(root), "--port", "0"]
        self.proc = Watched(argv, stall_seconds=STALL_S)
        line = self.wait(lambda: next((x for x in self.proc.stdout if x.startswith("shopsimrl view: ")), None),
                         "the viewer's 'shopsimrl view: <url>' line")
        found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        assert found, line
        self.base_url = found.group(1)

    def wait(self, probe: Callable[[], T | None], what: str) -> T:
        """Poll *probe* until it returns a value; fail if the viewer exits or uses no CPU for ``STALL_S``."""
        pid = self.proc.process.pid
        cpu, moved = _cpu_seconds(pid), time.monotonic()
        while True:
            value = probe()
            if value is not None:
                return value
            assert self.proc.process.poll() is None, f"viewer exited while waiting for {what}: {self.proc.stderr}"
            now_cpu = _cpu_seconds(pid)
            if now_cpu != cpu:
                cpu, moved = now_cpu, time.monotonic()
            assert time.monotonic() - moved < STALL_S, f"viewer made no progress for {STALL_S} s waiting for {what}"
            time.sleep(0.02)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.process.pid, signal.SIGTERM)  # the group Watched started, nothing else
            self.proc.process.wait(30)
        except ProcessLookupError:
            pass
        except Exception:
            os.killpg(self.proc.process.pid, signal.SIGKILL)
            self.proc.process.wait(30)


@pytest.fixture
def viewer_process() -> Iterator[Callable[[Path], _Viewer]]:
    started: list[_Viewer] = []

    def start(root: Path) -> _Viewer:
        started.append(_Viewer(root))
        return started[-1]

    yield start
    for viewer in started:
        viewer.stop()


def _open_writer(fifo: Path) -> int | None:
    """A write end of *fifo* once some process holds it open for reading, else None (never blocks)."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return None
        raise


def _get(url: str, **params: Any) -> httpx.Response:
    return httpx.get(url, params=params, timeout=None, trust_env=False)  # waits are the stall detector's


def _runs_on(page: str) -> list[str]:
    return [html.unescape(x) for x in re.findall(r'<tr class="run">\s*<td><a href="[^"]+">([^<]+)</a>', page)]


def _field(page: str, ident: str) -> int:
    found = re.search(rf'id="{ident}">(\d+)<', page)
    assert found, ident
    return int(found.group(1))


def test_run_list_of_2000_runs_is_paginated_and_never_blocks_another_page(many_runs: Path, viewer_process) -> None:
    fifo = many_runs / "val" / "run-00000" / "summary.json"
    summary = fifo.read_bytes()
    fifo.unlink()
    os.mkfifo(fifo)
    episode_id = "task-000001__sample-000"
    viewer = viewer_process(many_runs)
    writer: int | None = None
    pool = ThreadPoolExecutor(2)  # not waited for on failure: stopping the viewer ends its requests
    try:
        listing: Future[httpx.Response] = pool.submit(_get, viewer.base_url + "/", per=str(PER))
        # The list request is in flight once it holds the pipe open; it cannot finish before we write.
        writer = viewer.wait(lambda: _open_writer(fifo), "the run list to open run-00000/summary.json")
        episode = pool.submit(_get, f"{viewer.base_url}/run/val/run-00001/episode/{episode_id}")
        answered = viewer.wait(lambda: episode.result() if episode.done() else None,
                               "the episode page while the run list is in flight")
        assert answered.status_code == 200 and episode_id in answered.text
        assert not listing.done(), "the run list finished without the summary it was reading"
        os.write(writer, summary)
        os.close(writer)
        writer = None
        first = viewer.wait(lambda: listing.result() if listing.done() else None, "the run list")
    finally:
        if writer is not None:  # a list still waiting on the pipe (a failed assertion above) gets EOF
            os.close(writer)
        pool.shutdown(wait=False)
    assert first.status_code == 200
    assert _field(first.text, "runs-total") == N_RUNS and _field(first.text, "runs-pages") == N_RUNS // PER
    rows = _runs_on(first.text)
    assert rows == [f"val/run-{i:05d}" for i in range(PER)]  # one page, in path order
    # run-00000's row holds what was written into the pipe: the same counts as its copies
    cells = re.findall(r'<tr class="run">(.*?)</tr>', first.text, flags=re.S)
    assert re.sub(r"run-\d+", "", cells[0]) == re.sub(r"run-\d+", "", cells[1]) and "3/3" in cells[0]
    assert 'id="runs-next"' in first.text and 'id="runs-prev"' not in first.text

    last = _get(viewer.base_url + "/", per=str(PER), page=str(N_RUNS // PER + 5)).text  # past the end: the last page
    assert _field(last, "runs-page") == N_RUNS // PER
    assert _runs_on(last) == [f"val/run-{i:05d}" for i in range(N_RUNS - PER, N_RUNS)]
    assert 'id="runs-next"' not in last and 'id="runs-prev"' in last
    found = _get(viewer.base_url + "/", q="run-0199").text
    assert _field(found, "runs-total") == 10 and _runs_on(found) == [f"val/run-0199{i}" for i in range(10)]


def test_run_rows_are_kept_per_file_state_and_in_flight_runs_come_from_the_index(tmp_path: Path, viewer_for) -> None:
    root = tmp_path / "runs"
    done = _prototype(root / "val" / "done")
    live = RunStore(root / "val" / "live")  # no summary.json yet: its row comes from the run index
    for task in range(4):
        live.append(record(task, reward=1.0 if task < 3 else 0.0, status="failed" if task == 3 else "completed"))
    live.close_traces()
    base = viewer_for([root]).base_url

    def row(rel: str) -> str:
        page = httpx.get(base + "/", timeout=None, trust_env=False).text
        cells = re.findall(r'<tr class="run">(.*?)</tr>', page, flags=re.S)
        return next(c for c in cells if f">{rel}<" in c)

    assert "3/?" in row("val/live") and "in flight" in row("val/live")  # 3 completed of an unknown plan, 1 failed
    assert "3/3" in row("val/done") and "in flight" not in row("val/done")
    # The same size and mtime: the row read before is shown again (nothing is re-read) ...
    path = done / "summary.json"
    before = path.stat()
    text = path.read_text(encoding="utf-8")
    edited = text.replace('"completed": 3', '"completed": 2', 1)
    assert len(edited) == len(text) and edited != text
    path.write_text(edited, encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert "3/3" in row("val/done")
    # ... and a new mtime is read again.
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert "2/3" in row("val/done")


def test_a_new_run_folder_is_listed_though_the_listing_is_kept(tmp_path: Path, viewer_for) -> None:
    root = tmp_path / "runs"
    _prototype(root / "val" / "first")
    hour_ago = time.time_ns() - 3600 * 10**9
    for folder in (root, root / "val"):  # settled folders: the kept listing is trusted while they stay so
        os.utime(folder, ns=(hour_ago, hour_ago))
    base = viewer_for([root]).base_url

    def listed() -> list[str]:
        return _runs_on(httpx.get(base + "/", timeout=None, trust_env=False).text)

    assert listed() == ["val/first"]
    assert listed() == ["val/first"]
    _prototype(root / "val" / "second")
    assert listed() == ["val/first", "val/second"]
    (root / "train").mkdir()
    shutil.copytree(root / "val" / "first", root / "train" / "third")
    assert listed() == ["train/third", "val/first", "val/second"]
    assert json.loads((root / "train" / "third" / "summary.json").read_text())["counts"]["completed"] == 3


def test_run_names_and_the_query_are_escaped_on_the_run_list(tmp_path: Path, viewer_for) -> None:
    root = tmp_path / "runs"
    planted = "<img src=x onerror=alert(1)>"
    _prototype(root / "val" / planted)
    _prototype(root / "val" / "plain")
    base = viewer_for([root]).base_url
    page = httpx.get(base + "/", params={"q": "<script>alert(2)</script>", "per": "1"}, timeout=None, trust_env=False)
    assert page.status_code == 200 and "<script>alert(2)" not in page.text and "&lt;script&gt;alert(2)" in page.text
    listed = httpx.get(base + "/", params={"per": "1"}, timeout=None, trust_env=False).text
    assert planted not in listed and html.escape(planted, quote=True) in listed  # the row and the compare form
    assert _field(listed, "runs-total") == 2 and len(_runs_on(listed)) == 1
    assert _runs_on(httpx.get(base + "/", params={"q": "IMG SRC"}, timeout=None, trust_env=False).text) == [
        f"val/{planted}"
    ]


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    from testkit.deadlines import run_watched

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_watched([sys.executable, "-m", "shopsimrl_core.cli._main", "view", str(tmp_path), "--port",
                            str(port)], stall_seconds=STALL_S)
    assert done.returncode == 2, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "error[view-port-unavailable]" in lines[0] and f"--port {port}" in lines[0], lines
    assert "--port 0" in lines[0] and "shopsimrl view: http" not in done.stdout
