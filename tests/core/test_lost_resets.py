"""A reset whose answer was lost after the server may have granted it (issue 24): not repeated when the
answer had begun, its lease released when the cut answer names it, its slot kept out of the budget, kept in
the journal, and a run whose every slot went that way stops waiting at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from shopsimrl_core.adapters._env_retry import lease_in, retry_reason
from shopsimrl_core.adapters._http import TransportError
from shopsimrl_core.runs.leases._journaled_env import SlotBudget
from shopsimrl_core.runs.leases._leases import LeaseJournal


def _failure(kind: str, *, answered: bool = False, stale: bool = False) -> TransportError:
    failure = TransportError(kind, "x")
    failure.answered, failure.stale = answered, stale
    return failure


def test_a_reset_whose_answer_was_cut_is_not_repeated() -> None:
    assert retry_reason("reset", failure=_failure("RemoteProtocolError", answered=True)) is None
    assert retry_reason("reset", failure=_failure("RemoteProtocolError")) is not None  # no byte of an answer
    assert retry_reason("reset", failure=_failure("ConnectError")) is not None
    assert retry_reason("release_one", failure=_failure("RemoteProtocolError", answered=True)) is not None


def test_lease_in_reads_the_ids_only_when_both_are_whole() -> None:
    full = b'{"result": {"task_instruction": "x", "env_idx": 3, "lease_id": "ab12", "idx": 7, "obs'
    assert lease_in(full) == (3, "ab12")
    assert lease_in(b'{"result": {"task_instruction": "x", "env_idx": 3, "lease_id": "ab1') is None
    assert lease_in(b'{"result": {"task_instruction": "x", "env_idx": 3') is None
    assert lease_in(b'{"env_idx": 1, "lease_id": "a", "x": {"env_idx": 2, "lease_id": "b"}}') is None


def test_lost_units_stay_used_until_healthz_shows_them_free() -> None:
    async def go() -> None:
        free = {"n": 0}

        async def probe() -> dict[str, Any]:
            return {"free_slots": free["n"]}

        budget = SlotBudget(probe)
        budget.set_capacity(2)
        for _ in range(2):
            await budget.take()
            budget.keep_lost()
        assert budget.exhausted_by_lost and budget.used == 2
        await budget._grow()
        assert budget.exhausted_by_lost  # the server still holds both
        free["n"] = 1  # it dropped one of those resets after all
        await budget._grow()
        assert (budget.capacity, budget.used, budget.lost) == (2, 1, 1) and not budget.exhausted_by_lost

    asyncio.run(go())


def test_a_lost_reset_outlives_a_clean_end_until_its_server_is_all_free(tmp_path: Path) -> None:
    journal = LeaseJournal(tmp_path, "inv-1")
    journal.intent("k1", "http://e")
    journal.lost("k1", "http://e")
    journal.intent("k2", "http://e")  # cancelled mid-flight: its late lease is released in the background
    # the evaluator's compaction at a clean end drops this invocation's other unanswered resets
    journal.compact(keep_unanswered=lambda entry: entry.get("invocation_id") != "inv-1")
    kept = LeaseJournal(tmp_path, "check").unanswered()
    assert [e["key"] for e in kept] == ["k1"] and kept[0]["lost"] is True
    # a start that finds that server with every slot free forgets it
    LeaseJournal(tmp_path, "inv-2").compact(drop_lost=lambda e: e.get("base_url") == "http://e")
    assert not (tmp_path / "leases.jsonl").exists()


def test_a_waiting_reset_stops_when_every_unit_is_lost() -> None:
    """One slot, its reset's answer lost while another reset waits: the waiter gives up at the next probe
    (SlotsLost), not after reset_wait_seconds."""
    import pytest

    from shopsimrl_core.runs.leases._journaled_env import SlotsLost

    async def go() -> None:
        async def probe() -> dict[str, Any]:
            return {"free_slots": 0}

        budget = SlotBudget(probe)
        budget.set_capacity(1)
        await budget.take()
        waiting = asyncio.ensure_future(budget.take())
        await asyncio.sleep(0)
        budget.keep_lost()  # the first reset's answer was cut: its unit stays
        with pytest.raises(SlotsLost):
            await asyncio.wait_for(waiting, 10)
        assert not budget._waiters

    asyncio.run(go())


def test_a_start_whose_free_slots_are_all_held_by_unanswered_resets_fails_its_resets_at_once(tmp_path: Path) -> None:
    """The server holds all 2 slots and the journal lists 2 resets a killed invocation never saw answered:
    the start says so, and a reset fails with environment-slots-lost at once instead of waiting."""
    import pytest

    from shopsimrl_core._errors import ShopSimulatorError
    from shopsimrl_core.runs.leases._journaled_env import JournaledEnvironment

    dead = LeaseJournal(tmp_path, "dead")
    dead.intent("k1", "http://e")
    dead.intent("k2", "http://e")
    dead.close()

    class Held:
        base_url = "http://e"

        async def health(self) -> dict[str, Any]:
            return {"environment_slots": 2, "free_slots": 0}

        def session(self) -> Any:
            return self

        async def reset(self, task_id: int) -> Any:
            raise AssertionError("no reset may be sent")

        env_idx = lease_id = None

    notices: list[str] = []

    async def go() -> None:
        env = JournaledEnvironment(Held(), LeaseJournal(tmp_path, "inv"), reset_wait_seconds=600,
                                   release_retry_seconds=1, notice=notices.append, wanted_slots=2)
        await env.recover()
        assert (env.budget.capacity, env.budget.used, env.budget.lost) == (2, 2, 2)
        started = asyncio.get_running_loop().time()
        with pytest.raises(ShopSimulatorError) as caught:
            await env.session().reset(1)
        assert asyncio.get_running_loop().time() - started < 5
        assert caught.value.code == "environment-slots-lost"
        assert "2 reset(s) of a killed invocation that went unanswered" in str(caught.value)

    asyncio.run(go())
    assert "has 0 of 2 slots free" in notices[0] and "2 reset(s) of a killed invocation" in notices[0]


def test_a_cancel_that_meets_a_granted_unit_is_not_lost() -> None:
    """Ctrl-C / SIGTERM cancel a reset waiting for the budget in the same loop turn that a release grants it
    the unit: the wait must end in CancelledError (and the unit pass on), not return. With asyncio.wait_for
    (Python 3.11) the cancel was swallowed and the worker ran on to its next episode: a signal's shutdown then
    took ~4 s instead of ~0.4 s (5 of 14 SIGINTs in tests/reliability/test_faults.py's scenario)."""
    import pytest

    async def go() -> None:
        budget = SlotBudget(None)
        budget.set_capacity(1)
        await budget.take()
        waiting = asyncio.ensure_future(budget.take())
        await asyncio.sleep(0)
        budget.give()  # grants the waiter's future ...
        waiting.cancel()  # ... and the signal cancels the task before it resumes
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert budget.used == 0 and not budget._waiters  # the unit was passed on, not leaked

    asyncio.run(go())
