"""Evaluator with an injected fake episode function: waves, attempt caps, resume, guard, cancellation.

The same evaluator runs the real ``run_episode`` over real HTTP in test_run_sandbox.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from testkit.core_runkit import FakeEpisodes, small_splits, write_config

from shopsimrl_core import (
    ConfigError,
    FingerprintMismatch,
    RunStore,
    TestSplitGuardError,
    arun_evaluation,
    load_config,
    run_evaluation,
)


def _config(tmp_path: Path, **overrides):
    if not (tmp_path / "splits.json").exists():
        small_splits(tmp_path)
    return load_config(write_config(tmp_path, overrides=overrides))


def _lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "traces.jsonl").read_text(encoding="utf-8").splitlines()]


def test_run_completes_and_writes_the_run_directory(tmp_path: Path) -> None:
    fake = FakeEpisodes()
    events = []
    result = run_evaluation(_config(tmp_path), episode_fn=fake, progress=events.append)
    assert result.exit_code == 0 and result.counts.completed == 5 and result.counts.coverage == 1.0
    assert sorted(p.name for p in result.run_dir.iterdir()) == [
        "invocations.jsonl",
        "manifest.json",
        "run.lock",
        "summary.json",
        "traces.index.jsonl",
        "traces.jsonl",
    ]
    manifest = json.loads(result.manifest_path.read_text(encoding="utf-8"))
    assert manifest["fingerprint_scheme"] == "semantic-v2" and manifest["execution"]["concurrency"] == 2
    lines = _lines(result.run_dir)
    assert [line["attempt"]["number"] for line in lines] == [1] * 5
    assert {line["attempt"]["invocation_id"] for line in lines} == {result.invocation_id}
    assert [e.kind for e in events][:2] == ["start", "wave"] and events[-1].kind == "finish"
    assert events[-1].done == 5 and events[-1].reward_mean == pytest.approx((1.0 + 0.5 + 0.5 + 1.0 + 1.0) / 5)
    assert json.loads(result.summary_path.read_text(encoding="utf-8")) == result.summary.to_json()
    assert RunStore(result.run_dir).lock_path.read_text() == ""  # released


def test_attempt_cap_counts_per_invocation(tmp_path: Path) -> None:
    config = _config(tmp_path, experiment={"max_episode_retries": 1})
    fake = FakeEpisodes({"task-000019__sample-000": ["fail", "fail", "fail", "ok"]})
    first = run_evaluation(config, episode_fn=fake)
    assert first.exit_code == 1 and first.counts.failed == 1
    assert fake.calls.count("task-000019__sample-000") == 2
    second = run_evaluation(config, episode_fn=fake)  # a rerun retries incomplete episodes again
    assert second.resumed and second.exit_code == 0 and second.counts.failed == 0
    numbers = [r["attempt"]["number"] for r in _lines(second.run_dir) if r["episode_id"] == "task-000019__sample-000"]
    assert numbers == [1, 2, 3, 4]
    assert fake.calls.count("task-000020__sample-000") == 1  # complete episodes are not rerun


def test_lifetime_cap_and_cli_override(tmp_path: Path) -> None:
    config = _config(tmp_path, experiment={"max_total_attempts": 2})
    fake = FakeEpisodes({"task-000019__sample-000": ["fail"] * 5})
    run_evaluation(config, episode_fn=fake)
    run_evaluation(config, episode_fn=fake, max_attempts=5)
    assert fake.calls.count("task-000019__sample-000") == 2


def test_runtime_exception_becomes_boundary_record(tmp_path: Path) -> None:
    fake = FakeEpisodes({"task-000020__sample-000": ["raise", "ok"]})
    result = run_evaluation(_config(tmp_path), episode_fn=fake)
    boundary = [r for r in _lines(result.run_dir) if r["status"] == "failed"]
    assert len(boundary) == 1 and boundary[0]["error"]["stage"] == "evaluator_boundary"
    assert boundary[0]["error"]["type"] == "RuntimeError" and result.counts.completed == 5


def test_concurrency_is_bounded(tmp_path: Path) -> None:
    fake = FakeEpisodes(delay=0.01)
    run_evaluation(_config(tmp_path, experiment={"concurrency": 3}, tasks={"repeats": 4}), episode_fn=fake)
    assert fake.max_in_flight == 3 and len(fake.calls) == 20


def test_workers_start_spaced_then_keep_every_slot_busy(tmp_path: Path) -> None:
    def timed(fake: FakeEpisodes, seen: list[tuple[float, int]]):
        async def episode(job, **kwargs):
            seen.append((asyncio.get_running_loop().time(), fake.in_flight))
            return await fake(job, **kwargs)

        return episode

    for spacing in (0.05, 0.0):
        fake, seen = FakeEpisodes(delay=0.3), []
        folder = tmp_path / f"spacing-{spacing}"
        folder.mkdir()
        config = _config(folder, experiment={"concurrency": 4, "start_spacing_seconds": spacing}, tasks={"repeats": 2})
        result = run_evaluation(config, episode_fn=timed(fake, seen))
        assert result.counts.completed == 10 and fake.max_in_flight == 4
        # the first four start before any episode ends, worker k no sooner than k spacings after
        # the first (a sleep never ends early)
        assert [in_flight for _, in_flight in seen[:4]] == [0, 1, 2, 3]
        offsets = [at - seen[0][0] for at, _ in seen[:4]]
        assert all(offset >= spacing * k - 1e-3 for k, offset in enumerate(offsets)), offsets


def test_resume_rules(tmp_path: Path) -> None:
    run_evaluation(_config(tmp_path), episode_fn=FakeEpisodes())
    fake = FakeEpisodes()
    with pytest.raises(ConfigError, match="resume is false"):
        run_evaluation(_config(tmp_path), episode_fn=fake, resume=False)
    with pytest.raises(FingerprintMismatch, match=r"changed: model\.sampling\.temperature"):
        run_evaluation(_config(tmp_path, model={"temperature": 0.5}), episode_fn=fake)
    assert fake.calls == []
    # execution changes resume fine; nothing left to do
    again = run_evaluation(_config(tmp_path, experiment={"concurrency": 9}, model={"timeout": 3}), episode_fn=fake)
    assert again.resumed and fake.calls == [] and len(RunStore(again.run_dir).read_invocations()) == 2
    # --overwrite archives and starts fresh
    fresh = run_evaluation(_config(tmp_path, model={"temperature": 0.5}), episode_fn=fake, overwrite=True)
    assert not fresh.resumed and len(fake.calls) == 5 and (fresh.run_dir / "superseded").is_dir()


def test_test_split_guard_writes_nothing_without_opt_in(tmp_path: Path) -> None:
    config = _config(tmp_path, tasks={"split": "test"})
    fake = FakeEpisodes()
    with pytest.raises(TestSplitGuardError, match="--allow-test-split") as info:
        run_evaluation(config, episode_fn=fake)
    assert info.value.code == "test-split-not-opted-in" and fake.calls == []
    assert not (tmp_path / "runs").exists()

    result = run_evaluation(config, episode_fn=fake, allow_test_split=True, opt_in_source="dagster-tag")
    manifest = json.loads(result.manifest_path.read_text(encoding="utf-8"))
    assert manifest["test_access"]["opted_in"] is True and manifest["test_access"]["source"] == "dagster-tag"
    ledger = [json.loads(line) for line in config.test_access_ledger_path.read_text(encoding="utf-8").splitlines()]
    assert len(ledger) == 1 and ledger[0]["split"]["task_ids_sha256"] and ledger[0]["skills"] == {"provider": "none"}
    # resuming the same directory is not a rerun
    run_evaluation(config, episode_fn=fake, allow_test_split=True)
    # the same checkpoint under another name is a rerun
    other = _config(tmp_path, tasks={"split": "test"}, experiment={"name": "exp2"})
    with pytest.raises(TestSplitGuardError, match="--allow-test-rerun") as info:
        run_evaluation(other, episode_fn=fake, allow_test_split=True)
    assert info.value.code == "test-split-rerun" and not other.run_dir.exists()
    run_evaluation(other, episode_fn=fake, allow_test_split=True, allow_test_rerun=True)


def test_missing_api_key_is_refused_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOPSIMRL_TEST_KEY", raising=False)
    config = _config(tmp_path, model={"api_key_env": "SHOPSIMRL_TEST_KEY"})
    with pytest.raises(ConfigError, match="SHOPSIMRL_TEST_KEY is not set") as info:
        run_evaluation(config, episode_fn=FakeEpisodes())
    assert info.value.code == "api-key-missing" and not (tmp_path / "runs").exists()


def test_cancellation_stops_cleanly(tmp_path: Path) -> None:
    config = _config(tmp_path, experiment={"concurrency": 5})
    fake = FakeEpisodes({"task-000019__sample-000": ["hang"], "task-000020__sample-000": ["hang"]}, delay=0.0)

    async def scenario() -> None:
        task = asyncio.create_task(arun_evaluation(config, episode_fn=fake))
        while len(fake.released) < 3:  # the three quick episodes are stored
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert sorted(fake.cancelled) == ["task-000019__sample-000", "task-000020__sample-000"]
    assert sorted(fake.released) == sorted(fake.calls)  # every in-flight episode cleaned up
    raw = (config.run_dir / "traces.jsonl").read_bytes()
    assert raw.endswith(b"\n") and len(raw.splitlines()) == 3
    assert json.loads((config.run_dir / "summary.json").read_text())["counts"]["completed"] == 3
    store = RunStore(config.run_dir)
    store.acquire_lock("after")  # the lock was released
    store.release_lock()
    resumed = run_evaluation(config, episode_fn=FakeEpisodes())
    assert resumed.counts.completed == 5 and len(_lines(config.run_dir)) == 5


def test_only_failed_reruns_failed_episodes_only(tmp_path: Path) -> None:
    config = _config(tmp_path, tasks={"split": "train"}, experiment={"max_episode_retries": 0})
    fake = FakeEpisodes({"task-000002__sample-000": ["fail", "ok"]})
    run_evaluation(config, episode_fn=fake, max_attempts=1)
    # a new task appears only through replanning; --only-failed touches the failed one alone
    store = RunStore(config.run_dir)
    lines = (config.run_dir / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    (config.run_dir / "traces.jsonl").write_text(
        "\n".join(line for line in lines if "task-000007" not in line) + "\n", encoding="utf-8"
    )
    fake.calls.clear()
    result = run_evaluation(config, episode_fn=fake, only_failed=True)
    assert fake.calls == ["task-000002__sample-000"]
    assert result.counts.completed == 3 and not store.index().is_complete("task-000007__sample-000")


def test_legacy_wave_vectors(tmp_path: Path) -> None:
    # Appendix A (store): success on the 3rd attempt leaves 3 lines; 3 failures give failed = 1, reward_mean null.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ok_third = _config(tmp_path / "a", tasks={"split": "train", "sample_size": 1})
    eid = f"task-{build_first(ok_third):06d}__sample-000"
    result = run_evaluation(ok_third, episode_fn=FakeEpisodes({eid: ["fail", "fail", "ok"]}))
    assert len(_lines(result.run_dir)) == 3 and result.counts.completed == 1 and result.exit_code == 0
    never = _config(tmp_path / "b", tasks={"split": "train", "sample_size": 1})
    result = run_evaluation(never, episode_fn=FakeEpisodes({eid: ["fail"] * 4}))
    assert len(_lines(result.run_dir)) == 3 and result.counts.failed == 1
    assert result.summary.primary.reward_mean is None and result.exit_code == 1


def build_first(config) -> int:
    from shopsimrl_core import build_plan

    return build_plan(config).jobs[0].task_id
