"""Builders shared by the run/plan/summary tests: synthetic trace records, config files, fake episodes.

Holds no tests. The fake episode function stands in for ``run_episode`` in evaluator unit tests;
the integration test runs the real one against the real sandbox.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from shopsimrl_core.runs.planning._jobs import EpisodeJob, episode_id

REPO = Path(__file__).resolve().parents[2]
PERSONA_SPLITS = REPO / "configs" / "persona_splits.v1.json"


def step(*, protocol_error: bool = False, policy_failure: bool = False, valid: bool | None = True,
         usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """One step record: a protocol error, a policy failure, or an action whose feedback says *valid*."""
    record: dict[str, Any] = {"step_index": 1, "observation": "页面", "tools": [],
                              "model": {"usage": usage if usage is not None else {}}}
    if protocol_error:
        record["model"]["protocol_error"] = {"code": "mixed_content", "message": "x"}
        record.update(
            protocol_error={"code": "mixed_content", "message": "x"},
            protocol_feedback={},
            action=None,
            environment=None,
        )
    elif policy_failure:
        record["policy_failure"] = {"code": "generation_length", "message": "x"}
        record.update(action=None, environment=None)
    else:
        feedback = (
            {}
            if valid is None
            else {
                "action": "click[x]",
                "valid": valid,
                "reason": "executed" if valid else "unavailable_action",
                "message": "",
            }
        )
        record.update(action="click[x]", environment={"done": False, "action_feedback": feedback})
    return record


def record(
    task_id: int,
    sample_id: int = 0,
    *,
    status: str = "completed",
    reward: float = 1.0,
    reason: str = "purchase",
    steps: list[dict[str, Any]] | None = None,
    split: str = "val",
    duration_ms: float | None = 1000.0,
    error_type: str | None = "ModelRequestError",
    category: str | None = None,
    r_success: int | None = None,
    components: dict[str, float] | None = None,
) -> dict[str, Any]:
    """A schema-valid v4 record (only the fields the store and the summary read are meaningful)."""
    eid = episode_id(task_id, sample_id)
    out: dict[str, Any] = {
        "schema_version": "shopsimrl-episode-v4",
        "episode_id": eid,
        "status": status,
        "job": {"task_id": task_id, "sample_id": sample_id, "seed": 1, "split": split},
        "provenance": {},
        "started_at": "2026-10-02T08:15:03.120000+00:00",
        "ended_at": "2026-10-02T08:15:04.120000+00:00",
        "duration_ms": duration_ms,
        "reset": None,
        "selected_skills": [],
        "conversation": [],
        "steps": steps if steps is not None else [step()],
        "final": None,
        "error": None,
    }
    if status == "completed":
        success = (1 if reward >= 1.0 else 0) if r_success is None else r_success
        detail = {
            "reward_version": "shopsimulator-paper-reward-v2",
            "termination_reason": reason,
            "r_type": 1.0,
            "r_att": reward,
            "r_option": reward,
            "r_price": 1.0,
            "r_loose": reward,
            "r_strict": reward,
            "r_success": success,
            "category_match": True,
        }
        if components:
            detail.update(components)
        final: dict[str, Any] = {
            "done": True,
            "over": True,
            "reward": reward,
            "termination_reason": reason,
            "reward_detail": detail,
            "purchase": {},
            "goal": {},
        }
        if category is not None:
            final["goal"] = {"category": category}
        out["final"] = final
    else:
        out["error"] = (
            {"stage": "model_step_1", "type": error_type, "message": "boom", "traceback": ""} if error_type else {}
        )
    return out


def write_split(path: Path, splits: dict[str, dict[str, Any]], version: str = "test-splits-v1") -> Path:
    """Write a split file."""
    path.write_text(
        json.dumps({"schema_version": "shopsimrl-persona-splits-v1", "version": version, "splits": splits}),
        encoding="utf-8",
    )
    return path


def write_config(
    folder: Path,
    *,
    name: str = "exp",
    split_file: str | Path = "splits.json",
    split: str = "val",
    overrides: dict[str, dict[str, Any]] | None = None,
    filename: str = "eval.yaml",
) -> Path:
    """Write an evaluation YAML in *folder* (model without auth, output in ``folder/runs``)."""
    data: dict[str, Any] = {
        "experiment": {"name": name, "output_dir": "runs", "seed": 20260830, "concurrency": 2},
        "tasks": {"split_file": str(split_file), "split": split},
        "environment": {"base_url": "http://127.0.0.1:9", "persona": None},
        "model": {"name": "served", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None},
    }
    for section, values in (overrides or {}).items():
        if values is None:
            data.pop(section, None)
        elif not isinstance(values, dict):
            data[section] = values
        else:
            data.setdefault(section, {}).update(values)
    path = folder / filename
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def small_splits(folder: Path) -> Path:
    """A small split file with val (5 tasks), test (3 tasks, role test) and a legacy range."""
    return write_split(
        folder / "splits.json",
        {
            "train": {"role": "train", "persona": True, "task_ids": [0, 2, 3, 7]},
            "val": {"role": "val", "persona": True, "task_ids": [19, 20, 30, 31, 47]},
            "test": {"role": "test", "persona": True, "task_ids": [1, 5, 8]},
            "legacy_range": {"start": 100, "end": 103, "persona": None},
        },
    )


def modules_after_one_episode_run(folder: Path) -> set[str]:
    """The modules a fresh interpreter has imported after a one-episode run (``FakeEpisodes``) under *folder*.

    Start-up cost is measured by the benchmarks; tests pin what a run leaves unimported with this.
    """
    small_splits(folder)
    path = write_config(folder, overrides={"tasks": {"sample_size": 1}})
    probe = (
        "import json, sys\n"
        "from testkit.core_runkit import FakeEpisodes\n"
        "from shopsimrl_core import load_config, run_evaluation\n"
        f"result = run_evaluation(load_config({str(path)!r}), episode_fn=FakeEpisodes())\n"
        "assert result.counts.completed == 1, result.counts\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    tests = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", probe], cwd=tests, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


class FakeEpisodes:
    """An ``episode_fn`` double: scripted outcomes per episode id, with in-flight accounting.

    ``plan[eid]`` is a list of outcomes consumed per attempt: ``"ok"``, ``"fail"`` (failed record),
    ``"raise"`` (raises, i.e. an evaluator-boundary failure) or ``"hang"`` (waits until cancelled).
    Missing entries mean ``"ok"``.
    """

    def __init__(self, plan: dict[str, list[str]] | None = None, delay: float = 0.0) -> None:
        self.plan = plan or {}
        self.delay = delay
        self.calls: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.cancelled: list[str] = []
        self.released: list[str] = []

    async def __call__(
        self, job: EpisodeJob, *, model: Any, env: Any, prompt: Any, skills: Any, settings: Any
    ) -> dict[str, Any]:
        eid = job.episode_id
        self.calls.append(eid)
        outcomes = self.plan.get(eid, [])
        outcome = outcomes.pop(0) if outcomes else "ok"
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if outcome == "hang":
                await asyncio.sleep(3600)
            await asyncio.sleep(self.delay)
            if outcome == "raise":
                raise RuntimeError("runtime exploded")
            rec = record(
                job.task_id,
                job.sample_id,
                split=job.split,
                status="completed" if outcome == "ok" else "failed",
                reward=1.0 if job.task_id % 2 else 0.5,
            )
            rec["job"] = job.to_dict()
            return rec
        except asyncio.CancelledError:
            self.cancelled.append(eid)
            raise
        finally:
            self.released.append(eid)  # stands for the lease release every episode does
            self.in_flight -= 1


def manifest(plan_fingerprint: str = "fp", *, plan: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A schema-valid ``shopsimrl-run-manifest-v1`` with an empty plan (``plan`` keys override it)."""
    base_plan: dict[str, Any] = {
        "pipeline_version": "shopsimrl-v0.4",
        "experiment": "exp",
        "model_id": "m",
        "model": {},
        "task_split": {},
        "jobs": [],
        "environment": {},
        "runtime": {},
        "prompt": {},
        "skills": {"provider": "none"},
    }
    return {
        "schema_version": "shopsimrl-run-manifest-v1",
        "created_at": "2026-10-02T08:15:03.120000+00:00",
        "plan_fingerprint": plan_fingerprint,
        "plan": {**base_plan, **(plan or {})},
        **top,
    }
