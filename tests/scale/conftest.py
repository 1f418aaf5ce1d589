"""Real servers for the scale tests: a throwaway PostgreSQL cluster, a Redis broker, a second sandbox.

PostgreSQL refuses to run as root, so when the tests run as root the cluster is created and run
by the ``postgres`` system user (``runuser``) in a temporary folder it owns; otherwise by the
current user. Both servers bind free loopback ports, keep nothing on disk beyond their tmp folder
(Redis: no snapshots, no AOF) and are stopped at the end of the session.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shopsim_sandbox.testing import SandboxServer

PG_BINS = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
REDIS = shutil.which("redis-server")


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, what: str, process: subprocess.Popen | None = None, timeout_s: float = 60) -> None:
    """Wait until something accepts TCP connections on 127.0.0.1:*port*."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if process is not None and process.poll() is not None:
                raise AssertionError(f"{what} exited with code {process.returncode}") from None
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not listen on port {port} within {timeout_s} s") from None
            time.sleep(0.1)


@dataclass
class Postgres:
    """A running throwaway cluster; ``env`` holds the instance's DAGSTER_PG_* connection variables."""

    host: str
    port: int
    user: str
    password: str
    db: str

    @property
    def env(self) -> dict[str, str]:
        return {"DAGSTER_PG_HOST": self.host, "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USER": self.user,
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": self.db}


def _as_cluster_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server on a free port; database ``dagster`` owned by role ``dagster`` (password auth over TCP)."""
    if not PG_BINS:
        pytest.skip("Debian postgresql is not installed (scripts/setup.sh --ui installs it)")
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres system user to own the cluster")
    bin_dir = Path(PG_BINS[-1])
    work = Path(tempfile.mkdtemp(prefix="shopsim-pg-"))
    password = secrets.token_hex(12)
    pwfile = work / "pw"
    pwfile.write_text(password + "\n", encoding="utf-8")
    pwfile.chmod(0o600)
    if os.geteuid() == 0:
        for path in (work, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    data, port = work / "data", free_port()
    try:
        subprocess.run(_as_cluster_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", "dagster",
                                          "--pwfile", str(pwfile), "--auth-local=trust", "--auth-host=scram-sha-256",
                                          "-E", "UTF8", "--no-sync"]),
                       check=True, capture_output=True, timeout=120)
        pwfile.unlink()
        options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {work} -c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off -c max_connections=200")
        subprocess.run(_as_cluster_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(work / "server.log"),
                                          "-o", options, "-w", "-t", "60", "start"]),
                       check=True, capture_output=True, timeout=90)
        subprocess.run(_as_cluster_owner([str(bin_dir / "createdb"), "-h", str(work), "-p", str(port), "-U", "dagster",
                                          "dagster"]), check=True, capture_output=True, timeout=60)
        yield Postgres(host="127.0.0.1", port=port, user="dagster", password=password, db="dagster")
    finally:
        subprocess.run(_as_cluster_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``redis://127.0.0.1:<port>`` of a Redis server that persists nothing."""
    if REDIS is None:
        pytest.skip("Debian redis-server is not installed (scripts/setup.sh --ui installs it)")
    work = Path(tempfile.mkdtemp(prefix="shopsim-redis-"))
    port = free_port()
    process = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(work)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, "redis-server", process)
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def second_sandbox() -> Iterator[SandboxServer]:
    """A second sandbox (same catalog and seed as the session ``sandbox``): a second policy server and environment."""
    server = SandboxServer(slots=16)
    server.start()
    try:
        yield server
    finally:
        server.stop()
