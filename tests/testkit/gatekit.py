"""Helpers for gate tests: a split file, a val config, a bare run, a draft, a candidate pool and a
deterministic masked runner."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core.runs.planning._plan import build_plan
from shopsimrl_core.skills._bank import build_draft, write_draft
from shopsimrl_core.skills._pool import build_candidate_pool
from testkit.tracegen import make_trace, write_traces

VAL = [19, 20, 30, 31, 47, 54, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73]


def write_split(path: Path, val=VAL) -> Path:
    doc = {"schema_version": "shopsimrl-persona-splits-v1", "version": "shopsimrl-persona-splits-v1",
           "splits": {"train": {"role": "train", "persona": True, "task_ids": [0, 2, 3]},
                      "val": {"role": "val", "persona": True, "task_ids": list(val)},
                      "test": {"role": "test", "persona": True, "task_ids": [1, 5]}}}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def write_config(path: Path, split_file: Path, name: str = "bare", output_dir: Path | None = None) -> Path:
    doc = {"experiment": {"name": name, "output_dir": str(output_dir or path.parent / "runs"), "seed": 20260830},
           "tasks": {"split_file": str(split_file), "split": "val"},
           "environment": {"base_url": "http://127.0.0.1:9", "persona": True},
           "model": {"name": "m", "base_url": "http://127.0.0.1:8/v1", "api_key_env": None, "checkpoint_id": "ck"}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _trace_for(plan, job, reward: float, skills: list[dict[str, Any]], skills_identity) -> dict[str, Any]:
    rec = make_trace(job.task_id, job.sample_id, split=job.split, outcome="success")
    rec["job"] = job.to_dict()
    env = dict(plan.environment_identity, environment_version="shopsimulator-paper-aligned-v8",
               observation_version="shopping-observation-v7")
    rec["provenance"] = {"model": plan.model_identity, "environment": env, "prompt": plan.semantic["prompt"],
                         "skills": skills_identity, "runtime": plan.semantic["runtime"]}
    rec["selected_skills"] = skills
    rec["final"]["reward"] = reward
    rec["final"]["reward_detail"].update({"r_strict": reward, "r_success": 1.0 if reward >= 1.0 else 0.0,
                                          "r_att": min(1.0, reward + 0.1)})
    return rec


def base_reward(task_id: int) -> float:
    return 0.25 + (task_id % 3) * 0.1


def make_bare_run(config_path: Path) -> Path:
    from shopsimrl_core.runs.config._config import load_config

    plan = build_plan(load_config(config_path))
    run = plan.run_dir
    run.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run / "manifest.json", {"schema_version": "shopsimrl-run-manifest-v1",
                                              "plan_fingerprint": plan.fingerprint, "plan": plan.semantic})
    write_traces(run / "traces.jsonl", [_trace_for(plan, j, base_reward(j.task_id), [], {"provider": "none"})
                                        for j in plan.jobs])
    return run


@dataclass
class FakeResult:
    summary: dict[str, Any]


class EffectRunner:
    """Plays every job of the config: reward = base + Σ effect[chunk] over the injected chunks."""

    def __init__(self, effects: dict[str, float], fail_first: int = 0):
        self.effects = effects
        self.fail_first = fail_first
        self.calls = 0
        self.episodes_run = 0

    def __call__(self, config, *, skill_provider, plan_blocks):
        self.calls += 1
        plan = build_plan(config)
        run = plan.run_dir
        run.mkdir(parents=True, exist_ok=True)
        done = set()
        traces = run / "traces.jsonl"
        if traces.exists():
            for line in traces.read_text().splitlines():
                r = json.loads(line)
                if r["status"] == "completed":
                    done.add(r["episode_id"])
        failed = 0
        with open(traces, "a") as fh:
            for job in plan.jobs:
                if job.episode_id in done:
                    continue
                if failed < self.fail_first:
                    failed += 1
                    rec = make_trace(job.task_id, job.sample_id, split="val", status="failed")
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    continue
                ctx = {"task_id": job.task_id, "sample_id": job.sample_id, "split": job.split}
                skills = skill_provider.select(ctx)
                reward = base_reward(job.task_id) + sum(self.effects.get(s["skill_id"], 0.0) for s in skills)
                fh.write(
                    json.dumps(_trace_for(plan, job, reward, skills, skill_provider.identity), ensure_ascii=False)
                    + "\n"
                )
                self.episodes_run += 1
        self.fail_first = 0
        completed = len(plan.jobs) - failed
        return FakeResult(
            summary={
                "counts": {
                    "requested": len(plan.jobs),
                    "completed": completed,
                    "failed": failed,
                    "coverage": completed / len(plan.jobs),
                }
            }
        )


def make_draft(tmp_path: Path, n: int = 3) -> tuple[Path, Path]:
    """Write a draft of *n* chunks (``chunk-000000000000`` …, budget 2) under ``tmp_path/draft``."""
    cands = {
        "candidates_sha256": "c",
        "candidates": [
            {
                "status": "accepted",
                "candidate_id": f"chunk-{i:012d}",
                "title": f"T{i}",
                "workflow_stage": "s",
                "applicable_when": "w",
                "procedure": ["p"],
                "verification": "v",
                "common_failure": "f",
                "evidence_cluster_ids": [f"c{i}"],
                "content": f"### T{i}\n\nbody {i}",
            }
            for i in range(n)
        ],
    }
    draft, bank = build_draft(cands, active_skill_budget=2)
    return write_draft(draft, bank, tmp_path / "draft")


def gate_setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A split file, a bare val config, its bare run and a 3-chunk draft: ``(config, bare run, draft)``."""
    split = write_split(tmp_path / "splits.json")
    bare_cfg = write_config(tmp_path / "bare.yaml", split, name="bare")
    bare_run = make_bare_run(bare_cfg)
    draft_path, _ = make_draft(tmp_path)
    return bare_cfg, bare_run, draft_path


ACTIVE = {
    "schema_version": "shopsimrl-skillbank-v1",
    "bank_version": "b0",
    "skills": [
        {
            "skill_id": "chunk-a",
            "version": "active-1",
            "content": "### A\n\nold a",
            "metadata": {"source_label": "outcome:wrong_option"},
        },
        {
            "skill_id": "chunk-b",
            "version": "active-1",
            "content": "### B\n\nold b",
            "metadata": {"source_label": "behaviour:loop"},
        },
        {"skill_id": "chunk-off", "enabled": False, "content": "### off", "metadata": {}},
    ],
}
CANDS = {
    "candidates": [
        {
            "status": "accepted",
            "candidate_id": "x1",
            "source_label": "outcome:wrong_option",
            "content": "### A2\n\nnew a",
        },
        {"status": "rejected", "candidate_id": "x2", "source_label": "outcome:over_budget", "content": "leak"},
        {
            "status": "accepted",
            "candidate_id": "x3",
            "source_label": "outcome:over_budget",
            "content": "### C\n\nbudget",
        },
        {"status": "accepted", "candidate_id": "x4", "source_label": "behaviour:loop", "content": "### B\n\nold b"},
    ]
}


def online_pool() -> dict[str, Any]:
    """The candidate pool of ACTIVE and CANDS: ``cand-001`` rewrites ``chunk-a``, ``cand-002`` is an ADD."""
    return build_candidate_pool(ACTIVE, CANDS, round_id="round-003", proposal_checkpoint="ck-prev")
