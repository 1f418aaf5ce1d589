"""The environment as a run sees it: every lease journaled, resets within a client-side slot budget.

:class:`JournaledEnvironment` wraps an environment client (or pool) with the run's
:class:`~shopsimrl_core.runs.leases._leases.LeaseJournal`; :class:`JournaledSession` is one episode's lease.
Against the real server (no expiry, and a reset keeps waiting for a slot after its client died),
three more rules close or expose the windows a SIGKILL leaves (issue 24, docs/runs.md#leases):

- **no reset waits in the server** for a slot this run could know is taken: a client-side budget
  (:class:`SlotBudget`) sends a reset only while the server has a slot for it (learnt from
  ``/healthz`` at the start, grown when the server reports more free), so a killed run leaves no
  queued reset behind that the server would grant to nobody later;
- **every reset is journaled before it is sent** (``op: reset`` with a client-chosen ``key``, then
  ``acquired`` with the same key, or ``no-lease``): a reset still unanswered when the process died is
  visible at the next start — the one window no journal can close, since the server alone learns
  that lease;
- **the start reconciles** with ``/healthz``: when fewer slots are free than the run can use, one
  line says how many, why (unanswered resets of a killed invocation, or another client) and the fix;
  with ``exclusive`` (the run owns the server) the start sends ``release_all`` instead, so no slot of a
  predecessor is held, whatever window it died in.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shopsimrl_core._backoff import Backoff
from shopsimrl_core._errors import ShopSimulatorError
from shopsimrl_core.adapters._environment import EnvironmentSession
from shopsimrl_core.runs.leases._leases import JOURNAL_NAME, LeaseJournal
from shopsimrl_core.runs.leases._slot_budget import SlotBudget, SlotsLost

__all__ = ["JournaledEnvironment", "JournaledSession", "SlotBudget", "SlotsLost"]

_RELEASE = Backoff(0.1, 2.0, "none")
"""Lease releases: 0.1 s doubling to 2 s, within the release budget."""

_NOTICE_EVERY_S = 30.0

_ORPHAN_RELEASE_S = 2.0
"""Longest try of one release of a killed neighbour's lease (its run lock is held meanwhile)."""


