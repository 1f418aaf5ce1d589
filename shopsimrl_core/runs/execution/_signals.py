"""SIGINT / SIGTERM around a run: a signal cancels the run cleanly, a slow shutdown ends the process.

Promise: in the main thread, the first SIGINT or SIGTERM cancels the awaited work (so leases are
released, the summary written and the lock freed by its own cleanup) and re-raises
``KeyboardInterrupt`` (SIGINT) or ``RunTerminated`` (SIGTERM); a second signal is ignored; if the
shutdown takes longer than 4 s the process exits with 130 / 143 at once. Off the main thread no
handler is installed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from shopsimrl_core.runs.execution._evaluation_options import RunTerminated

if TYPE_CHECKING:
    from shopsimrl_core.runs.execution._evaluation_options import RunResult

__all__: list[str] = []

# A signal's shutdown that takes longer than this ends the process at once (leases left are in
# leases.jsonl and are released at the next start): SIGTERM/SIGINT must exit within 5 s.
_SIGNAL_DEADLINE_S = 4.0


async def _with_signals(work: Awaitable[RunResult]) -> RunResult:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    received: list[int] = []
    installed: list[int] = []

    def on_signal(signum: int) -> None:
        if received:
            return  # a second signal must not interrupt the cleanup of the first
        received.append(signum)
        exit_code = 143 if signum == signal.SIGTERM else 130

        def hard_exit() -> None:
            sys.stderr.write(
                "shopsimrl: shutdown took longer than 4 s; exiting now — completed attempts are stored and leases "
                "still held are released at the next start\n"
            )
            sys.stderr.flush()
            os._exit(exit_code)

        loop.call_later(_SIGNAL_DEADLINE_S, hard_exit)
        if main is not None:
            main.cancel()

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, on_signal, signum)
                installed.append(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise (RunTerminated() if received[0] == signal.SIGTERM else KeyboardInterrupt()) from None
        raise
    finally:
        for installed_signum in installed:
            loop.remove_signal_handler(installed_signum)
