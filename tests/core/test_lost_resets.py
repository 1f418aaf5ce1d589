"""A reset whose answer was lost after the server may have granted it (issue 24): not repeated when the
answer had begun, its lease released when the cut answer names it, its slot kept out of the budget, kept in
the journal, and a run whose every slot went that way stops waiting at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from shopsimrl_core.adapters._env_retry import lease_in, retry_reason
from shopsimrl_core.adapters._http import TransportError
from shopsimrl_core.runs._journaled_env import SlotBudget
from shopsimrl_core.runs._leases import LeaseJournal


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