class _DropIgnoredRelease(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "ignored" not in record.getMessage()


class JournaledEnvironment:
    """Wraps one ``ShopSimulatorClient`` so every lease of the run is journaled and released with retries.

    ``session()`` returns a :class:`JournaledSession` with the public surface of ``EnvironmentSession``
    that the episode runtime uses (``reset``, ``interact``, ``terminate``, ``close`` and the version
    attributes). *notice* receives one-line console messages (e.g. "waiting for a free slot").
    """

    def __init__(
        self,
        client: Any,
        journal: LeaseJournal,
        *,
        reset_wait_seconds: float,
        release_retry_seconds: float,
        notice: Callable[[str], Any] | None = None,
        notice_after_seconds: float = 2.0,
        exclusive: bool = False,
        wanted_slots: int | None = None,
        shared_runs_root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.client = client
        self.journal = journal
        self.exclusive = exclusive
        """The run owns the server: the start frees every slot with ``release_all``."""
        self.wanted_slots = wanted_slots
        """Slots the run can use at once (its concurrency): fewer free at the start is said in one line."""
        self.shared_runs_root = None if shared_runs_root is None else Path(shared_runs_root)
        """Where killed runs that may hold leases here live (``environment.shared_runs_root``); None: beside it."""
        self.budget = SlotBudget(self.client.health)
        self.unanswered_at_start = 0
        self.last_lost = ""
        """The last reset answer this run lost after the server may have granted it (one line)."""
        self.reset_wait_seconds = reset_wait_seconds
        self.release_retry_seconds = release_retry_seconds
        self.notice_after_seconds = min(notice_after_seconds, reset_wait_seconds)
        self._notice = notice
        self.waiting = 0
        self._last_wait_notice = -1e9
        self.leases_released = 0
        self.releases_failed = 0
        self._releases: set[asyncio.Task[bool]] = set()

    @property
    def base_url(self) -> str:
        return str(self.client.base_url)

    def __getattr__(self, name: str) -> Any:
        # Everything else (identity, persona, timeout, ...) is the wrapped client's.
        if name == "client":
            raise AttributeError(name)
        return getattr(self.client, name)

    def notice(self, text: str) -> None:
        if self._notice is not None:
            try:
                self._notice(text)
            except Exception:  # a broken display must not stop the run
                pass

    def session(self) -> JournaledSession:
        """A new journaled lease scope for one episode."""
        return JournaledSession(self, self.client.session())

    async def health(self) -> dict[str, Any]:
        """The wrapped client's ``GET /healthz``."""
        body: dict[str, Any] = await self.client.health()
        return body

    async def release(
        self, env_idx: int, lease_id: str, *, budget_seconds: float | None = None, journal: LeaseJournal | None = None
    ) -> bool:
        """``release_one`` with exponential backoff (0.1 s doubling to 2 s) for *budget_seconds*.

        Returns True once the server no longer holds the lease (a 409 counts) and the journal (the run's,
        or *journal*: a dead run's, see ``_orphans.py``) says so; False when every try failed (the lease
        stays outstanding for the next start).
        """
        budget = self.release_retry_seconds if budget_seconds is None else budget_seconds
        deadline = time.monotonic() + budget
        tries = 0
        while True:
            tries += 1
            delay = _RELEASE.delay(tries)
            try:
                # unshielded: the caller runs this in a shielded task, or (recover) an interrupted
                # release is still in the journal for the next start
                await self.client.release_one(env_idx, lease_id)
            except ShopSimulatorError:
                if time.monotonic() + delay > deadline:
                    self.releases_failed += 1
                    return False
                await asyncio.sleep(delay)
                continue
            (journal or self.journal).released(env_idx, lease_id, self.base_url)
            self.leases_released += 1
            return True

    def slots_lost(self) -> ShopSimulatorError:
        """The error of a reset that cannot get a slot: every one is held for a reset whose answer was lost."""
        return ShopSimulatorError(
            f"environment reset: no slot of {self.base_url} can come free: the server may hold all "
            f"{self.budget.lost} for resets of this run whose answer was lost ({self.last_lost}); restart "
            "the environment server, or set environment.exclusive: true if this run is its only client",
            code="environment-slots-lost",
        )

    def slot_returned(self) -> None:
        """A lease of this run was released (or a reset ended without one): the budget may send another reset."""
        self.budget.give()

    async def recover(self) -> tuple[int, int]:
        """Release every lease an earlier invocation left outstanding; return ``(released, left)``.

        Leases journaled against another environment URL are kept (they cannot be released here).
        Then :meth:`reconcile` compares the server's free slots with what the run can use and sets the
        reset budget.
        """
        entries = self.journal.outstanding()
        unanswered = self.journal.unanswered(self.base_url)
        self.unanswered_at_start = len(unanswered)
        released = kept = 0
        # A 409 here is the normal case of a release that reached the server just before the kill:
        # the adapter's "release ignored" warning would only be noise.
        quiet = _DropIgnoredRelease()
        logging.getLogger("shopsimrl_core.environment").addFilter(quiet)
        try:
            released, kept = await self._release_entries(entries)
        finally:
            logging.getLogger("shopsimrl_core.environment").removeFilter(quiet)
        if entries:
            self.journal.compact(keep_unanswered=lambda entry: True)
        await self._release_orphans()
        await self.reconcile()
        return released, kept

    async def release_into(self, journal: LeaseJournal, entries: list[dict[str, Any]]) -> tuple[int, int]:
        """Release *entries* (outstanding leases of *journal*, another run's) on this server: ``(released, kept)``.

        Briefly: the caller holds that run's lock meanwhile (its owner could not resume), so each release gets
        at most ``_ORPHAN_RELEASE_S`` and the first that fails ends the attempt (the rest stay journaled).
        """
        quiet = _DropIgnoredRelease()  # a 409 is the normal case of a release that landed just before a kill
        logging.getLogger("shopsimrl_core.environment").addFilter(quiet)
        released = 0
        try:
            for entry in entries:
                env_idx, lease_id = entry.get("env_idx"), entry.get("lease_id")
                if not isinstance(env_idx, int) or not isinstance(lease_id, str):
                    continue
                budget = min(self.release_retry_seconds, _ORPHAN_RELEASE_S)
                if not await self.release(env_idx, lease_id, budget_seconds=budget, journal=journal):
                    break
                released += 1
        finally:
            logging.getLogger("shopsimrl_core.environment").removeFilter(quiet)
        return released, len(entries) - released

    async def _release_orphans(self) -> None:
        """Before this run can wait for a slot: free what killed runs beside it left leased here, and say so."""
        from shopsimrl_core.runs.leases._orphans import release_orphaned_leases

        try:
            found = await release_orphaned_leases(self, self.journal.invocation_id, self.shared_runs_root)
        except OSError:
            return  # an unreadable neighbour costs only its slots, as before
        for orphan in found:
            self.notice(
                f"released {orphan.released} lease(s) on {self.base_url} that a killed run left in "
                f"{orphan.run_dir / JOURNAL_NAME} (its run.lock is free)"
                + (f"; {orphan.kept} could not be released and stay there" if orphan.kept else "")
            )

    async def reconcile(self) -> None:
        """Compare ``/healthz`` with the run's needs; size the reset budget; free the server when exclusive.

        One notice when fewer slots are free than the run can use (``wanted_slots``, at most the
        server's size): how many, the likely cause and the fix. With ``exclusive`` a server with any
        slot taken gets ``release_all`` first. A server that does not answer leaves the budget
        unlimited (the first reset will say more).
        """
        try:
            health = await self.client.health()
        except Exception:
            return
        free, slots = health.get("free_slots"), health.get("environment_slots")
        if not (isinstance(free, int) and isinstance(slots, int)) or isinstance(free, bool) or slots < 1:
            return
        unanswered = self.unanswered_at_start
        cause = (
            f"{unanswered} reset(s) of a killed invocation of this run went unanswered and may hold them "
            "(ShopSimulator never expires a lease)"
            if unanswered
            else "another client holds them, or a run that kept no journal here leaked them"
        )
        if self.exclusive and free < slots:
            await self.client._post({"action": "release_all"})
            self.notice(
                f"released all {slots} slots of {self.base_url} with release_all (environment.exclusive): "
                f"{slots - free} were held — {cause}"
            )
            free = slots
        if free == slots and unanswered:
            # every slot is free: the unanswered resets of killed invocations hold nothing (any more)
            mine = self.base_url.rstrip("/")
            self.journal.compact(
                keep_unanswered=lambda e: str(e.get("base_url", "")).rstrip("/") != mine,
                drop_lost=lambda e: str(e.get("base_url", "")).rstrip("/") == mine,
            )
        wanted = min(self.wanted_slots or slots, slots)
        if free < wanted:
            self.notice(
                f"the environment at {self.base_url} has {free} of {slots} slots free, this run can use {wanted}: "
                f"{cause}; restart the environment server to free them, or set environment.exclusive: true "
                "if this run is its only client (the start then frees every slot)"
            )
        # The slots unanswered resets of killed invocations may hold are this run's own and lost: the budget
        # counts them as used, gives them back only when /healthz shows them free, and with none free at all
        # a reset fails at once (environment-slots-lost) instead of waiting reset_wait_seconds for nothing.
        lost = min(unanswered, slots - free) if 0 <= free < slots else 0
        if lost:
            self.last_lost = f"{lost} reset(s) of a killed invocation that went unanswered"
        self.budget.set_capacity(max(free, 0) + lost, lost=lost, slots=slots)

    async def _release_entries(self, entries: list[dict[str, Any]]) -> tuple[int, int]:
        released = kept = 0
        for entry in entries:
            if str(entry.get("base_url", "")).rstrip("/") != self.base_url.rstrip("/") or not isinstance(
                entry.get("env_idx"), int
            ):
                kept += 1
                continue
            if await self.release(entry["env_idx"], entry["lease_id"]):
                released += 1
            else:
                kept += 1
        return released, kept

    def _waiting_changed(self, delta: int) -> None:
        self.waiting += delta
        now = time.monotonic()
        if delta > 0 and now - self._last_wait_notice >= _NOTICE_EVERY_S:
            self._last_wait_notice = now
            self.notice(
                f"waiting for a free environment slot ({self.waiting} reset(s) waiting; each waits up to "
                f"{self.reset_wait_seconds:g} s, environment.reset_wait_seconds)"
            )

    async def drain(self, timeout: float) -> None:
        """Wait (at most *timeout* s) for releases still running in the background."""
        if self._releases:
            await asyncio.wait(set(self._releases), timeout=timeout)


class JournaledSession:
    """One episode's lease, journaled. Same surface as ``EnvironmentSession`` for the runtime."""

    def __init__(self, owner: JournaledEnvironment, inner: EnvironmentSession) -> None:
        self.owner = owner
        self.inner = inner
        self._journaled: tuple[int, str] | None = None
        self._key: str | None = None  # the journal key of this session's reset
        self._budgeted = False  # this session holds a unit of the owner's slot budget

    # the attributes the runtime and tests read
    @property
    def environment_version(self) -> str | None:
        return self.inner.environment_version

    @property
    def observation_version(self) -> str | None:
        return self.inner.observation_version

    @property
    def env_idx(self) -> int | None:
        return self.inner.env_idx

    @property
    def lease_id(self) -> str | None:
        return self.inner.lease_id

    @property
    def done(self) -> bool:
        return bool(self.inner.done)

    @property
    def holds_lease(self) -> bool:
        return self.inner.lease_id is not None

    async def __aenter__(self) -> JournaledSession:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    def _journal_lease(self) -> None:
        env_idx, lease_id = self.inner.env_idx, self.inner.lease_id
        if lease_id is not None and env_idx is not None and self._journaled is None:
            self._journaled = (env_idx, lease_id)
            self.owner.journal.acquired(env_idx, lease_id, self.owner.base_url, self._key)

    async def reset(self, task_id: int) -> dict[str, Any]:
        """Reset with a bounded wait for a slot; the granted lease is journaled before this returns.

        Raises:
            ShopSimulatorError: no free slot within ``reset_wait_seconds``, or the wrapped reset failed.
            OSError: the journal could not be written (the lease is released first).
        """
        owner = self.owner
        waiting = False

        def start_waiting() -> None:
            nonlocal waiting
            waiting = True
            owner._waiting_changed(+1)

        # A timer and a timeout on this task, not a task of its own and asyncio.wait: each of those
        # costs a pass through the loop's ready queue, several ms per reset at 256 in flight.
        if owner.budget.exhausted_by_lost:
            await owner.budget._grow()  # unless the server shows some of those slots free after all
            if owner.budget.exhausted_by_lost:
                raise owner.slots_lost()
        notice = asyncio.get_running_loop().call_later(owner.notice_after_seconds, start_waiting)
        deadline = asyncio.timeout(owner.reset_wait_seconds)
        key: str | None = None
        lost = False
        try:
            async with deadline:
                await owner.budget.take()  # a unit of the server's slots, before anything is sent
                self._budgeted = True
                key = os.urandom(8).hex()
                owner.journal.intent(key, owner.base_url)
                self._key = key
                # on expiry the wrapped reset is cancelled: it finishes in the background and
                # releases a lease granted after this
                return await self.inner.reset(task_id)
        except SlotsLost:
            raise owner.slots_lost() from None
        except ShopSimulatorError as exc:
            if getattr(exc, "may_hold_lease", False):
                lost = True  # the server may hold a lease for it: the unit stays used, the intent unanswered
                owner.last_lost = exc.one_line().split("; ")[0].removeprefix("environment reset ")[:160]
            raise
        except TimeoutError:
            if not deadline.expired():
                raise
            raise ShopSimulatorError(
                f"environment reset: no free slot within {owner.reset_wait_seconds:g} s "
                "(environment.reset_wait_seconds); every slot is leased — by this run, another run, or leaked",
                code="reset-wait-exceeded",
            ) from None
        finally:
            notice.cancel()
            if waiting:
                owner._waiting_changed(-1)
            if self.inner.lease_id is not None:
                try:
                    self._journal_lease()  # also when a check after the grant failed: close releases it
                except OSError:
                    await self.close()
                    raise
            elif self._budgeted and lost:
                self._budgeted = False
                owner.budget.keep_lost()
                if key is not None:
                    try:
                        owner.journal.lost(key, owner.base_url)  # stays unanswered: the next start knows
                    except OSError:
                        pass
            elif self._budgeted:
                # no lease this run knows of: the reset failed, gave up or was cancelled (a cancelled
                # reset's late lease is released by the adapter in the background)
                self._budgeted = False
                owner.slot_returned()
                if key is not None:
                    try:
                        owner.journal.no_lease(key, owner.base_url)
                    except OSError:
                        pass  # only a false alarm at the next start

    async def interact(self, action: str) -> dict[str, Any]:
        """Delegate to the wrapped session (never retried)."""
        return await self.inner.interact(action)

    async def terminate(self, reason: str) -> dict[str, Any]:
        """Delegate to the wrapped session."""
        return await self.inner.terminate(reason)

    async def close(self) -> None:
        """Release the lease (retried with backoff) and journal the release. Safe to call twice.

        Runs shielded: a cancelled episode waits a short grace for its release, then the release goes
        on in the background; a lease whose release never succeeds stays in the journal and is
        released at the next start of the run.

        Raises:
            ShopSimulatorError: every release try failed (recorded as a cleanup error).
        """
        env_idx, lease_id = self.inner.env_idx, self.inner.lease_id
        if lease_id is None or env_idx is None:  # a lease always names its slot (the client checks reset answers)
            return
        self.inner.env_idx = self.inner.lease_id = None  # the wrapped close becomes a no-op
        if self._journaled is None:
            try:
                self.owner.journal.acquired(env_idx, lease_id, self.owner.base_url)
            except OSError:
                pass  # released right below anyway
        owner = self.owner
        release = asyncio.ensure_future(owner.release(env_idx, lease_id))
        owner._releases.add(release)
        release.add_done_callback(owner._releases.discard)
        if self._budgeted:
            self._budgeted = False
            # the unit comes back once the server no longer holds the slot (a failed release keeps it);
            # meanwhile a probe must not count the slot this release frees as new capacity
            owner.budget.release_started()
            release.add_done_callback(
                lambda done: owner.budget.release_done(
                    not done.cancelled() and done.exception() is None and done.result() is True
                )
            )
        try:
            ok = await asyncio.shield(release)
        except asyncio.CancelledError:
            await asyncio.wait([release], timeout=2.0)
            raise
        if not ok:
            raise ShopSimulatorError(
                f"environment release_one of slot {env_idx} failed for {owner.release_retry_seconds:g} s "
                f"(environment.release_retry_seconds); the lease stays in {JOURNAL_NAME} "
                "and is released at the next start",
                code="release-failed",
            )
