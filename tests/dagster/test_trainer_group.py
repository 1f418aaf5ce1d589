"""The trainer's process group: what ``round_training`` relies on when a run is terminated or a trainer dies.

``PipesSubprocessClient`` forwards a termination as SIGINT to the one process it started — here the
supervisor ``python -m shopsimrl_pipes.group`` — which must stop the trainer's whole group (workers that
ignore SIGTERM included) within its stop timeout, and name the signal that ended a killed trainer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# a trainer with a worker that ignores SIGTERM (as a stuck data loader would); both write their pids
TRAINER = """
import os, signal, subprocess, sys, time
WORKER = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
          "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)")
worker = subprocess.Popen([sys.executable, "-c", WORKER, sys.argv[2]])
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent has not reaped it yet)
    status = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "Z"
    return status != "Z"


def _start(tmp_path: Path, stop_timeout: float) -> tuple[subprocess.Popen[bytes], int, int, Path]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER, encoding="utf-8")
    trainer_pid, worker_pid, status = tmp_path / "trainer.pid", tmp_path / "worker.pid", tmp_path / "status.json"
    supervisor = subprocess.Popen([sys.executable, "-m", "shopsimrl_pipes.group", "--stop-timeout", str(stop_timeout),
                                   "--status", str(status), "--", sys.executable, str(script), str(trainer_pid),
                                   str(worker_pid)])
    while not (trainer_pid.exists() and worker_pid.exists() and worker_pid.read_text()):
        assert supervisor.poll() is None
        time.sleep(0.05)
    time.sleep(0.2)
    return supervisor, int(trainer_pid.read_text()), int(worker_pid.read_text()), status


def test_sigint_to_the_supervisor_stops_the_whole_group_within_the_stop_timeout(tmp_path: Path) -> None:
    supervisor, trainer, worker, status = _start(tmp_path, stop_timeout=2.0)
    assert os.getpgid(trainer) == trainer == os.getpgid(worker) != os.getpgid(supervisor.pid)
    started = time.monotonic()
    supervisor.send_signal(signal.SIGINT)  # what PipesSubprocessClient does on a run's termination
    supervisor.wait(timeout=30)
    took = time.monotonic() - started
    assert not _alive(trainer) and not _alive(worker)
    assert took < 2.0 + 5.0, took  # the stop timeout, plus slack for a loaded machine
    record = json.loads(status.read_text())
    assert record["stopped_by"] == ["SIGINT"] and record["signal"] == "SIGTERM"


def test_a_killed_trainer_is_named_and_its_leftover_workers_are_stopped(tmp_path: Path) -> None:
    supervisor, trainer, worker, status = _start(tmp_path, stop_timeout=1.0)
    os.kill(trainer, signal.SIGKILL)
    code = supervisor.wait(timeout=30)
    assert code == 128 + signal.SIGKILL
    assert not _alive(worker)  # the worker ignored SIGTERM; SIGKILL after the stop timeout took it
    record = json.loads(status.read_text())
    assert record["signal"] == "SIGKILL" and record["pid"] == trainer


def test_a_killed_supervisor_takes_its_trainer_with_it(tmp_path: Path) -> None:
    supervisor, trainer, worker, _ = _start(tmp_path, stop_timeout=1.0)
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(timeout=30)
    deadline = time.monotonic() + 20
    while _alive(trainer) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(trainer)  # PR_SET_PDEATHSIG: the trainer got SIGTERM when the supervisor died
    os.kill(worker, signal.SIGKILL)  # the worker is the trainer's own child: not the supervisor's to reach here
