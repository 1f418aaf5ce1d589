"""The GPU pool: which devices a launched server gets, one lock file per device.

Dagster's run queue decides *how many* servers run at once (a limit equal to the pool's slots); this
module decides *which* devices each gets, and guarantees two servers never share one even when
something else launches runs too (the CLI, a second Dagster deployment on the same machine). A device
is held by an exclusive ``flock`` on ``<state_dir>/gpu-<id>.lock``. The lock's file descriptor is
inherited by the server it was taken for, so the kernel drops the lock only when the server *and* its
launcher are gone: a device whose launcher was SIGKILLed stays held while its orphaned server still runs,
and a run waiting for devices stops such orphans (``reap``) and idle pool servers (``make_room``) on
every round of its wait, not only before it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from shopsimrl_core._errors import ShopSimRLError

__all__ = ["DeviceLease", "acquire_devices"]


class DeviceLease:
    """Devices held by this process until :meth:`release` (or its death)."""

    def __init__(self, devices: list[str], fds: list[int]) -> None:
        self.devices = devices
        self._fds = fds

    @property
    def fds(self) -> list[int]:
        """The lock descriptors, to be inherited by the server that uses the devices (``pass_fds``)."""
        return list(self._fds)

    def release(self) -> None:
        """Give the devices back (idempotent)."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def acquire_devices(
    pool: Sequence[str],
    count: int,
    *,
    state_dir: Path,
    timeout: float,
    say: Callable[[str], None],
    reap: Callable[[], object] | None = None,
    make_room: Callable[[], bool] | None = None,
) -> DeviceLease:
    """Lock *count* devices of *pool*, waiting up to *timeout* seconds for enough to be free.

    Before every try *reap* is called (stop servers whose launcher is gone: their devices come free
    only with them); when not enough devices are free *make_room* may stop an idle server and says
    whether it did (then the devices are tried again at once).

    Promise: the devices returned are held by no other process using *state_dir*; with an empty pool
    or count 0 nothing is locked.

    Raises:
        ShopSimRLError: ``gpu-pool-busy`` when not enough devices came free in time, or
            ``config-invalid`` when the pool is smaller than *count* or lists a device twice.
    """
    if not pool or count == 0:
        return DeviceLease([], [])
    twice = sorted({device for device in pool if list(pool).count(device) > 1})
    if twice:
        raise ShopSimRLError(
            f"serve.gpus: device {twice[0]!r} is listed twice in {list(pool)}; list each device once",
            code="config-invalid",
        )
    if count > len(pool):
        raise ShopSimRLError(
            f"serve.gpus_per_server: {count} devices per server but the pool serve.gpus has {len(pool)}; "
            "lower gpus_per_server or list more devices",
            code="config-invalid",
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    announced = False
    while True:
        if reap is not None:
            reap()
        held: list[tuple[str, int]] = []
        for device in pool:
            fd = _try_lock(state_dir / f"gpu-{device}.lock")
            if fd is not None:
                held.append((device, fd))
                if len(held) == count:
                    return DeviceLease([d for d, _ in held], [fd for _, fd in held])
        for _, fd in held:
            os.close(fd)
        if make_room is not None and make_room():
            continue
        if time.monotonic() >= deadline:
            raise ShopSimRLError(
                f"serve.gpus: no {count} free device(s) of {list(pool)} within {timeout:.0f} s (held by other "
                f"runs' servers, see {state_dir}); lower the run queue's GPU limit or raise serve.gpu_wait_timeout",
                code="gpu-pool-busy",
            )
        if not announced:
            say(f"waiting for {count} free device(s) of GPU pool {','.join(pool)} (all held by other servers)")
            announced = True
        time.sleep(0.5)
