"""The lease journal's file handling (one descriptor per run, a torn tail ended once, compaction), its
reset intents, the client-side slot budget and the start's reconciliation with ``/healthz``.

The journal keeps its descriptor open across lines (two per episode); these check that doing so
never writes a line where the next start cannot read it. Killed processes and full disks against
the real server are in tests/reliability/test_faults.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from shopsimrl_core.runs.leases._journaled_env import JournaledEnvironment, SlotBudget
from shopsimrl_core.runs.leases._leases import JOURNAL_NAME, LeaseJournal


def _lines(run_dir: Path) -> list[str]:
    return (run_dir / JOURNAL_NAME).read_text(encoding="utf-8").split("\n")


def test_a_torn_tail_left_by_a_killed_writer_is_ended_before_the_next_line(tmp_path: Path) -> None:
    whole = b'{"op": "acquired", "lease_id": "old", "env_idx": 1, "base_url": "http://e"}\n'
    (tmp_path / JOURNAL_NAME).write_bytes(whole + b'{"op": "acq')
    journal = LeaseJournal(tmp_path, "inv-2")
    journal.acquired(2, "new", "http://e")
    journal.acquired(3, "newer", "http://e")
    journal.close()
    lines = _lines(tmp_path)
    assert lines[1] == '{"op": "acq' and lines[-1] == ""  # the torn line is kept, ended, and never joined
    assert [json.loads(line)["lease_id"] for line in lines[2:-1]] == ["new", "newer"]
    assert [e["lease_id"] for e in LeaseJournal(tmp_path, "inv-3").outstanding()] == ["old", "new", "newer"]


def test_lines_after_compaction_go_to_the_new_file(tmp_path: Path) -> None:
    journal = LeaseJournal(tmp_path, "inv-1")
    journal.acquired(1, "a", "http://e")
    journal.acquired(2, "b", "http://e")
    journal.released(1, "a", "http://e")
    journal.compact()  # replaces the file by an atomic rename: the open descriptor would be stale
    journal.acquired(3, "c", "http://e")
    journal.released(2, "b", "http://e")
    assert [e["lease_id"] for e in LeaseJournal(tmp_path, "x").outstanding()] == ["c"]
    journal.released(3, "c", "http://e")
    journal.compact()  # nothing outstanding: the file goes away
    assert not (tmp_path / JOURNAL_NAME).exists()
    journal.acquired(4, "d", "http://e")  # and comes back with the next lease
    journal.close()
    journal.close()  # idempotent
    entries = [json.loads(line) for line in _lines(tmp_path)[:-1]]
    assert entries == [
        {"at": entries[0]["at"], "base_url": "http://e", "env_idx": 4, "invocation_id": "inv-1",
         "lease_id": "d", "op": "acquired"}
    ]


# -- issue 24: reset intents, the slot budget, the start's reconciliation ------------------------------


def test_a_reset_unanswered_at_a_kill_is_visible_and_compaction_drops_it(tmp_path: Path) -> None:
    journal = LeaseJournal(tmp_path, "inv-1")
    journal.intent("k1", "http://e")
    journal.acquired(1, "a", "http://e", "k1")
    journal.intent("k2", "http://e")
    journal.no_lease("k2", "http://e")
    journal.intent("k3", "http://e")  # the process died here
    journal.intent("k4", "http://other")
    journal.close()
    again = LeaseJournal(tmp_path, "inv-2")
    assert [e["key"] for e in again.unanswered()] == ["k3", "k4"]
    assert [e["key"] for e in again.unanswered("http://e/")] == ["k3"]
    assert [e["lease_id"] for e in again.outstanding()] == ["a"]
    again.compact(keep_unanswered=lambda entry: entry["base_url"] == "http://other")
    assert [e["key"] for e in again.unanswered()] == ["k4"] and len(again.outstanding()) == 1
    again.released(1, "a", "http://e")
    again.compact()
    assert not (tmp_path / JOURNAL_NAME).exists()


class SlotServer:
    """A client stand-in over N slots: resets take the lowest free slot (never wait), releases free it."""

    base_url = "http://e"

    def __init__(self, slots: int, held_by_others: int = 0) -> None:
        self.slots: list[str | None] = ["foreign"] * held_by_others + [None] * (slots - held_by_others)
        self.calls: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def health(self) -> dict[str, Any]:
        return {"environment_slots": len(self.slots), "free_slots": self.slots.count(None)}

    async def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(payload["action"])
        assert payload["action"] == "release_all"
        self.slots = [None] * len(self.slots)
        return {"message": "All environments have been initialized"}

    async def release_one(self, env_idx: int, lease_id: str) -> None:
        self.calls.append("release_one")
        assert self.slots[env_idx] == lease_id
        self.slots[env_idx] = None

    def session(self) -> Any:
        return _Session(self)


class _Session:
    def __init__(self, server: SlotServer) -> None:
        self.server = server
        self.env_idx: int | None = None
        self.lease_id: str | None = None

    async def reset(self, task_id: int) -> dict[str, Any]:
        server = self.server
        server.calls.append("reset")
        assert None in server.slots, "a reset would wait inside the server"
        self.env_idx = server.slots.index(None)
        self.lease_id = f"lease-{task_id}"
        server.slots[self.env_idx] = self.lease_id
        await asyncio.sleep(0.01)
        return {"env_idx": self.env_idx, "lease_id": self.lease_id}


def _environment(tmp_path: Path, server: SlotServer, notices: list[str], **kwargs: Any) -> JournaledEnvironment:
    return JournaledEnvironment(server, LeaseJournal(tmp_path, "inv"), reset_wait_seconds=5,
                                release_retry_seconds=1, notice=notices.append, **kwargs)


def test_resets_never_outnumber_the_free_slots(tmp_path: Path) -> None:
    """16 episodes at once on 4 slots, one held by someone else: at most 3 resets at the server at a time."""
    server = SlotServer(4, held_by_others=1)
    notices: list[str] = []

    async def go() -> None:
        env = _environment(tmp_path, server, notices, wanted_slots=16)
        await env.recover()
        assert env.budget.capacity == 3

        async def episode(task: int) -> None:
            session = env.session()
            await session.reset(task)
            await asyncio.sleep(0.02)
            await session.close()

        await asyncio.gather(*(episode(t) for t in range(16)))
        assert env.budget.used == 0

    asyncio.run(go())
    assert server.calls.count("reset") == 16 and server.slots.count(None) == 3
    assert len(notices) == 1 and "has 3 of 4 slots free, this run can use 4" in notices[0]
    assert "another client holds them" in notices[0] and "environment.exclusive: true" in notices[0]
    assert not (tmp_path / JOURNAL_NAME).exists() or LeaseJournal(tmp_path, "x").outstanding() == []


def test_the_start_names_unanswered_resets_and_exclusive_frees_every_slot(tmp_path: Path) -> None:
    journal = LeaseJournal(tmp_path, "dead")
    journal.intent("k", "http://e")  # a reset the killed run never saw answered
    journal.close()
    server = SlotServer(4, held_by_others=2)
    notices: list[str] = []

    async def go(**kwargs: Any) -> JournaledEnvironment:
        env = _environment(tmp_path, server, notices, wanted_slots=4, **kwargs)
        await env.recover()
        return env

    asyncio.run(go())
    assert "has 2 of 4 slots free" in notices[-1] and "1 reset(s) of a killed invocation" in notices[-1]
    assert server.calls == []  # never release_all without exclusive
    notices.clear()
    env = asyncio.run(go(exclusive=True))
    assert server.calls == ["release_all"] and server.slots.count(None) == 4 and env.budget.capacity == 4
    assert len(notices) == 1 and notices[0].startswith("released all 4 slots of http://e with release_all")


def test_the_budget_grows_when_the_server_frees_slots() -> None:
    free = {"n": 0}

    async def probe() -> dict[str, Any]:
        return {"free_slots": free["n"]}

    async def go() -> None:
        budget = SlotBudget(probe)
        budget.set_capacity(0)
        waiting = asyncio.ensure_future(budget.take())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        free["n"] = 2
        await asyncio.wait_for(waiting, 5)
        assert budget.capacity == 2 and budget.used == 1

    asyncio.run(go())


def test_an_unlimited_budget_never_waits() -> None:
    async def go() -> None:
        budget = SlotBudget(None)
        for _ in range(100):
            await budget.take()
        assert budget.used == 100

    asyncio.run(go())


def test_the_budget_serves_waiting_resets_first_come_first_served() -> None:
    """A unit given back goes to the longest waiter, not to the episode that gave it and asks again at once
    (that barging starved a few resets for a whole run at 16 in flight on 8 slots: issue 24's chaos run)."""

    async def go() -> list[str]:
        budget = SlotBudget(None)
        budget.set_capacity(1)
        order: list[str] = []
        await budget.take()  # A holds the only unit
        waiting = asyncio.ensure_future(budget.take())  # B waits
        await asyncio.sleep(0)
        waiting.add_done_callback(lambda _: order.append("B"))
        budget.give()  # A's episode ends ...
        again = asyncio.ensure_future(budget.take())  # ... and A asks for its next reset at once
        again.add_done_callback(lambda _: order.append("A"))
        await asyncio.sleep(0.01)
        assert waiting.done() and not again.done() and budget.used == 1
        budget.give()
        await asyncio.wait_for(again, 1)
        return order

    assert asyncio.run(go()) == ["B", "A"]


def test_a_cancelled_wait_passes_its_unit_on() -> None:
    async def go() -> None:
        budget = SlotBudget(None)
        budget.set_capacity(1)
        await budget.take()
        first = asyncio.ensure_future(budget.take())
        second = asyncio.ensure_future(budget.take())
        await asyncio.sleep(0)
        first.cancel()  # its reset deadline expired
        await asyncio.gather(first, return_exceptions=True)
        budget.give()
        await asyncio.wait_for(second, 1)
        assert budget.used == 1 and not budget._waiters

    asyncio.run(go())


# -- issue 33 (5b): the budget never grows past the server, nor on a probe during its own release ----------


class QueueingServer(SlotServer):
    """Like the real server: a reset with no free slot waits inside the server (counted), and a release frees
    the slot before its answer reaches the client (the window a probe used to misread)."""

    def __init__(self, slots: int) -> None:
        super().__init__(slots)
        self.queued = 0
        self.freed = asyncio.Event()

    async def release_one(self, env_idx: int, lease_id: str) -> None:
        await super().release_one(env_idx, lease_id)
        self.freed.set()
        await asyncio.sleep(0.05)  # the answer on its way back

    def session(self) -> Any:
        return _QueueingSession(self)


class _QueueingSession(_Session):
    server: QueueingServer

    async def reset(self, task_id: int) -> dict[str, Any]:
        if None not in self.server.slots:
            self.server.queued += 1
            while None not in self.server.slots:
                self.server.freed.clear()
                await self.server.freed.wait()
        return await super().reset(task_id)


def test_a_probe_during_the_runs_own_release_grows_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """2 slots, 4 episodes at once, probes every 10 ms: each release's slot shows free on /healthz before the
    release answer is back. Before, a probe then grew the budget to used + free = 3 and resets queued inside
    the server (issue 33: 8 resets queued in 1 of 7 runs against the real server code)."""
    from shopsimrl_core.runs.leases import _slot_budget

    monkeypatch.setattr(_slot_budget, "_BUDGET_PROBE_S", 0.01)
    server = QueueingServer(2)
    most: list[int] = []

    async def go() -> None:
        env = _environment(tmp_path, server, [], wanted_slots=4)
        await env.recover()

        async def episode(task: int) -> None:
            session = env.session()
            await session.reset(task)
            most.append(env.budget.capacity or 0)
            await asyncio.sleep(0.03)
            await session.close()

        async def worker(tasks: range) -> None:
            for task in tasks:
                await episode(task)

        await asyncio.gather(*(worker(range(w * 10, w * 10 + 10)) for w in range(4)))
        assert env.budget.used == 0 and getattr(env.budget, "releasing", 0) == 0

    asyncio.run(go())
    assert server.calls.count("reset") == 40
    assert server.queued == 0 and max(most) == 2


def test_the_budget_never_exceeds_the_servers_slots() -> None:
    """A probe reading more free slots than the server has room for (another client released some while this
    run's count is stale) still leaves the capacity at the server's size."""

    async def probe() -> dict[str, Any]:
        return {"environment_slots": 2, "free_slots": 2}

    async def go() -> None:
        budget = SlotBudget(probe)
        budget.set_capacity(2, slots=2)
        await budget.take()
        await budget.take()
        await budget._grow()
        assert budget.capacity == 2

    asyncio.run(go())


def test_a_start_frees_only_dead_neighbours_leases_on_its_own_server(tmp_path: Path) -> None:
    """Issue 33 (5): beside the run, a dead run's journal (lock free) is released and compacted; a live run's
    (lock held), a folder without run.lock, and leases on another server are left as they are."""
    import fcntl
    import os

    server = SlotServer(4)
    server.slots = ["dead-1", "dead-2", "live-1", None]

    def neighbour(name: str, leases: list[tuple[int, str, str]], *, lock: bool = True) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        journal = LeaseJournal(folder, f"inv-{name}")
        for env_idx, lease, url in leases:
            journal.acquired(env_idx, lease, url)
        journal.close()
        if lock:
            (folder / "run.lock").write_text("{}", encoding="utf-8")
        return folder

    dead = neighbour("dead", [(0, "dead-1", "http://e"), (1, "dead-2", "http://e/"), (3, "x", "http://other")])
    live = neighbour("live", [(2, "live-1", "http://e")])
    loose = neighbour("not-a-run", [(3, "loose", "http://e")], lock=False)
    held = os.open(live / "run.lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the live run's lock
    notices: list[str] = []
    try:
        own = tmp_path / "me"
        own.mkdir()
        env = JournaledEnvironment(server, LeaseJournal(own, "inv"), reset_wait_seconds=5, release_retry_seconds=1,
                                   notice=notices.append, wanted_slots=1)
        asyncio.run(env.recover())
    finally:
        os.close(held)
    assert server.slots == [None, None, "live-1", None]
    assert [e["lease_id"] for e in LeaseJournal(dead, "x").outstanding()] == ["x"]  # the other server's stays
    assert [e["lease_id"] for e in LeaseJournal(live, "x").outstanding()] == ["live-1"]
    assert [e["lease_id"] for e in LeaseJournal(loose, "x").outstanding()] == ["loose"]
    assert not (loose / "run.lock").exists()
    assert len([n for n in notices if "a killed run left" in n]) == 1
    assert f"released 2 lease(s) on http://e that a killed run left in {dead / JOURNAL_NAME}" in notices[0]
