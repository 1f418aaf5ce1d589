"""The shortcuts that make resuming a finished run of a million episodes cheap (issue 33 item 15) change no result.

Speed is measured by benchmarks/run_index.py (docs/benchmarks.md); these tests hold each shortcut to the
slow path it replaces:

- the plan's fingerprint with the job list encoded by orjson is ``fingerprint(semantic)``, and
  ``same_plan`` is ``canonical_json(a) == canonical_json(b)``, on plans where the two encoders could
  differ (non-ASCII, escapes, floats, booleans, big integers, NaN);
- ``plan_jobs`` (episode_seed inlined) gives every job the seed ``episode_seed`` gives it;
- ``TraceIndex.planned`` answers what ``attempts``, ``is_complete`` and ``entries[id].reward`` answer;
- a resume that attempts nothing returns the stored summary, file untouched, when its witness matches,
  and computes it again when anything it was computed from changed;
- a finished run told by the planned-ids cache plays nothing and reports what the per-id pass reports.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from testkit.core_runkit import FakeEpisodes, small_splits, write_config

from shopsimrl_core import RunStore, load_config, run_evaluation
from shopsimrl_core._hashing import canonical_json, fingerprint
from shopsimrl_core.analysis import _summary_witness
from shopsimrl_core.runs.planning import _plan_hash
from shopsimrl_core.runs.planning._jobs import EpisodeJob, episode_seed, plan_jobs
from shopsimrl_core.runs.planning._plan_hash import plan_fingerprint, same_plan
from shopsimrl_core.runs.storage import _small_index


def _semantic(jobs: list[EpisodeJob], **extra: object) -> dict:
    return {"experiment": "é \"x\"", "model": {"temperature": 0.7}, "jobs": [job.to_dict() for job in jobs], **extra}


@pytest.mark.parametrize(
    "split",
    ["val", "验证", "tab\there", 'quote"and\\slash', "\x01ctl", "\u2028line", "\x7f", "emoji 🛒"],
)
def test_the_fast_plan_fingerprint_is_the_canonical_one(split: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_plan_hash, "_FAST_MIN_JOBS", 1)
    jobs = plan_jobs(list(range(40)), split=split, experiment_seed=7, repeats=3)
    semantic = _semantic(jobs)
    assert plan_fingerprint(semantic, jobs) == fingerprint(semantic)


def test_the_fast_fingerprint_falls_back_where_orjson_would_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_plan_hash, "_FAST_MIN_JOBS", 1)
    huge = [EpisodeJob(2**70, 0, 1, "val"), EpisodeJob(1, 0, 2, "val")]  # beyond 64 bits: orjson refuses
    assert plan_fingerprint(_semantic(huge), huge) == fingerprint(_semantic(huge))
    flagged = [EpisodeJob(True, 0, 1, "val"), EpisodeJob(1, 0, 2, "val")]  # type: ignore[arg-type]
    assert plan_fingerprint(_semantic(flagged), flagged) == fingerprint(_semantic(flagged))
    lone = [EpisodeJob(1, 0, 1, "\ud800")]
    with pytest.raises(UnicodeEncodeError):  # what fingerprint itself does with a lone surrogate
        plan_fingerprint(_semantic(lone), lone)


def test_same_plan_is_equality_of_canonical_json() -> None:
    jobs = plan_jobs(list(range(30)), split="val", experiment_seed=7, repeats=2)
    plan = _semantic(jobs)
    stored = json.loads(json.dumps(plan))
    assert same_plan(stored, plan)
    variants = []
    for change in (1.0, True, "1", None, math.nan, 2**70):
        edited = json.loads(json.dumps(plan))
        edited["jobs"][3]["seed"] = change  # equal to an int in Python for 1.0 and True, not in JSON
        variants.append(edited)
    edited = json.loads(json.dumps(plan))
    edited["model"]["temperature"] = 0.70000001
    variants.append(edited)
    edited = json.loads(json.dumps(plan))
    del edited["jobs"]
    variants.append(edited)
    for variant in variants:
        try:
            expected = canonical_json(variant) == canonical_json(plan)
        except ValueError:  # NaN: canonical JSON refuses it, so it is no copy of the plan
            expected = False
        assert same_plan(variant, plan) is expected
        assert same_plan(plan, variant) is expected
    assert not same_plan(variants[0], plan)  # 1.0 where the plan has an int: an edit


def test_plan_jobs_gives_each_job_its_episode_seed() -> None:
    jobs = plan_jobs([5, 17, 123456, 1234567], split="val", experiment_seed=20260830, repeats=4, sample_size=3)
    assert len(jobs) == 12
    assert all(job.seed == episode_seed(20260830, job.task_id, job.sample_id) for job in jobs)


def _config(tmp_path: Path, **overrides: dict):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if not (tmp_path / "splits.json").exists():
        small_splits(tmp_path)
    return load_config(write_config(tmp_path, overrides=overrides))


def test_planned_answers_what_the_per_id_lookups_answer(tmp_path: Path) -> None:
    fake = FakeEpisodes({"task-000020__sample-000": ["fail", "fail"], "task-000031__sample-000": ["raise"]})
    config = _config(tmp_path, experiment={"max_episode_retries": 0})
    run_evaluation(config, episode_fn=fake)
    index = RunStore(config.run_dir).index(persist=False)
    ids = [*sorted(index.entries), "task-999999__sample-000"]
    lines, complete, rewards = index.planned(ids)
    assert lines == [index.attempts(eid) for eid in ids]
    assert complete == [index.is_complete(eid) for eid in ids]
    assert rewards == [index.entries[eid].reward if index.is_complete(eid) else None for eid in ids]
    assert False in complete and 0 in lines  # both branches: a failed episode, an id without lines


def test_a_resume_that_attempts_nothing_keeps_a_summary_its_witness_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_summary_witness, "WITNESS_MIN_EPISODES", 1)
    monkeypatch.setattr(_small_index, "SMALL_LINES", 0)  # the full index, as a run of 50,000+ episodes has
    config = _config(tmp_path)
    first = run_evaluation(config, episode_fn=FakeEpisodes())
    witness = first.run_dir / _summary_witness.WITNESS_NAME
    assert witness.exists()
    written = first.summary_path.read_bytes()

    again = run_evaluation(config, episode_fn=FakeEpisodes())
    assert again.attempts == 0 and first.summary_path.read_bytes() == written  # not rewritten: same created_at
    assert again.summary.to_json() == first.summary.to_json()

    # anything the summary came from changes: it is computed again
    first.summary_path.write_bytes(written.replace(b'"completed": 5', b'"completed": 4'))
    fixed = run_evaluation(config, episode_fn=FakeEpisodes())
    assert fixed.counts.completed == 5 and fixed.summary.created_at != first.summary.created_at
    assert json.loads(first.summary_path.read_text(encoding="utf-8")) == fixed.summary.to_json()
    rewritten = first.summary_path.read_bytes()
    witness.write_text(witness.read_text(encoding="utf-8").replace('"requested"', '"requested_"'), encoding="utf-8")
    assert run_evaluation(config, episode_fn=FakeEpisodes()).summary.created_at != fixed.summary.created_at
    assert first.summary_path.read_bytes() != rewritten


def test_small_runs_write_no_witness(tmp_path: Path) -> None:
    result = run_evaluation(_config(tmp_path), episode_fn=FakeEpisodes())
    assert not (result.run_dir / _summary_witness.WITNESS_NAME).exists()
    before = result.summary.created_at
    assert run_evaluation(_config(tmp_path), episode_fn=FakeEpisodes()).summary.created_at != before


def test_a_finished_run_told_by_the_planned_ids_plays_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shopsimrl_core.analysis import _summary
    from shopsimrl_core.runs.execution import _evaluator

    monkeypatch.setattr(_summary, "_PLANNED_CACHE_MIN_BYTES", 1)  # the cache path of a million-job manifest
    monkeypatch.setattr(_summary, "_VECTOR_MIN_JOBS", 1)
    monkeypatch.setattr(_small_index, "SMALL_LINES", 0)
    config = _config(tmp_path, tasks={"repeats": 2})
    first = run_evaluation(config, episode_fn=FakeEpisodes())
    assert (first.run_dir / _summary.PLANNED_CACHE_NAME).exists()
    told = []
    finished = _evaluator._finished
    monkeypatch.setattr(_evaluator, "_finished", lambda store, index: told.append(finished(store, index)) or told[-1])
    events: list = []
    fake = FakeEpisodes()
    again = run_evaluation(config, episode_fn=fake, progress=events.append)
    assert told == [True] and fake.calls == [] and again.attempts == 0
    assert again.summary.to_json() | {"created_at": None} == first.summary.to_json() | {"created_at": None}
    assert events[-1].done == 10 and events[-1].reward_mean == pytest.approx(first.summary.primary.reward_mean)

    # one episode failed: not finished, and the per-id pass retries exactly that one
    config = _config(tmp_path / "other", tasks={"repeats": 2}, experiment={"max_episode_retries": 0})
    run_evaluation(config, episode_fn=FakeEpisodes({"task-000030__sample-001": ["fail"]}))
    told.clear()
    fake = FakeEpisodes()
    retried = run_evaluation(config, episode_fn=fake)
    assert told == [False] and fake.calls == ["task-000030__sample-001"] and retried.counts.completed == 10
